// The 2026-07-17 schedule (llmc/schedule/modded89_schedule.h) against the values SPEEDRUN89.md publishes for the
// record (sections 5-6: the lr factor at its quoted steps, the stage boundaries, the untie step, the YaRN attention
// scales, the warm-up's steps), the loss weights computed by hand from its linear ramps, and the record stretched
// to other run lengths.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "llmc/schedule/modded89_schedule.h"

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

}  // namespace
