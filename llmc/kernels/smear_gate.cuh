// The speedrun model's smear: each token's embedding takes in a gated share of the previous token's,
// x[t] = e[t] + lambda sigmoid(e[t][0:12] . w) e[t-1] for t >= 1, x[0] = e[0] (reads the un-smeared e;
// crosses document boundaries), lambda = scalars[lambda_index] on the device, w (12) floatX.
// Backward: de written; dw and dlambda accumulated through per-block partials in a fixed order and a
// fixed-order final sum (no atomics, bitwise repeatable).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr int kSmearWidth = 12;                  // gate input: e[t][0:12]
constexpr int kSmearBlock = 256;                 // 8 warps
constexpr int kSmearRowsPerBlock = 32;           // backward: rows per block, hence per partial
constexpr int kSmearPartials = kSmearWidth + 1;  // dw[0..11], dlambda

// sigmoid(e[t][0:12] . w), summed by the warp's butterfly (lanes >= 12 add 0); every lane gets it.
template <typename Tx>
__device__ __forceinline__ float smear_gate_value(const Tx* e_row, const Tx* w, int lane) {
  const float product = lane < kSmearWidth ? to_float(e_row[lane]) * to_float(w[lane]) : 0.0f;
  return 1.0f / (1.0f + expf(-warp_reduce_sum(product)));
}

// One warp per row.
template <typename Tx>
__global__ void smear_forward_kernel(Tx* out, const Tx* e, const Tx* w, const float* scalars, int lambda_index, int T,
                                     int C, bool continues) {
  using Packet = Packed128<Tx>;
  const int lane = threadIdx.x % kWarpSize;
  const int t = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (t >= T) return;
  const Tx* row = e + static_cast<size_t>(t) * C;
  const bool has_previous = t > 0 || continues;
  const float mix = has_previous ? scalars[lambda_index] * smear_gate_value(row, w, lane) : 0.0f;
  const Tx* previous = has_previous ? row - C : row;
  for (int p = lane; p < C / Packet::size; p += kWarpSize) {
    const Packet x = load128(row + p * Packet::size), prev = load128(previous + p * Packet::size);
    Packet result;
    for (int j = 0; j < Packet::size; j++) result[j] = from_float<Tx>(to_float(x[j]) + mix * to_float(prev[j]));
    store128(out + static_cast<size_t>(t) * C + p * Packet::size, result);
  }
}

// Block b handles rows [32 b, 32 b + 32), warp w the rows 32 b + w + 8 i. Per row t, with g_t the gate and
// s_t = dout[t] . e[t-1]:  de[t] = dout[t] + lambda g_{t+1} dout[t+1] + [c < 12] lambda g_t (1 - g_t) s_t w[c],
// dw[c] += lambda g_t (1 - g_t) s_t e[t][c], dlambda += g_t s_t. partials[b][0..12] = the block's dw, dlambda.
template <typename Tx>
__global__ void smear_backward_kernel(Tx* de, float* partials, const Tx* dout, const Tx* e, const Tx* w,
                                      const float* scalars, int lambda_index, int T, int C) {
  using Packet = Packed128<Tx>;
  __shared__ float warp_partials[kSmearBlock / kWarpSize][kSmearPartials];
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize, warps = blockDim.x / kWarpSize;
  const float lambda = scalars[lambda_index];
  float dw_acc = 0.0f, dlambda_acc = 0.0f;
  const int first = blockIdx.x * kSmearRowsPerBlock,
            last = first + kSmearRowsPerBlock < T ? first + kSmearRowsPerBlock : T;
  for (int t = first + warp; t < last; t += warps) {
    const Tx* row = e + static_cast<size_t>(t) * C;
    const float g = t > 0 ? smear_gate_value(row, w, lane) : 0.0f;
    const float g_next = t + 1 < T ? smear_gate_value(row + C, w, lane) : 0.0f;
    float s_partial = 0.0f;
    for (int p = lane; t > 0 && p < C / Packet::size; p += kWarpSize) {
      const Packet dy = load128(dout + static_cast<size_t>(t) * C + p * Packet::size),
                   prev = load128(row - C + p * Packet::size);
      for (int j = 0; j < Packet::size; j++) s_partial += to_float(dy[j]) * to_float(prev[j]);
    }
    const float s = warp_reduce_sum(s_partial);
    const float gate_grad = lambda * g * (1.0f - g) * s;  // d loss / d (e[t][0:12] . w)
    const float next_share = LLMC_MUTANT("smear.no_next_row", lambda * g_next, 0.0f);
    for (int p = lane; p < C / Packet::size; p += kWarpSize) {
      const Packet dy = load128(dout + static_cast<size_t>(t) * C + p * Packet::size);
      const Packet dy_next =
          t + 1 < T ? load128(dout + static_cast<size_t>(t + 1) * C + p * Packet::size) : Packet::zeros();
      Packet result;
      for (int j = 0; j < Packet::size; j++) {
        const int c = p * Packet::size + j;
        const float gate_term = c < kSmearWidth ? gate_grad * to_float(w[c]) : 0.0f;
        result[j] = from_float<Tx>(to_float(dy[j]) + next_share * to_float(dy_next[j]) + gate_term);
      }
      store128(de + static_cast<size_t>(t) * C + p * Packet::size, result);
    }
    if (lane < kSmearWidth) dw_acc += gate_grad * to_float(row[lane]);
    dlambda_acc += g * s;
  }
  if (lane < kSmearWidth) warp_partials[warp][lane] = dw_acc;
  if (lane == kSmearWidth) warp_partials[warp][kSmearWidth] = dlambda_acc;
  LLMC_MUTANT("smear.no_barrier", __syncthreads(), (void)0);
  if (threadIdx.x < kSmearPartials) {
    float sum = 0.0f;
    for (int v = 0; v < warps; v++) sum += warp_partials[v][threadIdx.x];
    partials[static_cast<size_t>(blockIdx.x) * kSmearPartials + threadIdx.x] = sum;
  }
}

// Warp k: dw[k] += the fixed-order sum of the blocks' partials (k < 12), dscalars[lambda_index] (k = 12).
template <typename Tx>
__global__ void smear_param_grads_kernel(Tx* dw, float* dscalars, const float* partials, int num_blocks,
                                         int lambda_index) {
  const int k = threadIdx.x / kWarpSize;
  const float total = warp_ordered_sum(partials + k, num_blocks, kSmearPartials);
  if (threadIdx.x % kWarpSize != 0) return;
  if (k < kSmearWidth)
    dw[k] = from_float<Tx>(to_float(dw[k]) + total);
  else
    dscalars[lambda_index] += total;
}

namespace detail {
inline void check_smear_args(const char* launcher, int C, std::initializer_list<const void*> pointers) {
  require_packets<floatX>(launcher, "C", C);
  if (C < kSmearWidth)
    throw std::invalid_argument(std::string(launcher) + ": C must be >= 12 (the gate reads x[0:12])");
  require_aligned16(launcher, pointers);
}
}  // namespace detail

// out (T, C) = the smear of e (T, C) with gate weights w (12) and lambda = scalars[lambda_index] (device).
// out must not alias e (row t reads row t-1). continues: the row before e's first is the previous token's (a KV
// cache's continuation), which row 0 smears in.
inline void smear_forward(floatX* out, const floatX* e, const floatX* w, const float* scalars, int lambda_index, int T,
                          int C, cudaStream_t stream, bool continues = false) {
  detail::check_smear_args("smear_forward", C, {out, e});
  if (T <= 0) return;
  const int rows_per_block = kSmearBlock / kWarpSize;
  const double elements = static_cast<double>(T) * C;  // e read, out written; the gate's 12-dot and sigmoid
  LLMC_LAUNCH_COSTED((KernelCost{2.0 * elements * sizeof(floatX), 3.0 * elements + 30.0 * T}),
                     smear_forward_kernel<floatX>, dim3(static_cast<unsigned>(ceil_div(T, rows_per_block))),
                     dim3(kSmearBlock), 0, stream, out, e, w, scalars, lambda_index, T, C, continues);
}

inline size_t smear_backward_scratch_floats(int T) {
  return static_cast<size_t>(ceil_div(T, kSmearRowsPerBlock)) * kSmearPartials;
}

// de (T, C) written (the gradient of the embedding output); dw (12, floatX) and dscalars[lambda_index] (fp32)
// accumulated. dout (T, C) is the gradient of the smear's output; de must alias neither dout nor e.
inline void smear_backward(floatX* de, floatX* dw, float* dscalars, const floatX* dout, const floatX* e,
                           const floatX* w, const float* scalars, int lambda_index, int T, int C, float* scratch,
                           size_t scratch_floats, cudaStream_t stream) {
  detail::check_smear_args("smear_backward", C, {de, dout, e});
  if (T <= 0) return;
  require_scratch("smear_backward", scratch_floats, smear_backward_scratch_floats(T));
  const int blocks = static_cast<int>(ceil_div(T, kSmearRowsPerBlock));
  const double elements = static_cast<double>(T) * C;  // dout and e read, de written, the block partials
  const double partial_bytes = 4.0 * blocks * kSmearPartials;
  LLMC_LAUNCH_COSTED((KernelCost{3.0 * elements * sizeof(floatX) + partial_bytes, 8.0 * elements + 60.0 * T}),
                     smear_backward_kernel<floatX>, dim3(static_cast<unsigned>(blocks)), dim3(kSmearBlock), 0, stream,
                     de, scratch, dout, e, w, scalars, lambda_index, T, C);
  LLMC_LAUNCH_COSTED((KernelCost{partial_bytes, static_cast<double>(blocks) * kSmearPartials}),
                     smear_param_grads_kernel<floatX>, dim3(1), dim3(kSmearPartials * kWarpSize), 0, stream, dw,
                     dscalars, static_cast<const float*>(scratch), blocks, lambda_index);
}

}  // namespace llmc
