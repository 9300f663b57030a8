// --wgmma-mlp: how the speedrun models run their MLP GEMMs, cuBLASLt with ReLU^2 and its derivative as passes of
// their own, or the project's Hopper GEMM with both in its epilogues (llmc/kernels/wgmma_gemm.cuh), and what the
// second needs: the bf16 build and a Hopper GPU (the emulated device is one).
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"

namespace llmc {

enum class MlpGemm { kCublas, kWgmma };

// Throws std::invalid_argument naming --wgmma-mlp when this build or GPU cannot run the wgmma MLP of a model of
// width `channels` (the GEMM's rows are whole 16-byte chunks: a multiple of 8).
inline void require_wgmma_mlp_here(int channels) {
  if (channels % 8 != 0)
    throw std::invalid_argument("--wgmma-mlp on: the width " + std::to_string(channels) + " is not a multiple of 8");
  if (std::is_same<floatX, float>::value)
    throw std::invalid_argument("--wgmma-mlp on: the wgmma MLP is bf16 only; this is the fp32 build");
  int device = 0, major = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major != 9)
    throw std::invalid_argument("--wgmma-mlp on: needs a Hopper GPU (compute capability 9.x), this one is " +
                                std::to_string(major) + ".x; use --wgmma-mlp off");
}

}  // namespace llmc
