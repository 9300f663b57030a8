// Tests of the speedrun's loaders (llmc/data/document_packing.h, bos_loader.h, packed_val_loader.h) on
// synthetic shards of numbered documents: the dealing rule on a hand-worked example, every invariant of
// the packed sequences over many steps and shard crossings, resume from a saved position (also mid-step),
// independence from the GPU count (fewer ranks with accumulation see the same sequences), the
// validation chunks, and a one-line error for each bad input. The dealing rule is also checked
// against an independent Python implementation on real text (check_bos_loader.py).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/data/bos_loader.h"
#include "llmc/data/document_packing.h"
#include "llmc/data/packed_val_loader.h"
#include "llmc/data/shards.h"
#include "test/support/test_helpers.h"

namespace {

using llmc::BosLoader;
using llmc::BosLoaderConfig;
using llmc::BosLoaderPosition;
using llmc::kBosToken;
using llmc::PackedSequence;
using llmc::test::expect_error;

bool same(const PackedSequence& a, const PackedSequence& b) {
  return a.inputs == b.inputs && a.targets == b.targets && a.cu_seqlens == b.cu_seqlens &&
         a.num_documents == b.num_documents;
}

// Documents of the given lengths: BOS, then tokens that name the document and the offset.
std::vector<uint16_t> documents_of(const std::vector<int>& lengths, int first_id) {
  std::vector<uint16_t> tokens;
  for (size_t d = 0; d < lengths.size(); ++d) {
    tokens.push_back(kBosToken);
    for (int i = 1; i < lengths[d]; ++i) tokens.push_back(static_cast<uint16_t>(((first_id + d) * 131 + i) % 50000));
  }
  return tokens;
}

class BosLoaderTest : public llmc::test::TempDirTest {
 protected:
  BosLoaderTest() : TempDirTest("llmc_test_bos") {}

  // Shards of random documents (lengths 1..max_length), named train_000000.bin, ...
  std::vector<std::vector<int>> make_shards(int shards, int documents, int max_length, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> length(1, max_length);
    std::vector<std::vector<int>> all;
    for (int s = 0; s < shards; ++s) {
      std::vector<int> lengths(static_cast<size_t>(documents));
      for (int& l : lengths) l = length(rng);
      std::vector<uint16_t> tokens = {7, 8, 9};  // a tail of the previous shard's last document: skipped
      const std::vector<uint16_t> body = documents_of(lengths, s * documents);
      tokens.insert(tokens.end(), body.begin(), body.end());
      write(s, tokens);
      all.push_back(lengths);
    }
    return all;
  }
  void write(int index, const std::vector<uint16_t>& tokens) {
    char name[64];
    std::snprintf(name, sizeof name, "train_%06d.bin", index);
    llmc::write_shard(path(name), tokens);
  }
  BosLoaderConfig config(int64_t T, int world, int rank, int accum) const {
    BosLoaderConfig c;
    c.pattern = path("train_*.bin");
    c.seq_len = T;
    c.max_document_tokens = 40;
    c.world_size = world;
    c.rank = rank;
    c.grad_accum = accum;
    c.cu_seqlens_length = 64;
    return c;
  }
  // The sequences of `steps` steps in slot order (step-major, then micro-step * world + rank),
  // read through `world` loaders with `accum` micro-steps each.
  std::vector<PackedSequence> slots(int64_t T, int world, int accum, int steps) {
    std::vector<std::unique_ptr<BosLoader>> loaders;
    for (int r = 0; r < world; ++r) loaders.push_back(std::make_unique<BosLoader>(config(T, world, r, accum)));
    std::vector<PackedSequence> out;
    for (int s = 0; s < steps; ++s)
      for (int k = 0; k < accum; ++k)
        for (int r = 0; r < world; ++r) {
          out.emplace_back();
          loaders[static_cast<size_t>(r)]->next(&out.back());
        }
    return out;
  }
};

TEST(DocumentPacking, DealsAHandWorkedExample) {
  llmc::IndexedShard shard;
  shard.path = "example";
  shard.tokens = documents_of({5, 3, 10, 2, 7}, 0);
  shard.document_starts = {0, 5, 8, 18, 20};
  llmc::DealtStep step;
  // T = 7: two sequences of 8 tokens; documents cut to 6 tokens.
  ASSERT_TRUE(llmc::deal_step(shard, 0, 7, 6, 2, &step));
  ASSERT_EQ(step.sequences.size(), 2u);
  const std::vector<std::pair<int64_t, int64_t>> first = {{0, 5}, {5, 8}}, second = {{8, 14}, {18, 20}};
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(step.sequences[0][i].begin, first[i].first);
    EXPECT_EQ(step.sequences[0][i].end, first[i].second);
    EXPECT_EQ(step.sequences[1][i].begin, second[i].first);
    EXPECT_EQ(step.sequences[1][i].end, second[i].second);
  }
  EXPECT_EQ(step.next_document, 4);
  EXPECT_FALSE(llmc::deal_step(shard, 4, 7, 6, 2, &step)) << "one 7-token document cannot fill two sequences";
  PackedSequence packed;
  ASSERT_TRUE(llmc::deal_step(shard, 0, 7, 6, 2, &step));
  llmc::pack_sequence(shard, step.sequences[1], 7, 5, "example", &packed);
  const std::vector<int32_t> inputs = {shard.tokens[8],  shard.tokens[9],  shard.tokens[10], shard.tokens[11],
                                       shard.tokens[12], shard.tokens[13], shard.tokens[18]};
  EXPECT_EQ(packed.inputs, inputs);
  EXPECT_EQ(packed.targets.back(), shard.tokens[19]);
  EXPECT_EQ(packed.cu_seqlens, (std::vector<int32_t>{0, 6, 7, 7, 7}));
  EXPECT_EQ(packed.num_documents, 2);
}

TEST(DocumentPacking, CuSeqlensFromBosAndTheDefaultLength) {
  const std::vector<int32_t> inputs = {kBosToken, 1, 2, kBosToken, 3, 4, 5, kBosToken};
  int documents = 0;
  EXPECT_EQ(llmc::cu_seqlens_from_bos(inputs.data(), 8, 6, "x", &documents),
            (std::vector<int32_t>{0, 0, 3, 7, 8, 8}));
  EXPECT_EQ(documents, 4);
  expect_error([&] { llmc::cu_seqlens_from_bos(inputs.data(), 8, 4, "chunk 3", &documents); },
               {"chunk 3", "holds 4 documents", "raise the cu_seqlens length"});
  EXPECT_EQ(llmc::default_cu_seqlens_length(32768), 128);
  EXPECT_EQ(llmc::default_cu_seqlens_length(262144), 896);
}

TEST_F(BosLoaderTest, SequencesKeepEveryInvariantAcrossShards) {
  const std::vector<std::vector<int>> lengths = make_shards(3, 120, 60, 1);
  const int64_t T = 97;
  const std::vector<PackedSequence> sequences = slots(T, 2, 2, 20);  // crosses shards and wraps
  for (size_t i = 0; i < sequences.size(); ++i) {
    const PackedSequence& s = sequences[i];
    SCOPED_TRACE("sequence " + std::to_string(i));
    ASSERT_EQ(s.inputs.size(), static_cast<size_t>(T));
    ASSERT_EQ(s.cu_seqlens.size(), 64u);
    EXPECT_EQ(s.inputs[0], kBosToken);
    for (int64_t t = 0; t + 1 < T; ++t) EXPECT_EQ(s.targets[static_cast<size_t>(t)], s.inputs[static_cast<size_t>(t + 1)]);
    EXPECT_EQ(s.cu_seqlens[0], 0);
    EXPECT_EQ(s.cu_seqlens[static_cast<size_t>(s.num_documents)], T);
    for (size_t d = 1; d < s.cu_seqlens.size(); ++d) {
      EXPECT_LE(s.cu_seqlens[d - 1], s.cu_seqlens[d]);
      if (d > static_cast<size_t>(s.num_documents)) {
        EXPECT_EQ(s.cu_seqlens[d], T);
      }
    }
    for (int d = 0; d < s.num_documents; ++d) {
      const int32_t begin = s.cu_seqlens[static_cast<size_t>(d)], end = s.cu_seqlens[static_cast<size_t>(d) + 1];
      EXPECT_LE(end - begin, 40) << "document " << d << " longer than the cut";
      if (begin < T) {
        EXPECT_EQ(s.inputs[static_cast<size_t>(begin)], kBosToken) << "document " << d;
      }
      for (int32_t t = begin + 1; t < end; ++t) EXPECT_NE(s.inputs[static_cast<size_t>(t)], kBosToken);
    }
  }
}

TEST_F(BosLoaderTest, ResumesBitForBitFromASavedPosition) {
  make_shards(2, 80, 50, 2);
  BosLoaderConfig c = config(61, 1, 0, 3);
  BosLoader original(c);
  PackedSequence sequence;
  for (int i = 0; i < 47; ++i) original.next(&sequence);  // many shards in, mid-step (47 % 3 != 0)
  const BosLoaderPosition saved = original.position();
  EXPECT_NE(saved.micro_step, 0);
  EXPECT_GT(saved.epoch + saved.shard, 0) << "the test should cross a shard";
  BosLoader resumed(c, saved);
  EXPECT_EQ(resumed.position(), saved);
  for (int i = 0; i < 30; ++i) {
    PackedSequence a, b;
    original.next(&a);
    resumed.next(&b);
    ASSERT_TRUE(same(a, b)) << "micro-batch " << i << " after the resume";
    ASSERT_EQ(original.position(), resumed.position());
  }
}

// The record's stages (--batch-schedule modded89): after set_step_shape a loader deals what a loader built with that
// shape deals from the same position, so a run resumed in any stage continues as one that ran through; a shape
// inside a step, longer than the loader's T, or without documents is refused.
TEST_F(BosLoaderTest, StepShapesDealAsALoaderBuiltWithThem) {
  make_shards(2, 120, 60, 5);
  const BosLoaderConfig c = config(60, 1, 0, 2);
  BosLoader staged(c);
  const int64_t shapes[3][2] = {{20, 10}, {40, 40}, {60, 40}};  // T, document cut
  for (const auto& shape : shapes) {
    staged.set_step_shape(shape[0], shape[1]);
    BosLoaderConfig built = c;
    built.seq_len = shape[0];
    built.max_document_tokens = shape[1];
    BosLoader reference(built, staged.position());
    for (int i = 0; i < 10; ++i) {  // 5 steps of 2 micro-steps
      PackedSequence a, b;
      staged.next(&a);
      reference.next(&b);
      ASSERT_EQ(a.inputs.size(), static_cast<size_t>(shape[0]));
      ASSERT_TRUE(same(a, b)) << "T " << shape[0] << ", micro-batch " << i;
      ASSERT_EQ(staged.position(), reference.position());
    }
  }
  PackedSequence sequence;
  staged.next(&sequence);
  EXPECT_THROW(staged.set_step_shape(20, 10), std::logic_error);  // mid-step
  staged.next(&sequence);
  EXPECT_THROW(staged.set_step_shape(61, 40), std::invalid_argument);
  EXPECT_THROW(staged.set_step_shape(0, 40), std::invalid_argument);
  EXPECT_THROW(staged.set_step_shape(20, 0), std::invalid_argument);
}

TEST_F(BosLoaderTest, FewerRanksWithAccumulationSeeTheSameSequences) {
  make_shards(2, 150, 70, 3);
  const std::vector<PackedSequence> eight_ranks = slots(45, 8, 1, 12);
  for (const auto& [world, accum] : std::vector<std::pair<int, int>>{{1, 8}, {2, 4}, {4, 2}}) {
    const std::vector<PackedSequence> fewer = slots(45, world, accum, 12);
    ASSERT_EQ(fewer.size(), eight_ranks.size());
    for (size_t i = 0; i < fewer.size(); ++i)
      ASSERT_TRUE(same(fewer[i], eight_ranks[i])) << world << " ranks x " << accum << ": sequence " << i;
  }
}

TEST_F(BosLoaderTest, WrapsToTheFirstShardInTheNextEpoch) {
  make_shards(1, 30, 20, 4);
  BosLoader loader(config(50, 1, 0, 1));
  std::vector<PackedSequence> first_pass;
  PackedSequence sequence;
  while (loader.position().epoch == 0) {
    loader.next(&sequence);
    first_pass.push_back(sequence);
  }
  // The call that ran out of documents moved to epoch 1 and returned its first sequence.
  const PackedSequence wrapped = first_pass.back();
  first_pass.pop_back();
  ASSERT_GE(first_pass.size(), 2u);
  EXPECT_TRUE(same(wrapped, first_pass[0]));
  for (size_t i = 1; i < first_pass.size(); ++i) {
    loader.next(&sequence);
    EXPECT_TRUE(same(sequence, first_pass[i])) << "sequence " << i << " of the second pass";
  }
}

TEST_F(BosLoaderTest, BadShardsAndConfigsAreOneLineErrors) {
  write(0, documents_of({30, 30, 30, 30}, 0));
  write(1, std::vector<uint16_t>(200, 5));  // no document start at all
  BosLoader loader(config(40, 1, 0, 1));
  PackedSequence sequence;
  expect_error([&] {
    for (int i = 0; i < 10; ++i) loader.next(&sequence);
  }, {"train_000001.bin", "no document start"});
  expect_error([&] { loader.next(&sequence); }, {"train_000001.bin", "no document start"});  // again, not stale

  write(1, std::vector<uint16_t>(20, kBosToken));  // fewer tokens than one step
  expect_error([&] { BosLoader small(config(40, 1, 0, 1)); }, {"train_000001.bin", "too small for one step"});
  write(1, documents_of({150, 150}, 9));  // enough tokens, but cut to 40 they cannot fill 2 x 41
  BosLoader cut(config(40, 2, 0, 1));
  expect_error([&] {
    for (int i = 0; i < 10; ++i) cut.next(&sequence);
  }, {"train_000001.bin", "too small for one step", "documents"});

  BosLoaderConfig c = config(40, 1, 0, 1);
  c.cu_seqlens_length = 2;  // one document at most, but the first sequence holds two
  BosLoader narrow(c);
  expect_error([&] { narrow.next(&sequence); }, {"train_000000.bin", "raise the cu_seqlens length"});
  c = config(40, 2, 2, 1);
  expect_error([&] { BosLoader bad(c); }, {"rank 2 is outside 0..1"});
  c = config(40, 1, 0, 1);
  BosLoaderPosition position;
  position.shard = 5;
  expect_error([&] { BosLoader bad(c, position); }, {"cannot start at", "shard 5"});
}

class PackedValLoaderTest : public BosLoaderTest {};

TEST_F(PackedValLoaderTest, ChunksAreContiguousAndTheSameForEveryRankCount) {
  std::vector<uint16_t> tokens = documents_of({13, 40, 7, 25, 60, 9, 31, 44, 12, 70}, 0);
  llmc::write_shard(path("val_000000.bin"), tokens);
  llmc::PackedValConfig c;
  c.pattern = path("val_*.bin");
  c.seq_len = 32;
  c.val_tokens = 256;  // 8 chunks
  c.cu_seqlens_length = 16;
  std::map<int64_t, PackedSequence> by_chunk;
  for (int world : {1, 2, 4, 8}) {
    for (int rank = 0; rank < world; ++rank) {
      c.world_size = world;
      c.rank = rank;
      llmc::PackedValLoader loader(c);
      EXPECT_EQ(loader.num_calls(), 8 / world);
      for (int64_t call = 0; call < loader.num_calls(); ++call) {
        PackedSequence s;
        loader.next(&s);
        const int64_t chunk = call * world + rank;
        const std::vector<int32_t> expected(tokens.begin() + chunk * 32, tokens.begin() + chunk * 32 + 32);
        EXPECT_EQ(s.inputs, expected) << "chunk " << chunk;
        EXPECT_EQ(s.targets.back(), tokens[static_cast<size_t>(chunk * 32 + 32)]);
        int documents = 0;
        EXPECT_EQ(s.cu_seqlens, llmc::cu_seqlens_from_bos(expected.data(), 32, 16, "x", &documents));
        if (by_chunk.count(chunk)) {
          EXPECT_TRUE(same(by_chunk[chunk], s)) << "chunk " << chunk;
        }
        by_chunk[chunk] = s;
      }
      EXPECT_THROW(
          {
            PackedSequence extra;
            loader.next(&extra);
          },
          std::logic_error);
    }
  }
  c.world_size = 1;
  c.rank = 0;
  c.val_tokens = 320;  // needs 321 tokens, the shard has 311
  expect_error([&] { llmc::PackedValLoader loader(c); }, {"val_*.bin", "validation reads val_tokens + 1 = 321"});
  c.val_tokens = 100;
  expect_error([&] { llmc::PackedValLoader loader(c); }, {"must be a positive multiple of world_size * T = 32"});
}

}  // namespace
