// Tests of the files of a checkpoint below the trainer: the per-rank state file (round trip, checksum,
// every bad file named), the atomic writer under it when a write fails part-way (an injected
// RLIMIT_FSIZE failure: no temp left, the file and the cause named), the log on a full device
// (/dev/full), the manifest, and the checkpoint directory (completeness, latest, pruning).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "llmc/base/atomic_file.h"
#include "llmc/checkpoint/checkpoint_dir.h"
#include "llmc/train/log.h"
#include "llmc/checkpoint/manifest.h"
#include "llmc/checkpoint/state_file.h"
#include "test/support/test_helpers.h"

using namespace llmc;
using llmc::test::expect_error;

namespace {
bool exists(const std::string& path) { struct stat s; return ::stat(path.c_str(), &s) == 0; }

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

class StateFiles : public llmc::test::TempDirTest {
 protected:
  StateFiles() : TempDirTest("llmc_test_train_state") {}
};

NamedStateArray float_array(const std::string& name, const std::vector<float>& values) {
  NamedStateArray array{name, 4, std::vector<char>(values.size() * sizeof(float))};
  std::memcpy(array.bytes.data(), values.data(), array.bytes.size());
  return array;
}
std::vector<float> floats_of(const NamedStateArray& array) {
  std::vector<float> values(array.bytes.size() / sizeof(float));
  std::memcpy(values.data(), array.bytes.data(), array.bytes.size());
  return values;
}

// A GPT-2 shape as its family records it (maxT, V, Vp, L, NH, C).
const StateModel kGpt2Model{ModelFamilyId::kGPT2, {64, 300, 384, 2, 4, 64}};
// speedrun-tiny as its family records it (V, L, H, D, T, window block).
const StateModel kSpeedrunModel{ModelFamilyId::kSpeedrun, {96, 8, 2, 16, 128, 16}};

// A ZeRO-like state: master weights and two moments of `elements` floats each, as named fp32 arrays.
TrainState sample_state(size_t elements) {
  TrainState s;
  s.step = 1234; s.rank = 3; s.world_size = 4;
  s.model = kGpt2Model;
  s.train_position = DataLoaderPosition{2, 5, 77};
  s.batch_size = 8; s.seq_len = 64; s.grad_accum = 3;
  s.train_time_ms = 98765.432;
  std::vector<float> master, m, v;
  for (size_t i = 0; i < elements; i++) {
    master.push_back(0.001f * static_cast<float>(i) - 0.3f);
    m.push_back(1e-7f * static_cast<float>(i));
    v.push_back(1e-9f * static_cast<float>(i * i));
  }
  s.arrays = {float_array("master", master), float_array("adam_m", m), float_array("adam_v", v)};
  return s;
}

// Sets the soft file-size limit for the scope (writes beyond it fail with EFBIG instead of SIGXFSZ).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_;
  sighandler_t old_handler_;
};
}  // namespace

TEST_F(StateFiles, RoundTripIsExact) {
  const TrainState s = sample_state(1000);
  const std::string path = checkpoint_state_path(checkpoint_prefix(dir(), 1234), 3);
  EXPECT_EQ(path, dir() + "/ckpt_001234_state_rank3.bin");
  const WrittenFile written = write_train_state(path, s);
  EXPECT_FALSE(exists(path + ".tmp"));
  EXPECT_EQ(written.bytes, 32 * 8 + 3 * (64 + 4 * 1000u));  // the header, then per array its record and floats
  const TrainState r = read_train_state(path);
  EXPECT_EQ(r.step, 1234);
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.world_size, 4);
  EXPECT_EQ(r.model, kGpt2Model);
  EXPECT_EQ(r.version, 5);
  EXPECT_EQ(r.train_loader, TrainLoaderKind::kWindow);
  EXPECT_EQ(r.train_position, s.train_position);
  EXPECT_EQ(r.batch_size, 8);
  EXPECT_EQ(r.seq_len, 64);
  EXPECT_EQ(r.grad_accum, 3);
  EXPECT_NEAR(r.train_time_ms, s.train_time_ms, 1e-3);
  EXPECT_EQ(r.named_arrays, 3);
  EXPECT_EQ(r.checksum, written.checksum);
  ASSERT_EQ(r.arrays.size(), 3u);
  for (size_t i = 0; i < 3; i++) {
    EXPECT_EQ(r.arrays[i].name, s.arrays[i].name);
    EXPECT_EQ(floats_of(r.arrays[i]), floats_of(s.arrays[i]));
  }
  const TrainStateHeader header = read_train_state_header(path);
  EXPECT_EQ(header.checksum, written.checksum);
  verify_train_state(path);
  const std::vector<float> adam_v = floats_of(s.arrays[2]);
  std::vector<float> piece(3);
  EXPECT_EQ(train_state_array_elements(path, header, "adam_v"), 1000);
  read_train_state_elements(path, header, "adam_v", 10, 3, piece.data());
  EXPECT_EQ(piece, std::vector<float>(adam_v.begin() + 10, adam_v.begin() + 13));
  EXPECT_THROW(read_train_state_elements(path, header, "adam_v", 998, 3, piece.data()), std::out_of_range);
  expect_error([&] { read_train_state_elements(path, header, "other", 0, 1, piece.data()); },
               {path + ": has no optimizer-state array other"});
}

// The BOS loader's position (epoch, shard, document, micro-step) in words 11-13 and 28, named by word 27.
TEST_F(StateFiles, BosLoaderPositionRoundTrips) {
  TrainState s = sample_state(2);
  s.train_loader = TrainLoaderKind::kBos;
  s.train_position = DataLoaderPosition{};
  s.bos_position = BosLoaderPosition{3, 1, 4097, 2};
  write_train_state(path("bos.bin"), s);
  const TrainState r = read_train_state(path("bos.bin"));
  EXPECT_EQ(r.train_loader, TrainLoaderKind::kBos);
  EXPECT_EQ(r.bos_position, s.bos_position);
  EXPECT_EQ(r.train_position, DataLoaderPosition{});
  EXPECT_EQ(r.grad_accum, 3);
  std::string bytes = read_all(path("bos.bin"));
  const int64_t* words = reinterpret_cast<const int64_t*>(bytes.data());
  EXPECT_EQ(words[11], 3);
  EXPECT_EQ(words[12], 1);
  EXPECT_EQ(words[13], 4097);
  EXPECT_EQ(words[27], 1);
  EXPECT_EQ(words[28], 2);
  EXPECT_EQ(words[29], 3);
  // A window state with a micro-step, an unknown loader, no gradient accumulation: corrupt (checked before
  // the checksum, which these edits break too).
  for (const auto& [word, value, needle] : std::vector<std::tuple<int, int64_t, std::string>>{
           {27, 2, "unknown training loader 2"}, {29, 0, "gradient accumulation 0"}}) {
    std::string edited = bytes;
    std::memcpy(&edited[static_cast<size_t>(word) * 8], &value, 8);
    write_all(path("edited.bin"), edited);
    expect_error([&] { read_train_state(path("edited.bin")); },
                 {path("edited.bin") + ": corrupt optimizer-state header: " + needle});
  }
  write_train_state(path("window.bin"), sample_state(2));
  std::string window = read_all(path("window.bin"));
  const int64_t micro_step = 1;
  std::memcpy(&window[28 * 8], &micro_step, 8);
  write_all(path("window_micro.bin"), window);
  expect_error([&] { read_train_state(path("window_micro.bin")); },
               {path("window_micro.bin") + ": corrupt optimizer-state header: BOS loader micro-step 1"});
}

TEST_F(StateFiles, SpeedrunFamilyRoundTrips) {
  // (That a resume refuses the state of another model: test_checkpoint_set's CheckpointSet tests.)
  TrainState s = sample_state(4);
  s.model = kSpeedrunModel;
  write_train_state(path("speedrun.bin"), s);
  const TrainState r = read_train_state(path("speedrun.bin"));
  EXPECT_EQ(r.model.family, ModelFamilyId::kSpeedrun);
  EXPECT_EQ(r.model, kSpeedrunModel);
  EXPECT_EQ(floats_of(r.arrays[2]), floats_of(s.arrays[2]));
  // Version 5 keeps every family's shape in words 5-10: the words that held the speedrun shape up to
  // version 4 (17-22) must be zero.
  std::string both = read_all(path("speedrun.bin"));
  both[17 * 8] = 1;
  write_all(path("both.bin"), both);
  expect_error([&] { read_train_state(path("both.bin")); },
               {path("both.bin") + ": corrupt optimizer-state header: model shape word 17"});
  TrainState unknown = sample_state(4);
  write_train_state(path("family.bin"), unknown);
  std::string bytes = read_all(path("family.bin"));
  bytes[16 * 8] = 7;  // header word 16: the family
  write_all(path("family.bin"), bytes);
  expect_error([&] { read_train_state(path("family.bin")); }, {path("family.bin") + ": ", "unknown model family 7"});
}

// A speedrun optimizer's state: named arrays of bf16 (2-byte) and fp32 elements, no ZeRO arrays.
TrainState speedrun_state() {
  TrainState s = sample_state(0);
  s.arrays.clear();
  s.model = kSpeedrunModel;
  s.optimizer = StateOptimizer::kSpeedrun;
  s.arrays.push_back({"b0.muon0.master", 4, std::vector<char>(4 * 6)});
  s.arrays.push_back({"b0.muon0.momentum", 2, std::vector<char>(2 * 5)});
  s.arrays.push_back({"b1.adam.saved_grads", 2, std::vector<char>(2 * 3)});
  char value = 1;
  for (NamedStateArray& array : s.arrays)
    for (char& byte : array.bytes) byte = value++;
  return s;
}

TEST_F(StateFiles, SpeedrunOptimizerArraysRoundTrip) {
  const TrainState s = speedrun_state();
  const WrittenFile written = write_train_state(path("speedrun.bin"), s);
  // The header, then per array a record of 8 words and its bytes.
  EXPECT_EQ(written.bytes, 32 * 8 + 3 * 64 + 24 + 10 + 6u);
  const TrainState r = read_train_state(path("speedrun.bin"));
  EXPECT_EQ(r.optimizer, StateOptimizer::kSpeedrun);
  EXPECT_EQ(r.named_arrays, 3);
  EXPECT_EQ(r.step, s.step);
  EXPECT_EQ(r.train_position, s.train_position);
  ASSERT_EQ(r.arrays.size(), 3u);
  for (size_t i = 0; i < 3; i++) {
    EXPECT_EQ(r.arrays[i].name, s.arrays[i].name);
    EXPECT_EQ(r.arrays[i].element_bytes, s.arrays[i].element_bytes);
    EXPECT_EQ(r.arrays[i].bytes, s.arrays[i].bytes);
  }
  const TrainStateHeader header = read_train_state_header(path("speedrun.bin"));
  EXPECT_EQ(header.file_bytes, static_cast<int64_t>(written.bytes));
  EXPECT_EQ(header.checksum, written.checksum);
  verify_train_state(path("speedrun.bin"));
  EXPECT_STREQ(state_optimizer_name(r.optimizer), "speedrun");
  EXPECT_STREQ(state_optimizer_name(StateOptimizer::kZeroAdamW), "zero-adamw");
  // A zero-adamw state says so in its header word 25.
  write_train_state(path("zero.bin"), sample_state(3));
  EXPECT_EQ(read_train_state(path("zero.bin")).optimizer, StateOptimizer::kZeroAdamW);
}

// A model's own arrays (kModelStatePrefix) are read alone, by their prefix, in file order with their bytes; the
// others are skipped; a legacy zero-adamw file has none.
TEST_F(StateFiles, ModelArraysAreReadAloneByTheirPrefix) {
  TrainState s = speedrun_state();
  s.arrays.insert(s.arrays.begin() + 1, NamedStateArray{"model.fp8_mlp.scales", 4, std::vector<char>(8, 7)});
  s.arrays.push_back(NamedStateArray{"model.fp8_mlp.refreshed", 4, std::vector<char>(4, 9)});
  write_train_state(path("with_model.bin"), s);
  const TrainStateHeader header = read_train_state_header(path("with_model.bin"));
  const std::vector<NamedStateArray> model =
      read_train_state_arrays_with_prefix(path("with_model.bin"), header, kModelStatePrefix);
  ASSERT_EQ(model.size(), 2u);
  for (size_t i = 0; i < 2; i++) {
    const NamedStateArray& expected = s.arrays[i == 0 ? 1 : 4];
    EXPECT_EQ(model[i].name, expected.name);
    EXPECT_EQ(model[i].element_bytes, expected.element_bytes);
    EXPECT_EQ(model[i].bytes, expected.bytes);
  }
  write_train_state(path("no_model.bin"), speedrun_state());
  EXPECT_TRUE(read_train_state_arrays_with_prefix(path("no_model.bin"), read_train_state_header(path("no_model.bin")),
                                                  kModelStatePrefix)
                  .empty());
}

TEST_F(StateFiles, BadSpeedrunRecordsAreNamed) {
  const std::string good_path = path("speedrun.bin");
  write_train_state(good_path, speedrun_state());
  const std::string good = read_all(good_path);
  const size_t record = 32 * 8;  // the first array's record
  auto expect_bad = [&](const std::string& name, std::string bytes, const std::string& needle) {
    write_all(path(name), bytes);
    expect_error([&] { read_train_state_header(path(name)); }, {path(name) + ": ", needle});
    expect_error([&] { read_train_state(path(name)); }, {path(name) + ": ", needle});
  };
  std::string empty_name = good;
  empty_name[record] = '\0';
  expect_bad("empty_name.bin", empty_name, "name is empty or not terminated");
  std::string long_name = good;
  for (size_t i = 0; i < 48; i++) long_name[record + i] = 'x';
  expect_bad("long_name.bin", long_name, "name is empty or not terminated");
  std::string element_size = good;
  element_size[record + 48] = 3;
  expect_bad("element_size.bin", element_size, "b0.muon0.master: element size 3");
  std::string huge = good;
  huge[record + 56 + 5] = 1;  // the count: 2^40 + 6
  expect_bad("huge.bin", huge, "b0.muon0.master promises");
  expect_bad("truncated.bin", good.substr(0, good.size() - 1), "promises 3 elements");
  expect_bad("trailing.bin", good + "x", "trailing bytes");
  std::string legacy_word = good;
  legacy_word[15 * 8] = 1;  // header word 15: the count of a version 4 zero-adamw state's arrays, zero since
  expect_bad("legacy_word.bin", legacy_word, "word 15 is not zero");
  std::string optimizer = good;
  optimizer[25 * 8] = 5;
  expect_bad("optimizer.bin", optimizer, "unknown optimizer 5");
  std::string flipped = good;
  flipped[good.size() - 2] = static_cast<char>(flipped[good.size() - 2] ^ 0x10);  // inside the last array: only the checksum sees it
  write_all(path("flipped.bin"), flipped);
  read_train_state_header(path("flipped.bin"));
  expect_error([&] { read_train_state(path("flipped.bin")); }, {path("flipped.bin") + ": checksum mismatch"});
  expect_error([&] { verify_train_state(path("flipped.bin")); }, {path("flipped.bin") + ": checksum mismatch"});
  // What cannot be stored is refused before any file exists.
  TrainState named = speedrun_state();
  named.arrays[0].name = std::string(48, 'n');
  EXPECT_THROW(write_train_state(path("named.bin"), named), std::invalid_argument);
  TrainState odd = speedrun_state();
  odd.arrays[1].bytes.resize(3);
  EXPECT_THROW(write_train_state(path("odd.bin"), odd), std::invalid_argument);
  EXPECT_FALSE(exists(path("named.bin")) || exists(path("odd.bin")));
}

// Files of versions 2-4, built word by word from their documented layout: still read. A version 2 file
// (before the optimizer word) is a zero-adamw state; one with version 3's words set is corrupt.
TEST_F(StateFiles, Version2FilesAreStillRead) {
  std::vector<int64_t> header(32, 0);
  header[0] = 0x31545341544d4c4cLL;  // "LLMSTAT1"
  header[1] = 2;
  header[2] = 40;                                                   // step
  header[3] = 1, header[4] = 2;                                     // rank 1 of 2
  header[5] = 64, header[6] = 300, header[7] = 384, header[8] = 2;  // maxT V Vp L
  header[9] = 4, header[10] = 64;                                   // NH C
  header[11] = 1, header[12] = 2, header[13] = 3;                   // epoch, shard, batch
  header[14] = 5000;                                                // train time, microseconds
  header[15] = 2;                                                   // shard elements
  header[23] = 8, header[24] = 64;                                  // B, T
  const std::vector<float> arrays = {1.5f, -2.0f, 0.25f, 0.5f, 3e-8f, 4e-8f};  // master, m, v
  auto file_with = [&](const std::vector<int64_t>& words) {
    std::string bytes(reinterpret_cast<const char*>(words.data()), words.size() * 8);
    bytes.append(reinterpret_cast<const char*>(arrays.data()), arrays.size() * 4);
    Checksum checksum;
    checksum.update(bytes.data(), bytes.size());  // word 31 is zero here
    const uint64_t digest = checksum.digest();
    std::memcpy(&bytes[31 * 8], &digest, 8);
    return bytes;
  };
  write_all(path("v2.bin"), file_with(header));
  const TrainState r = read_train_state(path("v2.bin"));
  EXPECT_EQ(r.optimizer, StateOptimizer::kZeroAdamW);
  EXPECT_EQ(r.step, 40);
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.model, kGpt2Model);
  EXPECT_EQ(r.train_loader, TrainLoaderKind::kWindow);
  EXPECT_EQ(r.train_position, (DataLoaderPosition{1, 2, 3}));
  EXPECT_EQ(r.grad_accum, 0);  // not recorded before version 4
  EXPECT_NEAR(r.train_time_ms, 5.0, 1e-9);
  // The three unnamed arrays, read as the named arrays ZeroOptimizer saves (and read in pieces too).
  ASSERT_EQ(r.arrays.size(), 3u);
  EXPECT_EQ(r.named_arrays, 3);
  EXPECT_EQ(r.arrays[0].name, "master");
  EXPECT_EQ(r.arrays[1].name, "adam_m");
  EXPECT_EQ(r.arrays[2].name, "adam_v");
  EXPECT_EQ(floats_of(r.arrays[0]), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(floats_of(r.arrays[1]), (std::vector<float>{0.25f, 0.5f}));
  EXPECT_EQ(floats_of(r.arrays[2]), (std::vector<float>{3e-8f, 4e-8f}));
  const TrainStateHeader v2_header = read_train_state_header(path("v2.bin"));
  EXPECT_EQ(v2_header.file_bytes, 32 * 8 + 24);
  EXPECT_EQ(train_state_array_elements(path("v2.bin"), v2_header, "adam_m"), 2);
  float piece = 0.0f;
  read_train_state_elements(path("v2.bin"), v2_header, "adam_v", 1, 1, &piece);
  EXPECT_EQ(piece, 4e-8f);
  std::vector<int64_t> with_optimizer = header;
  with_optimizer[25] = 1;
  write_all(path("v2_speedrun.bin"), file_with(with_optimizer));
  expect_error([&] { read_train_state(path("v2_speedrun.bin")); },
               {path("v2_speedrun.bin") + ": corrupt optimizer-state header: a version 2 file with version 3 fields"});
  // Version 3 (the optimizer words, before the loader words): read as a window-loader state.
  std::vector<int64_t> version3 = header;
  version3[1] = 3;
  write_all(path("v3.bin"), file_with(version3));
  const TrainState v3 = read_train_state(path("v3.bin"));
  EXPECT_EQ(v3.train_loader, TrainLoaderKind::kWindow);
  EXPECT_EQ(v3.train_position, (DataLoaderPosition{1, 2, 3}));
  EXPECT_EQ(v3.grad_accum, 0);
  std::vector<int64_t> v3_bos = version3;
  v3_bos[27] = 1;
  write_all(path("v3_bos.bin"), file_with(v3_bos));
  expect_error([&] { read_train_state(path("v3_bos.bin")); },
               {path("v3_bos.bin") + ": corrupt optimizer-state header: a version 3 file with version 4 fields"});
  // Version 4 (the loader words): a zero-adamw state still holds unnamed arrays.
  std::vector<int64_t> version4 = header;
  version4[1] = 4;
  version4[29] = 1;  // the writer's gradient accumulation
  write_all(path("v4.bin"), file_with(version4));
  const TrainState v4 = read_train_state(path("v4.bin"));
  EXPECT_EQ(v4.grad_accum, 1);
  EXPECT_EQ(floats_of(v4.arrays[0]), (std::vector<float>{1.5f, -2.0f}));
  // A version 4 speedrun-family state kept its shape in words 17-22, words 5-10 zero; a version 4 file
  // whose family names both shapes is corrupt.
  std::vector<int64_t> v4_speedrun = version4;
  v4_speedrun[16] = 1;
  for (int i = 0; i < 6; i++) {
    v4_speedrun[5 + i] = 0;
    v4_speedrun[17 + i] = kSpeedrunModel.shape[static_cast<size_t>(i)];
  }
  write_all(path("v4_speedrun.bin"), file_with(v4_speedrun));
  EXPECT_EQ(read_train_state(path("v4_speedrun.bin")).model, kSpeedrunModel);
  v4_speedrun[5] = 64;
  write_all(path("v4_both.bin"), file_with(v4_speedrun));
  expect_error([&] { read_train_state(path("v4_both.bin")); },
               {path("v4_both.bin") + ": corrupt optimizer-state header: model shape word 5"});
  std::vector<int64_t> version6 = header;
  version6[1] = 6;
  write_all(path("v6.bin"), file_with(version6));
  expect_error([&] { read_train_state(path("v6.bin")); },
               {path("v6.bin") + ": unsupported optimizer-state version 6 (this build reads versions 2 to 5)"});
}

TEST_F(StateFiles, BadFilesAreNamed) {
  auto expect_read_error = [](const std::string& path, const std::string& needle) {
    expect_error([&] { read_train_state(path); }, {path + ": ", needle});
  };
  expect_read_error(path("missing.bin"), "cannot open");
  write_all(path("short.bin"), "abc");
  expect_read_error(path("short.bin"), "shorter");
  write_all(path("magic.bin"), std::string(256, '\0'));
  expect_read_error(path("magic.bin"), "wrong magic");
  write_train_state(path("good.bin"), sample_state(10));
  const std::string good = read_all(path("good.bin"));
  write_all(path("truncated.bin"), good.substr(0, good.size() - 4));
  expect_read_error(path("truncated.bin"), "truncated");
  std::string version1 = good;
  version1[8] = 1;
  write_all(path("version1.bin"), version1);
  expect_read_error(path("version1.bin"), "unsupported optimizer-state version 1");
  std::string bad_rank = good;
  bad_rank[3 * 8] = 9;  // rank 9 of 4
  write_all(path("bad_rank.bin"), bad_rank);
  expect_read_error(path("bad_rank.bin"), "corrupt optimizer-state header: rank 9");
}

TEST_F(StateFiles, FlippedBitsAreCaughtByTheChecksum) {
  write_train_state(path("good.bin"), sample_state(100));
  const std::string good = read_all(path("good.bin"));
  // A moment, the train time, the checksum word itself: nothing the size checks can see.
  for (size_t byte : {good.size() - 1, size_t{14 * 8 + 2}, size_t{31 * 8 + 7}, size_t{32 * 8 + 400}}) {
    std::string bad = good;
    bad[byte] = static_cast<char>(bad[byte] ^ 0x04);
    write_all(path("flipped.bin"), bad);
    expect_error([&] { read_train_state(path("flipped.bin")); }, {path("flipped.bin") + ": checksum mismatch"});
    expect_error([&] { verify_train_state(path("flipped.bin")); }, {path("flipped.bin") + ": checksum mismatch"});
  }
}

TEST_F(StateFiles, UncommittedAtomicWriterLeavesNothing) {
  const std::string target = path("out.bin");
  {
    AtomicFileWriter writer(target);
    writer.write("abc", 3);
    EXPECT_TRUE(exists(target + ".tmp"));
  }
  EXPECT_FALSE(exists(target));
  EXPECT_FALSE(exists(target + ".tmp"));
  AtomicFileWriter writer(target);
  writer.write("abc", 3);
  writer.patch(1, "X", 1);
  EXPECT_THROW(writer.patch(2, "XY", 2), std::runtime_error);  // beyond what was written
  const WrittenFile done = writer.commit();
  EXPECT_EQ(read_all(target), "aXc");
  EXPECT_EQ(done.bytes, 3u);
  Checksum of_written;
  of_written.update("abc", 3);  // the checksum is of what write() got, the patch excluded
  EXPECT_EQ(done.checksum, of_written.digest());
  EXPECT_THROW(AtomicFileWriter(dir() + "/no/such/dir/file"), std::runtime_error);
}

TEST_F(StateFiles, FailedWriteNamesTheFileAndLeavesNoTemp) {
  // The file system refuses bytes past 64 KiB (as a full disk refuses them, with another errno).
  write_train_state(path("previous.bin"), sample_state(1000));
  const std::string previous = read_all(path("previous.bin"));
  const std::string target = path("big.bin");
  {
    FileSizeLimit limit(64 << 10);
    expect_error([&] { write_train_state(target, sample_state(20000)); }, {target + ": write failed", "too large"});
  }
  EXPECT_FALSE(exists(target));
  EXPECT_FALSE(exists(target + ".tmp"));
  EXPECT_EQ(read_all(path("previous.bin")), previous);
}

TEST_F(StateFiles, LogLineOnAFullDeviceNamesTheFile) {
  TrainLog log("/dev/full", /*is_writer=*/true);
  expect_error([&] { log.line("step:1/1 train_loss:1.0"); }, {"/dev/full: write failed: No space left on device"});
  log.record_failure("disk full");  // best effort: does not throw
}

TEST_F(StateFiles, ManifestRoundTripAndBadManifests) {
  CheckpointManifest manifest;
  manifest.step = 40;
  manifest.world_size = 2;
  manifest.files = {{"ckpt_000040_model.bin", 1234, 0x0123456789abcdefull},
                    {"ckpt_000040_state_rank0.bin", 99, 7},
                    {"ckpt_000040_state_rank1.bin", 99, 0xffffffffffffffffull}};
  write_manifest(path("m.json"), manifest);
  const CheckpointManifest back = read_manifest(path("m.json"));
  EXPECT_EQ(back.step, 40);
  EXPECT_EQ(back.world_size, 2);
  ASSERT_EQ(back.files.size(), 3u);
  EXPECT_EQ(back.files[2].checksum, 0xffffffffffffffffull);
  EXPECT_EQ(manifest_entry(back, path("m.json"), "ckpt_000040_state_rank0.bin").bytes, 99u);
  expect_error([&] { manifest_entry(back, path("m.json"), "ckpt_000040_state_rank2.bin"); },
               {path("m.json") + ": does not list ckpt_000040_state_rank2.bin"});
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{", "not a JSON object"},
      {"[1]", "not a JSON object"},
      {R"({"format":"other","version":1})", "format"},
      {R"({"format":"llmc-checkpoint","version":2})", "version 2"},
      {R"({"format":"llmc-checkpoint","version":1,"step":-1,"world_size":1,"files":[]})", "\"step\""},
      {R"({"format":"llmc-checkpoint","version":1,"step":1,"world_size":1e9,"files":[]})", "\"world_size\""},
      {R"({"format":"llmc-checkpoint","version":1,"step":1,"world_size":5000,"files":[]})", "outside 1..4096"},
      {R"({"format":"llmc-checkpoint","version":1,"step":1,"world_size":1,"files":{}})", "not a list"},
      {R"({"format":"llmc-checkpoint","version":1,"step":1,"world_size":1,"files":[{"name":"../x","bytes":1,"xxh3":"0000000000000000"}]})",
       "not a plain file name"},
      {R"({"format":"llmc-checkpoint","version":1,"step":1,"world_size":1,"files":[{"name":"x","bytes":1,"xxh3":"00"}]})",
       "16 hex digits"},
  };
  for (const auto& [text, needle] : bad) {
    write_all(path("bad.json"), text);
    expect_error([&] { read_manifest(path("bad.json")); }, {path("bad.json") + ": ", needle});
  }
}

TEST_F(StateFiles, CompleteMeansTheManifestExists) {
  EXPECT_EQ(latest_checkpoint_prefix(dir()), "");
  EXPECT_EQ(latest_checkpoint_prefix(dir() + "/does-not-exist"), "");
  for (int step : {100, 200, 300}) write_all(checkpoint_model_path(checkpoint_prefix(dir(), step)), "m");
  for (int step : {100, 200, 300}) write_all(checkpoint_state_path(checkpoint_prefix(dir(), step), 0), "s");
  for (int step : {100, 200}) write_all(checkpoint_manifest_path(checkpoint_prefix(dir(), step)), "{}");
  write_all(dir() + "/ckpt_junk_model.bin", "x");
  write_all(dir() + "/ckpt_000300_state_rank1.bin.tmp", "x");
  EXPECT_EQ(latest_checkpoint_prefix(dir()), checkpoint_prefix(dir(), 200));  // 300 has no manifest
  EXPECT_EQ(resume_prefix("latest", dir()), checkpoint_prefix(dir(), 200));
  EXPECT_EQ(resume_prefix("/some/ckpt_000007", dir()), "/some/ckpt_000007");
  const std::vector<CheckpointEntry> entries = list_checkpoints(dir());
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_TRUE(entries[0].complete);
  EXPECT_FALSE(entries[2].complete);
}

TEST_F(StateFiles, PruningKeepsTheNewestCompleteOnes) {
  auto make = [&](int step, bool complete) {
    const std::string prefix = checkpoint_prefix(dir(), step);
    write_all(checkpoint_model_path(prefix), "m");
    write_all(checkpoint_state_path(prefix, 0), "s");
    write_all(checkpoint_state_path(prefix, 1), "s");
    if (complete) write_all(checkpoint_manifest_path(prefix), "{}");
  };
  make(10, true);
  make(20, false);  // a run stopped while writing it
  make(30, true);
  make(40, true);
  make(50, false);  // being written now: newer than every kept one, so never touched
  write_all(dir() + "/log.txt", "log");
  EXPECT_TRUE(prune_checkpoints(dir(), 0).empty());  // 0 keeps everything
  EXPECT_EQ(list_checkpoints(dir()).size(), 5u);
  EXPECT_TRUE(prune_checkpoints(dir(), 5).empty());  // fewer complete ones than asked: nothing goes
  EXPECT_EQ(list_checkpoints(dir()).size(), 5u);
  EXPECT_TRUE(prune_checkpoints(dir(), 2).empty());
  std::vector<int64_t> left;
  for (const CheckpointEntry& entry : list_checkpoints(dir())) left.push_back(entry.step);
  EXPECT_EQ(left, (std::vector<int64_t>{30, 40, 50}));
  EXPECT_FALSE(exists(checkpoint_state_path(checkpoint_prefix(dir(), 20), 1)));
  EXPECT_TRUE(exists(dir() + "/log.txt"));
  EXPECT_TRUE(exists(checkpoint_manifest_path(checkpoint_prefix(dir(), 30))));
}
