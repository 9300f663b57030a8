// GPT-2 forward and backward over the layers on the device (see gpt2.h): the order of kernels is the
// algorithm, so it reads top to bottom like the model; kernels live in llmc/kernels/.
#include "llmc/model/gpt2/gpt2.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/device_arena.h"
#include "llmc/kernels/attention.cuh"
#include "llmc/kernels/classifier.cuh"
#include "llmc/kernels/encoder.cuh"
#if !defined(LLMC_FP32)
#include "llmc/kernels/flash_attention.cuh"
#endif
#include "llmc/kernels/layernorm.cuh"
#include "llmc/kernels/matmul.cuh"

namespace llmc {

// The fused tensor-core attention (never stores the T x T scores) exists for bf16 and head size 64, which
// covers every GPT-2 size; other shapes and the fp32 build use the GEMM + softmax attention.
static bool use_flash_attention(const GPT2Config& config) {
#if defined(LLMC_FP32)
  (void)config;
  return false;
#else
  return config.channels / config.num_heads == 64;
#endif
}

// Everything the passes keep for one micro-batch (N = B*T rows), plus the reusable workspaces.
struct GPT2::Activations {
  struct Layer {
    floatX *ln1, *qkv, *atty,
        *qkvr = nullptr, *att = nullptr,  // GEMM attention: per-head q,k,v and the softmax
         *attproj, *residual2, *ln2, *fch_pre, *fch_gelu, *fcproj, *residual3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
    float* lse = nullptr;  // flash attention: log-sum-exp per (b, head, t)
  };
  bool flash = false;

  DeviceArena arena;
  std::vector<Layer> layers;
  floatX *encoded, *lnf, *logits;
  float *lnf_mean, *lnf_rstd, *losses;
  // The uploaded micro-batch, one device buffer: inputs (N), targets (N), then the encoder backward's table.
  int* tokens;
  int *inputs, *targets, *encoder_table;
  // Pinned staging of what a forward uploads (the same layout), so that the upload is truly asynchronous:
  // a ring of slots, each refilled only after its last upload has read it (its event). With 2 x loss_slots
  // slots that never waits while the host runs at most one step ahead of the device (the trainer reads a
  // step's loss after enqueuing the next one).
  struct StagingSlot {
    int* host = nullptr;
    cudaEvent_t read = nullptr;
  };
  std::vector<StagingSlot> staging;
  size_t next_staging = 0;
  size_t staging_ints = 0;
  // The encoder backward's plan of the last training forward (built on the host while staging its tokens),
  // its counting-sort scratch, and the device scratch for its partial sums.
  EncoderBackwardPlan encoder_plan;
  bool has_encoder_plan = false;
  // The last upload: whether there was one, with targets; whether the last forward computed dlogits.
  bool batch_uploaded = false, uploaded_targets = false, training_forward = false;
  std::vector<int> encoder_counts;
  float* encoder_partials;
  // Step losses: device sums -> pinned host values, two results in flight (enqueue_mean_loss).
  double* loss_means;
  double* loss_host = nullptr;
  cudaEvent_t loss_ready[2] = {nullptr, nullptr};
  // backward scratch: dresidual (N,C); dwide (N, 4C) holds dfch then dqkv; dnarrow (N,C) holds dln2,
  // datty, dln1, dlnf; attention's own scratch; fp32 scratch for the deterministic reductions.
  floatX *dresidual, *dwide, *dnarrow;
  floatX *attention_scratch = nullptr, *dqkvr = nullptr, *datt = nullptr, *dvalues = nullptr;  // GEMM attention
  float* flash_delta = nullptr;                                                                  // flash attention
  float* reduction_scratch;
  size_t reduction_scratch_floats = 0;
  MatmulContext matmul;
};

GPT2::GPT2(const GPT2Config& config, int world_size, int batch_size, int seq_len, int loss_slots, cudaStream_t stream)
    : layout_(make_param_layout(config, world_size)),
      batch_size_(batch_size),
      seq_len_(seq_len),
      loss_slots_(loss_slots),
      stream_(stream) {
  if (seq_len > config.max_seq_len)
    throw std::invalid_argument("sequence length " + std::to_string(seq_len) + " exceeds the model's maximum " +
                                std::to_string(config.max_seq_len));
  const int B = batch_size, T = seq_len, C = config.channels, NH = config.num_heads, L = config.num_layers;
  const int Vp = config.padded_vocab_size;
  const size_t N = static_cast<size_t>(B) * T;
  acts_ = std::make_unique<Activations>();
  Activations& a = *acts_;
  a.flash = use_flash_attention(config);
  DeviceArena& arena = a.arena;
  arena.request(&params_, layout_.total_size);
  arena.request(&grads_, layout_.total_size);
  a.layers.resize(L);
  for (Activations::Layer& l : a.layers) {
    arena.request(&l.ln1, N * C);
    arena.request(&l.ln1_mean, N);
    arena.request(&l.ln1_rstd, N);
    arena.request(&l.qkv, N * 3 * C);
    if (a.flash) {
      arena.request(&l.lse, static_cast<size_t>(B) * NH * T);
    } else {
      arena.request(&l.qkvr, N * 3 * C);
      arena.request(&l.att, static_cast<size_t>(B) * NH * T * T);
    }
    arena.request(&l.atty, N * C);
    arena.request(&l.attproj, N * C);
    arena.request(&l.residual2, N * C);
    arena.request(&l.ln2, N * C);
    arena.request(&l.ln2_mean, N);
    arena.request(&l.ln2_rstd, N);
    arena.request(&l.fch_pre, N * 4 * C);
    arena.request(&l.fch_gelu, N * 4 * C);
    arena.request(&l.fcproj, N * C);
    arena.request(&l.residual3, N * C);
  }
  arena.request(&a.encoded, N * C);
  arena.request(&a.lnf, N * C);
  arena.request(&a.lnf_mean, N);
  arena.request(&a.lnf_rstd, N);
  arena.request(&a.logits, N * Vp);
  arena.request(&a.losses, N * static_cast<size_t>(loss_slots));
  a.staging_ints = 2 * N + encoder_backward_table_ints(static_cast<int>(N));
  arena.request(&a.tokens, a.staging_ints);
  arena.request(&a.encoder_partials, encoder_backward_partial_floats(static_cast<int>(N), C));
  arena.request(&a.loss_means, 2);
  arena.request(&a.dresidual, N * C);
  arena.request(&a.dwide, N * 4 * C);
  arena.request(&a.dnarrow, N * C);
  if (a.flash) {
    arena.request(&a.flash_delta, static_cast<size_t>(B) * NH * T);
  } else {
    arena.request(&a.attention_scratch, N * C);
    arena.request(&a.dqkvr, N * 3 * C);
    arena.request(&a.datt, static_cast<size_t>(B) * NH * T * T);
    arena.request(&a.dvalues, N * C);
  }
  a.reduction_scratch_floats = std::max({matmul_backward_scratch_floats(static_cast<int>(N), std::max(4 * C, Vp)),
                                         layernorm_backward_scratch_floats(static_cast<int>(N), C)});
  arena.request(&a.reduction_scratch, a.reduction_scratch_floats);
  arena.allocate("the model (parameters, gradients, activations for B=" + std::to_string(B) +
                 " T=" + std::to_string(T) + ")");
  activation_bytes_ = arena.bytes() - 2 * layout_.total_size * sizeof(floatX);
  a.inputs = a.tokens;
  a.targets = a.tokens + N;
  a.encoder_table = a.tokens + 2 * N;
  a.staging.resize(2 * static_cast<size_t>(std::max(loss_slots, 1)));
  for (Activations::StagingSlot& slot : a.staging) {
    CUDA_CHECK(cudaMallocHost(&slot.host, a.staging_ints * sizeof(int)));
    CUDA_CHECK(cudaEventCreateWithFlags(&slot.read, cudaEventDisableTiming));
  }
  CUDA_CHECK(cudaMallocHost(&a.loss_host, 2 * sizeof(double)));
  for (cudaEvent_t& event : a.loss_ready) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  CUDA_CHECK(cudaMemsetAsync(params_, 0, layout_.total_size * sizeof(floatX), stream_));
  // Gradients: the backward's first micro-step overwrites every tensor, and nothing ever writes the padding
  // between them, which stays zero from here on (the optimizer reduces and reads whole buckets).
  CUDA_CHECK(cudaMemsetAsync(grads_, 0, layout_.total_size * sizeof(floatX), stream_));
  // The deterministic reductions' counters must start at zero; every launch leaves them zero.
  CUDA_CHECK(cudaMemsetAsync(a.reduction_scratch, 0, a.reduction_scratch_floats * sizeof(float), stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

GPT2::~GPT2() {
  CUDA_REPORT(cudaStreamSynchronize(stream_));
  for (Activations::StagingSlot& slot : acts_->staging) {
    CUDA_REPORT(cudaEventDestroy(slot.read));
    CUDA_REPORT(cudaFreeHost(slot.host));
  }
  for (cudaEvent_t event : acts_->loss_ready) CUDA_REPORT(cudaEventDestroy(event));
  CUDA_REPORT(cudaFreeHost(acts_->loss_host));
}

void GPT2::upload_params(const std::vector<float>& host_params) {
  if (host_params.size() != layout_.total_size)
    throw std::invalid_argument("upload_params: " + std::to_string(host_params.size()) + " values for a buffer of " +
                                std::to_string(layout_.total_size));
  std::vector<floatX> converted(host_params.size());
  for (size_t i = 0; i < host_params.size(); i++) converted[i] = from_float<floatX>(host_params[i]);
  CUDA_CHECK(cudaMemcpyAsync(params_, converted.data(), converted.size() * sizeof(floatX), cudaMemcpyHostToDevice,
                             stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

static std::vector<float> download(const floatX* device, size_t count, cudaStream_t stream) {
  std::vector<floatX> raw(count);
  CUDA_CHECK(cudaMemcpyAsync(raw.data(), device, count * sizeof(floatX), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> result(count);
  for (size_t i = 0; i < count; i++) result[i] = to_float(raw[i]);
  return result;
}

void GPT2::set_gemm_algo_selection(GemmAlgoSelection selection) { acts_->matmul.set_selection(selection); }

std::string GPT2::bucket_name(int bucket) const {
  if (bucket == 0) return "embeddings";
  if (bucket == layout_.final_norm_bucket()) return "lm_head+final_norm";
  return "layer " + std::to_string(bucket - 1);
}

std::vector<float> GPT2::download_params() const { return download(params_, layout_.total_size, stream_); }
std::vector<float> GPT2::download_grads() const { return download(grads_, layout_.total_size, stream_); }
std::vector<float> GPT2::download_logits() const {
  return download(acts_->logits, size_t(batch_size_) * seq_len_ * layout_.config.padded_vocab_size, stream_);
}

// Copies the micro-batch (and, for a training forward, the encoder backward's plan) into the next pinned
// staging slot and uploads it with one copy. The slot's previous upload has completed long before in a
// trainer that stays at most one step ahead; if not, the host waits here for it.
void GPT2::upload_batch(const int* inputs_host, const int* targets_host, bool training) {
  Activations& a = *acts_;
  const int N = batch_size_ * seq_len_;
  Activations::StagingSlot& slot = a.staging[a.next_staging];
  a.next_staging = (a.next_staging + 1) % a.staging.size();
  wait_unless_complete(slot.read);
  std::copy_n(inputs_host, N, slot.host);
  size_t upload = static_cast<size_t>(N);
  if (targets_host != nullptr) {
    std::copy_n(targets_host, N, slot.host + N);
    upload = 2 * static_cast<size_t>(N);
  }
  a.has_encoder_plan = false;
  a.batch_uploaded = true;
  a.uploaded_targets = targets_host != nullptr;
  if (training) {
    a.encoder_plan = build_encoder_backward_plan(inputs_host, N, layout_.config.vocab_size, slot.host + 2 * N,
                                                 a.encoder_counts);
    a.has_encoder_plan = true;
    upload = 2 * static_cast<size_t>(N) + encoder_backward_table_used(a.encoder_plan);
  }
  memcpy_async(a.tokens, slot.host, upload * sizeof(int), cudaMemcpyHostToDevice, stream_);
  CUDA_CHECK(cudaEventRecord(slot.read, stream_));
}

void GPT2::forward_uploaded(int loss_slot, bool compute_dlogits, float dloss, const BucketHook& before_bucket_use) {
  Activations& a = *acts_;
  const GPT2Config& cfg = layout_.config;
  const int B = batch_size_, T = seq_len_, C = cfg.channels, NH = cfg.num_heads, L = cfg.num_layers;
  const int N = B * T;
  if (a.uploaded_targets && (loss_slot < 0 || loss_slot >= loss_slots_))
    throw std::out_of_range("forward: loss slot " + std::to_string(loss_slot) + " outside [0, " +
                            std::to_string(loss_slots_) + ")");
  auto use_bucket = [&](int bucket) {
    if (before_bucket_use) before_bucket_use(bucket);
  };
  if (!a.batch_uploaded) throw std::logic_error("GPT2: a forward with no batch uploaded (upload_batch)");
  if (compute_dlogits && !a.has_encoder_plan)
    throw std::logic_error("GPT2: a training forward of a batch uploaded without its plan");
  a.training_forward = compute_dlogits;

  use_bucket(0);
  encoder_forward(a.encoded, a.inputs, param(TensorKind::kWte), param(TensorKind::kWpe), B, T, C, stream_);
  for (int l = 0; l < L; l++) {
    Activations::Layer& act = a.layers[l];
    use_bucket(GPT2Layout::layer_bucket(l));
    // ln1 normalises the residual stream: the embeddings, or the previous layer's residual3, which is
    // formed here from residual2 + fcproj in the same pass.
    if (l == 0) {
      layernorm_forward(act.ln1, act.ln1_mean, act.ln1_rstd, a.encoded, param(TensorKind::kLn1w, l),
                        param(TensorKind::kLn1b, l), N, C, stream_);
    } else {
      const Activations::Layer& prev = a.layers[l - 1];
      fused_residual_layernorm_forward(prev.residual3, act.ln1, act.ln1_mean, act.ln1_rstd, prev.residual2,
                                       prev.fcproj, param(TensorKind::kLn1w, l), param(TensorKind::kLn1b, l), N, C,
                                       stream_);
    }
    matmul_forward(a.matmul, act.qkv, nullptr, act.ln1, param(TensorKind::kQkvw, l), param(TensorKind::kQkvb, l), N, C,
                   3 * C, stream_);
#if !defined(LLMC_FP32)
    if (a.flash)
      flash_attention_forward(act.atty, act.lse, act.qkv, B, T, C, NH, stream_);
    else
#endif
      attention_forward(a.matmul, act.atty, act.qkvr, act.att, a.attention_scratch, act.qkv, B, T, C, NH, stream_);
    matmul_forward(a.matmul, act.attproj, nullptr, act.atty, param(TensorKind::kAttprojw, l),
                   param(TensorKind::kAttprojb, l), N, C, C, stream_);
    const floatX* residual_in = l == 0 ? a.encoded : a.layers[l - 1].residual3;
    fused_residual_layernorm_forward(act.residual2, act.ln2, act.ln2_mean, act.ln2_rstd, residual_in, act.attproj,
                                     param(TensorKind::kLn2w, l), param(TensorKind::kLn2b, l), N, C, stream_);
    matmul_forward(a.matmul, act.fch_gelu, act.fch_pre, act.ln2, param(TensorKind::kFcw, l), param(TensorKind::kFcb, l),
                   N, C, 4 * C, stream_);
    matmul_forward(a.matmul, act.fcproj, nullptr, act.fch_gelu, param(TensorKind::kFcprojw, l),
                   param(TensorKind::kFcprojb, l), N, 4 * C, C, stream_);
  }
  use_bucket(layout_.final_norm_bucket());
  const Activations::Layer& last = a.layers[L - 1];
  fused_residual_layernorm_forward(last.residual3, a.lnf, a.lnf_mean, a.lnf_rstd, last.residual2, last.fcproj,
                                   param(TensorKind::kLnfw), param(TensorKind::kLnfb), N, C, stream_);
  // Tied LM head: logits = lnf @ wte^T over all Vp rows (padded rows are trained to stay irrelevant).
  matmul_forward(a.matmul, a.logits, nullptr, a.lnf, param(TensorKind::kWte), nullptr, N, C, cfg.padded_vocab_size,
                 stream_);
  if (a.uploaded_targets)
    fused_classifier(a.logits, a.losses + static_cast<size_t>(loss_slot) * N, a.targets, dloss, N, cfg.vocab_size,
                     cfg.padded_vocab_size, compute_dlogits, stream_);
}

void GPT2::backward(bool first_micro_step, const BucketHook& on_bucket_ready) {
  Activations& a = *acts_;
  if (!a.training_forward)
    throw std::logic_error("backward: the last forward did not prepare one (compute_dlogits was false)");
  const GPT2Config& cfg = layout_.config;
  const int B = batch_size_, T = seq_len_, C = cfg.channels, NH = cfg.num_heads, L = cfg.num_layers;
  const int N = B * T;
  float* scratch = a.reduction_scratch;
  const size_t scratch_floats = a.reduction_scratch_floats;
  auto bucket_ready = [&](int bucket) {
    if (on_bucket_ready) on_bucket_ready(bucket);
  };
  // The first micro-step's writers overwrite the gradients (no zeroing pass), later ones accumulate.
  const bool accumulate = !first_micro_step;

  // LM head: logits now hold dlogits. dwte (+)= dlogits^T @ lnf, dlnf = dlogits @ wte.
  matmul_backward(a.matmul, a.dnarrow, grad(TensorKind::kWte), nullptr, a.logits, a.lnf, param(TensorKind::kWte),
                  nullptr, N, C, cfg.padded_vocab_size, accumulate, scratch, scratch_floats, stream_);
  // The final LayerNorm starts the residual stream's gradient: it writes dresidual, the others add to it.
  const Activations::Layer& last = a.layers[L - 1];
  layernorm_backward(a.dresidual, grad(TensorKind::kLnfw), grad(TensorKind::kLnfb), a.dnarrow, last.residual3,
                     param(TensorKind::kLnfw), a.lnf_mean, a.lnf_rstd, N, C, /*accumulate_dinp=*/false, accumulate,
                     scratch, scratch_floats, stream_);
  bucket_ready(layout_.final_norm_bucket());

  for (int l = L - 1; l >= 0; l--) {
    const Activations::Layer& act = a.layers[l];
    // a.dresidual is d loss / d residual3 of this layer (= d residual2 too, as residual3 = residual2 + fcproj).
    floatX* dfch = a.dwide;
    matmul_backward(a.matmul, dfch, grad(TensorKind::kFcprojw, l), grad(TensorKind::kFcprojb, l), a.dresidual,
                    act.fch_gelu, param(TensorKind::kFcprojw, l), act.fch_pre, N, 4 * C, C, accumulate, scratch,
                    scratch_floats, stream_);
    floatX* dln2 = a.dnarrow;
    matmul_backward(a.matmul, dln2, grad(TensorKind::kFcw, l), grad(TensorKind::kFcb, l), dfch, act.ln2,
                    param(TensorKind::kFcw, l), nullptr, N, C, 4 * C, accumulate, scratch, scratch_floats, stream_);
    layernorm_backward(a.dresidual, grad(TensorKind::kLn2w, l), grad(TensorKind::kLn2b, l), dln2, act.residual2,
                       param(TensorKind::kLn2w, l), act.ln2_mean, act.ln2_rstd, N, C, true, accumulate, scratch,
                       scratch_floats, stream_);
    floatX* datty = a.dnarrow;
    matmul_backward(a.matmul, datty, grad(TensorKind::kAttprojw, l), grad(TensorKind::kAttprojb, l), a.dresidual,
                    act.atty, param(TensorKind::kAttprojw, l), nullptr, N, C, C, accumulate, scratch, scratch_floats,
                    stream_);
    floatX* dqkv = a.dwide;
#if !defined(LLMC_FP32)
    if (a.flash)
      flash_attention_backward(dqkv, a.flash_delta, datty, act.atty, act.qkv, act.lse, B, T, C, NH, stream_);
    else
#endif
      attention_backward(a.matmul, dqkv, a.dqkvr, a.datt, a.dvalues, datty, act.qkvr, act.att, B, T, C, NH, stream_);
    floatX* dln1 = a.dnarrow;
    matmul_backward(a.matmul, dln1, grad(TensorKind::kQkvw, l), grad(TensorKind::kQkvb, l), dqkv, act.ln1,
                    param(TensorKind::kQkvw, l), nullptr, N, C, 3 * C, accumulate, scratch, scratch_floats, stream_);
    const floatX* residual_in = l == 0 ? a.encoded : a.layers[l - 1].residual3;
    layernorm_backward(a.dresidual, grad(TensorKind::kLn1w, l), grad(TensorKind::kLn1b, l), dln1, residual_in,
                       param(TensorKind::kLn1w, l), act.ln1_mean, act.ln1_rstd, N, C, true, accumulate, scratch,
                       scratch_floats, stream_);
    bucket_ready(GPT2Layout::layer_bucket(l));
  }
  // dwte accumulates onto the LM head's gradient; dwpe is written here first.
  encoder_backward(grad(TensorKind::kWte), grad(TensorKind::kWpe), a.dresidual, a.encoder_table, a.encoder_plan, B,
                   T, cfg.max_seq_len, C, accumulate, a.encoder_partials, stream_);
  bucket_ready(0);
}

void GPT2::enqueue_mean_loss(int num_slots, int result) {
  if (num_slots < 1 || num_slots > loss_slots_ || result < 0 || result > 1)
    throw std::out_of_range("enqueue_mean_loss: " + std::to_string(num_slots) + " slots into result " +
                            std::to_string(result) + " (the model has " + std::to_string(loss_slots_) +
                            " slots and 2 results)");
  Activations& a = *acts_;
  mean_of_losses(a.loss_means + result, a.losses, static_cast<size_t>(num_slots) * batch_size_ * seq_len_, stream_);
  memcpy_async(a.loss_host + result, a.loss_means + result, sizeof(double), cudaMemcpyDeviceToHost, stream_);
  CUDA_CHECK(cudaEventRecord(a.loss_ready[result], stream_));
}

double GPT2::read_mean_loss(int result) {
  if (result < 0 || result > 1) throw std::out_of_range("read_mean_loss: result " + std::to_string(result));
  CUDA_CHECK(cudaEventSynchronize(acts_->loss_ready[result]));
  return acts_->loss_host[result];
}

}  // namespace llmc
