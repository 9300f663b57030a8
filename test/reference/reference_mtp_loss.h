// Double-precision reference of the 2026-07-17 record's training loss (docs/kernels.md#multi-token-cross-entropy):
// soft-capped logits z' = 23 u over all V columns, the weighted next-token and prefix-token terms per row, and
// the gradient the record's fused kernel writes (its softmax weight counts every next-token weight, also where
// a term falls past the last row). The oracle of llmc/kernels/mtp_cross_entropy.cuh.
#pragma once

#include <vector>

namespace ref {

constexpr double kMtpSoftcapScale = 23.0;
constexpr double kMtpSoftcapShift = 5.0;
constexpr double kMtpSoftcapDivisor = 7.5;

struct MtpWeights {
  int tokens = 1;                       // 1..3 next tokens
  double next[3] = {1.0, 0.0, 0.0};     // their weights
  double prefix = 0.0;                  // the prefix term's (0: none)
};

// u = sigmoid((z + 5) / 7.5), exactly.
double mtp_softcap_u(double z);

// From u (rows, V), which the caller rounds or not: losses[t] = sum over the present terms of
// weight (lse(23 u[t]) - 23 u[t][target]), the terms being targets[t + k] for k < tokens and t + k < rows, and
// prefix_of[targets[t]] when that is >= 0 (prefix_of may be null). With dz (rows, V) not null, it is set to
// grad_scale (S softmax(23 u) - c) 23 u (1 - u) / 7.5, with c the weights of the present terms per target
// column and S every next-token weight plus the prefix weight when present.
void mtp_cross_entropy(std::vector<double>* losses, std::vector<double>* dz, const std::vector<double>& u,
                       const int* targets, const int* prefix_of, const MtpWeights& weights, double grad_scale,
                       int rows, int V);

}  // namespace ref
