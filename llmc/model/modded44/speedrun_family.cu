// The #44 speedrun model as a model family, and what only the family knows of its device model (see
// speedrun_family.h, speedrun_model.h).
#include "llmc/model/modded44/speedrun_family.h"

#include <stdexcept>
#include <type_traits>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/family/fp8_decision.h"
#include "llmc/model/modded44/speedrun_init.h"
#include "llmc/model/modded44/speedrun_model.h"
#include "llmc/model/modded44/speedrun_model_file.h"

namespace llmc {

namespace {

constexpr bool kFp32Build = std::is_same<floatX, float>::value;

class SpeedrunFamily : public ModelFamily {
 public:
  explicit SpeedrunFamily(const SpeedrunConfig& config) : config_(config) {}
  std::string describe() const override { return "speedrun " + describe_speedrun_config(config_); }
  int vocab_size() const override { return config_.vocab_size; }
  // auto: on wherever it can run. The emulated device is sm_90, so emulated runs take the FP8 path the GPU
  // takes (its GEMMs emulated with the accumulator model of docs/fp8.md).
  bool use_fp8_head(Fp8Choice choice, int seq_len) const override {
    return choose_fp8_head(choice, seq_len, config_.channels(), config_.vocab_size);
  }
  bool trains_on_documents() const override { return true; }  // the record's BOS-aligned loader
  bool has_wgmma_gemms() const override { return true; }
  StateOptimizer default_optimizer() const override { return StateOptimizer::kSpeedrun; }
  std::unique_ptr<FamilyModel> build(const ModelBuild& r) const override {
    if (r.batch_size != 1)
      throw std::invalid_argument("--batch-size " + std::to_string(r.batch_size) +
                                  ": the speedrun model trains one packed sequence per rank and micro-step; use -b 1 "
                                  "and set the sequence length with -t");
    if (r.seq_len > config_.max_seq_len)
      throw std::invalid_argument("--seq-len " + std::to_string(r.seq_len) + " exceeds the speedrun model's maximum " +
                                  std::to_string(config_.max_seq_len));
    return std::make_unique<SpeedrunModel>(config_, r.world_size, r.seq_len, r.loss_slots, r.stream, kSpeedrunBosToken,
                                           r.fp8_head ? SpeedrunHead::kFp8 : SpeedrunHead::kBf16,
                                           r.wgmma_gemms ? FusedGemms::kWgmma : FusedGemms::kCublas);
  }
  std::vector<float> init_params(uint64_t seed, int world_size) const override {
    return init_speedrun_params(make_speedrun_layout(config_, world_size), seed);
  }
  std::unique_ptr<CausalDecoder> make_decoder(const std::vector<float>&, int, cudaStream_t) const override {
    throw std::invalid_argument("the speedrun model has no KV-cache decoder yet (generation needs a GPT-2 model)");
  }
  StateModel state_model() const override { return speedrun_state_model(config_); }
  // The format has no checksum field: the whole file is hashed.
  FileDigest model_file_digest(const std::string& path) const override { return whole_file_digest(path, "model file"); }

 private:
  SpeedrunConfig config_;
};

}  // namespace

std::unique_ptr<ModelFamily> make_speedrun_family(const SpeedrunConfig& config) {
  return std::make_unique<SpeedrunFamily>(config);
}

// ---- SpeedrunModel's family methods -----------------------------------------------------------------------

WrittenFile SpeedrunModel::write_model_file(const std::string& path, const std::vector<float>& params,
                                            bool fp32) const {
  return write_speedrun_model(path, layout_, params.data(),
                              fp32 || kFp32Build ? SpeedrunFileDtype::kFp32 : SpeedrunFileDtype::kReference);
}

// 6 FLOPs per token per parameter of the GEMMs (block matrices and head, ~0.69 GFLOP at the record's
// shapes, docs/recipes.md); the embeddings' gathers are no FLOPs, and attention (~5% at the
// record's windows, which change over a run) is left out.
double SpeedrunModel::flops_per_token(int seq_len) const {
  (void)seq_len;
  size_t gemm_params = 0;
  for (const TensorView& view : layout_.tensors) {
    const SpeedrunTensor kind = speedrun_kind(view);
    if (kind == SpeedrunTensor::kQkvo || kind == SpeedrunTensor::kFc || kind == SpeedrunTensor::kProj ||
        kind == SpeedrunTensor::kHead)
      gemm_params += view.numel;
  }
  return 6.0 * static_cast<double>(gemm_params);
}

std::unique_ptr<CausalDecoder> SpeedrunModel::make_decoder(int max_chunk) {
  (void)max_chunk;
  throw std::invalid_argument(
      "--sample-every: the speedrun model has no KV-cache decoder yet (samples need a GPT-2 "
      "model)");
}

}  // namespace llmc
