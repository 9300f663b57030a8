// GELU activation, forward and backward, elementwise: the tanh approximation (as in GPT-2),
// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), whose scalar formulas the emulated GEMM's GELU
// epilogue shares (llmc/kernels/matmul.cuh); and the exact one, x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), of
// the 2026-07-17 record's gate MLPs.
#pragma once

#include <cstddef>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

__host__ __device__ __forceinline__ float gelu_tanh(float x) {
  const float inner = kGeluScale * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}

// d gelu / dx = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) u', u = sqrt(2/pi)(x + 0.044715 x^3).
__host__ __device__ __forceinline__ float gelu_tanh_derivative(float x) {
  const float inner = kGeluScale * (x + kGeluCubic * x * x * x);
  const float tanh_inner = tanhf(inner);
  const float dinner_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + tanh_inner) + 0.5f * x * (1.0f - tanh_inner * tanh_inner) * dinner_dx;
}

constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

__host__ __device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * kInvSqrt2)); }

// d (x Phi(x)) / dx = Phi(x) + x phi(x).
__host__ __device__ __forceinline__ float gelu_erf_derivative(float x) {
  return 0.5f * (1.0f + erff(x * kInvSqrt2)) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
}

enum class GeluForm { kTanh, kErf };

template <GeluForm kForm>
__host__ __device__ __forceinline__ float gelu_value(float x) {
  return kForm == GeluForm::kTanh ? gelu_tanh(x) : gelu_erf(x);
}
template <GeluForm kForm>
__host__ __device__ __forceinline__ float gelu_slope(float x) {
  return kForm == GeluForm::kTanh ? gelu_tanh_derivative(x) : gelu_erf_derivative(x);
}

// Each thread handles one 16-byte packet (8 bf16 or 4 fp32) per grid-stride step; the launchers use
// these only when every pointer is 16-byte aligned and n is a whole number of packets.
template <typename Tx, GeluForm kForm = GeluForm::kTanh>
__global__ void gelu_forward_kernel(Tx* out, const Tx* inp, size_t packets) {
  using Packet = Packed128<Tx>;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packets; p += stride) {
    const Packet x = load128cs(inp + p * Packet::size);
    Packet y;
    for (int j = 0; j < Packet::size; j++) y[j] = from_float<Tx>(gelu_value<kForm>(to_float(x[j])));
    store128(out + p * Packet::size, y);
  }
}

template <typename Tx, GeluForm kForm = GeluForm::kTanh>
__global__ void gelu_backward_kernel(Tx* dinp, const Tx* inp, const Tx* dout, size_t packets) {
  using Packet = Packed128<Tx>;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packets; p += stride) {
    const Packet x = load128cs(inp + p * Packet::size);
    const Packet dy = load128(dout + p * Packet::size);
    Packet dx;
    for (int j = 0; j < Packet::size; j++)
      dx[j] = from_float<Tx>(gelu_slope<kForm>(to_float(x[j])) * to_float(dy[j]));
    store128(dinp + p * Packet::size, dx);
  }
}

// Scalar versions for tensors that do not split into aligned packets.
template <typename Tx, GeluForm kForm = GeluForm::kTanh>
__global__ void gelu_forward_scalar_kernel(Tx* out, const Tx* inp, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_float<Tx>(gelu_value<kForm>(to_float(inp[i])));
}

template <typename Tx, GeluForm kForm = GeluForm::kTanh>
__global__ void gelu_backward_scalar_kernel(Tx* dinp, const Tx* inp, const Tx* dout, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dinp[i] = from_float<Tx>(gelu_slope<kForm>(to_float(inp[i])) * to_float(dout[i]));
}

// out = gelu(inp); out may alias inp.
inline void gelu_forward(floatX* out, const floatX* inp, size_t n, cudaStream_t stream) {
  const ElementwiseLaunch launch = plan_elementwise_launch<floatX>(n, out, inp);
  const KernelCost cost{2.0 * n * sizeof(floatX), 10.0 * n};  // tanh counts one
  if (launch.packed)
    LLMC_LAUNCH_COSTED(cost, gelu_forward_kernel<floatX>, launch.grid, launch.block, 0, stream, out, inp, launch.count);
  else
    LLMC_LAUNCH_COSTED(cost, gelu_forward_scalar_kernel<floatX>, launch.grid, launch.block, 0, stream, out, inp, launch.count);
}

// dinp = gelu'(inp) * dout (overwrites dinp, does not accumulate); dinp may alias dout.
inline void gelu_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n, cudaStream_t stream) {
  const ElementwiseLaunch launch = plan_elementwise_launch<floatX>(n, dinp, inp, dout);
  const KernelCost cost{3.0 * n * sizeof(floatX), 16.0 * n};
  if (launch.packed)
    LLMC_LAUNCH_COSTED(cost, gelu_backward_kernel<floatX>, launch.grid, launch.block, 0, stream, dinp, inp, dout, launch.count);
  else
    LLMC_LAUNCH_COSTED(cost, gelu_backward_scalar_kernel<floatX>, launch.grid, launch.block, 0, stream, dinp, inp, dout,
                launch.count);
}

// The exact GELU: out = x Phi(x); out may alias inp.
inline void gelu_exact_forward(floatX* out, const floatX* inp, size_t n, cudaStream_t stream) {
  const ElementwiseLaunch launch = plan_elementwise_launch<floatX>(n, out, inp);
  const KernelCost cost{2.0 * n * sizeof(floatX), 10.0 * n};  // erf counts one
  if (launch.packed)
    LLMC_LAUNCH_COSTED(cost, (gelu_forward_kernel<floatX, GeluForm::kErf>), launch.grid, launch.block, 0, stream, out,
                       inp, launch.count);
  else
    LLMC_LAUNCH_COSTED(cost, (gelu_forward_scalar_kernel<floatX, GeluForm::kErf>), launch.grid, launch.block, 0, stream,
                       out, inp, launch.count);
}

// dinp = (Phi(inp) + inp phi(inp)) dout (overwrites dinp); dinp may alias dout.
inline void gelu_exact_backward(floatX* dinp, const floatX* inp, const floatX* dout, size_t n, cudaStream_t stream) {
  const ElementwiseLaunch launch = plan_elementwise_launch<floatX>(n, dinp, inp, dout);
  const KernelCost cost{3.0 * n * sizeof(floatX), 16.0 * n};
  if (launch.packed)
    LLMC_LAUNCH_COSTED(cost, (gelu_backward_kernel<floatX, GeluForm::kErf>), launch.grid, launch.block, 0, stream, dinp,
                       inp, dout, launch.count);
  else
    LLMC_LAUNCH_COSTED(cost, (gelu_backward_scalar_kernel<floatX, GeluForm::kErf>), launch.grid, launch.block, 0,
                       stream, dinp, inp, dout, launch.count);
}

}  // namespace llmc
