// Tests of a checkpoint as a set of files written by several ranks (simulated by threads): the
// all-or-nothing writer (one rank's failed write stops every rank with that rank's error and leaves no
// file of the new checkpoint, the previous one intact), the re-sharding plan against shards cut
// directly from the whole buffer, resuming on another number of ranks (2->1, 1->4, 4->2, 3->5) with
// checksums and the manifest checked, and the data position carried over in tokens.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <condition_variable>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "llmc/data/shards.h"
#include "llmc/model/gpt2/gpt2_model_file.h"
#include "llmc/model/modded44/speedrun_layout.h"
#include "llmc/model/modded44/speedrun_model_file.h"
#include "llmc/checkpoint/checkpoint.h"
#include "llmc/checkpoint/checkpoint_dir.h"
#include "llmc/optim/zero_state.h"
#include "llmc/train/train_batches.h"
#include "test/support/test_helpers.h"

using namespace llmc;
using llmc::test::expect_error;

namespace {

bool exists(const std::string& path) { struct stat s; return ::stat(path.c_str(), &s) == 0; }

// N ranks as N threads of this process: a barrier and an all-gather through shared memory.
class ThreadRanks {
 public:
  explicit ThreadRanks(int world_size) : world_size_(world_size), gathered_(static_cast<size_t>(world_size)) {}

  class Member : public RankGroup {
   public:
    Member(ThreadRanks& group, int rank) : group_(group), rank_(rank) {}
    int rank() const override { return rank_; }
    int world_size() const override { return group_.world_size_; }
    void barrier() const override { group_.wait_for_all(); }
    void all_gather_bytes(const void* mine, size_t bytes, void* all) const override {
      group_.gathered_[static_cast<size_t>(rank_)].assign(static_cast<const char*>(mine),
                                                          static_cast<const char*>(mine) + bytes);
      group_.wait_for_all();
      for (int r = 0; r < group_.world_size_; r++)
        std::memcpy(static_cast<char*>(all) + r * bytes, group_.gathered_[static_cast<size_t>(r)].data(), bytes);
      group_.wait_for_all();  // nobody overwrites a slot before every rank has read it
    }

   private:
    ThreadRanks& group_;
    int rank_;
  };

  // Runs body(rank group) on every rank; returns each rank's exception (null if none).
  std::vector<std::exception_ptr> run(const std::function<void(const RankGroup&)>& body) {
    std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size_));
    std::vector<std::thread> threads;
    for (int r = 0; r < world_size_; r++)
      threads.emplace_back([&, r] {
        try {
          body(Member(*this, r));
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
        }
      });
    for (std::thread& thread : threads) thread.join();
    return errors;
  }

 private:
  void wait_for_all() {
    std::unique_lock<std::mutex> lock(mutex_);
    const long generation = generation_;
    if (++arrived_ == world_size_) {
      arrived_ = 0;
      ++generation_;
      changed_.notify_all();
      return;
    }
    changed_.wait(lock, [&] { return generation_ != generation; });
  }

  int world_size_;
  std::vector<std::vector<char>> gathered_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  long generation_ = 0;
};

GPT2Config odd_config() {  // C = 12: tensors need alignment gaps, buckets padding
  return GPT2Config{5, 21, 24, 3, 3, 12};
}
// The model as the registry's describe_state_model names it.
const std::string kModel = describe_config(odd_config());

// The smallest speedrun shape the config allows (L even >= 8, D a multiple of 4, C >= 12).
SpeedrunConfig small_speedrun() { return SpeedrunConfig{8, 8, 1, 12, 8, 4}; }

// What the registry's describe_state_model says of the two families (it lives with the device models).
std::string describe(const StateModel& model) {
  return model.family == ModelFamilyId::kGPT2 ? describe_config(gpt2_config_of(model))
                                              : "speedrun " + describe_speedrun_config(speedrun_config_of(model));
}

// A run of the GPT-2 model odd_config() with ZeRO AdamW and the window loader, as the trainer expects it.
ResumeExpectations gpt2_run() {
  ResumeExpectations expected;
  expected.model = gpt2_state_model(odd_config());
  expected.describe_model = describe;
  expected.model_file_digest = gpt2_model_file_digest;
  return expected;
}

// What ZeRO resumes with on rank `rank` of a run laid out as `layout` (its world size).
ZeroShards resume(const std::string& prefix, int rank, const ParamLayout& layout,
                  const ResumeExpectations& expected = gpt2_run()) {
  return read_zero_state(CheckpointReader(prefix, rank, layout.world_size, expected), layout);
}

// Two layouts of one model are the same placement: buckets and tensors at the same offsets.
void expect_same_placement(const ParamLayout& a, const ParamLayout& b, const std::string& what) {
  ASSERT_EQ(a.buckets.size(), b.buckets.size()) << what;
  ASSERT_EQ(a.tensors.size(), b.tensors.size()) << what;
  EXPECT_EQ(a.total_size, b.total_size) << what;
  for (size_t i = 0; i < a.buckets.size(); i++) {
    EXPECT_EQ(a.buckets[i].offset, b.buckets[i].offset) << what << ", bucket " << i;
    EXPECT_EQ(a.buckets[i].padded_size, b.buckets[i].padded_size) << what << ", bucket " << i;
  }
  for (size_t i = 0; i < a.tensors.size(); i++) {
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name) << what;
    EXPECT_EQ(a.tensors[i].offset, b.tensors[i].offset) << what << ", " << a.tensors[i].name;
  }
}

// A distinct value for every element of the whole buffer that holds a parameter (or a gap inside a
// bucket), per array; padding at a bucket's end is zero, as in the optimizer.
float value_at(const ParamLayout& layout, int bucket, size_t offset_in_bucket, int array) {
  if (offset_in_bucket >= layout.buckets[static_cast<size_t>(bucket)].size) return 0.0f;
  return static_cast<float>(array * 1000000 + bucket * 10000 + static_cast<int>(offset_in_bucket)) + 0.5f;
}

// Rank r's state cut directly from the whole buffer (the optimizer's definition, independent of the plan).
std::vector<float> direct_shard(const ParamLayout& layout, int rank, int array) {
  std::vector<float> shard;
  for (int b = 0; b < layout.num_buckets(); b++) {
    const ParamBucket& bucket = layout.buckets[static_cast<size_t>(b)];
    for (size_t i = 0; i < bucket.shard_size; i++)
      shard.push_back(value_at(layout, b, static_cast<size_t>(rank) * bucket.shard_size + i, array));
  }
  return shard;
}

// Rank r's ZeRO state as the optimizer saves it: its shards of the three arrays.
TrainState state_of(const ParamLayout& layout, const StateModel& model, int rank, int64_t step) {
  TrainState state;
  state.step = step;
  state.rank = rank;
  state.world_size = layout.world_size;
  state.model = model;
  state.train_position = DataLoaderPosition{1, 0, 3};
  state.batch_size = 2;
  state.seq_len = 4;
  state.train_time_ms = 1500.0;
  state.arrays = zero_state_arrays(
      ZeroShards{direct_shard(layout, rank, 0), direct_shard(layout, rank, 1), direct_shard(layout, rank, 2)});
  return state;
}

class CheckpointSet : public llmc::test::TempDirTest {
 protected:
  CheckpointSet() : TempDirTest("llmc_test_checkpoint_set") {}

  // Checkpoint `step` written by `world` thread ranks; returns its prefix.
  std::string write_set(int world, int64_t step) {
    const std::string prefix = checkpoint_prefix(dir(), step);
    const GPT2Layout layout = make_param_layout(odd_config(), world);
    const std::vector<float> params(layout.total_size, 0.25f);
    const ModelFileWriter write_model = [&](const std::string& path) {
      return write_gpt2_model_file(path, layout, params.data(), Gpt2FileDtype::kFp32);
    };
    ThreadRanks ranks(world);
    for (const std::exception_ptr& error : ranks.run([&](const RankGroup& group) {
           const TrainState state = state_of(layout, gpt2_state_model(odd_config()), group.rank(), step);
           save_checkpoint(prefix, group, CheckpointContents{write_model, state});
         }))
      if (error) std::rethrow_exception(error);
    return prefix;
  }
};

}  // namespace

TEST(Reshard, PlanBuildsEveryShardFromTheOldOnes) {
  for (auto [from_world, to_world] : {std::pair{2, 1}, {1, 4}, {4, 2}, {3, 5}, {2, 2}}) {
    const ParamLayout from = make_param_layout(odd_config(), from_world), to = make_param_layout(odd_config(), to_world);
    std::vector<std::vector<float>> old_shards;
    for (int r = 0; r < from_world; r++) old_shards.push_back(direct_shard(from, r, 0));
    for (int rank = 0; rank < to_world; rank++) {
      std::vector<float> built(static_cast<size_t>(shard_elements(to)), 0.0f);
      for (const ShardCopy& copy : reshard_plan(from, to, rank))
        std::copy_n(old_shards[static_cast<size_t>(copy.source_rank)].begin() + copy.source_offset, copy.count,
                    built.begin() + copy.target_offset);
      EXPECT_EQ(built, direct_shard(to, rank, 0)) << from_world << " -> " << to_world << " ranks, rank " << rank;
    }
  }
  EXPECT_THROW(reshard_plan(make_param_layout(odd_config(), 1), make_param_layout(GPT2Config{5, 21, 24, 2, 3, 12}, 1), 0),
               std::invalid_argument);
}

TEST(Reshard, RelayoutIsTheFamilysOwnLayoutForTheNewRanks) {
  for (int from : {1, 2, 3}) {
    for (int to : {1, 4, 5}) {
      const std::string what = std::to_string(from) + " -> " + std::to_string(to) + " ranks";
      expect_same_placement(relayout(make_param_layout(odd_config(), from), to), make_param_layout(odd_config(), to),
                            "GPT-2, " + what);
      expect_same_placement(relayout(make_speedrun_layout(small_speedrun(), from), to),
                            make_speedrun_layout(small_speedrun(), to), "speedrun, " + what);
    }
  }
}

TEST(Reshard, PlanWorksForTheSpeedrunLayoutToo) {
  const ParamLayout from = make_speedrun_layout(small_speedrun(), 2), to = make_speedrun_layout(small_speedrun(), 3);
  std::vector<std::vector<float>> old_shards = {direct_shard(from, 0, 1), direct_shard(from, 1, 1)};
  for (int rank = 0; rank < 3; rank++) {
    std::vector<float> built(static_cast<size_t>(shard_elements(to)), 0.0f);
    for (const ShardCopy& copy : reshard_plan(from, to, rank))
      std::copy_n(old_shards[static_cast<size_t>(copy.source_rank)].begin() + copy.source_offset, copy.count,
                  built.begin() + copy.target_offset);
    EXPECT_EQ(built, direct_shard(to, rank, 1)) << "rank " << rank;
  }
  EXPECT_THROW(reshard_plan(from, make_param_layout(odd_config(), 3), 0), std::invalid_argument);
}

TEST_F(CheckpointSet, WriterProducesACompleteCheckpoint) {
  const std::string prefix = write_set(3, 40);
  EXPECT_EQ(latest_checkpoint_prefix(dir()), prefix);
  for (const std::string& file : {checkpoint_model_path(prefix), checkpoint_manifest_path(prefix),
                                  checkpoint_state_path(prefix, 0), checkpoint_state_path(prefix, 2)})
    EXPECT_TRUE(exists(file)) << file;
  const CheckpointReader checkpoint(prefix, 1, 3, gpt2_run());
  EXPECT_EQ(checkpoint.written().step, 40);
  EXPECT_EQ(read_zero_state(checkpoint, make_param_layout(odd_config(), 3)).master,
            direct_shard(make_param_layout(odd_config(), 3), 1, 0));
}

TEST_F(CheckpointSet, OneRankFailingStopsEveryRankAndLeavesNothing) {
  const std::string previous = write_set(3, 10);
  const std::string prefix = checkpoint_prefix(dir(), 20);
  // Rank 1 cannot create its temp file: a directory is in the way.
  std::filesystem::create_directories(checkpoint_state_path(prefix, 1) + ".tmp");
  const GPT2Layout layout = make_param_layout(odd_config(), 3);
  const std::vector<float> params(layout.total_size, 0.25f);
  const ModelFileWriter write_model = [&](const std::string& path) {
    return write_gpt2_model_file(path, layout, params.data(), Gpt2FileDtype::kFp32);
  };
  ThreadRanks ranks(3);
  const std::vector<std::exception_ptr> errors = ranks.run([&](const RankGroup& group) {
    const TrainState state = state_of(layout, gpt2_state_model(odd_config()), group.rank(), 20);
    save_checkpoint(prefix, group, CheckpointContents{write_model, state});
  });
  for (size_t r = 0; r < errors.size(); r++) {
    ASSERT_TRUE(errors[r]) << "rank " << r << " went on";
    try {
      std::rethrow_exception(errors[r]);
    } catch (const AgreedError& error) {
      EXPECT_EQ(error.failing_rank(), 1);
      EXPECT_NE(std::string(error.what()).find(checkpoint_state_path(prefix, 1) + ".tmp: cannot create"),
                std::string::npos)
          << error.what();
    }
  }
  std::filesystem::remove(checkpoint_state_path(prefix, 1) + ".tmp");
  for (const auto& entry : std::filesystem::directory_iterator(dir()))
    EXPECT_EQ(entry.path().filename().string().rfind("ckpt_000010_", 0), 0u) << entry.path() << " was left";
  EXPECT_EQ(latest_checkpoint_prefix(dir()), previous);
  resume(previous, 0, layout);  // intact: every checksum still holds
}

TEST_F(CheckpointSet, ResumesOnAnotherNumberOfRanks) {
  for (auto [from_world, to_world] : {std::pair{2, 1}, {1, 4}, {4, 2}, {3, 5}}) {
    const std::string prefix = write_set(from_world, 100 + from_world * 10 + to_world);
    const ParamLayout to = make_param_layout(odd_config(), to_world);
    for (int rank = 0; rank < to_world; rank++) {
      const CheckpointReader checkpoint(prefix, rank, to_world, gpt2_run());
      const ZeroShards shards = read_zero_state(checkpoint, to);
      const std::string where = std::to_string(from_world) + " -> " + std::to_string(to_world) + ", rank " +
                                std::to_string(rank);
      EXPECT_EQ(checkpoint.written().world_size, from_world) << where;
      EXPECT_EQ(shards.master, direct_shard(to, rank, 0)) << where;
      EXPECT_EQ(shards.adam_m, direct_shard(to, rank, 1)) << where;
      EXPECT_EQ(shards.adam_v, direct_shard(to, rank, 2)) << where;
    }
  }
}

TEST_F(CheckpointSet, DamagedCheckpointsAreRefusedNamingTheFile) {
  const std::string prefix = write_set(2, 50);
  const ParamLayout one = make_param_layout(odd_config(), 1), two = make_param_layout(odd_config(), 2);
  auto bytes_of = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string rank1 = checkpoint_state_path(prefix, 1), saved = bytes_of(rank1);
  // A flipped bit in rank 1's file: caught on resume by 2 ranks (rank 1 reads it whole) and by 1 rank
  // (which verifies every old file).
  std::string flipped = saved;
  flipped[flipped.size() - 3] ^= 0x40;
  std::ofstream(rank1, std::ios::binary) << flipped;
  expect_error([&] { resume(prefix, 1, two); }, {rank1 + ": checksum mismatch"});
  expect_error([&] { resume(prefix, 0, one); }, {rank1 + ": checksum mismatch"});
  // Rank 0's file in rank 1's place: a valid file, but not the one the manifest lists.
  std::filesystem::copy_file(checkpoint_state_path(prefix, 0), rank1, std::filesystem::copy_options::overwrite_existing);
  expect_error([&] { resume(prefix, 1, two); }, {rank1 + ": does not match the checkpoint's manifest"});
  std::ofstream(rank1, std::ios::binary) << saved;
  resume(prefix, 1, two);
  // Truncated model file; then no manifest at all.
  const std::string model = checkpoint_model_path(prefix), model_bytes = bytes_of(model);
  std::ofstream(model, std::ios::binary) << model_bytes.substr(0, model_bytes.size() - 8);
  expect_error([&] { resume(prefix, 0, two); }, {model + ": truncated"});
  std::ofstream(model, std::ios::binary) << model_bytes;
  std::filesystem::remove(checkpoint_manifest_path(prefix));
  expect_error([&] { resume(prefix, 0, two); },
               {checkpoint_manifest_path(prefix) + ": missing", "not a complete checkpoint"});
}

TEST_F(CheckpointSet, DataPositionCarriesOverInTokens) {
  // Two shards of 1001 tokens; this loader: 2 ranks x B=3 x T=4 = 24 tokens per batch, 1000/24 -> 41 batches.
  std::vector<uint16_t> tokens(1001, 7);
  write_shard(path("s_000001.bin"), tokens);
  write_shard(path("s_000002.bin"), tokens);
  DataLoaderConfig config;
  config.pattern = path("s_*.bin");
  config.batch_size = 3;
  config.seq_len = 4;
  config.world_size = 2;
  const DataLoader loader(config);
  ASSERT_EQ(loader.batches_in_shard(0), 41);
  TrainStateHeader written;
  written.world_size = 1;
  written.batch_size = 2;
  written.seq_len = 4;  // 8 tokens per batch
  written.train_position = DataLoaderPosition{0, 1, 9};  // 72 tokens into shard 1: exactly batch 3 here
  EXPECT_EQ(resumed_position(written, loader), (DataLoaderPosition{0, 1, 3}));
  written.train_position = DataLoaderPosition{0, 0, 10};  // 80 tokens: batch 3 starts at 72, so batch 4
  EXPECT_EQ(resumed_position(written, loader), (DataLoaderPosition{0, 0, 4}));
  written.train_position = DataLoaderPosition{2, 1, 123};  // 984 tokens: past the last batch of shard 1
  EXPECT_EQ(resumed_position(written, loader), (DataLoaderPosition{3, 0, 0}));
  written.world_size = 2;
  written.batch_size = 3;  // the same loader geometry: the same position
  written.train_position = DataLoaderPosition{1, 0, 40};
  EXPECT_EQ(resumed_position(written, loader), written.train_position);
}

TEST_F(CheckpointSet, ResumeRefusesTheStateOfAnotherModel) {
  const std::string prefix = write_set(2, 60);
  const std::string speedrun = "speedrun " + describe_speedrun_config(small_speedrun());
  ResumeExpectations expected = gpt2_run();
  expected.model = speedrun_state_model(small_speedrun());
  expect_error([&] { CheckpointReader(prefix, 0, 2, expected); },
               {checkpoint_state_path(prefix, 0) + ": optimizer state is for " + kModel, "the model file is " + speedrun});
}

TEST_F(CheckpointSet, SpeedrunCheckpointIsVerifiedThroughItsManifest) {
  // The speedrun model file has no checksum field: the resume hashes it whole against the manifest.
  const SpeedrunLayout layout = make_speedrun_layout(small_speedrun(), 2);
  const std::vector<float> params(layout.total_size, 0.5f);
  const ModelFileWriter write_model = [&](const std::string& path) {
    return write_speedrun_model(path, layout, params.data(), SpeedrunFileDtype::kReference);
  };
  const std::string prefix = checkpoint_prefix(dir(), 70);
  ThreadRanks ranks(2);
  for (const std::exception_ptr& error : ranks.run([&](const RankGroup& group) {
         const TrainState state = state_of(layout, speedrun_state_model(small_speedrun()), group.rank(), 70);
         save_checkpoint(prefix, group, CheckpointContents{write_model, state});
       }))
    if (error) std::rethrow_exception(error);
  ResumeExpectations expected = gpt2_run();
  expected.model = speedrun_state_model(small_speedrun());
  expected.model_file_digest = [](const std::string& path) { return whole_file_digest(path, "model file"); };
  const ParamLayout three = make_speedrun_layout(small_speedrun(), 3);
  EXPECT_EQ(resume(prefix, 2, three, expected).adam_v, direct_shard(three, 2, 2));  // 2 -> 3 ranks
  const std::string path = checkpoint_model_path(prefix);
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() / 2] ^= 0x01;
  std::ofstream(path, std::ios::binary) << bytes;
  expect_error([&] { resume(prefix, 0, three, expected); }, {path + ": does not match the checkpoint's manifest"});
}
