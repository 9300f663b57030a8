// The trainer's samples (see samples.h).
#include "llmc/train/samples.h"

#include <cstdio>
#include <stdexcept>

#include "llmc/generate/generation.h"
#include "llmc/tokenizer/utf8_stream.h"

namespace llmc {

TrainingSamples::TrainingSamples(std::unique_ptr<CausalDecoder> decoder, const std::string& vocab_dir,
                                 const std::string& prompt, int tokens, uint64_t seed)
    : decoder_(std::move(decoder)),
      tokenizer_(Gpt2Tokenizer::from_directory(vocab_dir)),
      prompt_text_(prompt),
      tokens_(tokens),
      seed_(seed) {
  if (decoder_->vocab_size() != tokenizer_.vocab_size())
    throw std::invalid_argument("--sample-every: the model's vocabulary has " + std::to_string(decoder_->vocab_size()) +
                                " tokens; samples need GPT-2's " + std::to_string(tokenizer_.vocab_size()));
  EncodeContext context(tokenizer_);
  try {
    prompt_ = tokenizer_.encode(context, prompt);
  } catch (const InvalidUtf8Error& error) {
    throw std::invalid_argument(std::string("--sample-prompt: ") + error.what());
  }
  if (prompt_.empty()) prompt_.push_back(tokenizer_.end_of_text());
  if (static_cast<int>(prompt_.size()) >= decoder_->max_positions())
    throw std::invalid_argument("--sample-prompt: " + std::to_string(prompt_.size()) +
                                " tokens leave no room in the model's context of " +
                                std::to_string(decoder_->max_positions()));
}

// The prompt as the sample's first line names it: quoted, its line breaks as \n, or <|endoftext|>.
std::string TrainingSamples::quoted_prompt() const {
  if (prompt_text_.empty()) return "<|endoftext|>";
  std::string quoted = "\"";
  for (char c : prompt_text_) quoted += c == '\n' ? std::string("\\n") : std::string(1, c);
  return quoted + "\"";
}

std::vector<std::string> TrainingSamples::sample(int step) {
  GenerationSettings settings;
  settings.max_new_tokens = tokens_;
  settings.sampling.seed = seed_;  // temperature 1, no top-k or top-p: the model's own distribution
  settings.stop_token = tokenizer_.end_of_text();
  const GenerationResult result = generate(*decoder_, prompt_, settings);
  Utf8Stream utf8;
  std::string text = utf8.push(tokenizer_.decode(result.tokens));
  text += utf8.finish();
  char head[160];
  std::snprintf(head, sizeof head, "# sample step:%d: %zu tokens%s in %.2fs, continuing ", step, result.tokens.size(),
                result.stopped ? " (then <|endoftext|>)" : "", result.prefill_seconds + result.decode_seconds);
  std::vector<std::string> lines{head + quoted_prompt()};
  for (size_t begin = 0; begin <= text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    lines.push_back("# | " + text.substr(begin, end - begin));
    begin = end + 1;
  }
  return lines;
}

}  // namespace llmc
