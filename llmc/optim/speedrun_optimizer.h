// The speedrun records' optimizers (docs/optimizers.md) behind the BucketOptimizer hooks: NorMuon on the block
// matrices (and #44's gates), dealt to owner ranks by plan_muon_owners, and the sharded Adam on the rest,
// stepping on odd steps with two steps of gradients; the 2025-10-31 or the 2026-07-17 recipe (tensor roles,
// rates, schedule, the latter's tied head). Every collective starts from the backward's bucket hook; the
// updates run on their own stream.
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "llmc/cuda/int_list_upload.h"
#include "llmc/dist/collective_watch.h"
#include "llmc/kernels/adam_sharded_settings.h"
#include "llmc/kernels/matmul_context.h"
#include "llmc/optim/bucket_optimizer.h"
#include "llmc/optim/grad_norm_readback.h"
#include "llmc/optim/muon_owners.h"
#include "llmc/optim/normuon.h"
#include "llmc/optim/overlap_mode.h"
#include "llmc/optim/param_ready_gate.h"
#include "llmc/optim/row_exchange.h"
#include "llmc/optim/speedrun_state_plan.h"
#include "llmc/optim/step_values.h"
#include "llmc/optim/tensor_roles.h"
#include "llmc/schedule/modded89_schedule.h"
#include "llmc/schedule/speedrun_schedule.h"

namespace llmc {

class CommContext;
class Tracer;

// The record's constants. The loop's lr (begin_step) multiplies both base lrs: the recipe passes
// --lr 1.0 times the schedule's multiplier.
// The per-tensor lr multipliers and Adam constants are the recipe's tensor roles (llmc/optim/tensor_roles.h).
struct SpeedrunOptimizerSettings {
  double muon_lr = 0.03;
  NorMuonSettings normuon;        // weight decay 1.2 (cautious), beta2 0.95
  double adam_lr = 0.008;
  SpeedrunSchedule schedule = SpeedrunSchedule::record();  // Muon momentum and the Adam steps, by 0-based step
  MuonOwnerOptions owners;
  OverlapMode overlap = OverlapMode::kFull;
  // A model's row-sparse gradient alone in its bucket (TrainableModel::row_sparse_grads) on several ranks: the
  // rows the ranks touched, sent to their owners, or the bucket's reduce-scatter.
  RowExchange row_exchange = RowExchange::kSparse;
  SpeedrunRecipe recipe = SpeedrunRecipe::k2025_10_31;  // the tensor roles (llmc/optim/tensor_roles.h)
  // The 2026-07-17 recipe's (modded89_optimizer_settings): its schedule (NorMuon momentum, Adam steps, the
  // untie).
  Modded89Schedule modded89_schedule = Modded89Schedule::record();
};

// The 2026-07-17 record's optimizer (SPEEDRUN89.md section 5) on `schedule`: NorMuon lr 0.023, weight decay
// 1.2, beta2 0.9 over the banks; Adam lr 0.008 with the table's rates; the tie until schedule.untie_step().
SpeedrunOptimizerSettings modded89_optimizer_settings(const Modded89Schedule& schedule);

class SpeedrunOptimizer : public BucketOptimizer {
 public:
  // The model's layout must be one of settings.recipe's family (speedrun_tensor_roles: every tensor's role).
  SpeedrunOptimizer(TrainableModel& model, CommContext& comm, const SpeedrunOptimizerSettings& settings,
                    Tracer* tracer = nullptr);
  ~SpeedrunOptimizer() override;
  SpeedrunOptimizer(const SpeedrunOptimizer&) = delete;
  SpeedrunOptimizer& operator=(const SpeedrunOptimizer&) = delete;

  // fp32 masters of the block matrices this rank updates, from the full host parameter buffer (layout
  // order; every rank the same values); momentum, variance and Adam moments start at zero.
  void init_master(const std::vector<float>& host_params) override;

  BucketHook before_bucket_use() override;
  void before_first_backward() override;
  void begin_step(int step, float lr) override;
  BucketHook on_bucket_ready() override;
  void finish_step() override;
  // The global norm of the averaged gradients the optimizers used in step `step` (the last or the one
  // before; waits for it): the Muon tensors' every step, the Adam tensors' (the two steps' sum) on the
  // steps Adam runs; on the others Adam's gradients are not reduced and not counted.
  float grad_norm(int step) override;
  void wait_for_all_params() override;
  // Steps captured as CUDA graphs (BucketOptimizer): the shape is whether Adam runs, the tie, the untie and the
  // step's parity (the read-back and values slots). Not with the sparse bigram exchange (why_not_captured).
  std::string step_shape(int step) const override;
  std::string why_not_captured() const override;
  void replay_step(int step, float lr) override;
  void after_graph_launch() override;

  // Checkpoints (see BucketOptimizer): save_state is download_state; restore_state uploads this rank's arrays
  // (upload_state) or, for another world size, every old rank's re-sharded (upload_resharded_state), and
  // names the state file when they do not fit.
  StateOptimizer state_kind() const override { return StateOptimizer::kSpeedrun; }
  std::vector<NamedStateArray> save_state(int step) override { return download_state(step); }
  void restore_state(const CheckpointReader& checkpoint) override;
  // This rank's state after step `step` (the last one begun; waits for its updates), for a checkpoint:
  // per bucket the fp32 masters, momentum and variance of each batch of matrices it updates, the Adam
  // moments of its shard and, after a step without Adam (the next one adds them), the saved local Adam
  // gradients. The Adam step count and the schedules follow from the step.
  std::vector<NamedStateArray> download_state(int step);
  // Restores what download_state(step) returned on the same rank of a run of the same model and world
  // size (after init_master). Throws std::runtime_error naming the first array that is missing, extra or
  // of another size.
  void upload_state(const std::vector<NamedStateArray>& arrays, int step);
  // The same from the arrays every rank of a run with another world size wrote after step `step`
  // (old_rank_arrays[r]: rank r's), re-sharded by reshard_speedrun_state for this rank. Throws like it.
  void upload_resharded_state(const std::vector<std::vector<NamedStateArray>>& old_rank_arrays, int step);

  // Device bytes of optimizer state on this rank (masters, momentum, variance, Adam moments, saved gradients).
  size_t state_bytes() const override { return state_bytes_; }
  std::string unfinished_collective() const override { return watch_.first_unfinished(); }
  const MuonOwnerPlan& owner_plan() const { return rank_plan_.owners; }

 private:
  struct MuonBatch;     // a MuonBatchPlan and its buffers
  struct AdamSegment;   // an AdamSegmentPlan and its lr multiplier
  struct Runner;        // a NorMuonRunner and its workspace
  struct BucketPlan;
  struct StateBuffer;   // one array of the state, where it lives on the device

  std::vector<StateBuffer> state_buffers(int step) const;
  void allocate_batch(MuonBatch& batch);
  void build_muon();
  void build_adam();
  // Whether the state after step `step` holds the saved local Adam gradients (a step without Adam, whose
  // gradients the next step adds).
  bool adam_grads_saved_after(int step) const { return step >= 1 && !adam_steps_at(step - 1); }
  bool adam_steps_at(int step0) const;    // the recipe's schedule, 0-based step
  double muon_momentum(int step0) const;  // likewise
  // The 2026-07-17 recipe before its untie: the head absorbs the embedding's gradient on the Adam steps, and
  // the embedding is the head transposed after each of them.
  bool tied_adam_step() const;
  struct Tie;  // the tied pair's places
  // The arrays download_state(step) writes, by the plan.
  std::vector<StateArrayPlan> state_arrays(int step) const;
  bool adam_step() const { return adam_steps_at(step_ - 1); }
  bool capturing() const;  // the compute stream captures a step (a CUDA graph)
  void watch(const char* name, const std::string* what);  // after a collective on the comm stream
  void reduce_bucket(int bucket);  // comm stream
  void accumulate_adam_grads(int bucket);  // comm stream: the saved local Adam gradients (Adam steps)
  void reduce_and_chain(int bucket);       // the hook's work for a bucket in the rs and full modes
  void tie_head_grad();                    // comm stream: the head's gradient += the embedding's, transposed
  void untie_moments();                    // comm stream: the embedding's moments = the head's, transposed
  void reduce_muon_span(const MuonSpan& span);
  void update_bucket(int bucket);  // update stream
  void share_bucket(int bucket);   // comm stream, then param_ready[bucket]
  // The step's kernel arguments (rates, momentum, Adam's step sizes) into `slot`, in DeviceStepValues order:
  // each Muon batch's NorMuonStepValues, each Adam segment's AdamStepValues (NaN on steps without Adam).
  void fill_step_values(float* slot) const;
  void set_step(const char* caller, int step, float lr);  // begin_step's and replay_step's host part
  void update_muon(const MuonBatch& batch);
  void update_adam(int bucket);  // this rank's shard of the bucket's Adam tensors
  void enqueue_grad_norm();  // comm stream, after every bucket's reduce
  size_t shard_begin(int bucket) const;
  template <class T> T* allocate(size_t count);

  TrainableModel& model_;
  CommContext& comm_;
  SpeedrunOptimizerSettings settings_;
  Tracer* tracer_;
  cudaStream_t compute_stream_, comm_stream_, update_stream_ = nullptr;
  MatmulContext matmul_;
  std::vector<TensorRole> roles_;  // one per layout tensor: the recipe's (speedrun_tensor_roles)
  SpeedrunRankPlan rank_plan_;  // never changes after construction: buckets_[b].spec points into it
  std::vector<BucketPlan> buckets_;
  std::vector<std::unique_ptr<Runner>> runners_;
  std::vector<void*> allocations_;
  size_t state_bytes_ = 0;
  std::vector<cudaEvent_t> grad_ready_, reduced_, updated_;
  cudaEvent_t backward_done_ = nullptr, step_done_ = nullptr;
  cudaEvent_t capture_join_ = nullptr;  // a captured step's end: the optimizer's streams joined into the compute one
  cudaEvent_t graph_launched_ = nullptr;  // after_graph_launch: the compute stream's work so far
  GradNormReadback norm_readback_;
  float* norm_squared_ = nullptr;                   // device
  float* norm_scratch_ = nullptr;
  size_t norm_scratch_floats_ = 0;
  bool step_done_pending_ = false;
  std::vector<int> ready_order_;
  std::vector<std::string> bucket_labels_;  // "bucket 3 (layer 2)", for the watch
  const std::string norm_label_ = "the gradient norm";
  CollectiveWatch watch_;
  // The watch's ids of the collectives captured for each optimizer step shape, in order, and how many the capture
  // under way has made.
  std::map<std::string, std::vector<int>> captured_watch_;
  size_t captured_watched_ = 0;
  ParamReadyGate params_ready_;  // per bucket: its parameters of the last update are in place
  int last_unshared_ = -1;  // full overlap: the bucket whose share follows the next bucket's reduce
  int step_ = 0;
  float lr_ = 0.0f;
  bool master_ready_ = false;
  // The model's fp32 parameters (the scalars): Adam updates them there, in fp32 as the record does, and
  // writes their floatX slots a rounded copy; with several ranks each rank's share reaches the others by an
  // all-reduce of the vector with every value it does not update zeroed (x + 0 is exact).
  Fp32Params fp32_params_;
  void update_fp32_adam(const AdamSegment& segment, const floatX* grad, const BucketPlan& plan);
  std::unique_ptr<DeviceStepValues> step_values_;  // what the update kernels read of the step (begin_step)
  std::unique_ptr<Tie> tie_;  // the 2026-07-17 recipe only
  bool head_deferred_ = false;  // a tied Adam step's head bucket waits for the embeddings' gradient
  std::vector<bool> accumulated_;  // per bucket: this step's saved Adam gradients added
  const std::string untie_label_ = "the untie's moment gather";
  void share_fp32_params(int bucket);  // comm stream
  struct SparseRows;  // the row-sparse bucket's exchange and its buffers (several ranks, row_exchange kSparse)
  std::unique_ptr<SparseRows> sparse_;
  struct SavedRows;  // per row-sparse Adam tensor (TrainableModel::row_sparse_grads): its saved rows
  std::vector<SavedRows> saved_rows_;
  std::unique_ptr<IntListUpload> row_upload_;  // their row lists, a slot per tensor (comm stream)
  SavedRows* saved_rows_at(size_t offset);     // the row-sparse tensor at layout offset `offset`, or null
  void build_saved_rows();
  void save_adam_grads(int bucket);  // comm stream: the step without Adam's local gradients, kept
  struct AdamTensorGrads;
  std::vector<AdamTensorGrads> bucket_adam_grads(int bucket);
  void build_sparse_rows();
  void exchange_sparse_rows(int bucket);  // comm stream: the Adam step's reduce of the row-sparse bucket
};

}  // namespace llmc
