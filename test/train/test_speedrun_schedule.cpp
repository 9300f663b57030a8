// The speedrun schedules (llmc/schedule/speedrun_schedule.h) against the values the record (docs/recipes.md)
// quotes from the reference, an independent double-precision YaRN computation, and the scaled-down
// schedule that crosses every phase in a few steps; the record stretched to a run's --steps, and the
// trainer's window schedule (llmc/train/window_schedule.h) against a recording stand-in for the model.
#include "llmc/schedule/modded89_schedule.h"
#include "llmc/schedule/speedrun_schedule.h"
#include "llmc/train/window_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using llmc::SpeedrunSchedule;
using llmc::YarnState;

TEST(SpeedrunSchedule, StepCounts) {
  const SpeedrunSchedule s = SpeedrunSchedule::record();
  EXPECT_EQ(s.scheduled_steps, 2205);
  EXPECT_EQ(s.extension_steps, 40);
  EXPECT_EQ(s.total_steps(), 2245);
}

TEST(SpeedrunSchedule, LrMultiplierMatchesTheRecord) {
  const SpeedrunSchedule s = SpeedrunSchedule::record();
  for (int step = 0; step <= 1102; step++) ASSERT_EQ(s.lr_multiplier(step), 1.0) << step;
  EXPECT_LT(s.lr_multiplier(1103), 1.0);
  EXPECT_NEAR(s.lr_multiplier(1500), 0.6755, 5e-5);  // docs/recipes.md quotes four digits
  EXPECT_NEAR(s.lr_multiplier(2000), 0.2673, 5e-5);
  for (int step = 2205; step < s.total_steps(); step++)
    ASSERT_NEAR(s.lr_multiplier(step), 0.10018, 1e-12) << step;  // x = 0.9999: 0.0002 + 0.9998 * 0.1
  for (int step = 1103; step < 2205; step++) ASSERT_LT(s.lr_multiplier(step), s.lr_multiplier(step - 1)) << step;
}

TEST(SpeedrunSchedule, MuonMomentumWarmsUpAndCoolsDown) {
  const SpeedrunSchedule s = SpeedrunSchedule::record();
  EXPECT_DOUBLE_EQ(s.muon_momentum(0), 0.85);
  EXPECT_DOUBLE_EQ(s.muon_momentum(150), 0.90);
  EXPECT_NEAR(s.muon_momentum(299), 0.85 + 0.1 * 299 / 300, 1e-15);
  for (int step = 300; step <= 2195; step++) ASSERT_EQ(s.muon_momentum(step), 0.95) << step;
  EXPECT_NEAR(s.muon_momentum(2196), 0.95 - 0.1 / 50, 1e-15);
  EXPECT_NEAR(s.muon_momentum(2244), 0.95 - 0.1 * 49 / 50, 1e-15);
  EXPECT_NEAR(s.muon_momentum(2245), 0.85, 1e-15);
}

TEST(SpeedrunSchedule, WindowsChangeAt735And1470And2205) {
  const SpeedrunSchedule s = SpeedrunSchedule::record();
  struct Expected {
    int step, short_blocks, long_blocks;
  };
  for (const Expected& e :
       {Expected{0, 1, 3}, Expected{734, 1, 3}, Expected{735, 3, 7}, Expected{1469, 3, 7}, Expected{1470, 5, 11},
        Expected{2204, 5, 11}, Expected{2205, 6, 13}, Expected{2244, 6, 13}, Expected{2245, 6, 20}}) {
    EXPECT_EQ(s.windows(e.step).short_blocks, e.short_blocks) << e.step;
    EXPECT_EQ(s.windows(e.step).long_blocks, e.long_blocks) << e.step;
  }
  EXPECT_EQ(s.window_change_steps(), (std::vector<int>{735, 1470, 2205}));
  EXPECT_THROW(s.windows(2246), std::invalid_argument);
  EXPECT_THROW(s.windows(-1), std::invalid_argument);
}

TEST(SpeedrunSchedule, ValidationEvery250StepsAndAtTheEnd) {
  const SpeedrunSchedule s = SpeedrunSchedule::record();
  std::vector<int> steps;
  for (int step = 0; step <= s.total_steps(); step++)
    if (s.validates_at(step)) steps.push_back(step);
  EXPECT_EQ(steps, (std::vector<int>{0, 250, 500, 750, 1000, 1250, 1500, 1750, 2000, 2245}));
}

TEST(SpeedrunSchedule, AdamOnOddSteps) {
  EXPECT_FALSE(SpeedrunSchedule::adam_steps_at(0));
  EXPECT_TRUE(SpeedrunSchedule::adam_steps_at(1));
  EXPECT_FALSE(SpeedrunSchedule::adam_steps_at(2244));
  EXPECT_TRUE(SpeedrunSchedule::adam_steps_at(2243));
}

TEST(Yarn, AttentionScaleAtEachWindowChange) {
  const SpeedrunSchedule s = SpeedrunSchedule::record();
  EXPECT_EQ(llmc::yarn_state_at(s, 734).attention_scale, 0.1);
  EXPECT_NEAR(llmc::yarn_state_at(s, 735).attention_scale, 0.116946, 5e-7);  // docs/recipes.md: six digits
  EXPECT_NEAR(llmc::yarn_state_at(s, 1470).attention_scale, 0.127518, 5e-7);
  EXPECT_NEAR(llmc::yarn_state_at(s, 2205).attention_scale, 0.131778, 5e-7);
  // The final validation's wider window does not re-apply YaRN.
  EXPECT_EQ(llmc::yarn_state_at(s, 2245).attention_scale, llmc::yarn_state_at(s, 2205).attention_scale);
}

TEST(Yarn, InitialFrequenciesAreHalfTruncated) {
  const YarnState y = YarnState::initial(128);
  ASSERT_EQ(y.angular_frequency.size(), 64u);
  // The fp32 linspace exponent x is off by at most 15 * (1/31) * 2^-24 (the rounded step, times k <= 15)
  // plus two roundings of 2^-25: 9e-8, which moves (1/1024)^x by ln(1024) * 9e-8 = 6.3e-7 relative, plus
  // the final rounding 6e-8: 7e-7.
  for (int k = 0; k < 32; k++)
    EXPECT_NEAR(y.angular_frequency[k], std::pow(1.0 / 1024.0, k / 31.0), 7e-7 * std::pow(1.0 / 1024.0, k / 31.0)) << k;
  for (int k = 32; k < 64; k++) EXPECT_EQ(y.angular_frequency[k], 0.0f);
  EXPECT_EQ(y.attention_scale, 0.1);
}

// Each change against the formula in double: rot = 128 old w / 2pi, g = clamp((rot - 1) / 31, 0, 1),
// w *= old/new + g (1 - old/new), starting from the fp32 initial frequencies. The fp32 computation rounds
// about 6 times per change, each at most 2^-24 relative: 3 changes stay within 18 * 2^-24 ~ 1.1e-6.
TEST(Yarn, FrequenciesFollowTheInterpolationFormula) {
  const SpeedrunSchedule s = SpeedrunSchedule::record();
  const YarnState initial = YarnState::initial(128);
  std::vector<double> w(initial.angular_frequency.begin(), initial.angular_frequency.end());
  int old_window = 3;
  for (int change : s.window_change_steps()) {
    const int new_window = s.windows(change).long_blocks;
    for (double& frequency : w) {
      const double rotations = 128.0 * old_window * frequency / (2.0 * M_PI);
      const double g = std::clamp((rotations - 1.0) / 31.0, 0.0, 1.0);
      frequency *=
          static_cast<double>(old_window) / new_window + g * (1.0 - static_cast<double>(old_window) / new_window);
    }
    old_window = new_window;
    const YarnState y = llmc::yarn_state_at(s, change);
    for (int k = 0; k < 64; k++)
      ASSERT_NEAR(y.angular_frequency[k], w[k], 1.1e-6 * w[k]) << "step " << change << " k " << k;
  }
  // The highest frequency turns many times over any window: unchanged. The lowest is scaled by 3/13.
  const YarnState last = llmc::yarn_state_at(s, 2205);
  EXPECT_EQ(last.angular_frequency[0], 1.0f);
  EXPECT_NEAR(last.angular_frequency[31], (1.0 / 1024.0) * 3.0 / 13.0, 1e-6 / 1024.0);
}

// The scaled-down schedule crosses every phase of the record in 14 steps.
TEST(SpeedrunSchedule, ScaledScheduleCrossesEveryPhase) {
  const SpeedrunSchedule s = SpeedrunSchedule::scaled(12);
  EXPECT_EQ(s.total_steps(), 14);
  EXPECT_EQ(s.window_change_steps(), (std::vector<int>{4, 8, 12}));
  EXPECT_EQ(s.windows(14).long_blocks, 20);
  EXPECT_EQ(s.lr_multiplier(5), 1.0);
  EXPECT_LT(s.lr_multiplier(7), 1.0);
  EXPECT_NEAR(s.lr_multiplier(13), 0.1 + 0.9 * 0.0001 / 0.5, 1e-12);
  EXPECT_EQ(s.muon_momentum(0), 0.85);
  EXPECT_NEAR(s.muon_momentum(1), 0.90, 1e-15);
  EXPECT_EQ(s.muon_momentum(6), 0.95);
  EXPECT_NEAR(s.muon_momentum(13), 0.90, 1e-15);
  std::vector<int> validations;
  for (int step = 0; step <= s.total_steps(); step++)
    if (s.validates_at(step)) validations.push_back(step);
  EXPECT_EQ(validations, (std::vector<int>{0, 6, 12, 14}));
  EXPECT_NEAR(llmc::yarn_state_at(s, 13).attention_scale,
              llmc::yarn_state_at(SpeedrunSchedule::record(), 2205).attention_scale, 1e-15);
  EXPECT_THROW(SpeedrunSchedule::scaled(5), std::invalid_argument);
}

TEST(SpeedrunSchedule, ForTotalStepsIsTheRecordAt2245Steps) {
  const SpeedrunSchedule s = SpeedrunSchedule::for_total_steps(2245), r = SpeedrunSchedule::record();
  EXPECT_EQ(s.scheduled_steps, r.scheduled_steps);
  EXPECT_EQ(s.extension_steps, r.extension_steps);
  EXPECT_EQ(s.muon_warmup_steps, r.muon_warmup_steps);
  EXPECT_EQ(s.muon_cooldown_steps, r.muon_cooldown_steps);
  EXPECT_EQ(s.validation_every, r.validation_every);
  EXPECT_EQ(s.window_change_steps(), (std::vector<int>{735, 1470, 2205}));
  // The untimed warm-up: 0, 1 and both parities either side of each change.
  EXPECT_EQ(s.warmup_steps(),
            (std::vector<int>{0, 1, 733, 734, 735, 736, 1468, 1469, 1470, 1471, 2203, 2204, 2205, 2206}));
  EXPECT_EQ(s.describe(),
            "2205 scheduled + 40 extension steps, long window 3/7/11/13 blocks from schedule steps 0/735/1470/2205");
}

// Each phase keeps its share of the run: 1000 steps hold 1000 * 2205 / 2245 = 982.2 scheduled steps,
// 300 / 2245 = 133.6 warm-up, 50 / 2245 = 22.3 cool-down and 250 / 2245 = 111.4 steps between validations.
TEST(SpeedrunSchedule, ForTotalStepsStretchesEveryPhase) {
  const SpeedrunSchedule s = SpeedrunSchedule::for_total_steps(1000);
  EXPECT_EQ(s.scheduled_steps, 982);
  EXPECT_EQ(s.extension_steps, 18);
  EXPECT_EQ(s.muon_warmup_steps, 134);
  EXPECT_EQ(s.muon_cooldown_steps, 22);
  EXPECT_EQ(s.validation_every, 111);
  // 8 steps: round(7.86) = 8 scheduled leaves no extension, so 7 + 1; windows change at int(3 s / 7).
  const SpeedrunSchedule few = SpeedrunSchedule::for_total_steps(8);
  EXPECT_EQ(few.scheduled_steps, 7);
  EXPECT_EQ(few.extension_steps, 1);
  EXPECT_EQ(few.window_change_steps(), (std::vector<int>{3, 5, 7}));
  EXPECT_EQ(few.windows(8).long_blocks, 20);
  EXPECT_EQ(few.muon_warmup_steps, 1);
  EXPECT_EQ(few.muon_cooldown_steps, 1);
  EXPECT_EQ(few.lr_multiplier(3), 1.0);                                   // x = 3/7 < 0.5
  EXPECT_NEAR(few.lr_multiplier(4), 1.0 - 0.9 * (4.0 / 7 - 0.5) / 0.5, 1e-15);  // linear from 1 to 0.1
  EXPECT_NEAR(llmc::yarn_state_at(few, 7).attention_scale, 0.131778, 5e-7);    // every YaRN change, as the record
  EXPECT_EQ(SpeedrunSchedule::for_total_steps(4).window_change_steps(), (std::vector<int>{1, 2, 3}));
  EXPECT_THROW(SpeedrunSchedule::for_total_steps(3), std::invalid_argument);
}

// A stand-in for the model: records each call and keeps its own YaRN state, as the speedrun model does.
struct RecordingModel {
  struct Call {
    int short_blocks, long_blocks;
    bool yarn;
  };
  std::vector<Call> calls;
  YarnState yarn = YarnState::initial(16);
  int long_blocks = 3;
  llmc::WindowSchedule::SetWindows setter(int block_size) {
    return [this, block_size](const llmc::AttentionWindows& w, bool apply_yarn) {
      calls.push_back(Call{w.short_blocks, w.long_blocks, apply_yarn});
      if (apply_yarn && w.long_blocks != long_blocks) yarn.apply(long_blocks, w.long_blocks, block_size);
      long_blocks = w.long_blocks;
      return yarn.attention_scale;
    };
  }
};

TEST(WindowSchedule, ChangesWithYarnAtTheirOwnStepsAndWidensForTheFinalValidation) {
  const SpeedrunSchedule s = SpeedrunSchedule::for_total_steps(8);
  RecordingModel model;
  llmc::WindowSchedule windows(llmc::WindowPlan::of(s), model.setter(8));
  std::vector<std::string> log;
  for (int step = 0; step <= 8; step++) {
    const size_t before = model.calls.size();
    for (const std::string& line : windows.before_step(step)) log.push_back(line);
    const bool changes = step == 3 || step == 5 || step == 7 || step == 8;
    EXPECT_EQ(model.calls.size(), before + (changes ? 1 : 0)) << step;
    if (step < 8) {
      EXPECT_EQ(model.long_blocks, s.windows(step).long_blocks) << step;
    }
  }
  ASSERT_EQ(model.calls.size(), 4u);
  EXPECT_TRUE(model.calls[0].yarn && model.calls[1].yarn && model.calls[2].yarn);
  EXPECT_FALSE(model.calls[3].yarn);  // the final validation's window: no YaRN
  EXPECT_EQ(model.calls[3].long_blocks, 20);
  EXPECT_EQ(model.calls[3].short_blocks, 6);
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[0], "# windows: step 4 (schedule step 3) short 3 long 7 blocks, attn_scale 0.116946 (YaRN)");
  EXPECT_EQ(log[1], "# windows: step 6 (schedule step 5) short 5 long 11 blocks, attn_scale 0.127518 (YaRN)");
  EXPECT_EQ(log[2], "# windows: step 8 (schedule step 7) short 6 long 13 blocks, attn_scale 0.131778 (YaRN)");
  EXPECT_EQ(log[3], "# windows: final validation short 6 long 20 blocks, attn_scale 0.131778");
  EXPECT_THROW(windows.before_step(7), std::invalid_argument);  // steps do not go back
}

// A resumed run's first step walks every change before it, in order, each with YaRN: the same RoPE
// state as a run that went through them (YaRN of 3 -> 11 at once would differ from 3 -> 7 -> 11).
TEST(WindowSchedule, ResumeAppliesEveryEarlierChangeInOrder) {
  const SpeedrunSchedule s = SpeedrunSchedule::for_total_steps(8);
  RecordingModel through, resumed;
  const llmc::WindowPlan plan = llmc::WindowPlan::of(s);
  llmc::WindowSchedule all(plan, through.setter(8)), later(plan, resumed.setter(8));
  for (int step = 0; step <= 6; step++) all.before_step(step);
  EXPECT_EQ(later.before_step(6).size(), 2u);
  ASSERT_EQ(resumed.calls.size(), 2u);
  EXPECT_EQ(resumed.calls[0].long_blocks, 7);
  EXPECT_EQ(resumed.calls[1].long_blocks, 11);
  EXPECT_EQ(resumed.yarn.angular_frequency, through.yarn.angular_frequency);
  EXPECT_EQ(resumed.yarn.attention_scale, through.yarn.attention_scale);
}

// The 2026-07-17 schedule through the same driver: YaRN at its stage starts (423, 847, 1270 of the record),
// the final validation's 20 blocks without it.
TEST(WindowSchedule, DrivesThe2026RecordsStages) {
  const llmc::Modded89Schedule s = llmc::Modded89Schedule::record();
  const llmc::WindowPlan plan = llmc::WindowPlan::of(s);
  EXPECT_EQ(plan.total_steps(), 1285);
  EXPECT_EQ(plan.change_steps(), (std::vector<int>{423, 847, 1270}));
  RecordingModel model;
  llmc::WindowSchedule windows(plan, model.setter(128));
  std::vector<std::string> log;
  for (int step : {0, 500, 1285})
    for (const std::string& line : windows.before_step(step)) log.push_back(line);
  ASSERT_EQ(log.size(), 4u);
  EXPECT_EQ(log[0], "# windows: step 424 (schedule step 423) short 3 long 7 blocks, attn_scale 0.116946 (YaRN)");
  EXPECT_EQ(log[1], "# windows: step 848 (schedule step 847) short 5 long 11 blocks, attn_scale 0.127518 (YaRN)");
  EXPECT_EQ(log[2], "# windows: step 1271 (schedule step 1270) short 6 long 13 blocks, attn_scale 0.131778 (YaRN)");
  EXPECT_EQ(log[3], "# windows: final validation short 6 long 20 blocks, attn_scale 0.131778");
  EXPECT_THROW(windows.before_step(1286), std::invalid_argument);
}

TEST(SpeedrunSchedule, ValidateNamesTheBadField) {
  SpeedrunSchedule s;
  s.long_windows.clear();
  try {
    s.validate();
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("long_windows"), std::string::npos) << e.what();
  }
}

}  // namespace
