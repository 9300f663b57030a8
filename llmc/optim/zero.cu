// ZeRO-1 AdamW and its overlap scheduler (see zero.h). Every cross-stream dependency is an event:
//   compute: ... backward of bucket b ... record grad_ready[b]
//   comm:    wait grad_ready[b]; reduce-scatter b; [update shard b; all-gather b; record param_ready[b]]
//   compute: (next forward) wait param_ready[b] before the first kernel that reads bucket b.
// The next step's first backward overwrites the gradients only after its forward has waited for
// param_ready of every bucket, which follows the bucket's reduce-scatter and update, and after
// before_first_backward() has made it wait for the gradient norm (norm_ready), the last reader.
// The gradient norm is one launch over the buckets' shards in the order they became ready, in every
// mode, so the modes give bitwise the same norm (and, with clipping, the same parameters). In the
// streamed mode it is queued after the last bucket's update and all-gather, so the next forward's first
// kernel (which waits for the embeddings' all-gather) does not wait for it; the host reads it for the log
// one step later (grad_norm(step)). With clipping the factor is computed on the device from the norm
// (clip_scale), and the updates read it there: no step waits on the host. (test/train/test_multirank.py
// drops the forward's waits in the emulation, LLMC_EMU_DROP_WAITS_ON_PRIORITY_STREAMS, and must see the
// results change.)
#include "llmc/optim/zero.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "llmc/dist/comm.h"
#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/adamw.cuh"
#include "llmc/kernels/global_norm.cuh"
#include "llmc/dist/trace.h"
#include "llmc/optim/zero_state.h"

namespace llmc {

ZeroOptimizer::ZeroOptimizer(TrainableModel& model, CommContext& comm, const OptimizerSettings& settings,
                             Tracer* tracer)
    : model_(model),
      comm_(comm),
      settings_(settings),
      tracer_(tracer),
      compute_stream_(model.stream()),
      comm_stream_(comm.comm_stream()),
      // A reduce-scatter and an all-gather per bucket and the norm's all-reduce per step, four steps' worth
      // (at most two are in flight: train_gpt2 enqueues a step before it reads the one before).
      watch_(comm.device(), 4 * (2 * model.layout().buckets.size() + 1)),
      params_ready_(model.layout().num_buckets()) {
  const ParamLayout& layout = model.layout();
  if (layout.world_size != comm.world_size())
    throw std::invalid_argument("ZeroOptimizer: the model's layout is for " + std::to_string(layout.world_size) +
                                " ranks, the communicator has " + std::to_string(comm.world_size()));
  const int num_buckets = layout.num_buckets();
  segments_.resize(num_buckets);
  for (int b = 0; b < num_buckets; b++)
    bucket_labels_.push_back("bucket " + std::to_string(b) + " (" + model.bucket_name(b) + ")");
  for (int b = 0; b < num_buckets; b++) {
    const ParamBucket& bucket = layout.buckets[b];
    state_offset_.push_back(shard_elements_);
    shard_elements_ += bucket.shard_size;
    // Weight-decay flag per element of the shard; gaps and padding (always zero) count as no decay.
    const size_t begin = shard_begin(b), end = begin + bucket.shard_size;
    AdamWSegments& segments = segments_[b];
    auto add = [&](size_t from, size_t to, bool decay) {
      from = std::max(from, begin);
      to = std::min(to, end);
      if (from >= to) return;
      const float weight_decay = decay ? settings_.adamw.weight_decay : 0.0f;
      const int last = segments.count - 1;
      if (last >= 0 && segments.weight_decay[last] == weight_decay &&
          segments.begin[last] + segments.length[last] == from - begin)
        segments.length[last] += to - from;
      else
        segments.add(from - begin, to - from, weight_decay);
    };
    size_t cursor = bucket.offset;
    for (int t = bucket.first_tensor; t < bucket.first_tensor + bucket.num_tensors; t++) {
      const TensorView& view = layout.tensors[t];
      add(cursor, view.offset, false);
      add(view.offset, view.offset + view.numel, view.weight_decay);
      cursor = view.offset + view.numel;
    }
    add(cursor, bucket.offset + bucket.padded_size, false);
  }
  CUDA_CHECK(cudaMalloc(&master_, shard_elements_ * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&adam_m_, shard_elements_ * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&adam_v_, shard_elements_ * sizeof(float)));
  CUDA_CHECK(cudaMemset(adam_m_, 0, shard_elements_ * sizeof(float)));
  CUDA_CHECK(cudaMemset(adam_v_, 0, shard_elements_ * sizeof(float)));
  norm_scratch_floats_ = global_norm_scratch_floats(shard_elements_);
  CUDA_CHECK(cudaMalloc(&norm_squared_, 2 * sizeof(float)));  // the squared norm, then the clipping factor
  CUDA_CHECK(cudaMalloc(&norm_scratch_, norm_scratch_floats_ * sizeof(float)));
  CUDA_CHECK(cudaMemset(norm_scratch_, 0, norm_scratch_floats_ * sizeof(float)));  // the fold's counters
  // cudaMemset is asynchronous, and the comm stream (non-blocking) is not ordered after the legacy
  // stream: without this wait the zeros would precede the first update there only through the compute
  // stream's events (it is a blocking stream today).
  CUDA_CHECK(cudaStreamSynchronize(nullptr));
  grad_ready_.resize(num_buckets);
  for (cudaEvent_t& event : grad_ready_) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&backward_done_, cudaEventDisableTiming));
}

ZeroOptimizer::~ZeroOptimizer() {
  CUDA_REPORT(cudaStreamSynchronize(comm_stream_));
  for (cudaEvent_t event : grad_ready_) CUDA_REPORT(cudaEventDestroy(event));
  CUDA_REPORT(cudaEventDestroy(backward_done_));
  for (float* buffer : {master_, adam_m_, adam_v_, norm_squared_, norm_scratch_}) CUDA_REPORT(cudaFree(buffer));
}

size_t ZeroOptimizer::shard_begin(int bucket) const {
  const ParamBucket& b = model_.layout().buckets[bucket];
  return b.offset + static_cast<size_t>(comm_.rank()) * b.shard_size;
}

void ZeroOptimizer::init_master(const std::vector<float>& host_params) {
  const ParamLayout& layout = model_.layout();
  if (host_params.size() != layout.total_size)
    throw std::invalid_argument("init_master: parameter buffer has the wrong size");
  std::vector<float> shard(shard_elements_);
  for (int b = 0; b < layout.num_buckets(); b++)
    std::copy_n(host_params.begin() + shard_begin(b), layout.buckets[b].shard_size, shard.begin() + state_offset_[b]);
  std::vector<float> zeros(shard_elements_, 0.0f);
  upload_state(shard, zeros, zeros);
}

void ZeroOptimizer::begin_step(int step, float lr) {
  step_ = step;
  lr_ = lr;
  ready_order_.clear();
}

void ZeroOptimizer::before_first_backward() {
  if (!norm_pending_) return;
  norm_readback_.make_wait(compute_stream_, step_);
  norm_pending_ = false;
}

BucketHook ZeroOptimizer::before_bucket_use() {
  return [this](int bucket) { params_ready_.wait(bucket, compute_stream_); };
}

void ZeroOptimizer::wait_for_all_params() { params_ready_.wait_all(compute_stream_); }

BucketHook ZeroOptimizer::on_bucket_ready() {
  return [this](int bucket) {
    ready_order_.push_back(bucket);
    if (settings_.overlap == OverlapMode::kNone) return;
    CUDA_CHECK(cudaEventRecord(grad_ready_[bucket], compute_stream_));
    CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, grad_ready_[bucket], 0));
    reduce_scatter_bucket(bucket);
    if (!streamed()) return;
    update_bucket(bucket);
    all_gather_bucket(bucket);
    mark_params_ready(bucket);
    // The norm (for the log only) after the last bucket's all-gather, off the next forward's path; the
    // next backward waits for it (before_first_backward) before overwriting the gradients it reads.
    if (static_cast<int>(ready_order_.size()) == model_.layout().num_buckets()) enqueue_grad_norm();
  };
}

void ZeroOptimizer::reduce_scatter_bucket(int bucket) {
  if (comm_.world_size() == 1) return;  // the mean over one rank is the gradient itself
  const ParamBucket& b = model_.layout().buckets[bucket];
  floatX* bucket_grads = model_.grads() + b.offset;
  traced(tracer_, comm_stream_, TraceTrack::kComm, "reduce_scatter",
         {{"bucket", bucket}, {"bytes", b.padded_size * sizeof(floatX)}}, [&] {
           comm_.reduce_scatter_avg(bucket_grads, bucket_grads + static_cast<size_t>(comm_.rank()) * b.shard_size,
                                    b.shard_size, comm_stream_);
         });
  watch_.enqueued("reduce_scatter", &bucket_labels_[bucket], step_, comm_stream_);
  report_shard_rows(bucket);
}

// The in-place reduce-scatter wrote this rank's shard of the bucket: the rows of the model's row-sparse tables it
// covers are the model's to zero again (TrainableModel::grad_rows_written).
void ZeroOptimizer::report_shard_rows(int bucket) {
  const ParamLayout& layout = model_.layout();
  const size_t shard = shard_begin(bucket), shard_end = shard + layout.buckets[bucket].shard_size;
  for (const RowSparseGrad& sparse : model_.row_sparse_grads()) {
    const TensorView& view = layout.tensors[static_cast<size_t>(sparse.tensor)];
    if (view.bucket != bucket || view.offset + view.numel <= shard || shard_end <= view.offset) continue;
    const size_t columns = view.shape[1];
    const size_t first = (std::max(shard, view.offset) - view.offset) / columns,
                 end = (std::min(shard_end, view.offset + view.numel) - view.offset + columns - 1) / columns;
    std::vector<int> rows(end - first);
    std::iota(rows.begin(), rows.end(), static_cast<int>(first));
    model_.grad_rows_written(sparse.tensor, rows);
  }
}

void ZeroOptimizer::update_bucket(int bucket) {
  const size_t begin = shard_begin(bucket);
  const size_t state = state_offset_[bucket];
  // With clipping, the factor the norm's kernels left on the device (finish_step enqueued them first).
  const float* grad_scale = settings_.grad_clip > 0.0f ? norm_squared_ + 1 : nullptr;
  traced(tracer_, comm_stream_, TraceTrack::kComm, "adamw_shard",
         {{"bucket", bucket}, {"elements", model_.layout().buckets[bucket].shard_size}}, [&] {
           adamw_update(model_.params() + begin, master_ + state, model_.grads() + begin, adam_m_ + state,
                        adam_v_ + state, segments_[bucket], step_, lr_, settings_.adamw, 1.0f, grad_scale,
                        comm_stream_);
         });
}

void ZeroOptimizer::all_gather_bucket(int bucket) {
  if (comm_.world_size() > 1) {
    const ParamBucket& b = model_.layout().buckets[bucket];
    floatX* bucket_params = model_.params() + b.offset;
    traced(tracer_, comm_stream_, TraceTrack::kComm, "all_gather",
           {{"bucket", bucket}, {"bytes", b.padded_size * sizeof(floatX)}}, [&] {
             comm_.all_gather(bucket_params + static_cast<size_t>(comm_.rank()) * b.shard_size, bucket_params,
                              b.shard_size, comm_stream_);
           });
    watch_.enqueued("all_gather", &bucket_labels_[bucket], step_, comm_stream_);
  }
}

void ZeroOptimizer::mark_params_ready(int bucket) {
  params_ready_.mark_ready(bucket, comm_stream_);
}

void ZeroOptimizer::enqueue_grad_norm() {
  // Squared sum of this rank's reduced shards of every bucket, in ready order, one launch; summed over ranks;
  // with clipping, the factor next to it; the squared norm to pinned host memory for grad_norm(step).
  NormSegments<floatX> shards;
  for (int bucket : ready_order_)
    shards.add(model_.grads() + shard_begin(bucket), model_.layout().buckets[bucket].shard_size);
  traced(tracer_, comm_stream_, TraceTrack::kComm, "grad_norm", {{"elements", shards.total()}}, [&] {
    global_norm_squared(norm_squared_, shards, /*accumulate=*/false, norm_scratch_, norm_scratch_floats_, comm_stream_);
  });
  if (comm_.world_size() > 1) {
    comm_.all_reduce_sum_float(norm_squared_, 1, comm_stream_);
    watch_.enqueued("all_reduce", &norm_label_, step_, comm_stream_);
  }
  if (settings_.grad_clip > 0.0f) clip_scale(norm_squared_ + 1, norm_squared_, settings_.grad_clip, comm_stream_);
  norm_readback_.enqueue(step_, norm_squared_, comm_stream_);
  norm_pending_ = true;
}

void ZeroOptimizer::finish_step() {
  const int num_buckets = model_.layout().num_buckets();
  if (static_cast<int>(ready_order_.size()) != num_buckets)
    throw std::logic_error("finish_step: the backward reported " + std::to_string(ready_order_.size()) + " of " +
                           std::to_string(num_buckets) + " buckets");
  if (settings_.overlap == OverlapMode::kNone) {
    CUDA_CHECK(cudaEventRecord(backward_done_, compute_stream_));
    CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, backward_done_, 0));
    for (int bucket : ready_order_) reduce_scatter_bucket(bucket);
  }
  if (streamed()) return;  // updates, all-gathers and the norm were enqueued as the buckets became ready
  enqueue_grad_norm();  // first: the updates read its clipping factor
  for (int bucket : ready_order_) {
    update_bucket(bucket);
    all_gather_bucket(bucket);
    mark_params_ready(bucket);
  }
}

float ZeroOptimizer::grad_norm(int step) { return norm_readback_.read(step, step_); }

void ZeroOptimizer::download_state(std::vector<float>& master, std::vector<float>& m, std::vector<float>& v) {
  CUDA_CHECK(cudaStreamSynchronize(comm_stream_));
  for (auto [host, device] : {std::pair{&master, master_}, std::pair{&m, adam_m_}, std::pair{&v, adam_v_}}) {
    host->resize(shard_elements_);
    CUDA_CHECK(cudaMemcpy(host->data(), device, shard_elements_ * sizeof(float), cudaMemcpyDeviceToHost));
  }
}

void ZeroOptimizer::upload_state(const std::vector<float>& master, const std::vector<float>& m,
                                 const std::vector<float>& v) {
  for (auto [host, device] : {std::pair{&master, master_}, std::pair{&m, adam_m_}, std::pair{&v, adam_v_}}) {
    if (host->size() != shard_elements_)
      throw std::invalid_argument("optimizer state has " + std::to_string(host->size()) + " elements, this rank's "
                                  "shards have " + std::to_string(shard_elements_));
    CUDA_CHECK(cudaMemcpy(device, host->data(), shard_elements_ * sizeof(float), cudaMemcpyHostToDevice));
  }
  // From pageable memory cudaMemcpy returns once the data is staged, before the device copy is done, and
  // the (non-blocking) comm stream is not ordered after the legacy stream: this wait orders the state
  // before the updates, instead of the compute stream's events (it is a blocking stream today).
  CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

std::vector<NamedStateArray> ZeroOptimizer::save_state(int step) {
  (void)step;  // the state is the same whatever the step
  ZeroShards shards;
  download_state(shards.master, shards.adam_m, shards.adam_v);
  return zero_state_arrays(shards);
}

void ZeroOptimizer::restore_state(const CheckpointReader& checkpoint) {
  const ZeroShards shards = read_zero_state(checkpoint, model_.layout());
  upload_state(shards.master, shards.adam_m, shards.adam_v);
}

}  // namespace llmc
