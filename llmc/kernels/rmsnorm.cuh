// Weightless RMSNorm of the speedrun model (residual stream, x0 and the final norm):
// y = x / sqrt(mean(x^2) + FLT_EPSILON) over rows of C, computed in fp32, stored as floatX, with the
// per-row 1/rms kept in fp32 for the backward, and optionally max |y| over the whole tensor (the FP8 MLP's
// input scale, fused here to save its own read of y). One warp per row, 16-byte packets.
#pragma once

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr float kRmsNormEps = 1.1920928955078125e-07f;  // FLT_EPSILON: PyTorch's rms_norm with eps=None
constexpr int kRmsNormBlock = 256;                      // 8 warps = 8 rows per block

// A warp's row y = x r (C elements, lane l taking packets l, l + 32, ...), r into rstd[row] (if not null) and
// max |y| into *amax (if not null): the norm's second pass, shared by the fused residual pass (residual_norm.cuh).
template <typename Tx>
__device__ __forceinline__ void rmsnorm_store_row(Tx* y, const Tx* x, float r, int C, int row, float* rstd,
                                                  float* amax) {
  using Packet = Packed128<Tx>;
  const int lane = threadIdx.x % kWarpSize;
  float largest = 0.0f;
  for (int p = lane; p < C / Packet::size; p += kWarpSize) {
    const Packet v = load128(x + p * Packet::size);
    Packet result;
    for (int j = 0; j < Packet::size; j++) {
      result[j] = from_float<Tx>(to_float(v[j]) * r);
      largest = fmaxf(largest, fabsf(to_float(result[j])));
    }
    store128(y + p * Packet::size, result);
  }
  if (lane == 0 && rstd != nullptr) rstd[row] = r;
  if (amax != nullptr) {
    largest = warp_reduce_max(largest);
    if (lane == 0) atomic_max_nonnegative(amax, largest);
  }
}

// Row r of C elements starts at base + r * C; the launchers require C to be a whole number of packets.
template <typename Tx>
__global__ void rmsnorm_forward_kernel(Tx* out, float* rstd, float* out_amax, const Tx* inp, int N, int C) {
  using Packet = Packed128<Tx>;
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= N) return;  // whole warps leave together; no block barrier below
  const Tx* x = inp + static_cast<size_t>(row) * C;
  const int packets = C / Packet::size;
  float sum_squares = 0.0f;
  for (int p = lane; p < packets; p += kWarpSize) {
    const Packet v = load128(x + p * Packet::size);
    for (int j = 0; j < Packet::size; j++) sum_squares += to_float(v[j]) * to_float(v[j]);
  }
  const float eps = LLMC_MUTANT("rmsnorm.eps", kRmsNormEps, 1e-5f);
  const float r = rsqrtf(warp_reduce_sum(sum_squares) / C + eps);
  rmsnorm_store_row(out + static_cast<size_t>(row) * C, x, r, C, row, rstd, out_amax);
}

// dx = r (dy - n mean(dy n)) with n = x r; written, or added to dinp when accumulate. dinp may alias dout
// (each lane reads its packets of dout before it writes them).
template <typename Tx>
__global__ void rmsnorm_backward_kernel(Tx* dinp, const Tx* dout, const Tx* inp, const float* rstd, int N, int C,
                                        bool accumulate) {
  using Packet = Packed128<Tx>;
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= N) return;
  const Tx* x = inp + static_cast<size_t>(row) * C;
  const Tx* dy = dout + static_cast<size_t>(row) * C;
  Tx* dx = dinp + static_cast<size_t>(row) * C;
  const int packets = C / Packet::size;
  const float r = rstd[row];
  float dy_dot_x = 0.0f;
  for (int p = lane; p < packets; p += kWarpSize) {
    const Packet xv = load128(x + p * Packet::size), dyv = load128(dy + p * Packet::size);
    for (int j = 0; j < Packet::size; j++) dy_dot_x += to_float(dyv[j]) * to_float(xv[j]);
  }
  // mean(dy n) r = r^2 mean(dy x): the coefficient of x in dx.
  const float x_coefficient = LLMC_MUTANT("rmsnorm.no_projection", r * r * warp_reduce_sum(dy_dot_x) / C, 0.0f);
  for (int p = lane; p < packets; p += kWarpSize) {
    const Packet xv = load128(x + p * Packet::size), dyv = load128(dy + p * Packet::size);
    const Packet old = accumulate ? load128(dx + p * Packet::size) : Packet::zeros();
    Packet result;
    for (int j = 0; j < Packet::size; j++) {
      const float grad = r * (to_float(dyv[j]) - to_float(xv[j]) * x_coefficient);
      result[j] = from_float<Tx>(to_float(old[j]) + grad);
    }
    store128(dx + p * Packet::size, result);
  }
}

// out (N,C) = inp / rms(inp) per row; rstd (N) saved for the backward (may be null). out may alias inp.
// out_amax (may be null): set to max |out| over the tensor (zeroed first: one memset more).
inline void rmsnorm_forward(floatX* out, float* rstd, const floatX* inp, int N, int C, cudaStream_t stream,
                            float* out_amax = nullptr) {
  require_packets<floatX>("rmsnorm_forward", "C", C);
  require_aligned16("rmsnorm_forward", {out, inp});
  const int rows_per_block = kRmsNormBlock / kWarpSize;
  const double elements = static_cast<double>(N) * C;  // inp read, out written, rstd
  if (out_amax != nullptr) memset_async(out_amax, 0, sizeof(float), stream);
  LLMC_LAUNCH_COSTED((KernelCost{2.0 * elements * sizeof(floatX) + 4.0 * N, (out_amax ? 4.0 : 3.0) * elements}),
                     rmsnorm_forward_kernel<floatX>, dim3(static_cast<unsigned>(ceil_div(N, rows_per_block))),
                     dim3(kRmsNormBlock), 0, stream, out, rstd, out_amax, inp, N, C);
}

// dinp (N,C) = (accumulate ? dinp : 0) + d rmsnorm(inp) / d inp applied to dout; inp is the forward's input and
// rstd its saved 1/rms. accumulate adds into the residual stream's gradient; without it dinp may alias dout.
inline void rmsnorm_backward(floatX* dinp, const floatX* dout, const floatX* inp, const float* rstd, int N, int C,
                             bool accumulate, cudaStream_t stream) {
  require_packets<floatX>("rmsnorm_backward", "C", C);
  require_aligned16("rmsnorm_backward", {dinp, dout, inp});
  const int rows_per_block = kRmsNormBlock / kWarpSize;
  const double elements = static_cast<double>(N) * C;  // dout and inp read, dinp written (and read), rstd
  const KernelCost cost{(accumulate ? 4.0 : 3.0) * elements * sizeof(floatX) + 4.0 * N, 6.0 * elements};
  LLMC_LAUNCH_COSTED(cost, rmsnorm_backward_kernel<floatX>, dim3(static_cast<unsigned>(ceil_div(N, rows_per_block))),
                     dim3(kRmsNormBlock), 0, stream, dinp, dout, inp, rstd, N, C, accumulate);
}

}  // namespace llmc
