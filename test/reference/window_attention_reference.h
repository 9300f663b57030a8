// Double-precision CPU reference of the sliding-window attention over packed documents (the oracle of
// llmc/kernels/window_attention.cuh): query q attends key k iff both lie in one document of
// cu_seqlens and q - window <= k <= q. q, k, v, out, dout and the gradients are [T, heads, D]
// row-major; lse is [heads, T] (natural log of the sum of exp of the scaled scores).
#pragma once

#include <vector>

namespace ref {

struct PackedDocuments {
  std::vector<int> cu_seqlens;  // 0 = cu[0] <= ... <= cu.back() = T (repeated T entries are empty documents)
  int window;                   // W >= 0
  bool attends(int query, int key) const;
};

void window_attention_forward(double* out, double* lse, const double* q, const double* k, const double* v, int T,
                              int heads, int D, const PackedDocuments& docs, double scale);
// Overwrites dq, dk, dv.
void window_attention_backward(double* dq, double* dk, double* dv, const double* dout, const double* q,
                               const double* k, const double* v, int T, int heads, int D,
                               const PackedDocuments& docs, double scale);

}  // namespace ref
