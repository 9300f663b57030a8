// The 2026-07-17 record's model operations in double (see reference_modded89_ops.h).
#include "test/reference/reference_modded89_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "test/reference/reference_speedrun_ops.h"

namespace ref {

void qk_norm_pair_rope_forward(double* out, const double* inp, const double* cos_table, const double* sin_table, int T,
                               int heads, int D, int pairs, int position_step, bool key_offset) {
  std::vector<double> normed(static_cast<size_t>(T) * heads * D), rstd(static_cast<size_t>(T) * heads);
  rmsnorm_forward(normed.data(), rstd.data(), inp, T * heads, D);
  for (int t = 0; t < T; t++)
    for (int h = 0; h < heads; h++) {
      const double* n = normed.data() + (static_cast<size_t>(t) * heads + h) * D;
      const bool offset = key_offset && h >= heads / 2 && t > 0;
      const double* stationary = offset ? n - static_cast<size_t>(heads) * D : n;
      double* y = out + (static_cast<size_t>(t) * heads + h) * D;
      const size_t position = static_cast<size_t>(t) * position_step + h % position_step;
      for (int m = 0; m < pairs; m++) {
        const double c = cos_table[position * pairs + m], s = sin_table[position * pairs + m];
        y[2 * m] = n[2 * m] * c + n[2 * m + 1] * s;
        y[2 * m + 1] = n[2 * m + 1] * c - n[2 * m] * s;
      }
      for (int d = 2 * pairs; d < D; d++) y[d] = stationary[d];
    }
}

void xsa_forward(double* out, const double* y, const double* v, const double* alpha, int T, int H, int D) {
  for (size_t item = 0; item < static_cast<size_t>(T) * H; item++) {
    const double* yr = y + item * D;
    const double* vr = v + item * D;
    double dot = 0.0, norm = 0.0;
    for (int d = 0; d < D; d++) dot += yr[d] * vr[d], norm += vr[d] * vr[d];
    const double coefficient = std::tanh(alpha[item]) * dot / std::max(norm, 1e-8);
    for (int d = 0; d < D; d++) out[item * D + d] = yr[d] - coefficient * vr[d];
  }
}

void dc_forward(double* out, const double* y, const double* q, const double* k, const double* v, const double* w1,
                const double* w2, const int* doc_start, int T, int H, int D, int window, double attn_scale) {
  auto head = [H, D](const double* base, int t, int h) { return base + (static_cast<size_t>(t) * H + h) * D; };
  for (int t = 0; t < T; t++) {
    const int first = std::max(doc_start[t], t - window + 1);
    const int keys = t - first + 1;
    std::vector<double> A(static_cast<size_t>(keys), 0.0);
    for (int h = 0; h < H; h++) {
      std::vector<double> scores(static_cast<size_t>(keys));
      double top = -INFINITY;
      for (int s = first; s <= t; s++) {
        double dot = 0.0;
        for (int d = 0; d < D; d++) dot += head(q, t, h)[d] * head(k, s, h)[d];
        scores[static_cast<size_t>(s - first)] = attn_scale * dot;
        top = std::max(top, attn_scale * dot);
      }
      double sum = 0.0;
      for (double& score : scores) sum += std::exp(score - top);
      for (int i = 0; i < keys; i++)
        A[static_cast<size_t>(i)] +=
            w1[static_cast<size_t>(t) * H + h] * std::exp(scores[static_cast<size_t>(i)] - top) / sum;
    }
    for (int h = 0; h < H; h++)
      for (int d = 0; d < D; d++) {
        double acc = 0.0;
        for (int s = first; s <= t; s++)
          acc += w2[static_cast<size_t>(t) * H + h] * A[static_cast<size_t>(s - first)] * head(v, s, h)[d];
        out[(static_cast<size_t>(t) * H + h) * D + d] = head(y, t, h)[d] + acc;
      }
  }
}

}  // namespace ref
