// What --fp8-head means for a family with an FP8 head (the #44 and #89 speedrun models): on, off, or auto
// (on where the shape and the device allow it), with the errors naming --fp8-head. Needs CUDA (it asks the
// device for FP8 GEMMs).
#pragma once

#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/family/fp8_head_choice.h"
#include "llmc/kernels/fp8_head.cuh"
#include "llmc/kernels/fp8_matmul.cuh"

namespace llmc {

// Whether a head of (seq_len, channels, vocab) trains in FP8 for `choice` on the current device. Throws
// std::invalid_argument for `on` with a shape that is not a multiple of 16 or a GPU without FP8 GEMMs.
inline bool choose_fp8_head(Fp8HeadChoice choice, int seq_len, int channels, int vocab) {
  if (choice == Fp8HeadChoice::kOff) return false;
  const bool shape_fits = fp8_head_shape_fits(seq_len, channels, vocab);
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const bool supported = fp8_gemm_supported(device);
  if (choice == Fp8HeadChoice::kOn && !shape_fits)
    throw std::invalid_argument("--fp8-head on: the FP8 head needs --seq-len (" + std::to_string(seq_len) +
                                "), the width (" + std::to_string(channels) + ") and the vocabulary (" +
                                std::to_string(vocab) + ") to be multiples of 16");
  if (choice == Fp8HeadChoice::kOn && !supported)
    throw std::invalid_argument(
        "--fp8-head on: this GPU has no FP8 GEMMs (compute capability 8.9 or newer "
        "needed); use --fp8-head off");
  return shape_fits && supported;
}

}  // namespace llmc
