// The 2026-07-17 record's forward and backward on the device (see modded89_model.h): the kernels in the order
// of SPEEDRUN89.md sections 1-3 (the step numbers below are its; the backward reads them bottom up), its
// double-precision oracle
// test/reference/reference_modded89.cpp. Attention runs the simple window kernel in both builds for now (the
// paired heads view its rows as [2T, H/2, D]); the fast kernel, the FP8 head and the fusions come later.
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/device_arena.h"
#include "llmc/data/bigram_hash.h"
#include "llmc/kernels/bigram_sign.cuh"
#include "llmc/kernels/convert.cuh"
#include "llmc/kernels/dc_attention.cuh"
#include "llmc/kernels/embedding.cuh"
#include "llmc/kernels/fp8_head.cuh"
#include "llmc/kernels/gate_mlp_output.cuh"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/head_gate.cuh"
#include "llmc/kernels/matmul.cuh"
#include "llmc/kernels/qk_norm_pair_rope.cuh"
#include "llmc/kernels/qk_norm_rope.cuh"
#include "llmc/kernels/relu_squared.cuh"
#include "llmc/kernels/wgmma_gemm.cuh"
#include "llmc/kernels/residual_mix.cuh"
#include "llmc/kernels/residual_norm.cuh"
#include "llmc/kernels/rmsnorm.cuh"
#include "llmc/kernels/scalar_vector.cuh"
#include "llmc/kernels/simple_window_attention.cuh"
#include "llmc/kernels/smear_gate.cuh"
#include "llmc/kernels/token_mix.cuh"
#include "llmc/kernels/value_embed_gate.cuh"
#include "llmc/kernels/window_attention.cuh"
#include "llmc/kernels/xsa.cuh"
#include "llmc/model/modded89/modded89_model.h"
#include "llmc/tokenizer/bpe_vocab.h"

namespace llmc {

namespace {

constexpr float kMuddScale = 0.1f;                  // MUDD_k = 0.1 (lin(gelu(lin(x))) + b)

using Rows = MixRows<floatX>;
using ConstRows = MixRows<const floatX>;
MixCoefficient one() {
  return MixCoefficient{MixScalar::kOne, -1};
}
MixCoefficient identity(int index) {
  return MixCoefficient{MixScalar::kIdentity, index};
}
// The residual lambdas r and p enter the record's sublayers as bf16 copies (`resid_lambdas[:, 0].bfloat16()`).
MixCoefficient bf16_copy(int index) {
  return MixCoefficient{MixScalar::kBf16Copy, index};
}

// The fast attention kernel where this build has it for the model's heads, else the simple one.
bool window_attention_kernel_fits(const Modded89Config& config) { return window_attention_fits(config.head_dim); }

// Device bytes outside the arena: the two embedding backward plans (tokens for embed and the value tables, hashes
// for the bigram table).
size_t embedding_plan_bytes(const Modded89Config& config, int seq_len) {
  return 2 * EmbeddingBackwardPlan::device_bytes(seq_len, config.channels());
}

// The two RoPE tables (cos and sin) of `positions` rows.
size_t rope_table_bytes(const Modded89Config& config, int positions) {
  return 2 * static_cast<size_t>(positions) * config.rotary_pairs() * sizeof(floatX);
}

// A gate MLP's per-token outputs: rows of `columns` values.
struct GateRows {
  const floatX* rows = nullptr;
  int columns = 0;
};

// The streams of a token mix over rows of C: (rows, gate column or -1).
TokenMix token_mix(GateRows gate, std::initializer_list<std::pair<const floatX*, int>> streams, int C) {
  TokenMix mix;
  mix.gate = gate.rows;
  mix.gate_stride = gate.columns;
  for (const auto& [rows, column] : streams) {
    TokenMixStream& s = mix.streams[mix.count++];
    s.rows = rows;
    s.stride = C;
    s.gate_column = column;
  }
  return mix;
}

// A forward's mix from row `first` on: its gate's rows and every stream's.
TokenMix from_row(TokenMix mix, int first) {
  if (mix.gate != nullptr) mix.gate += static_cast<size_t>(first) * mix.gate_stride;
  for (int k = 0; k < mix.count; k++) mix.streams[k].rows += static_cast<size_t>(first) * mix.streams[k].stride;
  return mix;
}

// A stream of a token mix's backward: its rows and gate column as in the forward, where its gradient goes.
struct GradStream {
  const floatX* rows = nullptr;
  int column = -1;
  floatX* grad = nullptr;  // null: none (a gated stream still gives its gate's gradient)
  bool accumulate = true;
};

TokenMix token_mix_grads(GateRows gate, float* dgate, std::initializer_list<GradStream> streams, int C) {
  TokenMix mix;
  mix.gate = gate.rows;
  mix.gate_stride = gate.columns;
  mix.dgate = dgate;
  for (const GradStream& g : streams) {
    TokenMixStream& s = mix.streams[mix.count++];
    s.rows = g.rows;
    s.stride = C;
    s.gate_column = g.column;
    s.grad = g.grad;
    s.grad_stride = C;
    s.accumulate = g.accumulate;
  }
  return mix;
}

}  // namespace

// The device buffers of one sequence of T tokens, carved from one arena.
struct Modded89Model::Buffers {
  struct Layer {
    floatX* x_in = nullptr;  // the stream entering the layer (after the skip add at layer 6)
    floatX* skip = nullptr;  // layer 6: sigmoid(skip_lambda) cache3
    floatX *xn_attn = nullptr, *qk_raw = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *y = nullptr;
    float *rstd_attn = nullptr, *rstd_q = nullptr, *rstd_k = nullptr, *lse = nullptr;
    floatX *dc_weights = nullptr, *y_dc = nullptr;  // layer 10
    float* dc_lse = nullptr;
    floatX *y_xsa = nullptr, *y_gated = nullptr;  // aliases of the previous output where absent
    floatX *attn_out = nullptr, *x_attn = nullptr;
    floatX *aux_v = nullptr, *x_pre = nullptr;  // layer 10: MUDD0's value input and its stream before attention
    floatX *xn_mlp = nullptr, *pre = nullptr, *post = nullptr, *mlp_out = nullptr, *x_out = nullptr;
    float* rstd_mlp = nullptr;
  };
  // A gate or MUDD MLP: out = s (gelu(x w1^T) w2^T + b2), all columns of w2 (41 or 14).
  struct SmallMlp {
    floatX *hidden_pre = nullptr, *hidden = nullptr, *out_raw = nullptr, *out = nullptr;
    int columns = 0;
    GateRows gate() const { return GateRows{out, columns}; }
  };
  Layer layers[kModded89Layers];
  SmallMlp mlps[4];  // gate0 (G0), gate1 (G1), mudd0, mudd1
  int *inputs = nullptr, *targets = nullptr, *hashes = nullptr, *cu_seqlens = nullptr, *cu_rows = nullptr;
  int *doc_start = nullptr, *prefix_of = nullptr;
  MtpLossWeights* loss_weights = nullptr;  // the training loss's weights in force (set_loss_weights), read by its kernel
  floatX *signs = nullptr, *e = nullptr, *smeared = nullptr, *x0 = nullptr, *bigram_rows = nullptr, *b = nullptr;
  floatX* ve[kModded89ValueEmbeds] = {};
  floatX *x_start = nullptr, *x_final = nullptr, *xf = nullptr, *z = nullptr;
  float *rstd0 = nullptr, *rstd_f = nullptr, *losses = nullptr;  // losses: loss_slots x T
  floatX *rope_cos = nullptr, *rope_sin = nullptr;
  float* rope_freq = nullptr;
  float* fp32_params = nullptr;      // the layout's fp32 tensors, scalars .. gate scale, in layout order
  floatX* scaled_weights = nullptr;  // one layer's l0 W_q, l0 W_k, l0 W_v, l1 W_o (4C x C), rebuilt per use
  floatX* accum_grads = nullptr;     // a micro-step's gradients after the first (loss_slots > 1), layout order
  // The backward's: the running stream gradient and those of the streams several layers read (x0, the bigram
  // rows, caches 0, 3, 7, 9, the value-embedding rows), added in when the backward reaches their producer.
  floatX *dx = nullptr, *d_x0 = nullptr, *d_b = nullptr, *d_cache0 = nullptr, *d_cache3 = nullptr;
  floatX *d_cache7 = nullptr, *d_cache9 = nullptr;
  floatX* d_ve[kModded89ValueEmbeds] = {};
  floatX *dn = nullptr, *d_branch = nullptr, *d_wide = nullptr, *dy = nullptr;
  floatX *dq = nullptr, *dk = nullptr, *dv = nullptr, *d_qk_raw = nullptr, *dx_pre = nullptr;
  floatX *d_hidden = nullptr, *d_mlp_raw = nullptr, *d_weights = nullptr, *d_embed = nullptr;
  float* d_gates[4] = {};  // fp32 gradients of G0, G1, mu, mu' (each column written by its one user)
  float *dw1 = nullptr, *dw2 = nullptr, *attention_delta = nullptr, *dc_delta = nullptr;
  float *d_fp32 = nullptr, *scratch = nullptr;
  size_t scratch_floats = 0;
  std::unique_ptr<EmbeddingBackwardPlan> token_plan, hash_plan;
  // FP8 head only: the workspace's memory (fp8_head_workspace_bytes).
  unsigned char* fp8_head_memory = nullptr;
  std::unique_ptr<Fp8HeadWorkspace> fp8_head;  // over fp8_head_memory; null for the bf16 head
  unsigned char* fp8_mlp_memory = nullptr;     // FP8 MLP only: Modded89Fp8Mlp::bytes
  std::unique_ptr<Modded89Fp8Mlp> fp8_mlp;     // over fp8_mlp_memory; null for the bf16 MLP
  // Pinned staging of a batch's host arrays (inputs, targets, hashes, document starts, cu_seqlens, cu_rows),
  // refilled only once the stream has taken the previous batch (staging_free): no wait for the device.
  int* staging = nullptr;
  cudaEvent_t staging_free = nullptr;
  int* attention_plans[4] = {};  // the fast kernel's (window_attention_kernel_fits): short, long; paired short, long
  static size_t staging_ints(int T) { return 4 * static_cast<size_t>(T) + 2 * (static_cast<size_t>(T) + 1); }
  size_t fp32_count = 0;
  DeviceArena arena;
  MatmulContext matmul;

  void request(floatX** params, floatX** grads, const Modded89Layout& layout, int T, int loss_slots,
               Modded89Head head, Modded89Mlp mlp);
  void request_backward(const Modded89Layout& layout, int T);
  void set_aliases(const Modded89Layout& layout);
};

void Modded89Model::Buffers::request(floatX** params, floatX** grads, const Modded89Layout& layout, int seq_len,
                                     int loss_slots, Modded89Head head, Modded89Mlp mlp) {
  const Modded89Config& config = layout.config;
  const size_t T = static_cast<size_t>(seq_len), C = static_cast<size_t>(config.channels()),
               H = static_cast<size_t>(config.num_heads), V = static_cast<size_t>(config.vocab_size),
               m = static_cast<size_t>(config.mudd_hidden);
  arena.request(params, layout.total_size);
  arena.request(grads, layout.total_size);
  for (int i = 0; i < kModded89Layers; i++) {
    const Modded89Layer& role = layout.structure.layers[static_cast<size_t>(i)];
    Layer& l = layers[i];
    if (i == layout.structure.skip_to) {
      arena.request(&l.skip, T * C);
      arena.request(&l.x_in, T * C);
    }
    if (role.attention) {
      for (floatX** buffer : {&l.xn_attn, &l.q, &l.k, &l.v, &l.y, &l.attn_out, &l.x_attn}) arena.request(buffer, T * C);
      arena.request(&l.qk_raw, 2 * T * C);
      arena.request(&l.rstd_attn, T);
      for (float** buffer : {&l.rstd_q, &l.rstd_k, &l.lse}) arena.request(buffer, H * T);
      if (role.dc) {
        arena.request(&l.dc_weights, 2 * H * T);
        arena.request(&l.y_dc, T * C);
        arena.request(&l.dc_lse, dc_lse_floats(seq_len, config.num_heads));
      }
      if (role.xsa.present()) arena.request(&l.y_xsa, T * C);
      if (role.output_gate.present()) arena.request(&l.y_gated, T * C);
      if (role.mudd) {
        arena.request(&l.aux_v, T * C);
        arena.request(&l.x_pre, T * C);
      }
    }
    for (floatX** buffer : {&l.xn_mlp, &l.mlp_out, &l.x_out}) arena.request(buffer, T * C);
    arena.request(&l.pre, 4 * T * C);
    arena.request(&l.post, 4 * T * C);
    arena.request(&l.rstd_mlp, T);
  }
  const int columns[4] = {kModded89GateColumns, kModded89GateColumns, kModded89MuddColumns, kModded89MuddColumns};
  for (int k = 0; k < 4; k++) {
    mlps[k].columns = columns[k];
    arena.request(&mlps[k].hidden_pre, T * m);
    arena.request(&mlps[k].hidden, T * m);
    arena.request(&mlps[k].out_raw, T * columns[k]);
    arena.request(&mlps[k].out, T * columns[k]);
  }
  for (int** buffer : {&inputs, &targets, &hashes, &doc_start}) arena.request(buffer, T);
  arena.request(&cu_seqlens, T + 1);
  arena.request(&cu_rows, T + 1);
  arena.request(&prefix_of, V);
  arena.request(&loss_weights, 1);
  arena.request(&signs, static_cast<size_t>(kBigramSignRows) * C);
  for (floatX** buffer : {&e, &smeared, &x0, &bigram_rows, &b, &x_start, &x_final, &xf}) arena.request(buffer, T * C);
  for (floatX*& table : ve) arena.request(&table, T * C);
  arena.request(&z, T * V);
  for (float** buffer : {&rstd0, &rstd_f}) arena.request(buffer, T);
  arena.request(&losses, static_cast<size_t>(loss_slots) * T);
  if (loss_slots > 1) arena.request(&accum_grads, layout.total_size);
  const size_t pairs = static_cast<size_t>(config.rotary_pairs());
  arena.request(&rope_cos, 2 * T * pairs);
  arena.request(&rope_sin, 2 * T * pairs);
  arena.request(&rope_freq, pairs);
  const TensorView& first = layout.find(modded89_tensor_name(Modded89Tensor::kScalars));
  const TensorView& last = layout.find(modded89_tensor_name(Modded89Tensor::kGateScale));
  fp32_count = last.offset + last.numel - first.offset;
  arena.request(&fp32_params, fp32_count);
  arena.request(&scaled_weights, 4 * C * C);
#if !defined(LLMC_FP32)
  if (window_attention_kernel_fits(config))
    for (int p = 0; p < 4; p++)
      arena.request(&attention_plans[p], window_attention::plan_ints((p < 2 ? 1 : 2) * seq_len));
#endif
  if (head == Modded89Head::kFp8) {
    arena.request(&fp8_head_memory, fp8_head_workspace_bytes(seq_len, config.channels(), config.vocab_size));
  }
  if (mlp == Modded89Mlp::kFp8)
    arena.request(&fp8_mlp_memory, Modded89Fp8Mlp::bytes(seq_len, config.channels(), kModded89Layers));
  request_backward(layout, seq_len);
}

void Modded89Model::Buffers::request_backward(const Modded89Layout& layout, int seq_len) {
  const Modded89Config& config = layout.config;
  const size_t T = static_cast<size_t>(seq_len), C = static_cast<size_t>(config.channels()),
               H = static_cast<size_t>(config.num_heads), m = static_cast<size_t>(config.mudd_hidden);
  for (floatX** buffer : {&dx, &d_x0, &d_b, &d_cache0, &d_cache3, &d_cache7, &d_cache9, &dn, &d_branch, &dy, &dq,
                           &dk, &dv, &dx_pre, &d_embed})
    arena.request(buffer, T * C);
  for (floatX*& table : d_ve) arena.request(&table, T * C);
  arena.request(&d_wide, 4 * T * C);
  arena.request(&d_qk_raw, 2 * T * C);
  arena.request(&d_hidden, T * m);
  arena.request(&d_mlp_raw, T * kModded89GateColumns);
  arena.request(&d_weights, 4 * C * C);
  for (int k = 0; k < 4; k++) arena.request(&d_gates[k], T * static_cast<size_t>(mlps[k].columns));
  for (float** buffer : {&dw1, &dw2, &attention_delta, &dc_delta}) arena.request(buffer, T * H);
  arena.request(&d_fp32, fp32_count);
  scratch_floats = std::max({mix_backward_scratch_floats(seq_len, 2 * config.channels()),
                             mix_backward_scratch_floats(2 * config.channels(), config.channels()),
                             smear_backward_scratch_floats(seq_len),
                             value_embed_gate_backward_scratch_floats(seq_len, config.num_heads),
                             residual_norm_backward_scratch_floats(seq_len)});
  arena.request(&scratch, scratch_floats);
}

// Where an optional stage is absent its output is its input: the attention's y through DC, XSA and the gate;
// the stream entering each layer is the previous layer's output (x_start for layer 0) unless it has a skip add.
void Modded89Model::Buffers::set_aliases(const Modded89Layout& layout) {
  floatX* previous = x_start;
  for (int i = 0; i < kModded89Layers; i++) {
    const Modded89Layer& role = layout.structure.layers[static_cast<size_t>(i)];
    Layer& l = layers[i];
    if (l.x_in == nullptr) l.x_in = previous;
    if (role.attention) {
      if (l.y_dc == nullptr) l.y_dc = l.y;
      if (l.y_xsa == nullptr) l.y_xsa = l.y_dc;
      if (l.y_gated == nullptr) l.y_gated = l.y_xsa;
    } else {
      l.x_attn = l.x_in;
    }
    previous = l.x_out;
  }
}

MtpLossWeights modded89_initial_loss_weights() {
  MtpLossWeights weights;
  weights.tokens = 3;
  weights.next[0] = 1.0f;
  weights.next[1] = 0.5f;
  weights.next[2] = 0.25f;
  weights.prefix = 0.25f;
  return weights;
}

Modded89Model::Modded89Model(const Modded89Config& config, int world_size, int seq_len, int loss_slots,
                             cudaStream_t stream, int bos_token, Modded89Head head, Modded89Mlp mlp,
                             FusedGemms fused_gemms)
    : layout_(make_modded89_layout(config, world_size)),
      allocated_seq_len_(seq_len),
      seq_len_(seq_len),
      loss_slots_(loss_slots),
      bos_token_(bos_token),
      head_(head),
      mlp_(mlp),
      fused_gemms_(fused_gemms),
      stream_(stream),
      loss_weights_(modded89_initial_loss_weights()) {
  if (seq_len < 1 || seq_len > config.max_seq_len)
    throw std::invalid_argument("modded89 model: sequence length " + std::to_string(seq_len) + " outside [1, " +
                                std::to_string(config.max_seq_len) + "] (the model's maximum)");
  if (loss_slots < 1) throw std::invalid_argument("modded89 model: loss_slots must be at least 1");
  if (fused_gemms == FusedGemms::kWgmma) require_wgmma_gemms_here(config.channels());
  if (bos_token < 0)  // one past the vocabulary is allowed: then every sequence is one document
    throw std::invalid_argument("modded89 model: BOS token " + std::to_string(bos_token) + " is negative");
  if (head == Modded89Head::kFp8 && !fp8_head_shape_fits(seq_len, config.channels(), config.vocab_size))
    throw std::invalid_argument("modded89 model: the FP8 head needs the sequence length (" + std::to_string(seq_len) +
                                "), width and vocabulary to be multiples of 16");
  if (mlp == Modded89Mlp::kFp8 && !Modded89Fp8Mlp::shape_fits(seq_len, config.channels()))
    throw std::invalid_argument("modded89 model: the FP8 MLP needs the sequence length (" + std::to_string(seq_len) +
                                ") and width to be multiples of 16");
  buffers_ = std::make_unique<Buffers>();
  Buffers& b = *buffers_;
  b.request(&params_, &grads_, layout_, seq_len, loss_slots, head, mlp);
  b.token_plan = std::make_unique<EmbeddingBackwardPlan>(seq_len, config.vocab_size, config.channels());
  b.hash_plan = std::make_unique<EmbeddingBackwardPlan>(seq_len, config.bigram_rows, config.channels());
  b.arena.allocate("the modded89 model (parameters, activations for T=" + std::to_string(seq_len) + ")");
  b.set_aliases(layout_);
  if (head == Modded89Head::kFp8)
    b.fp8_head = std::make_unique<Fp8HeadWorkspace>(seq_len, config.channels(), config.vocab_size,
                                                    Fp8HeadScales::modded89(), b.fp8_head_memory,
                                                    Fp8HeadWeight::kInOut);
  if (mlp == Modded89Mlp::kFp8)
    b.fp8_mlp =
        std::make_unique<Modded89Fp8Mlp>(seq_len, config.channels(), kModded89Layers, b.fp8_mlp_memory, stream_,
                                         fused_gemms);
  loss_means_ = std::make_unique<LossMeans>();
  CUDA_CHECK(cudaMallocHost(&b.staging, Buffers::staging_ints(seq_len) * sizeof(int)));
  CUDA_CHECK(cudaEventCreateWithFlags(&b.staging_free, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(b.staging_free, stream_));
  grad_target_ = grads_;
  std::vector<int> tables;
  for (const char* name : {"embed", "value_embeds", "bigram_embed"})
    tables.push_back(layout_.index_of(name));
  table_rows_ = TableRows(tables);
  zero_grads_ = std::make_unique<RowSparseZeroing>(layout_, tables);
  if (b.accum_grads != nullptr) zero_accum_ = std::make_unique<RowSparseZeroing>(layout_, tables);
  CUDA_CHECK(cudaMemsetAsync(params_, 0, layout_.total_size * sizeof(floatX), stream_));
  CUDA_CHECK(cudaMemsetAsync(grads_, 0, layout_.total_size * sizeof(floatX), stream_));
  CUDA_CHECK(cudaMemsetAsync(b.fp32_params, 0, b.fp32_count * sizeof(float), stream_));
  set_sign_table(std::vector<float>(static_cast<size_t>(kBigramSignRows) * config.channels(), 1.0f));
  set_prefix_table({});
  set_loss_weights(loss_weights_);
  apply_yarn_state();
  const Modded89AttentionState first = modded89_first_attention_state(config);
  set_windows(first.short_window, first.long_window);
}

// The record's start: frequencies (1/1024)^(m / (D/4 - 1)) in double, rounded once (the double model's; the record's
// fp32 linspace can be an ulp off), D/4 zeros (the unrotated half), scale 0.1.
YarnState Modded89Model::initial_yarn(const Modded89Config& config) {
  const int pairs = config.rotary_pairs();
  YarnState state;
  state.angular_frequency.assign(static_cast<size_t>(2 * pairs), 0.0f);
  for (int j = 0; j < pairs; j++)
    state.angular_frequency[static_cast<size_t>(j)] =
        static_cast<float>(std::pow(1.0 / 1024.0, pairs > 1 ? j / static_cast<double>(pairs - 1) : 0.0));
  state.attention_scale = 0.1;
  return state;
}

// Both rotary tables from yarn_: its first D/4 frequencies (the rest are the unrotated zeros) and its scale.
void Modded89Model::apply_yarn_state() {
  const int pairs = layout_.config.rotary_pairs();
  set_rope(std::vector<float>(yarn_.angular_frequency.begin(), yarn_.angular_frequency.begin() + pairs),
           static_cast<float>(yarn_.attention_scale));
}

Modded89Model::~Modded89Model() {
  CUDA_REPORT(cudaStreamSynchronize(stream_));
  CUDA_REPORT(cudaEventDestroy(buffers_->staging_free));
  CUDA_REPORT(cudaFreeHost(buffers_->staging));
  CUDA_REPORT(cudaFree(grown_rope_));
}

size_t Modded89Model::planned_activation_bytes(const Modded89Config& config, int seq_len, int loss_slots,
                                               Modded89Head head, Modded89Mlp mlp) {
  const Modded89Layout layout = make_modded89_layout(config, 1);
  Buffers buffers;
  floatX *params = nullptr, *grads = nullptr;
  buffers.request(&params, &grads, layout, seq_len, loss_slots, head, mlp);
  return buffers.arena.requested_bytes() - 2 * layout.total_size * sizeof(floatX) +
         embedding_plan_bytes(config, seq_len);
}

size_t Modded89Model::activation_bytes() const {
  const size_t grown = grown_rope_ == nullptr ? 0 : rope_table_bytes(layout_.config, rope_positions_);
  return buffers_->arena.bytes() - 2 * layout_.total_size * sizeof(floatX) +
         embedding_plan_bytes(layout_.config, allocated_seq_len_) + grown;
}

int Modded89Model::fp32_index(const std::string& name, int element) const {
  return static_cast<int>(layout_.find(name).offset - layout_.find("scalars").offset) + element;
}

// ---- parameters, tables, windows ----------------------------------------------------------------------------

void Modded89Model::upload_params(const std::vector<float>& host_params) {
  if (host_params.size() != layout_.total_size)
    throw std::invalid_argument("upload_params: " + std::to_string(host_params.size()) + " values for a buffer of " +
                                std::to_string(layout_.total_size));
  std::vector<floatX> converted(host_params.size());
  for (size_t i = 0; i < host_params.size(); i++) converted[i] = from_float<floatX>(host_params[i]);
  CUDA_CHECK(
      cudaMemcpyAsync(params_, converted.data(), converted.size() * sizeof(floatX), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaMemcpyAsync(buffers_->fp32_params, host_params.data() + layout_.find("scalars").offset,
                             buffers_->fp32_count * sizeof(float), cudaMemcpyHostToDevice, stream_));
  if (buffers_->fp8_mlp) buffers_->fp8_mlp->reset(stream_);  // new parameters: copies and scales start again
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  decoded_rows_ = 0;
}

void Modded89Model::before_step(int step) {
  if (buffers_->fp8_mlp) buffers_->fp8_mlp->before_step(step);
}

// Every host value the training forward's and backward's launches read: a float by its bits (%a), the RoPE tables
// by their size and place (they grow for long sequences). The loss weights are read from the device.
std::string Modded89Model::step_shape() const {
  char text[512];
  std::snprintf(text, sizeof text, "T=%d windows=%d,%d scale=%a fp32=%d prefix=%d rope=%d@%p", seq_len_,
                short_window_, long_window_, attn_scale_, fp32_taken_ ? 1 : 0, has_prefix_table_ ? 1 : 0,
                rope_positions_, static_cast<const void*>(grown_rope_));
  return std::string(text) + (buffers_->fp8_mlp ? " fp8_mlp=" + buffers_->fp8_mlp->refresh_state() : "");
}

// A replayed backward wrote rows the host did not see: the next one zeroes the tables in full.
void Modded89Model::replayed_micro_step() {
  if (buffers_->fp8_mlp) buffers_->fp8_mlp->mark_refreshed();
  zero_grads_->add_all();
  if (zero_accum_) zero_accum_->add_all();
}

std::vector<NamedStateArray> Modded89Model::save_model_state() const {
  return buffers_->fp8_mlp ? buffers_->fp8_mlp->save_state(stream_) : std::vector<NamedStateArray>{};
}

void Modded89Model::restore_model_state(const std::vector<NamedStateArray>& arrays) {
  if (buffers_->fp8_mlp && !arrays.empty()) buffers_->fp8_mlp->restore_state(arrays, stream_);
}

Modded89Fp8Mlp::Scales Modded89Model::fp8_mlp_scales() const {
  if (!buffers_->fp8_mlp) throw std::logic_error("modded89 model: fp8_mlp_scales without the FP8 MLP");
  return buffers_->fp8_mlp->download_scales(stream_);
}

namespace {

// A device floatX buffer widened to float on the host. Synchronous.
std::vector<float> download_as_float(const floatX* device, size_t count, cudaStream_t stream) {
  std::vector<floatX> raw(count);
  CUDA_CHECK(cudaMemcpyAsync(raw.data(), device, count * sizeof(floatX), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> values(count);
  for (size_t i = 0; i < count; i++) values[i] = to_float(raw[i]);
  return values;
}

}  // namespace

std::vector<float> Modded89Model::download_params() const {
  std::vector<float> params = download_as_float(params_, layout_.total_size, stream_);
  if (!fp32_taken_) return params;  // the floatX slots are the parameters; the fp32 copy is the last forward's
  CUDA_CHECK(cudaMemcpyAsync(params.data() + layout_.find("scalars").offset, buffers_->fp32_params,
                             buffers_->fp32_count * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return params;
}

void Modded89Model::set_sign_table(const std::vector<float>& signs) {
  const size_t expected = static_cast<size_t>(kBigramSignRows) * layout_.config.channels();
  if (signs.size() != expected)
    throw std::invalid_argument("set_sign_table: " + std::to_string(signs.size()) + " values, expected " +
                                std::to_string(expected) + " (8192 rows of C)");
  std::vector<floatX> converted(signs.size());
  for (size_t i = 0; i < signs.size(); i++) {
    if (signs[i] != 1.0f && signs[i] != -1.0f) throw std::invalid_argument("set_sign_table: a value is not +-1");
    converted[i] = from_float<floatX>(signs[i]);
  }
  CUDA_CHECK(cudaMemcpyAsync(buffers_->signs, converted.data(), converted.size() * sizeof(floatX),
                             cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  decoded_rows_ = 0;
}

void Modded89Model::set_prefix_table(const std::vector<int>& prefix_of) {
  const int V = layout_.config.vocab_size;
  if (!prefix_of.empty() && prefix_of.size() != static_cast<size_t>(V))
    throw std::invalid_argument("set_prefix_table: " + std::to_string(prefix_of.size()) + " entries for " +
                                std::to_string(V) + " tokens");
  for (int p : prefix_of)
    if (p < -1 || p >= V) throw std::invalid_argument("set_prefix_table: prefix token " + std::to_string(p));
  has_prefix_table_ = !prefix_of.empty();
  if (!has_prefix_table_) return;
  CUDA_CHECK(cudaMemcpyAsync(buffers_->prefix_of, prefix_of.data(), prefix_of.size() * sizeof(int),
                             cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void Modded89Model::set_rope(const std::vector<float>& frequencies, float attn_scale) {
  if (frequencies.size() != static_cast<size_t>(layout_.config.rotary_pairs()))
    throw std::invalid_argument("set_rope: " + std::to_string(frequencies.size()) +
                                " frequencies, expected D/4 = " + std::to_string(layout_.config.rotary_pairs()));
  if (!(attn_scale > 0.0f)) throw std::invalid_argument("set_rope: the attention scale must be positive");
  frequencies_ = frequencies;
  attn_scale_ = attn_scale;
  rebuild_rope_tables();
}

void Modded89Model::rebuild_rope_tables() {
  Buffers& b = *buffers_;
  CUDA_CHECK(cudaMemcpyAsync(b.rope_freq, frequencies_.data(), frequencies_.size() * sizeof(float),
                             cudaMemcpyHostToDevice, stream_));
  rope_tables_build(b.rope_cos, b.rope_sin, b.rope_freq, rope_positions_, layout_.config.rotary_pairs(), stream_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // the frequencies' host copy must outlive the transfer
  decoded_rows_ = 0;
}

void Modded89Model::set_windows(int short_tokens, int long_tokens) {
  if (short_tokens < 0 || long_tokens < 0)
    throw std::invalid_argument("set_windows: windows must be non-negative (short " + std::to_string(short_tokens) +
                                ", long " + std::to_string(long_tokens) + ")");
  short_window_ = short_tokens;
  long_window_ = long_tokens;
  decoded_rows_ = 0;
}

// ---- forward --------------------------------------------------------------------------------------------------

namespace {

// Document bounds of tokens[0, T) (a document opens at each BOS after the first position): cu[0..n] with cu[n] = T,
// and each position's document start. Returns n, the number of documents.
int document_bounds(const int* tokens, int T, int bos_token, int* cu, int* doc_start) {
  int bounds = 0;
  cu[bounds++] = 0;
  for (int t = 0; t < T; t++) {
    if (t > 0 && tokens[t] == bos_token) cu[bounds++] = t;
    doc_start[t] = cu[bounds - 1];
  }
  cu[bounds++] = T;
  return bounds - 1;
}

// The pinned staging's arrays for a sequence of `capacity` positions (Buffers::staging).
struct StagedTokens {
  int *inputs, *targets, *hashes, *doc_start, *cu, *cu_rows;
  int num_docs;
};

// Fills the staging from tokens[0, count): the tokens, bigram hashes, document starts and bounds (in tokens and in
// paired rows, doubled), the bounds padded with `count` to capacity + 1 entries (a fixed-length array, as the
// record pads its cu_seqlens, so that the attention launches do not depend on the batch's document count). The
// targets are the caller's.
StagedTokens stage_tokens(int* staging, size_t capacity, const int* tokens, int count, int bos_token, int bigram_rows) {
  StagedTokens s;
  s.inputs = staging, s.targets = s.inputs + capacity, s.hashes = s.targets + capacity;
  s.doc_start = s.hashes + capacity, s.cu = s.doc_start + capacity, s.cu_rows = s.cu + capacity + 1;
  std::copy_n(tokens, count, s.inputs);
  const int documents = document_bounds(tokens, count, bos_token, s.cu, s.doc_start);
  s.num_docs = static_cast<int>(capacity);
  std::fill(s.cu + documents + 1, s.cu + capacity + 1, count);
  for (int d = 0; d <= s.num_docs; d++) s.cu_rows[d] = 2 * s.cu[d];
  bigram_hashes(s.hashes, tokens, count, bigram_rows);
  return s;
}

void upload_ints(int* device, const int* host, size_t count, cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyAsync(device, host, count * sizeof(int), cudaMemcpyHostToDevice, stream));
}

}  // namespace

// A forward's whole batch (upload_rows), checked first; in training also the embedding backward's plans. The
// buffers' rows are no longer a decoder's cache.
void Modded89Model::upload_batch(const int* inputs_host, const int* targets_host, bool training) {
  if (targets_host == nullptr) throw std::invalid_argument("modded89 model: a forward without targets");
  const int T = seq_len_;
  check_tokens(inputs_host, targets_host, 0, T);
  decoded_rows_ = 0;
  const int* hashes = upload_rows(inputs_host, targets_host, 0, T);
  batch_uploaded_ = true;
  uploaded_training_ = training;
  if (training) {  // the embedding backward's sorted rows, for the tokens' tables and the bigram table
    Buffers& b = *buffers_;
    b.token_plan->prepare(inputs_host, T, stream_);
    b.hash_plan->prepare(hashes, T, stream_);
    // the plans have the rows sorted
    table_rows_.set_batch(sparse_rows(b.token_plan->distinct_tokens(), b.hash_plan->distinct_tokens()));
  }
}

// Positions [first, count) of the tokens, and of the targets unless null, lie in the vocabulary.
void Modded89Model::check_tokens(const int* inputs_host, const int* targets_host, int first, int count) const {
  const int V = layout_.config.vocab_size;
  const auto outside = [V](int token) { return token < 0 || token >= V; };
  for (int t = first; t < count; t++)
    if (outside(inputs_host[t]) || (targets_host != nullptr && outside(targets_host[t])))
      throw std::invalid_argument("modded89 model: token or target at position " + std::to_string(t) + " outside [0, " +
                                  std::to_string(V) + ")");
}

// The sequence of tokens[0, count) in the buffers: rows [first, count) of the tokens, the targets (unless null:
// without a loss they are not read), the bigram hashes and each token's document start, and the document bounds
// of the whole sequence in tokens and in paired rows (doubled). The rows before `first` are a KV cache's. The host
// arrays are read before the call returns. Returns the hashes' pinned copy (valid until the next upload).
const int* Modded89Model::upload_rows(const int* inputs_host, const int* targets_host, int first, int count) {
  Buffers& b = *buffers_;
  batch_uploaded_ = uploaded_training_ = false;  // until upload_batch says otherwise
  CUDA_CHECK(cudaEventSynchronize(b.staging_free));  // the previous batch's copies have left the staging
  const StagedTokens staged =
      stage_tokens(b.staging, static_cast<size_t>(seq_len_), inputs_host, count, bos_token_, layout_.config.bigram_rows);
  num_docs_ = staged.num_docs;
  const size_t rows = static_cast<size_t>(count - first), bounds = static_cast<size_t>(num_docs_) + 1;
  upload_ints(b.inputs + first, staged.inputs + first, rows, stream_);
  if (targets_host != nullptr) {
    std::copy_n(targets_host + first, rows, staged.targets + first);
    upload_ints(b.targets + first, staged.targets + first, rows, stream_);
  }
  upload_ints(b.hashes + first, staged.hashes + first, rows, stream_);
  upload_ints(b.doc_start + first, staged.doc_start + first, rows, stream_);
  upload_ints(b.cu_seqlens, staged.cu, bounds, stream_);
  upload_ints(b.cu_rows, staged.cu_rows, bounds, stream_);
  CUDA_CHECK(cudaEventRecord(b.staging_free, stream_));
  return staged.hashes;
}

void Modded89Model::forward_uploaded(int loss_slot, bool compute_dlogits, float dloss,
                                     const BucketHook& before_bucket_use) {
  if (loss_slot < 0 || loss_slot >= loss_slots_)
    throw std::out_of_range("modded89 model: loss slot " + std::to_string(loss_slot) + " of " +
                            std::to_string(loss_slots_));
  if (!batch_uploaded_) throw std::logic_error("modded89 model: a forward with no batch uploaded (upload_batch)");
  if (compute_dlogits && !uploaded_training_)
    throw std::logic_error("modded89 model: a training forward of a batch uploaded without its plans");
  body_forward(compute_dlogits, before_bucket_use);
  head_forward(loss_slot, compute_dlogits, dloss);
}

// Everything before the head's loss over the uploaded batch: the embeddings, the 11 layers, the final hidden state
// b.xf.
void Modded89Model::body_forward(bool training, const BucketHook& before_bucket_use) {
  rows_ = RowSpan{0, seq_len_};
  position_offset_ = 0;
  long_sequence_ = false;
  plan_window_attention();
  has_training_forward_ = training;
  rows_forward(before_bucket_use);
}

// The embeddings, the 11 layers and the final hidden state of rows_ (the batch's rows uploaded).
void Modded89Model::rows_forward(const BucketHook& before_bucket_use) {
  auto use_bucket = [&](int bucket) {
    if (before_bucket_use) before_bucket_use(bucket);
  };
  use_bucket(Modded89Layout::bigram_bucket());
  use_bucket(Modded89Layout::embeddings_bucket());
  if (!fp32_taken_) {  // an optimizer of the floatX buffer updates them there
    Buffers& b = *buffers_;
    scalars_to_fp32(b.fp32_params, params_ + layout_.find("scalars").offset, static_cast<int>(b.fp32_count), stream_);
  }
  input_forward();
  for (int i = 0; i < kModded89Layers; i++) {
    use_bucket(Modded89Layout::layer_bucket(i));
    layer_forward(i);
  }
  use_bucket(layout_.head_bucket());
  final_hidden_forward();
}

// The whole forward's logits (the decoder's oracle in the tests): the validation model's, soft-capped as its loss
// reads them (23 sigmoid((z + 5) / 7.5) in fp32, unrounded), for the real tokens only. The targets are not read
// without a loss: the inputs stand in for them.
void Modded89Model::context_logits(const int32_t* tokens, int first, int count, float* out) {
  if (first < 0 || count < 1 || first + count > seq_len_)
    throw std::out_of_range("modded89 model: logits of positions [" + std::to_string(first) + ", " +
                            std::to_string(first + count) + ") outside [0, " + std::to_string(seq_len_) + ")");
  upload_batch(tokens, tokens, /*training=*/false);
  body_forward(/*training=*/false, nullptr);
  read_capped_logits(RowSpan{first, count}, out);
}

void Modded89Model::decode_logits(const int32_t* tokens, int first, int total, int logit_rows, float* out) {
  if (first < 0 || first >= total || total > seq_len_ || logit_rows < 1 || logit_rows > total - first)
    throw std::out_of_range("modded89 model: decoding tokens [" + std::to_string(first) + ", " + std::to_string(total) +
                            ") with the logits of the last " + std::to_string(logit_rows) + " outside a context of " +
                            std::to_string(seq_len_));
  if (has_training_forward_)
    throw std::logic_error("modded89 model: decoding between a training forward and its backward");
  first = std::min(first, decoded_rows_);
  decoded_rows_ = 0;  // until this call's rows are all written
  check_tokens(tokens, nullptr, first, total);
  upload_rows(tokens, nullptr, first, total);
  rows_ = RowSpan{first, total - first};
  position_offset_ = 0;
  long_sequence_ = false;
  if (whole_sequence()) plan_window_attention();
  rows_forward(nullptr);
  read_capped_logits(RowSpan{total - logit_rows, logit_rows}, out);
  decoded_rows_ = total;
}

// ---- long sequences (the record's validation: 262,144 contiguous tokens per rank) --------------------------------

// Where the fast attention kernel runs, a long sequence's forwards start at multiples of its query tile, so that
// its tiles are those of one forward over the whole sequence (the same bits); elsewhere anywhere.
int Modded89Model::long_sequence_alignment() const {
#if !defined(LLMC_FP32)
  if (window_attention_kernel_fits(layout_.config)) return window_attention::kForwardRows;
#endif
  return 1;
}

int Modded89Model::long_sequence_context(int long_blocks) const {
  const int window = long_blocks > 0 ? long_blocks * layout_.config.window_block : std::max(short_window_, long_window_);
  const int reach = std::max({window, layout_.config.dc_window, 1});
  const int align = long_sequence_alignment();
  return (reach + align - 1) / align * align;
}

std::vector<float> Modded89Model::sequence_losses(const int* inputs_host, const int* targets_host, int length) {
  if (has_training_forward_)
    throw std::logic_error("modded89 model: evaluating a sequence between a training forward and its backward");
  if (length < 1) throw std::invalid_argument("modded89 model: a sequence of " + std::to_string(length) + " tokens");
  const int S = seq_len_, context = long_sequence_context(0), align = long_sequence_alignment();
  if (length > S && S < 2 * context)
    throw std::invalid_argument("modded89 model: forwards of " + std::to_string(S) + " tokens cannot carry the " +
                                std::to_string(context) + " rows of context a longer sequence needs (twice that)");
  check_tokens(inputs_host, targets_host, 0, length);
  if (2 * static_cast<int64_t>(length) > rope_positions_) grow_rope_tables(2 * length);
  std::vector<float> losses(static_cast<size_t>(length));
  decoded_rows_ = 0;
  for (int done = 0, end = 0; done < length;) {
    const int first = done == 0 ? 0 : context;  // the buffer row of the first new position
    const int count = std::min((S - first) / align * align, length - done), base = done - first;
    if (done > 0) carry_context(end, context);
    // The hashes of the rows computed are the whole sequence's: only a sequence's first two rows hash specially.
    upload_rows(inputs_host + base, targets_host + base, 0, first + count);
    rows_ = RowSpan{first, count};
    position_offset_ = base;
    long_sequence_ = true;
    plan_window_attention();
    rows_forward(nullptr);
    head_forward(0, /*training=*/false, 0.0f);
    CUDA_CHECK(cudaMemcpyAsync(losses.data() + done, buffers_->losses + first, static_cast<size_t>(count) * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    done += count;
    end = first + count;
  }
  position_offset_ = 0;
  long_sequence_ = false;
  return losses;
}

// Rows [end - context, end) of what a row reads of the rows before it, moved to rows [0, context) (end >= 2 context:
// the ranges do not overlap): the token embeddings (smear), each attention layer's keys and values (attention, DC)
// and the key offset layers' raw rows.
void Modded89Model::carry_context(int end, int context) {
  Buffers& b = *buffers_;
  const size_t C = static_cast<size_t>(layout_.config.channels());
  const auto carry = [&](floatX* rows, size_t width) {
    CUDA_CHECK(cudaMemcpyAsync(rows, rows + static_cast<size_t>(end - context) * width,
                               static_cast<size_t>(context) * width * sizeof(floatX), cudaMemcpyDeviceToDevice,
                               stream_));
  };
  carry(b.e, C);
  for (int i = 0; i < kModded89Layers; i++) {
    Buffers::Layer& l = b.layers[i];
    if (l.k == nullptr) continue;  // no attention
    carry(l.k, C);
    carry(l.v, C);
    if (layout_.structure.layers[static_cast<size_t>(i)].key_offset) carry(l.qk_raw, 2 * C);
  }
}

// RoPE tables of `positions` rows (a long sequence's; 2 per token for the paired layers) in place of the arena's.
void Modded89Model::grow_rope_tables(int positions) {
  Buffers& b = *buffers_;
  const size_t rows = static_cast<size_t>(positions) * layout_.config.rotary_pairs();
  CUDA_CHECK(cudaStreamSynchronize(stream_));  // nothing reads the old tables any more
  floatX* grown = nullptr;
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&grown), rope_table_bytes(layout_.config, positions)));
  CUDA_CHECK(cudaFree(grown_rope_));
  grown_rope_ = grown;
  b.rope_cos = grown;
  b.rope_sin = grown + rows;
  rope_positions_ = positions;
  rebuild_rope_tables();
}

// A RoPE table from the row of buffer row 0's position on (position_step 2: the paired layers' rows).
const floatX* Modded89Model::rope_rows(const floatX* table, int position_step) const {
  return table + static_cast<size_t>(position_offset_) * position_step * layout_.config.rotary_pairs();
}

// The bf16 head's logits of `rows` (a forward's b.xf), soft-capped on the host, the real tokens' only.
void Modded89Model::read_capped_logits(RowSpan rows, float* out) {
  Buffers& b = *buffers_;
  const int V = layout_.config.vocab_size, real = context_vocab_size();
  head_logits(rows);
  std::vector<floatX> z(static_cast<size_t>(rows.count) * V);
  CUDA_CHECK(cudaMemcpyAsync(z.data(), b.z + static_cast<size_t>(rows.first) * V, z.size() * sizeof(floatX),
                             cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (int r = 0; r < rows.count; r++)
    for (int v = 0; v < real; v++) {
      const float zv = to_float(z[static_cast<size_t>(r) * V + v]);
      out[static_cast<size_t>(r) * real + v] =
          kMtpSoftcapScale / (1.0f + std::exp(-(zv + kMtpSoftcapShift) / kMtpSoftcapDivisor));
    }
}

int Modded89Model::context_vocab_size() const { return std::min(layout_.config.vocab_size, kGpt2VocabSize); }

std::string Modded89Model::context_describe() const {
  return "modded89 " + describe_modded89_config(layout_.config) + ", attention " +
         describe_attention_state(attention_state());
}

// Steps 1-4: embeddings, smear, x0, the bigram rows with their signs, the pre gate, x = x0 + g b.
void Modded89Model::input_forward() {
  Buffers& b = *buffers_;
  const Modded89Config& cfg = layout_.config;
  const int T = rows_.count, C = cfg.channels();
  const size_t table = static_cast<size_t>(cfg.vocab_size) * C;
  const int* inputs = at(b.inputs, 1);
  EmbeddingGather<floatX> gather;  // embed and value tables 0..2, then 3..4 (four tables per launch)
  gather.count = 4;
  gather.tables[0] = param("embed");
  gather.outputs[0] = at(b.e, C);
  for (int k = 0; k < 3; k++) {
    gather.tables[1 + k] = param("value_embeds") + k * table;
    gather.outputs[1 + k] = at(b.ve[k], C);
  }
  embedding_forward(gather, inputs, T, C, stream_);
  gather.count = 2;
  for (int k = 0; k < 2; k++) {
    gather.tables[k] = param("value_embeds") + (3 + k) * table;
    gather.outputs[k] = at(b.ve[3 + k], C);
  }
  embedding_forward(gather, inputs, T, C, stream_);
  smear_forward(at(b.smeared, C), at(b.e, C), param("smear_gate"), b.fp32_params, kModded89SmearLambda, T, C, stream_,
                /*continues=*/rows_.first > 0);
  rmsnorm_forward(at(b.x0, C), at(b.rstd0, 1), at(b.smeared, C), T, C, stream_);
  gather.count = 1;
  gather.tables[0] = param("bigram_embed");
  gather.outputs[0] = at(b.bigram_rows, C);
  embedding_forward(gather, at(b.hashes, 1), T, C, stream_);
  bigram_sign(at(b.b, C), at(b.bigram_rows, C), inputs, b.signs, T, C, stream_, /*continues=*/rows_.first > 0);
  small_mlp_forward(0, b.x0);
  const int bigram_column = layout_.structure.layers[0].bigram_gate.column;
  token_mix_forward(at(b.x_start, C), C,
                    from_row(token_mix(b.mlps[0].gate(), {{b.x0, -1}, {b.b, bigram_column}}, C), rows_.first), T, C,
                    stream_);
}

// out = s (gelu(x w1^T) w2^T + b2) for gate0 (G0), gate1 (G1), mudd0, mudd1; s the gate scale or 0.1. x: the
// whole buffer (rows_ are read).
void Modded89Model::small_mlp_forward(int index, const floatX* x) {
  static const char* const kPrefixes[4] = {"gate0.", "gate1.", "mudd0.", "mudd1."};
  Buffers& b = *buffers_;
  Buffers::SmallMlp& mlp = b.mlps[index];
  const std::string prefix = kPrefixes[index];
  const int T = rows_.count, C = layout_.config.channels(), m = layout_.config.mudd_hidden, n = mlp.columns;
  GemmArgs hidden;  // (T, m) = x w1^T
  hidden.d = at(mlp.hidden_pre, m), hidden.a = at(x, C), hidden.b = param(prefix + "w1");
  hidden.m = T, hidden.n = m, hidden.k = C, hidden.trans_b = true;
  gemm(b.matmul, hidden, stream_);
  gelu_exact_forward(at(mlp.hidden, m), at(mlp.hidden_pre, m), static_cast<size_t>(T) * m, stream_);
  GemmArgs out;  // (T, n) = gelu(.) w2^T
  out.d = at(mlp.out_raw, n), out.a = at(mlp.hidden, m), out.b = param(prefix + "w2"), out.m = T, out.n = n;
  out.k = m, out.trans_b = true;
  gemm(b.matmul, out, stream_);
  GateMlpScale scale;
  if (index < 2)
    scale.scale = b.fp32_params + fp32_index("mudd_gate_scale", 0);
  else
    scale.constant = kMuddScale;
  gate_mlp_output_forward(at(mlp.out, n), at(mlp.out_raw, n), param(prefix + "b2"), scale, T, n, stream_);
}

// Step 5 for layer i: the post gate before layer 4, the skip add at layer 6, attention with the residual,
// x0 and bigram terms (MUDD0's dense connections at layer 10), then the MLP.
void Modded89Model::layer_forward(int i) {
  Buffers& b = *buffers_;
  Buffers::Layer& l = b.layers[i];
  const Modded89Structure& structure = layout_.structure;
  const Modded89Layer& role = structure.layers[static_cast<size_t>(i)];
  const int T = rows_.count, C = layout_.config.channels(), first = rows_.first;
  const floatX* previous = i == 0 ? b.x_start : b.layers[i - 1].x_out;
  if (i == structure.post_gate_layer) small_mlp_forward(1, previous);
  if (i == structure.skip_to) {  // x += sigmoid(skip_lambda) G1[28] cache3
    mix_forward(Rows{at(l.skip, C), C}, ConstRows{at(b.layers[structure.skip_from].x_out, C), C}, ConstRows{nullptr, C},
                b.fp32_params, MixCoefficient{MixScalar::kSigmoid, kModded89SkipLambda}, one(), T, C, stream_);
    token_mix_forward(
        at(l.x_in, C), C,
        from_row(token_mix(b.mlps[1].gate(), {{previous, -1}, {l.skip, structure.skip_gate.column}}, C), first), T, C,
        stream_);
  }
  if (role.attention && !role.mudd) {
    const floatX* source = role.reads_layer7 ? b.layers[7].x_out : l.x_in;
    if (!attention_norm_fused_before(i))
      rmsnorm_forward(at(l.xn_attn, C), at(l.rstd_attn, 1), at(source, C), T, C, stream_);
    attention_forward(i, l.xn_attn, nullptr);
    attention_output_and_mlp_norm(i);  // writes x_attn and xn_mlp
  } else {
    if (role.mudd) mudd_attention_forward(i);
    rmsnorm_forward(at(l.xn_mlp, C), at(l.rstd_mlp, 1), at(l.x_attn, C), T, C, stream_, mlp_input_amax(i));
  }
  mlp_forward(i);
}

// Whether layer i's attention norm is written by layer i - 1's output mix (mlp_output_mix, one fused pass): where
// layer i normalises exactly that output (no skip add before it, not layer 7's output) and layer i - 1's output
// is a scalar mix (not the MUDD layer's).
bool Modded89Model::attention_norm_fused_before(int i) const {
  const Modded89Structure& structure = layout_.structure;
  if (i <= 0 || i >= kModded89Layers) return false;
  const Modded89Layer& role = structure.layers[static_cast<size_t>(i)];
  return role.attention && !role.mudd && !role.reads_layer7 && i != structure.skip_to &&
         !structure.layers[static_cast<size_t>(i - 1)].mudd;
}

// Whether layer i's output mix backward also takes layer i + 1's attention norm backward (one
// residual_norm_backward, mlp_backward): where the forward fused them and nothing adds into dx between the two
// (layer i + 1's post gate MLP, the skip's or layer 7's cache gradient at layer i). Layers 0-2, 4 and 6.
bool Modded89Model::attention_norm_backward_fused_after(int i) const {
  const Modded89Structure& structure = layout_.structure;
  return attention_norm_fused_before(i + 1) && i + 1 != structure.post_gate_layer && i != structure.skip_from &&
         i != 7;
}

// The layer whose output mix the backward reaches first among those that add g x0 (attention_output_and_mlp_norm's
// layers: attention, not MUDD): its backward stores d_x0, the others add to it.
int Modded89Model::first_x0_stream_layer() const {
  for (int i = kModded89Layers - 1; i >= 0; i--) {
    const Modded89Layer& role = layout_.structure.layers[static_cast<size_t>(i)];
    if (role.attention && !role.mudd) return i;
  }
  throw std::logic_error("Modded89Model: no attention layer adds the x0 stream");
}

// The FP8 MLP's input maximum, taken by the pass that writes its input xn_mlp (training forwards only, as the record).
float* Modded89Model::mlp_input_amax(int i) const {
  const Buffers& b = *buffers_;
  return b.fp8_mlp && has_training_forward_ ? b.fp8_mlp->input_amax(i) : nullptr;
}

// x_attn = r x + p attn_out + g x0 (+ g' b from layer 1 on), and its norm xn_mlp for the MLP: one fused pass
// (residual_norm_forward), bit for bit the mix, the token mix and the RMSNorm it replaces.
void Modded89Model::attention_output_and_mlp_norm(int i) {
  Buffers& b = *buffers_;
  Buffers::Layer& l = b.layers[i];
  const Modded89Layer& role = layout_.structure.layers[static_cast<size_t>(i)];
  const int T = rows_.count, C = layout_.config.channels();
  const ResidualMixIn mix = residual_lambda_mix(at(l.x_in, C), at(l.attn_out, C), 2 * i);
  const GateRows gate = b.mlps[role.x0_gate.gate].gate();
  TokenMix extra = token_mix(gate, {{b.x0, role.x0_gate.column}}, C);
  if (i != 0) extra = token_mix(gate, {{b.x0, role.x0_gate.column}, {b.b, role.bigram_gate.column}}, C);
  residual_norm_forward({at(l.x_attn, C), at(l.xn_mlp, C), at(l.rstd_mlp, 1), mlp_input_amax(i)}, mix,
                        from_row(extra, rows_.first), T, C, stream_);
}

// Layer 10 (step 5, "MUDD layer"): mu = MUDD0(x); aux_v = mu0 cache0 + mu1 cache7 + mu2 x + (mu6 | mu7) ve4;
// x' = (1 + mu5) x + mu3 cache0 + mu4 cache7; a = Attn(norm(cache7), aux_v); x = mu8 x' + mu9 a + mu10 cache0 +
// mu11 b.
void Modded89Model::mudd_attention_forward(int i) {
  Buffers& b = *buffers_;
  Buffers::Layer& l = b.layers[i];
  const int T = rows_.count, C = layout_.config.channels(), first = rows_.first;
  const floatX *x = l.x_in, *cache0 = b.x_start, *cache7 = b.layers[7].x_out;
  small_mlp_forward(2, x);
  const GateRows mu = b.mlps[2].gate();
  token_mix_forward(at(l.aux_v, C), C, from_row(token_mix(mu, {{cache0, 0}, {cache7, 1}, {x, 2}}, C), first), T, C,
                    stream_);
  for (int half = 0; half < 2; half++) {  // heads 0..H/2-1 take mu6, the rest mu7
    const size_t h0 = static_cast<size_t>(half) * (C / 2);
    token_mix_forward(at(l.aux_v, C) + h0, C,
                      from_row(token_mix(mu, {{l.aux_v + h0, -1}, {b.ve[4] + h0, 6 + half}}, C), first), T, C / 2,
                      stream_);
  }
  token_mix_forward(at(l.x_pre, C), C, from_row(token_mix(mu, {{x, -1}, {x, 5}, {cache0, 3}, {cache7, 4}}, C), first),
                    T, C, stream_);
  rmsnorm_forward(at(l.xn_attn, C), at(l.rstd_attn, 1), at(cache7, C), T, C, stream_);
  attention_forward(i, l.xn_attn, l.aux_v);
  token_mix_forward(at(l.x_attn, C), C,
                    from_row(token_mix(mu, {{l.x_pre, 8}, {l.attn_out, 9}, {cache0, 10}, {b.b, 11}}, C), first), T, C,
                    stream_);
}

// A layer's window attention as one problem over rows: T rows of H heads, or for the paired layers the
// [T, H, D] buffers read as [2T, H/2, D] (rows 2t, 2t + 1 hold heads 0..H/2-1 and H/2..H-1) with doubled
// document bounds, the window counted in rows; the fast kernel's plan (index 2 paired + long) and the window.
// Rows from first_row on are computed (the rows of rows_; the earlier ones are keys and values only).
struct Modded89Model::AttentionCall {
  int rows, heads, stride, plan, window;
  const int* bounds;
  int first_row;
#if !defined(LLMC_FP32)  // the fast kernel is bf16 only
  window_attention::Problem problem(int num_docs, float scale) const {
    return window_attention::Problem{rows, heads, bounds, num_docs, window, scale};
  }
#endif
  simple_attention::Problem simple_problem(int head_dim, int num_docs, float scale) const {
    simple_attention::Problem p{rows, heads, head_dim, bounds, num_docs, window, scale};
    p.first_row = first_row;
    return p;
  }
};

Modded89Model::AttentionCall Modded89Model::attention_view(bool paired, bool long_window) const {
  const Modded89Config& cfg = layout_.config;
  const int window = long_window ? long_window_ : short_window_, long_plan = long_window ? 1 : 0;
  const int end = rows_.first + rows_.count;
  if (paired)
    return AttentionCall{2 * end, cfg.num_heads / 2, cfg.channels() / 2, 2 + long_plan,
                         window,  buffers_->cu_rows, 2 * rows_.first};
  return AttentionCall{end, cfg.num_heads, cfg.channels(), long_plan, window, buffers_->cu_seqlens, rows_.first};
}

Modded89Model::AttentionCall Modded89Model::attention_call(int layer) const {
  const Modded89Layer& role = layout_.structure.layers[static_cast<size_t>(layer)];
  return attention_view(role.paired_heads, role.long_window);
}

// The fast kernel's tile orders for this batch's documents and the windows in force (a plan per window and
// view; the plan kernel is one block).
void Modded89Model::plan_window_attention() {
#if !defined(LLMC_FP32)
  if (!window_attention_kernel_fits(layout_.config)) return;
  for (bool paired : {false, true})
    for (bool long_window : {false, true}) {
      const AttentionCall a = attention_view(paired, long_window);
      window_attention::plan(buffers_->attention_plans[a.plan], a.problem(num_docs_, attn_scale_), stream_);
    }
#endif
}

// y, lse = the window attention of layer i's q, k, v (the fast kernel over whole sequences and over a long
// sequence's forwards, where it also writes the carried rows' outputs, which nothing reads; the simple one for the
// decoder's new rows).
void Modded89Model::window_attention_forward(int i) {
  Buffers& b = *buffers_;
  Buffers::Layer& l = b.layers[i];
  const AttentionCall a = attention_call(i);
#if !defined(LLMC_FP32)
  if (window_attention_kernel_fits(layout_.config) && (whole_sequence() || long_sequence_)) {
    window_attention::forward(l.y, l.lse, l.q, l.k, l.v, a.stride, b.attention_plans[a.plan],
                              a.problem(num_docs_, attn_scale_), stream_);
    return;
  }
#endif
  simple_attention::forward(l.y, l.lse, l.q, l.k, l.v, a.stride,
                            a.simple_problem(layout_.config.head_dim, num_docs_, attn_scale_), stream_);
}

// Whether the fast kernel's dQ store (k: dK store) runs layer i's QK-norm and RoPE backward into d_qk_raw: wherever
// the kernel runs, but not in the DC layer (its correction adds to dq and dk after the attention) and, for k, not
// with the key offset (an offset k head's stationary dims take the next row's gradient, in another block).
bool Modded89Model::norm_rope_in_attention_stores(int i, bool k) const {
#if defined(LLMC_FP32)
  (void)i, (void)k;
  return false;
#else
  const Modded89Layer& role = layout_.structure.layers[static_cast<size_t>(i)];
  return window_attention_kernel_fits(layout_.config) && !role.dc && !(k && role.key_offset);
#endif
}

// dq, dk, dv (overwritten) of layer i's window attention from dout, the gradient of its y; where
// norm_rope_in_attention_stores says so, d_qk_raw's q (and k) columns instead of dq (dk).
void Modded89Model::window_attention_backward(int i, const floatX* dout, bool accumulate_dv) {
  Buffers& b = *buffers_;
  Buffers::Layer& l = b.layers[i];
  const AttentionCall a = attention_call(i);
#if !defined(LLMC_FP32)
  if (window_attention_kernel_fits(layout_.config)) {
    window_attention::PairNormRopeBackward rope;
    if (norm_rope_in_attention_stores(i, false)) {
      const int C = layout_.config.channels();
      rope.rstd_q = l.rstd_q;
      rope.rstd_k = norm_rope_in_attention_stores(i, true) ? l.rstd_k : nullptr;
      rope.cos_table = b.rope_cos, rope.sin_table = b.rope_sin;
      rope.paired_rows = layout_.structure.layers[static_cast<size_t>(i)].paired_heads;
      rope.dq_raw = b.d_qk_raw, rope.dk_raw = b.d_qk_raw + C, rope.raw_row_stride = 2 * C;
    }
    window_attention::backward(b.dq, b.dk, b.dv, a.stride, b.attention_delta, dout, l.y, l.lse, l.q, l.k, l.v,
                               a.stride, b.attention_plans[a.plan], a.problem(num_docs_, attn_scale_), stream_, {}, {},
                               {}, rope, accumulate_dv);
    return;
  }
#endif
  simple_attention::backward(b.dq, b.dk, b.dv, a.stride, b.attention_delta, dout, l.y, l.lse, l.q, l.k, l.v, a.stride,
                             a.simple_problem(layout_.config.head_dim, num_docs_, attn_scale_), stream_, accumulate_dv);
}

// Section 2 for layer i on xn (the whole buffer; rows_ are read): q, k, v = xn (l0 W)^T; per-head norm and
// adjacent-pair RoPE (positions 2t + h % 2 in the paired layers), the key offset; v += the gated value embedding or
// aux_v; window attention (paired: rows of H/2 heads, two per token); DC, XSA, the output gate;
// attn_out = y (l1 W_o)^T.
void Modded89Model::attention_forward(int i, const floatX* xn, const floatX* aux_v) {
  Buffers& b = *buffers_;
  Buffers::Layer& l = b.layers[i];
  const Modded89Config& cfg = layout_.config;
  const Modded89Layer& role = layout_.structure.layers[static_cast<size_t>(i)];
  const int T = rows_.count, C = cfg.channels(), H = cfg.num_heads, D = cfg.head_dim, first = rows_.first;
  const std::string prefix = "layers." + std::to_string(i) + ".";
  const size_t CC = static_cast<size_t>(C) * C;
  scale_layer_weights(i);
  GemmArgs qk;  // (T, 2C) = xn [l0 W_q; l0 W_k]^T
  qk.d = at(l.qk_raw, 2 * C), qk.a = at(xn, C), qk.b = b.scaled_weights, qk.m = T, qk.n = 2 * C, qk.k = C;
  qk.trans_b = true;
  gemm(b.matmul, qk, stream_);
  GemmArgs v = qk;  // (T, C) = xn (l0 W_v)^T
  v.d = at(l.v, C), v.b = b.scaled_weights + 2 * CC, v.n = C;
  gemm(b.matmul, v, stream_);
  const int step = role.paired_heads ? 2 : 1;
  const floatX *cos = rope_rows(b.rope_cos, step), *sin = rope_rows(b.rope_sin, step);
  qk_norm_pair_rope_forward(at(l.q, C), C, at(l.qk_raw, 2 * C), 2 * C, at(l.rstd_q, H), cos, sin, T, H, D,
                            PairRopeLayout{cfg.rotary_pairs(), step, false, -1, first}, stream_);
  qk_norm_pair_rope_forward(at(l.k, C), C, at(l.qk_raw, 2 * C) + C, 2 * C, at(l.rstd_k, H), cos, sin, T, H, D,
                            PairRopeLayout{cfg.rotary_pairs(), step, role.key_offset, 0, first}, stream_);
  if (role.value_embed >= 0)
    value_embed_gate_forward(at(l.v, C), at(l.v, C), at(b.ve[role.value_embed], C), at(xn, C),
                             param(prefix + "ve_gate"), ValueGateShape{T, H, D, C, C}, stream_);
  if (aux_v != nullptr)
    mix_forward(Rows{at(l.v, C), C}, ConstRows{at(l.v, C), C}, ConstRows{at(aux_v, C), C}, b.fp32_params, one(), one(),
                T, C, stream_);
  window_attention_forward(i);
  if (role.dc) {
    dc_mix_weights_forward(at(l.dc_weights, 2 * H), at(b.mlps[1].out, kModded89GateColumns), kModded89GateColumns,
                           kModded89DcW1Column, kModded89DcW2Column, T, H, stream_);
    DcInputs dc{
        l.q, l.k, l.v,           C,          C, C, l.dc_weights, l.dc_weights + H, 2 * H, b.doc_start, first + T,
        H,   D,   cfg.dc_window, attn_scale_};
    dc.first_row = first;
    dc_forward(l.y_dc, l.y, C, l.dc_lse, dc, stream_);
  }
  if (role.xsa.present())
    xsa_forward(at(l.y_xsa, C), at(l.y_dc, C), at(l.v, C),
                at(b.mlps[role.xsa.gate].out, kModded89GateColumns) + role.xsa.column,
                XsaShape{T, H, D, C, C, kModded89GateColumns}, stream_);
  if (role.output_gate.present()) {  // y_h *= G[t, column + h]
    const GateRows gate = b.mlps[role.output_gate.gate].gate();
    head_gate_forward(at(l.y_gated, C), at(l.y_xsa, C), at(gate.rows, gate.columns) + role.output_gate.column,
                      HeadGateShape{T, H, D, C, gate.columns}, stream_);
  }
  GemmArgs out;  // (T, C) = y (l1 W_o)^T
  out.d = at(l.attn_out, C), out.a = at(l.y_gated, C), out.b = b.scaled_weights + 3 * CC, out.m = T, out.n = C;
  out.k = C, out.trans_b = true;
  gemm(b.matmul, out, stream_);
}

// x = r_M x + p_M relu(xn c_fc^T)^2 c_proj from xn = norm(x), written by layer_forward (layer 10: mu12 x + mu13 MLP).
void Modded89Model::mlp_forward(int i) {
  Buffers& b = *buffers_;
  Buffers::Layer& l = b.layers[i];
  const int T = rows_.count, C = layout_.config.channels(), hidden = layout_.config.mlp_hidden();
  const floatX* bank = param("layers." + std::to_string(i) + ".mlp");
  float* xn_amax = mlp_input_amax(i);  // the record's FP8 MLP (training forwards only); xn_mlp written before
  if (xn_amax != nullptr) {
    b.fp8_mlp->forward(b.matmul, i, at(l.xn_mlp, C), bank, bank + static_cast<size_t>(hidden) * C, at(l.pre, hidden),
                       at(l.post, hidden), at(l.mlp_out, C), T, stream_, xn_amax);
    mlp_output_mix(i);
    return;
  }
  if (fused_gemms_ == FusedGemms::kWgmma) {  // post = relu(pre)^2 (the backward's input) from the GEMM; c_fc (N, K)
    wgmma_gemm_launch(WgmmaEpilogue::kReluSquared, nullptr, at(l.post, hidden), nullptr, at(l.xn_mlp, C),
                      bank, /*w_k_major=*/true, T, hidden, C, stream_);
  } else {
    GemmArgs fc;  // pre (T, 4C) = xn c_fc^T, c_fc (out, in)
    fc.d = at(l.pre, hidden), fc.a = at(l.xn_mlp, C), fc.b = bank, fc.m = T, fc.n = hidden, fc.k = C;
    fc.trans_b = true;
    gemm(b.matmul, fc, stream_);
    relu_squared_forward(at(l.post, hidden), at(l.pre, hidden), static_cast<size_t>(T) * hidden, stream_);
  }
  GemmArgs proj;  // (T, C) = post c_proj, c_proj stored (in, out)
  proj.d = at(l.mlp_out, C), proj.a = at(l.post, hidden), proj.b = bank + static_cast<size_t>(hidden) * C;
  proj.m = T, proj.n = C, proj.k = hidden;
  gemm(b.matmul, proj, stream_);
  mlp_output_mix(i);
}

// The MLP's output into the stream: x = r x + p mlp, or MUDD0's coefficients at the MUDD layer.
void Modded89Model::mlp_output_mix(int i) {
  Buffers& b = *buffers_;
  Buffers::Layer& l = b.layers[i];
  const int T = rows_.count, C = layout_.config.channels();
  if (layout_.structure.layers[static_cast<size_t>(i)].mudd)
    token_mix_forward(at(l.x_out, C), C,
                      from_row(token_mix(b.mlps[2].gate(), {{l.x_attn, 12}, {l.mlp_out, 13}}, C), rows_.first), T, C,
                      stream_);
  else if (attention_norm_fused_before(i + 1))  // x_out and the next layer's attention norm in one pass
    residual_norm_forward({at(l.x_out, C), at(b.layers[i + 1].xn_attn, C), at(b.layers[i + 1].rstd_attn, 1)},
                          residual_lambda_mix(at(l.x_attn, C), at(l.mlp_out, C), 2 * i + 1), TokenMix{}, T, C,
                          stream_);
  else {
    const ResidualMixIn mix = residual_lambda_mix(at(l.x_attn, C), at(l.mlp_out, C), 2 * i + 1);
    mix_forward(Rows{at(l.x_out, C), C}, mix.x_in, mix.y, mix.scalars, mix.a, mix.b, T, C, stream_);
  }
}

// r x + p branch, with r and p the bf16 copies of resid_lambdas[lambda] and post_lambdas[lambda]: the residual
// update after a sublayer (lambda 2i after layer i's attention, 2i + 1 after its MLP), rows of C.
ResidualMixIn Modded89Model::residual_lambda_mix(const floatX* x, const floatX* branch, int lambda) const {
  const int C = layout_.config.channels();
  ResidualMixIn mix;
  mix.x_in = ConstRows{x, C};
  mix.y = ConstRows{branch, C};
  mix.scalars = buffers_->fp32_params;
  mix.a = bf16_copy(fp32_index("resid_lambdas", lambda));
  mix.b = bf16_copy(fp32_index("post_lambdas", lambda));
  return mix;
}

// Step 6: MUDD1's connections after the loop and the final norm, into b.xf: x_final = x + the gated streams, in one
// pass with its norm (residual_norm_forward: x taken whole, weight 1, as the token mix's first stream).
void Modded89Model::final_hidden_forward() {
  Buffers& b = *buffers_;
  const Modded89Config& cfg = layout_.config;
  const int T = rows_.count, C = cfg.channels();
  const floatX* x = b.layers[kModded89Layers - 1].x_out;
  small_mlp_forward(3, x);
  ResidualMixIn mix;
  mix.x_in = ConstRows{at(x, C), C};
  mix.scalars = b.fp32_params;
  const TokenMix streams = token_mix(
      b.mlps[3].gate(),
      {{b.x_start, 0}, {b.layers[7].x_out, 1}, {b.layers[10].x_in, 2}, {b.ve[0], 3}, {b.layers[3].x_out, 4}}, C);
  residual_norm_forward({at(b.x_final, C), at(b.xf, C), at(b.rstd_f, 1)}, mix, from_row(streams, rows_.first), T, C,
                        stream_);
}

// The bf16 head over `rows` of b.xf: z (rows, V) = xf W_head, W_head stored (in, out).
void Modded89Model::head_logits(RowSpan rows) {
  Buffers& b = *buffers_;
  const Modded89Config& cfg = layout_.config;
  GemmArgs head;
  head.d = b.z + static_cast<size_t>(rows.first) * cfg.vocab_size;
  head.a = b.xf + static_cast<size_t>(rows.first) * cfg.channels(), head.b = param("head");
  head.m = rows.count, head.n = cfg.vocab_size, head.k = cfg.channels();
  gemm(b.matmul, head, stream_);
}

// Step 7: the head and the loss.
void Modded89Model::head_forward(int loss_slot, bool training, float dloss) {
  Buffers& b = *buffers_;
  const int T = seq_len_, V = layout_.config.vocab_size;
  float* losses = b.losses + static_cast<size_t>(loss_slot) * T;
  const int* prefix_of = has_prefix_table_ ? b.prefix_of : nullptr;
  if (b.fp8_head && training) {  // z in FP8 (its copies kept for head_backward); the loss writes the e5m2 codes
    Fp8HeadWorkspace& head = *b.fp8_head;
    head.set_grad_scale(fp8_head_grad_scale(dloss, kModded89GradUnit), stream_);
    fp8_head_forward(b.matmul, head, b.z, b.xf, param("head"), T, /*keep_for_backward=*/true, stream_);
    mtp_cross_entropy_backward_e5m2(head.g8(), losses, b.z, b.targets, prefix_of, loss_weights_, dloss,
                                    head.scales().grad, T, V, stream_, b.loss_weights);
    return;
  }
  head_logits(rows_);
  if (training)
    mtp_cross_entropy_backward(b.z, losses, b.targets, prefix_of, loss_weights_, dloss, T, V, stream_, b.loss_weights);
  else  // the rows computed (a long sequence's forward after its first computes those after the carried ones)
    mtp_cross_entropy_forward(at(losses, 1), at(b.z, V), at(b.targets, 1), rows_.count, V, stream_);
}

// One layer's scaled attention weights into b.scaled_weights: l0 W_q, l0 W_k, l0 W_v, l1 W_o. The record's
// lin(xn, l0 W): the lambdas' gradients come from the weight gradients (<dW_eff, W>), no unscaled activations.
void Modded89Model::scale_layer_weights(int i) {
  Buffers& b = *buffers_;
  const int C = layout_.config.channels();
  const size_t CC = static_cast<size_t>(C) * C;
  const std::string prefix = "layers." + std::to_string(i) + ".";
  const floatX* vo = param(prefix + "vo");
  const MixCoefficient l0 = identity(fp32_index("scalars", 2 * i)), l1 = identity(fp32_index("scalars", 2 * i + 1));
  mix_forward(Rows{b.scaled_weights, C}, ConstRows{param(prefix + "qk"), C}, ConstRows{nullptr, C}, b.fp32_params, l0,
              one(), 2 * C, C, stream_);
  mix_forward(Rows{b.scaled_weights + 2 * CC, C}, ConstRows{vo, C}, ConstRows{nullptr, C}, b.fp32_params, l0, one(), C,
              C, stream_);
  mix_forward(Rows{b.scaled_weights + 3 * CC, C}, ConstRows{vo + CC, C}, ConstRows{nullptr, C}, b.fp32_params, l1,
              one(), C, C, stream_);
}

// ---- backward ---------------------------------------------------------------------------------------------------

void Modded89Model::backward(bool first_micro_step, const BucketHook& on_bucket_ready) {
  if (!has_training_forward_) throw std::logic_error("Modded89Model::backward without a training forward before it");
  Buffers& b = *buffers_;
  if (!first_micro_step && b.accum_grads == nullptr)
    throw std::logic_error("Modded89Model::backward: accumulating needs a model with more than one loss slot");
  grad_target_ = first_micro_step ? grads_ : b.accum_grads;
  memset_async(b.d_fp32, 0, b.fp32_count * sizeof(float), stream_);
  // The shared streams' gradients start at their first writer, which stores where the later ones add: the head's
  // MUDD1 pass (the caches and d_ve[0]), layer 10's MUDD0 (d_b, d_ve[4]), the top attention layer's output mix
  // (d_x0, first_x0_stream_layer), the value-embedding gates of tables 1-3 (their only writers).
  for (int k = 0; k < 4; k++)
    CUDA_CHECK(
        cudaMemsetAsync(b.d_gates[k], 0, static_cast<size_t>(seq_len_) * b.mlps[k].columns * sizeof(float), stream_));
  // Each phase writes only its own bucket's gradients (the shared streams' and the fp32 tensors' go to buffers
  // of their own first), so each bucket is zeroed as its phase starts and final as it ends.
  start_bucket_grads(layout_.head_bucket());
  head_backward();
  finish_bucket_grads(layout_.head_bucket(), on_bucket_ready);
  for (int i = kModded89Layers - 1; i >= 0; i--) {
    start_bucket_grads(Modded89Layout::layer_bucket(i));
    layer_backward(i);
    finish_bucket_grads(Modded89Layout::layer_bucket(i), on_bucket_ready);
  }
  start_bucket_grads(Modded89Layout::bigram_bucket());
  start_bucket_grads(Modded89Layout::embeddings_bucket());
  input_backward();
  const TensorView& scalars = layout_.find("scalars");
  add_fp32_grads(grad_target_ + scalars.offset, b.d_fp32, static_cast<int>(b.fp32_count), stream_);
  table_rows_.add_batch_to_step(first_micro_step);
  finish_bucket_grads(Modded89Layout::embeddings_bucket(), on_bucket_ready);
  finish_bucket_grads(Modded89Layout::bigram_bucket(), on_bucket_ready);
  grad_target_ = grads_;
  has_training_forward_ = false;  // the logits now hold their gradient
}

// The tables' rows this batch reads, as row_sparse_grads lists them: embed's are the tokens, the five value
// embeddings' (one [5 V, C] tensor) the tokens of each, the bigram table's the hashes.
std::vector<RowSparseGrad> Modded89Model::sparse_rows(const std::vector<int>& token_rows,
                                                      const std::vector<int>& bigram_rows) const {
  const auto index = [&](const char* name) { return layout_.index_of(name); };
  RowSparseGrad value_embeds{index("value_embeds"), {}};
  for (int k = 0; k < kModded89ValueEmbeds; k++)
    for (int token : token_rows) value_embeds.rows.push_back(k * layout_.config.vocab_size + token);
  return {{index("embed"), token_rows}, value_embeds, {index("bigram_embed"), bigram_rows}};
}

// The bucket's gradients in the running backward's buffer start at zero: the tables' rows that may be nonzero
// zeroed, the rest in full. An accumulating backward's rows reach grads_ too (finish_bucket_grads).
void Modded89Model::start_bucket_grads(int bucket) {
  const bool tables = bucket == Modded89Layout::bigram_bucket() || bucket == Modded89Layout::embeddings_bucket();
  const std::vector<RowSparseGrad>& rows = tables ? table_rows_.batch() : no_row_sparse_grads();
  if (!accumulating()) {
    zero_grads_->zero_bucket(grads_, bucket, rows, stream_);
    return;
  }
  zero_accum_->zero_bucket(grad_target_, bucket, rows, stream_);
  zero_grads_->add_bucket(bucket, rows, stream_);
}

// An accumulating backward adds the micro-step's bucket into the step's gradients (one rounding per micro-step).
void Modded89Model::finish_bucket_grads(int bucket, const BucketHook& on_bucket_ready) {
  const ParamBucket& span = layout_.buckets[static_cast<size_t>(bucket)];
  if (accumulating()) add_into(grads_ + span.offset, grad_target_ + span.offset, span.padded_size, stream_);
  if (on_bucket_ready) on_bucket_ready(bucket);
}

// z holds dz: the head's gradients, the final norm, MUDD1's connections and MLP; leaves dx = d(layer 10's output).
void Modded89Model::head_backward() {
  Buffers& b = *buffers_;
  const Modded89Config& cfg = layout_.config;
  const int T = seq_len_, C = cfg.channels(), V = cfg.vocab_size;
  if (b.fp8_head) {  // dxf and dW_head (fp32 sums rounded once into the gradient) from the forward's fp8 copies
    fp8_head_backward_from_codes(b.matmul, *b.fp8_head, b.dn, grad("head"), T, /*accumulate=*/false, stream_);
  } else {
    GemmArgs dweight;  // dW_head (C, V) = xf^T dz
    dweight.d = grad("head"), dweight.a = b.xf, dweight.b = b.z, dweight.m = C, dweight.n = V, dweight.k = T;
    dweight.trans_a = true;
    gemm(b.matmul, dweight, stream_);
    GemmArgs dinput;  // dxf (T, C) = dz W_head^T
    dinput.d = b.dn, dinput.a = b.z, dinput.b = param("head"), dinput.m = T, dinput.n = C, dinput.k = V;
    dinput.trans_b = true;
    gemm(b.matmul, dinput, stream_);
  }
  // xf = norm(x_final), x_final = x + MUDD1's gated streams, in one pass (residual_norm_backward): dx = the gradient
  // of x (coefficient 1, written), each stream's gradient added, the gate columns' dots.
  const floatX* x = b.layers[kModded89Layers - 1].x_out;
  ResidualMixIn mix;
  mix.x_in = ConstRows{x, C};
  mix.scalars = b.fp32_params;
  const TokenMix streams = token_mix_grads(b.mlps[3].gate(), b.d_gates[3],  // the streams' first writer (backward)
                                           {{b.x_start, 0, b.d_cache0, false},
                                            {b.layers[7].x_out, 1, b.d_cache7, false},
                                            {b.layers[10].x_in, 2, b.d_cache9, false},
                                            {b.ve[0], 3, b.d_ve[0], false},
                                            {b.layers[3].x_out, 4, b.d_cache3, false}},
                                           C);
  residual_norm_backward({Rows{b.dx, C}}, {b.dn, b.x_final, b.rstd_f, nullptr}, streams, mix, T, C, b.scratch,
                         b.scratch_floats, stream_);
  small_mlp_backward(3, x, b.dx);
}

// The small MLP `index` (0 G0, 1 G1, 2 mu, 3 mu') from its outputs' fp32 gradient: its parameters' gradients, and
// dx (T, C) += the gradient of its input x.
void Modded89Model::small_mlp_backward(int index, const floatX* x, floatX* dx) {
  static const char* const kPrefixes[4] = {"gate0.", "gate1.", "mudd0.", "mudd1."};
  Buffers& b = *buffers_;
  Buffers::SmallMlp& mlp = b.mlps[index];
  const std::string prefix = kPrefixes[index];
  const int T = seq_len_, C = layout_.config.channels(), m = layout_.config.mudd_hidden;
  GateMlpScale scale;
  if (index < 2)
    scale.scale = b.fp32_params + fp32_index("mudd_gate_scale", 0);
  else
    scale.constant = kMuddScale;
  float* dscale = index < 2 ? b.d_fp32 + fp32_index("mudd_gate_scale", 0) : nullptr;
  gate_mlp_output_backward(b.d_mlp_raw, grad(prefix + "b2"), dscale, b.d_gates[index], mlp.out_raw,
                           param(prefix + "b2"), scale, T, mlp.columns, stream_);
  GemmArgs dw2;  // dW2 (n, m) = d_raw^T hidden
  dw2.d = grad(prefix + "w2"), dw2.a = b.d_mlp_raw, dw2.b = mlp.hidden, dw2.m = mlp.columns, dw2.n = m, dw2.k = T;
  dw2.trans_a = true;
  gemm(b.matmul, dw2, stream_);
  GemmArgs dhidden;  // (T, m) = d_raw W2
  dhidden.d = b.d_hidden, dhidden.a = b.d_mlp_raw, dhidden.b = param(prefix + "w2"), dhidden.m = T, dhidden.n = m;
  dhidden.k = mlp.columns;
  gemm(b.matmul, dhidden, stream_);
  gelu_exact_backward(b.d_hidden, mlp.hidden_pre, b.d_hidden, static_cast<size_t>(T) * m, stream_);
  GemmArgs dw1;  // dW1 (m, C) = dpre^T x
  dw1.d = grad(prefix + "w1"), dw1.a = b.d_hidden, dw1.b = x, dw1.m = m, dw1.n = C, dw1.k = T, dw1.trans_a = true;
  gemm(b.matmul, dw1, stream_);
  GemmArgs dinput;  // dx (T, C) += dpre W1
  dinput.d = dx, dinput.a = b.d_hidden, dinput.b = param(prefix + "w1"), dinput.m = T, dinput.n = C, dinput.k = m;
  dinput.beta = 1.0f;
  gemm(b.matmul, dinput, stream_);
}

// b.dx holds d(layer i's output); leaves d(layer i's input stream), the previous layer's output.
void Modded89Model::layer_backward(int i) {
  Buffers& b = *buffers_;
  Buffers::Layer& l = b.layers[i];
  const Modded89Structure& structure = layout_.structure;
  const Modded89Layer& role = structure.layers[static_cast<size_t>(i)];
  const int T = seq_len_, C = layout_.config.channels();
  auto add_into_dx = [&](const floatX* extra) {
    mix_forward(Rows{b.dx, C}, ConstRows{b.dx, C}, ConstRows{extra, C}, b.fp32_params, one(), one(), T, C, stream_);
  };
  if (i == structure.skip_from) add_into_dx(b.d_cache3);  // cache3 is this layer's output
  if (i == 7) add_into_dx(b.d_cache7);
  mlp_backward(i);  // leaves dn = d xn_mlp
  if (role.attention && !role.mudd) {
    attention_output_and_mlp_norm_backward(i);
    attention_backward(i, l.xn_attn);  // leaves dn = d xn_attn
    if (!attention_norm_backward_fused_after(i - 1))
      rmsnorm_backward(role.reads_layer7 ? b.d_cache7 : b.dx, b.dn, role.reads_layer7 ? b.layers[7].x_out : l.x_in,
                       l.rstd_attn, T, C, /*accumulate=*/true, stream_);
  } else {
    rmsnorm_backward(b.dx, b.dn, l.x_attn, l.rstd_mlp, T, C, /*accumulate=*/true, stream_);
    if (role.mudd) mudd_attention_backward(i);
  }
  if (i == structure.skip_to) {  // x_in = previous + G1[28] sigmoid(skip_lambda) cache3
    token_mix_backward(
        b.dx, C,
        token_mix_grads(b.mlps[1].gate(), b.d_gates[1], {{l.skip, structure.skip_gate.column, b.d_branch, false}}, C),
        T, C, stream_);
    mix_backward(Rows{b.d_cache3, C}, true, Rows{nullptr, C}, false, b.d_fp32, ConstRows{b.d_branch, C},
                 ConstRows{b.layers[structure.skip_from].x_out, C}, ConstRows{nullptr, C}, b.fp32_params,
                 MixCoefficient{MixScalar::kSigmoid, kModded89SkipLambda}, one(), T, C, b.scratch, b.scratch_floats,
                 stream_);
  }
  if (i == structure.post_gate_layer) small_mlp_backward(1, l.x_in, b.dx);
  if (role.mudd) add_into_dx(b.d_cache9);  // cache9 is layer 10's input
}

// dx = d(x_out) -> x_attn's gradient through the residual x_out = r_M x_attn + p_M mlp (layer 10: mu12, mu13), and
// dn = d xn_mlp through the MLP (its norm's backward is layer_backward's). Where layer i + 1's attention norm
// backward is fused in (attention_norm_backward_fused_after), d(x_out) is dx plus that norm's gradient from
// dn = d xn_attn of layer i + 1, as the forward's one pass wrote both.
void Modded89Model::mlp_backward(int i) {
  Buffers& b = *buffers_;
  Buffers::Layer& l = b.layers[i];
  const Modded89Layer& role = layout_.structure.layers[static_cast<size_t>(i)];
  const int T = seq_len_, C = layout_.config.channels(), hidden = layout_.config.mlp_hidden();
  const std::string name = "layers." + std::to_string(i) + ".mlp";
  const floatX* bank = param(name);
  floatX* dbank = grad(name);
  if (role.mudd)
    token_mix_backward(b.dx, C,
                       token_mix_grads(b.mlps[2].gate(), b.d_gates[2],
                                       {{l.x_attn, 12, b.dx, false}, {l.mlp_out, 13, b.d_branch, false}}, C),
                       T, C, stream_);
  else if (attention_norm_backward_fused_after(i)) {
    const Buffers::Layer& next = b.layers[i + 1];
    residual_norm_backward({Rows{b.dx, C}, false, Rows{b.d_branch, C}, false, b.d_fp32},
                           {b.dn, l.x_out, next.rstd_attn, b.dx}, TokenMix{},
                           residual_lambda_mix(l.x_attn, l.mlp_out, 2 * i + 1), T, C, b.scratch, b.scratch_floats,
                           stream_);
  } else {
    const ResidualMixIn mix = residual_lambda_mix(l.x_attn, l.mlp_out, 2 * i + 1);
    mix_backward(Rows{b.dx, C}, false, Rows{b.d_branch, C}, false, b.d_fp32, ConstRows{b.dx, C}, mix.x_in, mix.y,
                 mix.scalars, mix.a, mix.b, T, C, b.scratch, b.scratch_floats, stream_);
  }
  const bool wgmma = fused_gemms_ == FusedGemms::kWgmma;
  if (wgmma) {  // dpre = 2 sqrt(post) (d_mlp c_proj^T) from one GEMM; c_proj (in, out) = (N, K)
    wgmma_gemm_launch(WgmmaEpilogue::kReluSquaredBackwardFromPost, b.d_wide, nullptr, l.post, b.d_branch,
                      bank + static_cast<size_t>(hidden) * C, /*w_k_major=*/true, T, hidden, C, stream_);
  } else {
    GemmArgs dpost;  // (T, 4C) = d_mlp c_proj^T, c_proj stored (in, out)
    dpost.d = b.d_wide, dpost.a = b.d_branch, dpost.b = bank + static_cast<size_t>(hidden) * C, dpost.m = T;
    dpost.n = hidden, dpost.k = C, dpost.trans_b = true;
    gemm(b.matmul, dpost, stream_);
  }
  GemmArgs dproj;  // dc_proj (4C, C) = post^T d_mlp
  dproj.d = dbank + static_cast<size_t>(hidden) * C, dproj.a = l.post, dproj.b = b.d_branch, dproj.m = hidden;
  dproj.n = C, dproj.k = T, dproj.trans_a = true;
  gemm(b.matmul, dproj, stream_);
  if (!wgmma) relu_squared_backward_from_post(b.d_wide, l.post, b.d_wide, static_cast<size_t>(T) * hidden, stream_);
  GemmArgs dfc;  // dc_fc (4C, C) = dpre^T xn
  dfc.d = dbank, dfc.a = b.d_wide, dfc.b = l.xn_mlp, dfc.m = hidden, dfc.n = C, dfc.k = T, dfc.trans_a = true;
  gemm(b.matmul, dfc, stream_);
  GemmArgs dxn;  // (T, C) = dpre c_fc
  dxn.d = b.dn, dxn.a = b.d_wide, dxn.b = bank, dxn.m = T, dxn.n = C, dxn.k = hidden;
  gemm(b.matmul, dxn, stream_);  // dn = d xn_mlp: layer_backward takes it through the norm
}

// Backward of attention_output_and_mlp_norm from dx = d(x_attn) from the MLP's residual and dn = d xn_mlp: one pass
// (residual_norm_backward) gives d x_in (into dx), d attn_out (into d_branch), the x0 and bigram streams'
// gradients, their gate columns and the lambdas' gradients, as the norm, token mix and mix backwards did.
void Modded89Model::attention_output_and_mlp_norm_backward(int i) {
  Buffers& b = *buffers_;
  Buffers::Layer& l = b.layers[i];
  const Modded89Layer& role = layout_.structure.layers[static_cast<size_t>(i)];
  const int T = seq_len_, C = layout_.config.channels();
  const GateRows gate = b.mlps[role.x0_gate.gate].gate();
  float* dgate = b.d_gates[role.x0_gate.gate];
  const bool add_x0 = i != first_x0_stream_layer();  // the first (the backward's) stores
  TokenMix streams = token_mix_grads(gate, dgate, {{b.x0, role.x0_gate.column, b.d_x0, add_x0}}, C);
  if (i != 0)
    streams = token_mix_grads(
        gate, dgate, {{b.x0, role.x0_gate.column, b.d_x0, add_x0}, {b.b, role.bigram_gate.column, b.d_b}}, C);
  const ResidualMixIn mix = residual_lambda_mix(l.x_in, l.attn_out, 2 * i);
  residual_norm_backward({Rows{b.dx, C}, false, Rows{b.d_branch, C}, false, b.d_fp32},
                         {b.dn, l.x_attn, l.rstd_mlp, b.dx}, streams, mix, T, C, b.scratch, b.scratch_floats, stream_);
}

// Layer 10 from dx = d(x_attn): the four connections after attention, x' and aux_v's, the attention, MUDD0.
void Modded89Model::mudd_attention_backward(int i) {
  Buffers& b = *buffers_;
  Buffers::Layer& l = b.layers[i];
  const int T = seq_len_, C = layout_.config.channels();
  const floatX *x = l.x_in, *cache0 = b.x_start, *cache7 = b.layers[7].x_out;
  const GateRows mu = b.mlps[2].gate();
  float* dmu = b.d_gates[2];
  token_mix_backward(b.dx, C,
                     token_mix_grads(mu, dmu,
                                     {{l.x_pre, 8, b.dx_pre, false},
                                      {l.attn_out, 9, b.d_branch, false},
                                      {cache0, 10, b.d_cache0},
                                      {b.b, 11, b.d_b, false}},  // d_b's first writer (backward)
                                     C),
                     T, C, stream_);
  // x' = x + mu5 x + mu3 cache0 + mu4 cache7: x's two terms in two launches (one launch stores each gradient once)
  token_mix_backward(
      b.dx_pre, C,
      token_mix_grads(mu, dmu, {{x, -1, b.dx, false}, {cache0, 3, b.d_cache0}, {cache7, 4, b.d_cache7}}, C), T, C,
      stream_);
  token_mix_backward(b.dx_pre, C, token_mix_grads(mu, dmu, {{x, 5, b.dx}}, C), T, C, stream_);
  attention_backward(i, l.xn_attn);
  rmsnorm_backward(b.d_cache7, b.dn, cache7, l.rstd_attn, T, C, /*accumulate=*/true, stream_);
  // aux_v (its gradient is dv) = mu0 cache0 + mu1 cache7 + mu2 x + (mu6 | mu7) ve4
  for (int half = 0; half < 2; half++) {
    const size_t at = static_cast<size_t>(half) * (C / 2);
    token_mix_backward(b.dv + at, C,  // d_ve[4]'s only writer: each half stored
                       token_mix_grads(mu, dmu, {{b.ve[4] + at, 6 + half, b.d_ve[4] + at, false}}, C), T, C / 2,
                       stream_);
  }
  token_mix_backward(b.dv, C,
                     token_mix_grads(mu, dmu, {{cache0, 0, b.d_cache0}, {cache7, 1, b.d_cache7}, {x, 2, b.dx}}, C), T,
                     C, stream_);
  small_mlp_backward(2, x, b.dx);
}

// From b.d_branch = d(attn_out): leaves b.dn = d(xn), b.dv = d(v) (the value input's gradient, which layer 10's
// aux_v takes), the weights' and lambdas' gradients, the gates' columns.
void Modded89Model::attention_backward(int i, const floatX* xn) {
  Buffers& b = *buffers_;
  Buffers::Layer& l = b.layers[i];
  const Modded89Config& cfg = layout_.config;
  const Modded89Layer& role = layout_.structure.layers[static_cast<size_t>(i)];
  const int T = seq_len_, C = cfg.channels(), H = cfg.num_heads, D = cfg.head_dim;
  const size_t CC = static_cast<size_t>(C) * C;
  const std::string prefix = "layers." + std::to_string(i) + ".";
  scale_layer_weights(i);
  GemmArgs dy;  // dy (T, C) = d_out (l1 W_o)
  dy.d = b.dy, dy.a = b.d_branch, dy.b = b.scaled_weights + 3 * CC, dy.m = T, dy.n = C, dy.k = C;
  gemm(b.matmul, dy, stream_);
  GemmArgs dwo;  // d(l1 W_o) (C, C) = d_out^T y
  dwo.d = b.d_weights + 3 * CC, dwo.a = b.d_branch, dwo.b = l.y_gated, dwo.m = C, dwo.n = C, dwo.k = T;
  dwo.trans_a = true;
  gemm(b.matmul, dwo, stream_);
  floatX* const d_heads = b.dy;  // the heads' output gradient, taken back through the gate and XSA in place
  if (role.output_gate.present()) {  // y_h *= G[t, column + h]; its gradient in place
    const GateRows gate = b.mlps[role.output_gate.gate].gate();
    head_gate_backward(d_heads, b.d_gates[role.output_gate.gate] + role.output_gate.column, d_heads, l.y_xsa,
                       gate.rows + role.output_gate.column, HeadGateShape{T, H, D, C, gate.columns}, stream_);
  }
  if (role.xsa.present()) {  // its share of dv first (every column: H D = C), the attention's dV store adds to it
    const GateRows gate = b.mlps[role.xsa.gate].gate();
    xsa_backward(d_heads, b.dv, b.d_gates[role.xsa.gate] + role.xsa.column, d_heads, l.y_dc, l.v,
                 gate.rows + role.xsa.column, XsaShape{T, H, D, C, C, kModded89GateColumns, kModded89GateColumns},
                 stream_);
  }
  window_attention_backward(i, d_heads, /*accumulate_dv=*/role.xsa.present());
  if (role.dc) {  // y_dc = y + DC(q, k, v; w1, w2): y's gradient is d_heads itself
    const DcInputs dc{l.q, l.k, l.v,           C,          C, C, l.dc_weights, l.dc_weights + H, 2 * H, b.doc_start, T,
                      H,   D,   cfg.dc_window, attn_scale_};
    dc_backward(b.dq, C, b.dk, C, b.dv, C, b.dw1, b.dw2, b.dc_delta, d_heads, C, l.dc_lse, dc, stream_);
    dc_mix_weights_backward(b.d_gates[1], b.dw1, b.dw2, b.mlps[1].out, kModded89GateColumns, kModded89DcW1Column,
                            kModded89DcW2Column, T, H, stream_);
  }
  // q, k: norm and rotary back to the GEMM's output (the k launch with its key offset), unless the attention's
  // stores did it
  const int step = role.paired_heads ? 2 : 1;
  if (!norm_rope_in_attention_stores(i, false))
    qk_norm_pair_rope_backward(b.d_qk_raw, 2 * C, b.dq, C, l.qk_raw, 2 * C, l.rstd_q, b.rope_cos, b.rope_sin, T, H, D,
                               PairRopeLayout{cfg.rotary_pairs(), step, false}, stream_);
  if (!norm_rope_in_attention_stores(i, true))
    qk_norm_pair_rope_backward(b.d_qk_raw + C, 2 * C, b.dk, C, l.qk_raw + C, 2 * C, l.rstd_k, b.rope_cos, b.rope_sin,
                               T, H, D, PairRopeLayout{cfg.rotary_pairs(), step, role.key_offset, 0}, stream_);
  GemmArgs dqk;  // d(l0 W_qk) (2C, C) = d_qk^T xn
  dqk.d = b.d_weights, dqk.a = b.d_qk_raw, dqk.b = xn, dqk.m = 2 * C, dqk.n = C, dqk.k = T, dqk.trans_a = true;
  gemm(b.matmul, dqk, stream_);
  GemmArgs dwv = dqk;  // d(l0 W_v) (C, C) = dv^T xn
  dwv.d = b.d_weights + 2 * CC, dwv.a = b.dv, dwv.m = C;
  gemm(b.matmul, dwv, stream_);
  GemmArgs dxn;  // dxn (T, C) = d_qk (l0 W_qk) + dv (l0 W_v)
  dxn.d = b.dn, dxn.a = b.d_qk_raw, dxn.b = b.scaled_weights, dxn.m = T, dxn.n = C, dxn.k = 2 * C;
  gemm(b.matmul, dxn, stream_);
  dxn.a = b.dv, dxn.b = b.scaled_weights + 2 * CC, dxn.k = C, dxn.beta = 1.0f;
  gemm(b.matmul, dxn, stream_);
  // Table 0 also feeds MUDD1, whose backward (in the head) stored d_ve[0] first; tables 1-3 have this gate alone.
  if (role.value_embed >= 0)
    value_embed_gate_backward(b.d_ve[role.value_embed], /*accumulate_dve=*/role.value_embed == 0, b.dn, C,
                              grad(prefix + "ve_gate"), b.dv, b.ve[role.value_embed], xn, param(prefix + "ve_gate"),
                              ValueGateShape{T, H, D, C, C}, b.scratch, b.scratch_floats, stream_);
  // W = W_eff / lambda: dW += lambda dW_eff, dlambda += <dW_eff, W>
  const floatX* vo = param(prefix + "vo");
  floatX* dvo = grad(prefix + "vo");
  const MixCoefficient l0 = identity(fp32_index("scalars", 2 * i)), l1 = identity(fp32_index("scalars", 2 * i + 1));
  auto weight_grad = [&](floatX* dweight, const floatX* weight, const floatX* d_eff, int rows, MixCoefficient lambda) {
    mix_backward(Rows{dweight, C}, true, Rows{nullptr, C}, false, b.d_fp32, ConstRows{d_eff, C}, ConstRows{weight, C},
                 ConstRows{nullptr, C}, b.fp32_params, lambda, one(), rows, C, b.scratch, b.scratch_floats, stream_);
  };
  weight_grad(grad(prefix + "qk"), param(prefix + "qk"), b.d_weights, 2 * C, l0);
  weight_grad(dvo, vo, b.d_weights + 2 * CC, C, l0);
  weight_grad(dvo + CC, vo + CC, b.d_weights + 3 * CC, C, l1);
}

// dx = d(x_start): the pre gate's bigram term, G0's MLP (from x0), x0's norm, the smear, the gathers' scatters.
void Modded89Model::input_backward() {
  Buffers& b = *buffers_;
  const Modded89Config& cfg = layout_.config;
  const int T = seq_len_, C = cfg.channels();
  const size_t table = static_cast<size_t>(cfg.vocab_size) * C;
  mix_forward(Rows{b.dx, C}, ConstRows{b.dx, C}, ConstRows{b.d_cache0, C}, b.fp32_params, one(), one(), T, C, stream_);
  const int bigram_column = layout_.structure.layers[0].bigram_gate.column;
  token_mix_backward(
      b.dx, C, token_mix_grads(b.mlps[0].gate(), b.d_gates[0], {{b.x0, -1, b.d_x0}, {b.b, bigram_column, b.d_b}}, C), T,
      C, stream_);
  small_mlp_backward(0, b.x0, b.d_x0);
  rmsnorm_backward(b.d_embed, b.d_x0, b.smeared, b.rstd0, T, C, /*accumulate=*/false, stream_);
  smear_backward(b.dn, grad("smear_gate"), b.d_fp32, b.d_embed, b.e, param("smear_gate"), b.fp32_params,
                 kModded89SmearLambda, T, C, b.scratch, b.scratch_floats, stream_);
  EmbeddingScatter<floatX> scatter;
  scatter.count = 4;
  scatter.table_grads[0] = grad("embed");
  scatter.douts[0] = b.dn;
  for (int k = 0; k < 3; k++) {
    scatter.table_grads[1 + k] = grad("value_embeds") + k * table;
    scatter.douts[1 + k] = b.d_ve[k];
  }
  embedding_backward(scatter, *b.token_plan, C, stream_);
  scatter.count = 2;
  for (int k = 0; k < 2; k++) {
    scatter.table_grads[k] = grad("value_embeds") + (3 + k) * table;
    scatter.douts[k] = b.d_ve[3 + k];
  }
  embedding_backward(scatter, *b.token_plan, C, stream_);
  bigram_sign(b.d_b, b.d_b, b.inputs, b.signs, T, C, stream_);  // a product with +-1: its own backward
  scatter.count = 1;
  scatter.table_grads[0] = grad("bigram_embed");
  scatter.douts[0] = b.d_b;
  embedding_backward(scatter, *b.hash_plan, C, stream_);
}

std::vector<float> Modded89Model::download_grads() const {
  return download_as_float(grads_, layout_.total_size, stream_);
}

std::vector<float> Modded89Model::download_losses(int loss_slot) const {
  if (loss_slot < 0 || loss_slot >= loss_slots_)
    throw std::out_of_range("download_losses: slot " + std::to_string(loss_slot) + " of " +
                            std::to_string(loss_slots_));
  std::vector<float> losses(static_cast<size_t>(seq_len_));
  CUDA_CHECK(cudaMemcpyAsync(losses.data(), buffers_->losses + static_cast<size_t>(loss_slot) * seq_len_,
                             losses.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  return losses;
}

void Modded89Model::enqueue_mean_loss(int num_slots, int result) {
  if (num_slots < 1 || num_slots > loss_slots_)
    throw std::out_of_range("enqueue_mean_loss: " + std::to_string(num_slots) + " slots (the model has " +
                            std::to_string(loss_slots_) + ")");
  loss_means_->enqueue(buffers_->losses, static_cast<size_t>(num_slots) * seq_len_, result, stream_);
}

double Modded89Model::read_mean_loss(int result) { return loss_means_->read(result); }

Fp32Params Modded89Model::take_fp32_params() {
  fp32_taken_ = true;
  return Fp32Params{buffers_->fp32_params, layout_.find("scalars").offset, buffers_->fp32_count};
}

const std::vector<RowSparseGrad>& Modded89Model::row_sparse_grads() const {
  return table_rows_.step();
}

void Modded89Model::grad_rows_written(int tensor, const std::vector<int>& rows) { zero_grads_->add(tensor, rows); }

void Modded89Model::all_grad_rows_written(int tensor) { zero_grads_->add_all(tensor); }

std::string Modded89Model::bucket_name(int bucket) const {
  if (bucket == Modded89Layout::bigram_bucket()) return "bigram table";
  if (bucket == Modded89Layout::embeddings_bucket()) return "embeddings";
  if (bucket == layout_.head_bucket()) return "head";
  return "layer " + std::to_string(bucket - Modded89Layout::layer_bucket(0));
}

void Modded89Model::set_gemm_algo_selection(GemmAlgoSelection selection) { buffers_->matmul.set_selection(selection); }

void Modded89Model::set_seq_len(int seq_len) {
  if (has_training_forward_)
    throw std::logic_error("Modded89Model::set_seq_len between a training forward and its backward");
  if (seq_len < 1 || seq_len > allocated_seq_len_)
    throw std::invalid_argument("modded89 model: a step of " + std::to_string(seq_len) + " tokens outside [1, " +
                                std::to_string(allocated_seq_len_) + "] (the model was allocated for " +
                                std::to_string(allocated_seq_len_) + ")");
  if (buffers_->fp8_head && !fp8_head_shape_fits(seq_len, layout_.config.channels(), layout_.config.vocab_size))
    throw std::invalid_argument("modded89 model: the FP8 head needs steps of a multiple of 16 tokens, got " +
                                std::to_string(seq_len));
  if (buffers_->fp8_mlp && !Modded89Fp8Mlp::shape_fits(seq_len, layout_.config.channels()))
    throw std::invalid_argument("modded89 model: the FP8 MLP needs steps of a multiple of 16 tokens, got " +
                                std::to_string(seq_len));
  seq_len_ = seq_len;
  decoded_rows_ = 0;
  batch_uploaded_ = uploaded_training_ = false;  // a batch of the old length
}

void Modded89Model::set_loss_weights(const MtpLossWeights& weights) {
  if (weights.tokens < 1 || weights.tokens > kMtpMaxTokens)
    throw std::invalid_argument("set_loss_weights: " + std::to_string(weights.tokens) + " next tokens (1.." +
                                std::to_string(kMtpMaxTokens) + ")");
  loss_weights_ = weights;
  // In stream order: the forwards enqueued before keep theirs; from pageable memory, taken before returning.
  CUDA_CHECK(cudaMemcpyAsync(buffers_->loss_weights, &loss_weights_, sizeof(MtpLossWeights), cudaMemcpyHostToDevice,
                             stream_));
}

}  // namespace llmc
