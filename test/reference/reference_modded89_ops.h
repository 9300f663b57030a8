// Double-precision CPU reference of operations of the 2026-07-17 record's model (docs/kernels.md), the oracles
// of their CUDA kernels. Arrays are row-major.
#pragma once

namespace ref {

// Per-head RMSNorm (eps FLT_EPSILON) of `heads` heads of D per row (inp, out: (T, heads, D)), then the
// adjacent-pair rotation of the first `pairs` pairs: y[2m] = n[2m] c + n[2m+1] s, y[2m+1] = n[2m+1] c - n[2m] s
// with c, s = cos_table, sin_table[position][m], position t (position_step 1) or 2t + h % 2 (2); dims
// [2 pairs, D) stationary. With key_offset the k heads (h >= heads / 2) of row t >= 1 take the stationary dims
// of row t - 1's normalised head.
void qk_norm_pair_rope_forward(double* out, const double* inp, const double* cos_table, const double* sin_table, int T,
                               int heads, int D, int pairs, int position_step, bool key_offset);

// XSA of H heads of D per row (y, v, out: (T, H, D); alpha (T, H)):
// out = y - tanh(alpha) (y . v / max(|v|^2, 1e-8)) v per (row, head).
void xsa_forward(double* out, const double* y, const double* v, const double* alpha, int T, int H, int D);

// The DC correction: for each query t and head h, P_h[t, s] = softmax over the keys s of t's document with
// 0 <= t - s < window of attn_scale q_h[t] . k_h[s]; A[t, s] = sum_h w1[t, h] P_h[t, s];
// out_h[t] = y_h[t] + sum_s w2[t, h] A[t, s] v_h[s]. q, k, v, y, out: (T, H, D); w1, w2: (T, H); doc_start (T).
void dc_forward(double* out, const double* y, const double* q, const double* k, const double* v, const double* w1,
                const double* w2, const int* doc_start, int T, int H, int D, int window, double attn_scale);

}  // namespace ref
