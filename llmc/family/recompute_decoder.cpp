// The decoder that re-runs the whole context (see recompute_decoder.h).
#include "llmc/family/recompute_decoder.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace llmc {

RecomputeDecoder::RecomputeDecoder(std::shared_ptr<ContextModel> model) : model_(std::move(model)) {
  if (!model_) throw std::invalid_argument("RecomputeDecoder: no model");
}

std::string RecomputeDecoder::describe() const {
  return model_->context_describe() + " context=" + std::to_string(max_positions()) +
         " (no KV cache: each forward re-runs the whole context)";
}

void RecomputeDecoder::forward(const int32_t* tokens, int n, std::vector<float>& logits, bool all_positions) {
  const int V = vocab_size();
  const int start = position();
  check_decoder_tokens(tokens, n, start, max_positions(), V);
  std::vector<int32_t> context(static_cast<size_t>(max_positions()), model_->context_pad_token());
  std::copy(tokens_.begin(), tokens_.end(), context.begin());
  std::copy(tokens, tokens + n, context.begin() + start);
  const int first = all_positions ? start : start + n - 1;
  const int count = all_positions ? n : 1;
  logits.resize(static_cast<size_t>(count) * V);
  model_->context_logits(context.data(), first, count, logits.data());
  tokens_.insert(tokens_.end(), tokens, tokens + n);  // only once the forward has succeeded
}

}  // namespace llmc
