// The weights of the multi-token cross-entropy's terms (llmc/kernels/mtp_cross_entropy.cuh), host-only so that
// the trainer's loss schedule (llmc/train/loss_schedule.h) and the models can name them without the kernel.
#pragma once

namespace llmc {

constexpr int kMtpMaxTokens = 3;  // the next 1, 2 or 3 tokens

// The row loss's weights: w[k] for the token k + 1 positions ahead (k < tokens), and the prefix term's.
struct MtpLossWeights {
  int tokens = 1;
  float next[kMtpMaxTokens] = {1.0f, 0.0f, 0.0f};
  float prefix = 0.0f;  // 0: no prefix term
};

}  // namespace llmc
