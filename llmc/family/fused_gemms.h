// --wgmma-gemms: how the speedrun models run the GEMMs that elementwise work follows (the MLPs' ReLU^2 and its
// derivative, the 2025-10-31 attention's QK-norm, RoPE and value mix): cuBLASLt with that work as passes of its own,
// or the project's Hopper GEMM with it in the epilogues (llmc/kernels/wgmma_gemm.cuh); and what the second needs:
// the bf16 build and a Hopper GPU (the emulated device is one).
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"

namespace llmc {

enum class FusedGemms { kCublas, kWgmma };

// The current device's compute capability major (9: Hopper, which has wgmma).
inline int current_device_major() {
  int device = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

// Whether this build and GPU can run the wgmma GEMMs at all: the bf16 build on a Hopper GPU.
inline bool wgmma_gemms_available_here() {
  return !std::is_same<floatX, float>::value && current_device_major() == 9;
}

// Throws std::invalid_argument naming --wgmma-gemms when this build or GPU cannot run the wgmma GEMMs of a model of
// width `channels` (the GEMM's rows are whole 16-byte chunks: a multiple of 8).
inline void require_wgmma_gemms_here(int channels) {
  if (channels % 8 != 0)
    throw std::invalid_argument("--wgmma-gemms on: the width " + std::to_string(channels) + " is not a multiple of 8");
  if (std::is_same<floatX, float>::value)
    throw std::invalid_argument("--wgmma-gemms on: the wgmma GEMMs are bf16 only; this is the fp32 build");
  const int major = current_device_major();
  if (major != 9)
    throw std::invalid_argument("--wgmma-gemms on: needs a Hopper GPU (compute capability 9.x), this one is " +
                                std::to_string(major) + ".x; use --wgmma-gemms off");
}

}  // namespace llmc
