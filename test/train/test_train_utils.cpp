// Tests of the trainer's small utilities: learning-rate schedule, MFU arithmetic, step-log format.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <regex>
#include <string>

#include "llmc/schedule/lr_schedule.h"
#include "llmc/model/gpt2/gpt2_config.h"
#include "llmc/train/mfu.h"
#include "llmc/train/log.h"
#include "llmc/train/options.h"
#include "test/support/test_helpers.h"

using namespace llmc;

namespace {
class LogFile : public llmc::test::TempDirTest {
 protected:
  LogFile() : TempDirTest("llmc_test_train_log") {}
};
}  // namespace

TEST(LrSchedule, WarmupRampsLinearlyFromFirstStep) {
  LrSchedule s{1e-3, 10, 100, 0.1, LrDecay::kCosine};
  EXPECT_DOUBLE_EQ(s.at(0), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(4), 5e-4);
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);
}

TEST(LrSchedule, CosineHitsMaxMidpointAndFinal) {
  // decay runs over steps 10..99 (89 intervals): start = max, end = final, middle = the mean of both.
  LrSchedule s{1e-3, 10, 100, 0.1, LrDecay::kCosine};
  EXPECT_NEAR(s.at(10), 1e-3, 1e-15);
  EXPECT_NEAR(s.at(99), 1e-4, 1e-15);
  LrSchedule even{1.0, 0, 101, 0.0, LrDecay::kCosine};  // 100 intervals: step 50 is the midpoint
  EXPECT_NEAR(even.at(50), 0.5, 1e-12);
  EXPECT_NEAR(even.at(25), 0.5 * (1 + std::cos(M_PI / 4)), 1e-12);
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule lin{2.0, 0, 5, 0.0, LrDecay::kLinear};  // steps 0..4: 2, 1.5, 1, 0.5, 0
  EXPECT_DOUBLE_EQ(lin.at(0), 2.0);
  EXPECT_DOUBLE_EQ(lin.at(1), 1.5);
  EXPECT_DOUBLE_EQ(lin.at(4), 0.0);
  LrSchedule flat{3.0, 2, 10, 0.0, LrDecay::kConstant};
  EXPECT_DOUBLE_EQ(flat.at(1), 3.0);
  EXPECT_DOUBLE_EQ(flat.at(9), 3.0);
  EXPECT_THROW(parse_lr_decay("exp"), std::invalid_argument);
  EXPECT_EQ(parse_lr_decay("linear"), LrDecay::kLinear);
}

// --lr-schedule speedrun: --lr times the record's multiplier (the record (docs/recipes.md): 1.0 through step
// 1102, 0.6755 at 1500, 0.2673 at 2000, 0.10018 in the extension), stretched to the run's --steps.
TEST(LrSchedule, SpeedrunIsTheRecordsMultiplierTimesMaxLr) {
  const LrSchedule record{0.008, 0, 2245, 0.0, LrDecay::kSpeedrun};
  EXPECT_EQ(record.at(0), 0.008);
  EXPECT_EQ(record.at(1102), 0.008);
  EXPECT_NEAR(record.at(1500) / 0.008, 0.6755, 5e-5);
  EXPECT_NEAR(record.at(2000) / 0.008, 0.2673, 5e-5);
  EXPECT_NEAR(record.at(2244) / 0.008, 0.10018, 1e-12);
  // 8 steps: 7 scheduled (x = s / 7), 1 extension; the decay from 1 to 0.1 over x in [0.5, 1).
  const LrSchedule short_run{2.0, 0, 8, 0.0, LrDecay::kSpeedrun};
  EXPECT_EQ(short_run.at(3), 2.0);
  for (int step = 4; step < 7; step++)
    EXPECT_NEAR(short_run.at(step), 2.0 * (1.0 - 0.9 * (step / 7.0 - 0.5) / 0.5), 1e-14) << step;
  EXPECT_NEAR(short_run.at(7), 2.0 * 0.10018, 1e-14);
  // A warm-up, when asked for, comes first.
  const LrSchedule warm{2.0, 2, 8, 0.0, LrDecay::kSpeedrun};
  EXPECT_EQ(warm.at(0), 1.0);
  EXPECT_EQ(warm.at(2), 2.0);
  EXPECT_EQ(parse_lr_decay("speedrun"), LrDecay::kSpeedrun);
}

// --lr-schedule modded89: --lr times the 2026-07-17 record's factor f (SPEEDRUN89.md section 5's published values
// at its 1,285 steps), stretched to --steps.
TEST(LrSchedule, Modded89IsTheRecordsFactorTimesMaxLr) {
  const LrSchedule record{1.0, 0, 1285, 0.0, LrDecay::kModded89};
  EXPECT_EQ(record.at(0), 1.0);
  EXPECT_EQ(record.at(422), 1.0);
  EXPECT_EQ(record.at(423), 1.52);
  EXPECT_EQ(record.at(507), 1.52);
  EXPECT_NEAR(record.at(600), 1.3546, 5e-5);
  EXPECT_NEAR(record.at(846), 0.9123, 5e-5);
  EXPECT_NEAR(record.at(847), 1.0271, 5e-5);
  EXPECT_NEAR(record.at(1000), 0.7098, 5e-5);
  EXPECT_NEAR(record.at(1270), 0.15, 1e-12);
  EXPECT_NEAR(record.at(1284), 0.15, 1e-12);
  const LrSchedule doubled{2.0, 0, 1285, 0.0, LrDecay::kModded89};
  EXPECT_EQ(doubled.at(600), 2.0 * record.at(600));
  EXPECT_EQ(parse_lr_decay("modded89"), LrDecay::kModded89);
}

TEST(Mfu, FlopsPerTokenOfGpt2Small) {
  // 124,439,808 real parameters (V = 50257) at T = 1024: 6N + 6*12*768*1024 = 0.8029 GFLOP.
  // 6 * 124,439,808 = 746,638,848 and 6 * 12 * 768 * 1024 = 56,623,104 (worked out by hand).
  EXPECT_DOUBLE_EQ(gpt2_training_flops_per_token(124439808, 12, 768, 1024), 803261952.0);
  EXPECT_NEAR(gpt2_training_flops_per_token(124439808, 12, 768, 1024) / 1e9, 0.80, 0.01);
}

TEST(Mfu, PeakTableAndUnknownDevices) {
  EXPECT_DOUBLE_EQ(*bf16_peak_flops("NVIDIA H100 80GB HBM3"), 989.4e12);
  EXPECT_DOUBLE_EQ(*bf16_peak_flops("NVIDIA H100 PCIe"), 756.0e12);
  EXPECT_DOUBLE_EQ(*bf16_peak_flops("NVIDIA H200"), 989.4e12);
  EXPECT_DOUBLE_EQ(*bf16_peak_flops("NVIDIA A100-SXM4-80GB"), 312.0e12);
  EXPECT_FALSE(bf16_peak_flops("Emulated CPU device").has_value());
  EXPECT_EQ(format_mfu(1e12, std::nullopt), "n/a");
  EXPECT_EQ(format_mfu(-5.0, 312e12), "n/a");
  EXPECT_EQ(format_mfu(156e12, 312e12), "50.0%");
}

TEST(TrainLog, LinesMatchModdedNanogptRegexes) {
  // The patterns modded-nanogpt's log analysis uses for its records.
  const std::regex val_re(R"(step:(\d+)/(\d+) val_loss:([\d.]+) train_time:(\d+)ms step_avg:([\d.]+)ms)");
  const std::regex train_re(R"(step:(\d+)/(\d+) train_loss:([\d.]+) train_time:(\d+)ms step_avg:([\d.]+)ms)");
  std::smatch m;
  const std::string val = format_val_line(100, 100, 3.27901, 12695.4, 126.954);
  ASSERT_TRUE(std::regex_search(val, m, val_re)) << val;
  EXPECT_EQ(m[3].str(), "3.2790");
  EXPECT_EQ(m[4].str(), "12695");
  TrainStepRecord r;
  r.step = 12; r.total_steps = 100; r.loss = 4.12344; r.train_time_ms = 1523.2; r.step_avg_ms = 126.93;
  const std::string train = format_train_line(r);
  ASSERT_TRUE(std::regex_search(train, m, train_re)) << train;
  EXPECT_EQ(m[1].str(), "12");
  EXPECT_EQ(m[3].str(), "4.1234");
  EXPECT_NE(train.find("mfu:n/a"), std::string::npos);
  EXPECT_EQ(format_duration(44.6), "45s");
  EXPECT_EQ(format_duration(187), "3m07s");
  EXPECT_EQ(format_duration(7500), "2h05m");
}

TEST_F(LogFile, OnlyTheWriterWritesAndFileAppends) {
  const std::string path = this->path("log.txt");
  { TrainLog log(path, true); log.line("first"); }
  { TrainLog log(path, true); log.line("second"); }
  { TrainLog silent(path, false); silent.line("never"); }
  std::ifstream in(path);
  std::string a, b, c;
  std::getline(in, a); std::getline(in, b);
  EXPECT_EQ(a, "first");
  EXPECT_EQ(b, "second");
  EXPECT_FALSE(std::getline(in, c));
  EXPECT_THROW(TrainLog("/nonexistent-dir/x/log.txt", true), std::runtime_error);
}

TEST(TrainOptions, ParsesAndDerivesGradAccum) {
  CLI::App app;
  TrainOptions o;
  add_train_options(app, o);
  std::vector<std::string> args = {"--total-batch-tokens", "4096", "-t", "64", "-b", "8", "--steps", "7"};
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
  app.parse(args);
  EXPECT_EQ(o.seq_len, 64);
  EXPECT_EQ(o.steps, 7);
  EXPECT_EQ(o.grad_accum_steps(1), 8);  // 4096 / (8 * 64)
  EXPECT_EQ(o.grad_accum_steps(2), 4);
  EXPECT_NO_THROW(validate_train_options(o, 2));
}

TEST(TrainOptions, ContradictionsAreNamed) {
  TrainOptions o;
  o.batch_size = 4; o.seq_len = 64;
  o.total_batch_tokens = 1000;  // not a multiple of 256
  try { validate_train_options(o, 1); FAIL() << "no error"; } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--total-batch-tokens"), std::string::npos) << e.what();
  }
  o.total_batch_tokens = -1;
  o.val_every = 10;
  try { validate_train_options(o, 1); FAIL() << "no error"; } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--val-tokens"), std::string::npos) << e.what();
  }
  o.val_every = 0; o.checkpoint_every = 5;
  EXPECT_THROW(validate_train_options(o, 1), std::invalid_argument);  // no --output-dir
  o.output_dir = "/tmp/x"; o.warmup_steps = o.steps + 1;
  EXPECT_THROW(validate_train_options(o, 1), std::invalid_argument);
  o.warmup_steps = 0;
  EXPECT_NO_THROW(validate_train_options(o, 1));
  o.shuffle = true;
  o.train_loader = llmc::TrainLoaderChoice::kBos;
  try { validate_train_options(o, 1); FAIL() << "no error"; } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "--shuffle cannot be used with --train-loader bos: the BOS loader walks the "
                                     "shards in order; drop --shuffle or pass --train-loader window");
  }
  o.train_loader = llmc::TrainLoaderChoice::kWindow;
  EXPECT_NO_THROW(validate_train_options(o, 1));
  CLI::App app;
  TrainOptions parsed;
  add_train_options(app, parsed);
  EXPECT_THROW(app.parse(std::vector<std::string>{"bogus", "--overlap"}), CLI::ValidationError);
  EXPECT_THROW(app.parse(std::vector<std::string>{"documents", "--train-loader"}), CLI::ValidationError);
}

TEST(TrainOptions, SpeedrunSchedulesNeedFourSteps) {
  CLI::App app;
  TrainOptions o;
  add_train_options(app, o);
  app.parse(std::vector<std::string>{"3", "--steps", "speedrun", "--window-schedule"});  // reversed
  EXPECT_EQ(o.window_schedule, llmc::WindowScheduleKind::kSpeedrun);
  try { validate_train_options(o, 1); FAIL() << "no error"; } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--window-schedule speedrun needs --steps >= 4"), std::string::npos)
        << e.what();
  }
  o.steps = 4;
  EXPECT_NO_THROW(validate_train_options(o, 1));
  CLI::App other;
  TrainOptions bad;
  add_train_options(other, bad);
  EXPECT_THROW(other.parse(std::vector<std::string>{"sometimes", "--window-schedule"}), CLI::ValidationError);
}
