// The simple, correct path of the speedrun model's attention (window_attention.cuh is the fast one, bf16
// and head size 128 only): the same problem -- a packed sequence of documents given by cu_seqlens,
// causal, a sliding window of W tokens, a softmax-scale argument -- for any head size up to 256 in
// either precision, one thread per (query or key, head) walking its keys or queries in order with fp32
// arithmetic. Deterministic, no atomics, nothing stored but out and lse; O(T * window * D) work, meant
// for the fp32 build and the small test shapes (docs/speedrun_model.md). A KV cache's continuation (first_row > 0:
// a decode step's few rows over many keys) runs the forward as one warp per (query, head) instead, lanes over the
// head's dims, with the same arithmetic in the same order: the same bits.
//
// Layouts as the fast kernel: q, k, v (and dq, dk, dv) are [T, heads, D] slices whose token rows are
// row_stride elements apart (e.g. views into a fused [T, 3, heads, D] buffer, stride 3 * heads * D);
// out and dout contiguous [T, heads, D]; lse [heads, T] fp32 (natural log). Query i attends key j iff
// both lie in one document of cu_seqlens (num_docs + 1 entries on the device, trailing repeats of T
// allowed) and i - window <= j <= i.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"

namespace llmc {
namespace simple_attention {

constexpr int kMaxHeadDim = 256;
constexpr int kThreads = 128;

struct Problem {
  int T = 0;
  int heads = 0;
  int head_dim = 0;                 // D, 1..kMaxHeadDim
  const int* cu_seqlens = nullptr;  // device, num_docs + 1 entries
  int num_docs = 0;
  int window = 0;      // W >= 0
  float scale = 0.0f;  // softmax scale
  // Rows [0, first_row) are keys and values only (a KV cache's earlier tokens): the forward writes the output and
  // lse of rows [first_row, T). The backward needs 0.
  int first_row = 0;
};

// The document [begin, end) holding position t: the last cu_seqlens entry <= t and the first > t.
struct DocumentSpan {
  int begin, end;
};
__device__ __forceinline__ DocumentSpan document_of(const int* cu_seqlens, int num_docs, int t) {
  int low = 0, high = num_docs;  // cu[low] <= t < cu[high] holds throughout (cu[0] = 0, cu[num_docs] = T)
  while (high - low > 1) {
    const int middle = (low + high) / 2;
    if (cu_seqlens[middle] <= t)
      low = middle;
    else
      high = middle;
  }
  return DocumentSpan{cu_seqlens[low], cu_seqlens[high]};
}

template <typename Tx>
__device__ __forceinline__ float dot_row(const Tx* a, const Tx* b, int D) {
  float sum = 0.0f;
  for (int d = 0; d < D; d++) sum += to_float(a[d]) * to_float(b[d]);
  return sum;
}

// The first key query t attends: the window's start, cut at its document's start (the forward kernels').
__device__ __forceinline__ int first_key(const Problem& p, int t) {
  const DocumentSpan doc = document_of(p.cu_seqlens, p.num_docs, t);
  const int window_start = LLMC_MUTANT("simple_attention.window_plus_one", t - p.window, t - p.window - 1);
  return window_start > doc.begin ? window_start : doc.begin;
}

// A score's dot product in a warp's order, so that one thread (forward_kernel) and a warp (decode_kernel) give the
// same bits: lane l sums dims l, l + 32, ... in increasing order, then warp_reduce_sum's butterfly (after the step
// of `offset`, lane l holds its value plus lane l ^ offset's; every lane ends with the same sum).
template <typename Tx>
__device__ __forceinline__ float warp_order_dot(const Tx* a, const Tx* b, int D) {
  float partial[kWarpSize];
  for (int lane = 0; lane < kWarpSize; lane++) {
    float sum = 0.0f;
    for (int d = lane; d < D; d += kWarpSize) sum += to_float(a[d]) * to_float(b[d]);
    partial[lane] = sum;
  }
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    float next[kWarpSize];
    for (int lane = 0; lane < kWarpSize; lane++) next[lane] = partial[lane] + partial[lane ^ offset];
    for (int lane = 0; lane < kWarpSize; lane++) partial[lane] = next[lane];
  }
  return partial[0];
}

// Thread (t, h): online softmax over keys max(doc begin, t - W) .. t in increasing order.
template <typename Tx>
__global__ void forward_kernel(Tx* out, float* lse, const Tx* q, const Tx* k, const Tx* v, int64_t row_stride,
                               Problem p) {
  const int row = p.first_row * p.heads + blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= p.T * p.heads) return;
  const int t = row / p.heads, h = row % p.heads, D = p.head_dim;
  const int first = first_key(p, t);
  const Tx* q_row = q + t * row_stride + static_cast<int64_t>(h) * D;
  float acc[kMaxHeadDim];
  for (int d = 0; d < D; d++) acc[d] = 0.0f;
  float running_max = -INFINITY, sum = 0.0f;
  for (int j = first; j <= t; j++) {
    const int64_t key_offset = j * row_stride + static_cast<int64_t>(h) * D;
    const float score = p.scale * warp_order_dot(q_row, k + key_offset, D);
    const float new_max = fmaxf(running_max, score);
    const float correction = expf(running_max - new_max), weight = expf(score - new_max);
    sum = sum * correction + weight;
    for (int d = 0; d < D; d++) acc[d] = acc[d] * correction + weight * to_float(v[key_offset + d]);
    running_max = new_max;
  }
  Tx* out_row = out + (static_cast<int64_t>(t) * p.heads + h) * D;
  for (int d = 0; d < D; d++) out_row[d] = from_float<Tx>(acc[d] / sum);
  lse[static_cast<int64_t>(h) * p.T + t] = running_max + logf(sum);
}

constexpr int kDecodeDimsPerLane = kMaxHeadDim / kWarpSize;

// Warp (first_row + blockIdx.x, blockIdx.y): forward_kernel's row with lane l holding dims l, l + 32, ...: the
// same scores (warp_order_dot's sum, here across the lanes), the same online softmax, the same bits.
template <typename Tx>
__global__ void decode_kernel(Tx* out, float* lse, const Tx* q, const Tx* k, const Tx* v, int64_t row_stride,
                              Problem p) {
  const int t = p.first_row + static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y), D = p.head_dim;
  const int lane = static_cast<int>(threadIdx.x);
  const int first = first_key(p, t);
  const Tx* q_row = q + t * row_stride + static_cast<int64_t>(h) * D;
  float q_lane[kDecodeDimsPerLane], acc[kDecodeDimsPerLane];
  for (int i = 0; i < kDecodeDimsPerLane; i++) {
    const int d = lane + i * kWarpSize;
    q_lane[i] = d < D ? to_float(q_row[d]) : 0.0f;
    acc[i] = 0.0f;
  }
  float running_max = -INFINITY, sum = 0.0f;
  for (int j = first; j <= t; j++) {
    const int64_t key_offset = j * row_stride + static_cast<int64_t>(h) * D;
    float dot = 0.0f;
    for (int i = 0; i < kDecodeDimsPerLane && lane + i * kWarpSize < D; i++)
      dot += q_lane[i] * to_float(k[key_offset + lane + i * kWarpSize]);
    const float score = p.scale * LLMC_MUTANT("simple_attention.decode_lane_dot", warp_reduce_sum(dot), dot);
    const float new_max = fmaxf(running_max, score);
    const float correction = expf(running_max - new_max), weight = expf(score - new_max);
    sum = sum * correction + weight;
    for (int i = 0; i < kDecodeDimsPerLane && lane + i * kWarpSize < D; i++)
      acc[i] = acc[i] * correction + weight * to_float(v[key_offset + lane + i * kWarpSize]);
    running_max = new_max;
  }
  Tx* out_row = out + (static_cast<int64_t>(t) * p.heads + h) * D;
  for (int i = 0; i < kDecodeDimsPerLane && lane + i * kWarpSize < D; i++)
    out_row[lane + i * kWarpSize] = from_float<Tx>(acc[i] / sum);
  if (lane == 0) lse[static_cast<int64_t>(h) * p.T + t] = running_max + logf(sum);
}

// delta[h][t] = sum_d dout * out (the softmax backward's row term).
template <typename Tx>
__global__ void delta_kernel(float* delta, const Tx* dout, const Tx* out, Problem p) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= p.T * p.heads) return;
  const int t = row / p.heads, h = row % p.heads;
  const int64_t offset = static_cast<int64_t>(row) * p.head_dim;
  delta[static_cast<int64_t>(h) * p.T + t] = dot_row(dout + offset, out + offset, p.head_dim);
}

// Thread (t, h): dq = scale * sum_j P_tj (dP_tj - delta_t) k_j over the keys the query attends.
template <typename Tx>
__global__ void dq_kernel(Tx* dq, int64_t dq_stride, const float* delta, const Tx* dout, const float* lse, const Tx* q,
                          const Tx* k, const Tx* v, int64_t row_stride, Problem p) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= p.T * p.heads) return;
  const int t = row / p.heads, h = row % p.heads, D = p.head_dim;
  const DocumentSpan doc = document_of(p.cu_seqlens, p.num_docs, t);
  const int first = t - p.window > doc.begin ? t - p.window : doc.begin;
  const Tx* q_row = q + t * row_stride + static_cast<int64_t>(h) * D;
  const Tx* dout_row = dout + static_cast<int64_t>(row) * D;
  const float row_lse = lse[static_cast<int64_t>(h) * p.T + t], row_delta = delta[static_cast<int64_t>(h) * p.T + t];
  float acc[kMaxHeadDim];
  for (int d = 0; d < D; d++) acc[d] = 0.0f;
  for (int j = first; j <= t; j++) {
    const int64_t key_offset = j * row_stride + static_cast<int64_t>(h) * D;
    const float prob = expf(p.scale * dot_row(q_row, k + key_offset, D) - row_lse);
    const float ds = prob * (dot_row(dout_row, v + key_offset, D) - row_delta);
    for (int d = 0; d < D; d++) acc[d] += ds * to_float(k[key_offset + d]);
  }
  Tx* dq_row = dq + t * dq_stride + static_cast<int64_t>(h) * D;
  for (int d = 0; d < D; d++) dq_row[d] = from_float<Tx>(p.scale * acc[d]);
}

// Thread (j, h): dv = sum_i P_ij dout_i and dk = scale * sum_i dS_ij q_i over the queries i that attend
// key j (j .. min(doc end - 1, j + W)).
template <typename Tx>
__global__ void dkdv_kernel(Tx* dk, Tx* dv, int64_t dkv_stride, const float* delta, const Tx* dout, const float* lse,
                            const Tx* q, const Tx* k, const Tx* v, int64_t row_stride, Problem p, bool accumulate_dv) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= p.T * p.heads) return;
  const int j = row / p.heads, h = row % p.heads, D = p.head_dim;
  const DocumentSpan doc = document_of(p.cu_seqlens, p.num_docs, j);
  const int last = j + p.window < doc.end - 1 ? j + p.window : doc.end - 1;
  const int64_t key_offset = j * row_stride + static_cast<int64_t>(h) * D;
  float dk_acc[kMaxHeadDim], dv_acc[kMaxHeadDim];
  for (int d = 0; d < D; d++) dk_acc[d] = dv_acc[d] = 0.0f;
  for (int i = j; i <= last; i++) {
    const Tx* q_row = q + i * row_stride + static_cast<int64_t>(h) * D;
    const Tx* dout_row = dout + (static_cast<int64_t>(i) * p.heads + h) * D;
    const float prob = expf(p.scale * dot_row(q_row, k + key_offset, D) - lse[static_cast<int64_t>(h) * p.T + i]);
    const float ds = prob * (dot_row(dout_row, v + key_offset, D) - delta[static_cast<int64_t>(h) * p.T + i]);
    for (int d = 0; d < D; d++) {
      dv_acc[d] += prob * to_float(dout_row[d]);
      dk_acc[d] += ds * to_float(q_row[d]);
    }
  }
  const bool add_old_dv = LLMC_MUTANT("simple_attention.dv_accumulate_inverted", accumulate_dv, !accumulate_dv);
  for (int d = 0; d < D; d++) {
    dk[j * dkv_stride + static_cast<int64_t>(h) * D + d] = from_float<Tx>(p.scale * dk_acc[d]);
    Tx& dv_out = dv[j * dkv_stride + static_cast<int64_t>(h) * D + d];
    dv_out = from_float<Tx>(add_old_dv ? to_float(dv_out) + dv_acc[d] : dv_acc[d]);
  }
}

namespace detail {

inline void check(const char* caller, const Problem& p, int64_t row_stride, int64_t other_stride) {
  auto require = [&](bool condition, const std::string& what) {
    if (!condition) throw std::invalid_argument(std::string(caller) + ": " + what);
  };
  require(p.T >= 1 && p.heads >= 1,
          "T and heads must be positive (T " + std::to_string(p.T) + ", heads " + std::to_string(p.heads) + ")");
  require(p.head_dim >= 1 && p.head_dim <= kMaxHeadDim,
          "head_dim " + std::to_string(p.head_dim) + " outside 1.." + std::to_string(kMaxHeadDim));
  require(p.cu_seqlens != nullptr && p.num_docs >= 1, "needs cu_seqlens with num_docs >= 1");
  require(p.window >= 0, "window " + std::to_string(p.window) + " must be >= 0");
  require(std::isfinite(p.scale) && p.scale > 0.0f, "softmax scale must be positive and finite");
  require(p.first_row >= 0 && p.first_row < p.T, "first_row " + std::to_string(p.first_row) + " outside [0, T)");
  const int64_t row = static_cast<int64_t>(p.heads) * p.head_dim;
  require(row_stride >= row && other_stride >= row, "row strides must be at least heads * head_dim");
}

// `tensors` (T, heads, D) tensors read or written once, the lse (and delta); flops_per_dim x D per (query, key,
// head) over the window's pairs (W + 1 keys per query) before the document cuts.
// From first_row on: the rows written and their pairs (the earlier rows' keys and values counted once each).
inline KernelCost cost(const Problem& p, int tensors, double flops_per_dim) {
  const double head_rows = static_cast<double>(p.T - p.first_row) * p.heads, key_rows = 2.0 * p.first_row * p.heads;
  const double pairs = causal_window_pairs(p.T, p.window + 1) - causal_window_pairs(p.first_row, p.window + 1);
  return KernelCost{(tensors * head_rows + key_rows) * p.head_dim * sizeof(floatX) + 8.0 * head_rows,
                    pairs * p.heads * flops_per_dim * p.head_dim};
}

inline unsigned grid(const Problem& p) {
  return static_cast<unsigned>((static_cast<int64_t>(p.T - p.first_row) * p.heads + kThreads - 1) / kThreads);
}

}  // namespace detail

// out [T, heads, D] and lse [heads, T] from q, k, v.
inline void forward(floatX* out, float* lse, const floatX* q, const floatX* k, const floatX* v, int64_t row_stride,
                    const Problem& problem, cudaStream_t stream) {
  detail::check("simple_attention::forward", problem, row_stride, row_stride);
  if (problem.first_row > 0) {  // a decode step: a warp per (row, head)
    const dim3 grid(static_cast<unsigned>(problem.T - problem.first_row), static_cast<unsigned>(problem.heads));
    LLMC_LAUNCH_COSTED(detail::cost(problem, 4, 4.0), decode_kernel<floatX>, grid, dim3(kWarpSize), 0, stream, out, lse,
                       q, k, v, row_stride, problem);
    return;
  }
  LLMC_LAUNCH_COSTED(detail::cost(problem, 4, 4.0), forward_kernel<floatX>, dim3(detail::grid(problem)),
                     dim3(kThreads), 0, stream, out, lse, q, k, v, row_stride, problem);
}

// dq, dk, dv (overwritten; rows dqkv_stride apart) from dout and the forward's out and lse; with accumulate_dv,
// dv += the attention's dV instead (rounded once). delta_scratch: heads * T floats.
inline void backward(floatX* dq, floatX* dk, floatX* dv, int64_t dqkv_stride, float* delta_scratch, const floatX* dout,
                     const floatX* out, const float* lse, const floatX* q, const floatX* k, const floatX* v,
                     int64_t row_stride, const Problem& problem, cudaStream_t stream, bool accumulate_dv = false) {
  detail::check("simple_attention::backward", problem, row_stride, dqkv_stride);
  if (problem.first_row != 0) throw std::invalid_argument("simple_attention::backward: first_row must be 0");
  const dim3 grid(detail::grid(problem)), block(kThreads);
  const double head_rows = static_cast<double>(problem.T) * problem.heads, values = head_rows * problem.head_dim;
  LLMC_LAUNCH_COSTED((KernelCost{2.0 * values * sizeof(floatX) + 4.0 * head_rows, 2.0 * values}),
                     delta_kernel<floatX>, grid, block, 0, stream, delta_scratch, dout, out, problem);
  LLMC_LAUNCH_COSTED(detail::cost(problem, 5, 6.0), dq_kernel<floatX>, grid, block, 0, stream, dq, dqkv_stride,
                     static_cast<const float*>(delta_scratch), dout, lse, q, k, v, row_stride, problem);
  LLMC_LAUNCH_COSTED(detail::cost(problem, accumulate_dv ? 7 : 6, 8.0), dkdv_kernel<floatX>, grid, block, 0, stream,
                     dk, dv, dqkv_stride, static_cast<const float*>(delta_scratch), dout, lse, q, k, v, row_stride,
                     problem, accumulate_dv);
}

}  // namespace simple_attention
}  // namespace llmc
