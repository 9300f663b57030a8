// The generation loop over any CausalDecoder: the prompt in one forward (prefill), then one token at a
// time (decode), each chosen by the Sampler from the last logits, until the stop token, the token budget
// or the decoder's context is reached. Times prefill and decode separately for the tokens/s report.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "llmc/family/decoder.h"
#include "llmc/generate/sampler.h"

namespace llmc {

struct GenerationSettings {
  int max_new_tokens = 256;
  SamplingSettings sampling;
  int32_t stop_token = -1;  // generation ends when it is sampled (it is not returned); -1 = never
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // the new tokens, without the stop token
  bool stopped = false;         // the stop token was sampled
  bool context_full = false;    // prompt + new tokens filled the decoder's context before the budget
  int prompt_tokens = 0;
  double prefill_seconds = 0.0;  // the prompt's forward (and its logits)
  int decode_steps = 0;          // one-token forwards after the prompt
  double decode_seconds = 0.0;   // those forwards plus the sampling of every token
};

// Resets the decoder, then generates from `prompt` (1 .. max_positions() - 1 tokens, else
// std::invalid_argument) and calls on_token with each new token as soon as it is chosen (not with the
// stop token). Prompt plus new tokens never exceed the decoder's max_positions().
GenerationResult generate(CausalDecoder& decoder, const std::vector<int32_t>& prompt,
                          const GenerationSettings& settings, const std::function<void(int32_t)>& on_token = nullptr);

}  // namespace llmc
