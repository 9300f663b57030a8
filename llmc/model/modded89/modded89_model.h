// The 2026-07-17 record's model on the device (docs/recipes.md#the-2026-07-17-model-being-ported): parameters in
// one bucketed floatX buffer (llmc/model/modded89/modded89_layout.h) with the fp32 tensors also kept in fp32,
// the activations of one packed sequence of T tokens, and the forward over the 11 layers built from the
// kernels of llmc/kernels: the training loss (multi-token and prefix terms, the logit gradient written by the
// same kernel), the validation loss, and the backward of the training objective, bucket by bucket with the
// trainer's hooks (TrainableModel). The family's registry entry is modded89_family.h.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmc/cuda/precision.h"
#include "llmc/family/loss_means.h"
#include "llmc/family/fused_gemms.h"
#include "llmc/family/row_sparse_zeroing.h"
#include "llmc/family/trainable_model.h"
#include "llmc/kernels/mtp_cross_entropy.cuh"
#include "llmc/kernels/residual_norm.cuh"
#include "llmc/model/modded89/modded89_attention_state.h"
#include "llmc/model/modded89/modded89_fp8_mlp.h"
#include "llmc/model/modded89/modded89_layout.h"
#include "llmc/schedule/speedrun_schedule.h"

namespace llmc {

// The record's loss weights at step 0 (SPEEDRUN89.md section 3, stage 1): next tokens 1, 0.5, 0.25 and the prefix
// term 0.25 (absent without a prefix table). The schedule that moves them comes with the record's optimizer.
MtpLossWeights modded89_initial_loss_weights();

// The head of the training forward and backward (validation runs the bf16 head either way): bf16, or the
// record's FP8 head (SPEEDRUN89.md section 4: e4m3 x and W with x_s = 100/448, w_s = 1.6/448, the loss kernel's
// e5m2 logit gradient with g_s = 0.75/448 of the SUM loss; T, C and V multiples of 16).
enum class Modded89Head { kBf16, kFp8 };

class Modded89Model : public FamilyModel {
 public:
  // Allocates parameters, gradients (laid out for world_size ranks) and the activations of sequences of
  // seq_len tokens (at most config.max_seq_len), with loss_slots micro-steps of per-position losses (more than
  // one: a second gradient buffer for the accumulation). Documents start at position 0 and at every
  // `bos_token` (one outside the vocabulary never occurs). Windows start at the record's first ones (short 1 block,
  // long 3), RoPE at the record's start (frequencies (1/1024)^(m / (D/4 - 1)), scale 0.1), the sign table all +1, no
  // prefix table and the loss weights modded89_initial_loss_weights(). Throws std::invalid_argument for a bad shape.
  // mlp: the training forward's MLPs in bf16 or the record's FP8 (Modded89Fp8Mlp; T and C multiples of 16).
  // fused_gemms: the MLP's bf16 GEMMs on cuBLASLt or the wgmma GEMM with ReLU^2 (and the backward's slope from the
  // post-activation) in the epilogue (llmc/family/fused_gemms.h, --wgmma-gemms).
  Modded89Model(const Modded89Config& config, int world_size, int seq_len, int loss_slots, cudaStream_t stream,
                int bos_token, Modded89Head head = Modded89Head::kBf16, Modded89Mlp mlp = Modded89Mlp::kBf16,
                FusedGemms fused_gemms = FusedGemms::kCublas);
  ~Modded89Model() override;
  Modded89Model(const Modded89Model&) = delete;
  Modded89Model& operator=(const Modded89Model&) = delete;

  const Modded89Layout& layout() const override { return layout_; }
  int seq_len() const { return seq_len_; }                      // the tokens of each forward now
  int allocated_seq_len() const { return allocated_seq_len_; }  // the most it can take (the constructor's)
  cudaStream_t stream() const override { return stream_; }
  floatX* params() override { return params_; }
  floatX* grads() override { return grads_; }
  std::string bucket_name(int bucket) const override;  // "bigram table", "embeddings", "layer 3", "head"
  void set_gemm_algo_selection(GemmAlgoSelection selection) override;
  // Device bytes of everything but the parameters and their gradients at seq_len (activations, tables, the
  // backward's buffers and embedding plans, the accumulation buffer), without allocating anything;
  // activation_bytes() of an allocated model.
  static size_t planned_activation_bytes(const Modded89Config& config, int seq_len, int loss_slots = 1,
                                         Modded89Head head = Modded89Head::kBf16, Modded89Mlp mlp = Modded89Mlp::kBf16);
  Modded89Head head() const { return head_; }
  Modded89Mlp mlp() const { return mlp_; }
  FusedGemms fused_gemms() const { return fused_gemms_; }
  // With the FP8 MLP: its weight copies follow the parameters (TrainableModel::before_step), and its scales.
  void before_step(int step) override;
  std::string step_shape() const override;
  void replayed_micro_step() override;
  Modded89Fp8Mlp::Scales fp8_mlp_scales() const;
  // The FP8 MLP's scales (nothing with the bf16 MLP). Restoring a checkpoint without them (written with the bf16
  // MLP) leaves the FP8 MLP at its start; one of a bf16-MLP run ignores them.
  std::vector<NamedStateArray> save_model_state() const override;
  void restore_model_state(const std::vector<NamedStateArray>& arrays) override;
  size_t activation_bytes() const override;

  // Host <-> device copies of the whole parameter buffer (layout order, as float; once taken, the fp32 tensors
  // exactly as their fp32 copy holds them). Synchronous.
  void upload_params(const std::vector<float>& host_params) override;
  std::vector<float> download_params() const override;
  std::vector<float> download_grads() const override;  // layout order, as float
  // The fp32 tensors (scalars .. gate scale, a span of the layout). Until taken each forward widens them from
  // their floatX slots (what an optimizer of the floatX buffer updates); once taken they are read as they are.
  Fp32Params take_fp32_params() override;
  // The bigram sign trick's table: kBigramSignRows x C values of +-1 (llmc/kernels/bigram_sign.cuh).
  void set_sign_table(const std::vector<float>& signs);
  // The prefix token of every token (V entries, -1: none); empty: no prefix table (the terms are absent).
  void set_prefix_table(const std::vector<int>& prefix_of);
  // D/4 rotary frequencies and the attention scale; rebuilds the tables (2 seq_len positions: the paired
  // layers' positions 2t + h % 2).
  void set_rope(const std::vector<float>& frequencies, float attn_scale);
  const std::vector<float>& rope_frequencies() const { return frequencies_; }  // the D/4 in force
  // Attention windows in tokens (a key farther than the window is masked; the paired layers count rows).
  void set_windows(int short_tokens, int long_tokens);
  // The training objective's weights (llmc/kernels/mtp_cross_entropy.cuh); throws std::invalid_argument for
  // a count of next tokens outside 1..kMtpMaxTokens.
  void set_loss_weights(const MtpLossWeights& weights) override;

  // See TrainableModel. inputs/targets: seq_len tokens each (targets[t] = the token after inputs[t]). With
  // compute_dlogits (training) each row's loss sums the weighted next-token and prefix terms and the logit
  // gradient of dloss times their sum replaces the logits; otherwise the validation loss, the next token alone
  // on the unrounded soft-cap. The losses go to slot loss_slot. The targets are required. forward_uploaded enqueues
  // kernels and device copies alone, the same for every batch of one shape.
  void upload_batch(const int* inputs_host, const int* targets_host, bool training) override;
  void forward_uploaded(int loss_slot, bool compute_dlogits, float dloss,
                        const BucketHook& before_bucket_use = nullptr) override;
  std::vector<float> download_losses(int loss_slot = 0) const;
  // The gradient of the last training forward's objective (the losses' sum plus the lse terms whose targets
  // fall past the last row: what the loss kernel differentiates): stored with first_micro_step, else added.
  // on_bucket_ready(b) once bucket b is final (head, layers 10..0, embeddings, bigram table). Throws std::logic_error
  // without a training forward before it, or to accumulate with one loss slot.
  void backward(bool first_micro_step, const BucketHook& on_bucket_ready = nullptr) override;
  void enqueue_mean_loss(int num_slots, int result) override;
  double read_mean_loss(int result) override;
  // The embedding, value-embedding and bigram tables, with the rows the step's training batches read
  // (TrainableModel::row_sparse_grads): each backward zeroes only those tables' rows that may be nonzero.
  const std::vector<RowSparseGrad>& row_sparse_grads() const override;
  void grad_rows_written(int tensor, const std::vector<int>& rows) override;
  void all_grad_rows_written(int tensor) override;

  // The decoders' logits: the real tokens' (GPT-2's 50,257 of a padded vocabulary, else all V), soft-capped as the
  // validation loss reads them, of a context of seq_len positions. They overwrite the activations: call between
  // steps, not between a training forward and its backward. context_logits: the whole forward over
  // tokens[0, seq_len), the logits of positions [first, first + count).
  int context_length() const { return seq_len_; }
  int context_vocab_size() const;
  std::string context_describe() const;
  void context_logits(const int32_t* tokens, int first, int count, float* out);
  // The KV-cached forward (Modded89Decoder): the model's activations are the cache. tokens[0, total) are the
  // sequence so far, of which the first `first` were given to the previous calls since the last reset (first 0);
  // computes the rows the model does not hold yet (from `first` on, or from the start after any other forward or
  // a change of parameters, windows or RoPE it knows of) and writes the logits of the last `logit_rows` as
  // context_logits does. The parameters must not change between the calls of one sequence.
  void decode_logits(const int32_t* tokens, int first, int total, int logit_rows, float* out);

  // What only the family knows (modded89_family.cu): its model file, 6 FLOPs per GEMM parameter, a decoder
  // with the activations as its KV cache (Modded89Decoder), windows in blocks with YaRN at a change of the long window
  // (from the model's own YaRN state; set_rope replaces the tables until the next change).
  WrittenFile write_model_file(const std::string& path, const std::vector<float>& params, bool fp32) const override;
  double flops_per_token(int seq_len) const override;
  std::unique_ptr<CausalDecoder> make_decoder(int max_chunk) override;
  double set_attention_windows(int short_blocks, int long_blocks, bool apply_yarn) override;
  void reset_yarn() override;
  // The windows and the YaRN changes since the start or the last reset_yarn (what the model file keeps), and
  // their replay from the record's first RoPE (generation from a file; std::invalid_argument for a bad state).
  Modded89AttentionState attention_state() const;
  void set_attention_state(const Modded89AttentionState& state);
  // The tokens of each following forward (and of its backward and loss slots), 1 .. allocated_seq_len(); with
  // the FP8 head a multiple of 16. Between steps: a training forward waiting for its backward refuses it
  // (std::logic_error); a bad length throws std::invalid_argument.
  void set_seq_len(int seq_len) override;
  // Sequences of any length (TrainableModel::sequence_losses), in forwards of seq_len() rows. After the first,
  // each forward keeps the last long_sequence_context(0) rows of everything a row reads of the rows before it (each
  // attention layer's keys and values, the key offset's raw rows, the token embeddings the smear reads, the
  // tokens) at its start and computes the next rows after them, at their positions in the sequence (the RoPE
  // tables grow to 2 length positions once). The losses are those of one forward over the whole sequence (in the
  // emulation bit for bit; on a GPU to the rounding of other kernels for other shapes). Throws
  // std::invalid_argument for a token outside the vocabulary or a seq_len() below twice the context (for a
  // sequence longer than it), std::logic_error between a training forward and its backward.
  bool evaluates_long_sequences() const override { return true; }
  std::vector<float> sequence_losses(const int* inputs_host, const int* targets_host, int length) override;
  // The rows a long sequence's forwards carry: the widest window (long_blocks blocks, or the widest in force) or
  // the DC reach, at least 1, rounded up to long_sequence_alignment(); the later forwards start at its multiples
  // (the fast attention kernel's query tile, 128; else 1).
  int long_sequence_context(int long_blocks) const override;
  int long_sequence_alignment() const;

 private:
  struct Buffers;
  struct AttentionCall;
  // The rows a forward computes, [first, first + count) of the sequence: all seq_len of them in training and
  // validation; the decoder's new tokens, after the rows its earlier calls computed (attention, DC, smear and the
  // key offset read those).
  struct RowSpan {
    int first = 0, count = 0;
  };
  // A buffer of rows of `width` values, from the first computed row on.
  template <typename P>
  P* at(P* rows, size_t width) const {
    return rows + static_cast<size_t>(rows_.first) * width;
  }
  bool whole_sequence() const { return rows_.first == 0 && rows_.count == seq_len_; }
  floatX* param(const std::string& name) const { return params_ + layout_.find(name).offset; }
  // Where the running backward writes: the gradient buffer, or the accumulation buffer after the first
  // micro-step (added into the gradient buffer bucket by bucket).
  floatX* grad(const std::string& name) const { return grad_target_ + layout_.find(name).offset; }
  int fp32_index(const std::string& name, int element) const;
  const int* upload_rows(const int* inputs_host, const int* targets_host, int first, int count);
  void check_tokens(const int* inputs_host, const int* targets_host, int first, int count) const;
  void carry_context(int end, int context);
  void grow_rope_tables(int positions);
  const floatX* rope_rows(const floatX* table, int position_step) const;
  void rebuild_rope_tables();
  static YarnState initial_yarn(const Modded89Config& config);
  void apply_yarn_state();
  void input_forward();
  void layer_forward(int layer);
  void attention_forward(int layer, const floatX* xn, const floatX* aux_v);
  void plan_window_attention();
  AttentionCall attention_view(bool paired, bool long_window) const;  // the problem of one of the 4 plans
  AttentionCall attention_call(int layer) const;                      // layer's view
  void window_attention_forward(int layer);
  void window_attention_backward(int layer, const floatX* dout, bool accumulate_dv);
  bool norm_rope_in_attention_stores(int layer, bool k) const;
  void mudd_attention_forward(int layer);
  void attention_output_and_mlp_norm(int layer);
  void attention_output_and_mlp_norm_backward(int layer);
  bool attention_norm_fused_before(int layer) const;
  bool attention_norm_backward_fused_after(int layer) const;
  int first_x0_stream_layer() const;
  ResidualMixIn residual_lambda_mix(const floatX* x, const floatX* branch, int lambda) const;
  float* mlp_input_amax(int layer) const;
  void mlp_forward(int layer);
  void mlp_output_mix(int layer);
  void small_mlp_forward(int index, const floatX* x);
  void body_forward(bool training, const BucketHook& before_bucket_use);
  void rows_forward(const BucketHook& before_bucket_use);
  void read_capped_logits(RowSpan rows, float* out);
  void final_hidden_forward();
  void head_logits(RowSpan rows);
  void head_forward(int loss_slot, bool training, float dloss);
  void head_backward();
  void layer_backward(int layer);
  void mlp_backward(int layer);
  void attention_backward(int layer, const floatX* xn);
  void mudd_attention_backward(int layer);
  void small_mlp_backward(int index, const floatX* x, floatX* dx);
  void input_backward();
  void scale_layer_weights(int layer);
  std::vector<RowSparseGrad> sparse_rows(const std::vector<int>& token_rows,
                                         const std::vector<int>& bigram_rows) const;
  void start_bucket_grads(int bucket);
  void finish_bucket_grads(int bucket, const BucketHook& on_bucket_ready);
  bool accumulating() const { return grad_target_ != grads_; }  // the running backward adds into grads_

  Modded89Layout layout_;
  const int allocated_seq_len_;
  int seq_len_, loss_slots_, bos_token_;
  Modded89Head head_;
  Modded89Mlp mlp_;
  FusedGemms fused_gemms_;
  cudaStream_t stream_;
  floatX* params_ = nullptr;
  floatX* grads_ = nullptr;
  floatX* grad_target_ = nullptr;
  bool has_training_forward_ = false;
  // What the buffers' rows hold: a batch of upload_batch (a training one: with the plans), else another upload's.
  bool batch_uploaded_ = false, uploaded_training_ = false;
  bool fp32_taken_ = false;  // take_fp32_params(): an optimizer writes the fp32 tensors
  MtpLossWeights loss_weights_;
  YarnState yarn_ = initial_yarn(layout_.config);
  std::vector<YarnChange> yarn_changes_;  // the ones yarn_ went through since initial_yarn
  std::vector<float> frequencies_;
  float attn_scale_ = 0.1f;
  int short_window_ = 0, long_window_ = 0;
  int num_docs_ = 1;  // cu_seqlens and cu_rows have num_docs_ + 1 entries: seq_len_ + 1, padded (stage_tokens)
  // The tables' rows the last training batch read, and those of the step's backwards so far.
  TableRows table_rows_;
  // Which rows of the tables' gradients may be nonzero in grads_ and in the accumulation buffer.
  std::unique_ptr<RowSparseZeroing> zero_grads_, zero_accum_;
  RowSpan rows_;
  // A long sequence's forward (sequence_losses): the sequence position of buffer row 0, and whether one runs (the
  // fast attention kernel then runs over the rows before rows_ too: the carried context).
  int position_offset_ = 0;
  bool long_sequence_ = false;
  int rope_positions_ = 2 * allocated_seq_len_;  // rows of the RoPE tables; more once grown
  floatX* grown_rope_ = nullptr;                 // the grown tables (cos, then sin), outside the arena
  int decoded_rows_ = 0;  // rows whose activations are the decoder's (decode_logits) and still hold
  bool has_prefix_table_ = false;
  std::unique_ptr<Buffers> buffers_;
  std::unique_ptr<LossMeans> loss_means_;
};

}  // namespace llmc
