// The 2026-07-17 model as a CausalDecoder with a KV cache: the model's own activations of the tokens so far (the
// keys and values, and every row that DC, smear and the key offset read) stay where its forward wrote them, so a
// call computes the new tokens' rows only (Modded89Model::decode_logits). docs/generation.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmc/family/decoder.h"

namespace llmc {

class Modded89Model;

class Modded89Decoder final : public CausalDecoder {
 public:
  // Over a model of its own (generate_gpt2) or the trainer's live one (not owned: a no-op deleter), whose training
  // forwards overwrite the cache; the next call then recomputes the tokens so far, transparently.
  explicit Modded89Decoder(std::shared_ptr<Modded89Model> model);

  int vocab_size() const override;
  int max_positions() const override;
  int position() const override { return static_cast<int>(tokens_.size()); }
  std::string describe() const override;
  void reset() override { tokens_.clear(); }
  void forward(const int32_t* tokens, int n, std::vector<float>& logits, bool all_positions = false) override;

 private:
  std::shared_ptr<Modded89Model> model_;
  std::vector<int32_t> tokens_;  // the sequence so far, whose rows the model holds
};

}  // namespace llmc
