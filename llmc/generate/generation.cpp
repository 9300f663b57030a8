// The generation loop (see generation.h).
#include "llmc/generate/generation.h"

#include <chrono>
#include <stdexcept>
#include <string>

namespace llmc {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }
}  // namespace

GenerationResult generate(CausalDecoder& decoder, const std::vector<int32_t>& prompt,
                          const GenerationSettings& settings, const std::function<void(int32_t)>& on_token) {
  const int context = decoder.max_positions();
  if (prompt.empty() || static_cast<int>(prompt.size()) >= context)
    throw std::invalid_argument("the prompt has " + std::to_string(prompt.size()) + " tokens; the model takes 1 to " +
                                std::to_string(context - 1) + " (its context is " + std::to_string(context) + ")");
  if (settings.max_new_tokens < 0)
    throw std::invalid_argument("--max-new-tokens " + std::to_string(settings.max_new_tokens) + ": must be >= 0");
  Sampler sampler(settings.sampling);
  GenerationResult result;
  result.prompt_tokens = static_cast<int>(prompt.size());
  decoder.reset();
  std::vector<float> logits;
  const Clock::time_point prefill_start = Clock::now();
  decoder.forward(prompt.data(), static_cast<int>(prompt.size()), logits);
  result.prefill_seconds = seconds_since(prefill_start);

  const Clock::time_point decode_start = Clock::now();
  const int budget = settings.max_new_tokens;
  while (static_cast<int>(result.tokens.size()) < budget) {
    if (result.prompt_tokens + static_cast<int>(result.tokens.size()) >= context) {  // the sequence fills the context
      result.context_full = true;
      break;
    }
    if (!result.tokens.empty()) {
      decoder.forward(&result.tokens.back(), 1, logits);
      result.decode_steps++;
    }
    const int32_t token = sampler.sample(logits.data(), decoder.vocab_size());
    if (token == settings.stop_token) {
      result.stopped = true;
      break;
    }
    result.tokens.push_back(token);
    if (on_token) on_token(token);
  }
  result.decode_seconds = seconds_since(decode_start);
  return result;
}

}  // namespace llmc
