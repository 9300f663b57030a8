// The 2026-07-17 model's KV-cached decoder (see modded89_decoder.h): the tokens so far on the host, their
// activations in the model.
#include <stdexcept>
#include <utility>

#include "llmc/model/modded89/modded89_decoder.h"
#include "llmc/model/modded89/modded89_model.h"

namespace llmc {

Modded89Decoder::Modded89Decoder(std::shared_ptr<Modded89Model> model) : model_(std::move(model)) {
  if (!model_) throw std::invalid_argument("Modded89Decoder: no model");
}

int Modded89Decoder::vocab_size() const {
  return model_->context_vocab_size();
}
int Modded89Decoder::max_positions() const {
  return model_->context_length();
}

std::string Modded89Decoder::describe() const {
  return model_->context_describe() + " context=" + std::to_string(max_positions()) + " (KV cache: the activations)";
}

void Modded89Decoder::forward(const int32_t* tokens, int n, std::vector<float>& logits, bool all_positions) {
  const int start = position();
  check_decoder_tokens(tokens, n, start, max_positions(), vocab_size());
  std::vector<int32_t> sequence(tokens_);
  sequence.insert(sequence.end(), tokens, tokens + n);
  const int logit_rows = all_positions ? n : 1;
  logits.resize(static_cast<size_t>(logit_rows) * vocab_size());
  model_->decode_logits(sequence.data(), start, start + n, logit_rows, logits.data());
  tokens_ = std::move(sequence);  // only once the forward has succeeded
}

}  // namespace llmc
