// --recipe: one option that sets the defaults of a whole training recipe -- the modded-nanogpt
// 2026-07-17 or 2025-10-31 record (docs/recipes.md) or llm.c's GPT-2 124M run -- as the values of the
// trainer's own options, so that any option given explicitly on the command line still wins.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace CLI { class App; }

namespace llmc {

// (option, value) pairs, in the options' own spelling ("--steps", "2245").
using RecipeSettings = std::vector<std::pair<std::string, std::string>>;

// The recipes by name; the first is the speedrun record's.
std::vector<std::string> recipe_names();
// The settings of recipe `name`; throws std::invalid_argument naming the known recipes otherwise.
RecipeSettings recipe_settings(const std::string& name);

// After `app` has parsed a command line: sets every option of recipe `name` that the command line did
// not give (CLI11's count() == 0) to the recipe's value, through the option's own conversion, validators
// and default text (so the log's option list shows the values in force). "" sets nothing. Throws
// std::invalid_argument for an unknown recipe or an option `app` does not have.
void apply_recipe(CLI::App& app, const std::string& name);

}  // namespace llmc
