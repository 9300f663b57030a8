// The two model families as the trainer sees them (see model_family.h).
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <type_traits>

#include "llmc/cuda/cuda_common.h"
#include "llmc/base/file_io.h"
#include "llmc/kernels/fp8_head.cuh"
#include "llmc/model/gpt2/gpt2_decoder.h"
#include "llmc/model/gpt2/gpt2_model_file.h"
#include "llmc/model/gpt2/gpt2.h"
#include "llmc/model/gpt2/gpt2_init.h"
#include "llmc/model/modded44/speedrun_init.h"
#include "llmc/model/modded44/speedrun_model.h"
#include "llmc/model/modded44/speedrun_model_file.h"
#include "llmc/cuda/precision.h"
#include "llmc/family/model_family.h"

namespace llmc {

namespace {

constexpr bool kFp32Build = std::is_same<floatX, float>::value;

class GPT2Family : public ModelFamily {
 public:
  explicit GPT2Family(const GPT2Config& config) : config_(config) {}
  ModelFamilyId id() const override { return ModelFamilyId::kGPT2; }
  std::string describe() const override { return describe_config(config_); }
  int vocab_size() const override { return config_.vocab_size; }
  bool use_fp8_head(const std::string& choice, int seq_len) const override {
    (void)seq_len;
    if (choice == "on")
      throw std::invalid_argument("--fp8-head on: GPT-2 models have no FP8 head (use a speedrun model, or "
                                  "--fp8-head off or auto)");
    return false;
  }
  std::unique_ptr<TrainableModel> build(int world_size, int batch_size, int seq_len, int loss_slots,
                                        cudaStream_t stream, bool fp8_head) const override {
    if (fp8_head) throw std::invalid_argument("--fp8-head on: GPT-2 models have no FP8 head");
    return std::make_unique<GPT2>(config_, world_size, batch_size, seq_len, loss_slots, stream);
  }
  std::vector<float> init_params(const TrainableModel& model, uint64_t seed) const override {
    return init_gpt2_params(static_cast<const GPT2&>(model).layout(), seed);
  }
  WrittenFile write_model_file(const std::string& path, const TrainableModel& model, const std::vector<float>& params,
                               bool fp32) const override {
    return write_checkpoint(path, static_cast<const GPT2&>(model).layout(), params.data(),
                     fp32 || kFp32Build ? CheckpointDtype::kFp32 : CheckpointDtype::kBf16);
  }
  double flops_per_token(const TrainableModel& model, int seq_len) const override {
    return gpt2_training_flops_per_token(static_cast<int64_t>(model.layout().num_parameters), config_.num_layers,
                                    config_.channels, seq_len);
  }
  std::unique_ptr<CausalDecoder> make_decoder(TrainableModel& model, int max_chunk) const override {
    return std::make_unique<GPT2Decoder>(static_cast<const GPT2&>(model).layout(), model.params(),
                                         std::min(max_chunk, config_.max_seq_len), model.stream());
  }
  void describe_state(TrainState& state) const override {
    state.family = ModelFamilyId::kGPT2;
    state.config = config_;
  }
  double set_attention_windows(TrainableModel& model, int short_blocks, int long_blocks,
                               bool apply_yarn) const override {
    (void)model, (void)short_blocks, (void)long_blocks, (void)apply_yarn;
    throw std::invalid_argument("--window-schedule speedrun: GPT-2 models have no attention windows (use a speedrun "
                                "model or --window-schedule fixed)");
  }

 private:
  GPT2Config config_;
};

class SpeedrunFamily : public ModelFamily {
 public:
  explicit SpeedrunFamily(const SpeedrunConfig& config) : config_(config) {}
  ModelFamilyId id() const override { return ModelFamilyId::kSpeedrun; }
  std::string describe() const override { return "speedrun " + describe_speedrun_config(config_); }
  int vocab_size() const override { return config_.vocab_size; }
  // auto: on wherever it can run. The emulated device is sm_90, so emulated runs take the FP8 path the GPU
  // takes (its GEMMs emulated with the accumulator model of docs/fp8.md).
  bool use_fp8_head(const std::string& choice, int seq_len) const override {
    if (choice == "off") return false;
    const bool shape_fits = fp8_head_shape_fits(seq_len, config_.channels(), config_.vocab_size);
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    const bool supported = fp8_gemm_supported(device);
    if (choice == "on" && !shape_fits)
      throw std::invalid_argument("--fp8-head on: the FP8 head needs --seq-len (" + std::to_string(seq_len) +
                                  "), the width (" + std::to_string(config_.channels()) + ") and the vocabulary (" +
                                  std::to_string(config_.vocab_size) + ") to be multiples of 16");
    if (choice == "on" && !supported)
      throw std::invalid_argument("--fp8-head on: this GPU has no FP8 GEMMs (compute capability 8.9 or newer "
                                  "needed); use --fp8-head off");
    return shape_fits && supported;
  }
  std::unique_ptr<TrainableModel> build(int world_size, int batch_size, int seq_len, int loss_slots,
                                        cudaStream_t stream, bool fp8_head) const override {
    if (batch_size != 1)
      throw std::invalid_argument("--batch-size " + std::to_string(batch_size) +
                                  ": the speedrun model trains one packed sequence per rank and micro-step; use -b 1 "
                                  "and set the sequence length with -t");
    if (seq_len > config_.max_seq_len)
      throw std::invalid_argument("--seq-len " + std::to_string(seq_len) + " exceeds the speedrun model's maximum " +
                                  std::to_string(config_.max_seq_len));
    return std::make_unique<SpeedrunModel>(config_, world_size, seq_len, loss_slots, stream, kSpeedrunBosToken,
                                           fp8_head ? SpeedrunHead::kFp8 : SpeedrunHead::kBf16);
  }
  std::vector<float> init_params(const TrainableModel& model, uint64_t seed) const override {
    return init_speedrun_params(static_cast<const SpeedrunModel&>(model).layout(), seed);
  }
  WrittenFile write_model_file(const std::string& path, const TrainableModel& model, const std::vector<float>& params,
                               bool fp32) const override {
    return write_speedrun_model(path, static_cast<const SpeedrunModel&>(model).layout(), params.data(),
                         fp32 || kFp32Build ? SpeedrunFileDtype::kFp32 : SpeedrunFileDtype::kReference);
  }
  // 6 FLOPs per token per parameter of the GEMMs (block matrices and head, ~0.69 GFLOP at the record's
  // shapes, SPEEDRUN.md section 4); the embeddings' gathers are no FLOPs, and attention (~5% at the
  // record's windows, which change over a run) is left out.
  double flops_per_token(const TrainableModel& model, int seq_len) const override {
    (void)seq_len;
    size_t gemm_params = 0;
    for (const TensorView& view : model.layout().tensors) {
      const SpeedrunTensor kind = speedrun_kind(view);
      if (kind == SpeedrunTensor::kQkvo || kind == SpeedrunTensor::kFc || kind == SpeedrunTensor::kProj ||
          kind == SpeedrunTensor::kHead)
        gemm_params += view.numel;
    }
    return 6.0 * static_cast<double>(gemm_params);
  }
  std::unique_ptr<CausalDecoder> make_decoder(TrainableModel& model, int max_chunk) const override {
    (void)model, (void)max_chunk;
    throw std::invalid_argument(
        "--sample-every: the speedrun model has no KV-cache decoder yet (samples need a GPT-2 "
        "model)");
  }
  void describe_state(TrainState& state) const override {
    state.family = ModelFamilyId::kSpeedrun;
    state.speedrun = config_;
  }
  double set_attention_windows(TrainableModel& model, int short_blocks, int long_blocks,
                               bool apply_yarn) const override {
    SpeedrunModel& speedrun = static_cast<SpeedrunModel&>(model);
    speedrun.set_attention_windows(short_blocks, long_blocks, apply_yarn);
    return speedrun.attn_scale();
  }

 private:
  SpeedrunConfig config_;
};

bool is_speedrun_preset(const std::string& name) { return name == "speedrun" || name == "speedrun-tiny"; }

// The first int32 of a model file tells the family.
int32_t file_magic(const std::string& path) {
  const FileHandle in = open_file(path, "rb", "model file");
  int32_t magic = 0;
  if (std::fread(&magic, sizeof magic, 1, in.get()) != 1)
    throw FileError(path, "truncated model file: shorter than its 1024-byte header");
  return magic;
}

}  // namespace

ModelStart locate_model(const std::string& model, const std::string& file, int world_size) {
  ModelStart start;
  start.file = !file.empty() ? file : is_regular_file(model) ? model : "";
  if (start.file.empty()) {
    if (is_speedrun_preset(model)) {
      start.family = std::make_unique<SpeedrunFamily>(speedrun_config_from_name(model));
      return start;
    }
    try {
      start.family = std::make_unique<GPT2Family>(config_from_name(model));
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument("--model '" + model +
                                  "' is neither a model file nor a preset (dN with N in 1..64, tiny, small, speedrun, "
                                  "speedrun-tiny)");
    }
    return start;
  }
  const int32_t magic = file_magic(start.file);
  if (magic == kSpeedrunModelMagic) {
    SpeedrunLayout layout;
    start.params = load_speedrun_model(start.file, world_size, &layout);
    start.family = std::make_unique<SpeedrunFamily>(layout.config);
  } else if (magic == kCheckpointMagic) {
    GPT2Layout layout;
    start.params = load_checkpoint(start.file, world_size, &layout);
    start.family = std::make_unique<GPT2Family>(layout.config);
  } else {
    throw FileError(start.file, "not a model file: magic is " + std::to_string(magic) + ", expected " +
                                    std::to_string(kCheckpointMagic) + " (GPT-2, llm.c) or " +
                                    std::to_string(kSpeedrunModelMagic) + " (speedrun)");
  }
  return start;
}

}  // namespace llmc
