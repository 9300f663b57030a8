// CLI11 definitions and checks of the generator's options (see generate_options.h).
#include "llmc/generate/generate_options.h"

#include <CLI/CLI.hpp>

#include <stdexcept>

#include "llmc/base/command_line.h"
#include "llmc/tokenizer/bpe_vocab.h"

namespace llmc {

int parse_generate_command_line(int argc, char** argv, const std::string& about, GenerateOptions& options) {
  CLI::App app{about};
  add_generate_options(app, options);
  return parse_command_line(app, argc, argv);
}

void add_generate_options(CLI::App& app, GenerateOptions& o) {
  o.vocab_dir = default_vocab_dir();
  app.add_option("--model", o.model,
                 "model file (llm.c format, fp32 or bf16), checkpoint prefix (DIR/ckpt_000100), run directory "
                 "(its newest complete checkpoint), or preset dN with random weights (benchmarks)")
      ->required();
  app.add_option("--prompt", o.prompt, "the text to continue (default: read standard input); empty: <|endoftext|>");
  app.add_option("--max-new-tokens", o.max_new_tokens, "most tokens to generate (fewer at <|endoftext|> or when the "
                 "context is full)")->capture_default_str();
  app.add_option("--temperature", o.sampling.temperature, "softmax temperature; 0 = greedy")->capture_default_str();
  app.add_option("--top-k", o.sampling.top_k, "sample among the k most likely tokens; 0 = all")->capture_default_str();
  app.add_option("--top-p", o.sampling.top_p, "then among the fewest most likely tokens holding this much "
                 "probability; 1 = all")->capture_default_str();
  app.add_option("--seed", o.sampling.seed, "seed of the sampling (and of a preset's random weights): the same "
                 "seed gives the same text")->capture_default_str();
  app.add_option("--vocab", o.vocab_dir, "directory with r50k_base.tiktoken, or encoder.json + vocab.bpe")
      ->capture_default_str();
  app.add_option("--json", o.json_path, "also write the prompt and generated token ids, the text and the timings "
                 "to this JSON file");
}

void validate_generate_options(const GenerateOptions& options) {
  if (options.max_new_tokens < 0)
    throw std::invalid_argument("--max-new-tokens " + std::to_string(options.max_new_tokens) + ": must be >= 0");
  validate_sampling_settings(options.sampling);
}

}  // namespace llmc
