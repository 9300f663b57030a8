// Tests of the speedrun model's shapes and structure (block roles, scalar layout, presets, validation)
// against the record's list in docs/recipes.md, and of the RoPE/YaRN state against the published attention
// scales and a double-precision evaluation of the YaRN formula.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "llmc/model/modded44/speedrun_config.h"
#include "llmc/model/modded44/yarn.h"

namespace {

TEST(SpeedrunStructure, TwelveBlocksAreTheRecord) {
  const llmc::SpeedrunStructure s = llmc::speedrun_structure(12);
  ASSERT_EQ(s.blocks.size(), 12u);
  EXPECT_FALSE(s.blocks[0].attention);
  EXPECT_FALSE(s.blocks[0].mlp);
  for (int i = 1; i < 12; i++) {
    EXPECT_EQ(s.blocks[i].attention, i != 7) << "block " << i;
    EXPECT_TRUE(s.blocks[i].mlp) << "block " << i;
    EXPECT_EQ(s.blocks[i].long_window, i == 4 || i == 11) << "block " << i;
    EXPECT_EQ(s.blocks[i].push_skip, i >= 1 && i <= 5) << "block " << i;
    EXPECT_EQ(s.blocks[i].pop_skip, i >= 6 && i <= 10 ? i - 6 : -1) << "block " << i;
  }
  const int expected_ve[12] = {-1, 1, 2, -1, -1, -1, -1, -1, -1, 0, 1, 2};
  for (int i = 0; i < 12; i++) EXPECT_EQ(s.blocks[i].value_embed, expected_ve[i]) << "block " << i;
  EXPECT_EQ(s.backout_block, 8);
}

TEST(SpeedrunStructure, ScaledRulesKeepTheShapeAndRejectBadDepths) {
  for (int L : {8, 10, 14, 16, 24}) {
    const llmc::SpeedrunStructure s = llmc::speedrun_structure(L);
    int pushes = 0, pops = 0, attention_free = 0, long_windows = 0;
    for (int i = 1; i < L; i++) {
      pushes += s.blocks[i].push_skip;
      pops += s.blocks[i].pop_skip >= 0;
      attention_free += !s.blocks[i].attention;
      long_windows += s.blocks[i].attention && s.blocks[i].long_window;
      // A value embedding only where there is attention to use it.
      if (s.blocks[i].value_embed >= 0) {
        EXPECT_TRUE(s.blocks[i].attention) << "L=" << L << " block " << i;
      }
    }
    EXPECT_EQ(pushes, L / 2 - 1) << "L=" << L;
    EXPECT_EQ(pops, pushes) << "L=" << L;
    EXPECT_EQ(attention_free, 1) << "L=" << L;
    EXPECT_EQ(long_windows, 2) << "L=" << L;
    EXPECT_GT(s.backout_block, 0);
    EXPECT_LT(s.backout_block, L);
  }
  for (int L : {0, 6, 7, 13}) EXPECT_THROW(llmc::speedrun_structure(L), std::invalid_argument) << "L=" << L;
}

TEST(SpeedrunScalars, LayoutOfTheSixtyFourVector) {
  const llmc::SpeedrunScalarIndex index{12};
  EXPECT_EQ(index.count(), 64);
  EXPECT_EQ(index.skip_weight(4), 4);
  EXPECT_EQ(index.block_lambda(0, 0), 12);
  EXPECT_EQ(index.block_lambda(11, 1), 35);
  EXPECT_EQ(index.sa_lambda(0, 0), 36);
  EXPECT_EQ(index.sa_lambda(11, 1), 59);
  EXPECT_EQ(index.smear_lambda(), 60);
  EXPECT_EQ(index.backout_lambda(), 61);
  EXPECT_EQ(llmc::SpeedrunScalarIndex{8}.count(), 48);  // 42 rounded up to a multiple of 8
}

TEST(SpeedrunConfig, PresetsAndValidation) {
  const llmc::SpeedrunConfig record = llmc::speedrun_config_from_name("speedrun");
  EXPECT_EQ(record.channels(), 768);
  EXPECT_EQ(record.hidden(), 3072);
  EXPECT_EQ(record.vocab_size, 50304);
  EXPECT_NO_THROW(llmc::validate_speedrun_config(record));
  EXPECT_NO_THROW(llmc::validate_speedrun_config(llmc::speedrun_config_from_name("speedrun-tiny")));
  EXPECT_THROW(llmc::speedrun_config_from_name("speedrun-huge"), std::invalid_argument);
  llmc::SpeedrunConfig bad = record;
  bad.head_dim = 130;
  EXPECT_THROW(llmc::validate_speedrun_config(bad), std::invalid_argument);
  bad = record;
  bad.num_blocks = 11;
  EXPECT_THROW(llmc::validate_speedrun_config(bad), std::invalid_argument);
  bad = record;
  bad.num_heads = 1, bad.head_dim = 8;  // C = 8 < the gate width 12
  EXPECT_THROW(llmc::validate_speedrun_config(bad), std::invalid_argument);
  // A corrupt header's H x D does not fit an int (found by fuzz_state_file and fuzz_speedrun_model_file:
  // the message was built with a signed overflow before the size checks ran).
  bad = record;
  bad.num_heads = 65536, bad.head_dim = 786432;
  EXPECT_NE(llmc::describe_speedrun_config(bad).find(" C=51539607552 "), std::string::npos)
      << llmc::describe_speedrun_config(bad);
  EXPECT_THROW(llmc::validate_speedrun_config(bad), std::invalid_argument);
}

TEST(Yarn, ResetFrequenciesAreHalfTruncatedBase1024) {
  const llmc::Yarn yarn(128);
  const std::vector<float>& w = yarn.frequencies();
  ASSERT_EQ(w.size(), 64u);
  for (int k = 0; k < 32; k++) EXPECT_NEAR(w[k], std::pow(1024.0, -k / 31.0), 0x1p-24 * std::pow(1024.0, -k / 31.0));
  EXPECT_EQ(w[0], 1.0f);
  EXPECT_EQ(w[31], 1.0f / 1024.0f);
  for (int k = 32; k < 64; k++) EXPECT_EQ(w[k], 0.0f);
  EXPECT_EQ(yarn.attn_scale(), 0.1);
  EXPECT_THROW(llmc::Yarn(126), std::invalid_argument);
}

TEST(Yarn, ScheduleGivesThePublishedAttentionScales) {
  llmc::Yarn yarn(128);
  yarn.apply(3, 7, 128);
  EXPECT_NEAR(yarn.attn_scale(), 0.116946, 5e-7);
  yarn.apply(7, 11, 128);
  EXPECT_NEAR(yarn.attn_scale(), 0.127518, 5e-7);
  yarn.apply(11, 13, 128);
  EXPECT_NEAR(yarn.attn_scale(), 0.131778, 5e-7);
  EXPECT_THROW(yarn.apply(0, 3, 128), std::invalid_argument);
}

TEST(Yarn, FrequencyUpdateMatchesTheFormulaInDouble) {
  llmc::Yarn yarn(128);
  const std::vector<float> before = yarn.frequencies();
  yarn.apply(3, 7, 128);
  for (int k = 0; k < 64; k++) {
    const double w = before[k];
    const double rotations = 128.0 * 3.0 * w / (2.0 * M_PI);
    const double g = std::fmin(std::fmax((rotations - 1.0) / 31.0, 0.0), 1.0);
    const double expected = w * (3.0 / 7.0 + g * (1.0 - 3.0 / 7.0));
    // A handful of fp32 roundings (rotations, weight, factor, product): well inside 2^-20 relative.
    EXPECT_NEAR(yarn.frequencies()[k], expected, 0x1p-20 * expected) << "k=" << k;
  }
  // The fastest frequency makes > 32 turns over the window and is kept; the slowest is interpolated fully.
  EXPECT_EQ(yarn.frequencies()[0], 1.0f);
  EXPECT_NEAR(yarn.frequencies()[31], before[31] * 3.0 / 7.0, 1e-7 * before[31]);
  yarn.reset();
  EXPECT_EQ(yarn.frequencies(), before);
  EXPECT_EQ(yarn.attn_scale(), 0.1);
}

}  // namespace
