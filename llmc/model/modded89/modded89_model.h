// The 2026-07-17 record's model on the device (docs/recipes.md#the-2026-07-17-model-being-ported): parameters in
// one bucketed floatX buffer (llmc/model/modded89/modded89_layout.h) with the fp32 tensors also kept in fp32,
// the activations of one packed sequence of T tokens, and the forward over the 11 layers built from the
// kernels of llmc/kernels: the training loss (multi-token and prefix terms, the logit gradient written by the
// same kernel), the validation loss, and the backward of the training objective. The family's model file,
// its registry entry and the trainer's interface come next (docs/recipes.md).
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "llmc/cuda/precision.h"
#include "llmc/kernels/mtp_cross_entropy.cuh"
#include "llmc/model/modded89/modded89_layout.h"

namespace llmc {

class Modded89Model {
 public:
  // Allocates parameters and the activations of sequences of seq_len tokens (at most config.max_seq_len);
  // documents start at position 0 and at every `bos_token`. Windows start at the record's first ones (short
  // 1 block, long 3), RoPE at the record's start (frequencies (1/1024)^(m / (D/4 - 1)), scale 0.1), the sign
  // table all +1 and no prefix table. Throws std::invalid_argument for a bad shape.
  Modded89Model(const Modded89Config& config, int seq_len, cudaStream_t stream, int bos_token);
  ~Modded89Model();
  Modded89Model(const Modded89Model&) = delete;
  Modded89Model& operator=(const Modded89Model&) = delete;

  const Modded89Layout& layout() const { return layout_; }
  int seq_len() const { return seq_len_; }
  // Device bytes of everything but the parameters and their gradients at seq_len (activations, tables, the
  // backward's buffers and embedding plans), without allocating anything; activation_bytes() of an allocated
  // model.
  static size_t planned_activation_bytes(const Modded89Config& config, int seq_len);
  size_t activation_bytes() const;

  // Host <-> device copies of the whole parameter buffer (layout order, as float; the fp32 tensors exactly).
  // Synchronous.
  void upload_params(const std::vector<float>& host_params);
  std::vector<float> download_params() const;
  // The bigram sign trick's table: kBigramSignRows x C values of +-1 (llmc/kernels/bigram_sign.cuh).
  void set_sign_table(const std::vector<float>& signs);
  // The prefix token of every token (V entries, -1: none); empty: no prefix table (the terms are absent).
  void set_prefix_table(const std::vector<int>& prefix_of);
  // D/4 rotary frequencies and the attention scale; rebuilds the tables (2 seq_len positions: the paired
  // layers' positions 2t + h % 2).
  void set_rope(const std::vector<float>& frequencies, float attn_scale);
  // Attention windows in tokens (a key farther than the window is masked; the paired layers count rows).
  void set_windows(int short_tokens, int long_tokens);

  // inputs/targets: seq_len tokens each (targets[t] = the token after inputs[t]). Training: each row's
  // loss sums the weighted next-token and prefix terms (llmc/kernels/mtp_cross_entropy.cuh) and the logit
  // gradient of their sum replaces the logits; otherwise the validation loss, the next token alone on the
  // unrounded soft-cap. The losses stay on the device until download_losses().
  void forward(const int* inputs_host, const int* targets_host, const MtpLossWeights& weights, bool training);
  std::vector<float> download_losses() const;
  // The gradient of the last training forward's objective (the losses' sum plus the lse terms whose targets
  // fall past the last row: what the loss kernel differentiates) into the gradient buffer, overwritten.
  // Throws std::logic_error without a training forward before it.
  void backward();
  std::vector<float> download_grads() const;  // layout order, as float

 private:
  struct Buffers;
  floatX* param(const std::string& name) const { return params_ + layout_.find(name).offset; }
  floatX* grad(const std::string& name) const { return grads_ + layout_.find(name).offset; }
  int fp32_index(const std::string& name, int element) const;
  void upload_batch(const int* inputs_host, const int* targets_host, bool training);
  void rebuild_rope_tables();
  void input_forward();
  void layer_forward(int layer);
  void attention_forward(int layer, const floatX* xn, const floatX* aux_v);
  void mudd_attention_forward(int layer);
  void mlp_forward(int layer);
  void small_mlp_forward(int index, const floatX* x);
  void head_forward(const MtpLossWeights& weights, bool training);
  void head_backward();
  void layer_backward(int layer);
  void mlp_backward(int layer);
  void attention_backward(int layer, const floatX* xn);
  void mudd_attention_backward(int layer);
  void small_mlp_backward(int index, const floatX* x, floatX* dx);
  void input_backward();
  void scale_layer_weights(int layer);

  Modded89Layout layout_;
  int seq_len_, bos_token_;
  cudaStream_t stream_;
  floatX* params_ = nullptr;
  floatX* grads_ = nullptr;
  bool has_training_forward_ = false;
  std::vector<float> frequencies_;
  float attn_scale_ = 0.1f;
  int short_window_ = 0, long_window_ = 0;
  int num_docs_ = 1;
  bool has_prefix_table_ = false;
  std::unique_ptr<Buffers> buffers_;
};

}  // namespace llmc
