// Causal multi-head self-attention, first version: permute qkv into per-head q, k, v; batched GEMMs
// for the scores (scaled by 1/sqrt(hs) in the GEMM) and for att @ v; a causal softmax kernel; and an
// unpermute back to (B,T,C). The backward mirrors it. Works for any head size and in both precisions;
// llmc/kernels/flash_attention.cuh is the fused tensor-core version (bf16, head size 64).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/matmul.cuh"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

// Element i of a head-major (B,NH,T,hs) tensor lives at this offset of the token-major tensor
// (B,T,tensors_per_token,NH,hs): tensors_per_token is 3 for the packed qkv, 1 for (B,T,C). The offset of
// the k (v) part of qkv is this plus C (2C).
__device__ __forceinline__ size_t head_major_to_token_major(size_t i, int T, int NH, int hs, int tensors_per_token) {
  const int d = static_cast<int>(i % hs);
  const int t = static_cast<int>((i / hs) % T);
  const int h = static_cast<int>((i / (static_cast<size_t>(hs) * T)) % NH);
  const int b = static_cast<int>(i / (static_cast<size_t>(hs) * T * NH));
  return ((static_cast<size_t>(b) * T + t) * tensors_per_token * NH + h) * hs + d;
}

// qkv (B,T,3,NH,hs) -> q, k, v, each (B,NH,T,hs), stored one after the other in qkvr.
template <typename Tx>
__global__ void attention_permute_kernel(Tx* q, Tx* k, Tx* v, const Tx* qkv, int B, int T, int NH, int hs) {
  const size_t total = static_cast<size_t>(B) * NH * T * hs;
  const size_t C = static_cast<size_t>(NH) * hs;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const size_t source = head_major_to_token_major(i, T, NH, hs, 3);
    q[i] = qkv[source];
    k[i] = qkv[source + C];
    v[i] = qkv[source + 2 * C];
  }
}

// Inverse direction: dq, dk, dv (B,NH,T,hs) -> dqkv (B,T,3,NH,hs).
template <typename Tx>
__global__ void attention_unpermute_qkv_kernel(Tx* dqkv, const Tx* dq, const Tx* dk, const Tx* dv, int B, int T,
                                               int NH, int hs) {
  const size_t total = static_cast<size_t>(B) * NH * T * hs;
  const size_t C = static_cast<size_t>(NH) * hs;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const size_t target = head_major_to_token_major(i, T, NH, hs, 3);
    dqkv[target] = dq[i];
    dqkv[target + C] = dk[i];
    dqkv[target + 2 * C] = dv[i];
  }
}

// (B,NH,T,hs) <-> (B,T,NH,hs): to_heads = false gathers heads into (B,T,C), true splits (B,T,C) into heads.
template <typename Tx>
__global__ void attention_head_layout_kernel(Tx* out, const Tx* inp, int B, int T, int NH, int hs, bool to_heads) {
  const size_t total = static_cast<size_t>(B) * NH * T * hs;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const size_t token_major = head_major_to_token_major(i, T, NH, hs, 1);
    if (to_heads)
      out[i] = inp[token_major];
    else
      out[token_major] = inp[i];
  }
}

// In place over (B*NH, T, T) scores (already scaled): row t becomes softmax over columns 0..t and 0
// above the diagonal. One warp per row.
template <typename Tx>
__global__ void causal_softmax_kernel(Tx* att, int rows, int T) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return;  // whole warps leave together
  const int t = row % T;
  Tx* x = att + static_cast<size_t>(row) * T;
  float max_value = -FLT_MAX;
  for (int j = lane; j <= t; j += kWarpSize) max_value = fmaxf(max_value, to_float(x[j]));
  const float max_log2 = warp_reduce_max(max_value) * kLog2e;
  float sum = 0.0f;
  for (int j = lane; j <= t; j += kWarpSize) sum += exp_shifted(to_float(x[j]), max_log2);
  const float inv_sum = 1.0f / warp_reduce_sum(sum);
  for (int j = lane; j < T; j += kWarpSize)
    x[j] = from_float<Tx>(j <= t ? exp_shifted(to_float(x[j]), max_log2) * inv_sum : 0.0f);
}

// In place over datt (B*NH, T, T): dpreatt[t,j] = att[t,j] * (datt[t,j] - sum_i att[t,i] datt[t,i])
// for j <= t, 0 above the diagonal. (The 1/sqrt(hs) scale is applied by the following GEMMs.)
template <typename Tx>
__global__ void causal_softmax_backward_kernel(Tx* datt, const Tx* att, int rows, int T) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const int t = row % T;
  Tx* dx = datt + static_cast<size_t>(row) * T;
  const Tx* y = att + static_cast<size_t>(row) * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += kWarpSize) dot += to_float(y[j]) * to_float(dx[j]);
  dot = warp_reduce_sum(dot);
  for (int j = lane; j < T; j += kWarpSize)
    dx[j] = from_float<Tx>(j <= t ? to_float(y[j]) * (to_float(dx[j]) - dot) : 0.0f);
}

inline void check_attention_shape(const char* caller, int C, int NH) {
  if (NH <= 0 || C % NH != 0)
    throw std::invalid_argument(std::string(caller) + ": C = " + std::to_string(C) +
                                " is not divisible by NH = " + std::to_string(NH));
}

// Forward. qkv (B,T,3C) from the qkv projection; out (B,T,C). Saved for the backward (keep them):
// qkvr (3*B*T*C: q, k, v per head) and att (B,NH,T,T, the softmax). scratch: B*T*C elements.
inline void attention_forward(MatmulContext& context, floatX* out, floatX* qkvr, floatX* att, floatX* scratch,
                              const floatX* qkv, int B, int T, int C, int NH, cudaStream_t stream) {
  check_attention_shape("attention_forward", C, NH);
  const int hs = C / NH;
  const size_t head_elements = static_cast<size_t>(B) * T * C;
  floatX* q = qkvr;
  floatX* k = qkvr + head_elements;
  floatX* v = qkvr + 2 * head_elements;
  constexpr int kBlock = 256;
  LLMC_LAUNCH(attention_permute_kernel<floatX>, dim3(elementwise_grid(head_elements, kBlock)), dim3(kBlock), 0,
              stream, q, k, v, qkv, B, T, NH, hs);

  GemmArgs scores;  // att = q @ k^T / sqrt(hs), per (b, h)
  scores.d = att;
  scores.a = q;
  scores.b = k;
  scores.trans_b = true;
  scores.m = T;
  scores.n = T;
  scores.k = hs;
  scores.alpha = 1.0f / std::sqrt(static_cast<float>(hs));
  scores.batch = B * NH;
  scores.stride_a = scores.stride_b = static_cast<long long>(T) * hs;
  scores.stride_d = static_cast<long long>(T) * T;
  gemm(context, scores, stream);

  LLMC_LAUNCH(causal_softmax_kernel<floatX>,
              dim3(static_cast<unsigned>(ceil_div(static_cast<long long>(B) * NH * T, kBlock / kWarpSize))),
              dim3(kBlock), 0, stream, att, B * NH * T, T);

  GemmArgs values;  // scratch (B,NH,T,hs) = att @ v
  values.d = scratch;
  values.a = att;
  values.b = v;
  values.m = T;
  values.n = hs;
  values.k = T;
  values.batch = B * NH;
  values.stride_a = static_cast<long long>(T) * T;
  values.stride_b = values.stride_d = static_cast<long long>(T) * hs;
  gemm(context, values, stream);

  LLMC_LAUNCH(attention_head_layout_kernel<floatX>, dim3(elementwise_grid(head_elements, kBlock)), dim3(kBlock), 0,
              stream, out, scratch, B, T, NH, hs, /*to_heads=*/false);
}

// Backward. dqkv (B,T,3C) is overwritten. dout (B,T,C); qkvr and att from the forward.
// Scratch (all overwritten): dqkvr 3*B*T*C elements, datt B*NH*T*T elements, dvalues B*T*C elements.
inline void attention_backward(MatmulContext& context, floatX* dqkv, floatX* dqkvr, floatX* datt, floatX* dvalues,
                               const floatX* dout, const floatX* qkvr, const floatX* att, int B, int T, int C, int NH,
                               cudaStream_t stream) {
  check_attention_shape("attention_backward", C, NH);
  const int hs = C / NH;
  const size_t head_elements = static_cast<size_t>(B) * T * C;
  const floatX* q = qkvr;
  const floatX* k = qkvr + head_elements;
  const floatX* v = qkvr + 2 * head_elements;
  floatX* dq = dqkvr;
  floatX* dk = dqkvr + head_elements;
  floatX* dv = dqkvr + 2 * head_elements;
  const long long head_stride = static_cast<long long>(T) * hs, att_stride = static_cast<long long>(T) * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  constexpr int kBlock = 256;
  LLMC_LAUNCH(attention_head_layout_kernel<floatX>, dim3(elementwise_grid(head_elements, kBlock)), dim3(kBlock), 0,
              stream, dvalues, dout, B, T, NH, hs, /*to_heads=*/true);

  GemmArgs g;  // datt = dvalues @ v^T
  g.batch = B * NH;
  g.d = datt;
  g.a = dvalues;
  g.b = v;
  g.trans_b = true;
  g.m = T;
  g.n = T;
  g.k = hs;
  g.stride_a = g.stride_b = head_stride;
  g.stride_d = att_stride;
  gemm(context, g, stream);

  g = GemmArgs{};  // dv = att^T @ dvalues
  g.batch = B * NH;
  g.d = dv;
  g.a = att;
  g.trans_a = true;
  g.b = dvalues;
  g.m = T;
  g.n = hs;
  g.k = T;
  g.stride_a = att_stride;
  g.stride_b = g.stride_d = head_stride;
  gemm(context, g, stream);

  LLMC_LAUNCH(causal_softmax_backward_kernel<floatX>,
              dim3(static_cast<unsigned>(ceil_div(static_cast<long long>(B) * NH * T, kBlock / kWarpSize))),
              dim3(kBlock), 0, stream, datt, att, B * NH * T, T);

  g = GemmArgs{};  // dq = dpreatt @ k / sqrt(hs)
  g.batch = B * NH;
  g.d = dq;
  g.a = datt;
  g.b = k;
  g.m = T;
  g.n = hs;
  g.k = T;
  g.alpha = scale;
  g.stride_a = att_stride;
  g.stride_b = g.stride_d = head_stride;
  gemm(context, g, stream);

  g = GemmArgs{};  // dk = dpreatt^T @ q / sqrt(hs)
  g.batch = B * NH;
  g.d = dk;
  g.a = datt;
  g.trans_a = true;
  g.b = q;
  g.m = T;
  g.n = hs;
  g.k = T;
  g.alpha = scale;
  g.stride_a = att_stride;
  g.stride_b = g.stride_d = head_stride;
  gemm(context, g, stream);

  LLMC_LAUNCH(attention_unpermute_qkv_kernel<floatX>, dim3(elementwise_grid(head_elements, kBlock)), dim3(kBlock), 0,
              stream, dqkv, dq, dk, dv, B, T, NH, hs);
}

}  // namespace llmc
