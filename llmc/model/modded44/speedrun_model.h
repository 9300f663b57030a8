// The speedrun model on the device (modded-nanogpt's 2025-10-31 record, docs/recipes.md), a
// TrainableModel (llmc/family/trainable_model.h): parameters and gradients in one bucketed floatX buffer
// each (llmc/model/modded44/speedrun_layout.h), the activations of one packed sequence of T tokens, and the
// forward and backward over the blocks, built from the kernels of llmc/kernels. The backward reports
// each bucket the moment its gradients are final: head, blocks L-1..1, embeddings.
//
// Documents: a document starts at position 0 and at every position holding `bos_token` (the loader
// packs whole documents that each start with it); attention stays inside documents. RoPE positions
// are indices into the packed sequence. Precision and its deviations from the reference:
// docs/speedrun_model.md.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "llmc/model/modded44/speedrun_layout.h"
#include "llmc/family/fused_gemms.h"
#include "llmc/family/row_sparse_zeroing.h"
#include "llmc/family/trainable_model.h"
#include "llmc/model/modded44/yarn.h"
#include "llmc/cuda/precision.h"

namespace llmc {

struct ResidualMixIn;  // llmc/kernels/residual_norm.cuh

// The GPT-2 tokenizer's <|endoftext|>, which opens every document of the speedrun's data.
constexpr int kSpeedrunBosToken = 50256;

// The head's GEMMs in training: bf16 (as every other GEMM) or the record's FP8 head (llmc/kernels/fp8_head.cuh,
// docs/fp8.md: e4m3/e5m2 copies with static scales, its workspace in the model's arena). Validation and any
// forward without compute_dlogits use the bf16 head either way, as the reference does.
enum class SpeedrunHead { kBf16, kFp8 };

class SpeedrunModel : public FamilyModel {
 public:
  // Allocates parameters, gradients and activations for sequences of seq_len tokens (at most
  // config.max_seq_len) and up to `loss_slots` micro-steps of per-position losses. The attention windows
  // start at the record's first ones (long 3 blocks, short 1) with the initial RoPE state. Throws
  // std::invalid_argument for a bad shape, llmc::CudaError (with the bytes asked for) when the device is
  // out of memory. An FP8 head needs seq_len, the width and the vocabulary to be multiples of 16
  // (std::invalid_argument otherwise).
  SpeedrunModel(const SpeedrunConfig& config, int world_size, int seq_len, int loss_slots, cudaStream_t stream,
                int bos_token = kSpeedrunBosToken, SpeedrunHead head = SpeedrunHead::kBf16,
                FusedGemms fused_gemms = FusedGemms::kCublas);
  ~SpeedrunModel() override;
  SpeedrunModel(const SpeedrunModel&) = delete;
  SpeedrunModel& operator=(const SpeedrunModel&) = delete;

  const SpeedrunLayout& layout() const override { return layout_; }
  const SpeedrunConfig& config() const { return layout_.config; }
  int seq_len() const { return seq_len_; }
  cudaStream_t stream() const override { return stream_; }
  floatX* params() override { return params_; }
  floatX* grads() override { return grads_; }
  size_t activation_bytes() const override { return activation_bytes_; }
  void set_gemm_algo_selection(GemmAlgoSelection selection) override;
  // What activation_bytes() will be for a model of this shape, without allocating anything.
  static size_t planned_activation_bytes(const SpeedrunConfig& config, int seq_len, int loss_slots,
                                         SpeedrunHead head = SpeedrunHead::kBf16);
  SpeedrunHead head() const { return head_; }
  FusedGemms fused_gemms() const { return fused_gemms_; }
  // "embeddings", "block 3", "head".
  std::string bucket_name(int bucket) const override;
  // True when attention runs the fast kernel (bf16 build, head size 128), false for the simple path.
  bool uses_window_attention_kernel() const;

  // Attention windows in blocks of config.window_block tokens (a key at distance > window is masked).
  // With apply_yarn, a change of the long window applies YaRN to the RoPE frequencies and the
  // attention scale (docs/recipes.md, "The schedules"; the record does so at each training change, not for the
  // final validation's wider window) and rebuilds the tables. Throws std::invalid_argument for
  // non-positive windows.
  // Returns the attention scale in force.
  double set_attention_windows(int short_blocks, int long_blocks, bool apply_yarn) override;
  void reset_yarn() override;
  void set_loss_weights(const MtpLossWeights& weights) override;  // throws: the next token's loss alone
  void set_seq_len(int seq_len) override;                         // throws: one length
  int short_window_tokens() const { return short_blocks_ * layout_.config.window_block; }
  int long_window_tokens() const { return long_blocks_ * layout_.config.window_block; }
  double attn_scale() const { return yarn_.attn_scale(); }
  // The RoPE tables as the kernels read them (seq_len x D/2 each, row-major, widened to float).
  void download_rope_tables(std::vector<float>& cos_table, std::vector<float>& sin_table) const;

  // What only the family knows (llmc/model/modded44/speedrun_family.cu): the family's model file, 6 FLOPs
  // per GEMM parameter; no decoder yet.
  WrittenFile write_model_file(const std::string& path, const std::vector<float>& params, bool fp32) const override;
  double flops_per_token(int seq_len) const override;
  std::unique_ptr<CausalDecoder> make_decoder(int max_chunk) override;

  // Host <-> device copies of the whole parameter / gradient buffer (layout order, as float). Synchronous.
  void upload_params(const std::vector<float>& host_params) override;
  std::vector<float> download_params() const override;
  std::vector<float> download_grads() const override;
  // The scalar vector in fp32, as the record keeps it (the bf16 build's parameter buffer rounds it).
  Fp32Params take_fp32_params() override;

  // See TrainableModel. inputs/targets hold seq_len tokens (one packed sequence). Losses are the
  // per-token cross-entropies of the soft-capped logits; with compute_dlogits the backward starts from
  // dloss * d(sum of the losses) (dloss = 1 is the record's SUM reduction; an FP8 head scales its gradient
  // codes by fp8_head_grad_scale(dloss), so dloss must then be positive). A training upload needs the targets.
  // forward_uploaded enqueues kernels and device copies alone, the same for every batch of one shape.
  void upload_batch(const int* inputs_host, const int* targets_host, bool training) override;
  void forward_uploaded(int loss_slot, bool compute_dlogits, float dloss,
                        const BucketHook& before_bucket_use = nullptr) override;
  // The embedding backward's plan is built by the training upload from its tokens.
  void backward(bool first_micro_step, const BucketHook& on_bucket_ready = nullptr) override;
  void enqueue_mean_loss(int num_slots, int result) override;
  double read_mean_loss(int result) override;
  std::string step_shape() const override;
  void replayed_micro_step() override;
  // The embedding and value-embedding tables with the tokens of the step's training batches
  // (TrainableModel::row_sparse_grads): each step's first backward zeroes only their rows that may be nonzero.
  const std::vector<RowSparseGrad>& row_sparse_grads() const override;
  void grad_rows_written(int tensor, const std::vector<int>& rows) override;
  void all_grad_rows_written(int tensor) override;

 private:
  struct Buffers;
  struct Activations;
  floatX* param(SpeedrunTensor kind, int block = -1) { return params_ + layout_.tensor(kind, block).offset; }
  floatX* grad(SpeedrunTensor kind, int block = -1) { return grads_ + layout_.tensor(kind, block).offset; }
  std::vector<RowSparseGrad> sparse_rows(const std::vector<int>& token_rows) const;
  void start_bucket_grads(int bucket, bool first_micro_step);
  void rebuild_rope_tables();
  ResidualMixIn block_lambda_mix(int block) const;
  ResidualMixIn backout_mix() const;
  void block_forward(int block);
  void attention_forward(int block);
  void mlp_forward(int block);
  void head_forward(int loss_slot, bool compute_dlogits, float dloss);
  void head_backward();
  void block_backward(int block);
  void attention_backward(int block);
  void mlp_backward(int block);
  void input_backward();
  void attention_kernel_forward(int block);
  void attention_kernel_backward(int block);

  SpeedrunLayout layout_;
  int seq_len_, loss_slots_, bos_token_;
  SpeedrunHead head_;
  FusedGemms fused_gemms_;  // the MLP's and qkv GEMMs (llmc/family/fused_gemms.h, --wgmma-gemms)
  cudaStream_t stream_;
  floatX* params_ = nullptr;
  floatX* grads_ = nullptr;
  size_t activation_bytes_ = 0;
  Yarn yarn_;
  int short_blocks_ = 1, long_blocks_ = 3;
  int num_docs_ = 1;  // cu_seqlens has num_docs_ + 1 entries: T + 1, padded (upload_batch)
  bool fp32_scalars_taken_ = false;  // take_fp32_params(): an optimizer writes the fp32 scalars
  std::unique_ptr<Activations> acts_;
  // The tables' rows (the tokens) the last training batch read, and those of the step's backwards so far.
  TableRows table_rows_;
  std::unique_ptr<RowSparseZeroing> zero_grads_;  // which rows of the tables' gradients may be nonzero
};

}  // namespace llmc
