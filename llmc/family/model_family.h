// The trainer's view of the two model families (GPT-2 and the speedrun model): what --model names
// (a preset or a model file of either family, told apart by the file's magic), how to build the device
// model, initialise it from a seed, write its model file and describe it in the log. train_gpt2.cu sees
// only this and the TrainableModel it builds.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmc/base/atomic_file.h"
#include "llmc/family/decoder.h"
#include "llmc/family/trainable_model.h"
#include "llmc/checkpoint/state_file.h"

namespace llmc {

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  virtual ModelFamilyId id() const = 0;
  // "L=12 NH=12 C=768 T=1024 V=50257 Vp=50304" (GPT-2) or "speedrun V=50304 L=12 H=6 ..." (as the state file's).
  virtual std::string describe() const = 0;
  virtual int vocab_size() const = 0;
  // Whether the model trains with the FP8 head, for --fp8-head `choice` (on, off, auto) on the current device
  // and sequences of seq_len tokens. Throws std::invalid_argument naming --fp8-head when `on` cannot be had
  // (a GPT-2 model, a GPU without FP8 GEMMs, a shape that is not a multiple of 16).
  virtual bool use_fp8_head(const std::string& choice, int seq_len) const = 0;
  // The device model for micro-batches of (batch_size, seq_len) and `loss_slots` micro-steps, with the FP8
  // head when fp8_head (as use_fp8_head decided). Throws std::invalid_argument naming the option for a
  // shape the family cannot train.
  virtual std::unique_ptr<TrainableModel> build(int world_size, int batch_size, int seq_len, int loss_slots,
                                                cudaStream_t stream, bool fp8_head) const = 0;
  // Initial parameters of `model` (built by this family) from the seed, layout order.
  virtual std::vector<float> init_params(const TrainableModel& model, uint64_t seed) const = 0;
  // The model file of `model` (built by this family): llm.c's format for GPT-2, the speedrun format
  // (llmc/model/modded44/speedrun_model_file.h) otherwise; fp32 with `fp32` or from the fp32 build, else bf16
  // (GPT-2) or the reference's dtypes (speedrun). Returns its size and checksum, for the manifest.
  virtual WrittenFile write_model_file(const std::string& path, const TrainableModel& model,
                                       const std::vector<float>& params, bool fp32) const = 0;
  // Training FLOPs per token for the MFU figure.
  virtual double flops_per_token(const TrainableModel& model, int seq_len) const = 0;
  // A KV-cache decoder over `model`'s live parameter buffer for the trainer's samples, with activations for
  // chunks of at most max_chunk tokens. Throws std::invalid_argument for a family without one.
  virtual std::unique_ptr<CausalDecoder> make_decoder(TrainableModel& model, int max_chunk) const = 0;
  // Fills the model fields of a state to be saved.
  virtual void describe_state(TrainState& state) const = 0;
  // Sets the attention windows of `model` (built by this family), in blocks, as
  // SpeedrunModel::set_attention_windows (with apply_yarn a change of the long window applies YaRN), and
  // returns the attention scale in force. Throws std::invalid_argument naming --window-schedule for a
  // family without windows (GPT-2).
  virtual double set_attention_windows(TrainableModel& model, int short_blocks, int long_blocks,
                                       bool apply_yarn) const = 0;
};

// Where the model starts: a checkpoint being resumed, a model file (--model FILE) or a preset
// initialised from the seed.
struct ModelStart {
  std::unique_ptr<ModelFamily> family;
  std::string file;           // "" for a fresh initialisation
  std::vector<float> params;  // layout order for `world_size`; empty until initialised
};

// `model`: a preset (dN, tiny, small; speedrun, speedrun-tiny) or, when it names a regular file, a model
// file of either family. `file` overrides it when non-empty (a checkpoint's model file). Throws
// std::invalid_argument for an unknown preset, FileError for a bad file.
ModelStart locate_model(const std::string& model, const std::string& file, int world_size);

}  // namespace llmc
