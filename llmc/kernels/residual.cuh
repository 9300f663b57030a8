// Residual connection: out = a + b elementwise (the un-fused form; the usual residual add is fused
// into LayerNorm, see llmc/kernels/layernorm.cuh).
#pragma once

#include <cstddef>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

// One 16-byte packet per thread and grid-stride step (used when all pointers are 16-byte aligned and n
// is a whole number of packets), and a scalar fallback.
template <typename Tx>
__global__ void residual_forward_kernel(Tx* out, const Tx* a, const Tx* b, size_t packets) {
  using Packet = Packed128<Tx>;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packets; p += stride) {
    const Packet x = load128cs(a + p * Packet::size);
    const Packet y = load128cs(b + p * Packet::size);
    Packet sum;
    for (int j = 0; j < Packet::size; j++) sum[j] = from_float<Tx>(to_float(x[j]) + to_float(y[j]));
    store128(out + p * Packet::size, sum);
  }
}

template <typename Tx>
__global__ void residual_forward_scalar_kernel(Tx* out, const Tx* a, const Tx* b, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_float<Tx>(to_float(a[i]) + to_float(b[i]));
}

// out = a + b; out may alias a or b.
inline void residual_forward(floatX* out, const floatX* a, const floatX* b, size_t n, cudaStream_t stream) {
  const ElementwiseLaunch launch = plan_elementwise_launch<floatX>(n, out, a, b);
  if (launch.packed)
    LLMC_LAUNCH(residual_forward_kernel<floatX>, launch.grid, launch.block, 0, stream, out, a, b, launch.count);
  else
    LLMC_LAUNCH(residual_forward_scalar_kernel<floatX>, launch.grid, launch.block, 0, stream, out, a, b,
                launch.count);
}

}  // namespace llmc
