// The speedrun model's RoPE state: half-truncated frequencies with base 1024 and their YaRN updates when
// the long attention window grows, together with the softmax scale that goes with them. Computed in
// fp32 like the reference (PyTorch fp32 tensors); the attention scale in double (Python floats).
#pragma once

#include <vector>

namespace llmc {

class Yarn {
 public:
  // head_dim: a multiple of 4. Starts in the reset() state.
  explicit Yarn(int head_dim);

  // Frequencies w_k = (1/1024)^(k / (D/4 - 1)) for k < D/4 (w_0 = 1 when D = 4), then D/4 zeros;
  // attention scale 0.1.
  void reset();
  // The long window changes from old_blocks to new_blocks windows of window_block tokens:
  // rot_k = window_block * old * w_k / (2 pi); g_k = clamp((rot_k - 1) / 31, 0, 1);
  // w_k *= old/new + g_k (1 - old/new); attn_scale *= 1 + 0.2 ln(new/old).
  // Throws std::invalid_argument for non-positive arguments.
  void apply(int old_blocks, int new_blocks, int window_block);

  const std::vector<float>& frequencies() const { return frequencies_; }  // D/2 entries
  double attn_scale() const { return attn_scale_; }

 private:
  int head_dim_;
  std::vector<float> frequencies_;
  double attn_scale_ = 0.1;
};

}  // namespace llmc
