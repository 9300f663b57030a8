// The output layer's bias and scale of the 2026-07-17 record's small MLPs (the gate MLPs G0, G1 and the MUDD
// MLPs): out[t, j] = s (in[t, j] + b[j]) over rows of n columns (n = 41 or 14, not a whole number of packets),
// s the learnable gate scale (a device fp32 value, used as a bf16 copy) or the MUDD MLPs' constant 0.1.
// Elementwise, one rounding.
// Backward from the fp32 gradient of out (the per-token gates' gradients): din = s dout, db += s sum_t dout, and
// ds += sum dout (in + b), the sums as fixed-order block sums (no atomics).
#pragma once

#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"

namespace llmc {

constexpr int kGateMlpOutputBlock = 256;

// scale: a device fp32 value, or null for `constant`.
struct GateMlpScale {
  const float* scale = nullptr;
  float constant = 1.0f;
};

// The record multiplies by `_mudd_gate_scale.type_as(x)`: the learnable fp32 scale as a bf16 copy (its
// activations are bf16; the cast passes the gradient through). The MUDD MLPs' constant is used as it is.
__device__ __forceinline__ float gate_mlp_scale_value(const GateMlpScale& scale) {
  return scale.scale != nullptr ? __bfloat162float(__float2bfloat16(*scale.scale)) : scale.constant;
}

template <typename Tx>
__global__ void gate_mlp_output_forward_kernel(Tx* out, const Tx* in, const Tx* bias, GateMlpScale scale, int rows,
                                               int n) {
  const size_t count = static_cast<size_t>(rows) * n;
  const float s = gate_mlp_scale_value(scale);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    out[i] = from_float<Tx>(LLMC_MUTANT("gate_mlp_output.bias_unscaled", s * (to_float(in[i]) + to_float(bias[i % n])),
                                        s * to_float(in[i]) + to_float(bias[i % n])));
}

// out (rows, n) = s (in + bias broadcast over rows); out may alias in.
inline void gate_mlp_output_forward(floatX* out, const floatX* in, const floatX* bias, const GateMlpScale& scale,
                                    int rows, int n, cudaStream_t stream) {
  if (rows < 0 || n < 1) throw std::invalid_argument("gate_mlp_output_forward: rows >= 0 and n >= 1");
  if (out == nullptr || in == nullptr || bias == nullptr)
    throw std::invalid_argument("gate_mlp_output_forward: null pointer");
  if (rows == 0) return;
  const double count = static_cast<double>(rows) * n;
  LLMC_LAUNCH_COSTED((KernelCost{2.0 * count * sizeof(floatX) + n * sizeof(floatX), 2.0 * count}),
                     gate_mlp_output_forward_kernel<floatX>,
                     dim3(elementwise_grid(static_cast<size_t>(rows) * n, kGateMlpOutputBlock)),
                     dim3(kGateMlpOutputBlock), 0, stream, out, in, bias, scale, rows, n);
}

template <typename Tx>
__global__ void gate_mlp_output_input_grad_kernel(Tx* din, const float* dout, GateMlpScale scale, size_t count) {
  const float s = gate_mlp_scale_value(scale);
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    din[i] = from_float<Tx>(s * dout[i]);
}

// Block j < n: db[j] += s sum_t dout[t, j]; block n (a device scale only): ds += sum dout (in + b).
template <typename Tx>
__global__ void gate_mlp_output_param_grads_kernel(Tx* dbias, float* dscale, const float* dout, const Tx* in,
                                                   const Tx* bias, GateMlpScale scale, int rows, int n) {
  __shared__ float warp_totals[kWarpSize];
  const int j = blockIdx.x;
  float sum = 0.0f;
  if (j < n) {
    for (int t = threadIdx.x; t < rows; t += blockDim.x) sum += dout[static_cast<size_t>(t) * n + j];
  } else {
    const size_t count = static_cast<size_t>(rows) * n;
    for (size_t i = threadIdx.x; i < count; i += blockDim.x) sum += dout[i] * (to_float(in[i]) + to_float(bias[i % n]));
  }
  const float total = block_reduce_sum(sum, warp_totals);
  if (threadIdx.x != 0) return;
  if (j < n) {
    const float s = gate_mlp_scale_value(scale);
    dbias[j] = from_float<Tx>(to_float(dbias[j]) + LLMC_MUTANT("gate_mlp_output.bias_grad_unscaled", s, 1.0f) * total);
  } else {
    *dscale += total;
  }
}

// From dout (rows, n) fp32: din (rows, n) written, dbias (n) accumulated, and with a device scale, *dscale (fp32)
// accumulated; in and bias are the forward's.
inline void gate_mlp_output_backward(floatX* din, floatX* dbias, float* dscale, const float* dout, const floatX* in,
                                     const floatX* bias, const GateMlpScale& scale, int rows, int n,
                                     cudaStream_t stream) {
  if (rows < 0 || n < 1) throw std::invalid_argument("gate_mlp_output_backward: rows >= 0 and n >= 1");
  if (din == nullptr || dbias == nullptr || dout == nullptr || in == nullptr || bias == nullptr ||
      (scale.scale != nullptr && dscale == nullptr))
    throw std::invalid_argument("gate_mlp_output_backward: null pointer");
  if (rows == 0) return;
  const size_t count = static_cast<size_t>(rows) * n;
  const double elements = static_cast<double>(count);
  LLMC_LAUNCH_COSTED((KernelCost{elements * (4.0 + sizeof(floatX)), elements}),
                     gate_mlp_output_input_grad_kernel<floatX>, dim3(elementwise_grid(count, kGateMlpOutputBlock)),
                     dim3(kGateMlpOutputBlock), 0, stream, din, dout, scale, count);
  const int blocks = n + (scale.scale != nullptr ? 1 : 0);
  const bool dscale_pass = scale.scale != nullptr;  // reads dout and in once more
  const KernelCost sums{elements * 4.0 + (dscale_pass ? elements * (4.0 + sizeof(floatX)) : 0.0) +
                            3.0 * n * sizeof(floatX),
                        elements + (dscale_pass ? 3.0 * elements : 0.0)};
  LLMC_LAUNCH_COSTED(sums, gate_mlp_output_param_grads_kernel<floatX>, dim3(static_cast<unsigned>(blocks)),
                     dim3(kGateMlpOutputBlock), 0, stream, dbias, dscale, dout, in, bias, scale, rows, n);
}

}  // namespace llmc
