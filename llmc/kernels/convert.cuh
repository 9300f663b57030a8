// Element-wise copies between parameter, master and gradient buffers of different precisions: convert
// (one rounding from In to Out, or a plain copy) and add_into (the sum of two floatX buffers, rounded
// once), as the optimizers use them on their streams.
#pragma once
#include <cstddef>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/reduction.cuh"  // elementwise_grid

namespace llmc {

template <typename In, typename Out>
__global__ void convert_kernel(Out* out, const In* in, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_float<Out>(to_float(in[i]));
}

// out[i] = Out(in[i]) (a copy, or one rounding).
template <typename In, typename Out>
void convert(Out* out, const In* in, size_t n, cudaStream_t stream) {
  constexpr int kBlock = 256;
  if (n == 0) return;
  LLMC_LAUNCH_COSTED((KernelCost{static_cast<double>(n) * (sizeof(In) + sizeof(Out)), 0.0}),
                     (convert_kernel<In, Out>), dim3(elementwise_grid(n, kBlock)), dim3(kBlock), 0, stream, out, in, n);
}

template <typename T>
__global__ void add_into_kernel(T* grads, const T* saved, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    grads[i] = from_float<T>(to_float(grads[i]) + to_float(saved[i]));
}

// grads[i] = T(grads[i] + saved[i]), one rounding (the sharded Adam's two steps' gradients).
template <typename T>
void add_into(T* grads, const T* saved, size_t n, cudaStream_t stream) {
  constexpr int kBlock = 256;
  if (n == 0) return;
  LLMC_LAUNCH_COSTED((KernelCost{3.0 * n * sizeof(T), static_cast<double>(n)}), (add_into_kernel<T>),
                     dim3(elementwise_grid(n, kBlock)), dim3(kBlock), 0, stream, grads, saved, n);
}

}  // namespace llmc
