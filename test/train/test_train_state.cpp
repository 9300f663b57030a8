// Tests of the per-rank optimizer/loop state file of a checkpoint, and of the atomic writer under it.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "llmc/atomic_file.h"
#include "llmc/train/state.h"
#include "test/support/test_helpers.h"

using namespace llmc;

namespace {
bool exists(const std::string& path) { struct stat s; return ::stat(path.c_str(), &s) == 0; }

class StateFiles : public llmc::test::TempDirTest {
 protected:
  StateFiles() : TempDirTest("llmc_test_train_state") {}
};
}  // namespace

TEST_F(StateFiles, RoundTripIsExact) {
  const std::string dir = this->dir();
  TrainState s;
  s.step = 1234; s.rank = 3; s.world_size = 4;
  s.config = GPT2Config{64, 300, 384, 2, 4, 64};
  s.train_position = DataLoaderPosition{2, 5, 77};
  s.train_time_ms = 98765.432;
  for (int i = 0; i < 1000; i++) {
    s.master.push_back(0.001f * i - 0.3f);
    s.adam_m.push_back(1e-7f * i);
    s.adam_v.push_back(1e-9f * i * i);
  }
  const std::string path = checkpoint_state_path(checkpoint_prefix(dir, 1234), 3);
  EXPECT_EQ(path, dir + "/ckpt_001234_state_rank3.bin");
  write_train_state(path, s);
  EXPECT_FALSE(exists(path + ".tmp"));
  const TrainState r = read_train_state(path);
  EXPECT_EQ(r.step, 1234);
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.config.padded_vocab_size, 384);
  EXPECT_EQ(r.config.channels, 64);
  EXPECT_EQ(r.train_position, s.train_position);
  EXPECT_NEAR(r.train_time_ms, s.train_time_ms, 1e-3);
  EXPECT_EQ(r.master, s.master);
  EXPECT_EQ(r.adam_m, s.adam_m);
  EXPECT_EQ(r.adam_v, s.adam_v);
}

TEST_F(StateFiles, SpeedrunFamilyRoundTripsAndResumeChecksTheModel) {
  const std::string dir = this->dir();
  TrainState s;
  s.world_size = 1;
  s.family = ModelFamilyId::kSpeedrun;
  s.speedrun = speedrun_config_from_name("speedrun-tiny");
  s.master.assign(4, 1.0f), s.adam_m.assign(4, 0.0f), s.adam_v.assign(4, 0.0f);
  const std::string prefix = checkpoint_prefix(dir, 7);
  write_train_state(checkpoint_state_path(prefix, 0), s);
  const TrainState r = read_train_state(checkpoint_state_path(prefix, 0));
  EXPECT_EQ(r.family, ModelFamilyId::kSpeedrun);
  EXPECT_EQ(describe_state_model(r), "speedrun " + describe_speedrun_config(s.speedrun));
  EXPECT_EQ(describe_state_model(r), describe_state_model(s));
  EXPECT_NO_THROW(read_resume_state(prefix, 0, 1, describe_state_model(s)));
  // A GPT-2 run cannot resume a speedrun state (and the other way round): the message names both models.
  TrainState gpt2;
  gpt2.config = config_from_name("tiny");
  try {
    read_resume_state(prefix, 0, 1, describe_state_model(gpt2));
    FAIL() << "resumed a speedrun state as GPT-2";
  } catch (const std::runtime_error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("optimizer state is for speedrun V=96"), std::string::npos) << message;
    EXPECT_NE(message.find(describe_config(gpt2.config)), std::string::npos) << message;
  }
}

TEST_F(StateFiles, BadFilesAreNamed) {
  const std::string dir = this->dir();
  auto expect_error = [](const std::string& path, const std::string& needle) {
    try { read_train_state(path); FAIL() << "no error for " << path; } catch (const std::runtime_error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(path), std::string::npos) << message;
      EXPECT_NE(message.find(needle), std::string::npos) << message;
    }
  };
  expect_error(dir + "/missing.bin", "cannot open");
  { std::ofstream(dir + "/short.bin") << "abc"; }
  expect_error(dir + "/short.bin", "shorter");
  { std::ofstream out(dir + "/magic.bin", std::ios::binary); std::string zeros(256, '\0'); out << zeros; }
  expect_error(dir + "/magic.bin", "wrong magic");
  TrainState s;
  s.master.assign(10, 1.0f); s.adam_m.assign(10, 0.0f); s.adam_v.assign(10, 0.0f);
  write_train_state(dir + "/good.bin", s);
  std::string bytes;
  { std::ifstream in(dir + "/good.bin", std::ios::binary); bytes.assign(std::istreambuf_iterator<char>(in), {}); }
  { std::ofstream out(dir + "/truncated.bin", std::ios::binary); out << bytes.substr(0, bytes.size() - 4); }
  expect_error(dir + "/truncated.bin", "truncated");
  s.adam_v.resize(9);
  EXPECT_THROW(write_train_state(dir + "/mismatch.bin", s), std::invalid_argument);
  EXPECT_FALSE(exists(dir + "/mismatch.bin"));
}

TEST_F(StateFiles, LatestCheckpointNeedsModelAndState) {
  const std::string dir = this->dir();
  EXPECT_EQ(latest_checkpoint_prefix(dir), "");
  EXPECT_EQ(latest_checkpoint_prefix(dir + "/does-not-exist"), "");
  for (int step : {100, 200, 300}) std::ofstream(checkpoint_model_path(checkpoint_prefix(dir, step))) << "m";
  for (int step : {100, 200}) std::ofstream(checkpoint_state_path(checkpoint_prefix(dir, step), 0)) << "s";
  std::ofstream(dir + "/ckpt_junk_model.bin") << "x";
  EXPECT_EQ(latest_checkpoint_prefix(dir), checkpoint_prefix(dir, 200));  // 300 has no state file
}

TEST_F(StateFiles, UncommittedAtomicWriterLeavesNothing) {
  const std::string dir = this->dir();
  const std::string path = dir + "/out.bin";
  {
    AtomicFileWriter writer(path);
    writer.write("abc", 3);
    EXPECT_TRUE(exists(path + ".tmp"));
  }
  EXPECT_FALSE(exists(path));
  EXPECT_FALSE(exists(path + ".tmp"));
  AtomicFileWriter writer(path);
  writer.write("abc", 3);
  writer.commit();
  EXPECT_TRUE(exists(path));
  EXPECT_THROW(AtomicFileWriter(dir + "/no/such/dir/file"), std::runtime_error);
}
