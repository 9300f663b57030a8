// A decoder without a KV cache, for a model whose forward runs over a fixed number of positions: each call
// re-runs the whole context (the tokens so far, padded to the model's length) and reads the logits it needs.
// Exact because the model is causal (no position reads a later one; the tests check it), at the cost of one
// whole forward per call: how the 2026-07-17 family generates until it has a KV cache (docs/generation.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmc/family/decoder.h"

namespace llmc {

// What a RecomputeDecoder needs of a model.
class ContextModel {
 public:
  virtual ~ContextModel() = default;
  virtual int context_length() const = 0;      // positions of one forward
  virtual int context_vocab_size() const = 0;  // logits per position (the real tokens)
  virtual std::string context_describe() const = 0;
  // A token the model reads as an ordinary one (not a document start), for the positions past the context.
  virtual int32_t context_pad_token() const = 0;
  // The forward over tokens[0, context_length()): writes the logits of positions [first, first + count) to
  // `out` (count x context_vocab_size() floats). Synchronous.
  virtual void context_logits(const int32_t* tokens, int first, int count, float* out) = 0;
};

class RecomputeDecoder : public CausalDecoder {
 public:
  explicit RecomputeDecoder(std::shared_ptr<ContextModel> model);

  int vocab_size() const override { return model_->context_vocab_size(); }
  int max_positions() const override { return model_->context_length(); }
  int position() const override { return static_cast<int>(tokens_.size()); }
  std::string describe() const override;
  void reset() override { tokens_.clear(); }
  void forward(const int32_t* tokens, int n, std::vector<float>& logits, bool all_positions = false) override;

 private:
  std::shared_ptr<ContextModel> model_;
  std::vector<int32_t> tokens_;  // the context so far
};

}  // namespace llmc
