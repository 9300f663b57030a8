// What text generation needs from a model family: a causal decoder with a KV cache that appends tokens
// and returns the logits of the next token. Generation (llmc/generate/generation.h) and the trainer's
// samples only talk to this interface, so a second model family (the speedrun model) joins by
// implementing it; GPT-2 (llmc/model/gpt2/gpt2_decoder.h) is the only implementation so far.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace llmc {

class CausalDecoder {
 public:
  virtual ~CausalDecoder() = default;

  virtual int vocab_size() const = 0;     // real tokens: logits have this many entries per position
  virtual int max_positions() const = 0;  // the context length: positions the cache can hold
  virtual int position() const = 0;       // tokens in the cache so far
  virtual std::string describe() const = 0;  // family and shape, for logs

  // Empties the cache: the next forward starts at position 0.
  virtual void reset() = 0;

  // Appends tokens[0, n) at positions [position(), position() + n) and returns through `logits` the fp32
  // logits that follow the last of them (vocab_size() values), or with all_positions those that follow
  // each of them (n * vocab_size()). One forward of n tokens costs n tokens' work plus attention over
  // the cache. Throws std::out_of_range when the tokens would not fit in max_positions() or a token is
  // outside [0, vocab_size()); the cache is then unchanged.
  virtual void forward(const int32_t* tokens, int n, std::vector<float>& logits, bool all_positions = false) = 0;
};

// What every forward checks first, with the errors CausalDecoder::forward promises: at least one token, room for n
// more after `position`, every token in [0, vocab_size).
inline void check_decoder_tokens(const int32_t* tokens, int n, int position, int max_positions, int vocab_size) {
  if (n < 1) throw std::out_of_range("forward: no tokens");
  if (position + n > max_positions)
    throw std::out_of_range("forward: " + std::to_string(n) + " more tokens after " + std::to_string(position) +
                            " exceed the context of " + std::to_string(max_positions) + " positions");
  for (int i = 0; i < n; i++)
    if (tokens[i] < 0 || tokens[i] >= vocab_size)
      throw std::out_of_range("forward: token " + std::to_string(tokens[i]) + " outside [0, " +
                              std::to_string(vocab_size) + ")");
}

}  // namespace llmc
