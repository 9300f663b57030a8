// Attention for autoregressive decoding with a KV cache (batch 1): the keys and values of every token
// seen so far stay on the device, so a new token costs one token's work. kv_cache_append copies the new
// tokens' K and V out of the packed qkv into the cache; cached_attention lets each new token's query
// attend causally over the cache (itself included). Prefill (many new tokens) and decode (one) are the
// same two calls. Everything is computed in fp32; K, V and the output are stored as floatX.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

// Cache layout of one layer: keys (NH, max_T, hs), then values (NH, max_T, hs). A head's keys are one
// contiguous run, so the attention reads them in order.
inline size_t kv_cache_layer_elements(int max_T, int C) { return static_cast<size_t>(2) * max_T * C; }

constexpr int kCachedAttentionBlock = 256;       // 8 warps per (query, head)
constexpr int kCachedAttentionMaxHeadSize = 256;  // the output phase gives each of hs dims >= 1 thread

// qkv (n, 3, NH, hs) of the tokens at positions [pos0, pos0 + n) -> their K and V rows in the cache.
template <typename Tx>
__global__ void kv_cache_append_kernel(Tx* cache, const Tx* qkv, int n, int pos0, int max_T, int NH, int hs) {
  const int C = NH * hs;
  const size_t total = static_cast<size_t>(n) * C;
  const size_t values_offset = static_cast<size_t>(NH) * max_T * hs;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int token = static_cast<int>(i / C);
    const int channel = static_cast<int>(i % C);
    const int h = channel / hs, d = channel % hs;
    const size_t slot = (static_cast<size_t>(h) * max_T + pos0 + token) * hs + d;
    cache[slot] = qkv[static_cast<size_t>(token) * 3 * C + C + channel];
    cache[values_offset + slot] = qkv[static_cast<size_t>(token) * 3 * C + 2 * C + channel];
  }
}

// Block-wide maximum, returned to every thread (same structure and barriers as block_reduce_sum).
__device__ __forceinline__ float block_reduce_max(float value, float* warp_totals) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int num_warps = blockDim.x / kWarpSize;
  value = warp_reduce_max(value);
  __syncthreads();  // a previous call may still be reading warp_totals
  if (lane == 0) warp_totals[warp] = value;
  __syncthreads();
  const float total = lane < num_warps ? warp_totals[lane] : -FLT_MAX;
  return warp_reduce_max(total);
}

// One block per (new token i, head h): the query at position p = pos0 + i attends to keys 0..p.
// Dynamic shared memory: q (hs floats), the scores (pos0 + n floats), the output partials
// (groups * hs floats, groups = blockDim / hs). Each score is one thread's dot product over hs; the
// weighted sum of values gives each (group, dim) thread every groups-th key, summed in a fixed order.
template <typename Tx>
__global__ void cached_attention_kernel(Tx* out, const Tx* qkv, const Tx* cache, int n, int pos0, int max_T, int NH,
                                        int hs, float scale) {
  __shared__ float warp_totals[32];
  LLMC_DYNAMIC_SHARED(float, shared);
  const int i = blockIdx.x, h = blockIdx.y;
  const int C = NH * hs;
  const int num_keys = pos0 + i + 1;
  const int groups = blockDim.x / hs;
  float* q = shared;
  float* scores = q + hs;
  float* partials = scores + pos0 + n;
  const Tx* keys = cache + static_cast<size_t>(h) * max_T * hs;
  const Tx* values = cache + static_cast<size_t>(NH) * max_T * hs + static_cast<size_t>(h) * max_T * hs;

  const Tx* query = qkv + static_cast<size_t>(i) * 3 * C + h * hs;
  for (int d = threadIdx.x; d < hs; d += blockDim.x) q[d] = to_float(query[d]) * scale;
  __syncthreads();  // q complete before any thread's dot products
  float local_max = -FLT_MAX;
  for (int t = threadIdx.x; t < num_keys; t += blockDim.x) {
    const Tx* key = keys + static_cast<size_t>(t) * hs;
    float dot = 0.0f;
    for (int d = 0; d < hs; d++) dot += q[d] * to_float(key[d]);
    scores[t] = dot;
    local_max = fmaxf(local_max, dot);
  }
  const float max_score = block_reduce_max(local_max, warp_totals);
  float local_sum = 0.0f;
  for (int t = threadIdx.x; t < num_keys; t += blockDim.x) {  // each thread rescales the scores it wrote
    const float weight = expf(scores[t] - max_score);
    scores[t] = weight;
    local_sum += weight;
  }
  const float sum = block_reduce_sum(local_sum, warp_totals);  // its barriers also publish the weights

  const int group = threadIdx.x / hs, d = threadIdx.x % hs;
  if (group < groups) {
    float acc = 0.0f;
    for (int t = group; t < num_keys; t += groups) acc += scores[t] * to_float(values[static_cast<size_t>(t) * hs + d]);
    partials[group * hs + d] = acc;
  }
  LLMC_MUTANT("kv_cache.partials_no_barrier", __syncthreads(), (void)0);  // every group's partial written first
  if (static_cast<int>(threadIdx.x) < hs) {
    float total = 0.0f;
    for (int g = 0; g < groups; g++) total += partials[g * hs + threadIdx.x];
    out[static_cast<size_t>(i) * C + h * hs + threadIdx.x] = from_float<Tx>(total / sum);
  }
}

inline void check_cached_attention_shape(int n, int pos0, int max_T, int C, int NH) {
  if (NH <= 0 || C % NH != 0)
    throw std::invalid_argument("cached_attention: C=" + std::to_string(C) + " is not a multiple of NH=" +
                                std::to_string(NH));
  const int hs = C / NH;
  if (hs > kCachedAttentionMaxHeadSize)
    throw std::invalid_argument("cached_attention: head size " + std::to_string(hs) + " exceeds " +
                                std::to_string(kCachedAttentionMaxHeadSize));
  if (n <= 0 || pos0 < 0 || pos0 + n > max_T)
    throw std::out_of_range("cached_attention: tokens [" + std::to_string(pos0) + ", " + std::to_string(pos0 + n) +
                            ") outside the cache's " + std::to_string(max_T) + " positions");
}

// Bytes of dynamic shared memory cached_attention needs for keys up to position pos0 + n.
inline size_t cached_attention_shared_bytes(int n, int pos0, int hs) {
  const int groups = kCachedAttentionBlock / hs;
  return sizeof(float) * (static_cast<size_t>(hs) + pos0 + n + static_cast<size_t>(groups) * hs);
}

// cache: one layer's kv_cache_layer_elements(max_T, C). Writes the K, V of qkv's n rows at positions
// [pos0, pos0 + n).
inline void kv_cache_append(floatX* cache, const floatX* qkv, int n, int pos0, int max_T, int C, int NH,
                            cudaStream_t stream) {
  check_cached_attention_shape(n, pos0, max_T, C, NH);
  constexpr int kBlock = 256;
  LLMC_LAUNCH(kv_cache_append_kernel<floatX>, dim3(elementwise_grid(static_cast<size_t>(n) * C, kBlock)),
              dim3(kBlock), 0, stream, cache, qkv, n, pos0, max_T, NH, C / NH);
}

// out (n, C): causal softmax(q k^T / sqrt(hs)) v of the n new tokens (queries from qkv (n, 3C)) over
// the cache's positions [0, pos0 + n); kv_cache_append of the same qkv must come first in stream order.
inline void cached_attention(floatX* out, const floatX* qkv, const floatX* cache, int n, int pos0, int max_T, int C,
                             int NH, cudaStream_t stream) {
  check_cached_attention_shape(n, pos0, max_T, C, NH);
  const int hs = C / NH;
  const size_t shared_bytes = cached_attention_shared_bytes(n, pos0, hs);
  constexpr size_t kDefaultSharedLimit = 48 * 1024;  // larger needs an opt-in; ~11,000 positions at hs 64
  if (shared_bytes > kDefaultSharedLimit)
    throw std::invalid_argument("cached_attention: " + std::to_string(pos0 + n) +
                                " positions need more than 48 KiB of shared memory for the scores");
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(NH));
  LLMC_LAUNCH(cached_attention_kernel<floatX>, grid, dim3(kCachedAttentionBlock), shared_bytes, stream, out, qkv, cache,
              n, pos0, max_T, NH, hs, 1.0f / sqrtf(static_cast<float>(hs)));
}

}  // namespace llmc
