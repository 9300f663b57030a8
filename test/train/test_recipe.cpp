// --recipe (llmc/train/recipe.h) through the trainer's own options: the modded-nanogpt 2026-07-17 and 2025-10-31
// records' values against the records (SPEEDRUN89.md, docs/recipes.md), llm.c's GPT-2 124M run against
// scripts/run_gpt2_124m.sh, and options given explicitly winning over the recipe.
#include "llmc/train/recipe.h"

#include <gtest/gtest.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/train/options.h"

namespace {

using llmc::TrainOptions;

// Parses `args` as the trainer does (CLI11 takes a reversed vector).
TrainOptions parse(std::vector<std::string> args, std::string* options_text = nullptr) {
  CLI::App app;
  TrainOptions options;
  llmc::add_train_options(app, options);
  std::reverse(args.begin(), args.end());
  app.parse(args);
  if (options_text != nullptr) *options_text = app.config_to_str(/*default_also=*/true, false);
  return options;
}

TEST(Recipe, ModdedRecordMatchesSpeedrunMd) {
  std::string text;
  const TrainOptions o = parse({"--recipe", "modded-2025-10-31"}, &text);
  EXPECT_EQ(o.model, "speedrun");
  EXPECT_EQ(o.steps, 2205 + 40);  // section 3: 2,205 scheduled + 40 extension steps
  // 262,144 tokens per step = 8 ranks x one packed sequence of 32,768 tokens; 8 / ranks micro-steps on fewer.
  EXPECT_EQ(o.batch_size, 1);
  EXPECT_EQ(o.seq_len, 32768);
  EXPECT_EQ(o.total_batch_tokens, 262144);
  EXPECT_EQ(o.grad_accum_steps(8), 1);
  EXPECT_EQ(o.grad_accum_steps(1), 8);
  EXPECT_EQ(o.lr_schedule, llmc::LrDecay::kSpeedrun);
  EXPECT_EQ(o.window_schedule, llmc::WindowScheduleKind::kSpeedrun);
  EXPECT_EQ(o.loss_schedule, llmc::LossScheduleKind::kFixed);
  EXPECT_EQ(o.warmup_steps, 0);
  EXPECT_EQ(o.grad_clip, 0.0);  // section 2: no gradient clipping
  EXPECT_EQ(o.loss_reduction, llmc::LossReduction::kSum);  // the training loss is the SUM over the rank's tokens
  EXPECT_EQ(o.lr, 1.0);         // the speedrun optimizer's base lrs times 1
  EXPECT_EQ(o.val_every, 250);  // section 3: every 250 steps and at the end, on 10,485,760 tokens
  EXPECT_EQ(o.val_tokens, 10485760);
  EXPECT_EQ(o.train_loader, llmc::TrainLoaderChoice::kBos);  // section 3: whole documents from their BOS, packed
  EXPECT_NO_THROW(llmc::validate_train_options(o, 8));
  EXPECT_NO_THROW(llmc::validate_train_options(o, 1));
  // The log's option list shows the values in force, not the trainer's defaults.
  EXPECT_NE(text.find("steps=2245\n"), std::string::npos) << text;
  EXPECT_NE(text.find("lr-schedule=\"speedrun\"\n"), std::string::npos) << text;
}

// SPEEDRUN89.md section 6: 1,270 + 15 steps; 393,216 tokens in the last stages = 8 ranks x 49,152, the stages a
// third and two thirds of it; validation every 250 steps on 10,485,760 tokens (in 80 sequences of 16,384 per rank
// on 8 ranks); the model's optimizer and FP8 head by their auto choices.
TEST(Recipe, Modded2026RecordMatchesSpeedrun89Md) {
  std::string text;
  const TrainOptions o = parse({"--recipe", "modded-2026-07-17"}, &text);
  EXPECT_EQ(o.model, "modded89");
  EXPECT_EQ(o.steps, 1270 + 15);
  EXPECT_EQ(o.batch_size, 1);
  EXPECT_EQ(o.seq_len, 49152);
  EXPECT_EQ(o.total_batch_tokens, 393216);
  EXPECT_EQ(o.grad_accum_steps(8), 1);
  EXPECT_EQ(o.grad_accum_steps(1), 8);
  EXPECT_EQ(o.lr_schedule, llmc::LrDecay::kModded89);
  EXPECT_EQ(o.window_schedule, llmc::WindowScheduleKind::kModded89);
  EXPECT_EQ(o.loss_schedule, llmc::LossScheduleKind::kModded89);
  EXPECT_EQ(o.batch_schedule, llmc::BatchScheduleKind::kModded89);
  EXPECT_EQ(o.warmup_steps, 0);
  EXPECT_EQ(o.grad_clip, 0.0);
  EXPECT_EQ(o.loss_reduction, llmc::LossReduction::kSum);
  EXPECT_EQ(o.lr, 1.0);
  EXPECT_EQ(o.val_every, 250);
  EXPECT_EQ(o.val_tokens, 10485760);
  EXPECT_EQ(o.validation_seq_len(), 262144);  // the record's sequence per rank, longer than the buffers
  EXPECT_EQ(o.val_tokens % (8 * 262144), 0);
  EXPECT_EQ(o.train_loader, llmc::TrainLoaderChoice::kBos);
  EXPECT_EQ(o.optimizer, llmc::OptimizerChoice::kAuto);
  // The untimed warm-up restores the starting state from a checkpoint in --output-dir: refused without one.
  EXPECT_TRUE(o.untimed_warmup);
  EXPECT_THROW(llmc::validate_train_options(o, 8), std::invalid_argument);
  const TrainOptions with_dir = parse({"--recipe", "modded-2026-07-17", "-o", "out"});
  EXPECT_NO_THROW(llmc::validate_train_options(with_dir, 8));
  EXPECT_NO_THROW(llmc::validate_train_options(with_dir, 1));
  EXPECT_NE(text.find("batch-schedule=\"modded89\"\n"), std::string::npos) << text;
  // The earlier record's recipe keeps its own: every step on 32,768 tokens, validation at --seq-len.
  const TrainOptions earlier = parse({"--recipe", "modded-2025-10-31"});
  EXPECT_EQ(earlier.batch_schedule, llmc::BatchScheduleKind::kFixed);
  EXPECT_FALSE(earlier.untimed_warmup);
  EXPECT_EQ(earlier.validation_seq_len(), 32768);
}

TEST(Recipe, LlmcGpt2124MMatchesItsScript) {
  const TrainOptions o = parse({"--recipe", "llmc-gpt2-124m"});
  EXPECT_EQ(o.model, "d12");
  EXPECT_EQ(o.batch_size, 64);
  EXPECT_EQ(o.seq_len, 1024);
  EXPECT_EQ(o.total_batch_tokens, 524288);
  EXPECT_EQ(o.steps, 19073);  // 10B tokens: 19,073 x 524,288 = 9.9996e9
  EXPECT_EQ(o.lr, 6e-4);
  EXPECT_EQ(o.warmup_steps, 700);
  EXPECT_EQ(o.lr_schedule, llmc::LrDecay::kCosine);
  EXPECT_EQ(o.final_lr_frac, 0.0);
  EXPECT_EQ(o.weight_decay, 0.1);
  EXPECT_EQ(o.grad_clip, 1.0);
  EXPECT_EQ(o.loss_reduction, llmc::LossReduction::kMean);  // train_gpt2.cu's mean loss
  EXPECT_EQ(o.window_schedule, llmc::WindowScheduleKind::kFixed);
  EXPECT_EQ(o.val_every, 250);
  EXPECT_EQ(o.val_tokens, 10485760);
  EXPECT_EQ(o.train_loader, llmc::TrainLoaderChoice::kWindow);
  EXPECT_EQ(o.grad_accum_steps(8), 1);
}

TEST(Recipe, ExplicitOptionsWinWhereverTheyStand) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--recipe", "modded-2025-10-31", "--steps", "8", "--model", "speedrun-tiny",
                                 "--lr-schedule", "cosine", "--train-loader", "window"},
        std::vector<std::string>{"--steps", "8", "--model", "speedrun-tiny", "--lr-schedule", "cosine",
                                 "--train-loader", "window", "--recipe", "modded-2025-10-31"}}) {
    const TrainOptions o = parse(args);
    EXPECT_EQ(o.steps, 8);
    EXPECT_EQ(o.model, "speedrun-tiny");
    EXPECT_EQ(o.lr_schedule, llmc::LrDecay::kCosine);  // the trainer's default, given explicitly, still wins
    EXPECT_EQ(o.train_loader, llmc::TrainLoaderChoice::kWindow);
    EXPECT_EQ(o.window_schedule, llmc::WindowScheduleKind::kSpeedrun);
    EXPECT_EQ(o.loss_schedule, llmc::LossScheduleKind::kFixed);
    EXPECT_EQ(o.seq_len, 32768);
  }
}

TEST(Recipe, NoneLeavesTheDefaultsAndUnknownOnesAreRefused) {
  const TrainOptions defaults, o = parse({"--steps", "3"});
  EXPECT_EQ(o.recipe, "");
  EXPECT_EQ(o.model, defaults.model);
  EXPECT_EQ(o.lr_schedule, defaults.lr_schedule);
  EXPECT_EQ(o.window_schedule, llmc::WindowScheduleKind::kFixed);
  EXPECT_EQ(o.train_loader, llmc::TrainLoaderChoice::kAuto);
  EXPECT_THROW(parse({"--recipe", "modded-2024"}), CLI::ValidationError);
  EXPECT_THROW(llmc::recipe_settings("modded-2024"), std::invalid_argument);
}

// Every option a recipe names is one of the trainer's, and each recipe's values pass its validators.
TEST(Recipe, EveryRecipeOptionExists) {
  for (const std::string& name : llmc::recipe_names()) {
    CLI::App app;
    TrainOptions o;
    llmc::add_train_options(app, o);
    for (const auto& setting : llmc::recipe_settings(name))
      EXPECT_NE(app.get_option_no_throw(setting.first), nullptr) << name << ": " << setting.first;
    EXPECT_NO_THROW(parse({"--recipe", name})) << name;
  }
}

}  // namespace
