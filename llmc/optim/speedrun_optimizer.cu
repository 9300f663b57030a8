// SpeedrunOptimizer (see speedrun_optimizer.h) and its overlap schedule. Per bucket b, as events:
//   compute: ... backward of bucket b ... record grad_ready[b]
//   comm:    wait grad_ready[b]; reduce(b): Adam buckets: on even steps save the local Adam gradients, on odd
//            steps add the saved ones and reduce-scatter (mean) the bucket into this rank's shard buffer;
//            each Muon unit's gradient reduced (mean) in place to its owner, the replicated gates'
//            all-reduced; record reduced[b]
//   update:  wait reduced[b]; NorMuon of the Muon matrices this rank owns or replicates (fp32 masters for
//            the block matrices, the bf16 copy written back), Adam on the shard (odd steps); record updated[b]
//   comm:    wait updated[b]; share(b): broadcast each owned unit from its owner, all-gather the Adam
//            bucket (odd steps); record param_ready[b]
//   compute: (next forward) wait param_ready[b] before the first kernel that reads bucket b.
// --overlap none enqueues all of it after the backward, rs the reduces from the hooks and the rest after
// the backward, full everything from the hooks (share(b) right after the next bucket's reduce, so that the
// comm stream does not wait for b's update before reducing the next bucket). Every mode runs the same
// kernels on the same data in the same batches: the parameters are bitwise the same.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <numeric>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "llmc/base/file_io.h"
#include "llmc/cuda/cuda_common.h"
#include "llmc/dist/comm.h"
#include "llmc/dist/trace.h"
#include "llmc/kernels/adam_sharded.cuh"
#include "llmc/kernels/convert.cuh"
#include "llmc/kernels/global_norm.cuh"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/sparse_rows.cuh"
#include "llmc/kernels/tied_transpose.cuh"
#include "llmc/model/modded44/speedrun_layout.h"
#include "llmc/model/modded89/modded89_layout.h"
#include "llmc/optim/modded89_param_table.h"
#include "llmc/optim/sparse_row_exchange.h"
#include "llmc/optim/speedrun_optimizer.h"
#include "llmc/optim/speedrun_state_plan.h"

namespace llmc {

namespace {

// NorMuonRunner's view of a Muon batch whose buffers hold P values (float: block matrices through their
// fp32 masters, reading the model's floatX gradients and writing its floatX parameters as copies; floatX: the
// gates in place).
template <typename P, typename Batch>
NorMuonBatch<P, floatX> normuon_view(const Batch& batch) {
  NorMuonBatch<P, floatX> view;
  view.count = batch.count;
  view.params = static_cast<P* const*>(batch.params_table);
  view.grads = static_cast<const floatX* const*>(batch.grads_table);
  view.momentum = static_cast<P*>(batch.momentum);
  view.variance = static_cast<P*>(batch.variance);
  view.lr_multipliers = batch.lr_multipliers;
  view.copies = static_cast<floatX* const*>(batch.copies_table);
  return view;
}

// NorMuonRunner::step_bank's view of a batch of the 2026-07-17 banks.
template <typename Batch>
NorMuonBankBatch bank_view(const Batch& batch) {
  NorMuonBankBatch view;
  view.count = batch.count;
  view.params = static_cast<floatX* const*>(batch.params_table);
  view.grads = static_cast<const floatX* const*>(batch.grads_table);
  view.momentum = static_cast<float*>(batch.momentum);
  view.variance = static_cast<float*>(batch.variance);
  view.mantissas = batch.mantissas;
  view.lr_multipliers = batch.lr_multipliers;
  return view;
}

}  // namespace

SpeedrunOptimizerSettings modded89_optimizer_settings(const Modded89Schedule& schedule) {
  SpeedrunOptimizerSettings settings;
  settings.recipe = SpeedrunRecipe::k2026_07_17;
  settings.muon_lr = kModded89NorMuonLr;
  settings.normuon = NorMuonSettings::record_2026();
  settings.adam_lr = kModded89AdamLr;
  settings.modded89_schedule = schedule;
  return settings;
}

// The tied embed/head pair of the 2026-07-17 recipe: the head [C, V] (stored in, out) and the embedding [V, C],
// their tensors and buckets, and the untie's two [C V] fp32 buffers (allocated at the untie).
struct SpeedrunOptimizer::Tie {
  int head_tensor = -1, embed_tensor = -1, head_bucket = -1, embed_bucket = -1;
  int C = 0, V = 0;
  float* gathered = nullptr;    // the head's moment, every rank's shard
  float* transposed = nullptr;  // it transposed, [V, C]
};

// The row-sparse bucket (the bigram table alone): on Adam steps its reduce is the sparse row exchange of the
// rows touched over the step pair (this step's and the saved step's); its buffers grow to the largest exchange
// yet and are reused once the previous exchange is done.
struct SpeedrunOptimizer::SparseRows {
  int bucket = -1, tensor = -1;
  SparseRowTable table;
  int* staged_ints = nullptr;    // pinned: the plan's lists for the copy to device_ints (kept until `done`)
  int* device_ints = nullptr;
  floatX *send = nullptr, *received = nullptr;
  size_t staged_capacity = 0, ints_capacity = 0, send_capacity = 0, received_capacity = 0;  // elements
  cudaEvent_t done = nullptr;  // the last exchange's copies, transfers and sums are done
};

// A row-sparse Adam tensor's saved gradients: which rows may be nonzero there, none (kClear), the listed ones
// (kRows: a step saved those) or any (kDense: a dense save, a restore, a captured or replayed step); and on an
// Adam step, which rows of the model's gradients the two steps' sum may occupy (every row with all_summed).
struct SpeedrunOptimizer::SavedRows {
  enum class State { kClear, kRows, kDense };
  int tensor = -1, slot = -1;  // slot: its lists' in row_upload_
  State state = State::kClear;
  std::vector<int> rows;
  bool all_summed = true;
  std::vector<int> summed;
};

struct SpeedrunOptimizer::Runner {
  void* workspace = nullptr;
  std::unique_ptr<NorMuonRunner> runner;
};

// The plan's batch (llmc/optim/speedrun_state_plan.h) and its device buffers.
struct SpeedrunOptimizer::MuonBatch : MuonBatchPlan {
  int runner = 0;
  float* master = nullptr;          // fp32 masters: [count, rows, cols]
  uint16_t* mantissas = nullptr;    // mantissa storage (bf16 builds): [count, rows, cols]
  void* params_table = nullptr;     // device P* [count]
  void* grads_table = nullptr;      // device const floatX* [count]: the model's gradients
  void* copies_table = nullptr;     // fp32 masters: device floatX* [count], the model's parameters; else null
  void* momentum = nullptr;         // P [count, rows, cols]
  void* variance = nullptr;         // P [count, stat]
  size_t momentum_bytes = 0, variance_bytes = 0;
  float* lr_multipliers = nullptr;  // device [count]
  size_t values_at = 0;             // its NorMuonStepValues in step_values_
};

struct SpeedrunOptimizer::AdamSegment : AdamSegmentPlan {
  double lr_multiplier = 1.0;
  AdamShardedSettings adam;  // the tensor's role's
  size_t values_at = 0;      // its AdamStepValues in step_values_
};

// A bucket's plan (rank_plan_: its Muon spans, Adam tensors and moment sizes) with this rank's buffers.
struct SpeedrunOptimizer::BucketPlan {
  const SpeedrunBucketPlan* spec = nullptr;  // rank_plan_.buckets[bucket]
  std::vector<MuonBatch> batches;
  std::vector<AdamSegment> adam_segments;
  floatX* adam_grad_shard = nullptr;  // world > 1: the reduce-scatter's output
  floatX* saved_grads = nullptr;      // [padded_size]: the even step's local Adam gradients
  floatX *adam_m = nullptr, *adam_v = nullptr;     // spec->adam_state_x elements
  float *adam_m32 = nullptr, *adam_v32 = nullptr;  // spec->adam_state_32 elements
  bool has_sparse_rows = false;                    // it holds a row-sparse Adam tensor (saved_rows_)
  const std::vector<MuonSpan>& muon_spans() const { return spec->muon_spans; }
  bool has_adam() const { return spec->has_adam(); }
};

template <class T>
T* SpeedrunOptimizer::allocate(size_t count) {
  void* pointer = nullptr;
  const size_t bytes = std::max<size_t>(count, 1) * sizeof(T);
  CUDA_CHECK(cudaMalloc(&pointer, bytes));
  CUDA_CHECK(cudaMemset(pointer, 0, bytes));
  allocations_.push_back(pointer);
  return static_cast<T*>(pointer);
}

SpeedrunOptimizer::SpeedrunOptimizer(TrainableModel& model, CommContext& comm,
                                     const SpeedrunOptimizerSettings& settings, Tracer* tracer)
    : model_(model),
      comm_(comm),
      settings_(settings),
      tracer_(tracer),
      compute_stream_(model.stream()),
      comm_stream_(comm.comm_stream()),
      // Per step and bucket at most a reduce-scatter, a group of Muon reduces, a group of broadcasts and an
      // all-gather, and the norm's and the fp32 parameters' all-reduces; four steps' worth (at most two are
      // in flight).
      watch_(comm.device(), 4 * (4 * model.layout().buckets.size() + 2)),
      params_ready_(model.layout().num_buckets()) {
  const ParamLayout& layout = model.layout();
  for (int b = 0; b < layout.num_buckets(); b++)
    bucket_labels_.push_back("bucket " + std::to_string(b) + " (" + model.bucket_name(b) + ")");
  if (layout.world_size != comm.world_size())
    throw std::invalid_argument("SpeedrunOptimizer: the model's layout is for " + std::to_string(layout.world_size) +
                                " ranks, the communicator has " + std::to_string(comm.world_size()));
  if (settings_.recipe == SpeedrunRecipe::k2025_10_31) {
    settings_.schedule.validate();
  } else {
    settings_.modded89_schedule.validate();
    tie_ = std::make_unique<Tie>();
    for (int t = 0; t < static_cast<int>(layout.tensors.size()); t++) {
      const TensorView& view = layout.tensors[t];
      if (static_cast<Modded89Tensor>(view.kind) == Modded89Tensor::kHead) tie_->head_tensor = t;
      if (static_cast<Modded89Tensor>(view.kind) == Modded89Tensor::kEmbed) tie_->embed_tensor = t;
    }
    if (tie_->head_tensor < 0 || tie_->embed_tensor < 0)
      throw std::invalid_argument("SpeedrunOptimizer: the 2026-07-17 recipe needs a head and an embedding");
    const TensorView& head = layout.tensors[tie_->head_tensor];
    const TensorView& embed = layout.tensors[tie_->embed_tensor];
    tie_->head_bucket = head.bucket;
    tie_->embed_bucket = embed.bucket;
    tie_->C = static_cast<int>(head.shape[0]);
    tie_->V = static_cast<int>(head.shape[1]);
    if (embed.shape != std::vector<size_t>{head.shape[1], head.shape[0]} || head.bucket == embed.bucket)
      throw std::invalid_argument("SpeedrunOptimizer: the head must be the embedding's transpose, in another bucket");
  }
  int least_priority = 0, greatest_priority = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least_priority, &greatest_priority));
  CUDA_CHECK(cudaStreamCreateWithPriority(&update_stream_, cudaStreamNonBlocking, greatest_priority));
  fp32_params_ = model.take_fp32_params();
  if (fp32_params_.empty())
    throw std::invalid_argument("SpeedrunOptimizer: the model does not keep its scalars in fp32 (take_fp32_params)");
  roles_ = speedrun_tensor_roles(settings_.recipe, layout);
  rank_plan_ = plan_speedrun_rank(layout, roles_, comm.rank(), settings_.owners);
  buckets_.resize(layout.num_buckets());
  for (int b = 0; b < layout.num_buckets(); b++) buckets_[b].spec = &rank_plan_.buckets[b];
  build_muon();
  build_adam();
  build_saved_rows();
  build_sparse_rows();
  size_t step_values = 0;
  for (BucketPlan& plan : buckets_) {
    for (MuonBatch& batch : plan.batches) batch.values_at = std::exchange(step_values, step_values + 4);
    for (AdamSegment& segment : plan.adam_segments) segment.values_at = std::exchange(step_values, step_values + 2);
  }
  step_values_ = std::make_unique<DeviceStepValues>(step_values);
  const int num_buckets = layout.num_buckets();
  for (auto* events : {&grad_ready_, &reduced_, &updated_}) {
    events->resize(num_buckets);
    for (cudaEvent_t& event : *events) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  CUDA_CHECK(cudaEventCreateWithFlags(&backward_done_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&step_done_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&capture_join_, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&graph_launched_, cudaEventDisableTiming));
  size_t norm_elements = 0;  // the most a step's norm reads
  for (const BucketPlan& plan : buckets_) {
    for (const MuonSpan& span : plan.muon_spans()) norm_elements += span.length;
    for (const AdamSegment& segment : plan.adam_segments) norm_elements += segment.length;
  }
  norm_scratch_floats_ = global_norm_scratch_floats(norm_elements);
  norm_squared_ = allocate<float>(1);
  norm_scratch_ = allocate<float>(norm_scratch_floats_);  // zero: the fold's counters
  // The zeroed state (cudaMemset, legacy stream) before the first update on the non-blocking streams.
  CUDA_CHECK(cudaDeviceSynchronize());
}

SpeedrunOptimizer::~SpeedrunOptimizer() {
  CUDA_REPORT(cudaStreamSynchronize(comm_stream_));
  CUDA_REPORT(cudaStreamSynchronize(update_stream_));
  for (auto* events : {&grad_ready_, &reduced_, &updated_})
    for (cudaEvent_t event : *events) CUDA_REPORT(cudaEventDestroy(event));
  CUDA_REPORT(cudaEventDestroy(backward_done_));
  CUDA_REPORT(cudaEventDestroy(capture_join_));
  CUDA_REPORT(cudaEventDestroy(graph_launched_));
  CUDA_REPORT(cudaEventDestroy(step_done_));
  for (const auto& runner : runners_) CUDA_REPORT(cudaFree(runner->workspace));
  if (sparse_ != nullptr) {
    CUDA_REPORT(cudaEventDestroy(sparse_->done));
    CUDA_REPORT(cudaFreeHost(sparse_->staged_ints));
    for (void* pointer : {static_cast<void*>(sparse_->device_ints), static_cast<void*>(sparse_->send),
                          static_cast<void*>(sparse_->received)})
      CUDA_REPORT(cudaFree(pointer));
  }
  for (void* pointer : allocations_) CUDA_REPORT(cudaFree(pointer));
  CUDA_REPORT(cudaStreamDestroy(update_stream_));
}

size_t SpeedrunOptimizer::shard_begin(int bucket) const {
  const ParamBucket& b = model_.layout().buckets[bucket];
  return b.offset + static_cast<size_t>(comm_.rank()) * b.shard_size;
}

// A batch's momentum and variance buffers (zero), lr multipliers and pointer tables; for fp32 batches the
// masters (init_master fills them) and the widened gradients.
void SpeedrunOptimizer::allocate_batch(MuonBatch& batch) {
  const size_t matrix = static_cast<size_t>(batch.rows) * batch.cols;
  const size_t elements = batch.count * matrix;
  const size_t stat = batch.variance_elements();
  const size_t element_bytes = batch.fp32_buffers() ? sizeof(float) : sizeof(floatX);
  batch.momentum = allocate<char>(elements * element_bytes);
  batch.variance = allocate<char>(stat * element_bytes);
  batch.momentum_bytes = elements * element_bytes;
  batch.variance_bytes = stat * element_bytes;
  std::vector<float> lr_multipliers;
  for (size_t i = 0; i < batch.unit_offset.size(); i++)
    for (int m = 0; m < batch.unit_matrices[i]; m++)
      lr_multipliers.push_back(static_cast<float>(
          roles_[static_cast<size_t>(batch.unit_tensor[i])].lr_multiplier(batch.unit_first_matrix[i] + m)));
  batch.lr_multipliers = allocate<float>(batch.count);
  CUDA_CHECK(cudaMemcpy(batch.lr_multipliers, lr_multipliers.data(), batch.count * sizeof(float),
                        cudaMemcpyHostToDevice));
  state_bytes_ += (elements + stat) * element_bytes;
  std::vector<void*> params_table, grads_table, copies_table;
  if (batch.storage == MuonStorage::kMantissa && sizeof(floatX) == 2) {
    batch.mantissas = allocate<uint16_t>(elements);
    state_bytes_ += elements * sizeof(uint16_t);
  }
  if (batch.storage == MuonStorage::kFp32Master) {
    batch.master = allocate<float>(elements);
    state_bytes_ += elements * sizeof(float);
    for (int m = 0; m < batch.count; m++) params_table.push_back(batch.master + m * matrix);
  }
  for (size_t i = 0; i < batch.unit_offset.size(); i++)
    for (int m = 0; m < batch.unit_matrices[i]; m++) {
      floatX* param = model_.params() + batch.unit_offset[i] + m * matrix;
      (batch.storage == MuonStorage::kFp32Master ? copies_table : params_table).push_back(param);
      grads_table.push_back(model_.grads() + batch.unit_offset[i] + m * matrix);
    }
  const auto upload_table = [&](const std::vector<void*>& table, void** device) {
    *device = allocate<void*>(batch.count);
    CUDA_CHECK(cudaMemcpy(*device, table.data(), batch.count * sizeof(void*), cudaMemcpyHostToDevice));
  };
  upload_table(params_table, &batch.params_table);
  upload_table(grads_table, &batch.grads_table);
  if (!copies_table.empty()) upload_table(copies_table, &batch.copies_table);
}

// The plan's Muon batches per bucket with their buffers; one NorMuonRunner per shape, type and shape rules,
// sized for its largest batch.
void SpeedrunOptimizer::build_muon() {
  std::map<std::tuple<int, int, MuonStorage, bool, double>, int> runner_of;
  std::vector<int> runner_max;
  std::vector<const MuonBatchPlan*> runner_shape;
  for (BucketPlan& bucket : buckets_) {
    for (const MuonBatchPlan& batch_plan : bucket.spec->batches) {
      MuonBatch batch;
      static_cast<MuonBatchPlan&>(batch) = batch_plan;
      allocate_batch(batch);
      const auto key = std::make_tuple(batch.rows, batch.cols, batch.storage, batch.rules.variance_per_column,
                                       batch.rules.lr_scale);
      auto found = runner_of.find(key);
      if (found == runner_of.end()) {
        found = runner_of.emplace(key, static_cast<int>(runner_max.size())).first;
        runner_max.push_back(0);
        runner_shape.push_back(&batch_plan);
      }
      batch.runner = found->second;
      runner_max[batch.runner] = std::max(runner_max[batch.runner], batch.count);
      bucket.batches.push_back(std::move(batch));
    }
  }
  for (size_t r = 0; r < runner_max.size(); r++) {
    const MuonBatchPlan& shape = *runner_shape[r];
    auto runner = std::make_unique<Runner>();
    const size_t bytes =
        NorMuonRunner::workspace_bytes(shape.rows, shape.cols, shape.rules.variance_per_column, runner_max[r]);
    CUDA_CHECK(cudaMalloc(&runner->workspace, bytes));
    runner->runner = std::make_unique<NorMuonRunner>(shape.rows, shape.cols, shape.rules, runner_max[r],
                                                     runner->workspace, bytes, settings_.normuon);
    runners_.push_back(std::move(runner));
  }
}

// Both records step Adam on the odd 0-based steps (Modded89Schedule::adam_steps_at is the same rule).
bool SpeedrunOptimizer::adam_steps_at(int step0) const { return SpeedrunSchedule::adam_steps_at(step0); }

double SpeedrunOptimizer::muon_momentum(int step0) const {
  return settings_.recipe == SpeedrunRecipe::k2026_07_17 ? settings_.modded89_schedule.muon_momentum(step0)
                                                         : settings_.schedule.muon_momentum(step0);
}

bool SpeedrunOptimizer::tied_adam_step() const {
  return tie_ != nullptr && adam_step() && step_ - 1 <= settings_.modded89_schedule.untie_step();
}

// Per Adam bucket: the plan's segments with their lr multipliers, the moments, the saved gradients and the
// shard buffer of the reduce-scatter.
void SpeedrunOptimizer::build_adam() {
  const ParamLayout& layout = model_.layout();
  for (int b = 0; b < layout.num_buckets(); b++) {
    const ParamBucket& bucket = layout.buckets[b];
    BucketPlan& out = buckets_[b];
    const SpeedrunBucketPlan& from = *out.spec;
    for (const AdamSegmentPlan& segment_plan : from.adam_segments) {
      AdamSegment segment;
      static_cast<AdamSegmentPlan&>(segment) = segment_plan;
      const TensorRole& role = roles_[static_cast<size_t>(segment.tensor)];
      segment.lr_multiplier = role.lr_multiplier(0);
      segment.adam = role.adam;
      out.adam_segments.push_back(segment);
    }
    if (!out.has_adam()) continue;
    out.saved_grads = allocate<floatX>(bucket.padded_size);
    if (comm_.world_size() > 1) out.adam_grad_shard = allocate<floatX>(bucket.shard_size);
    out.adam_m = allocate<floatX>(from.adam_state_x);
    out.adam_v = allocate<floatX>(from.adam_state_x);
    out.adam_m32 = allocate<float>(from.adam_state_32);
    out.adam_v32 = allocate<float>(from.adam_state_32);
    state_bytes_ += bucket.padded_size * sizeof(floatX) + 2 * from.adam_state_x * sizeof(floatX) +
                    2 * from.adam_state_32 * sizeof(float);
  }
}

// The model's row-sparse Adam tensors: their saved gradients go and come back by rows (saved_grads starts zero).
void SpeedrunOptimizer::build_saved_rows() {
  const ParamLayout& layout = model_.layout();
  std::vector<size_t> capacities;
  for (const RowSparseGrad& sparse : model_.row_sparse_grads()) {
    const TensorView& view = layout.tensors[static_cast<size_t>(sparse.tensor)];
    if (view.group != ParamGroup::kAdam || view.shape.size() != 2) continue;
    SavedRows saved;
    saved.tensor = sparse.tensor;
    saved.slot = static_cast<int>(capacities.size());
    saved_rows_.push_back(saved);
    buckets_[static_cast<size_t>(view.bucket)].has_sparse_rows = true;
    capacities.push_back(view.shape[0]);
  }
  row_upload_ = std::make_unique<IntListUpload>(capacities, "SpeedrunOptimizer's saved rows");
}

SpeedrunOptimizer::SavedRows* SpeedrunOptimizer::saved_rows_at(size_t offset) {
  for (SavedRows& saved : saved_rows_)
    if (model_.layout().tensors[static_cast<size_t>(saved.tensor)].offset == offset) return &saved;
  return nullptr;
}

// The model's row-sparse tensor, when it is alone in its bucket and several ranks share the work.
void SpeedrunOptimizer::build_sparse_rows() {
  if (settings_.row_exchange != RowExchange::kSparse || comm_.world_size() == 1) return;
  const ParamLayout& layout = model_.layout();
  const auto alone = std::find_if(saved_rows_.begin(), saved_rows_.end(), [&](const SavedRows& saved) {
    const int bucket = layout.tensors[static_cast<size_t>(saved.tensor)].bucket;
    return layout.buckets[static_cast<size_t>(bucket)].num_tensors == 1;
  });
  if (alone == saved_rows_.end()) return;  // the others' buckets hold tensors that need the dense reduce
  const RowSparseGrad sparse{alone->tensor, {}};
  const TensorView& view = layout.tensors[static_cast<size_t>(sparse.tensor)];
  const ParamBucket& bucket = layout.buckets[static_cast<size_t>(view.bucket)];
  sparse_ = std::make_unique<SparseRows>();
  sparse_->bucket = view.bucket;
  sparse_->tensor = sparse.tensor;
  sparse_->table =
      SparseRowTable{view.shape[0], view.shape[1], view.offset - bucket.offset, bucket.shard_size, comm_.world_size()};
  CUDA_CHECK(cudaEventCreateWithFlags(&sparse_->done, cudaEventDisableTiming));
}

void SpeedrunOptimizer::init_master(const std::vector<float>& host_params) {
  if (host_params.size() != model_.layout().total_size)
    throw std::invalid_argument("init_master: parameter buffer has the wrong size");
  CUDA_CHECK(cudaStreamSynchronize(update_stream_));
  for (const BucketPlan& plan : buckets_)
    for (const MuonBatch& batch : plan.batches) {
      if (batch.storage != MuonStorage::kFp32Master) continue;
      const size_t matrix = static_cast<size_t>(batch.rows) * batch.cols;
      size_t at = 0;
      for (size_t i = 0; i < batch.unit_offset.size(); i++) {
        const size_t length = batch.unit_matrices[i] * matrix;
        CUDA_CHECK(cudaMemcpy(batch.master + at, host_params.data() + batch.unit_offset[i], length * sizeof(float),
                              cudaMemcpyHostToDevice));
        at += length;
      }
    }
  CUDA_CHECK(cudaMemcpy(fp32_params_.values, host_params.data() + fp32_params_.offset,
                        fp32_params_.count * sizeof(float), cudaMemcpyHostToDevice));
  // Pageable cudaMemcpy may return before the device copy is done; the update stream is non-blocking.
  CUDA_CHECK(cudaDeviceSynchronize());
  master_ready_ = true;
}

struct SpeedrunOptimizer::StateBuffer {
  std::string name;
  int element_bytes = 0;
  void* device = nullptr;
  size_t bytes = 0;
};

// The arrays of download_state in the plan's order (speedrun_state_arrays: a function of the model, the
// world size, this rank and the step's parity), with where each lives on the device.
std::vector<SpeedrunOptimizer::StateBuffer> SpeedrunOptimizer::state_buffers(int step) const {
  std::vector<StateBuffer> buffers;
  for (const StateArrayPlan& array : state_arrays(step)) {
    const BucketPlan& plan = buckets_[array.bucket];
    const MuonBatch* batch = array.batch >= 0 ? &plan.batches[array.batch] : nullptr;
    void* device = nullptr;
    switch (array.field) {
      case SpeedrunStateField::kMaster: device = batch->master; break;
      case SpeedrunStateField::kMomentum: device = batch->momentum; break;
      case SpeedrunStateField::kVariance: device = batch->variance; break;
      case SpeedrunStateField::kAdamM: device = plan.adam_m; break;
      case SpeedrunStateField::kAdamV: device = plan.adam_v; break;
      case SpeedrunStateField::kAdamM32: device = plan.adam_m32; break;
      case SpeedrunStateField::kAdamV32: device = plan.adam_v32; break;
      case SpeedrunStateField::kSavedGrads: device = plan.saved_grads; break;
      case SpeedrunStateField::kMantissa: device = batch->mantissas; break;
    }
    buffers.push_back({array.name, array.element_bytes, device, array.elements() * array.element_bytes});
  }
  return buffers;
}

std::vector<StateArrayPlan> SpeedrunOptimizer::state_arrays(int step) const {
  return speedrun_state_arrays(rank_plan_, model_.layout(), adam_grads_saved_after(step),
                               static_cast<int>(sizeof(floatX)));
}

std::vector<NamedStateArray> SpeedrunOptimizer::download_state(int step) {
  CUDA_CHECK(cudaStreamSynchronize(compute_stream_));  // a captured step's updates run on its graph's lanes
  CUDA_CHECK(cudaStreamSynchronize(comm_stream_));
  CUDA_CHECK(cudaStreamSynchronize(update_stream_));
  std::vector<NamedStateArray> arrays;
  for (const StateBuffer& buffer : state_buffers(step)) {
    NamedStateArray array{buffer.name, buffer.element_bytes, std::vector<char>(buffer.bytes)};
    CUDA_CHECK(cudaMemcpy(array.bytes.data(), buffer.device, buffer.bytes, cudaMemcpyDeviceToHost));
    arrays.push_back(std::move(array));
  }
  return arrays;
}

void SpeedrunOptimizer::upload_state(const std::vector<NamedStateArray>& arrays, int step) {
  if (!master_ready_) throw std::logic_error("SpeedrunOptimizer: upload_state before init_master");
  const std::vector<StateBuffer> buffers = state_buffers(step);
  auto mismatch = [&](const std::string& what) {
    throw std::runtime_error("the checkpoint's speedrun optimizer state does not fit this run (rank " +
                             std::to_string(comm_.rank()) + "): " + what);
  };
  for (size_t i = 0; i < std::max(buffers.size(), arrays.size()); i++) {
    if (i >= arrays.size()) mismatch("array " + buffers[i].name + " is missing");
    if (i >= buffers.size()) mismatch("array " + arrays[i].name + " is extra");
    if (arrays[i].name != buffers[i].name || arrays[i].element_bytes != buffers[i].element_bytes ||
        arrays[i].bytes.size() != buffers[i].bytes)
      mismatch("array " + std::to_string(i) + " is " + arrays[i].name + " of " + std::to_string(arrays[i].bytes.size()) +
               " bytes, this run expects " + buffers[i].name + " of " + std::to_string(buffers[i].bytes));
  }
  CUDA_CHECK(cudaStreamSynchronize(update_stream_));
  for (size_t i = 0; i < buffers.size(); i++)
    CUDA_CHECK(cudaMemcpy(buffers[i].device, arrays[i].bytes.data(), buffers[i].bytes, cudaMemcpyHostToDevice));
  // Pageable cudaMemcpy may return before the device copy is done; the update stream is non-blocking.
  CUDA_CHECK(cudaDeviceSynchronize());
  // The state keeps the saved gradients (after a step without Adam), not which rows they touched.
  for (SavedRows& saved : saved_rows_) saved.state = SavedRows::State::kDense;
}

void SpeedrunOptimizer::upload_resharded_state(const std::vector<std::vector<NamedStateArray>>& old_rank_arrays,
                                               int step) {
  const int old_world = static_cast<int>(old_rank_arrays.size());
  const ParamLayout old_layout = relayout(model_.layout(), old_world);
  std::vector<std::vector<StateArrayPlan>> old_plans;
  for (int rank = 0; rank < old_world; rank++)
    old_plans.push_back(speedrun_state_arrays(
        plan_speedrun_rank(old_layout, speedrun_tensor_roles(settings_.recipe, old_layout), rank, settings_.owners),
        old_layout, adam_grads_saved_after(step), static_cast<int>(sizeof(floatX))));
  upload_state(reshard_speedrun_state(old_rank_arrays, old_plans, state_arrays(step)), step);
}

void SpeedrunOptimizer::restore_state(const CheckpointReader& checkpoint) {
  const int step = static_cast<int>(checkpoint.written().step);
  try {
    if (checkpoint.old_world_size() == checkpoint.world_size()) {
      upload_state(checkpoint.arrays(checkpoint.rank()), step);
      return;
    }
    std::vector<std::vector<NamedStateArray>> old_rank_arrays;
    for (int old_rank = 0; old_rank < checkpoint.old_world_size(); old_rank++)
      old_rank_arrays.push_back(checkpoint.arrays(old_rank));
    upload_resharded_state(old_rank_arrays, step);
  } catch (const FileError&) {
    throw;
  } catch (const std::runtime_error& error) {
    throw FileError(checkpoint.state_path(checkpoint.rank()), error.what());
  }
}

// begin_step's and replay_step's host part: the step, its rate, and its values in their pinned slot.
void SpeedrunOptimizer::set_step(const char* caller, int step, float lr) {
  if (!master_ready_) throw std::logic_error(std::string("SpeedrunOptimizer: ") + caller + " before init_master");
  if (step < 1) throw std::invalid_argument("SpeedrunOptimizer: step " + std::to_string(step) + " < 1");
  step_ = step;
  lr_ = lr;
  fill_step_values(step_values_->slot(step));
}

void SpeedrunOptimizer::begin_step(int step, float lr) {
  set_step("begin_step", step, lr);
  // After the last step's updates, before this one's. A captured step's launch follows the whole step before it, and
  // its copy must be on a stream in the capture: the compute stream, which the updates follow.
  step_values_->upload(step, capturing() ? compute_stream_ : update_stream_);
  ready_order_.clear();
  captured_watched_ = 0;
  last_unshared_ = -1;
  head_deferred_ = false;
  accumulated_.assign(model_.layout().num_buckets(), false);
}

bool SpeedrunOptimizer::capturing() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(compute_stream_, &status));
  return status != cudaStreamCaptureStatusNone;
}

std::string SpeedrunOptimizer::why_not_captured() const {
  if (sparse_ != nullptr)
    return "the sparse bigram exchange's row counts are the host's, per step: pass --bigram-exchange dense";
  return "";
}

// After collective `name` of `what` on the comm stream: the watch's entry; inside a capture the graph's, which each
// replay of a step of this shape watches again (replay_step). Graphs of one optimizer shape (their models' shapes
// differ) make the same collectives in the same order: they share the entries.
void SpeedrunOptimizer::watch(const char* name, const std::string* what) {
  if (!capturing()) {
    watch_.enqueued(name, what, step_, comm_stream_);
    return;
  }
  std::vector<int>& ids = captured_watch_[step_shape(step_)];
  const size_t index = captured_watched_++;
  const int id = watch_.captured(name, what, comm_stream_, index < ids.size() ? ids[index] : -1);
  if (index == ids.size()) ids.push_back(id);
  watch_.relaunched({id}, step_);  // the capture's own launch follows
}

std::string SpeedrunOptimizer::step_shape(int step) const {
  if (!why_not_captured().empty()) return "";
  const bool adam = adam_steps_at(step - 1);
  const bool tied = tie_ != nullptr && adam && step - 1 <= settings_.modded89_schedule.untie_step();
  const bool untie = tie_ != nullptr && step - 1 == settings_.modded89_schedule.untie_step();
  return std::string("adam=") + (adam ? "1" : "0") + " tied=" + (tied ? "1" : "0") + " untie=" + (untie ? "1" : "0") +
         " parity=" + std::to_string(step % 2);
}

void SpeedrunOptimizer::replay_step(int step, float lr) {
  set_step("replay_step", step, lr);  // the captured copy from this parity's slot carries the values up
  for (SavedRows& saved : saved_rows_) saved.state = SavedRows::State::kDense;  // the graph saves and adds in full
  if (const auto found = captured_watch_.find(step_shape(step)); found != captured_watch_.end())
    watch_.relaunched(found->second, step);
}

// E.g. the next eager step's values copy on the update stream, which would otherwise overwrite the values the
// graph's last updates are still reading.
void SpeedrunOptimizer::after_graph_launch() {
  CUDA_CHECK(cudaEventRecord(graph_launched_, compute_stream_));
  for (cudaStream_t stream : {comm_stream_, update_stream_}) CUDA_CHECK(cudaStreamWaitEvent(stream, graph_launched_, 0));
}

// Inside a capture the launch is ordered after the step before by the caller (Trainer / step_graphs.h).
void SpeedrunOptimizer::before_first_backward() {
  if (!step_done_pending_ || capturing()) return;
  CUDA_CHECK(cudaStreamWaitEvent(compute_stream_, step_done_, 0));
  step_done_pending_ = false;
}

BucketHook SpeedrunOptimizer::before_bucket_use() {
  return [this](int bucket) {
    if (!capturing()) params_ready_.wait(bucket, compute_stream_);  // a capture's launch is ordered by its caller
  };
}

void SpeedrunOptimizer::wait_for_all_params() { params_ready_.wait_all(compute_stream_); }

// On a tied Adam step the head's bucket (final first) waits for the embeddings' (final last): its gradient
// absorbs the embedding's before it is reduced.
BucketHook SpeedrunOptimizer::on_bucket_ready() {
  return [this](int bucket) {
    ready_order_.push_back(bucket);
    if (settings_.overlap == OverlapMode::kNone) return;
    CUDA_CHECK(cudaEventRecord(grad_ready_[bucket], compute_stream_));
    CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, grad_ready_[bucket], 0));
    if (tied_adam_step() && bucket == tie_->head_bucket) {
      head_deferred_ = true;
      return;
    }
    if (head_deferred_ && bucket == tie_->embed_bucket) {
      tie_head_grad();
      reduce_and_chain(tie_->head_bucket);
      head_deferred_ = false;
    }
    reduce_and_chain(bucket);
  };
}

void SpeedrunOptimizer::reduce_and_chain(int bucket) {
  reduce_bucket(bucket);
  if (settings_.overlap != OverlapMode::kFull) return;
  update_bucket(bucket);
  if (last_unshared_ >= 0) share_bucket(last_unshared_);
  last_unshared_ = bucket;
}

namespace {

const std::vector<int>& rows_of(const std::vector<RowSparseGrad>& sparse, int tensor) {
  for (const RowSparseGrad& g : sparse)
    if (g.tensor == tensor) return g.rows;
  throw std::logic_error("SpeedrunOptimizer: the model no longer lists tensor " + std::to_string(tensor) +
                         " as row-sparse");
}

}  // namespace

// The bucket's Adam tensors: where each one's gradients and saved gradients are, and for a row-sparse one its
// saved rows' bookkeeping, the model's rows of this step and its row length.
struct SpeedrunOptimizer::AdamTensorGrads {
  floatX *grads = nullptr, *saved_grads = nullptr;
  size_t numel = 0;
  SavedRows* saved = nullptr;  // null: not row-sparse
  std::vector<int> rows;
  int columns = 0;
};

std::vector<SpeedrunOptimizer::AdamTensorGrads> SpeedrunOptimizer::bucket_adam_grads(int bucket) {
  const ParamLayout& layout = model_.layout();
  const BucketPlan& plan = buckets_[bucket];
  // The model's lists are read in place, not copied per bucket.
  const std::vector<RowSparseGrad>& current = plan.has_sparse_rows ? model_.row_sparse_grads() : no_row_sparse_grads();
  std::vector<AdamTensorGrads> tensors;
  for (const auto& [offset, numel] : plan.spec->adam_tensors) {
    AdamTensorGrads t;
    t.grads = model_.grads() + offset;
    t.saved_grads = plan.saved_grads + (offset - layout.buckets[bucket].offset);
    t.numel = numel;
    t.saved = saved_rows_at(offset);
    if (t.saved != nullptr) {
      t.rows = rows_of(current, t.saved->tensor);
      t.columns = static_cast<int>(layout.tensors[static_cast<size_t>(t.saved->tensor)].shape[1]);
    }
    tensors.push_back(std::move(t));
  }
  return tensors;
}

// Both steps' local gradients of the bucket's Adam tensors (this step's plus the saved one), once per step. A
// row-sparse tensor's saved rows are added and cleared (the saved gradients zero again), and the model told
// (TrainableModel::grad_rows_written); a capture adds everything and clears nothing (its replays' rows vary).
void SpeedrunOptimizer::accumulate_adam_grads(int bucket) {
  if (accumulated_[bucket]) return;
  accumulated_[bucket] = true;
  for (AdamTensorGrads& t : bucket_adam_grads(bucket)) {
    SavedRows* saved = t.saved;
    if (saved == nullptr) {
      add_into(t.grads, t.saved_grads, t.numel, comm_stream_);
      continue;
    }
    saved->all_summed = capturing() || saved->state == SavedRows::State::kDense;
    saved->summed.clear();
    if (saved->all_summed) {
      add_into(t.grads, t.saved_grads, t.numel, comm_stream_);
      model_.all_grad_rows_written(saved->tensor);
      if (!capturing()) memset_async(t.saved_grads, 0, t.numel * sizeof(floatX), comm_stream_);
      saved->state = capturing() ? SavedRows::State::kDense : SavedRows::State::kClear;
      continue;
    }
    if (saved->state == SavedRows::State::kRows) {
      add_rows_and_clear(t.grads, t.saved_grads, row_upload_->upload(saved->slot, saved->rows, comm_stream_),
                         static_cast<int>(saved->rows.size()), t.columns, comm_stream_);
      model_.grad_rows_written(saved->tensor, saved->rows);
    }
    std::set_union(saved->rows.begin(), saved->rows.end(), t.rows.begin(), t.rows.end(),
                   std::back_inserter(saved->summed));
    saved->rows.clear();
    saved->state = SavedRows::State::kClear;
  }
}

// On a step without Adam the next backward overwrites the model's gradients: the bucket's Adam gradients are
// kept, a row-sparse tensor's by its rows when its saved gradients are zero.
void SpeedrunOptimizer::save_adam_grads(int bucket) {
  for (AdamTensorGrads& t : bucket_adam_grads(bucket)) {
    SavedRows* saved = t.saved;
    if (saved == nullptr || capturing() || saved->state != SavedRows::State::kClear) {
      memcpy_async(t.saved_grads, t.grads, t.numel * sizeof(floatX), cudaMemcpyDeviceToDevice, comm_stream_);
      if (saved != nullptr) saved->state = SavedRows::State::kDense;
      continue;
    }
    saved->rows = std::move(t.rows);
    saved->state = SavedRows::State::kRows;
    copy_rows(t.saved_grads, t.grads, row_upload_->upload(saved->slot, saved->rows, comm_stream_),
              static_cast<int>(saved->rows.size()), t.columns, comm_stream_);
  }
}

// head_grad [C, V] += embed_grad^T, both accumulated over the step pair first (as the record's gradients are).
void SpeedrunOptimizer::tie_head_grad() {
  accumulate_adam_grads(tie_->embed_bucket);
  accumulate_adam_grads(tie_->head_bucket);
  const ParamLayout& layout = model_.layout();
  floatX* grads = model_.grads();
  traced(tracer_, comm_stream_, TraceTrack::kComm, "tie_head_grad", {{"bucket", tie_->head_bucket}}, [&] {
    transpose_add(grads + layout.tensors[tie_->head_tensor].offset, tie_->V,
                  grads + layout.tensors[tie_->embed_tensor].offset, tie_->C, tie_->V, tie_->C, comm_stream_);
  });
}

void SpeedrunOptimizer::reduce_bucket(int bucket) {
  const ParamBucket& b = model_.layout().buckets[bucket];
  BucketPlan& plan = buckets_[bucket];
  floatX* grads = model_.grads();
  const bool distributed = comm_.world_size() > 1;
  if (plan.has_adam()) {
    const bool sparse = sparse_ != nullptr && bucket == sparse_->bucket;
    if (!adam_step()) {
      save_adam_grads(bucket);
    } else {
      accumulate_adam_grads(bucket);
      if (sparse) {
        exchange_sparse_rows(bucket);
      } else if (distributed) {
        traced(tracer_, comm_stream_, TraceTrack::kComm, "reduce_scatter", {{"bucket", bucket}, {"bytes", b.padded_size * sizeof(floatX)}},
               [&] { comm_.reduce_scatter_avg(grads + b.offset, plan.adam_grad_shard, b.shard_size, comm_stream_); });
        watch("reduce_scatter", &bucket_labels_[bucket]);
      }
    }
  }
  if (distributed && !plan.muon_spans().empty()) {
    size_t bytes = 0;
    for (const MuonSpan& span : plan.muon_spans()) bytes += span.length * sizeof(floatX);
    traced(tracer_, comm_stream_, TraceTrack::kComm, "muon_reduce", {{"bucket", bucket}, {"bytes", bytes}}, [&] {
      comm_.group_start();
      for (const MuonSpan& span : plan.muon_spans()) reduce_muon_span(span);
      comm_.group_end();
    });
    watch("muon_reduce", &bucket_labels_[bucket]);
  }
  CUDA_CHECK(cudaEventRecord(reduced_[bucket], comm_stream_));
}

namespace {

// Every rank's list (all ranks call it with theirs): two host all-gathers, the lengths, then the lists padded to
// the longest.
std::vector<std::vector<int>> all_rank_rows(const RankGroup& ranks, const std::vector<int>& mine) {
  const int world = ranks.world_size();
  const int length = static_cast<int>(mine.size());
  std::vector<int> lengths(static_cast<size_t>(world));
  ranks.all_gather_bytes(&length, sizeof(int), lengths.data());
  const size_t longest = static_cast<size_t>(*std::max_element(lengths.begin(), lengths.end()));
  std::vector<int> padded(mine);
  padded.resize(std::max<size_t>(longest, 1), -1);
  std::vector<int> all(padded.size() * static_cast<size_t>(world));
  ranks.all_gather_bytes(padded.data(), padded.size() * sizeof(int), all.data());
  std::vector<std::vector<int>> rows(static_cast<size_t>(world));
  for (int r = 0; r < world; r++) {
    const auto first = all.begin() + static_cast<std::ptrdiff_t>(r * padded.size());
    rows[static_cast<size_t>(r)].assign(first, first + lengths[static_cast<size_t>(r)]);
  }
  return rows;
}

// A device (or with `pinned`, pinned host) buffer of at least `count` T: reallocated a quarter larger when
// smaller. The caller has waited for the work that used it.
template <typename T>
void ensure_capacity(T** buffer, size_t* capacity, size_t count, bool pinned = false) {
  if (count <= *capacity) return;
  *capacity = count + count / 4;
  if (pinned) {
    CUDA_CHECK(cudaFreeHost(*buffer));
    CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(buffer), *capacity * sizeof(T)));
  } else {
    CUDA_CHECK(cudaFree(*buffer));
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(buffer), *capacity * sizeof(T)));
  }
}

}  // namespace

// The reduce of the row-sparse bucket on an Adam step (its gradients already summed over the step pair): every
// rank's touched rows by a host all-gather, each rank's rows sent to the owners of the shards they overlap, each
// owner's shard the mean of what it received (zero elsewhere), as the dense reduce-scatter would give.
void SpeedrunOptimizer::exchange_sparse_rows(int bucket) {
  if (capturing())  // its counts are the host's, per step
    throw std::logic_error("SpeedrunOptimizer: a captured step cannot exchange sparse rows (--bigram-exchange dense)");
  SparseRows& s = *sparse_;
  const SavedRows& summed = *saved_rows_at(model_.layout().tensors[static_cast<size_t>(s.tensor)].offset);
  std::vector<int> mine = summed.summed;  // the rows of the two steps' sum (accumulate_adam_grads)
  if (summed.all_summed) {
    mine.resize(s.table.rows);
    std::iota(mine.begin(), mine.end(), 0);
  }
  const SparseRowExchangePlan plan = plan_sparse_row_exchange(s.table, comm_.rank(), all_rank_rows(comm_, mine));
  CUDA_CHECK(cudaEventSynchronize(s.done));  // the previous exchange has left the buffers and the staged lists
  std::vector<int> lists;                    // the rows to send (by peer), then the sum's rows, slot bounds and slots
  for (const std::vector<int>& rows : plan.send_rows) lists.insert(lists.end(), rows.begin(), rows.end());
  const size_t sent = lists.size(), out_at = sent, begin_at = out_at + plan.out_rows.size(),
               slots_at = begin_at + plan.slot_begin.size();
  for (const std::vector<int>* list : {&plan.out_rows, &plan.slot_begin, &plan.slots})
    lists.insert(lists.end(), list->begin(), list->end());
  const size_t C = s.table.row_elements;
  ensure_capacity(&s.staged_ints, &s.staged_capacity, lists.size(), /*pinned=*/true);
  ensure_capacity(&s.device_ints, &s.ints_capacity, lists.size());
  ensure_capacity(&s.send, &s.send_capacity, std::max<size_t>(sent, 1) * C);
  ensure_capacity(&s.received, &s.received_capacity, std::max<size_t>(plan.received_rows(), 1) * C);
  std::copy(lists.begin(), lists.end(), s.staged_ints);
  CUDA_CHECK(
      cudaMemcpyAsync(s.device_ints, s.staged_ints, lists.size() * sizeof(int), cudaMemcpyHostToDevice, comm_stream_));
  const floatX* table_grads = model_.grads() + model_.layout().tensors[static_cast<size_t>(s.tensor)].offset;
  gather_rows(s.send, table_grads, s.device_ints, static_cast<int>(sent), static_cast<int>(C), comm_stream_);
  size_t wire_bytes = 0;
  for (int peer = 0; peer < comm_.world_size(); peer++)
    if (peer != comm_.rank()) wire_bytes += plan.send_rows[static_cast<size_t>(peer)].size() * C * sizeof(floatX);
  traced(tracer_, comm_stream_, TraceTrack::kComm, "sparse_rows",
         {{"bucket", bucket}, {"bytes", wire_bytes}, {"rows", mine.size()}}, [&] {
           comm_.group_start();
           size_t send_at = 0, receive_at = 0;
           for (int peer = 0; peer < comm_.world_size(); peer++) {
             const size_t out = plan.send_rows[static_cast<size_t>(peer)].size(),
                          in = plan.recv_rows[static_cast<size_t>(peer)];
             if (out > 0) comm_.send(s.send + send_at * C, out * C, peer, comm_stream_);
             if (in > 0) comm_.recv(s.received + receive_at * C, in * C, peer, comm_stream_);
             send_at += out;
             receive_at += in;
           }
           comm_.group_end();
         });
  watch("sparse_rows", &bucket_labels_[bucket]);
  const ParamBucket& b = model_.layout().buckets[static_cast<size_t>(bucket)];
  floatX* shard = buckets_[static_cast<size_t>(bucket)].adam_grad_shard;
  memset_async(shard, 0, b.shard_size * sizeof(floatX), comm_stream_);
  const long long table_at = static_cast<long long>(s.table.table_offset) -
                             static_cast<long long>(comm_.rank()) * static_cast<long long>(b.shard_size);
  sum_rows_avg(SparseRowShard<floatX>{shard, table_at, static_cast<long long>(b.shard_size)}, s.received,
               s.device_ints + out_at, s.device_ints + begin_at, s.device_ints + slots_at,
               static_cast<int>(plan.out_rows.size()), static_cast<int>(plan.slots.size()), static_cast<int>(C),
               comm_.world_size(), comm_stream_);
  CUDA_CHECK(cudaEventRecord(s.done, comm_stream_));
}

// The mean gradient of a span where it is needed: on its owner (a reduce), or on every rank for a replicated
// span (an all-reduce). The other ranks' gradients stay local: nothing reads them. Inside the bucket's group.
void SpeedrunOptimizer::reduce_muon_span(const MuonSpan& span) {
  floatX* grads = model_.grads() + span.offset;
  if (span.owner == kAllRanks)
    comm_.all_reduce_avg(grads, span.length, comm_stream_);
  else
    comm_.reduce_avg(grads, span.length, span.owner, comm_stream_);
}

void SpeedrunOptimizer::fill_step_values(float* slot) const {
  const double muon_lr = settings_.muon_lr * lr_;
  const double momentum = muon_momentum(step_ - 1);
  const long long t = step_ / 2;  // Adam updates so far, this one included (steps 2, 4, ... 1-based)
  for (const BucketPlan& plan : buckets_) {
    for (const MuonBatch& batch : plan.batches) {
      const NorMuonRunner& runner = *runners_[batch.runner]->runner;
      const NorMuonStepValues values = batch.storage == MuonStorage::kMantissa
                                           ? runner.bank_step_values(muon_lr, momentum)
                                           : runner.step_values(muon_lr, momentum);
      std::copy_n(&values.mu, 4, slot + batch.values_at);
    }
    for (const AdamSegment& segment : plan.adam_segments) {
      const AdamStepValues values =
          adam_step() ? adam_step_values(segment.adam, settings_.adam_lr * segment.lr_multiplier * lr_, t)
                      : AdamStepValues{std::nanf(""), std::nanf("")};
      slot[segment.values_at] = values.step_size;
      slot[segment.values_at + 1] = values.decay;
    }
  }
}

void SpeedrunOptimizer::update_muon(const MuonBatch& batch) {
  const NorMuonRunner& runner = *runners_[batch.runner]->runner;
  const NorMuonStepScalars scalars = NorMuonStepScalars::at(step_values_->device(batch.values_at));
  if (batch.storage == MuonStorage::kMantissa) {
    runner.step_bank(matmul_, bank_view(batch), scalars, update_stream_);
  } else if (batch.storage == MuonStorage::kFp32Master) {  // the masters' floatX copies written by the same pass
    runner.step(matmul_, normuon_view<float>(batch), scalars, update_stream_);
  } else {
    runner.step(matmul_, normuon_view<floatX>(batch), scalars, update_stream_);
  }
}

void SpeedrunOptimizer::update_adam(int bucket) {
  const BucketPlan& plan = buckets_[bucket];
  const size_t begin = shard_begin(bucket);
  for (const AdamSegment& segment : plan.adam_segments) {
    if (tied_adam_step() && segment.tensor == tie_->embed_tensor) continue;  // the head's transpose, after
    const floatX* grad = comm_.world_size() > 1 ? plan.adam_grad_shard + (segment.offset - begin)
                                                : model_.grads() + segment.offset;
    const AdamRowShard rows{0, static_cast<int>(segment.length)};
    const StepScalar step_size = StepScalar::at(step_values_->device(segment.values_at)),
                     decay = StepScalar::at(step_values_->device(segment.values_at + 1));
    floatX* param = model_.params() + segment.offset;
    if (segment.fp32_param)
      update_fp32_adam(segment, grad, plan);
    else if (segment.fp32_state)
      adam_sharded_update<floatX, float>(param, grad, plan.adam_m32 + segment.state_offset,
                                         plan.adam_v32 + segment.state_offset, 1, rows, segment.adam, step_size,
                                         decay, update_stream_);
    else
      adam_sharded_update<floatX, floatX>(param, grad, plan.adam_m + segment.state_offset,
                                          plan.adam_v + segment.state_offset, 1, rows, segment.adam, step_size,
                                          decay, update_stream_);
  }
}

// The segment (inside this rank's shard) of the model's fp32 parameters, updated there; then its floatX slots.
void SpeedrunOptimizer::update_fp32_adam(const AdamSegment& segment, const floatX* grad, const BucketPlan& plan) {
  if (segment.offset < fp32_params_.offset ||
      segment.offset + segment.length > fp32_params_.offset + fp32_params_.count)
    throw std::logic_error("SpeedrunOptimizer: an fp32-state Adam segment outside the model's fp32 parameters");
  float* values = fp32_params_.values + (segment.offset - fp32_params_.offset);
  adam_sharded_update<float, float, floatX>(values, grad, plan.adam_m32 + segment.state_offset,
                                            plan.adam_v32 + segment.state_offset, 1,
                                            AdamRowShard{0, static_cast<int>(segment.length)}, segment.adam,
                                            StepScalar::at(step_values_->device(segment.values_at)),
                                            StepScalar::at(step_values_->device(segment.values_at + 1)),
                                            update_stream_);
  convert(model_.params() + segment.offset, values, segment.length, update_stream_);
}

// Every rank's updated share of the fp32 parameters into every rank's copy: zero what this rank did not
// update, then sum over the ranks.
void SpeedrunOptimizer::share_fp32_params(int bucket) {
  const ParamBucket& b = model_.layout().buckets[bucket];
  const size_t begin = fp32_params_.offset, end = begin + fp32_params_.count;
  if (begin < b.offset || begin >= b.offset + b.padded_size) return;
  const size_t shard = shard_begin(bucket);
  const size_t owned_begin = std::clamp(shard, begin, end), owned_end = std::clamp(shard + b.shard_size, begin, end);
  float* values = fp32_params_.values;
  memset_async(values, 0, (owned_begin - begin) * sizeof(float), comm_stream_);
  memset_async(values + (owned_end - begin), 0, (end - owned_end) * sizeof(float), comm_stream_);
  traced(tracer_, comm_stream_, TraceTrack::kComm, "all_reduce",
         {{"bucket", bucket}, {"bytes", fp32_params_.count * sizeof(float)}},
         [&] { comm_.all_reduce_sum_float(values, fp32_params_.count, comm_stream_); });
  watch("all_reduce", &bucket_labels_[bucket]);
}

void SpeedrunOptimizer::update_bucket(int bucket) {
  CUDA_CHECK(cudaStreamWaitEvent(update_stream_, reduced_[bucket], 0));
  const BucketPlan& plan = buckets_[bucket];
  if (!plan.batches.empty())
    traced(tracer_, update_stream_, TraceTrack::kUpdate, "muon_update",
           {{"bucket", bucket}, {"batches", plan.batches.size()}}, [&] {
             for (const MuonBatch& batch : plan.batches) update_muon(batch);
           });
  if (plan.has_adam() && adam_step())
    traced(tracer_, update_stream_, TraceTrack::kUpdate, "adam_update", {{"bucket", bucket}},
           [&] { update_adam(bucket); });
  CUDA_CHECK(cudaEventRecord(updated_[bucket], update_stream_));
}

void SpeedrunOptimizer::share_bucket(int bucket) {
  CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, updated_[bucket], 0));
  BucketPlan& plan = buckets_[bucket];
  floatX* params = model_.params();
  const bool owned_spans = std::any_of(plan.muon_spans().begin(), plan.muon_spans().end(),
                                      [](const MuonSpan& span) { return span.owner != kAllRanks; });
  if (comm_.world_size() > 1 && owned_spans) {
    size_t bytes = 0;
    for (const MuonSpan& span : plan.muon_spans())
      if (span.owner != kAllRanks) bytes += span.length * sizeof(floatX);
    traced(tracer_, comm_stream_, TraceTrack::kComm, "broadcast", {{"bucket", bucket}, {"bytes", bytes}}, [&] {
      comm_.group_start();  // one launch for the bucket's owners
      for (const MuonSpan& span : plan.muon_spans())
        if (span.owner != kAllRanks) comm_.broadcast(params + span.offset, span.length, span.owner, comm_stream_);
      comm_.group_end();
    });
    watch("broadcast", &bucket_labels_[bucket]);
  }
  if (plan.has_adam() && adam_step() && comm_.world_size() > 1) {
    const ParamBucket& b = model_.layout().buckets[bucket];
    traced(tracer_, comm_stream_, TraceTrack::kComm, "all_gather", {{"bucket", bucket}, {"bytes", b.padded_size * sizeof(floatX)}}, [&] {
      comm_.all_gather(params + shard_begin(bucket), params + b.offset, b.shard_size, comm_stream_);
    });
    watch("all_gather", &bucket_labels_[bucket]);
    share_fp32_params(bucket);
  }
  if (tied_adam_step() && bucket == tie_->embed_bucket) {  // after the head's share (the head's bucket is first)
    const ParamLayout& layout = model_.layout();
    traced(tracer_, comm_stream_, TraceTrack::kComm, "tie_embed", {{"bucket", bucket}}, [&] {
      transpose_copy(params + layout.tensors[tie_->embed_tensor].offset, tie_->C,
                     params + layout.tensors[tie_->head_tensor].offset, tie_->V, tie_->C, tie_->V, comm_stream_);
    });
  }
  params_ready_.mark_ready(bucket, comm_stream_);
}

// At the untie (after its update): the embedding's Adam moments become the head's, transposed. The head's
// moments are sharded by its bucket and the embedding's by its own: every rank's head shard is gathered (an
// all-reduce of the shards, zero elsewhere: x + 0 is exact), transposed, and each rank keeps its embedding shard.
void SpeedrunOptimizer::untie_moments() {
  Tie& tie = *tie_;
  const ParamLayout& layout = model_.layout();
  const size_t n = static_cast<size_t>(tie.C) * tie.V;
  if (tie.gathered == nullptr) {
    tie.gathered = allocate<float>(n);
    tie.transposed = allocate<float>(n);
  }
  const size_t head_offset = layout.tensors[tie.head_tensor].offset, embed_offset = layout.tensors[tie.embed_tensor].offset;
  const BucketPlan& head = buckets_[tie.head_bucket];
  BucketPlan& embed = buckets_[tie.embed_bucket];
  for (int moment = 0; moment < 2; moment++) {
    const float* head_state = moment == 0 ? head.adam_m32 : head.adam_v32;
    float* embed_state = moment == 0 ? embed.adam_m32 : embed.adam_v32;
    memset_async(tie.gathered, 0, n * sizeof(float), comm_stream_);
    for (const AdamSegment& segment : head.adam_segments)
      if (segment.tensor == tie.head_tensor)
        memcpy_async(tie.gathered + (segment.offset - head_offset), head_state + segment.state_offset,
                     segment.length * sizeof(float), cudaMemcpyDeviceToDevice, comm_stream_);
    if (comm_.world_size() > 1) {
      traced(tracer_, comm_stream_, TraceTrack::kComm, "all_reduce", {{"bytes", n * sizeof(float)}},
             [&] { comm_.all_reduce_sum_float(tie.gathered, n, comm_stream_); });
      watch("all_reduce", &untie_label_);
    }
    transpose_copy(tie.transposed, tie.C, tie.gathered, tie.V, tie.C, tie.V, comm_stream_);
    for (const AdamSegment& segment : embed.adam_segments)
      if (segment.tensor == tie.embed_tensor)
        memcpy_async(embed_state + segment.state_offset, tie.transposed + (segment.offset - embed_offset),
                     segment.length * sizeof(float), cudaMemcpyDeviceToDevice, comm_stream_);
  }
}

void SpeedrunOptimizer::finish_step() {
  const int num_buckets = model_.layout().num_buckets();
  if (static_cast<int>(ready_order_.size()) != num_buckets)
    throw std::logic_error("finish_step: the backward reported " + std::to_string(ready_order_.size()) + " of " +
                           std::to_string(num_buckets) + " buckets");
  if (head_deferred_) throw std::logic_error("finish_step: the embeddings' bucket never came for the tied head");
  if (settings_.overlap == OverlapMode::kNone) {
    CUDA_CHECK(cudaEventRecord(backward_done_, compute_stream_));
    CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, backward_done_, 0));
    if (tied_adam_step()) tie_head_grad();
    for (int bucket : ready_order_) reduce_bucket(bucket);
  }
  if (settings_.overlap == OverlapMode::kFull) {
    if (last_unshared_ >= 0) share_bucket(last_unshared_);
    last_unshared_ = -1;
  } else {
    if (settings_.overlap == OverlapMode::kReduceScatter) {  // the updates wait for the whole backward
      CUDA_CHECK(cudaEventRecord(backward_done_, compute_stream_));
      CUDA_CHECK(cudaStreamWaitEvent(update_stream_, backward_done_, 0));
    }
    for (int bucket : ready_order_) update_bucket(bucket);
    for (int bucket : ready_order_) share_bucket(bucket);
  }
  if (tie_ != nullptr && step_ - 1 == settings_.modded89_schedule.untie_step()) untie_moments();
  enqueue_grad_norm();
  CUDA_CHECK(cudaEventRecordWithFlags(step_done_, comm_stream_, cudaEventRecordExternal));  // also when captured
  step_done_pending_ = true;
  if (capturing()) {  // CUDA ends a capture only with every stream it forked joined back into the origin
    for (cudaStream_t stream : {comm_stream_, update_stream_}) {
      CUDA_CHECK(cudaEventRecord(capture_join_, stream));
      CUDA_CHECK(cudaStreamWaitEvent(compute_stream_, capture_join_, 0));
    }
  }
}

// One launch over the averaged gradients in ready order: the Muon spans this rank owns (the replicated ones
// on rank 0), this rank's Adam segments on Adam steps; summed over ranks. The same segments in every overlap
// mode, so the same bits. Off the next forward's path (after the last share).
void SpeedrunOptimizer::enqueue_grad_norm() {
  NormSegments<floatX> segments;
  const bool adam = adam_step();
  for (int bucket : ready_order_) {
    const BucketPlan& plan = buckets_[bucket];
    for (const MuonSpan& span : plan.muon_spans())
      if (span.owner == comm_.rank() || (span.owner == kAllRanks && comm_.rank() == 0))
        segments.add(model_.grads() + span.offset, span.length);
    if (!adam) continue;
    const size_t begin = shard_begin(bucket);
    for (const AdamSegment& segment : plan.adam_segments) {
      if (tied_adam_step() && segment.tensor == tie_->embed_tensor) continue;  // folded into the head's
      segments.add(comm_.world_size() > 1 ? plan.adam_grad_shard + (segment.offset - begin)
                                          : model_.grads() + segment.offset,
                   segment.length);
    }
  }
  traced(tracer_, comm_stream_, TraceTrack::kComm, "grad_norm", {{"elements", segments.total()}}, [&] {
    global_norm_squared(norm_squared_, segments, /*accumulate=*/false, norm_scratch_, norm_scratch_floats_,
                        comm_stream_);
  });
  if (comm_.world_size() > 1) {
    comm_.all_reduce_sum_float(norm_squared_, 1, comm_stream_);
    watch("all_reduce", &norm_label_);
  }
  norm_readback_.enqueue(step_, norm_squared_, comm_stream_);
}

float SpeedrunOptimizer::grad_norm(int step) { return norm_readback_.read(step, step_); }

}  // namespace llmc
