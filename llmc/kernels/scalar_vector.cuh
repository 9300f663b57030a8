// The speedrun model's scalar vector on the device: the kernels read the scalars as fp32 and add their
// gradients into fp32 (llmc/kernels/residual_mix.cuh, smear_gate.cuh), while the trainer's parameter and
// gradient buffers hold floatX. These two copy between them: the parameters widened to an fp32 copy
// before the forward, the fp32 gradients added into the floatX gradient buffer (one rounding) after the
// backward. Deterministic (one thread per element).
#pragma once

#include <cstddef>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/cuda/precision.h"

namespace llmc {

template <typename Tx>
__global__ void scalars_to_fp32_kernel(float* out, const Tx* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = to_float(in[i]);
}

template <typename Tx>
__global__ void add_fp32_grads_kernel(Tx* grads, const float* addend, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) grads[i] = from_float<Tx>(LLMC_MUTANT("scalar_vector.overwrite", to_float(grads[i]), 0.0f) + addend[i]);
}

// out[i] = float(in[i]) for i < n.
inline void scalars_to_fp32(float* out, const floatX* in, int n, cudaStream_t stream) {
  constexpr int kBlock = 128;
  if (n <= 0) return;
  LLMC_LAUNCH_COSTED((KernelCost{n * (4.0 + sizeof(floatX)), 0.0}), scalars_to_fp32_kernel<floatX>,
                     dim3((n + kBlock - 1) / kBlock), dim3(kBlock), 0, stream, out, in, n);
}

// grads[i] = floatX(float(grads[i]) + addend[i]) for i < n.
inline void add_fp32_grads(floatX* grads, const float* addend, int n, cudaStream_t stream) {
  constexpr int kBlock = 128;
  if (n <= 0) return;
  LLMC_LAUNCH_COSTED((KernelCost{n * (4.0 + 2.0 * sizeof(floatX)), 1.0 * n}), add_fp32_grads_kernel<floatX>,
                     dim3((n + kBlock - 1) / kBlock), dim3(kBlock), 0, stream, grads, addend, n);
}

}  // namespace llmc
