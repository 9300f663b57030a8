// ReLU^2, the speedrun model's MLP activation: a = relu(h)^2, backward dh = 2 relu(h) da, or, from the stored
// activation alone as the 2026-07-17 record does, dh = 2 sqrt(a) da; elementwise in 16-byte packets (scalar
// fallback for unaligned or ragged tensors). cuBLASLt has no ReLU^2 epilogue, so with cuBLASLt GEMMs this is a
// pass of its own; llmc/kernels/wgmma_gemm.cuh does the same arithmetic in its own GEMM's epilogue
// (--wgmma-gemms, docs/kernels.md).
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

// d relu(h)^2 / dh from the saved value: h itself, or (kFromPost) the stored a = relu(h)^2, whose square root
// stands for relu(h).
template <bool kFromPost>
__host__ __device__ __forceinline__ float relu_squared_slope(float saved) {
  return kFromPost ? 2.0f * sqrtf(saved) : relu_squared_derivative(saved);
}

template <typename Tx, bool kFromPost>
__global__ void relu_squared_backward_kernel(Tx* dinp, const Tx* inp, const Tx* dout, size_t packets) {
  using Packet = Packed128<Tx>;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packets; p += stride) {
    const Packet x = load128cs(inp + p * Packet::size);
    const Packet dy = load128cs(dout + p * Packet::size);
    Packet dx;
    for (int j = 0; j < Packet::size; j++)
      dx[j] = from_float<Tx>(relu_squared_slope<kFromPost>(to_float(x[j])) * to_float(dy[j]));
    store128(dinp + p * Packet::size, dx);
  }
}

template <typename Tx>
__global__ void relu_squared_forward_scalar_kernel(Tx* out, const Tx* inp, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_float<Tx>(relu_squared(to_float(inp[i])));
}

template <typename Tx, bool kFromPost>
__global__ void relu_squared_backward_scalar_kernel(Tx* dinp, const Tx* inp, const Tx* dout, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dinp[i] = from_float<Tx>(relu_squared_slope<kFromPost>(to_float(inp[i])) * to_float(dout[i]));
}

namespace detail {
template <bool kFromPost>
void relu_squared_backward_launch(floatX* dinp, const floatX* saved, const floatX* dout, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const ElementwiseLaunch launch = plan_elementwise_launch<floatX>(n, dinp, saved, dout);
  const KernelCost cost{3.0 * n * sizeof(floatX), (kFromPost ? 4.0 : 3.0) * n};  // the sqrt counts one
  if (launch.packed)
    LLMC_LAUNCH_COSTED(cost, (relu_squared_backward_kernel<floatX, kFromPost>), launch.grid, launch.block, 0, stream,
                       dinp, saved, dout, launch.count);
  else
    LLMC_LAUNCH_COSTED(cost, (relu_squared_backward_scalar_kernel<floatX, kFromPost>), launch.grid, launch.block, 0,
                       stream, dinp, saved, dout, launch.count);
}
}  // namespace detail

// out = relu(inp)^2 over n elements; out may alias inp (the MLP keeps inp, the GEMM output, for the backward).
inline void relu_squared_forward(floatX* out, const floatX* inp, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const ElementwiseLaunch launch = plan_elementwise_launch<floatX>(n, out, inp);
  const KernelCost cost{2.0 * n * sizeof(floatX), 2.0 * n};
  if (launch.packed)
    LLMC_LAUNCH_COSTED(cost, relu_squared_forward_kernel<floatX>, launch.grid, launch.block, 0, stream, out, inp,
                       launch.count);
  else
    LLMC_LAUNCH_COSTED(cost, relu_squared_forward_scalar_kernel<floatX>, launch.grid, launch.block, 0, stream, out,
                       inp, launch.count);
}

// dinp = 2 relu(inp) dout (written, not accumulated); dinp may alias dout.
inline void relu_squared_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n, cudaStream_t stream) {
  detail::relu_squared_backward_launch<false>(dinp, inp, dout, n, stream);
}

// dinp = 2 sqrt(post) dout from the stored post = relu(h)^2 alone (the pre-activation need not be kept);
// dinp may alias dout or post.
inline void relu_squared_backward_from_post(floatX* dinp, const floatX* post, const floatX* dout, size_t n,
                                            cudaStream_t stream) {
  detail::relu_squared_backward_launch<true>(dinp, post, dout, n, stream);
}

}  // namespace llmc
