// The 2026-07-17 model as a model family, and what only the family knows of its device model (see
// modded89_family.h, modded89_model.h). Its own optimizer is its record's (the speedrun optimizer's 2026-07-17
// recipe); it trains with a fixed bigram sign table and the prefix table of the GPT-2 vocabulary, its decoders
// attend with a model file's windows and YaRN (docs/recipes.md#the-2026-07-17-model-being-ported).
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <type_traits>

#include "llmc/family/fp8_decision.h"
#include "llmc/model/modded89/modded89_decoder.h"
#include "llmc/model/modded89/modded89_family.h"
#include "llmc/model/modded89/modded89_init.h"
#include "llmc/model/modded89/modded89_model.h"
#include "llmc/model/modded89/modded89_model_file.h"
#include "llmc/tokenizer/bpe_vocab.h"
#include "llmc/tokenizer/token_prefixes.h"

namespace llmc {

namespace {

constexpr bool kFp32Build = std::is_same<floatX, float>::value;
constexpr int kModded89BosToken = 50256;  // GPT-2's <|endoftext|>, which opens every document

// The context of generate_gpt2: the record's longest document (its final document cut, SPEEDRUN89.md section 6),
// or the model's whole sequence where that is shorter. Each generated token re-runs all of it.
constexpr int kModded89GenerationContext = 2048;
int generation_context(const Modded89Config& config) {
  return std::min(config.max_seq_len, kModded89GenerationContext);
}

// The prefix-token loss takes prefixes of GPT-2 tokens: a model whose vocabulary holds GPT-2's has it; a smaller
// one (a test shape) has no GPT-2 tokens to take prefixes of and trains without the term.
bool has_prefix_loss(const Modded89Config& config) { return config.vocab_size >= kGpt2VocabSize; }

std::vector<int32_t> prefix_table_from(const std::string& vocab_dir, int padded_vocab_size) {
  BpeVocab vocab;
  try {
    vocab = load_bpe_vocab_dir(vocab_dir);
  } catch (const std::exception& error) {
    throw std::invalid_argument("--vocab " + vocab_dir + ": the 2026-07-17 model's prefix-token loss needs GPT-2's " +
                                "BPE files: " + error.what());
  }
  return token_prefix_table(vocab, padded_vocab_size);
}

class Modded89Family : public ModelFamily {
 public:
  Modded89Family(const Modded89Config& config, const Modded89AttentionState& attention)
      : config_(config), attention_(attention) {}
  std::string describe() const override {
    return "modded89 " + describe_modded89_config(config_) + " prefix_loss=" + (has_prefix_loss(config_) ? "on" : "off");
  }
  int vocab_size() const override { return config_.vocab_size; }
  bool use_fp8_head(Fp8Choice choice, int seq_len) const override {
    return choose_fp8_head(choice, seq_len, config_.channels(), config_.vocab_size);
  }
  // auto: on where the device has FP8 GEMMs and the shape fits, as the head's.
  bool use_fp8_mlp(Fp8Choice choice, int seq_len) const override {
    return choose_fp8(choice, Modded89Fp8Mlp::shape_fits(seq_len, config_.channels()), "--fp8-mlp",
                      "the FP8 MLP needs --seq-len (" + std::to_string(seq_len) + ") and the width (" +
                          std::to_string(config_.channels()) + ") to be multiples of 16");
  }
  bool trains_on_documents() const override { return true; }
  bool has_wgmma_gemms() const override { return true; }
  StateOptimizer default_optimizer() const override { return StateOptimizer::kSpeedrun; }  // its record's
  std::vector<float> init_params(uint64_t seed, int world_size) const override {
    return init_modded89_params(make_modded89_layout(config_, world_size), seed);
  }
  // Its own model of the generation context, the bf16 head, the attention state it was built with (a model
  // file's: the windows and YaRN its training ended with), the fixed sign table; no loss, so no prefix table.
  std::unique_ptr<CausalDecoder> make_decoder(const std::vector<float>& params, int, cudaStream_t stream) const override {
    auto model = std::make_shared<Modded89Model>(config_, /*world_size=*/1, generation_context(config_),
                                                 /*loss_slots=*/1, stream, kModded89BosToken);
    model->set_sign_table(modded89_sign_table(config_.channels()));
    model->set_attention_state(attention_);
    model->upload_params(params);
    return std::make_unique<Modded89Decoder>(std::move(model));
  }
  std::unique_ptr<FamilyModel> build(const ModelBuild& r) const override {
    if (r.batch_size != 1)
      throw std::invalid_argument("--batch-size " + std::to_string(r.batch_size) +
                                  ": the 2026-07-17 model trains one packed sequence per rank and micro-step; use -b 1 "
                                  "and set the sequence length with -t");
    if (r.seq_len > config_.max_seq_len)
      throw std::invalid_argument("--seq-len " + std::to_string(r.seq_len) + " exceeds the 2026-07-17 model's maximum " +
                                  std::to_string(config_.max_seq_len));
    // Before the allocation: a missing vocabulary costs nothing.
    const std::vector<int32_t> prefix_of =
        has_prefix_loss(config_) ? prefix_table_from(r.vocab_dir, config_.vocab_size) : std::vector<int32_t>{};
    auto model = std::make_unique<Modded89Model>(config_, r.world_size, r.seq_len, r.loss_slots, r.stream,
                                                 kModded89BosToken,
                                                 r.fp8_head ? Modded89Head::kFp8 : Modded89Head::kBf16,
                                                 r.fp8_mlp ? Modded89Mlp::kFp8 : Modded89Mlp::kBf16,
                                                 r.wgmma_gemms ? FusedGemms::kWgmma : FusedGemms::kCublas);
    model->set_sign_table(modded89_sign_table(config_.channels()));
    model->set_prefix_table(prefix_of);
    return model;
  }
  StateModel state_model() const override { return modded89_state_model(config_); }
  FileDigest model_file_digest(const std::string& path) const override { return whole_file_digest(path, "model file"); }

 private:
  Modded89Config config_;
  Modded89AttentionState attention_;
};

}  // namespace

std::unique_ptr<ModelFamily> make_modded89_family(const Modded89Config& config) {
  return make_modded89_family(config, modded89_first_attention_state(config));
}

std::unique_ptr<ModelFamily> make_modded89_family(const Modded89Config& config,
                                                  const Modded89AttentionState& attention) {
  validate_modded89_config(config);
  return std::make_unique<Modded89Family>(config, attention);
}

// ---- Modded89Model's family methods ---------------------------------------------------------------------------

WrittenFile Modded89Model::write_model_file(const std::string& path, const std::vector<float>& params,
                                            bool fp32) const {
  return write_modded89_model(path, layout_, params.data(),
                              fp32 || kFp32Build ? TensorFileDtype::kFp32 : TensorFileDtype::kReference,
                              attention_state());
}

// 6 FLOPs per token per GEMM parameter: the banks, the head and the small MLPs (114.3M parameters, 0.686 GFLOP
// per token at the record's shapes); the gathers are no FLOPs and attention, whose windows change over a run,
// is left out.
double Modded89Model::flops_per_token(int seq_len) const {
  (void)seq_len;
  size_t gemm_params = 0;
  for (const TensorView& view : layout_.tensors) {
    const auto kind = static_cast<Modded89Tensor>(view.kind);
    if (kind == Modded89Tensor::kQkBank || kind == Modded89Tensor::kVoBank || kind == Modded89Tensor::kMlpBank ||
        kind == Modded89Tensor::kHead || kind == Modded89Tensor::kGateW1 || kind == Modded89Tensor::kGateW2 ||
        kind == Modded89Tensor::kMuddW1 || kind == Modded89Tensor::kMuddW2)
      gemm_params += view.numel;
  }
  return 6.0 * static_cast<double>(gemm_params);
}

// Over the live model, not owned (the trainer's samples run between steps): a context of the training sequence's
// seq_len positions, whatever max_chunk (the activations are the cache).
std::unique_ptr<CausalDecoder> Modded89Model::make_decoder(int max_chunk) {
  (void)max_chunk;
  return std::make_unique<Modded89Decoder>(std::shared_ptr<Modded89Model>(this, [](Modded89Model*) {}));
}

void Modded89Model::reset_yarn() {
  yarn_ = initial_yarn(layout_.config);
  yarn_changes_.clear();
  apply_yarn_state();
}

Modded89AttentionState Modded89Model::attention_state() const {
  return Modded89AttentionState{short_window_, long_window_, yarn_changes_};
}

void Modded89Model::set_attention_state(const Modded89AttentionState& state) {
  YarnState yarn = initial_yarn(layout_.config);
  for (const YarnChange& change : state.yarn_changes)
    yarn.apply(change.old_blocks, change.new_blocks, layout_.config.window_block);
  set_windows(state.short_window, state.long_window);
  yarn_ = std::move(yarn);
  yarn_changes_ = state.yarn_changes;
  apply_yarn_state();
}

double Modded89Model::set_attention_windows(int short_blocks, int long_blocks, bool apply_yarn) {
  if (short_blocks < 1 || long_blocks < 1)
    throw std::invalid_argument("--window-schedule: windows must be at least one block (short " +
                                std::to_string(short_blocks) + ", long " + std::to_string(long_blocks) + ")");
  const int block = layout_.config.window_block;
  if (apply_yarn && long_blocks * block != long_window_) {  // both rotary tables alike (SPEEDRUN89.md section 2)
    const YarnChange change{long_window_ / block, long_blocks};
    yarn_.apply(change.old_blocks, change.new_blocks, block);
    yarn_changes_.push_back(change);
    apply_yarn_state();
  }
  set_windows(short_blocks * block, long_blocks * block);
  return attn_scale_;
}

}  // namespace llmc
