// GPT-2 on the device, a TrainableModel (llmc/family/trainable_model.h): parameters and gradients in one
// bucketed buffer each (llmc/model/gpt2/gpt2_layout.h), the activations of one micro-batch, and the forward
// and backward passes over the layers. The backward reports each bucket the moment its gradients are
// final, so the optimizer can start communicating it while the layers below are still being differentiated.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "llmc/kernels/gemm_plan_cache.h"
#include "llmc/model/gpt2/gpt2_layout.h"
#include "llmc/family/trainable_model.h"
#include "llmc/cuda/precision.h"

namespace llmc {

class GPT2 : public FamilyModel {
 public:
  // Allocates parameters, gradients and activations for micro-batches of (batch_size, seq_len) and
  // up to `loss_slots` micro-steps of per-position losses. Throws llmc::CudaError (with the number of
  // bytes asked for) when the device is out of memory.
  GPT2(const GPT2Config& config, int world_size, int batch_size, int seq_len, int loss_slots, cudaStream_t stream);
  ~GPT2();
  GPT2(const GPT2&) = delete;
  GPT2& operator=(const GPT2&) = delete;

  const GPT2Layout& layout() const override { return layout_; }
  const GPT2Config& config() const { return layout_.config; }
  int batch_size() const { return batch_size_; }
  int seq_len() const { return seq_len_; }
  cudaStream_t stream() const override { return stream_; }
  floatX* params() override { return params_; }
  floatX* grads() override { return grads_; }
  size_t activation_bytes() const override { return activation_bytes_; }
  // "embeddings", "layer 3", "lm_head+final_norm".
  std::string bucket_name(int bucket) const override;

  void set_gemm_algo_selection(GemmAlgoSelection selection) override;

  // Host <-> device copies of the whole parameter / gradient buffer (layout order, as float). Synchronous.
  void upload_params(const std::vector<float>& host_params) override;
  std::vector<float> download_params() const override;
  std::vector<float> download_grads() const override;

  // See TrainableModel. With compute_dlogits the logits are replaced by d(loss)/d(logits) scaled by dloss.
  // The backward reports the buckets in the order gradients become final: final LayerNorm, layers
  // L-1 .. 0, embeddings.
  // A training upload plans the encoder backward on the host (its launches depend on the batch: a graph of
  // GPT-2's backward would replay the captured batch's plan).
  void upload_batch(const int* inputs_host, const int* targets_host, bool training) override;
  void forward_uploaded(int loss_slot, bool compute_dlogits, float dloss,
                        const BucketHook& before_bucket_use = nullptr) override;
  void backward(bool first_micro_step, const BucketHook& on_bucket_ready = nullptr) override;
  void enqueue_mean_loss(int num_slots, int result) override;
  double read_mean_loss(int result) override;

  // What only the family knows (llmc/model/gpt2/gpt2_family.cu): llm.c's model file, 6 FLOPs per
  // parameter plus attention's, the KV-cache decoder; no attention windows.
  WrittenFile write_model_file(const std::string& path, const std::vector<float>& params, bool fp32) const override;
  double flops_per_token(int seq_len) const override;
  std::unique_ptr<CausalDecoder> make_decoder(int max_chunk) override;
  double set_attention_windows(int short_blocks, int long_blocks, bool apply_yarn) override;
  void reset_yarn() override {}  // learned positions: no RoPE
  void set_loss_weights(const MtpLossWeights& weights) override;  // throws: the next token's loss alone
  void set_seq_len(int seq_len) override;                         // throws: one length

  // The logits of the last forward, (B*T, Vp) in layout order as float; meaningless after a forward that
  // computed dlogits (they replace the logits). Synchronous.
  std::vector<float> download_logits() const;

 private:
  struct Activations;
  floatX* param(TensorKind kind, int layer = -1) { return params_ + layout_.tensor(kind, layer).offset; }
  floatX* grad(TensorKind kind, int layer = -1) { return grads_ + layout_.tensor(kind, layer).offset; }

  GPT2Layout layout_;
  int batch_size_, seq_len_, loss_slots_;
  cudaStream_t stream_;
  floatX* params_ = nullptr;
  floatX* grads_ = nullptr;
  size_t activation_bytes_ = 0;
  std::unique_ptr<Activations> acts_;
};

}  // namespace llmc
