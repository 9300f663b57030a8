// GPT-2 as a model family, and what only the family knows of its device model (see gpt2_family.h, gpt2.h).
#include "llmc/model/gpt2/gpt2_family.h"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "llmc/cuda/precision.h"
#include "llmc/model/gpt2/gpt2.h"
#include "llmc/model/gpt2/gpt2_decoder.h"
#include "llmc/model/gpt2/gpt2_init.h"
#include "llmc/model/gpt2/gpt2_model_file.h"

namespace llmc {

namespace {

constexpr bool kFp32Build = std::is_same<floatX, float>::value;

class GPT2Family : public ModelFamily {
 public:
  explicit GPT2Family(const GPT2Config& config) : config_(config) {}
  std::string describe() const override { return describe_config(config_); }
  int vocab_size() const override { return config_.vocab_size; }
  bool use_fp8_head(Fp8Choice choice, int seq_len) const override {
    (void)seq_len;
    if (choice == Fp8Choice::kOn)
      throw std::invalid_argument("--fp8-head on: GPT-2 models have no FP8 head (use a speedrun model, or "
                                  "--fp8-head off or auto)");
    return false;
  }
  bool trains_on_documents() const override { return false; }  // llm.c's windows
  StateOptimizer default_optimizer() const override { return StateOptimizer::kZeroAdamW; }
  std::unique_ptr<FamilyModel> build(const ModelBuild& r) const override {
    if (r.fp8_head) throw std::invalid_argument("--fp8-head on: GPT-2 models have no FP8 head");
    return std::make_unique<GPT2>(config_, r.world_size, r.batch_size, r.seq_len, r.loss_slots, r.stream);
  }
  std::vector<float> init_params(uint64_t seed, int world_size) const override {
    return init_gpt2_params(make_param_layout(config_, world_size), seed);
  }
  std::unique_ptr<CausalDecoder> make_decoder(const std::vector<float>& params, int max_chunk,
                                              cudaStream_t stream) const override {
    return std::make_unique<GPT2Decoder>(make_param_layout(config_, /*world_size=*/1), params,
                                         std::min(max_chunk, config_.max_seq_len), stream);
  }
  StateModel state_model() const override { return gpt2_state_model(config_); }
  FileDigest model_file_digest(const std::string& path) const override { return gpt2_model_file_digest(path); }

 private:
  GPT2Config config_;
};

}  // namespace

std::unique_ptr<ModelFamily> make_gpt2_family(const GPT2Config& config) {
  return std::make_unique<GPT2Family>(config);
}

// ---- GPT2's family methods ------------------------------------------------------------------------------

WrittenFile GPT2::write_model_file(const std::string& path, const std::vector<float>& params, bool fp32) const {
  return write_gpt2_model_file(path, layout_, params.data(),
                               fp32 || kFp32Build ? Gpt2FileDtype::kFp32 : Gpt2FileDtype::kBf16);
}

double GPT2::flops_per_token(int seq_len) const {
  return gpt2_training_flops_per_token(static_cast<int64_t>(layout_.num_parameters), layout_.config.num_layers,
                                       layout_.config.channels, seq_len);
}

std::unique_ptr<CausalDecoder> GPT2::make_decoder(int max_chunk) {
  return std::make_unique<GPT2Decoder>(layout_, params_, std::min(max_chunk, layout_.config.max_seq_len), stream_);
}

double GPT2::set_attention_windows(int short_blocks, int long_blocks, bool apply_yarn) {
  (void)short_blocks, (void)long_blocks, (void)apply_yarn;
  throw std::invalid_argument("--window-schedule speedrun: GPT-2 models have no attention windows (use a speedrun "
                              "model or --window-schedule fixed)");
}

void GPT2::set_loss_weights(const MtpLossWeights& weights) {
  (void)weights;
  throw std::invalid_argument("--loss-schedule modded89: GPT-2 models train on the next token's loss alone (use a "
                              "modded89 model or --loss-schedule fixed)");
}

void GPT2::set_seq_len(int seq_len) {
  (void)seq_len;
  throw std::invalid_argument("--batch-schedule modded89 or --val-seq-len: GPT-2 models train and validate every "
                              "step on --seq-len tokens (use a modded89 model)");
}

}  // namespace llmc
