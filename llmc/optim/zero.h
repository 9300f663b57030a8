// ZeRO-1 sharded AdamW with the gradient communication hidden under the backward pass. Each rank owns
// an equal contiguous shard of every bucket and keeps fp32 master weights and AdamW moments for its
// shards only. As the backward reports each bucket final, the high-priority communication stream
// reduce-scatters it (mean) and, in the `full` mode, updates the shard and all-gathers the bucket
// right away; the next forward waits per bucket, not for the whole model.
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "llmc/dist/collective_watch.h"
#include "llmc/family/trainable_model.h"
#include "llmc/kernels/adamw_settings.h"
#include "llmc/optim/bucket_optimizer.h"
#include "llmc/optim/grad_norm_readback.h"
#include "llmc/optim/overlap_mode.h"
#include "llmc/optim/param_ready_gate.h"

namespace llmc {

class CommContext;
class Tracer;

struct OptimizerSettings {
  AdamWSettings adamw;     // weight decay on 2-D tensors only
  float grad_clip = 0.0f;  // global-norm clipping threshold; 0 = off
  OverlapMode overlap = OverlapMode::kFull;
};

class ZeroOptimizer : public BucketOptimizer {
 public:
  ZeroOptimizer(TrainableModel& model, CommContext& comm, const OptimizerSettings& settings,
                Tracer* tracer = nullptr);
  ~ZeroOptimizer() override;
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  // fp32 master weights of this rank's shards from the full host parameter buffer (layout order); the
  // moments start at zero.
  void init_master(const std::vector<float>& host_params) override;

  // The step (see BucketOptimizer). Nothing here waits on the host: with clipping, the factor is computed and
  // applied on the device.
  BucketHook before_bucket_use() override;
  void before_first_backward() override;
  void begin_step(int step, float lr) override;
  BucketHook on_bucket_ready() override;
  void finish_step() override;
  float grad_norm(int step) override;
  void wait_for_all_params() override;

  // Checkpoints (see BucketOptimizer): the named arrays master, adam_m and adam_v (llmc/optim/zero_state.h).
  StateOptimizer state_kind() const override { return StateOptimizer::kZeroAdamW; }
  std::vector<NamedStateArray> save_state(int step) override;
  void restore_state(const CheckpointReader& checkpoint) override;
  // This rank's shard state, concatenated over buckets. Synchronous.
  void download_state(std::vector<float>& master, std::vector<float>& m, std::vector<float>& v);
  void upload_state(const std::vector<float>& master, const std::vector<float>& m, const std::vector<float>& v);
  // Bytes of optimizer state (master + m + v) held by this rank.
  size_t state_bytes() const override { return 3 * shard_elements_ * sizeof(float); }
  // For the watchdog, from any thread: the oldest collective of this rank that has not completed
  // ("reduce_scatter of bucket 3 (layer 2) in step 7, enqueued 2.9 s ago"), or "" (collective_watch.h).
  std::string unfinished_collective() const override { return watch_.first_unfinished(); }

 private:
  void reduce_scatter_bucket(int bucket);
  void report_shard_rows(int bucket);  // after the bucket's reduce-scatter
  void update_bucket(int bucket);  // with clipping, scaled by the factor enqueue_grad_norm() left
  void all_gather_bucket(int bucket);
  void mark_params_ready(int bucket);  // comm stream: record param_ready[bucket] for the next forward
  // comm stream: squared sum of every bucket's reduced shard (ready order), sum over ranks, the clipping
  // factor, the copy to the host, norm_ready of this step.
  void enqueue_grad_norm();
  // Updates and all-gathers follow each reduce-scatter at once (full overlap, no clipping to wait for).
  bool streamed() const { return settings_.overlap == OverlapMode::kFull && settings_.grad_clip <= 0.0f; }
  size_t shard_begin(int bucket) const;  // element index in the full buffer where this rank's shard starts

  TrainableModel& model_;
  CommContext& comm_;
  OptimizerSettings settings_;
  Tracer* tracer_;
  cudaStream_t compute_stream_;
  cudaStream_t comm_stream_;
  std::vector<AdamWSegments> segments_;  // per bucket: its shard's runs of one weight decay
  std::vector<size_t> state_offset_;     // per bucket: offset of its shard in master/m/v
  size_t shard_elements_ = 0;
  float *master_ = nullptr, *adam_m_ = nullptr, *adam_v_ = nullptr;
  float* norm_squared_ = nullptr;  // device: the squared norm, then the clipping factor
  float* norm_scratch_ = nullptr;
  size_t norm_scratch_floats_ = 0;
  std::vector<cudaEvent_t> grad_ready_;
  std::vector<int> ready_order_;  // buckets in the order the backward reported them this step
  cudaEvent_t backward_done_ = nullptr;
  GradNormReadback norm_readback_;
  bool norm_pending_ = false;                       // a norm the next backward must wait for
  std::vector<std::string> bucket_labels_;          // "bucket 3 (layer 2)", for the watch
  const std::string norm_label_ = "the gradient norm";
  CollectiveWatch watch_;
  ParamReadyGate params_ready_;  // per bucket: its parameters of the last update are in place
  int step_ = 0;
  float lr_ = 0.0f;
};

}  // namespace llmc
