// The output layer's bias and scale of the 2026-07-17 record's small MLPs (the gate MLPs G0, G1 and the MUDD
// MLPs): out[t, j] = s (in[t, j] + b[j]) over rows of n columns (n = 41 or 14, not a whole number of packets),
// s the learnable gate scale (a device fp32 value) or the MUDD MLPs' constant 0.1. Elementwise, one rounding.
#pragma once

#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/mutant.h"

namespace llmc {

constexpr int kGateMlpOutputBlock = 256;

// scale: a device fp32 value, or null for `constant`.
struct GateMlpScale {
  const float* scale = nullptr;
  float constant = 1.0f;
};

template <typename Tx>
__global__ void gate_mlp_output_forward_kernel(Tx* out, const Tx* in, const Tx* bias, GateMlpScale scale, int rows,
                                               int n) {
  const size_t count = static_cast<size_t>(rows) * n;
  const float s = scale.scale != nullptr ? *scale.scale : scale.constant;
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
  LLMC_LAUNCH(gate_mlp_output_forward_kernel<floatX>,
              dim3(elementwise_grid(static_cast<size_t>(rows) * n, kGateMlpOutputBlock)), dim3(kGateMlpOutputBlock), 0,
              stream, out, in, bias, scale, rows, n);
}

}  // namespace llmc
