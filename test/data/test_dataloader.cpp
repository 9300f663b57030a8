// Tests of the data loader (llmc/data/dataloader.h) on small shards written to a temp dir: batches equal
// direct slices of the token arrays, ranks are disjoint and together equal the one-rank batch, epochs
// wrap, shuffling is a deterministic permutation, prefetch and seek change nothing, the validation
// loader reads exactly the first val_tokens tokens, and every bad input is a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/data/dataloader.h"
#include "llmc/data/shards.h"
#include "test/support/test_helpers.h"

namespace fs = std::filesystem;

namespace {

using llmc::test::expect_error;

struct Batch {
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
  bool operator==(const Batch& other) const { return inputs == other.inputs && targets == other.targets; }
};

Batch next(llmc::DataLoader& loader) {
  Batch batch;
  batch.inputs.resize(static_cast<size_t>(loader.tokens_per_rank_batch()));
  batch.targets.resize(batch.inputs.size());
  loader.next_batch(batch.inputs.data(), batch.targets.data());
  return batch;
}

std::vector<Batch> take(llmc::DataLoader& loader, int count) {
  std::vector<Batch> batches;
  for (int i = 0; i < count; ++i) batches.push_back(next(loader));
  return batches;
}

class DataLoaderTest : public llmc::test::TempDirTest {
 protected:
  DataLoaderTest() : TempDirTest("llmc_test_data") {}

  // Shards whose tokens are consecutive integers across all shards (all distinct while the total is
  // below 65536), so a window is identified by its first token. Returns the token arrays.
  std::vector<std::vector<uint16_t>> make_shards(const std::string& prefix, const std::vector<int64_t>& sizes) {
    std::vector<std::vector<uint16_t>> all;
    int64_t next_value = 0;
    for (size_t s = 0; s < sizes.size(); ++s) {
      std::vector<uint16_t> tokens(static_cast<size_t>(sizes[s]));
      for (auto& t : tokens) t = static_cast<uint16_t>(next_value++ % 65536);
      char name[64];
      std::snprintf(name, sizeof(name), "%s_%06zu.bin", prefix.c_str(), s);
      llmc::write_shard(path(name), tokens);
      all.push_back(std::move(tokens));
    }
    return all;
  }

  llmc::DataLoaderConfig config(const std::string& prefix, int64_t B, int64_t T, int rank = 0, int world = 1) const {
    llmc::DataLoaderConfig c;
    c.pattern = path(prefix + "_*.bin");
    c.batch_size = B;
    c.seq_len = T;
    c.rank = rank;
    c.world_size = world;
    c.vocab_size = 65536;
    return c;
  }
};

// The batch a rank should get, by direct slicing: global batch g of a shard uses windows
// g*W*B .. g*W*B+W*B-1 (stride T, T+1 tokens each), rank r the B of them starting at r*B.
Batch sliced(const std::vector<uint16_t>& shard, int64_t g, int64_t B, int64_t T, int rank, int world) {
  Batch batch;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t start = (g * world * B + rank * B + b) * T;
    for (int64_t t = 0; t < T; ++t) {
      batch.inputs.push_back(shard.at(static_cast<size_t>(start + t)));
      batch.targets.push_back(shard.at(static_cast<size_t>(start + t + 1)));
    }
  }
  return batch;
}

TEST_F(DataLoaderTest, BatchesAreDirectSlicesAndEpochsWrap) {
  const int64_t B = 2, T = 16;
  const auto shards = make_shards("train", {1000, 1300, 777});
  for (int world : {1, 2}) {
    for (int rank = 0; rank < world; ++rank) {
      llmc::DataLoader loader(config("train", B, T, rank, world));
      for (int epoch = 0; epoch < 2; ++epoch) {
        EXPECT_EQ(loader.epoch(), epoch);
        for (size_t s = 0; s < shards.size(); ++s) {
          // A shard of N tokens has (N-1)/T windows; only whole global batches are used.
          const int64_t batches = (static_cast<int64_t>(shards[s].size()) - 1) / T / (world * B);
          EXPECT_EQ(loader.batches_in_shard(static_cast<int64_t>(s)), batches);
          for (int64_t g = 0; g < batches; ++g) {
            ASSERT_EQ(next(loader), sliced(shards[s], g, B, T, rank, world))
                << "world " << world << " rank " << rank << " epoch " << epoch << " shard " << s << " batch " << g;
          }
        }
      }
      EXPECT_EQ(loader.epoch(), 2);
    }
  }
}

TEST_F(DataLoaderTest, RanksAreDisjointAndTogetherEqualTheOneRankBatch) {
  const int64_t B = 3, T = 8;
  make_shards("train", {900, 1500, 700});
  for (bool shuffle : {false, true}) {
    for (int world : {1, 2, 4}) {
      auto whole_config = config("train", B * world, T);
      whole_config.shuffle = shuffle;
      whole_config.seed = 42;
      llmc::DataLoader whole(whole_config);
      std::vector<std::unique_ptr<llmc::DataLoader>> ranks;
      for (int r = 0; r < world; ++r) {
        auto c = config("train", B, T, r, world);
        c.shuffle = shuffle;
        c.seed = 42;
        ranks.push_back(std::make_unique<llmc::DataLoader>(c));
      }
      const int64_t steps = whole.batches_per_epoch() + 3;  // into the second epoch
      for (int64_t step = 0; step < steps; ++step) {
        Batch joined;
        std::set<int32_t> window_starts;
        for (auto& rank_loader : ranks) {
          const Batch part = next(*rank_loader);
          joined.inputs.insert(joined.inputs.end(), part.inputs.begin(), part.inputs.end());
          joined.targets.insert(joined.targets.end(), part.targets.begin(), part.targets.end());
          for (int64_t b = 0; b < B; ++b) window_starts.insert(part.inputs[static_cast<size_t>(b * T)]);
        }
        EXPECT_EQ(window_starts.size(), static_cast<size_t>(B * world)) << "ranks overlap at step " << step;
        ASSERT_EQ(joined, next(whole)) << "shuffle " << shuffle << " world " << world << " step " << step;
      }
    }
  }
}

TEST_F(DataLoaderTest, DeterministicPermutationIsAPermutation) {
  for (int64_t count : {0, 1, 2, 7, 1000}) {
    auto order = llmc::deterministic_permutation(count, 1234, 5, 6);
    EXPECT_EQ(order, llmc::deterministic_permutation(count, 1234, 5, 6));
    std::sort(order.begin(), order.end());
    std::vector<int64_t> identity(static_cast<size_t>(count));
    std::iota(identity.begin(), identity.end(), 0);
    EXPECT_EQ(order, identity);
  }
  // Different keys give different orders (1000! orders: a collision here would mean a broken mix).
  const auto base = llmc::deterministic_permutation(1000, 1, 0, 0);
  EXPECT_NE(base, llmc::deterministic_permutation(1000, 2, 0, 0));
  EXPECT_NE(base, llmc::deterministic_permutation(1000, 1, 1, 0));
  EXPECT_NE(base, llmc::deterministic_permutation(1000, 1, 0, 1));
}

TEST_F(DataLoaderTest, DeterministicPermutationIsUniform) {
  // All 3! orders of 3 items over 6000 keys: a chi-square statistic (5 degrees of freedom) above
  // 35.89 has probability 1e-6 for a uniform shuffle (scipy.stats.chi2.isf(1e-6, 5)).
  std::vector<int> counts(6, 0);
  const int keys = 6000;
  for (int key = 0; key < keys; ++key) {
    const auto order = llmc::deterministic_permutation(3, static_cast<uint64_t>(key), 0, 0);
    counts[static_cast<size_t>(order[0] * 2 + (order[1] > order[2] ? 1 : 0))]++;
  }
  double chi_square = 0;
  for (int c : counts) chi_square += (c - keys / 6.0) * (c - keys / 6.0) / (keys / 6.0);
  EXPECT_LT(chi_square, 35.89) << "counts " << counts[0] << " " << counts[1] << " " << counts[2] << " " << counts[3]
                               << " " << counts[4] << " " << counts[5];
}

TEST_F(DataLoaderTest, OneShardGetsANewWindowOrderEachEpoch) {
  const int64_t B = 2, T = 4;
  make_shards("one", {20 * B * T + 1});
  auto c = config("one", B, T);
  c.shuffle = true;
  c.seed = 5;
  llmc::DataLoader loader(c);
  const auto epoch0 = take(loader, 20);
  EXPECT_EQ(loader.epoch(), 1);
  const auto epoch1 = take(loader, 20);
  EXPECT_NE(epoch0, epoch1);
}

TEST_F(DataLoaderTest, ShuffleIsDeterministicSeedDependentAndCoversEveryWindow) {
  const int64_t B = 2, T = 4;
  // Sizes k*B*T+1 so that every window of every shard is used each epoch.
  make_shards("train", {10 * B * T + 1, 7 * B * T + 1, 12 * B * T + 1, 5 * B * T + 1, 9 * B * T + 1});
  auto shuffled = [&](uint64_t seed) {
    auto c = config("train", B, T);
    c.shuffle = true;
    c.seed = seed;
    return c;
  };
  llmc::DataLoader a(shuffled(7)), a_again(shuffled(7)), b(shuffled(8)), plain(config("train", B, T));
  const int per_epoch = static_cast<int>(a.batches_per_epoch());
  ASSERT_EQ(per_epoch, 10 + 7 + 12 + 5 + 9);
  const auto epochs_a = take(a, 2 * per_epoch);
  EXPECT_EQ(epochs_a, take(a_again, 2 * per_epoch));
  const auto epochs_b = take(b, 2 * per_epoch);
  EXPECT_NE(epochs_a, epochs_b);
  const auto epoch_plain = take(plain, per_epoch);

  auto window_starts = [&](const std::vector<Batch>& batches, int first, int count) {
    std::vector<int32_t> starts;
    for (int i = first; i < first + count; ++i) {
      for (int64_t row = 0; row < B; ++row) starts.push_back(batches[static_cast<size_t>(i)].inputs[static_cast<size_t>(row * T)]);
    }
    return starts;
  };
  std::vector<int32_t> plain_starts = window_starts(epoch_plain, 0, per_epoch);
  std::sort(plain_starts.begin(), plain_starts.end());
  for (const auto* run : {&epochs_a, &epochs_b}) {
    const auto epoch0 = window_starts(*run, 0, per_epoch);
    const auto epoch1 = window_starts(*run, per_epoch, per_epoch);
    EXPECT_NE(epoch0, epoch1) << "each epoch should have its own order";
    EXPECT_NE(epoch0, window_starts(epoch_plain, 0, per_epoch)) << "shuffle had no effect";
    for (auto starts : {epoch0, epoch1}) {
      std::sort(starts.begin(), starts.end());
      EXPECT_EQ(starts, plain_starts) << "an epoch must use every window exactly once";
    }
  }
  // Every row is still a proper window: targets are the inputs shifted by one token.
  for (const auto& batch : epochs_a) {
    for (int64_t row = 0; row < B; ++row) {
      for (int64_t t = 0; t + 1 < T; ++t) {
        ASSERT_EQ(batch.targets[static_cast<size_t>(row * T + t)], batch.inputs[static_cast<size_t>(row * T + t + 1)]);
      }
    }
  }
}

TEST_F(DataLoaderTest, ShardOrderIsShuffledToo) {
  const int64_t B = 1, T = 4;
  make_shards("train", {9, 9, 9, 9, 9, 9});  // 2 batches per shard; shard s starts at token 9*s
  std::set<int32_t> first_tokens;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto c = config("train", B, T);
    c.shuffle = true;
    c.seed = seed;
    llmc::DataLoader loader(c);
    std::set<int32_t> shards_seen;
    for (int i = 0; i < 12; ++i) {
      const Batch batch = next(loader);
      if (i == 0) first_tokens.insert(batch.inputs[0] / 9);
      shards_seen.insert(batch.inputs[0] / 9);
      if (i % 2 == 1) {
        EXPECT_EQ(static_cast<int64_t>(shards_seen.size()), (i + 1) / 2) << "shards interleaved";
      }
    }
    EXPECT_EQ(shards_seen.size(), 6u);
  }
  EXPECT_GT(first_tokens.size(), 1u) << "20 seeds all started with the same shard";
}

TEST_F(DataLoaderTest, PrefetchGivesTheSameBatches) {
  make_shards("train", {1000, 600, 1500});
  for (bool shuffle : {false, true}) {
    auto c = config("train", 2, 16, 1, 2);
    c.shuffle = shuffle;
    c.seed = 3;
    llmc::DataLoader direct(c);
    c.prefetch = true;
    llmc::DataLoader prefetched(c);
    const int steps = static_cast<int>(direct.batches_per_epoch()) * 2 + 5;
    for (int i = 0; i < steps; ++i) {
      ASSERT_EQ(next(direct), next(prefetched)) << "shuffle " << shuffle << " step " << i;
      ASSERT_EQ(direct.position(), prefetched.position());
    }
  }
}

TEST_F(DataLoaderTest, SeekResumesWithIdenticalBatches) {
  make_shards("train", {1000, 600, 1500});
  for (bool prefetch : {false, true}) {
    auto c = config("train", 2, 8, 0, 2);
    c.shuffle = true;
    c.seed = 11;
    c.prefetch = prefetch;
    llmc::DataLoader original(c);
    const int per_epoch = static_cast<int>(original.batches_per_epoch());
    take(original, per_epoch + 17);  // mid-shard, in the second epoch
    const llmc::DataLoaderPosition saved = original.position();
    EXPECT_EQ(saved.epoch, 1);
    const auto expected = take(original, per_epoch);

    llmc::DataLoader resumed(c);
    take(resumed, 3);  // some unrelated progress first
    resumed.seek(saved);
    EXPECT_EQ(resumed.position(), saved);
    EXPECT_EQ(take(resumed, per_epoch), expected) << "prefetch " << prefetch;

    resumed.reset();
    llmc::DataLoader fresh(c);
    EXPECT_EQ(take(resumed, 5), take(fresh, 5));

    expect_error([&] { resumed.seek({0, 3, 0}); }, {"cannot seek", "3 shards"});
    expect_error([&] { resumed.seek({0, 0, 10000}); }, {"cannot seek", "global batches"});
    expect_error([&] { resumed.seek({-1, 0, 0}); }, {"cannot seek"});
  }
}

TEST_F(DataLoaderTest, ValidationReadsExactlyTheFirstValTokens) {
  const int64_t B = 2, T = 8;
  const auto shards = make_shards("val", {1000});
  for (int world : {1, 2, 4}) {
    const int64_t val_tokens = 3 * world * B * T;
    std::vector<std::vector<Batch>> per_rank(static_cast<size_t>(world));
    for (int r = 0; r < world; ++r) {
      llmc::ValLoaderConfig c;
      c.pattern = path("val_*.bin");
      c.batch_size = B;
      c.seq_len = T;
      c.rank = r;
      c.world_size = world;
      c.vocab_size = 65536;
      c.val_tokens = val_tokens;
      c.prefetch = (r % 2 == 1);
      llmc::ValLoader loader(c);
      ASSERT_EQ(loader.num_steps(), 3);
      for (int step = 0; step < 2; ++step) {  // read twice to check reset()
        std::vector<Batch> batches;
        for (int64_t s = 0; s < loader.num_steps(); ++s) {
          Batch batch{std::vector<int32_t>(static_cast<size_t>(B * T)), std::vector<int32_t>(static_cast<size_t>(B * T))};
          loader.next_batch(batch.inputs.data(), batch.targets.data());
          batches.push_back(batch);
        }
        if (step == 0) {
          per_rank[static_cast<size_t>(r)] = batches;
        } else {
          EXPECT_EQ(batches, per_rank[static_cast<size_t>(r)]) << "reset() must replay the same batches";
        }
        std::vector<int32_t> scratch(static_cast<size_t>(B * T));
        EXPECT_THROW(loader.next_batch(scratch.data(), scratch.data()), std::logic_error);
        loader.reset();
      }
    }
    // Step by step, rank by rank, the inputs are exactly tokens 0..val_tokens-1, targets 1..val_tokens.
    std::vector<int32_t> inputs, targets;
    for (int64_t s = 0; s < 3; ++s) {
      for (int r = 0; r < world; ++r) {
        const Batch& batch = per_rank[static_cast<size_t>(r)][static_cast<size_t>(s)];
        inputs.insert(inputs.end(), batch.inputs.begin(), batch.inputs.end());
        targets.insert(targets.end(), batch.targets.begin(), batch.targets.end());
      }
    }
    EXPECT_EQ(inputs, std::vector<int32_t>(shards[0].begin(), shards[0].begin() + val_tokens));
    EXPECT_EQ(targets, std::vector<int32_t>(shards[0].begin() + 1, shards[0].begin() + val_tokens + 1));
  }
}

TEST_F(DataLoaderTest, ValidationRejectsBadValTokens) {
  make_shards("val", {200});
  llmc::ValLoaderConfig c;
  c.pattern = path("val_*.bin");
  c.batch_size = 2;
  c.seq_len = 8;
  c.world_size = 2;
  c.vocab_size = 65536;
  c.val_tokens = 40;
  expect_error([&] { llmc::ValLoader loader(c); }, {c.pattern, "val_tokens 40", "multiple of world_size*B*T = 32"});
  c.val_tokens = 32 * 7;  // the shard has (200-1)/8 = 24 windows = 6 steps of 4 windows
  expect_error([&] { llmc::ValLoader loader(c); }, {c.pattern, "needs 7 steps", "only 6"});
  c.val_tokens = 32 * 6;
  EXPECT_EQ(llmc::ValLoader(c).num_steps(), 6);
}

TEST_F(DataLoaderTest, BadInputsAreClearErrors) {
  make_shards("good", {200});
  expect_error([&] { llmc::DataLoader loader(config("absent", 2, 8)); }, {path("absent_*.bin"), "no files match"});

  // Bad headers: each error names the offending file.
  auto write_header = [&](const std::string& name, int32_t magic, int32_t version, int32_t count, int64_t data_tokens) {
    std::vector<int32_t> header(256, 0);
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    std::FILE* f = std::fopen(path(name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::fwrite(header.data(), 4, 256, f);
    std::vector<uint16_t> data(static_cast<size_t>(data_tokens), 1);
    std::fwrite(data.data(), 2, data.size(), f);
    std::fclose(f);
  };
  write_header("magic_000000.bin", 12345, 1, 200, 200);
  expect_error([&] { llmc::DataLoader loader(config("magic", 2, 8)); }, {path("magic_000000.bin"), "wrong magic"});
  write_header("version_000000.bin", 20240520, 7, 200, 200);
  expect_error([&] { llmc::DataLoader loader(config("version", 2, 8)); }, {path("version_000000.bin"), "version 7"});
  write_header("cut_000000.bin", 20240520, 1, 200, 150);
  expect_error([&] { llmc::DataLoader loader(config("cut", 2, 8)); }, {path("cut_000000.bin"), "truncated"});

  // Too small for one global batch of world*B*T+1 = 2*4*8+1 = 65 tokens.
  make_shards("small", {64});
  expect_error([&] { llmc::DataLoader loader(config("small", 4, 8, 0, 2)); },
               {path("small_000000.bin"), "too small", "has 64 tokens", "needs 65"});
  EXPECT_NO_THROW(llmc::DataLoader loader(config("small", 4, 8, 0, 1)));

  // Bad configuration.
  expect_error([&] { llmc::DataLoader loader(config("good", 0, 8)); }, {"batch size"});
  expect_error([&] { llmc::DataLoader loader(config("good", 2, 0)); }, {"sequence length"});
  expect_error([&] { llmc::DataLoader loader(config("good", 2, 8, 2, 2)); }, {"rank 2"});
}

TEST_F(DataLoaderTest, TokenOutsideTheVocabularyIsReportedWithItsOffset) {
  std::vector<uint16_t> tokens(300, 50256);  // the largest valid id is accepted ...
  llmc::write_shard(path("fine_000000.bin"), tokens);
  auto fine = config("fine", 2, 8);
  fine.vocab_size = 50257;
  llmc::DataLoader fine_loader(fine);
  EXPECT_EQ(next(fine_loader).inputs[0], 50256);
  tokens[237] = 50257;  // ... and vocab_size itself is not
  llmc::write_shard(path("vocab_000000.bin"), tokens);
  for (bool prefetch : {false, true}) {
    auto c = config("vocab", 2, 8);
    c.vocab_size = 50257;
    c.prefetch = prefetch;
    llmc::DataLoader loader(c);
    std::vector<int32_t> inputs(16), targets(16);
    for (int attempt = 0; attempt < 2; ++attempt) {  // the error stays, it does not hang or vanish
      expect_error([&] { loader.next_batch(inputs.data(), targets.data()); },
                   {path("vocab_000000.bin"), "index 237", "byte offset 1498", "value 50257", "vocab_size 50257"});
    }
  }
}

TEST_F(DataLoaderTest, ShardRemovedAfterOpeningIsNamedWhenLoaded) {
  make_shards("gone", {200, 200});
  llmc::DataLoader loader(config("gone", 2, 8));
  fs::remove(path("gone_000001.bin"));
  const int first_shard_batches = static_cast<int>(loader.batches_in_shard(0));
  take(loader, first_shard_batches);
  expect_error([&] { next(loader); }, {path("gone_000001.bin"), "does not exist"});
}

// With prefetch the next shard is read ahead on a background thread: its error (a token outside the
// vocabulary) surfaces only when the loader reaches it, after every batch of the shard before it, and stays.
TEST_F(DataLoaderTest, PrefetchReadsTheNextShardAheadAndReportsItsErrorWhenReached) {
  make_shards("ahead", {200, 200, 200});
  std::vector<uint16_t> bad(200, 7);
  bad[150] = 60000;
  llmc::write_shard(path("ahead_000001.bin"), bad);
  auto c = config("ahead", 2, 8);
  c.vocab_size = 50257;
  c.prefetch = true;
  llmc::DataLoader loader(c);
  const int first_shard_batches = static_cast<int>(loader.batches_in_shard(0));
  take(loader, first_shard_batches);
  for (int attempt = 0; attempt < 2; ++attempt)
    expect_error([&] { next(loader); }, {path("ahead_000001.bin"), "index 150", "value 60000"});
}

TEST(DataLoaderOffsets, WindowArithmeticIsSixtyFourBit) {
  // A shard near the 2^31-token limit at T=1024: window offsets pass 2^31.
  const int64_t windows = llmc::windows_in_shard(llmc::kShardMaxTokens, 1024);
  EXPECT_EQ(windows, (int64_t{2147483647} - 1) / 1024);
  EXPECT_EQ(llmc::window_first_token(windows - 1, 1024), (int64_t{2147483646} / 1024 - 1) * 1024);
  EXPECT_GT(llmc::shard_token_byte_offset(llmc::window_first_token(windows - 1, 1024)), int64_t{INT32_MAX});
  EXPECT_EQ(llmc::windows_in_shard(0, 8), 0);
  EXPECT_EQ(llmc::windows_in_shard(9, 8), 1);
  EXPECT_EQ(llmc::windows_in_shard(8, 8), 0);
}

}  // namespace
