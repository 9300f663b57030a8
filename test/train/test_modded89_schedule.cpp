// The 2026-07-17 schedule (llmc/schedule/modded89_schedule.h) against the values SPEEDRUN89.md publishes for the
// record (sections 5-6: the lr factor at its quoted steps, the stage boundaries, the untie step, the YaRN attention
// scales, the warm-up's steps), the loss weights computed by hand from its linear ramps, and the record stretched
// to other run lengths; the trainer's loss-weight schedule (llmc/train/loss_schedule.h) against a recording
// stand-in for the model, and its stage batches (llmc/train/batch_schedule.h).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/schedule/modded89_schedule.h"
#include "llmc/train/batch_schedule.h"
#include "llmc/train/loss_schedule.h"

namespace {

using llmc::Modded89Schedule;

TEST(Modded89Schedule, RecordStagesAndUntie) {
  const Modded89Schedule s = Modded89Schedule::record();
  EXPECT_EQ(s.total_steps(), 1285);
  EXPECT_EQ(s.stage_starts(), (std::vector<int>{0, 423, 847, 1270}));
  EXPECT_EQ(s.untie_step(), 847);
  EXPECT_EQ(s.describe(), "1270 scheduled + 15 extension steps, stages from 0/423/847/1270, untie at 847");
  const int firsts[4] = {0, 423, 847, 1270};
  const int batches[4] = {131072, 262144, 393216, 393216}, cuts[4] = {896, 2048, 2048, 2048};
  const int bounds[4] = {64, 96, 128, 128};
  for (int i = 0; i < 4; i++)
    for (int step : {firsts[i], i < 3 ? firsts[i + 1] - 1 : 1284}) {
      EXPECT_EQ(s.position(step).stage, i) << step;
      EXPECT_EQ(s.stage(step).batch_tokens, batches[i]) << step;
      EXPECT_EQ(s.stage(step).document_cut, cuts[i]) << step;
      EXPECT_EQ(s.stage(step).cu_seqlens_entries, bounds[i]) << step;
    }
  EXPECT_EQ(s.position(1285).stage, 3);
  EXPECT_EQ(s.position(1285).t, 1.0);
}

// SPEEDRUN89.md section 5 quotes four digits.
TEST(Modded89Schedule, LrFactorMatchesThePublishedValues) {
  const Modded89Schedule s = Modded89Schedule::record();
  for (int step = 0; step <= 422; step++) ASSERT_EQ(s.lr_multiplier(step), 1.0) << step;
  for (int step = 423; step <= 508; step++) ASSERT_EQ(s.lr_multiplier(step), 1.52) << step;  // 508: t = 0
  EXPECT_LT(s.lr_multiplier(509), 1.52);
  EXPECT_NEAR(s.lr_multiplier(600), 1.3546, 5e-5);
  EXPECT_NEAR(s.lr_multiplier(846), 0.9123, 5e-5);
  EXPECT_NEAR(s.lr_multiplier(847), 1.0271, 5e-5);
  EXPECT_NEAR(s.lr_multiplier(1000), 0.7098, 5e-5);
  for (int step = 1270; step <= 1285; step++) ASSERT_EQ(s.lr_multiplier(step), 0.15) << step;
}

TEST(Modded89Schedule, MuonMomentumWarmsUpAndCoolsDown) {
  const Modded89Schedule s = Modded89Schedule::record();
  EXPECT_EQ(s.muon_momentum(0), 0.85);
  EXPECT_NEAR(s.muon_momentum(150), 0.90, 1e-15);
  for (int step = 300; step <= 1235; step++) ASSERT_EQ(s.muon_momentum(step), 0.95) << step;
  EXPECT_NEAR(s.muon_momentum(1260), 0.90, 1e-15);   // 0.95 - 25/50 x 0.1
  EXPECT_NEAR(s.muon_momentum(1284), 0.852, 1e-15);  // 0.95 - 49/50 x 0.1
}

// Section 3's ramps by hand: stage 1 [1, 0.5, 0.25 -> 0] with prefix 0.25, stage 2 [1, 0.5 -> 0] with prefix
// 0.25 -> 0, then [1] without prefix; t = (step - start) / (end - start).
TEST(Modded89Schedule, LossWeightsFollowTheStagesRamps) {
  const Modded89Schedule s = Modded89Schedule::record();
  const auto expect_weights = [&](int step, std::vector<double> next, double prefix) {
    const llmc::Modded89LossWeights w = s.loss_weights(step);
    ASSERT_EQ(w.next.size(), next.size()) << step;
    for (size_t k = 0; k < next.size(); k++) EXPECT_NEAR(w.next[k], next[k], 1e-15) << step << " k=" << k;
    EXPECT_NEAR(w.prefix, prefix, 1e-15) << step;
  };
  expect_weights(0, {1.0, 0.5, 0.25}, 0.25);
  expect_weights(141, {1.0, 0.5, 0.25 * (1.0 - 141.0 / 423.0)}, 0.25);
  expect_weights(422, {1.0, 0.5, 0.25 / 423.0}, 0.25);
  expect_weights(423, {1.0, 0.5}, 0.25);
  expect_weights(635, {1.0, 0.25}, 0.125);  // t = 212 / 424
  expect_weights(846, {1.0, 0.5 / 424.0}, 0.25 / 424.0);
  expect_weights(847, {1.0}, 0.0);
  expect_weights(1285, {1.0}, 0.0);
}

// Section 6: windows (1,3) (3,7) (5,11) (6,13), the final validation's long window 20 without YaRN, and YaRN's
// attention scales at each change (six digits published).
TEST(Modded89Schedule, WindowsAndYarnAtEachChange) {
  const Modded89Schedule s = Modded89Schedule::record();
  const int shorts[4] = {1, 3, 5, 6}, longs[4] = {3, 7, 11, 13}, firsts[4] = {0, 423, 847, 1270};
  for (int i = 0; i < 4; i++) {
    EXPECT_EQ(s.windows(firsts[i]).short_blocks, shorts[i]);
    EXPECT_EQ(s.windows(firsts[i]).long_blocks, longs[i]);
  }
  EXPECT_EQ(s.windows(1285).short_blocks, 6);
  EXPECT_EQ(s.windows(1285).long_blocks, 20);
  EXPECT_THROW(s.windows(1286), std::invalid_argument);
  EXPECT_EQ(s.window_change_steps(), (std::vector<int>{423, 847, 1270}));
  const double scales[4] = {0.1, 0.116946, 0.127518, 0.131778};
  for (int i = 0; i < 4; i++) {
    EXPECT_NEAR(llmc::yarn_state_at(s, firsts[i], 128).attention_scale, scales[i], 1e-6) << firsts[i];
    if (i > 0) {  // unchanged until the change
      EXPECT_EQ(llmc::yarn_state_at(s, firsts[i] - 1, 128).attention_scale,
                llmc::yarn_state_at(s, firsts[i - 1], 128).attention_scale);
    }
  }
  EXPECT_EQ(llmc::yarn_state_at(s, 1285, 128).attention_scale, llmc::yarn_state_at(s, 1270, 128).attention_scale);
}

TEST(Modded89Schedule, WarmupValidationAndAdamSteps) {
  const Modded89Schedule s = Modded89Schedule::record();
  EXPECT_EQ(s.warmup_steps(), (std::vector<int>{0, 1, 421, 422, 423, 424, 845, 846, 847, 848, 1268, 1269, 1270, 1271}));
  for (int step : {0, 250, 500, 750, 1000, 1250, 1285}) EXPECT_TRUE(s.validates_at(step)) << step;
  for (int step : {1, 249, 1284}) EXPECT_FALSE(s.validates_at(step)) << step;
  EXPECT_FALSE(Modded89Schedule::adam_steps_at(846));
  EXPECT_TRUE(Modded89Schedule::adam_steps_at(s.untie_step()));
}

// Every phase keeps its share of the run: at 1,285 steps the record itself; at 100 steps 99 scheduled (round(1270 x
// 100 / 1285) = round(98.83)) and one extension step; at 4 steps one step per stage; fewer refused.
TEST(Modded89Schedule, StretchedToTheRunsSteps) {
  const Modded89Schedule record = Modded89Schedule::record(), same = Modded89Schedule::for_total_steps(1285);
  EXPECT_EQ(same.describe(), record.describe());
  EXPECT_EQ(same.muon_warmup_steps, 300);
  EXPECT_EQ(same.muon_cooldown_steps, 50);
  EXPECT_EQ(same.validation_every, 250);
  for (int step = 0; step <= 1285; step++) ASSERT_EQ(same.lr_multiplier(step), record.lr_multiplier(step)) << step;

  const Modded89Schedule hundred = Modded89Schedule::for_total_steps(100);
  EXPECT_EQ(hundred.scheduled_steps, 99);
  EXPECT_EQ(hundred.extension_steps, 1);
  EXPECT_EQ(hundred.stage_starts(), (std::vector<int>{0, 33, 66, 99}));
  EXPECT_EQ(hundred.untie_step(), 67);
  EXPECT_EQ(hundred.muon_warmup_steps, 23);  // round(300 x 100 / 1285) = round(23.35)
  EXPECT_EQ(hundred.validation_every, 19);   // round(19.46)
  EXPECT_EQ(hundred.lr_multiplier(99), 0.15);

  const Modded89Schedule four = Modded89Schedule::for_total_steps(4);
  EXPECT_EQ(four.stage_starts(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(four.untie_step(), 3);
  EXPECT_EQ(four.window_change_steps(), (std::vector<int>{1, 2, 3}));
  EXPECT_THROW(Modded89Schedule::for_total_steps(3), std::invalid_argument);
}

// What the trainer's --loss-schedule modded89 sets before each step: the ramps of LossWeightsFollowTheStagesRamps
// in float, the count of next-token terms dropping 3 -> 2 -> 1, and a log line at each stage's first step only.
struct RecordedWeights {
  std::vector<llmc::MtpLossWeights> set;
  llmc::LossWeightSchedule::SetWeights setter() {
    return [this](const llmc::MtpLossWeights& weights) { set.push_back(weights); };
  }
};

void expect_set(const llmc::MtpLossWeights& w, std::vector<float> next, float prefix, int step) {
  ASSERT_EQ(w.tokens, static_cast<int>(next.size())) << step;
  for (size_t k = 0; k < next.size(); k++) EXPECT_EQ(w.next[k], next[k]) << step << " k=" << k;
  EXPECT_EQ(w.prefix, prefix) << step;
}

TEST(LossWeightSchedule, SetsEachStepsWeightsAndLogsEachStage) {
  RecordedWeights model;
  llmc::LossWeightSchedule schedule(Modded89Schedule::record(), model.setter());
  std::vector<std::string> lines;
  for (int step = 0; step < 1285; step++)
    for (const std::string& line : schedule.before_step(step)) lines.push_back(line);
  ASSERT_EQ(model.set.size(), 1285u);
  expect_set(model.set[0], {1.0f, 0.5f, 0.25f}, 0.25f, 0);
  expect_set(model.set[422], {1.0f, 0.5f, static_cast<float>(0.25 / 423.0)}, 0.25f, 422);
  expect_set(model.set[423], {1.0f, 0.5f}, 0.25f, 423);
  expect_set(model.set[846], {1.0f, static_cast<float>(0.5 / 424.0)}, static_cast<float>(0.25 / 424.0), 846);
  expect_set(model.set[847], {1.0f}, 0.0f, 847);
  expect_set(model.set[1284], {1.0f}, 0.0f, 1284);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0], "# loss weights: step 1 (schedule step 0) stage 1: next tokens 1 0.5 0.25 -> 1 0.5 0, "
                      "prefix 0.25 -> 0.25");
  EXPECT_EQ(lines[1], "# loss weights: step 424 (schedule step 423) stage 2: next tokens 1 0.5 -> 1 0, "
                      "prefix 0.25 -> 0");
  EXPECT_EQ(lines[2], "# loss weights: step 848 (schedule step 847) stage 3: next tokens 1 -> 1, prefix 0 -> 0");
  EXPECT_EQ(lines[3], "# loss weights: step 1271 (schedule step 1270) extension: next tokens 1 -> 1, prefix 0 -> 0");
  EXPECT_THROW(schedule.before_step(1285), std::invalid_argument);
  EXPECT_THROW(schedule.before_step(-1), std::invalid_argument);
}

// A run resumed mid-stage sets what one that ran through sets, and says where it picked the ramp up.
TEST(LossWeightSchedule, ResumedMidStageSetsTheSameWeights) {
  RecordedWeights through, resumed;
  llmc::LossWeightSchedule all(Modded89Schedule::for_total_steps(100), through.setter());
  llmc::LossWeightSchedule later(Modded89Schedule::for_total_steps(100), resumed.setter());
  for (int step = 0; step < 100; step++) all.before_step(step);
  const std::vector<std::string> first = later.before_step(40);  // stage 2 is [33, 66) at 100 steps
  ASSERT_EQ(first.size(), 1u);
  EXPECT_NE(first[0].find("stage 2: next tokens 1 0.3939 -> 1 0, prefix 0.197 -> 0 (resumed mid-stage)"),
            std::string::npos)
      << first[0];  // t = 7 / 33: 0.5 x 26 / 33 and 0.25 x 26 / 33
  for (int step = 41; step < 100; step++) later.before_step(step);
  ASSERT_EQ(resumed.set.size(), 60u);
  for (int step = 40; step < 100; step++) {
    const llmc::MtpLossWeights& a = resumed.set[static_cast<size_t>(step - 40)];
    const llmc::MtpLossWeights& b = through.set[static_cast<size_t>(step)];
    ASSERT_EQ(a.tokens, b.tokens) << step;
    for (int k = 0; k < a.tokens; k++) EXPECT_EQ(a.next[k], b.next[k]) << step;
    EXPECT_EQ(a.prefix, b.prefix) << step;
  }
}

TEST(LossWeightSchedule, RefusesMoreTermsThanTheKernelHas) {
  llmc::Modded89LossWeights four{{1.0, 0.5, 0.25, 0.125}, 0.0}, none{{}, 0.25};
  EXPECT_THROW(llmc::mtp_loss_weights(four), std::invalid_argument);
  EXPECT_THROW(llmc::mtp_loss_weights(none), std::invalid_argument);
}

// Section 6 at the record's --seq-len 49,152 (8 ranks x 49,152 = 393,216 tokens): 16,384 / 32,768 / 49,152 tokens
// per sequence, documents cut to 896 then 2,048; a line where the shape changes (not at the extension: the same).
TEST(BatchSchedule, TheRecordsStagesAsSharesOfTheLastStagesSequence) {
  llmc::BatchSchedule batches(Modded89Schedule::record(), 49152);
  const auto expect_shape = [&](int step, int seq_len, int cut) {
    EXPECT_EQ(batches.shape(step).seq_len, seq_len) << step;
    EXPECT_EQ(batches.shape(step).document_cut, cut) << step;
  };
  expect_shape(0, 16384, 896);
  expect_shape(422, 16384, 896);
  expect_shape(423, 32768, 2048);
  expect_shape(846, 32768, 2048);
  expect_shape(847, 49152, 2048);
  expect_shape(1284, 49152, 2048);
  EXPECT_DOUBLE_EQ(batches.tokens_fraction(0), 1.0 / 3.0);
  EXPECT_EQ(batches.describe(),
            "T 16384/32768/49152/49152 tokens per sequence, documents cut to 896/2048/2048/2048 by stage");
  std::vector<std::string> lines;
  for (int step = 0; step < 1285; step++)
    for (const std::string& line : batches.changes(step)) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "# batch: step 1 (schedule step 0) T=16384 tokens per sequence, documents cut to 896 tokens");
  EXPECT_EQ(lines[1], "# batch: step 424 (schedule step 423) T=32768 tokens per sequence, documents cut to 2048 "
                      "tokens");
  EXPECT_EQ(lines[2], "# batch: step 848 (schedule step 847) T=49152 tokens per sequence, documents cut to 2048 "
                      "tokens");
  llmc::BatchSchedule resumed(Modded89Schedule::record(), 49152);
  EXPECT_EQ(resumed.changes(600).size(), 1u);  // the first step a run sets says its shape
  EXPECT_EQ(llmc::BatchSchedule(Modded89Schedule::for_total_steps(6), 48).shape(0).seq_len, 16);
  EXPECT_THROW(llmc::BatchSchedule(Modded89Schedule::record(), 64), std::invalid_argument);  // not a multiple of 3
}

}  // namespace
