// GPT-2 random initialization (see gpt2_init.h).
#include "llmc/model/gpt2/gpt2_init.h"

#include <cmath>

namespace llmc {

std::vector<float> init_gpt2_params(const GPT2Layout& layout, uint64_t seed) {
  std::vector<float> params(layout.total_size, 0.0f);
  NormalSampler normal(seed);
  const double residual_std = kInitStd / std::sqrt(2.0 * layout.config.num_layers);
  for (const TensorView& view : layout.tensors) {
    float* out = params.data() + view.offset;
    switch (gpt2_kind(view)) {
      case TensorKind::kLn1w:
      case TensorKind::kLn2w:
      case TensorKind::kLnfw:
        for (size_t i = 0; i < view.numel; i++) out[i] = 1.0f;
        break;
      case TensorKind::kWte: {
        // Only the real vocabulary rows; padded rows stay 0 like llm.c.
        const size_t real = static_cast<size_t>(layout.config.vocab_size) * view.shape[1];
        for (size_t i = 0; i < real; i++) out[i] = static_cast<float>(kInitStd * normal.next());
        break;
      }
      case TensorKind::kWpe:
      case TensorKind::kQkvw:
      case TensorKind::kFcw:
        for (size_t i = 0; i < view.numel; i++) out[i] = static_cast<float>(kInitStd * normal.next());
        break;
      case TensorKind::kAttprojw:
      case TensorKind::kFcprojw:
        for (size_t i = 0; i < view.numel; i++) out[i] = static_cast<float>(residual_std * normal.next());
        break;
      default:  // biases
        break;
    }
  }
  return params;
}

}  // namespace llmc
