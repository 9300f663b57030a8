// The 2026-07-17 record's DC correction of layer 10 (dynamically composed attention, docs/kernels.md#dc-correction):
// per query t the heads' window softmaxes P_h[t, s] (fp32, keys 0 <= t - s < W in t's document, scale
// attn_scale) are mixed into A[t, s] = sum_h w1[t, h] P_h[t, s], and each head's attention output gains
// sum_s floatX(w2[t, h] A[t, s]) v_h[s]. Forward and the exact backward (dq, dk, dv accumulated; dw1, dw2
// written), as three kernels without atomics: per query (forward; backward for dq, dw1, dw2 and the softmax's
// delta) and per key (dk, dv). Straightforward loops, one block per row: the version to beat.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/mutant.h"

namespace llmc {

constexpr int kDcMaxWindow = 128;
constexpr int kDcMaxHeads = 8;
constexpr int kDcBlock = 128;

// Rows of q, k, v (each H heads of D at row t of its buffer, with its stride), the mixing weights w1, w2 (T, H
// with a row stride: columns of the gate MLP's output) and each token's document start.
struct DcInputs {
  const floatX* q = nullptr;
  const floatX* k = nullptr;
  const floatX* v = nullptr;
  int q_stride = 0, k_stride = 0, v_stride = 0;
  const floatX* w1 = nullptr;
  const floatX* w2 = nullptr;
  int w_stride = 0;
  const int* doc_start = nullptr;  // (T): the first position of t's document
  int T = 0, H = 0, D = 0, window = 0;
  float attn_scale = 0.0f;
  // dc_forward's queries are rows [first_row, T): the earlier rows are keys and values only (a KV cache's
  // earlier tokens). The backward needs 0.
  int first_row = 0;
};

namespace detail {

__device__ __forceinline__ const floatX* dc_head(const floatX* base, int stride, int t, int h, int D) {
  return base + static_cast<size_t>(t) * stride + static_cast<size_t>(h) * D;
}

__device__ __forceinline__ float dc_dot(const floatX* a, const floatX* b, int D) {
  float sum = 0.0f;
  for (int d = 0; d < D; d++) sum += to_float(a[d]) * to_float(b[d]);
  return sum;
}

__device__ __forceinline__ float dc_weight(const floatX* w, int stride, int t, int h) {
  return to_float(w[static_cast<size_t>(t) * stride + h]);
}

// The keys of query t: s = t - i for i < dc_key_count (the window, cut at the document start).
__device__ __forceinline__ int dc_key_count(const DcInputs& in, int t) {
  const int in_document = t - in.doc_start[t] + 1;
  const int window = LLMC_MUTANT("dc.window_plus_one", in.window, in.window + 1);
  return in_document < window ? in_document : window;
}

// P[h][i] = softmax over i of attn_scale q_h[t] . k_h[t - i], for one query; with lse given (backward) the
// logsumexp is not recomputed. Block-wide: threads over keys compute the scores, thread 0 the row sums in a
// fixed order. Leaves P in shared memory and, without lse_in, writes lse_out[h].
__device__ inline void dc_probabilities(float (*P)[kDcMaxWindow], const DcInputs& in, int t, int keys,
                                        const float* lse_in, float* lse_out) {
  for (int h = 0; h < in.H; h++)
    for (int i = threadIdx.x; i < keys; i += blockDim.x)
      P[h][i] = in.attn_scale *
                dc_dot(dc_head(in.q, in.q_stride, t, h, in.D), dc_head(in.k, in.k_stride, t - i, h, in.D), in.D);
  __syncthreads();
  __shared__ float lse[kDcMaxHeads];
  if (threadIdx.x == 0)
    for (int h = 0; h < in.H; h++) {
      if (lse_in != nullptr) {
        lse[h] = lse_in[h];
        continue;
      }
      float top = P[h][0];
      for (int i = 1; i < keys; i++) top = fmaxf(top, P[h][i]);
      float sum = 0.0f;
      for (int i = 0; i < keys; i++) sum += expf(P[h][i] - top);
      lse[h] = top + logf(sum);
      lse_out[h] = lse[h];
    }
  __syncthreads();
  for (int h = 0; h < in.H; h++)
    for (int i = threadIdx.x; i < keys; i += blockDim.x) P[h][i] = expf(P[h][i] - lse[h]);
  __syncthreads();
}

// A[i] = sum_h w1[t, h] P[h][i] (fixed order over h).
__device__ inline void dc_mix(float* A, float (*P)[kDcMaxWindow], const DcInputs& in, int t, int keys) {
  for (int i = threadIdx.x; i < keys; i += blockDim.x) {
    float sum = 0.0f;
    for (int h = 0; h < in.H; h++) sum += dc_weight(in.w1, in.w_stride, t, h) * P[h][i];
    A[i] = sum;
  }
  __syncthreads();
}

}  // namespace detail

// Block t: out_h[t] = floatX(y_h[t] + sum_i floatX(w2[t, h] A[t, t - i]) v_h[t - i]); lse (T, H) kept for the
// backward. out may alias y (rows of H*D at stride y_stride).
template <typename Tx>
__global__ void dc_forward_kernel(Tx* out, const Tx* y, int y_stride, float* lse, DcInputs in) {
  __shared__ float P[kDcMaxHeads][kDcMaxWindow];
  __shared__ float A[kDcMaxWindow];
  const int t = in.first_row + blockIdx.x, keys = detail::dc_key_count(in, t);
  detail::dc_probabilities(P, in, t, keys, nullptr, lse + static_cast<size_t>(t) * in.H);
  detail::dc_mix(A, P, in, t, keys);
  for (int h = 0; h < in.H; h++) {
    const float w2 = detail::dc_weight(in.w2, in.w_stride, t, h);
    for (int d = threadIdx.x; d < in.D; d += blockDim.x) {
      float acc = 0.0f;
      for (int i = 0; i < keys; i++)
        acc +=
            to_float(from_float<floatX>(w2 * A[i])) * to_float(detail::dc_head(in.v, in.v_stride, t - i, h, in.D)[d]);
      const size_t at = static_cast<size_t>(t) * y_stride + static_cast<size_t>(h) * in.D + d;
      out[at] = from_float<Tx>(to_float(y[at]) + acc);
    }
  }
}

// Block t, from dy (the gradient of out, rows at dy_stride): with e_h[i] = dy_h[t] . v_h[t - i],
// dA[i] = sum_h e_h[i] w2[t, h], dw2[t, h] = sum_i e_h[i] A[i], dw1[t, h] = sum_i dA[i] P_h[i],
// delta[t, h] = w1[t, h] dw1[t, h] (= sum_i P dP), dS_h[i] = P_h[i] (w1 dA[i] - delta), and
// dq_h[t] += attn_scale sum_i dS_h[i] k_h[t - i].
template <typename Tx>
__global__ void dc_backward_query_kernel(Tx* dq, int dq_stride, float* dw1, float* dw2, float* delta, const Tx* dy,
                                         int dy_stride, const float* lse, DcInputs in) {
  __shared__ float P[kDcMaxHeads][kDcMaxWindow];
  __shared__ float E[kDcMaxHeads][kDcMaxWindow];
  __shared__ float A[kDcMaxWindow], dA[kDcMaxWindow];
  const int t = blockIdx.x, keys = detail::dc_key_count(in, t);
  detail::dc_probabilities(P, in, t, keys, lse + static_cast<size_t>(t) * in.H, nullptr);
  detail::dc_mix(A, P, in, t, keys);
  for (int h = 0; h < in.H; h++)
    for (int i = threadIdx.x; i < keys; i += blockDim.x)
      E[h][i] = detail::dc_dot(detail::dc_head(dy, dy_stride, t, h, in.D),
                               detail::dc_head(in.v, in.v_stride, t - i, h, in.D), in.D);
  __syncthreads();
  for (int i = threadIdx.x; i < keys; i += blockDim.x) {
    float sum = 0.0f;
    for (int h = 0; h < in.H; h++) sum += E[h][i] * detail::dc_weight(in.w2, in.w_stride, t, h);
    dA[i] = sum;
  }
  __syncthreads();
  __shared__ float delta_h[kDcMaxHeads];
  if (static_cast<int>(threadIdx.x) < in.H) {
    const int h = threadIdx.x;
    float sum_w2 = 0.0f, sum_w1 = 0.0f;
    for (int i = 0; i < keys; i++) sum_w2 += E[h][i] * A[i], sum_w1 += dA[i] * P[h][i];
    const size_t at = static_cast<size_t>(t) * in.H + h;
    dw2[at] = sum_w2;
    dw1[at] = sum_w1;
    delta_h[h] = detail::dc_weight(in.w1, in.w_stride, t, h) * sum_w1;
    delta[at] = delta_h[h];
  }
  __syncthreads();
  for (int h = 0; h < in.H; h++) {
    const float w1 = detail::dc_weight(in.w1, in.w_stride, t, h);
    for (int d = threadIdx.x; d < in.D; d += blockDim.x) {
      float acc = 0.0f;
      for (int i = 0; i < keys; i++)
        acc += P[h][i] * (w1 * dA[i] - delta_h[h]) * to_float(detail::dc_head(in.k, in.k_stride, t - i, h, in.D)[d]);
      Tx* target = dq + static_cast<size_t>(t) * dq_stride + static_cast<size_t>(h) * in.D + d;
      *target = from_float<Tx>(to_float(*target) + in.attn_scale * acc);
    }
  }
}

// Block s (a key): over the queries t = s + i that see it (i < W, t < T, same document), recomputes P_h[t, s],
// A, e_h and dA as the query kernel does, then dv_h[s] += sum_t floatX(w2 A) dy_h[t] and
// dk_h[s] += attn_scale sum_t dS_h[t, s] q_h[t].
template <typename Tx>
__global__ void dc_backward_key_kernel(Tx* dk, int dk_stride, Tx* dv, int dv_stride, const Tx* dy, int dy_stride,
                                       const float* lse, const float* delta, DcInputs in) {
  __shared__ float B[kDcMaxHeads][kDcMaxWindow], S[kDcMaxHeads][kDcMaxWindow];
  const int s = blockIdx.x;
  for (int i = threadIdx.x; i < in.window; i += blockDim.x) {
    const int t = s + i;
    const bool sees = t < in.T && in.doc_start[t] <= s;
    float p[kDcMaxHeads], e[kDcMaxHeads], a = 0.0f, da = 0.0f;
    for (int h = 0; sees && h < in.H; h++) {
      const float score = in.attn_scale * detail::dc_dot(detail::dc_head(in.q, in.q_stride, t, h, in.D),
                                                         detail::dc_head(in.k, in.k_stride, s, h, in.D), in.D);
      p[h] = expf(score - lse[static_cast<size_t>(t) * in.H + h]);
      e[h] = detail::dc_dot(detail::dc_head(dy, dy_stride, t, h, in.D), detail::dc_head(in.v, in.v_stride, s, h, in.D),
                            in.D);
      a += detail::dc_weight(in.w1, in.w_stride, t, h) * p[h];
      da += e[h] * detail::dc_weight(in.w2, in.w_stride, t, h);
    }
    for (int h = 0; h < in.H; h++) {
      B[h][i] = sees ? to_float(from_float<floatX>(detail::dc_weight(in.w2, in.w_stride, t, h) * a)) : 0.0f;
      S[h][i] =
          sees ? p[h] * (detail::dc_weight(in.w1, in.w_stride, t, h) * da - delta[static_cast<size_t>(t) * in.H + h])
               : 0.0f;
    }
  }
  __syncthreads();
  const int queries = in.window < in.T - s ? in.window : in.T - s;
  for (int h = 0; h < in.H; h++)
    for (int d = threadIdx.x; d < in.D; d += blockDim.x) {
      float acc_v = 0.0f, acc_k = 0.0f;
      for (int i = 0; i < queries; i++) {
        acc_v += B[h][i] * to_float(detail::dc_head(dy, dy_stride, s + i, h, in.D)[d]);
        acc_k += S[h][i] * to_float(detail::dc_head(in.q, in.q_stride, s + i, h, in.D)[d]);
      }
      Tx* target_v = dv + static_cast<size_t>(s) * dv_stride + static_cast<size_t>(h) * in.D + d;
      Tx* target_k = dk + static_cast<size_t>(s) * dk_stride + static_cast<size_t>(h) * in.D + d;
      *target_v = from_float<Tx>(to_float(*target_v) + acc_v);
      *target_k = from_float<Tx>(to_float(*target_k) + in.attn_scale * acc_k);
    }
}

constexpr float kDcWeightNormEps = 1e-6f;

// Row t: out[t, h] = w1[t, h] = g[t, w1_column + h] / rms over the H of them (fp32, eps 1e-6) and out[t, H + h]
// = w2[t, h] = g[t, w2_column + h]: the DC weights from the post gate's columns, side by side (one w_stride).
template <typename Tx>
__global__ void dc_mix_weights_forward_kernel(Tx* out, const Tx* gate, int gate_stride, int w1_column, int w2_column,
                                              int T, int H) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const Tx* row = gate + static_cast<size_t>(t) * gate_stride;
  float sum = 0.0f;
  for (int h = 0; h < H; h++) sum += to_float(row[w1_column + h]) * to_float(row[w1_column + h]);
  const float r = rsqrtf(LLMC_MUTANT("dc_mix_weights.sum_not_mean", sum / H, sum) + kDcWeightNormEps);
  for (int h = 0; h < H; h++) {
    out[static_cast<size_t>(t) * 2 * H + h] = from_float<Tx>(to_float(row[w1_column + h]) * r);
    out[static_cast<size_t>(t) * 2 * H + H + h] = row[w2_column + h];
  }
}

// out (T, 2H): the normalised w1 then w2 per row (DcInputs{w1 = out, w2 = out + H, w_stride = 2H}); the
// backward (dc_mix_weights_backward) below.
inline void dc_mix_weights_forward(floatX* out, const floatX* gate, int gate_stride, int w1_column, int w2_column,
                                   int T, int H, cudaStream_t stream) {
  if (H < 1 || H > kDcMaxHeads || w1_column < 0 || w2_column < 0 || w1_column + H > gate_stride ||
      w2_column + H > gate_stride)
    throw std::invalid_argument("dc_mix_weights_forward: the H columns of w1 and w2 must lie inside the gate rows");
  if (T <= 0) return;
  constexpr int kBlock = 128;
  const double weights = 2.0 * T * H;  // read from the gate rows and written
  LLMC_LAUNCH_COSTED((KernelCost{2.0 * weights * sizeof(floatX), weights}), dc_mix_weights_forward_kernel<floatX>,
                     dim3(static_cast<unsigned>(ceil_div(T, kBlock))), dim3(kBlock), 0, stream, out, gate, gate_stride,
                     w1_column, w2_column, T, H);
}

// Row t, from dw1, dw2 (T, H) fp32 (dc_backward's): with r the forward's 1/rms,
// dgate[t, w1_column + j] = r dw1_j - g_j r^3 (sum_k dw1_k g_k) / H and dgate[t, w2_column + j] = dw2_j (written).
__global__ void dc_mix_weights_backward_kernel(float* dgate, const float* dw1, const float* dw2, const floatX* gate,
                                               int gate_stride, int w1_column, int w2_column, int T, int H) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= T) return;
  const floatX* row = gate + static_cast<size_t>(t) * gate_stride;
  float sum = 0.0f, dot = 0.0f;
  for (int h = 0; h < H; h++) {
    const float g = to_float(row[w1_column + h]);
    sum += g * g;
    dot += dw1[static_cast<size_t>(t) * H + h] * g;
  }
  const float r = rsqrtf(sum / H + kDcWeightNormEps);
  float* out = dgate + static_cast<size_t>(t) * gate_stride;
  for (int h = 0; h < H; h++) {
    const float g = to_float(row[w1_column + h]);
    out[w1_column + h] =
        r * dw1[static_cast<size_t>(t) * H + h] - LLMC_MUTANT("dc_mix_weights.no_norm_gradient", g * r * r * r * dot / H, 0.0f);
    out[w2_column + h] = dw2[static_cast<size_t>(t) * H + h];
  }
}

// dgate (T, gate_stride) fp32: the columns of w1 and w2 written from dw1, dw2 (T, H); gate is the forward's input.
inline void dc_mix_weights_backward(float* dgate, const float* dw1, const float* dw2, const floatX* gate,
                                    int gate_stride, int w1_column, int w2_column, int T, int H, cudaStream_t stream) {
  if (H < 1 || H > kDcMaxHeads || w1_column < 0 || w2_column < 0 || w1_column + H > gate_stride ||
      w2_column + H > gate_stride)
    throw std::invalid_argument("dc_mix_weights_backward: the H columns of w1 and w2 must lie inside the gate rows");
  if (T <= 0) return;
  constexpr int kBlock = 128;
  const double weights = 2.0 * T * H;  // their gradients and the gate rows read, the gate's gradients written
  LLMC_LAUNCH_COSTED((KernelCost{weights * (8.0 + sizeof(floatX)), 3.0 * weights}), dc_mix_weights_backward_kernel,
                     dim3(static_cast<unsigned>(ceil_div(T, kBlock))), dim3(kBlock), 0, stream, dgate, dw1, dw2, gate,
                     gate_stride, w1_column, w2_column, T, H);
}

namespace detail {
inline void check_dc(const char* launcher, const DcInputs& in) {
  const std::string where = std::string(launcher) + ": ";
  if (in.T < 0 || in.H < 1 || in.H > kDcMaxHeads || in.D < 1)
    throw std::invalid_argument(where + "1 to " + std::to_string(kDcMaxHeads) + " heads of D >= 1");
  if (in.window < 1 || in.window > kDcMaxWindow)
    throw std::invalid_argument(where + "window " + std::to_string(in.window) + " must be 1 to " +
                                std::to_string(kDcMaxWindow));
  if (in.q_stride < in.H * in.D || in.k_stride < in.H * in.D || in.v_stride < in.H * in.D || in.w_stride < in.H)
    throw std::invalid_argument(where + "rows must hold H heads of D (and H weights)");
  if (in.doc_start == nullptr) throw std::invalid_argument(where + "no document starts");
  if (in.first_row < 0 || (in.T > 0 && in.first_row >= in.T))
    throw std::invalid_argument(where + "first_row " + std::to_string(in.first_row) + " outside [0, T)");
}

// `rows` (T, H D) tensors read or written once (an accumulated one counts twice), the lse and the mixing
// weights; flops_per_pair per (query, key, head), over the window's pairs before the document cuts.
// From first_row on (the earlier rows' keys and values counted once each).
inline KernelCost dc_cost(const DcInputs& in, int rows, double flops_per_pair) {
  const double head_rows = static_cast<double>(in.T - in.first_row) * in.H, key_rows = 2.0 * in.first_row * in.H;
  const double pairs = causal_window_pairs(in.T, in.window) - causal_window_pairs(in.first_row, in.window);
  return KernelCost{(rows * head_rows + key_rows) * in.D * sizeof(floatX) + head_rows * (8.0 + 2.0 * sizeof(floatX)),
                    pairs * in.H * flops_per_pair};
}
}  // namespace detail

inline size_t dc_lse_floats(int T, int H) {
  return static_cast<size_t>(T) * H;
}

// out (T rows at y_stride) = y + the DC correction; lse (T, H) for the backward. out may alias y.
inline void dc_forward(floatX* out, const floatX* y, int y_stride, float* lse, const DcInputs& in,
                       cudaStream_t stream) {
  detail::check_dc("dc_forward", in);
  if (in.T == 0) return;
  LLMC_LAUNCH_COSTED(detail::dc_cost(in, 5, 4.0 * in.D + 3.0), dc_forward_kernel<floatX>,
                     dim3(static_cast<unsigned>(in.T - in.first_row)), dim3(kDcBlock), 0, stream, out, y, y_stride, lse,
                     in);
}

// From dy (the gradient of out; y's own gradient is dy itself): dq, dk, dv accumulated (rows at their
// strides), dw1, dw2 (T, H) fp32 written; delta (T, H) fp32 scratch; lse from dc_forward.
inline void dc_backward(floatX* dq, int dq_stride, floatX* dk, int dk_stride, floatX* dv, int dv_stride, float* dw1,
                        float* dw2, float* delta, const floatX* dy, int dy_stride, const float* lse, const DcInputs& in,
                        cudaStream_t stream) {
  detail::check_dc("dc_backward", in);
  if (in.first_row != 0) throw std::invalid_argument("dc_backward: first_row must be 0");
  if (in.T == 0) return;
  LLMC_LAUNCH_COSTED(detail::dc_cost(in, 6, 6.0 * in.D + 6.0), dc_backward_query_kernel<floatX>,
                     dim3(static_cast<unsigned>(in.T)), dim3(kDcBlock), 0, stream, dq, dq_stride, dw1, dw2, delta, dy,
                     dy_stride, lse, in);
  LLMC_LAUNCH_COSTED(detail::dc_cost(in, 8, 8.0 * in.D + 4.0), dc_backward_key_kernel<floatX>,
                     dim3(static_cast<unsigned>(in.T)), dim3(kDcBlock), 0, stream, dk, dk_stride, dv, dv_stride, dy,
                     dy_stride, lse, static_cast<const float*>(delta), in);
}

}  // namespace llmc
