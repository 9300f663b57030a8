// Double-precision CPU reference of the speedrun model's operations (forward and backward), the oracle
// for its CUDA kernels and the building blocks of the reference model (reference_speedrun.h). All arrays
// are row-major; "accumulates" means the function adds (+=) into its gradient outputs.
#pragma once

#include <cstddef>

namespace ref {

// RMSNorm eps of the reference: FLT_EPSILON (PyTorch's eps=None for bf16/fp32 inputs).
constexpr double kSpeedrunNormEps = 1.1920928955078125e-07;
// Logit soft cap: logits = 30 * sigmoid(z / 7.5).
constexpr double kSoftcapScale = 30.0;
constexpr double kSoftcapDivisor = 7.5;

// Weightless RMSNorm over rows of C: out = x / sqrt(mean(x^2) + eps); rstd (N) = 1 / sqrt(mean(x^2) + eps).
void rmsnorm_forward(double* out, double* rstd, const double* inp, int N, int C, double eps = kSpeedrunNormEps);
// Accumulates dinp += rstd * (dout - n * mean(dout * n)) with n = inp * rstd.
void rmsnorm_backward(double* dinp, const double* dout, const double* inp, const double* rstd, int N, int C);

// cos/sin tables (T, D/2) with theta = t * freq[k] (freq has D/2 entries).
void rope_tables(double* cos_table, double* sin_table, const double* freq, int T, int half);
// Half-split rotation of each head of D (inp, out: (T, heads, D); out may alias inp): with x1 = x[0:D/2],
// x2 = x[D/2:D], c = cos[t], s = sin[t]: y1 = x1 c + x2 s, y2 = -x1 s + x2 c.
void rope_forward(double* out, const double* inp, const double* cos_table, const double* sin_table, int T, int heads,
                  int D);
// Accumulates the transposed rotation of dout into dinp.
void rope_backward(double* dinp, const double* dout, const double* cos_table, const double* sin_table, int T, int heads,
                   int D);

// out = relu(x)^2; backward accumulates dinp += 2 relu(x) dout.
void relu_squared_forward(double* out, const double* inp, size_t n);
void relu_squared_backward(double* dinp, const double* inp, const double* dout, size_t n);

// Soft-capped cross-entropy over all V columns of z (N, V): l = 30 sigmoid(z / 7.5),
// losses[n] = logsumexp(l[n]) - l[n][targets[n]].
void softcap_cross_entropy_forward(double* losses, const double* z, const int* targets, int N, int V);
// Accumulates dz += dlosses[n] * (softmax(l) - onehot(target)) * dl/dz.
void softcap_cross_entropy_backward(double* dz, const double* z, const int* targets, const double* dlosses, int N,
                                    int V);

// Smear: out[0] = e[0]; out[t] = e[t] + lambda * sigmoid(e[t][0:12] . w) * e[t-1] (e, out: (T, C); w: 12).
void smear_forward(double* out, const double* e, const double* w, double lambda, int T, int C);
// Accumulates de (T, C), dw (12) and *dlambda.
void smear_backward(double* de, double* dw, double* dlambda, const double* dout, const double* e, const double* w,
                    double lambda, int T, int C);

// Attention output gate: out[t, h, :] = y[t, h, :] * sigmoid(xn[t][0:12] . w[h]) with y, out (T, H*D),
// xn (T, C) the attention block's normalised input (C = H*D), w (H, 12).
void attention_gate_forward(double* out, const double* y, const double* xn, const double* w, int T, int H, int D);
// Accumulates dy (T, H*D), dxn (T, C; only columns 0..11 receive gradient) and dw (H, 12).
void attention_gate_backward(double* dy, double* dxn, double* dw, const double* dout, const double* y, const double* xn,
                             const double* w, int T, int H, int D);

// Attention over packed documents with a sliding window: test/reference/window_attention_reference.h (shared
// with the window attention kernel's tests).

// out (T, C) = table[tokens[t]]; backward accumulates dout rows into the token rows of dtable.
void embedding_forward(double* out, const int* tokens, const double* table, int T, int C);
void embedding_backward(double* dtable, const double* dout, const int* tokens, int T, int C);

// out = a x + b y (n elements; y may be null when b is absent). Backward accumulates dx += a dout,
// dy += b dout (if dy is non-null) and *da += sum(x dout), *db += sum(y dout) (if non-null).
void mix_forward(double* out, double a, const double* x, double b, const double* y, size_t n);
void mix_backward(double* dx, double* dy, double* da, double* db, const double* dout, double a, const double* x,
                  double b, const double* y, size_t n);

double sigmoid(double x);

}  // namespace ref
