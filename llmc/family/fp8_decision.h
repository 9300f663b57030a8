// What --fp8-head and --fp8-mlp mean for a family that has the FP8 part (the #44 and #89 speedrun models' heads,
// the #89 model's MLPs): on, off, or auto (on where the shape and the device allow it), with the errors naming
// the option. Needs CUDA (it asks the device for FP8 GEMMs).
#pragma once

#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/family/fp8_choice.h"
#include "llmc/kernels/fp8_head.cuh"
#include "llmc/kernels/fp8_matmul.cuh"

namespace llmc {

// Whether an FP8 part whose shapes fit (`shape_fits`) runs in FP8 for `choice` on the current device. Throws
// std::invalid_argument for `on` with shapes that do not fit ("<option> on: <shape_rule>") or a GPU without FP8
// GEMMs.
inline bool choose_fp8(Fp8Choice choice, bool shape_fits, const std::string& option, const std::string& shape_rule) {
  if (choice == Fp8Choice::kOff) return false;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  const bool supported = fp8_gemm_supported(device);
  if (choice == Fp8Choice::kOn && !shape_fits) throw std::invalid_argument(option + " on: " + shape_rule);
  if (choice == Fp8Choice::kOn && !supported)
    throw std::invalid_argument(option + " on: this GPU has no FP8 GEMMs (compute capability 8.9 or newer needed); use " +
                                option + " off");
  return shape_fits && supported;
}

// Whether a head of (seq_len, channels, vocab) trains in FP8 for `choice` (--fp8-head).
inline bool choose_fp8_head(Fp8Choice choice, int seq_len, int channels, int vocab) {
  return choose_fp8(choice, fp8_head_shape_fits(seq_len, channels, vocab), "--fp8-head",
                    "the FP8 head needs --seq-len (" + std::to_string(seq_len) + "), the width (" +
                        std::to_string(channels) + ") and the vocabulary (" + std::to_string(vocab) +
                        ") to be multiples of 16");
}

}  // namespace llmc
