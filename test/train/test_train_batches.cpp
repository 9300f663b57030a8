// Tests of the trainer's training batches (llmc/train/train_batches.h): the BOS source's rows against an
// independent dealing of the shards (read_indexed_shard + deal_step + pack_sequence, steps of S sequences
// walked through the shards by hand), for several splits of S into ranks x micro-steps x B; its position
// saved at a step boundary and continued on another split of the same S, refused for another S or T; the
// window source as the DataLoader it wraps; and --train-loader's choice and its errors.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/data/document_packing.h"
#include "llmc/data/shards.h"
#include "llmc/train/train_batches.h"
#include "test/support/test_helpers.h"

namespace {

using llmc::BosBatches;
using llmc::TrainBatchesConfig;
using llmc::TrainLoaderKind;
using llmc::test::expect_error;

constexpr int64_t kT = 32;
constexpr int kShards = 3;

// One row of a micro-batch.
struct Row {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Row& other) const { return inputs == other.inputs && targets == other.targets; }
};

class TrainBatchesTest : public llmc::test::TempDirTest {
 protected:
  TrainBatchesTest() : TempDirTest("llmc_test_train_batches") {}

  // Shards of random documents of 1..90 tokens (some beyond T+1, so that documents span sequences), each
  // starting with BOS, after a few tokens of a cut document (skipped by the loader).
  void SetUp() override {
    TempDirTest::SetUp();
    std::mt19937 rng(14);
    std::uniform_int_distribution<int> length(1, 90), token(0, 50000);
    for (int s = 0; s < kShards; ++s) {
      std::vector<uint16_t> tokens = {11, 12};
      for (int d = 0; d < 20; ++d) {  // ~900 tokens: about 4 steps of 6 x 33
        tokens.push_back(llmc::kBosToken);
        for (int i = length(rng); i > 1; --i) tokens.push_back(static_cast<uint16_t>(token(rng)));
      }
      char name[64];
      std::snprintf(name, sizeof name, "train_%06d.bin", s);
      llmc::write_shard(path(name), tokens);
    }
  }

  TrainBatchesConfig config(int world, int rank, int accum, int B) const {
    TrainBatchesConfig c;
    c.pattern = path("train_*.bin");
    c.batch_size = B;
    c.seq_len = kT;
    c.rank = rank;
    c.world_size = world;
    c.grad_accum = accum;
    return c;
  }

  // The oracle: `steps` steps of S sequences each, dealt by hand from the first shard on; a step that does
  // not fit the rest of a shard is dealt from the start of the next (cyclically).
  std::vector<std::vector<Row>> dealt_steps(int sequences, int steps) const {
    std::vector<llmc::IndexedShard> shards;
    for (int s = 0; s < kShards; ++s) {
      char name[64];
      std::snprintf(name, sizeof name, "train_%06d.bin", s);
      shards.push_back(llmc::read_indexed_shard(path(name), 50257));
    }
    std::vector<std::vector<Row>> out;
    size_t shard = 0;
    int64_t document = 0;
    llmc::DealtStep step;
    llmc::PackedSequence packed;
    while (static_cast<int>(out.size()) < steps) {
      if (!llmc::deal_step(shards[shard], document, kT, 2048, sequences, &step)) {
        shard = (shard + 1) % shards.size();
        document = 0;
        continue;
      }
      std::vector<Row> rows;
      for (const auto& pieces : step.sequences) {
        llmc::pack_sequence(shards[shard], pieces, kT, llmc::default_cu_seqlens_length(kT), "oracle", &packed);
        rows.push_back(Row{packed.inputs, packed.targets});
      }
      out.push_back(rows);
      document = step.next_document;
    }
    return out;
  }

  // Steps [first, first + count) as rank r of `batches` sees them: for each micro-step, B rows.
  static std::vector<std::vector<Row>> read_steps(std::vector<std::unique_ptr<BosBatches>>& ranks, int accum, int B,
                                                  int count) {
    std::vector<std::vector<Row>> out;
    std::vector<int32_t> inputs(static_cast<size_t>(B * kT)), targets(inputs.size());
    for (int s = 0; s < count; ++s) {
      // Slot (k * B + b) * world + r of the step: rank r's micro-step k, row b.
      std::vector<Row> step(ranks.size() * static_cast<size_t>(accum * B));
      for (int k = 0; k < accum; ++k)
        for (size_t r = 0; r < ranks.size(); ++r) {
          ranks[r]->next_batch(inputs.data(), targets.data());
          for (int b = 0; b < B; ++b) {
            const auto row = static_cast<size_t>(b * kT);
            step[static_cast<size_t>(k * B + b) * ranks.size() + r] =
                Row{{inputs.begin() + row, inputs.begin() + row + kT}, {targets.begin() + row, targets.begin() + row + kT}};
          }
        }
      out.push_back(step);
    }
    return out;
  }

  std::vector<std::unique_ptr<BosBatches>> ranks(int world, int accum, int B) const {
    std::vector<std::unique_ptr<BosBatches>> out;
    for (int r = 0; r < world; ++r) out.push_back(std::make_unique<BosBatches>(config(world, r, accum, B)));
    return out;
  }
};

struct Split {
  int world, accum, B;
};
const std::vector<Split> kSplitsOfSix = {{1, 1, 6}, {1, 6, 1}, {1, 2, 3}, {2, 3, 1}, {2, 1, 3}, {3, 2, 1}};

TEST_F(TrainBatchesTest, BosRowsAreTheDealtSequencesForEverySplitOfAStep) {
  const int steps = 40;  // about 4 steps per shard: several shard crossings and epochs
  const std::vector<std::vector<Row>> expected = dealt_steps(6, steps);
  for (const Split& split : kSplitsOfSix) {
    SCOPED_TRACE(std::to_string(split.world) + " ranks x " + std::to_string(split.accum) + " micro-steps x B=" +
                 std::to_string(split.B));
    auto batches = ranks(split.world, split.accum, split.B);
    EXPECT_EQ(batches[0]->sequences_per_step(), 6);
    const auto got = read_steps(batches, split.accum, split.B, steps);
    for (int s = 0; s < steps; ++s) ASSERT_TRUE(got[s] == expected[s]) << "step " << s;
    EXPECT_GE(batches[0]->position().epoch, 2) << "the steps should have wrapped around the shards";
  }
  // Every row is a sequence of the shards: starts with BOS, targets shifted by one.
  for (const Row& row : expected[0]) {
    EXPECT_EQ(row.inputs[0], llmc::kBosToken);
    EXPECT_TRUE(std::equal(row.inputs.begin() + 1, row.inputs.end(), row.targets.begin()));
  }
}

// A state as train_gpt2 saves it after `step` steps of a run split as `split`.
llmc::TrainStateHeader saved_after(std::vector<std::unique_ptr<BosBatches>>& batches, const Split& split) {
  llmc::TrainStateHeader state;
  state.world_size = split.world;
  state.grad_accum = split.accum;
  state.batch_size = split.B;
  state.seq_len = kT;
  batches[0]->save_position(state);
  return state;
}

TEST_F(TrainBatchesTest, BosPositionContinuesOnAnotherSplitOfTheSameStep) {
  const std::vector<std::vector<Row>> expected = dealt_steps(6, 20);
  const Split writer{1, 2, 3};
  auto batches = ranks(writer.world, writer.accum, writer.B);
  read_steps(batches, writer.accum, writer.B, 9);
  const llmc::TrainStateHeader written = saved_after(batches, writer);
  EXPECT_EQ(written.train_loader, TrainLoaderKind::kBos);
  EXPECT_EQ(written.bos_position, batches[0]->position());
  EXPECT_EQ(written.bos_position.micro_step, 0);
  for (const Split& split : kSplitsOfSix) {
    SCOPED_TRACE(std::to_string(split.world) + " x " + std::to_string(split.accum) + " x " + std::to_string(split.B));
    auto resumed = ranks(split.world, split.accum, split.B);
    for (auto& rank : resumed) rank->resume(written, "ckpt_state");
    const auto got = read_steps(resumed, split.accum, split.B, 11);
    for (int s = 0; s < 11; ++s) ASSERT_TRUE(got[s] == expected[9 + s]) << "step " << 9 + s;
  }
}

TEST_F(TrainBatchesTest, BosPositionOfAnotherStepSizeOrLengthIsRefused) {
  auto batches = ranks(1, 2, 3);
  read_steps(batches, 2, 3, 2);
  llmc::TrainStateHeader written = saved_after(batches, Split{1, 2, 3});
  BosBatches smaller(config(2, 0, 1, 1));
  expect_error([&] { smaller.resume(written, "ckpt_state"); },
               {"ckpt_state: its BOS loader position counts steps of 6 (1 ranks x 2 micro-steps x B=3) sequences of "
                "T=32, this run deals 2 (2 ranks x 1 micro-steps x B=1) of T=32: resume with the same tokens per "
                "step (--total-batch-tokens) and --seq-len"});
  written.seq_len = 64;
  BosBatches same_split(config(1, 0, 2, 3));
  expect_error([&] { same_split.resume(written, "ckpt_state"); }, {"ckpt_state: ", "of T=64", "of T=32"});
}

TEST_F(TrainBatchesTest, AShardWithoutDocumentsIsNamed) {
  llmc::write_shard(path("plain_000000.bin"), std::vector<uint16_t>(500, 7));
  TrainBatchesConfig c = config(1, 0, 1, 1);
  c.pattern = path("plain_*.bin");
  expect_error([&] { BosBatches batches(c); }, {path("plain_000000.bin") + ": no document start (token 50256)"});
}

TEST_F(TrainBatchesTest, WindowBatchesAreTheDataLoadersAndResumeFromItsPosition) {
  TrainBatchesConfig c = config(1, 0, 1, 2);
  llmc::WindowBatches windows(c);
  llmc::DataLoaderConfig loader_config;
  loader_config.pattern = c.pattern;
  loader_config.batch_size = 2;
  loader_config.seq_len = kT;
  llmc::DataLoader loader(loader_config);
  std::vector<int32_t> a(2 * kT), b(2 * kT), at(2 * kT), bt(2 * kT);
  for (int i = 0; i < 5; ++i) {
    windows.next_batch(a.data(), at.data());
    loader.next_batch(b.data(), bt.data());
    ASSERT_EQ(a, b);
    ASSERT_EQ(at, bt);
  }
  llmc::TrainStateHeader written;
  written.batch_size = 2;
  written.seq_len = kT;
  windows.save_position(written);
  EXPECT_EQ(written.train_loader, TrainLoaderKind::kWindow);
  EXPECT_EQ(written.train_position, loader.position());
  llmc::WindowBatches resumed(c);
  resumed.resume(written, "ckpt_state");
  resumed.next_batch(a.data(), at.data());
  loader.next_batch(b.data(), bt.data());
  EXPECT_EQ(a, b);
}

// std::invalid_argument's message, or "" when `call` does not throw it.
template <typename Call>
std::string invalid_argument_of(Call call) {
  try {
    call();
  } catch (const std::invalid_argument& error) {
    return error.what();
  }
  return "";
}

TEST(ChooseTrainLoader, AutoIsBosForSpeedrunModelsWhoseVocabularyHoldsBos) {
  using llmc::choose_train_loader;
  using llmc::TrainLoaderChoice;
  constexpr bool kDocuments = true, kWindows = false;  // whether the family trains on documents
  EXPECT_EQ(choose_train_loader(TrainLoaderChoice::kAuto, kDocuments, 50304, false), TrainLoaderKind::kBos);
  EXPECT_EQ(choose_train_loader(TrainLoaderChoice::kAuto, kDocuments, 96, false), TrainLoaderKind::kWindow);
  EXPECT_EQ(choose_train_loader(TrainLoaderChoice::kAuto, kWindows, 50257, false), TrainLoaderKind::kWindow);
  EXPECT_EQ(choose_train_loader(TrainLoaderChoice::kAuto, kWindows, 50257, true), TrainLoaderKind::kWindow);
  EXPECT_EQ(choose_train_loader(TrainLoaderChoice::kBos, kWindows, 50257, false), TrainLoaderKind::kBos);
  EXPECT_EQ(choose_train_loader(TrainLoaderChoice::kWindow, kDocuments, 50304, true), TrainLoaderKind::kWindow);
  EXPECT_EQ(invalid_argument_of([] { choose_train_loader(TrainLoaderChoice::kBos, kDocuments, 96, false); }),
            "--train-loader bos: the model's vocabulary (96 tokens) has no BOS token 50256 to find documents by; "
            "use --train-loader window");
  EXPECT_EQ(invalid_argument_of([] { choose_train_loader(TrainLoaderChoice::kBos, kWindows, 50257, true); }),
            "--shuffle cannot be used with --train-loader bos: the BOS loader walks the shards in order; drop "
            "--shuffle or pass --train-loader window");
  EXPECT_EQ(invalid_argument_of([] { choose_train_loader(TrainLoaderChoice::kAuto, kDocuments, 50304, true); }),
            "--shuffle cannot be used with --train-loader bos (auto's choice for a speedrun model): the BOS loader "
            "walks the shards in order; drop --shuffle or pass --train-loader window");
  // A name outside the table is refused by --train-loader's parse (the options' tests); the table has these.
  EXPECT_FALSE(llmc::value_named("documents", llmc::kTrainLoaderChoiceNames).has_value());
  EXPECT_EQ(llmc::value_named("bos", llmc::kTrainLoaderChoiceNames), TrainLoaderChoice::kBos);
}

}  // namespace
