// generate_gpt2: continues a prompt with a trained model (one of our model files or checkpoints), on
// the GPU with a KV cache, streaming the text to stdout as it is generated and the timings to stderr.
// main() reads the options and the prompt; the loop lives in llmc/generate/.
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "llmc/base/atomic_file.h"
#include "llmc/cuda/cuda_common.h"
#include "llmc/generate/generate_options.h"
#include "llmc/generate/generation.h"
#include "llmc/generate/load_decoder.h"
#include "llmc/generate/model_source.h"
#include "llmc/tokenizer/tokenizer.h"
#include "llmc/tokenizer/utf8_stream.h"

using namespace llmc;

namespace {

// Tokens per device pass of the prompt: long prompts are split, which bounds the activations (and the
// all-position logits buffer) at this many rows.
constexpr int kPrefillChunk = 256;

// The prompt's token ids: --prompt or standard input; an empty text starts from <|endoftext|>, as
// GPT-2's unconditional samples do.
std::vector<int32_t> read_prompt(const GenerateOptions& options, const Gpt2Tokenizer& tokenizer) {
  std::string text;
  const char* where = "--prompt";
  if (options.prompt) {
    text = *options.prompt;
  } else {
    where = "standard input";
    if (isatty(STDIN_FILENO)) std::fprintf(stderr, "# reading the prompt from standard input (end it with Ctrl-D)\n");
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  EncodeContext context(tokenizer);
  std::vector<int32_t> ids;
  try {
    ids = tokenizer.encode(context, text);
  } catch (const InvalidUtf8Error& error) {
    throw std::runtime_error(std::string(where) + ": " + error.what());
  }
  if (ids.empty()) ids.push_back(tokenizer.end_of_text());
  return ids;
}

void write_json(const std::string& path, const std::string& model, const CausalDecoder& decoder,
                const std::vector<int32_t>& prompt, const GenerationResult& result, const std::string& text) {
  const nlohmann::json json = {{"model", model},
                               {"decoder", decoder.describe()},
                               {"prompt_tokens", prompt},
                               {"tokens", result.tokens},
                               {"text", text},
                               {"stopped_at_end_of_text", result.stopped},
                               {"context_full", result.context_full},
                               {"prefill_seconds", result.prefill_seconds},
                               {"decode_steps", result.decode_steps},
                               {"decode_seconds", result.decode_seconds}};
  const std::string bytes = json.dump(1) + "\n";
  AtomicFileWriter writer(path);
  writer.write(bytes.data(), bytes.size());
  writer.commit();
}

void report(const GenerationResult& result) {
  const double prefill_rate = result.prompt_tokens / std::max(result.prefill_seconds, 1e-9);
  const double decode_rate = result.decode_steps / std::max(result.decode_seconds, 1e-9);
  const char* end = result.stopped ? " (stopped at <|endoftext|>)" : result.context_full ? " (context full)" : "";
  std::fprintf(stderr,
               "# %zu new tokens%s | prefill: %d tokens in %.1f ms (%.1f tokens/s) | decode: %d tokens in %.3f s "
               "(%.1f tokens/s)\n",
               result.tokens.size(), end, result.prompt_tokens, 1e3 * result.prefill_seconds, prefill_rate,
               result.decode_steps, result.decode_seconds, decode_rate);
}

int run(const GenerateOptions& options) {
  validate_generate_options(options);
  const ModelSource source = resolve_model_source(options.model);
  const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::from_directory(options.vocab_dir);
  const std::vector<int32_t> prompt = read_prompt(options, tokenizer);
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  const std::unique_ptr<CausalDecoder> decoder = load_decoder(source, options.sampling.seed, kPrefillChunk, stream);
  if (decoder->vocab_size() != tokenizer.vocab_size())
    throw std::runtime_error("--model " + options.model + ": a vocabulary of " +
                             std::to_string(decoder->vocab_size()) + " tokens; the GPT-2 tokenizer has " +
                             std::to_string(tokenizer.vocab_size()));
  if (static_cast<int>(prompt.size()) >= decoder->max_positions())
    throw std::runtime_error((options.prompt ? "--prompt" : std::string("standard input")) + ": " +
                             std::to_string(prompt.size()) + " tokens; the model's context is " +
                             std::to_string(decoder->max_positions()) + " (at most " +
                             std::to_string(decoder->max_positions() - 1) + " leave room to generate)");
  std::fprintf(stderr, "# generate_gpt2: %s from %s; prompt %zu tokens\n", decoder->describe().c_str(),
               source.label.c_str(), prompt.size());

  GenerationSettings settings;
  settings.max_new_tokens = options.max_new_tokens;
  settings.sampling = options.sampling;
  settings.stop_token = tokenizer.end_of_text();
  Utf8Stream utf8;
  std::string text;
  auto print = [&text](const std::string& complete) {
    std::fwrite(complete.data(), 1, complete.size(), stdout);
    std::fflush(stdout);
    text += complete;
  };
  const GenerationResult result = generate(*decoder, prompt, settings, [&](int32_t token) {
    print(utf8.push(tokenizer.decode(&token, 1)));
  });
  print(utf8.finish());
  if (!text.empty() && text.back() != '\n') std::fputc('\n', stderr);  // the report starts on a line of its own
  report(result);
  if (!options.json_path.empty()) write_json(options.json_path, source.label, *decoder, prompt, result, text);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  GenerateOptions options;
  const int parse_exit = parse_generate_command_line(
      argc, argv,
      "generate_gpt2: continue a prompt with a trained GPT-2 (KV cache on the GPU); the text goes to stdout as it is "
      "generated, the timings to stderr",
      options);
  if (parse_exit >= 0) return parse_exit;
  try {
    return run(options);
  } catch (const std::exception& error) {
    std::fflush(stdout);
    std::fprintf(stderr, "generate_gpt2: %s\n", error.what());
    return 1;
  }
}
