// The speedrun model's scalar-weighted mixes, out = a x + b y over rows of C with a, b taken from the fp32
// scalar vector on the device: block lambdas (l0 x + l1 x0), value-embedding lambdas (sa0 v + sa1 ve, or
// sa0 v), U-net skips (x + sigmoid(w) skip) and the backout (x - lambda x8). The backward writes or adds
// a dout and b dout, and the scalars' gradients sum(x dout), sum(y dout) (times the derivative of the
// coefficient) are full reductions done deterministically: per-block fp32 partials in a fixed grid, then
// one warp per scalar sums them in a fixed order. No atomics.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

constexpr int kMixBlock = 256;

// How a coefficient comes from the scalar vector s: one (1, no scalar), s[index], -s[index], sigmoid(s[index]),
// or s[index] rounded to bf16 (a record's `.bfloat16()` copy of an fp32 scalar; the cast passes the gradient
// through, so its derivative is 1).
enum class MixScalar { kOne, kIdentity, kNegated, kSigmoid, kBf16Copy };
struct MixCoefficient {
  MixScalar kind = MixScalar::kOne;
  int index = -1;
};

__device__ __forceinline__ float mix_coefficient(const float* scalars, MixCoefficient c) {
  switch (c.kind) {
    case MixScalar::kOne:
      return 1.0f;
    case MixScalar::kIdentity:
      return scalars[c.index];
    case MixScalar::kNegated:
      return -scalars[c.index];
    case MixScalar::kSigmoid:
      return 1.0f / (1.0f + expf(-scalars[c.index]));
    case MixScalar::kBf16Copy:
      return __bfloat162float(__float2bfloat16(scalars[c.index]));
  }
  return 0.0f;
}

// d coefficient / d scalars[index] (0 for kOne).
__device__ __forceinline__ float mix_coefficient_derivative(const float* scalars, MixCoefficient c) {
  switch (c.kind) {
    case MixScalar::kOne:
      return 0.0f;
    case MixScalar::kIdentity:
    case MixScalar::kBf16Copy:
      return 1.0f;
    case MixScalar::kNegated:
      return -1.0f;
    case MixScalar::kSigmoid: {
      const float g = 1.0f / (1.0f + expf(-scalars[c.index]));
      return g * (1.0f - g);
    }
  }
  return 0.0f;
}

// Rows of C elements, row r at data + r * stride (elements); e.g. v inside the QKV output has stride 3C.
template <typename T>
struct MixRows {
  T* data;
  int stride;
};

template <typename Tx>
__global__ void mix_forward_kernel(MixRows<Tx> out, MixRows<const Tx> x, MixRows<const Tx> y, const float* scalars,
                                   MixCoefficient ca, MixCoefficient cb, int rows, int C) {
  using Packet = Packed128<Tx>;
  const int per_row = C / Packet::size;
  const size_t total = static_cast<size_t>(rows) * per_row;
  const float a = mix_coefficient(scalars, ca), b = y.data != nullptr ? mix_coefficient(scalars, cb) : 0.0f;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const size_t r = i / per_row, offset = (i % per_row) * Packet::size;
    const Packet xv = load128(x.data + r * x.stride + offset);
    const Packet yv = y.data != nullptr ? load128(y.data + r * y.stride + offset) : Packet::zeros();
    Packet result;
    for (int j = 0; j < Packet::size; j++) result[j] = from_float<Tx>(a * to_float(xv[j]) + b * to_float(yv[j]));
    store128(out.data + r * out.stride + offset, result);
  }
}

// dx (+)= a dout, dy (+)= b dout (each skipped when null); partials[block][0..1] = the block's
// sum(x dout), sum(y dout), in the fixed grid-stride order and a fixed block reduction.
template <typename Tx>
__global__ void mix_backward_kernel(MixRows<Tx> dx, bool accumulate_dx, MixRows<Tx> dy, bool accumulate_dy,
                                    float* partials, MixRows<const Tx> dout, MixRows<const Tx> x, MixRows<const Tx> y,
                                    const float* scalars, MixCoefficient ca, MixCoefficient cb, int rows, int C) {
  using Packet = Packed128<Tx>;
  __shared__ float warp_sums[kWarpSize];
  const int per_row = C / Packet::size;
  const size_t total = static_cast<size_t>(rows) * per_row;
  const float a = mix_coefficient(scalars, ca), b = y.data != nullptr ? mix_coefficient(scalars, cb) : 0.0f;
  float x_dot = 0.0f, y_dot = 0.0f;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const size_t r = i / per_row, offset = (i % per_row) * Packet::size;
    const Packet g = load128(dout.data + r * dout.stride + offset);
    const Packet xv = load128(x.data + r * x.stride + offset);
    const Packet yv = y.data != nullptr ? load128(y.data + r * y.stride + offset) : Packet::zeros();
    for (int j = 0; j < Packet::size; j++) {
      x_dot += to_float(xv[j]) * to_float(g[j]);
      y_dot += to_float(yv[j]) * to_float(g[j]);
    }
    if (dx.data != nullptr) {
      Tx* target = dx.data + r * dx.stride + offset;
      const Packet old = accumulate_dx ? load128(target) : Packet::zeros();
      Packet result;
      for (int j = 0; j < Packet::size; j++) result[j] = from_float<Tx>(to_float(old[j]) + a * to_float(g[j]));
      store128(target, result);
    }
    if (dy.data != nullptr) {
      Tx* target = dy.data + r * dy.stride + offset;
      const Packet old = accumulate_dy ? load128(target) : Packet::zeros();
      Packet result;
      for (int j = 0; j < Packet::size; j++) result[j] = from_float<Tx>(to_float(old[j]) + b * to_float(g[j]));
      store128(target, result);
    }
  }
  x_dot = block_reduce_sum(x_dot, warp_sums);
  y_dot = block_reduce_sum(y_dot, warp_sums);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = x_dot;
    partials[2 * blockIdx.x + 1] = y_dot;
  }
}

// Warp k (0: the a scalar, 1: the b scalar) sums the num_blocks partials in a fixed order and adds
// derivative * total to dscalars[index].
template <typename T>
__global__ void mix_scalar_grads_kernel(T* dscalars, const T* partials, int num_blocks, const T* scalars,
                                        MixCoefficient ca, MixCoefficient cb) {
  const int k = threadIdx.x / kWarpSize;
  const MixCoefficient c = k == 0 ? ca : cb;
  const int first = LLMC_MUTANT("residual_mix.drop_first_partial", 0, 1);
  const T total = warp_ordered_sum(partials + 2 * first + k, num_blocks - first, 2);
  if (threadIdx.x % kWarpSize == 0 && c.kind != MixScalar::kOne)
    dscalars[c.index] += mix_coefficient_derivative(scalars, c) * total;
}

namespace detail {
inline unsigned mix_grid(int rows, int C) {
  return elementwise_grid(static_cast<size_t>(rows) * (C / Packed128<floatX>::size), kMixBlock);
}
template <typename T>
void check_mix_rows(const char* launcher, const char* name, MixRows<T> rows) {
  if (rows.data == nullptr) return;
  require_packets<floatX>(launcher, (std::string(name) + " stride").c_str(), rows.stride);
  require_aligned16(launcher, {rows.data});
}
}  // namespace detail

// out = a x + b y over `rows` rows of C (y.data may be null: out = a x). a, b read from `scalars` (device
// fp32) on the device, so the launch needs no host copy of them. out may alias x or y (same stride).
inline void mix_forward(MixRows<floatX> out, MixRows<const floatX> x, MixRows<const floatX> y, const float* scalars,
                        MixCoefficient a, MixCoefficient b, int rows, int C, cudaStream_t stream) {
  require_packets<floatX>("mix_forward", "C", C);
  detail::check_mix_rows("mix_forward", "out", out);
  detail::check_mix_rows("mix_forward", "x", x);
  detail::check_mix_rows("mix_forward", "y", y);
  if (rows <= 0) return;
  const double elements = static_cast<double>(rows) * C, inputs = y.data != nullptr ? 2.0 : 1.0;
  LLMC_LAUNCH_COSTED((KernelCost{(inputs + 1.0) * elements * sizeof(floatX), (2.0 * inputs - 1.0) * elements}),
                     mix_forward_kernel<floatX>, dim3(detail::mix_grid(rows, C)), dim3(kMixBlock), 0, stream, out, x,
                     y, scalars, a, b, rows, C);
}

// Floats of device scratch mix_backward needs.
inline size_t mix_backward_scratch_floats(int rows, int C) {
  return 2 * static_cast<size_t>(detail::mix_grid(rows, C));
}

// Backward of mix_forward from dout: dx (+)= a dout and dy (+)= b dout (either may be null; dx may alias
// dout), and dscalars[a.index] += a'(s) sum(x dout), dscalars[b.index] += b'(s) sum(y dout) (not for kOne,
// nor for b without y). Deterministic for a given (rows, C).
inline void mix_backward(MixRows<floatX> dx, bool accumulate_dx, MixRows<floatX> dy, bool accumulate_dy,
                         float* dscalars, MixRows<const floatX> dout, MixRows<const floatX> x, MixRows<const floatX> y,
                         const float* scalars, MixCoefficient a, MixCoefficient b, int rows, int C, float* scratch,
                         size_t scratch_floats, cudaStream_t stream) {
  require_packets<floatX>("mix_backward", "C", C);
  for (const auto& [name, view] : {std::pair{"dx", MixRows<const floatX>{dx.data, dx.stride}},
                                   std::pair{"dy", MixRows<const floatX>{dy.data, dy.stride}}, std::pair{"dout", dout},
                                   std::pair{"x", x}, std::pair{"y", y}})
    detail::check_mix_rows("mix_backward", name, view);
  if (y.data == nullptr) b = MixCoefficient{};  // no y: no b scalar to differentiate
  if (rows <= 0) return;
  const unsigned grid = detail::mix_grid(rows, C);
  require_scratch("mix_backward", scratch_floats, 2 * static_cast<size_t>(grid));
  // dout, x and y read; each gradient written (and read when added); two dots and the gradients' products.
  const double elements = static_cast<double>(rows) * C;
  const double tensors = 2.0 + (y.data != nullptr ? 1.0 : 0.0) +
                         (dx.data != nullptr ? (accumulate_dx ? 2.0 : 1.0) : 0.0) +
                         (dy.data != nullptr ? (accumulate_dy ? 2.0 : 1.0) : 0.0);
  LLMC_LAUNCH_COSTED((KernelCost{tensors * elements * sizeof(floatX) + 8.0 * grid, 6.0 * elements}),
                     mix_backward_kernel<floatX>, dim3(grid), dim3(kMixBlock), 0, stream, dx, accumulate_dx, dy,
                     accumulate_dy, scratch, dout, x, y, scalars, a, b, rows, C);
  LLMC_LAUNCH_COSTED((KernelCost{8.0 * grid, 2.0 * grid}), mix_scalar_grads_kernel<float>, dim3(1),
                     dim3(2 * kWarpSize), 0, stream, dscalars, static_cast<const float*>(scratch),
                     static_cast<int>(grid), scalars, a, b);
}

}  // namespace llmc
