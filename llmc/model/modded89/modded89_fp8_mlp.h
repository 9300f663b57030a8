// The 2026-07-17 record's FP8 MLP forward (SPEEDRUN89.md section 4) for the model's layers, over memory the model
// gives it: per layer, the up projection in e4m3 with the current scale of its input and its weights' own scale,
// ReLU^2 that also writes the e4m3 copy of its output, the down projection with the delayed activation scale and
// the bootstrapped weight scale, and the weights' e4m3 copies refreshed after each optimizer step. Training
// forwards only (validation and decoding use the bf16 MLP); the backward stays bf16 on xn, the weights and post.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "llmc/checkpoint/state_file.h"
#include "llmc/cuda/fp8.h"
#include "llmc/cuda/precision.h"
#include "llmc/family/fused_gemms.h"
#include "llmc/kernels/matmul_context.h"

namespace llmc {

// Whether the training forward's MLPs run in FP8.
enum class Modded89Mlp { kBf16, kFp8 };

// The record's constants: the delayed activation scale's headroom, the weights', and the optimizer steps whose
// updates still bootstrap the weight scale (the scale of the weights being quantised, not of older ones).
inline constexpr double kFp8MlpActivationHeadroom = 1.80;
inline constexpr double kFp8MlpWeightHeadroom = 1.12;
inline constexpr int kFp8MlpBootstrapSteps = 16;

class Modded89Fp8Mlp {
 public:
  // Whether sequences of seq_len tokens and a width fit (FP8 GEMMs: multiples of 16).
  static bool shape_fits(int seq_len, int channels);
  // The bytes of `memory` (16-byte aligned) for sequences of up to seq_len tokens, width C, hidden 4C.
  static size_t bytes(int seq_len, int channels, int layers);
  // Every layer's copy stale and bootstrapping, the activation scales 1 (enqueued on stream). up_gemm kWgmma: the
  // up projection and its ReLU^2 in one kernel (llmc/kernels/wgmma_fp8_gemm.cuh; the width a multiple of 32).
  Modded89Fp8Mlp(int seq_len, int channels, int layers, unsigned char* memory, cudaStream_t stream,
                 FusedGemms up_gemm = FusedGemms::kCublas);

  // The parameters were replaced (initialised, resumed, restored after the untimed warm-up): as at construction.
  void reset(cudaStream_t stream);
  // Step `step` (0-based) is about to run: from step 1 on the parameters carry the update of step - 1, so every
  // copy is refreshed before its next use, bootstrapping while step - 1 < kFp8MlpBootstrapSteps.
  void before_step(int step);
  // The host state the next forward's launches depend on (which copies it refreshes, and how), as text.
  std::string refresh_state() const;
  // What a training forward's refreshes leave of that state (for a forward replayed from a CUDA graph).
  void mark_refreshed() {
    stale_.assign(stale_.size(), 0);
    refreshed_.assign(refreshed_.size(), 1);
  }

  // Layer `layer` of a training forward over T rows (T a multiple of 16, at most the constructor's): pre (the
  // cuBLASLt up GEMM's output; the wgmma kernel leaves it alone) and post (T, 4C) and out (T, C) from xn (T, C),
  // c_fc (4C, C) and c_proj stored (in, out) = (4C, C). Refreshes the layer's weight copies first if they are
  // stale; afterwards the layer's delayed activation scale holds this forward's maximum of post times 1.80 / 448
  // (for the next forward). xn_amax: max |xn| already on the device
  // (the RMSNorm that wrote xn computed it into input_amax(layer)); null: computed here, one more read of xn.
  void forward(MatmulContext& matmul, int layer, const floatX* xn, const floatX* c_fc, const floatX* c_proj,
               floatX* pre, floatX* post, floatX* out, int T, cudaStream_t stream, const float* xn_amax = nullptr);
  float* input_amax(int layer) const { return scalar(kXAmax, layer); }

  // The device scales, one per layer (synchronous; for tests and logs): the up projection's input and weight
  // scales, the delayed activation scale the next forward uses, the down weights' scale in use and the next.
  struct Scales {
    std::vector<float> x, up_weight, activation, down_used, down_next;
  };
  Scales download_scales(cudaStream_t stream) const;

  // For checkpoints (synchronous): every scale of every layer and which layers' copies were made since the
  // last reset, as arrays "model.fp8_mlp.scales" and "model.fp8_mlp.refreshed". Restoring them after a reset
  // (the resumed run's upload_params) continues where the saving run was: its next refresh bootstraps only
  // where the saving run's would have. Throws std::runtime_error for arrays of another shape.
  std::vector<NamedStateArray> save_state(cudaStream_t stream) const;
  void restore_state(const std::vector<NamedStateArray>& arrays, cudaStream_t stream);

 private:
  enum Scalar { kXAmax, kXScale, kUpAmax, kUpScale, kActAmax, kActScale, kDownAmax, kDownUsed, kDownNext, kScalars };
  float* scalar(Scalar which, int layer) const { return scalars_ + static_cast<size_t>(layer) * kScalars + which; }
  fp8e4m3* up_codes(int layer) const;
  fp8e4m3* down_codes(int layer) const;
  void refresh(int layer, const floatX* c_fc, const floatX* c_proj, cudaStream_t stream);

  int seq_len_, channels_, layers_;
  FusedGemms up_gemm_;
  fp8e4m3 *x8_ = nullptr, *post8_ = nullptr, *up_codes_ = nullptr, *down_codes_ = nullptr;
  float* scalars_ = nullptr;                // kScalars per layer
  std::vector<char> stale_;      // per layer: refresh before the next use
  std::vector<char> refreshed_;  // per layer: a copy was made since the last reset (else the refresh bootstraps)
  bool update_bootstraps_ = false;  // the last update's step is below kFp8MlpBootstrapSteps
};

}  // namespace llmc
