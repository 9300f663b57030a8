// ZeRO-1 sharded AdamW with the gradient communication hidden under the backward pass. Each rank owns
// an equal contiguous shard of every bucket and keeps fp32 master weights and AdamW moments for its
// shards only. As the backward reports each bucket final, the high-priority communication stream
// reduce-scatters it (mean) and, in the `full` mode, updates the shard and all-gathers the bucket
// right away; the next forward waits per bucket, not for the whole model.
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "llmc/model/gpt2.h"

namespace llmc {

class CommContext;
class Tracer;

enum class OverlapMode {
  none,  // every collective and update after the whole backward (the baseline)
  rs,    // reduce-scatters during the backward, updates + all-gathers after it, in reverse layer order
  full,  // reduce-scatter, update and all-gather of each bucket as soon as its gradients are final
};
OverlapMode parse_overlap_mode(const std::string& name);  // throws std::invalid_argument
const char* overlap_mode_name(OverlapMode mode);

struct OptimizerSettings {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // decoupled, on 2-D tensors only
  float grad_clip = 0.0f;     // global-norm clipping threshold; 0 = off
  OverlapMode overlap = OverlapMode::full;
};

class ZeroOptimizer {
 public:
  ZeroOptimizer(GPT2& model, CommContext& comm, const OptimizerSettings& settings, Tracer* tracer = nullptr);
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  // fp32 master weights of this rank's shards from the full host parameter buffer (layout order); the
  // moments start at zero.
  void init_master(const std::vector<float>& host_params);

  // Before the last micro-step's backward of optimizer step `step` (1-based) at learning rate `lr`.
  void begin_step(int step, float lr);
  // The model's hooks: forward waits for a bucket's pending all-gather; backward reports final buckets
  // (pass on_bucket_ready only on the last micro-step).
  BucketHook before_bucket_use();
  BucketHook on_bucket_ready();
  // After the last backward has been enqueued: does what the mode left for after the backward, and
  // enqueues the gradient-norm computation. Returns at once unless clipping needs the norm on the host.
  void finish_step();
  // The global norm of the averaged gradients of the last finished step (waits for it).
  float last_grad_norm();
  // Make the compute stream wait for every pending all-gather (before reading all parameters).
  void wait_for_all_params();

  // This rank's shard state, concatenated over buckets (for checkpoints). Synchronous.
  size_t shard_elements() const { return shard_elements_; }
  void download_state(std::vector<float>& master, std::vector<float>& m, std::vector<float>& v);
  void upload_state(const std::vector<float>& master, const std::vector<float>& m, const std::vector<float>& v);
  // Bytes of optimizer state (master + m + v) held by this rank.
  size_t state_bytes() const { return 3 * shard_elements_ * sizeof(float); }

 private:
  struct Segment {  // a run of one bucket's shard with one weight-decay setting
    size_t begin, length;
    bool decay;
  };
  void reduce_scatter_bucket(int bucket);
  void update_bucket(int bucket, float grad_scale);
  void all_gather_bucket(int bucket);
  void mark_params_ready(int bucket);  // comm stream: record param_ready[bucket] for the next forward
  void add_to_grad_norm(int bucket, bool first);  // comm stream: squared sum of the bucket's reduced shard
  void finish_grad_norm();                         // comm stream: sum over ranks, copy to host, norm_ready
  void enqueue_grad_norm();                        // both, over every bucket in ready order
  // Updates and all-gathers follow each reduce-scatter at once (full overlap, no clipping to wait for).
  bool streamed() const { return settings_.overlap == OverlapMode::full && settings_.grad_clip <= 0.0f; }
  size_t shard_begin(int bucket) const;  // element index in the full buffer where this rank's shard starts

  GPT2& model_;
  CommContext& comm_;
  OptimizerSettings settings_;
  Tracer* tracer_;
  cudaStream_t compute_stream_;
  cudaStream_t comm_stream_;
  std::vector<std::vector<Segment>> segments_;  // per bucket
  std::vector<size_t> state_offset_;            // per bucket: offset of its shard in master/m/v
  size_t shard_elements_ = 0;
  float *master_ = nullptr, *adam_m_ = nullptr, *adam_v_ = nullptr;
  float* norm_squared_ = nullptr;     // device scalar
  float* norm_scratch_ = nullptr;
  size_t norm_scratch_floats_ = 0;
  float* norm_host_ = nullptr;        // pinned
  std::vector<cudaEvent_t> grad_ready_, param_ready_;
  std::vector<bool> param_pending_;
  std::vector<int> ready_order_;      // buckets in the order the backward reported them this step
  cudaEvent_t backward_done_ = nullptr, norm_ready_ = nullptr;
  int step_ = 0;
  float lr_ = 0.0f;
};

}  // namespace llmc
