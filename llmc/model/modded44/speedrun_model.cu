// The speedrun model's forward and backward on the device (see speedrun_model.h): the order of kernels
// is the model of docs/recipes.md read top to bottom (and bottom to top for the backward); kernels live in
// llmc/kernels/, the double-precision oracle in test/reference/reference_speedrun.cpp.
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/family/loss_means.h"
#include "llmc/kernels/attention_gate.cuh"
#include "llmc/kernels/classifier.cuh"
#include "llmc/kernels/embedding.cuh"
#include "llmc/kernels/fp8_head.cuh"
#include "llmc/kernels/matmul.cuh"
#include "llmc/kernels/qk_norm_rope.cuh"
#include "llmc/kernels/relu_squared.cuh"
#include "llmc/kernels/residual_mix.cuh"
#include "llmc/kernels/residual_norm.cuh"
#include "llmc/kernels/rmsnorm.cuh"
#include "llmc/kernels/scalar_vector.cuh"
#include "llmc/kernels/simple_window_attention.cuh"
#include "llmc/kernels/smear_gate.cuh"
#include "llmc/kernels/softcap_cross_entropy.cuh"
#include "llmc/kernels/wgmma_gemm.cuh"
#include "llmc/kernels/window_attention.cuh"  // its fast kernel only in the bf16 build
#include "llmc/model/modded44/speedrun_model.h"
#include "llmc/cuda/device_arena.h"

namespace llmc {

namespace {

// The fast attention kernel where this build has it for the model's heads, else the simple one.
bool window_attention_kernel_fits(const SpeedrunConfig& config) { return window_attention_fits(config.head_dim); }

using Rows = MixRows<floatX>;
using ConstRows = MixRows<const floatX>;
MixCoefficient one() { return MixCoefficient{MixScalar::kOne, -1}; }
MixCoefficient identity(int index) { return MixCoefficient{MixScalar::kIdentity, index}; }


}  // namespace

// The device buffers of one sequence of T tokens (the forward's activations, the backward's workspaces),
// all carved from one arena.
struct SpeedrunModel::Buffers {
  struct Block {
    floatX* x_in = nullptr;   // the stream entering the lambda mix (own buffer after a skip add, else an alias)
    floatX* x_mix = nullptr;  // lambda_0 x_in + lambda_1 x0
    floatX *xn_attn = nullptr, *qkv = nullptr, *qkv_rot = nullptr, *y = nullptr, *y_gated = nullptr;
    float *rstd_attn = nullptr, *rstd_qk = nullptr, *lse = nullptr;
    floatX* x_attn = nullptr;  // x_mix + attention output (an alias of x_mix without attention)
    floatX *xn_mlp = nullptr, *h = nullptr, *act = nullptr;
    float* rstd_mlp = nullptr;
    floatX* x_out = nullptr;   // the block's output (an alias of x_attn without MLP)
    floatX* dextra = nullptr;  // gradient of x_out from its later readers (skip pop, backout), if any
  };
  std::vector<Block> blocks;
  std::vector<int> popped_from;  // [block]: the block whose output it pops from the U-net stack, or -1
  floatX *embed_out, *ve[kSpeedrunValueEmbeds], *smeared, *x0, *x_final, *xf, *z;
  float *rstd0, *rstd_f, *losses;
  int *inputs, *targets, *cu_seqlens;
  floatX *rope_cos, *rope_sin;
  float* rope_freq;                    // D/2 fp32
  float *scalars, *dscalars;           // fp32 copies of the scalar vector and its gradient
  int* plans[2] = {nullptr, nullptr};  // window attention plans: short, long window
  // Backward: the stream gradient dx, (T, 4C) and (T, 3C) scratch, two (T, C) scratch, dx0, dve.
  floatX *dx, *dwide, *dqkv, *dnarrow, *dnarrow2, *dx0, *dve[kSpeedrunValueEmbeds];
  float *reduction_scratch, *attention_delta;
  float* value_mix_partials = nullptr;  // the window kernel's (its dV store runs the value mix's backward)
  size_t reduction_scratch_floats = 0;
  // FP8 head only: the workspace's memory (fp8_head_workspace_bytes).
  unsigned char* fp8_head_memory = nullptr;

  // Registers every buffer (and the parameter and gradient buffers) with `arena`; the pointers are set by
  // arena.allocate(). Aliases are set by set_aliases() after the allocation.
  void request(DeviceArena& arena, floatX** params, floatX** grads, const SpeedrunLayout& layout, int T,
               int loss_slots, SpeedrunHead head);
  void set_aliases(const SpeedrunLayout& layout);
};

// Buffers plus what else a pass needs: the pinned staging of the host arrays (refilled only after its
// last upload), the GEMM context and the embedding backward's plan.
struct SpeedrunModel::Activations : Buffers {
  Activations(int T, const SpeedrunConfig& config) : embedding_plan(T, config.vocab_size, config.channels()) {}
  DeviceArena arena;
  int* staging = nullptr;
  cudaEvent_t staging_free = nullptr;
  MatmulContext matmul;
  EmbeddingBackwardPlan embedding_plan;
  // The last upload: whether there was one, with targets, with the embedding plan (a training one).
  bool batch_uploaded = false, uploaded_targets = false, uploaded_plan = false;
  bool has_embedding_plan = false;  // the last forward was a training forward
  std::unique_ptr<Fp8HeadWorkspace> fp8_head;  // over fp8_head_memory; null for the bf16 head
  LossMeans loss_means;  // two results in flight (enqueue_mean_loss)
};

void SpeedrunModel::Buffers::request(DeviceArena& arena, floatX** params, floatX** grads, const SpeedrunLayout& layout,
                                     int seq_len, int loss_slots, SpeedrunHead head) {
  const SpeedrunConfig& config = layout.config;
  const size_t T = static_cast<size_t>(seq_len), C = static_cast<size_t>(config.channels()),
               V = static_cast<size_t>(config.vocab_size), H = static_cast<size_t>(config.num_heads);
  arena.request(params, layout.total_size);
  arena.request(grads, layout.total_size);
  blocks.assign(static_cast<size_t>(config.num_blocks), Block{});
  for (int i = 1; i < config.num_blocks; i++) {
    const SpeedrunBlock& role = layout.structure.blocks[static_cast<size_t>(i)];
    Block& b = blocks[static_cast<size_t>(i)];
    if (role.pop_skip >= 0) arena.request(&b.x_in, T * C);
    arena.request(&b.x_mix, T * C);
    if (role.attention) {
      for (floatX** buffer : {&b.xn_attn, &b.y_gated, &b.x_attn}) arena.request(buffer, T * C);
      if (!window_attention_kernel_fits(config)) arena.request(&b.y, T * C);  // the window kernel gates in its store
      arena.request(&b.qkv, 3 * T * C);
      arena.request(&b.qkv_rot, 3 * T * C);
      arena.request(&b.rstd_attn, T);
      arena.request(&b.rstd_qk, 2 * H * T);
      arena.request(&b.lse, H * T);
    }
    if (role.mlp) {
      arena.request(&b.xn_mlp, T * C);
      arena.request(&b.rstd_mlp, T);
      arena.request(&b.h, 4 * T * C);
      arena.request(&b.act, 4 * T * C);
      arena.request(&b.x_out, T * C);
    }
    if (role.push_skip || i == layout.structure.backout_block) arena.request(&b.dextra, T * C);
  }
  for (floatX** buffer : {&embed_out, &smeared, &x0, &x_final, &xf}) arena.request(buffer, T * C);
  for (floatX*& table : ve) arena.request(&table, T * C);
  arena.request(&z, T * V);
  arena.request(&rstd0, T);
  arena.request(&rstd_f, T);
  arena.request(&losses, T * static_cast<size_t>(loss_slots));
  arena.request(&inputs, T);
  arena.request(&targets, T);
  arena.request(&cu_seqlens, T + 1);
  arena.request(&rope_cos, T * config.head_dim / 2);
  arena.request(&rope_sin, T * config.head_dim / 2);
  arena.request(&rope_freq, static_cast<size_t>(config.head_dim / 2));
  const size_t num_scalars = layout.tensor(SpeedrunTensor::kScalars).numel;
  arena.request(&scalars, num_scalars);
  arena.request(&dscalars, num_scalars);
#if !defined(LLMC_FP32)
  if (window_attention_kernel_fits(config)) {
    for (int*& plan : plans) arena.request(&plan, window_attention::plan_ints(seq_len));
    arena.request(&value_mix_partials, window_attention::value_mix_partials_floats(seq_len, config.num_heads));
  }
#endif
  for (floatX** buffer : {&dx, &dnarrow, &dnarrow2, &dx0}) arena.request(buffer, T * C);
  for (floatX*& table : dve) arena.request(&table, T * C);
  arena.request(&dwide, 4 * T * C);
  arena.request(&dqkv, 3 * T * C);
  reduction_scratch_floats =
      std::max({mix_backward_scratch_floats(seq_len, config.channels()), smear_backward_scratch_floats(seq_len),
                attention_gate_backward_scratch_floats(seq_len, config.num_heads),
                residual_norm_backward_scratch_floats(seq_len)});
  arena.request(&reduction_scratch, reduction_scratch_floats);
  arena.request(&attention_delta, 2 * H * T);  // delta, and the window kernel's gate values
  if (head == SpeedrunHead::kFp8) {
    arena.request(&fp8_head_memory, fp8_head_workspace_bytes(seq_len, config.channels(), config.vocab_size));
  }
}

// A block without a skip add mixes the previous output (x0 for block 1); without attention the MLP reads
// x_mix; without an MLP the output is x_attn. The U-net stack pairs pops with pushes.
void SpeedrunModel::Buffers::set_aliases(const SpeedrunLayout& layout) {
  floatX* previous = x0;
  std::vector<int> stack;
  popped_from.assign(layout.structure.blocks.size(), -1);
  for (size_t i = 1; i < layout.structure.blocks.size(); i++) {
    const SpeedrunBlock& role = layout.structure.blocks[i];
    Block& b = blocks[i];
    if (role.pop_skip >= 0) {
      popped_from[i] = stack.back();
      stack.pop_back();
    }
    if (role.push_skip) stack.push_back(static_cast<int>(i));
    if (role.pop_skip < 0) b.x_in = previous;
    if (!role.attention) b.x_attn = b.x_mix;
    if (!role.mlp) b.x_out = b.x_attn;
    previous = b.x_out;
  }
}

namespace {

// Device bytes outside the arena: the embedding backward's plan.
size_t embedding_plan_bytes(int seq_len, int channels) { return EmbeddingBackwardPlan::device_bytes(seq_len, channels); }

}  // namespace

size_t SpeedrunModel::planned_activation_bytes(const SpeedrunConfig& config, int seq_len, int loss_slots,
                                               SpeedrunHead head) {
  const SpeedrunLayout layout = make_speedrun_layout(config, 1);
  DeviceArena arena;
  Buffers buffers;
  floatX *params = nullptr, *grads = nullptr;
  buffers.request(arena, &params, &grads, layout, seq_len, loss_slots, head);
  return arena.requested_bytes() - 2 * layout.total_size * sizeof(floatX) +
         embedding_plan_bytes(seq_len, config.channels());
}

SpeedrunModel::SpeedrunModel(const SpeedrunConfig& config, int world_size, int seq_len, int loss_slots,
                             cudaStream_t stream, int bos_token, SpeedrunHead head, FusedGemms fused_gemms)
    : layout_(make_speedrun_layout(config, world_size)),
      seq_len_(seq_len),
      loss_slots_(loss_slots),
      bos_token_(bos_token),
      head_(head),
      fused_gemms_(fused_gemms),
      stream_(stream),
      yarn_(config.head_dim) {
  if (seq_len < 1 || seq_len > config.max_seq_len)
    throw std::invalid_argument("speedrun model: sequence length " + std::to_string(seq_len) + " outside [1, " +
                                std::to_string(config.max_seq_len) + "] (the model's maximum)");
  if (loss_slots < 1) throw std::invalid_argument("speedrun model: loss_slots must be positive");
  if (head == SpeedrunHead::kFp8 && !fp8_head_shape_fits(seq_len, config.channels(), config.vocab_size))
    throw std::invalid_argument("speedrun model: the FP8 head needs the sequence length (" + std::to_string(seq_len) +
                                "), width (" + std::to_string(config.channels()) + ") and vocabulary (" +
                                std::to_string(config.vocab_size) + ") to be multiples of 16");
  if (fused_gemms == FusedGemms::kWgmma) {
    require_wgmma_gemms_here(config.channels());
    if (128 % config.head_dim != 0 || config.head_dim % 16 != 0)
      throw std::invalid_argument("--wgmma-gemms on: the attention's head size " + std::to_string(config.head_dim) +
                                  " must divide 128 and be a multiple of 16 (the qkv GEMM's epilogue)");
  }
  acts_ = std::make_unique<Activations>(seq_len, config);
  Activations& a = *acts_;
  a.request(a.arena, &params_, &grads_, layout_, seq_len, loss_slots, head);
  a.arena.allocate("the speedrun model (parameters, gradients, activations for T=" + std::to_string(seq_len) + ")");
  if (head == SpeedrunHead::kFp8)
    a.fp8_head = std::make_unique<Fp8HeadWorkspace>(seq_len, config.channels(), config.vocab_size,
                                                    Fp8HeadScales::speedrun(config.channels()), a.fp8_head_memory);
  activation_bytes_ =
      a.arena.bytes() - 2 * layout_.total_size * sizeof(floatX) + embedding_plan_bytes(seq_len, config.channels());
  a.set_aliases(layout_);
  CUDA_CHECK(cudaMallocHost(&a.staging, (3 * static_cast<size_t>(seq_len) + 1) * sizeof(int)));
  CUDA_CHECK(cudaEventCreateWithFlags(&a.staging_free, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(a.staging_free, stream_));
  CUDA_CHECK(cudaMemsetAsync(params_, 0, layout_.total_size * sizeof(floatX), stream_));
  CUDA_CHECK(cudaMemsetAsync(grads_, 0, layout_.total_size * sizeof(floatX), stream_));
  std::vector<int> tables;
  for (const RowSparseGrad& table : sparse_rows({})) tables.push_back(table.tensor);
  table_rows_ = TableRows(tables);
  zero_grads_ = std::make_unique<RowSparseZeroing>(layout_, tables);
  rebuild_rope_tables();
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

SpeedrunModel::~SpeedrunModel() {
  CUDA_REPORT(cudaStreamSynchronize(stream_));
  CUDA_REPORT(cudaEventDestroy(acts_->staging_free));
  CUDA_REPORT(cudaFreeHost(acts_->staging));
}

bool SpeedrunModel::uses_window_attention_kernel() const { return window_attention_kernel_fits(layout_.config); }

std::string SpeedrunModel::bucket_name(int bucket) const {
  if (bucket == SpeedrunLayout::embeddings_bucket()) return "embeddings";
  if (bucket == layout_.head_bucket()) return "head";
  for (int i = 1; i < layout_.config.num_blocks; i++)
    if (layout_.block_bucket(i) == bucket) return "block " + std::to_string(i);
  return "bucket " + std::to_string(bucket);
}

// ---- parameters, windows, RoPE ---------------------------------------------------------------------

void SpeedrunModel::set_gemm_algo_selection(GemmAlgoSelection selection) { acts_->matmul.set_selection(selection); }

void SpeedrunModel::upload_params(const std::vector<float>& host_params) {
  if (host_params.size() != layout_.total_size)
    throw std::invalid_argument("upload_params: " + std::to_string(host_params.size()) + " values for a buffer of " +
                                std::to_string(layout_.total_size));
  std::vector<floatX> converted(host_params.size());
  for (size_t i = 0; i < host_params.size(); i++) converted[i] = from_float<floatX>(host_params[i]);
  CUDA_CHECK(
      cudaMemcpyAsync(params_, converted.data(), converted.size() * sizeof(floatX), cudaMemcpyHostToDevice, stream_));
  const TensorView& scalars = layout_.tensor(SpeedrunTensor::kScalars);
  CUDA_CHECK(cudaMemcpyAsync(acts_->scalars, host_params.data() + scalars.offset, scalars.numel * sizeof(float),
                             cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Fp32Params SpeedrunModel::take_fp32_params() {
  fp32_scalars_taken_ = true;
  const TensorView& scalars = layout_.tensor(SpeedrunTensor::kScalars);
  return Fp32Params{acts_->scalars, scalars.offset, scalars.numel};
}

namespace {

std::vector<float> download_as_float(const floatX* device, size_t count, cudaStream_t stream) {
  std::vector<floatX> raw(count);
  CUDA_CHECK(cudaMemcpyAsync(raw.data(), device, count * sizeof(floatX), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> result(count);
  for (size_t i = 0; i < count; i++) result[i] = to_float(raw[i]);
  return result;
}

}  // namespace

std::vector<float> SpeedrunModel::download_params() const {
  std::vector<float> params = download_as_float(params_, layout_.total_size, stream_);
  if (fp32_scalars_taken_) {
    const TensorView& scalars = layout_.tensor(SpeedrunTensor::kScalars);
    CUDA_CHECK(cudaMemcpyAsync(params.data() + scalars.offset, acts_->scalars, scalars.numel * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  return params;
}
std::vector<float> SpeedrunModel::download_grads() const {
  return download_as_float(grads_, layout_.total_size, stream_);
}

double SpeedrunModel::set_attention_windows(int short_blocks, int long_blocks, bool apply_yarn) {
  if (short_blocks < 1 || long_blocks < 1)
    throw std::invalid_argument("set_attention_windows: windows must be at least one block (short " +
                                std::to_string(short_blocks) + ", long " + std::to_string(long_blocks) + ")");
  if (apply_yarn && long_blocks != long_blocks_) {
    yarn_.apply(long_blocks_, long_blocks, layout_.config.window_block);
    rebuild_rope_tables();
  }
  short_blocks_ = short_blocks;
  long_blocks_ = long_blocks;
  return attn_scale();
}

void SpeedrunModel::reset_yarn() {
  yarn_.reset();
  rebuild_rope_tables();
}

void SpeedrunModel::set_loss_weights(const MtpLossWeights& weights) {
  (void)weights;
  throw std::invalid_argument("--loss-schedule modded89: the 2025-10-31 speedrun model trains on the next token's "
                              "loss alone (use a modded89 model or --loss-schedule fixed)");
}

void SpeedrunModel::set_seq_len(int seq_len) {
  (void)seq_len;
  throw std::invalid_argument("--batch-schedule modded89 or --val-seq-len: the 2025-10-31 speedrun model trains and "
                              "validates every step on --seq-len tokens (use a modded89 model)");
}

void SpeedrunModel::rebuild_rope_tables() {
  Activations& a = *acts_;
  const std::vector<float>& frequencies = yarn_.frequencies();
  // The staging of the frequencies must outlive the asynchronous copy: synchronise before returning.
  CUDA_CHECK(cudaMemcpyAsync(a.rope_freq, frequencies.data(), frequencies.size() * sizeof(float),
                             cudaMemcpyHostToDevice, stream_));
  rope_tables_build(a.rope_cos, a.rope_sin, a.rope_freq, seq_len_, layout_.config.head_dim / 2, stream_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void SpeedrunModel::download_rope_tables(std::vector<float>& cos_table, std::vector<float>& sin_table) const {
  const size_t count = static_cast<size_t>(seq_len_) * (layout_.config.head_dim / 2);
  cos_table = download_as_float(acts_->rope_cos, count, stream_);
  sin_table = download_as_float(acts_->rope_sin, count, stream_);
}

// The four tables' rows the tokens read (each table [V, C]).
std::vector<RowSparseGrad> SpeedrunModel::sparse_rows(const std::vector<int>& token_rows) const {
  std::vector<RowSparseGrad> tables{{layout_.index_of(layout_.tensor(SpeedrunTensor::kEmbed)), token_rows}};
  for (int k = 0; k < kSpeedrunValueEmbeds; k++)
    tables.push_back({layout_.index_of(layout_.tensor(SpeedrunTensor::kValueEmbed, k)), token_rows});
  return tables;
}

// A step's first backward zeroes each bucket as it starts (the tables at the rows that may be nonzero); a later
// micro-step adds its rows to the tables' gradients.
void SpeedrunModel::start_bucket_grads(int bucket, bool first_micro_step) {
  const std::vector<RowSparseGrad>& rows =
      bucket == SpeedrunLayout::embeddings_bucket() ? table_rows_.batch() : no_row_sparse_grads();
  if (first_micro_step)
    zero_grads_->zero_bucket(grads_, bucket, rows, stream_);
  else
    zero_grads_->add_bucket(bucket, rows, stream_);
}

const std::vector<RowSparseGrad>& SpeedrunModel::row_sparse_grads() const { return table_rows_.step(); }

void SpeedrunModel::grad_rows_written(int tensor, const std::vector<int>& rows) { zero_grads_->add(tensor, rows); }

void SpeedrunModel::all_grad_rows_written(int tensor) { zero_grads_->add_all(tensor); }

// A replayed backward wrote rows the host did not see: the next one zeroes the tables in full.
void SpeedrunModel::replayed_micro_step() { zero_grads_->add_all(); }

// Every host value the training forward's and backward's launches read (a float by its bits, %a).
std::string SpeedrunModel::step_shape() const {
  char text[160];
  std::snprintf(text, sizeof text, "T=%d windows=%d,%d scale=%a fp32=%d", seq_len_, short_blocks_, long_blocks_,
                yarn_.attn_scale(), fp32_scalars_taken_ ? 1 : 0);
  return text;
}

// ---- forward ---------------------------------------------------------------------------------------

// Inputs, targets and the document bounds (0, every later BOS position, T, then T repeated to T + 1 entries: a
// fixed-length array, as the record pads its cu_seqlens, so that the attention launches do not depend on the
// batch's document count) go through pinned staging; with `training` the embedding backward's plan is built too.
void SpeedrunModel::upload_batch(const int* inputs_host, const int* targets_host, bool training) {
  Activations& a = *acts_;
  const int T = seq_len_, V = layout_.config.vocab_size;
  if (training && targets_host == nullptr) throw std::invalid_argument("speedrun model: a training batch without targets");
  for (int t = 0; t < T; t++)
    if (inputs_host[t] < 0 || inputs_host[t] >= V ||
        (targets_host != nullptr && (targets_host[t] < 0 || targets_host[t] >= V)))
      throw std::invalid_argument("speedrun model: token or target at position " + std::to_string(t) + " outside [0, " +
                                  std::to_string(V) + ")");
  CUDA_CHECK(cudaEventSynchronize(a.staging_free));
  int* cu_seqlens = a.staging + 2 * T;
  int bounds = 0;
  cu_seqlens[bounds++] = 0;
  for (int t = 1; t < T; t++)
    if (inputs_host[t] == bos_token_) cu_seqlens[bounds++] = t;
  while (bounds <= T) cu_seqlens[bounds++] = T;
  num_docs_ = bounds - 1;
  std::copy_n(inputs_host, T, a.staging);
  CUDA_CHECK(cudaMemcpyAsync(a.inputs, a.staging, T * sizeof(int), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaMemcpyAsync(a.cu_seqlens, cu_seqlens, bounds * sizeof(int), cudaMemcpyHostToDevice, stream_));
  if (targets_host != nullptr) {
    std::copy_n(targets_host, T, a.staging + T);
    CUDA_CHECK(cudaMemcpyAsync(a.targets, a.staging + T, T * sizeof(int), cudaMemcpyHostToDevice, stream_));
  }
  CUDA_CHECK(cudaEventRecord(a.staging_free, stream_));
  if (training) {
    a.embedding_plan.prepare(inputs_host, T, stream_);
    table_rows_.set_batch(sparse_rows(a.embedding_plan.distinct_tokens()));
  }
  a.batch_uploaded = true;
  a.uploaded_targets = targets_host != nullptr;
  a.uploaded_plan = training;
}

void SpeedrunModel::forward_uploaded(int loss_slot, bool compute_dlogits, float dloss,
                                     const BucketHook& before_bucket_use) {
  Activations& a = *acts_;
  const SpeedrunConfig& cfg = layout_.config;
  const int T = seq_len_, C = cfg.channels();
  if (a.uploaded_targets && (loss_slot < 0 || loss_slot >= loss_slots_))
    throw std::out_of_range("forward: loss slot " + std::to_string(loss_slot) + " outside [0, " +
                            std::to_string(loss_slots_) + ")");
  if (!a.batch_uploaded) throw std::logic_error("speedrun model: a forward with no batch uploaded (upload_batch)");
  if (compute_dlogits && !a.uploaded_plan)
    throw std::logic_error("speedrun model: a training forward of a batch uploaded without its plan");
  a.has_embedding_plan = compute_dlogits;
  auto use_bucket = [&](int bucket) {
    if (before_bucket_use) before_bucket_use(bucket);
  };
#if !defined(LLMC_FP32)
  if (uses_window_attention_kernel())
    for (int w = 0; w < 2; w++)
      window_attention::plan(a.plans[w],
                             window_attention::Problem{T, cfg.num_heads, a.cu_seqlens, num_docs_,
                                                       w == 0 ? short_window_tokens() : long_window_tokens(),
                                                       static_cast<float>(yarn_.attn_scale())},
                             stream_);
#endif

  // Embeddings, smear, x0 = norm(smeared).
  use_bucket(SpeedrunLayout::embeddings_bucket());
  const TensorView& scalar_view = layout_.tensor(SpeedrunTensor::kScalars);
  if (!fp32_scalars_taken_)
    scalars_to_fp32(a.scalars, params_ + scalar_view.offset, static_cast<int>(scalar_view.numel), stream_);
  EmbeddingGather<floatX> gather;
  gather.count = 1 + kSpeedrunValueEmbeds;
  gather.tables[0] = param(SpeedrunTensor::kEmbed);
  gather.outputs[0] = a.embed_out;
  for (int k = 0; k < kSpeedrunValueEmbeds; k++) {
    gather.tables[1 + k] = param(SpeedrunTensor::kValueEmbed, k);
    gather.outputs[1 + k] = a.ve[k];
  }
  embedding_forward(gather, a.inputs, T, C, stream_);
  smear_forward(a.smeared, a.embed_out, param(SpeedrunTensor::kSmearGate), a.scalars,
                SpeedrunScalarIndex{cfg.num_blocks}.smear_lambda(), T, C, stream_);
  rmsnorm_forward(a.x0, a.rstd0, a.smeared, T, C, stream_);

  for (int i = 1; i < cfg.num_blocks; i++) {
    use_bucket(layout_.block_bucket(i));
    block_forward(i);
  }
  use_bucket(layout_.head_bucket());
  head_forward(loss_slot, compute_dlogits, dloss);
}

// x_mix = lambda_0 x_in + lambda_1 x0: block i's mix of its input stream and x0.
ResidualMixIn SpeedrunModel::block_lambda_mix(int i) const {
  const Activations& a = *acts_;
  const SpeedrunScalarIndex index{layout_.config.num_blocks};
  const int C = layout_.config.channels();
  ResidualMixIn mix;
  mix.x_in = ConstRows{a.blocks[static_cast<size_t>(i)].x_in, C};
  mix.y = ConstRows{a.x0, C};
  mix.scalars = a.scalars;
  mix.a = identity(index.block_lambda(i, 0));
  mix.b = identity(index.block_lambda(i, 1));
  return mix;
}

// x_final = x_out[L-1] - backout * x_out[backout block]: the backout of the record's last layers.
ResidualMixIn SpeedrunModel::backout_mix() const {
  const Activations& a = *acts_;
  const SpeedrunConfig& cfg = layout_.config;
  const int C = cfg.channels();
  ResidualMixIn mix;
  mix.x_in = ConstRows{a.blocks[static_cast<size_t>(cfg.num_blocks - 1)].x_out, C};
  mix.y = ConstRows{a.blocks[static_cast<size_t>(layout_.structure.backout_block)].x_out, C};
  mix.scalars = a.scalars;
  mix.b = MixCoefficient{MixScalar::kNegated, SpeedrunScalarIndex{cfg.num_blocks}.backout_lambda()};
  return mix;
}

void SpeedrunModel::block_forward(int i) {
  Activations& a = *acts_;
  Buffers::Block& b = a.blocks[static_cast<size_t>(i)];
  const SpeedrunBlock& role = layout_.structure.blocks[static_cast<size_t>(i)];
  const SpeedrunScalarIndex index{layout_.config.num_blocks};
  const int T = seq_len_, C = layout_.config.channels();
  if (role.pop_skip >= 0) {  // x += sigmoid(skip_w) * (output of the paired earlier block)
    const floatX* previous = i == 1 ? a.x0 : a.blocks[static_cast<size_t>(i - 1)].x_out;
    const floatX* skip = a.blocks[static_cast<size_t>(a.popped_from[static_cast<size_t>(i)])].x_out;
    mix_forward(Rows{b.x_in, C}, ConstRows{previous, C}, ConstRows{skip, C}, a.scalars, one(),
                MixCoefficient{MixScalar::kSigmoid, index.skip_weight(role.pop_skip)}, T, C, stream_);
  }
  // x_mix = l0 x_in + l1 x0 and its norm for the first sublayer that reads it, in one pass (residual_norm_forward,
  // bit for bit mix_forward then rmsnorm_forward).
  const ResidualMixIn mix = block_lambda_mix(i);
  const ResidualNormOut out = role.attention ? ResidualNormOut{b.x_mix, b.xn_attn, b.rstd_attn}
                                             : ResidualNormOut{b.x_mix, b.xn_mlp, b.rstd_mlp};
  residual_norm_forward(out, mix, TokenMix{}, T, C, stream_);
  if (role.attention) attention_forward(i);
  if (role.mlp) mlp_forward(i);
}

void SpeedrunModel::attention_forward(int i) {
  Activations& a = *acts_;
  Buffers::Block& b = a.blocks[static_cast<size_t>(i)];
  const SpeedrunConfig& cfg = layout_.config;
  const SpeedrunScalarIndex index{cfg.num_blocks};
  const int T = seq_len_, C = cfg.channels(), H = cfg.num_heads, D = cfg.head_dim;
  const floatX* qkvo = param(SpeedrunTensor::kQkvo, i);  // xn_attn = norm(x_mix): written by block_forward
  const int table = layout_.structure.blocks[static_cast<size_t>(i)].value_embed;
  const floatX* value_embed = table >= 0 ? a.ve[table] : nullptr;
  const MixCoefficient lambda0 = identity(index.sa_lambda(i, 0)), lambda1 = identity(index.sa_lambda(i, 1));
#if !defined(LLMC_FP32)
  if (fused_gemms_ == FusedGemms::kWgmma) {  // qkv, and qkv_rot's q, k and v below, from one GEMM
    WgmmaGemmArgs g;  // W_qkv = rows 0..3C-1 of the [4C, C] view: (N, K)
    g.out = b.qkv, g.a = b.xn_attn, g.w = qkvo, g.w_k_major = true, g.m = T, g.n = 3 * C, g.k = C;
    g.qkv.rot = b.qkv_rot, g.qkv.rstd = b.rstd_qk, g.qkv.cos_table = a.rope_cos, g.qkv.sin_table = a.rope_sin;
    g.qkv.value_embed = value_embed, g.qkv.scalars = a.scalars, g.qkv.a = lambda0, g.qkv.b = lambda1;
    g.qkv.head_dim = D;
    wgmma_gemm_launch(WgmmaEpilogue::kQkvRope, g, stream_);
  }
#endif
  if (fused_gemms_ == FusedGemms::kCublas) {
    GemmArgs qkv;  // qkv (T, 3C) = xn W_qkv^T, W_qkv = rows 0..3C-1 of the [4C, C] view
    qkv.d = b.qkv, qkv.a = b.xn_attn, qkv.b = qkvo, qkv.m = T, qkv.n = 3 * C, qkv.k = C, qkv.trans_b = true;
    gemm(a.matmul, qkv, stream_);
    qk_norm_rope_forward(b.qkv_rot, 3 * C, b.qkv, 3 * C, b.rstd_qk, a.rope_cos, a.rope_sin, T, 2 * H, D, stream_);
    mix_forward(Rows{b.qkv_rot + 2 * C, 3 * C}, ConstRows{b.qkv + 2 * C, 3 * C}, ConstRows{value_embed, C}, a.scalars,
                lambda0, lambda1, T, C, stream_);
  }
  attention_kernel_forward(i);  // the window kernel writes y_gated itself
  if (!uses_window_attention_kernel())
    attention_gate_forward(b.y_gated, b.y, b.xn_attn, C, param(SpeedrunTensor::kAttnGate, i), T, H, D, stream_);
  GemmArgs out;  // x_attn = x_mix + y_gated W_o^T
  out.d = b.x_attn, out.a = b.y_gated, out.b = qkvo + static_cast<size_t>(3) * C * C, out.m = T, out.n = C, out.k = C;
  out.trans_b = true, out.beta = 1.0f, out.c = b.x_mix;
  gemm(a.matmul, out, stream_);
}

void SpeedrunModel::attention_kernel_forward(int i) {
  Activations& a = *acts_;
  Buffers::Block& b = a.blocks[static_cast<size_t>(i)];
  const SpeedrunConfig& cfg = layout_.config;
  const int C = cfg.channels();
  const bool long_window = layout_.structure.blocks[static_cast<size_t>(i)].long_window;
  const int window = long_window ? long_window_tokens() : short_window_tokens();
  const float scale = static_cast<float>(yarn_.attn_scale());
#if !defined(LLMC_FP32)
  if (uses_window_attention_kernel()) {
    const window_attention::Problem problem{seq_len_, cfg.num_heads, a.cu_seqlens, num_docs_, window, scale};
    const window_attention::OutputGate gate{b.xn_attn, C, param(SpeedrunTensor::kAttnGate, i)};
    window_attention::forward(b.y_gated, b.lse, b.qkv_rot, b.qkv_rot + C, b.qkv_rot + 2 * C, 3 * C,
                              a.plans[long_window], problem, stream_, gate);
    return;
  }
#endif
  const simple_attention::Problem problem{seq_len_,  cfg.num_heads, cfg.head_dim, a.cu_seqlens,
                                          num_docs_, window,        scale};
  simple_attention::forward(b.y, b.lse, b.qkv_rot, b.qkv_rot + C, b.qkv_rot + 2 * C, 3 * C, problem, stream_);
}

void SpeedrunModel::mlp_forward(int i) {
  Activations& a = *acts_;
  Buffers::Block& b = a.blocks[static_cast<size_t>(i)];
  const int T = seq_len_, C = layout_.config.channels();
  if (layout_.structure.blocks[static_cast<size_t>(i)].attention)  // else block_forward wrote it with x_mix
    rmsnorm_forward(b.xn_mlp, b.rstd_mlp, b.x_attn, T, C, stream_);
  if (fused_gemms_ == FusedGemms::kWgmma) {  // h and act = relu(h)^2 from one GEMM
    // W_fc stored (in, out) = (K, N)
    wgmma_gemm_launch(WgmmaEpilogue::kReluSquared, b.h, b.act, nullptr, b.xn_mlp, param(SpeedrunTensor::kFc, i),
                      /*w_k_major=*/false, T, 4 * C, C, stream_);
  } else {
    GemmArgs fc;  // h (T, 4C) = xn W_fc, W_fc stored (in, out)
    fc.d = b.h, fc.a = b.xn_mlp, fc.b = param(SpeedrunTensor::kFc, i), fc.m = T, fc.n = 4 * C, fc.k = C;
    gemm(a.matmul, fc, stream_);
    relu_squared_forward(b.act, b.h, static_cast<size_t>(T) * 4 * C, stream_);
  }
  GemmArgs proj;  // x_out = x_attn + relu(h)^2 W_proj^T, W_proj stored (out, in)
  proj.d = b.x_out, proj.a = b.act, proj.b = param(SpeedrunTensor::kProj, i), proj.m = T, proj.n = C, proj.k = 4 * C;
  proj.trans_b = true, proj.beta = 1.0f, proj.c = b.x_attn;
  gemm(a.matmul, proj, stream_);
}

// Backout, final norm, head GEMM and the soft-capped cross-entropy (in training, dz in place of z, or for the FP8
// head its e5m2 codes in the head's g8).
void SpeedrunModel::head_forward(int loss_slot, bool compute_dlogits, float dloss) {
  Activations& a = *acts_;
  const SpeedrunConfig& cfg = layout_.config;
  const int T = seq_len_, C = cfg.channels(), V = cfg.vocab_size;
  residual_norm_forward({a.x_final, a.xf, a.rstd_f}, backout_mix(), TokenMix{}, T, C, stream_);  // x_final, xf
  if (a.fp8_head && compute_dlogits) {  // training: z in FP8, its copies kept for head_backward
    fp8_head_training_forward(a.matmul, *a.fp8_head, a.z, a.xf, param(SpeedrunTensor::kHead), T, dloss, stream_);
  } else {
    GemmArgs head;  // z (T, V) = xf W_head^T
    head.d = a.z, head.a = a.xf, head.b = param(SpeedrunTensor::kHead), head.m = T, head.n = V, head.k = C;
    head.trans_b = true;
    gemm(a.matmul, head, stream_);
  }
  if (!a.uploaded_targets) return;
  float* losses = a.losses + static_cast<size_t>(loss_slot) * T;
  if (compute_dlogits && a.fp8_head)  // dz straight into the FP8 head's e5m2 codes (bit for bit dz's cast)
    softcap_cross_entropy_backward_e5m2(a.fp8_head->g8(), losses, a.z, a.targets, dloss, a.fp8_head->scales().grad, T,
                                        V, stream_);
  else if (compute_dlogits)
    softcap_cross_entropy_backward(a.z, losses, a.targets, dloss, T, V, stream_);
  else
    softcap_cross_entropy_forward(losses, a.z, a.targets, T, V, stream_);
}

// ---- backward --------------------------------------------------------------------------------------

void SpeedrunModel::backward(bool first_micro_step, const BucketHook& on_bucket_ready) {
  Activations& a = *acts_;
  if (!a.has_embedding_plan)
    throw std::logic_error("backward: the last forward did not prepare one (compute_dlogits was false)");
  const SpeedrunConfig& cfg = layout_.config;
  const size_t TC = static_cast<size_t>(seq_len_) * cfg.channels();
  auto bucket_ready = [&](int bucket) {
    if (on_bucket_ready) on_bucket_ready(bucket);
  };
  // Gradients of activations that several blocks add to start at zero.
  memset_async(a.dscalars, 0, layout_.tensor(SpeedrunTensor::kScalars).numel * sizeof(float), stream_);
  memset_async(a.dx0, 0, TC * sizeof(floatX), stream_);
  for (floatX* table : a.dve) memset_async(table, 0, TC * sizeof(floatX), stream_);
  for (const Buffers::Block& b : a.blocks)
    if (b.dextra != nullptr) memset_async(b.dextra, 0, TC * sizeof(floatX), stream_);

  start_bucket_grads(layout_.head_bucket(), first_micro_step);
  head_backward();
  bucket_ready(layout_.head_bucket());
  for (int i = cfg.num_blocks - 1; i >= 1; i--) {
    start_bucket_grads(layout_.block_bucket(i), first_micro_step);
    block_backward(i);
    bucket_ready(layout_.block_bucket(i));
  }
  start_bucket_grads(SpeedrunLayout::embeddings_bucket(), first_micro_step);
  table_rows_.add_batch_to_step(first_micro_step);
  input_backward();
  bucket_ready(SpeedrunLayout::embeddings_bucket());
}

// z holds dz (the FP8 head's g8 its codes): the head's gradients, then dx = d(final stream) with the backout's share
// set aside.
void SpeedrunModel::head_backward() {
  Activations& a = *acts_;
  const SpeedrunConfig& cfg = layout_.config;
  const int T = seq_len_, C = cfg.channels(), V = cfg.vocab_size;
  if (a.fp8_head) {  // dxf = dz W_head and dW_head += dz^T xf (fp32 sums, rounded once) from the forward's fp8 copies
    fp8_head_backward_from_codes(a.matmul, *a.fp8_head, a.dnarrow, grad(SpeedrunTensor::kHead), T,
                                 /*accumulate=*/true, stream_);
  } else {
    GemmArgs dweight;  // dW_head (V, C) += dz^T xf
    dweight.d = grad(SpeedrunTensor::kHead), dweight.a = a.z, dweight.b = a.xf, dweight.m = V, dweight.n = C;
    dweight.k = T, dweight.trans_a = true, dweight.beta = 1.0f;
    gemm(a.matmul, dweight, stream_);
    GemmArgs dinput;  // dxf (T, C) = dz W_head
    dinput.d = a.dnarrow, dinput.a = a.z, dinput.b = param(SpeedrunTensor::kHead), dinput.m = T, dinput.n = C;
    dinput.k = V;
    gemm(a.matmul, dinput, stream_);
  }
  // xf = norm(x_final) and the backout, in one pass: dx = the last block's output gradient (coefficient 1), the
  // backout block's dextra += -backout dx.
  Buffers::Block& kept = a.blocks[static_cast<size_t>(layout_.structure.backout_block)];
  residual_norm_backward({Rows{a.dx, C}, false, Rows{kept.dextra, C}, true, a.dscalars},
                         {a.dnarrow, a.x_final, a.rstd_f, nullptr}, TokenMix{}, backout_mix(), T, C,
                         a.reduction_scratch, a.reduction_scratch_floats, stream_);
}

// a.dx holds the gradient of block i's output from the blocks after it; leaves that of its input stream.
void SpeedrunModel::block_backward(int i) {
  Activations& a = *acts_;
  Buffers::Block& b = a.blocks[static_cast<size_t>(i)];
  const SpeedrunBlock& role = layout_.structure.blocks[static_cast<size_t>(i)];
  const SpeedrunScalarIndex index{layout_.config.num_blocks};
  const int T = seq_len_, C = layout_.config.channels();
  if (b.dextra != nullptr)  // the readers of this output: a skip pop, the backout
    mix_forward(Rows{a.dx, C}, ConstRows{a.dx, C}, ConstRows{b.dextra, C}, a.scalars, one(), one(), T, C, stream_);
  if (role.mlp) mlp_backward(i);
  if (role.attention) attention_backward(i);
  // x_mix = lambda_0 x_in + lambda_1 x0 and the norm of its first reader (the attention's, or the MLP's without
  // attention, whose input gradient mlp/attention_backward left in dnarrow2 / dnarrow), in one pass.
  const ResidualMixIn mix = block_lambda_mix(i);
  const ResidualNormBackwardIn norm = role.attention
                                          ? ResidualNormBackwardIn{a.dnarrow2, b.x_mix, b.rstd_attn, a.dx}
                                          : ResidualNormBackwardIn{a.dnarrow, b.x_mix, b.rstd_mlp, a.dx};
  residual_norm_backward({Rows{a.dx, C}, false, Rows{a.dx0, C}, true, a.dscalars}, norm, TokenMix{}, mix, T, C,
                         a.reduction_scratch, a.reduction_scratch_floats, stream_);
  if (role.pop_skip >= 0) {  // x_in = previous + sigmoid(skip_w) * x_out[paired block]
    const floatX* previous = i == 1 ? a.x0 : a.blocks[static_cast<size_t>(i - 1)].x_out;
    Buffers::Block& source = a.blocks[static_cast<size_t>(a.popped_from[static_cast<size_t>(i)])];
    mix_backward(Rows{nullptr, C}, false, Rows{source.dextra, C}, true, a.dscalars, ConstRows{a.dx, C},
                 ConstRows{previous, C}, ConstRows{source.x_out, C}, a.scalars, one(),
                 MixCoefficient{MixScalar::kSigmoid, index.skip_weight(role.pop_skip)}, T, C, a.reduction_scratch,
                 a.reduction_scratch_floats, stream_);
  }
}

void SpeedrunModel::mlp_backward(int i) {
  Activations& a = *acts_;
  Buffers::Block& b = a.blocks[static_cast<size_t>(i)];
  const int T = seq_len_, C = layout_.config.channels();
  const bool wgmma = fused_gemms_ == FusedGemms::kWgmma;
  if (wgmma) {  // dh = 2 relu(h) (dx W_proj) from one GEMM
    // W_proj stored (out, in) = (K, N) of dx W_proj
    wgmma_gemm_launch(WgmmaEpilogue::kReluSquaredBackward, a.dwide, nullptr, b.h, a.dx,
                      param(SpeedrunTensor::kProj, i), /*w_k_major=*/false, T, 4 * C, C, stream_);
  } else {
    GemmArgs dact;  // d relu(h)^2 (T, 4C) = dx W_proj
    dact.d = a.dwide, dact.a = a.dx, dact.b = param(SpeedrunTensor::kProj, i), dact.m = T, dact.n = 4 * C;
    dact.k = C;
    gemm(a.matmul, dact, stream_);
  }
  GemmArgs dproj;  // dW_proj (C, 4C) += dx^T relu(h)^2
  dproj.d = grad(SpeedrunTensor::kProj, i), dproj.a = a.dx, dproj.b = b.act, dproj.m = C, dproj.n = 4 * C, dproj.k = T;
  dproj.trans_a = true, dproj.beta = 1.0f;
  gemm(a.matmul, dproj, stream_);
  if (!wgmma) relu_squared_backward(a.dwide, b.h, a.dwide, static_cast<size_t>(T) * 4 * C, stream_);
  GemmArgs dxn;  // dxn (T, C) = dh W_fc^T
  dxn.d = a.dnarrow, dxn.a = a.dwide, dxn.b = param(SpeedrunTensor::kFc, i), dxn.m = T, dxn.n = C, dxn.k = 4 * C;
  dxn.trans_b = true;
  gemm(a.matmul, dxn, stream_);
  GemmArgs dfc;  // dW_fc (C, 4C) += xn^T dh
  dfc.d = grad(SpeedrunTensor::kFc, i), dfc.a = b.xn_mlp, dfc.b = a.dwide, dfc.m = C, dfc.n = 4 * C, dfc.k = T;
  dfc.trans_a = true, dfc.beta = 1.0f;
  gemm(a.matmul, dfc, stream_);
  if (layout_.structure.blocks[static_cast<size_t>(i)].attention)  // else block_backward takes dnarrow with x_mix
    rmsnorm_backward(a.dx, a.dnarrow, b.x_attn, b.rstd_mlp, T, C, /*accumulate=*/true, stream_);
}

void SpeedrunModel::attention_backward(int i) {
  Activations& a = *acts_;
  Buffers::Block& b = a.blocks[static_cast<size_t>(i)];
  const SpeedrunConfig& cfg = layout_.config;
  const SpeedrunScalarIndex index{cfg.num_blocks};
  const int T = seq_len_, C = cfg.channels(), H = cfg.num_heads, D = cfg.head_dim;
  const floatX* qkvo = param(SpeedrunTensor::kQkvo, i);
  floatX* dqkvo = grad(SpeedrunTensor::kQkvo, i);
  GemmArgs dgated;  // d y_gated (T, C) = dx W_o
  dgated.d = a.dnarrow, dgated.a = a.dx, dgated.b = qkvo + static_cast<size_t>(3) * C * C, dgated.m = T, dgated.n = C;
  dgated.k = C;
  gemm(a.matmul, dgated, stream_);
  GemmArgs dwo;  // dW_o (C, C) += dx^T y_gated
  dwo.d = dqkvo + static_cast<size_t>(3) * C * C, dwo.a = a.dx, dwo.b = b.y_gated, dwo.m = C, dwo.n = C, dwo.k = T;
  dwo.trans_a = true, dwo.beta = 1.0f;
  gemm(a.matmul, dwo, stream_);
  // The gate adds into dxn[:, 0:12] first; the QKV GEMM below accumulates on top (beta = 1).
  memset_async(a.dnarrow2, 0, static_cast<size_t>(T) * C * sizeof(floatX), stream_);
  if (uses_window_attention_kernel()) {
    // It takes d y_gated, runs the QK-norm + RoPE and the value mix backward in its stores, and leaves the gate
    // logits' gradients in the scratch.
    attention_kernel_backward(i);
    const size_t logits = static_cast<size_t>(T) * H;
    attention_gate_backward_from_logit_grads(a.dnarrow2, C, grad(SpeedrunTensor::kAttnGate, i), a.reduction_scratch,
                                             b.xn_attn, C, param(SpeedrunTensor::kAttnGate, i), T, H,
                                             a.reduction_scratch + logits, a.reduction_scratch_floats - logits,
                                             stream_);
  } else {  // the gate, the attention, the value mix and the QK-norm + RoPE backward one pass each
    attention_gate_backward(a.dnarrow, a.dnarrow2, C, grad(SpeedrunTensor::kAttnGate, i), a.dnarrow, b.y, b.xn_attn,
                            C, param(SpeedrunTensor::kAttnGate, i), T, H, D, a.reduction_scratch,
                            a.reduction_scratch_floats, stream_);
    attention_kernel_backward(i);
    const int table = layout_.structure.blocks[static_cast<size_t>(i)].value_embed;
    mix_backward(Rows{a.dqkv + 2 * C, 3 * C}, false, Rows{table >= 0 ? a.dve[table] : nullptr, C}, true, a.dscalars,
                 ConstRows{a.dqkv + 2 * C, 3 * C}, ConstRows{b.qkv + 2 * C, 3 * C},
                 ConstRows{table >= 0 ? a.ve[table] : nullptr, C}, a.scalars, identity(index.sa_lambda(i, 0)),
                 identity(index.sa_lambda(i, 1)), T, C, a.reduction_scratch, a.reduction_scratch_floats, stream_);
    qk_norm_rope_backward(a.dqkv, 3 * C, a.dqkv, 3 * C, b.qkv, 3 * C, b.rstd_qk, a.rope_cos, a.rope_sin, T, 2 * H, D,
                          stream_);
  }
  GemmArgs dxn;  // dxn (T, C) += dqkv W_qkv
  dxn.d = a.dnarrow2, dxn.a = a.dqkv, dxn.b = qkvo, dxn.m = T, dxn.n = C, dxn.k = 3 * C, dxn.beta = 1.0f;
  gemm(a.matmul, dxn, stream_);
  GemmArgs dwqkv;  // dW_qkv (3C, C) += dqkv^T xn
  dwqkv.d = dqkvo, dwqkv.a = a.dqkv, dwqkv.b = b.xn_attn, dwqkv.m = 3 * C, dwqkv.n = C, dwqkv.k = T;
  dwqkv.trans_a = true, dwqkv.beta = 1.0f;
  gemm(a.matmul, dwqkv, stream_);  // dnarrow2 = d xn_attn: block_backward takes it with x_mix's mix
}

// dy (in a.dnarrow) -> dq, dk, dv into a.dqkv (stride 3C). The window kernel takes d y_gated there and y_gated (the
// gate's logit gradients into reduction_scratch), and its dq, dk and dv are those of the raw q, k and v (the QK-norm
// and RoPE backward and the value mix's in its stores, the value embedding's gradient and the mix's scalars'
// accumulated); the simple kernel takes dy and y, and its gradients are those of the rotated q, k and mixed v.
void SpeedrunModel::attention_kernel_backward(int i) {
  Activations& a = *acts_;
  Buffers::Block& b = a.blocks[static_cast<size_t>(i)];
  const SpeedrunConfig& cfg = layout_.config;
  const int C = cfg.channels();
  const bool long_window = layout_.structure.blocks[static_cast<size_t>(i)].long_window;
  const int window = long_window ? long_window_tokens() : short_window_tokens();
  const float scale = static_cast<float>(yarn_.attn_scale());
#if !defined(LLMC_FP32)
  if (uses_window_attention_kernel()) {
    const window_attention::Problem problem{seq_len_, cfg.num_heads, a.cu_seqlens, num_docs_, window, scale};
    const window_attention::NormRopeBackward norm_rope{b.rstd_qk, a.rope_cos, a.rope_sin};
    const window_attention::OutputGate gate{b.xn_attn, C, param(SpeedrunTensor::kAttnGate, i), a.reduction_scratch};
    const SpeedrunScalarIndex index{cfg.num_blocks};
    const int table = layout_.structure.blocks[static_cast<size_t>(i)].value_embed;
    window_attention::ValueMixBackward value_mix;
    value_mix.scalars = a.scalars, value_mix.a_index = index.sa_lambda(i, 0), value_mix.b_index = index.sa_lambda(i, 1);
    value_mix.v_raw = b.qkv + 2 * C, value_mix.v_raw_stride = 3 * C;
    value_mix.ve = table >= 0 ? a.ve[table] : nullptr, value_mix.dve = table >= 0 ? a.dve[table] : nullptr;
    value_mix.partials = a.value_mix_partials, value_mix.dscalars = a.dscalars;
    window_attention::backward(a.dqkv, a.dqkv + C, a.dqkv + 2 * C, 3 * C, a.attention_delta, a.dnarrow, b.y_gated,
                               b.lse, b.qkv_rot, b.qkv_rot + C, b.qkv_rot + 2 * C, 3 * C, a.plans[long_window], problem,
                               stream_, norm_rope, gate, value_mix);
    return;
  }
#endif
  const simple_attention::Problem problem{seq_len_,  cfg.num_heads, cfg.head_dim, a.cu_seqlens,
                                          num_docs_, window,        scale};
  simple_attention::backward(a.dqkv, a.dqkv + C, a.dqkv + 2 * C, 3 * C, a.attention_delta, a.dnarrow, b.y, b.lse,
                             b.qkv_rot, b.qkv_rot + C, b.qkv_rot + 2 * C, 3 * C, problem, stream_);
}

// a.dx holds d(x0) through block 1's stream; dx0 what the lambda mixes added. Then the norm, the smear,
// the four embedding scatters and the scalar gradients into the floatX buffer.
void SpeedrunModel::input_backward() {
  Activations& a = *acts_;
  const SpeedrunConfig& cfg = layout_.config;
  const int T = seq_len_, C = cfg.channels();
  mix_forward(Rows{a.dx, C}, ConstRows{a.dx, C}, ConstRows{a.dx0, C}, a.scalars, one(), one(), T, C, stream_);
  rmsnorm_backward(a.dnarrow, a.dx, a.smeared, a.rstd0, T, C, /*accumulate=*/false, stream_);
  floatX* de = a.dwide;
  smear_backward(de, grad(SpeedrunTensor::kSmearGate), a.dscalars, a.dnarrow, a.embed_out,
                 param(SpeedrunTensor::kSmearGate), a.scalars, SpeedrunScalarIndex{cfg.num_blocks}.smear_lambda(), T, C,
                 a.reduction_scratch, a.reduction_scratch_floats, stream_);
  EmbeddingScatter<floatX> scatter;
  scatter.count = 1 + kSpeedrunValueEmbeds;
  scatter.table_grads[0] = grad(SpeedrunTensor::kEmbed);
  scatter.douts[0] = de;
  for (int k = 0; k < kSpeedrunValueEmbeds; k++) {
    scatter.table_grads[1 + k] = grad(SpeedrunTensor::kValueEmbed, k);
    scatter.douts[1 + k] = a.dve[k];
  }
  embedding_backward(scatter, a.embedding_plan, C, stream_);
  const TensorView& scalar_view = layout_.tensor(SpeedrunTensor::kScalars);
  add_fp32_grads(grads_ + scalar_view.offset, a.dscalars, static_cast<int>(scalar_view.numel), stream_);
}

void SpeedrunModel::enqueue_mean_loss(int num_slots, int result) {
  if (num_slots < 1 || num_slots > loss_slots_ || result < 0 || result > 1)
    throw std::out_of_range("enqueue_mean_loss: " + std::to_string(num_slots) + " slots into result " +
                            std::to_string(result) + " (the model has " + std::to_string(loss_slots_) +
                            " slots and 2 results)");
  acts_->loss_means.enqueue(acts_->losses, static_cast<size_t>(num_slots) * seq_len_, result, stream_);
}

double SpeedrunModel::read_mean_loss(int result) {
  if (result < 0 || result > 1) throw std::out_of_range("read_mean_loss: result " + std::to_string(result));
  return acts_->loss_means.read(result);
}

}  // namespace llmc
