// What the trainer asks of a model family before it has a model: what a --model name or file is (its
// registry entry, llmc/model/registry.h, makes one of these), how to build the device model, whether it
// trains with the FP8 head, its initial parameters, a decoder for generation, and how its checkpoints
// record it. Once built, the model itself answers the rest (FamilyModel: its model file, FLOPs, decoder
// over the live buffer, windows); nothing outside a family's folder knows its types.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmc/base/checksum.h"
#include "llmc/checkpoint/state_file.h"
#include "llmc/family/fp8_choice.h"
#include "llmc/family/trainable_model.h"

namespace llmc {

// What the trainer builds a device model for (ModelFamily::build).
struct ModelBuild {
  int world_size = 1;     // the parameters and gradients are laid out for this many ranks
  int batch_size = 1;     // sequences per micro-batch
  int seq_len = 0;        // tokens per sequence
  int loss_slots = 1;     // micro-steps of per-position losses
  cudaStream_t stream = nullptr;
  bool fp8_head = false;  // as use_fp8_head decided
  std::string vocab_dir;  // the GPT-2 BPE files (--vocab), for a family whose loss reads the vocabulary
  bool fp8_mlp = false;   // --fp8-mlp on (a family without an FP8 MLP refuses it)
  bool wgmma_gemms = false;  // --wgmma-gemms on (a family without them refuses it: has_wgmma_gemms)
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  // "L=12 NH=12 C=768 T=1024 V=50257 Vp=50304" (GPT-2) or "speedrun V=50304 L=12 H=6 ...".
  virtual std::string describe() const = 0;
  virtual int vocab_size() const = 0;
  // Whether the model trains with the FP8 head, for --fp8-head `choice` (on, off, auto) on the current device
  // and sequences of seq_len tokens. Throws std::invalid_argument naming --fp8-head when `on` cannot be had
  // (a family without one, a GPU without FP8 GEMMs, a shape that is not a multiple of 16).
  virtual bool use_fp8_head(Fp8Choice choice, int seq_len) const = 0;
  // Whether the model's training forward runs its MLPs in FP8, for --fp8-mlp `choice`: only the 2026-07-17 model
  // has an FP8 MLP (its family decides auto); `on` elsewhere throws std::invalid_argument naming --fp8-mlp.
  virtual bool use_fp8_mlp(Fp8Choice choice, int /*seq_len*/) const {
    if (choice == Fp8Choice::kOn)
      throw std::invalid_argument("--fp8-mlp on: only the 2026-07-17 model (--model modded89...) has an FP8 MLP");
    return false;
  }
  // Whether the family's model has the wgmma GEMMs of --wgmma-gemms (the two speedrun models).
  virtual bool has_wgmma_gemms() const { return false; }
  // Whether --train-loader auto gives this family BOS-aligned whole documents (the speedrun's loader)
  // rather than llm.c's fixed windows.
  virtual bool trains_on_documents() const = 0;
  // The optimizer --optimizer auto picks for this family. Every family trains with ZeRO AdamW; the
  // speedrun optimizer (its record's recipe: llmc/optim/tensor_roles.h) runs only where it is the family's own.
  virtual StateOptimizer default_optimizer() const = 0;
  // Initial parameters from the seed, in the layout order of `world_size` ranks (the same values for
  // every world size).
  virtual std::vector<float> init_params(uint64_t seed, int world_size) const = 0;
  // A KV-cache decoder with its own copy of `params` (layout order for one rank), for generate_gpt2, with
  // activations for chunks of at most max_chunk tokens. Throws std::invalid_argument for a family without
  // one.
  virtual std::unique_ptr<CausalDecoder> make_decoder(const std::vector<float>& params, int max_chunk,
                                                      cudaStream_t stream) const = 0;
  // The device model for `request`. Throws std::invalid_argument naming the option for a shape the family
  // cannot train or a vocabulary it cannot read.
  virtual std::unique_ptr<FamilyModel> build(const ModelBuild& request) const = 0;
  // The model as its checkpoints' state files record it.
  virtual StateModel state_model() const = 0;
  // The size and checksum of a model file of this family as a checkpoint's manifest records them.
  virtual FileDigest model_file_digest(const std::string& path) const = 0;
};

}  // namespace llmc
