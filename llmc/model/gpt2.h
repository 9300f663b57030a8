// GPT-2 on the device: parameters and gradients in one bucketed buffer each (llmc/model/param_layout.h),
// the activations of one micro-batch, and the forward and backward passes over the layers. The
// backward reports each bucket the moment its gradients are final, so the optimizer can start
// communicating it while the layers below are still being differentiated.
#pragma once
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <vector>

#include "llmc/model/param_layout.h"
#include "llmc/precision.h"

namespace llmc {

// Called with a bucket index. Forward: before the first kernel that reads the bucket's parameters
// (so the caller can make the compute stream wait for that bucket's all-gather). Backward: right
// after the last kernel that writes the bucket's gradients or reads its parameters has been enqueued.
using BucketHook = std::function<void(int bucket)>;

class GPT2 {
 public:
  // Allocates parameters, gradients and activations for micro-batches of (batch_size, seq_len) and
  // up to `loss_slots` micro-steps of per-position losses. Throws llmc::CudaError (with the number of
  // bytes asked for) when the device is out of memory.
  GPT2(const GPT2Config& config, int world_size, int batch_size, int seq_len, int loss_slots, cudaStream_t stream);
  ~GPT2();
  GPT2(const GPT2&) = delete;
  GPT2& operator=(const GPT2&) = delete;

  const ParamLayout& layout() const { return layout_; }
  const GPT2Config& config() const { return layout_.config; }
  int batch_size() const { return batch_size_; }
  int seq_len() const { return seq_len_; }
  cudaStream_t stream() const { return stream_; }
  floatX* params() { return params_; }
  floatX* grads() { return grads_; }
  size_t activation_bytes() const { return activation_bytes_; }

  // Host <-> device copies of the whole parameter / gradient buffer (layout order, as float). Synchronous.
  void upload_params(const std::vector<float>& host_params);
  std::vector<float> download_params() const;
  std::vector<float> download_grads() const;

  // Forward over B*T tokens (host arrays, B*T each). With targets, the per-position losses go to loss
  // slot `loss_slot`; with compute_dlogits the logits are replaced by d(loss)/d(logits) scaled by dloss
  // (1 / (B*T*micro_steps) for a mean), ready for backward(). Asynchronous on the model's stream.
  void forward(const int* inputs_host, const int* targets_host, int loss_slot, bool compute_dlogits, float dloss,
               const BucketHook& before_bucket_use = nullptr);

  // Backward of the last forward (which must have had compute_dlogits). first_micro_step zeroes each
  // bucket's gradients just before its first write; otherwise gradients accumulate. on_bucket_ready is
  // called per bucket in the order gradients become final: final LayerNorm, layers L-1 .. 0, embeddings.
  void backward(const int* inputs_host, bool first_micro_step, const BucketHook& on_bucket_ready = nullptr);

  // Mean of the losses in slots [0, num_slots) (waits for the stream).
  double mean_loss(int num_slots) const;

 private:
  struct Activations;
  floatX* param(TensorKind kind, int layer = -1) { return params_ + layout_.tensor(kind, layer).offset; }
  floatX* grad(TensorKind kind, int layer = -1) { return grads_ + layout_.tensor(kind, layer).offset; }
  void zero_bucket_grads(int bucket);

  ParamLayout layout_;
  int batch_size_, seq_len_, loss_slots_;
  cudaStream_t stream_;
  floatX* params_ = nullptr;
  floatX* grads_ = nullptr;
  size_t activation_bytes_ = 0;
  std::unique_ptr<Activations> acts_;
};

}  // namespace llmc
