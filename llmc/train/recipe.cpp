// The trainer's recipes (see recipe.h). Each value is quoted from the recipe's source, next to it.
#include "llmc/train/recipe.h"

#include <CLI/CLI.hpp>

#include <stdexcept>

namespace llmc {

namespace {

// modded-nanogpt's record of 2025-10-31 (docs/recipes.md): the speedrun model, 2,205 + 40 steps
// of 262,144 tokens (one packed sequence of 32,768 tokens per rank and micro-step; with fewer than 8
// ranks, 8 / ranks micro-steps), the record's lr and window schedules, no warm-up, no gradient clipping,
// the loss summed over each rank's sequence (the record's reduction; averaged over ranks by the collectives),
// validation every 250 steps and at the end on 10,485,760 tokens; the training sequences are whole
// documents packed from their <|endoftext|> on (the BOS loader, docs/bos_loader.md). The optimizer is the
// speedrun one (--optimizer auto with the speedrun model), whose base lrs (Muon 0.03, Adam 0.008) the
// loop's lr multiplies: --lr 1.0, times the schedule's multiplier. Weight decay belongs to the record's
// optimizers (NorMuon's 1.2), AdamW's is off.
const RecipeSettings kModded20251031 = {
    {"--model", "speedrun"},
    {"--batch-size", "1"},
    {"--seq-len", "32768"},
    {"--total-batch-tokens", "262144"},
    {"--steps", "2245"},
    {"--lr", "1.0"},
    {"--warmup-steps", "0"},
    {"--lr-schedule", "speedrun"},
    {"--window-schedule", "speedrun"},
    {"--loss-schedule", "fixed"},
    {"--batch-schedule", "fixed"},
    {"--val-seq-len", "0"},
    {"--weight-decay", "0"},
    {"--grad-clip", "0"},
    {"--loss-reduction", "sum"},
    {"--val-every", "250"},
    {"--val-tokens", "10485760"},
    {"--untimed-warmup", "off"},
    {"--train-loader", "bos"},
};

// modded-nanogpt's record of 2026-07-17 (SPEEDRUN89.md; docs/recipes.md): the modded89 model and its
// optimizer (--optimizer auto), 1,270 + 15 steps of the stages' 131,072 / 262,144 / 393,216 tokens (one packed
// sequence per rank and micro-step of 16,384 / 32,768 / 49,152 tokens on 8 ranks; 8 / ranks micro-steps on fewer),
// the record's lr, window, loss-weight and batch schedules, no lr warm-up, no clipping, the loss summed over each
// sequence, validation every 250 steps and at the end on 10,485,760 tokens; before the timed steps the record's
// untimed warm-up (its 14 steps at the stage transitions, then the starting state restored). Validation as the
// record's: 262,144 contiguous tokens per rank as one sequence, which the model evaluates in forwards of its
// 49,152-token buffers carrying their context over (Modded89Model::sequence_losses).
const RecipeSettings kModded20260717 = {
    {"--model", "modded89"},
    {"--batch-size", "1"},
    {"--seq-len", "49152"},
    {"--total-batch-tokens", "393216"},
    {"--steps", "1285"},
    {"--lr", "1.0"},
    {"--warmup-steps", "0"},
    {"--lr-schedule", "modded89"},
    {"--window-schedule", "modded89"},
    {"--loss-schedule", "modded89"},
    {"--batch-schedule", "modded89"},
    {"--weight-decay", "0"},
    {"--grad-clip", "0"},
    {"--loss-reduction", "sum"},
    {"--val-every", "250"},
    {"--val-tokens", "10485760"},
    {"--val-seq-len", "262144"},
    {"--untimed-warmup", "on"},
    {"--train-loader", "bos"},
};

// llm.c's GPT-2 124M run (scripts/run_gpt2_124m.sh): d12, 64 x 1024 tokens per rank, 524,288 per step
// (8 ranks; accumulation on fewer), 19,073 steps (10B tokens), AdamW lr 6e-4 with 700 warm-up steps,
// cosine decay to 0, weight decay 0.1, gradient clipping at 1.0, validation every 250 steps on
// 10,485,760 tokens, fixed windows of the shards as training batches.
const RecipeSettings kLlmcGpt2124M = {
    {"--model", "d12"},
    {"--batch-size", "64"},
    {"--seq-len", "1024"},
    {"--total-batch-tokens", "524288"},
    {"--steps", "19073"},
    {"--lr", "6e-4"},
    {"--warmup-steps", "700"},
    {"--lr-schedule", "cosine"},
    {"--final-lr-frac", "0"},
    {"--window-schedule", "fixed"},
    {"--loss-schedule", "fixed"},
    {"--batch-schedule", "fixed"},
    {"--val-seq-len", "0"},
    {"--weight-decay", "0.1"},
    {"--grad-clip", "1"},
    {"--loss-reduction", "mean"},
    {"--val-every", "250"},
    {"--val-tokens", "10485760"},
    {"--untimed-warmup", "off"},
    {"--train-loader", "window"},
};

// The one table of recipes: a name and a set of option values each; the first is the current speedrun record's.
struct Recipe {
  const char* name;
  const RecipeSettings& settings;
};
const Recipe kRecipes[] = {
    {"modded-2026-07-17", kModded20260717},
    {"modded-2025-10-31", kModded20251031},
    {"llmc-gpt2-124m", kLlmcGpt2124M},
};

}  // namespace

std::vector<std::string> recipe_names() {
  std::vector<std::string> names;
  for (const Recipe& recipe : kRecipes) names.push_back(recipe.name);
  return names;
}

RecipeSettings recipe_settings(const std::string& name) {
  std::string known;
  for (const Recipe& recipe : kRecipes) {
    if (name == recipe.name) return recipe.settings;
    known += (known.empty() ? "" : " or ") + std::string(recipe.name);
  }
  throw std::invalid_argument("--recipe '" + name + "': unknown (expected " + known + ")");
}

void apply_recipe(CLI::App& app, const std::string& name) {
  if (name.empty()) return;
  for (const auto& [option_name, value] : recipe_settings(name)) {
    CLI::Option* option = app.get_option_no_throw(option_name);
    if (option == nullptr)
      throw std::invalid_argument("--recipe " + name + ": the trainer has no option " + option_name);
    if (option->count() == 0) option->default_val(value);  // runs the conversion, validators and binding
  }
}

}  // namespace llmc
