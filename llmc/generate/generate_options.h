// The generator's command-line options: one struct, their CLI11 definitions (so --help documents
// exactly what is parsed) and the checks that need no model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "llmc/generate/sampler.h"

namespace CLI { class App; }

namespace llmc {

struct GenerateOptions {
  std::string model;                  // model file, checkpoint prefix, run directory or preset
  std::optional<std::string> prompt;  // none: read standard input
  std::string vocab_dir;
  int max_new_tokens = 256;
  SamplingSettings sampling;          // --temperature, --top-k, --top-p, --seed
  std::string json_path;              // the result as JSON ("" = none)
};

void add_generate_options(CLI::App& app, GenerateOptions& options);

// generate_gpt2's command line (`about`: --help's first line) parsed into `options`. Returns -1 to go on, else
// the exit status after CLI11 printed --help (0) or the error. Here so that CLI11 is compiled once.
int parse_generate_command_line(int argc, char** argv, const std::string& about, GenerateOptions& options);

// Throws std::invalid_argument naming the option that is out of range.
void validate_generate_options(const GenerateOptions& options);

}  // namespace llmc
