// ReLU^2, the speedrun model's MLP activation: a = relu(h)^2, backward dh = 2 relu(h) da, elementwise in
// 16-byte packets (scalar fallback for unaligned or ragged tensors). A kernel of its own for now: cuBLASLt
// has no ReLU^2 epilogue, so fusing it means a hand-written GEMM epilogue (the faster option the benchmark
// rows of docs/speedrun_model.md quantify).
#pragma once

#include <cstddef>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

__host__ __device__ __forceinline__ float relu_squared(float x) { return x > 0.0f ? x * x : 0.0f; }
__host__ __device__ __forceinline__ float relu_squared_derivative(float x) {
  return x > 0.0f ? LLMC_MUTANT("relu_squared.no_factor_two", 2.0f * x, x) : 0.0f;
}

template <typename Tx>
__global__ void relu_squared_forward_kernel(Tx* out, const Tx* inp, size_t packets) {
  using Packet = Packed128<Tx>;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packets; p += stride) {
    const Packet x = load128(inp + p * Packet::size);
    Packet y;
    for (int j = 0; j < Packet::size; j++) y[j] = from_float<Tx>(relu_squared(to_float(x[j])));
    store128(out + p * Packet::size, y);
  }
}

template <typename Tx>
__global__ void relu_squared_backward_kernel(Tx* dinp, const Tx* inp, const Tx* dout, size_t packets) {
  using Packet = Packed128<Tx>;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packets; p += stride) {
    const Packet x = load128cs(inp + p * Packet::size);
    const Packet dy = load128cs(dout + p * Packet::size);
    Packet dx;
    for (int j = 0; j < Packet::size; j++)
      dx[j] = from_float<Tx>(relu_squared_derivative(to_float(x[j])) * to_float(dy[j]));
    store128(dinp + p * Packet::size, dx);
  }
}

template <typename Tx>
__global__ void relu_squared_forward_scalar_kernel(Tx* out, const Tx* inp, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_float<Tx>(relu_squared(to_float(inp[i])));
}

template <typename Tx>
__global__ void relu_squared_backward_scalar_kernel(Tx* dinp, const Tx* inp, const Tx* dout, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dinp[i] = from_float<Tx>(relu_squared_derivative(to_float(inp[i])) * to_float(dout[i]));
}

// out = relu(inp)^2 over n elements; out may alias inp (the MLP keeps inp, the GEMM output, for the backward).
inline void relu_squared_forward(floatX* out, const floatX* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const ElementwiseLaunch launch = plan_elementwise_launch<floatX>(n, out, inp);
  if (launch.packed)
    LLMC_LAUNCH(relu_squared_forward_kernel<floatX>, launch.grid, launch.block, 0, stream, out, inp, launch.count);
  else
    LLMC_LAUNCH(relu_squared_forward_scalar_kernel<floatX>, launch.grid, launch.block, 0, stream, out, inp,
                launch.count);
}

// dinp = 2 relu(inp) dout (written, not accumulated); dinp may alias dout.
inline void relu_squared_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const ElementwiseLaunch launch = plan_elementwise_launch<floatX>(n, dinp, inp, dout);
  if (launch.packed)
    LLMC_LAUNCH(relu_squared_backward_kernel<floatX>, launch.grid, launch.block, 0, stream, dinp, inp, dout,
                launch.count);
  else
    LLMC_LAUNCH(relu_squared_backward_scalar_kernel<floatX>, launch.grid, launch.block, 0, stream, dinp, inp, dout,
                launch.count);
}

}  // namespace llmc
