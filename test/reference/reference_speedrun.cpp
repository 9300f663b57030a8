// Double-precision CPU reference of the speedrun model (see reference_speedrun.h). Written for reading:
// each part of the record (docs/recipes.md) is one step of block_forward / block_backward, in the same order.
#include "test/reference/reference_speedrun.h"

#include <cmath>
#include <random>
#include <stdexcept>

#include "llmc/base/bf16_bits.h"
#include "llmc/base/normal_sampler.h"
#include "llmc/model/modded44/yarn.h"
#include "test/reference/reference_ops.h"
#include "test/reference/reference_speedrun_ops.h"
#include "test/reference/window_attention_reference.h"

namespace ref {

using llmc::kSpeedrunGateWidth;
using llmc::kSpeedrunValueEmbeds;

// ---- parameters ------------------------------------------------------------------------------------

std::vector<NamedTensor> named_tensors(SpeedrunParams& p, const llmc::SpeedrunConfig& config) {
  const size_t V = config.vocab_size, C = config.channels(), H = config.num_heads;
  std::vector<NamedTensor> tensors;
  tensors.push_back({"embed", {V, C}, true, &p.embed});
  for (int k = 0; k < kSpeedrunValueEmbeds; k++)
    tensors.push_back({"ve" + std::to_string(k), {V, C}, true, &p.value_embeds[k]});
  tensors.push_back({"smear_gate", {1, static_cast<size_t>(kSpeedrunGateWidth)}, true, &p.smear_gate});
  for (size_t i = 0; i < p.blocks.size(); i++) {
    SpeedrunBlockParams& block = p.blocks[i];
    const std::string prefix = "blocks." + std::to_string(i) + ".";
    if (!block.qkvo.empty()) {
      tensors.push_back({prefix + "qkvo", {C, 4 * C}, false, &block.qkvo});
      tensors.push_back({prefix + "attn_gate", {H, static_cast<size_t>(kSpeedrunGateWidth)}, true, &block.attn_gate});
    }
    if (!block.fc.empty()) {
      tensors.push_back({prefix + "fc", {C, 4 * C}, false, &block.fc});
      tensors.push_back({prefix + "proj", {C, 4 * C}, false, &block.proj});
    }
  }
  tensors.push_back({"head", {V, C}, true, &p.head});
  const size_t num_scalars = llmc::SpeedrunScalarIndex{config.num_blocks}.count();
  tensors.push_back({"scalars", {num_scalars}, false, &p.scalars});
  return tensors;
}

SpeedrunParams zero_speedrun_params(const llmc::SpeedrunConfig& config) {
  llmc::validate_speedrun_config(config);
  const llmc::SpeedrunStructure structure = llmc::speedrun_structure(config.num_blocks);
  const size_t V = config.vocab_size, C = config.channels(), H = config.num_heads;
  SpeedrunParams p;
  p.embed.assign(V * C, 0.0);
  for (auto& table : p.value_embeds) table.assign(V * C, 0.0);
  p.smear_gate.assign(kSpeedrunGateWidth, 0.0);
  p.blocks.resize(config.num_blocks);
  for (int i = 0; i < config.num_blocks; i++) {
    if (structure.blocks[i].attention) {
      p.blocks[i].qkvo.assign(C * 4 * C, 0.0);
      p.blocks[i].attn_gate.assign(H * kSpeedrunGateWidth, 0.0);
    }
    if (structure.blocks[i].mlp) {
      p.blocks[i].fc.assign(C * 4 * C, 0.0);
      p.blocks[i].proj.assign(C * 4 * C, 0.0);
    }
  }
  p.head.assign(V * C, 0.0);
  p.scalars.assign(llmc::SpeedrunScalarIndex{config.num_blocks}.count(), 0.0);
  return p;
}

namespace {

double round_to_bf16(double x) { return llmc::bf16_bits_to_float(llmc::float_to_bf16_bits(static_cast<float>(x))); }

}  // namespace

SpeedrunParams init_speedrun_params(const llmc::SpeedrunConfig& config, uint64_t seed) {
  SpeedrunParams p = zero_speedrun_params(config);
  const size_t C = config.channels();
  llmc::NormalSampler normal(seed);
  std::mt19937_64 uniform_bits(seed ^ 0x9e3779b97f4a7c15ull);
  const double bound = std::sqrt(3.0) * 0.5 / std::sqrt(static_cast<double>(C));
  auto uniform = [&] {  // U(-bound, bound) from 53 random bits, rounded to fp32 storage
    const double unit = static_cast<double>(uniform_bits() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<double>(static_cast<float>((2.0 * unit - 1.0) * bound));
  };
  for (double& x : p.embed) x = round_to_bf16(normal.next());
  for (auto& table : p.value_embeds)
    for (double& x : table) x = round_to_bf16(normal.next());
  for (SpeedrunBlockParams& block : p.blocks) {
    for (size_t i = 0; i < block.qkvo.size(); i++)  // rows 0..3C-1 of the [4C, C] view: W_q, W_k, W_v; W_o stays 0
      if (i < 3 * C * C) block.qkvo[i] = uniform();
    for (double& x : block.fc) x = uniform();
  }
  const llmc::SpeedrunScalarIndex index{config.num_blocks};
  for (int k = 0; k < config.num_blocks; k++) p.scalars[index.skip_weight(k)] = -1.5;
  for (int i = 0; i < config.num_blocks; i++) {
    p.scalars[index.block_lambda(i, 0)] = 1.0;
    p.scalars[index.block_lambda(i, 1)] = 0.0;
    p.scalars[index.sa_lambda(i, 0)] = 0.5;
    p.scalars[index.sa_lambda(i, 1)] = 0.5;
  }
  p.scalars[index.smear_lambda()] = 0.0;
  p.scalars[index.backout_lambda()] = 0.5;
  for (int s = index.backout_lambda() + 1; s < index.count(); s++) p.scalars[s] = 1.0;
  return p;
}

// ---- helpers -----------------------------------------------------------------------------------------

namespace {

// out (N, OC) = inp (N, C) @ w, with w stored (C, OC) ("in, out", like W_fc).
void matmul_in_out_forward(double* out, const double* inp, const double* w, int N, int C, int OC) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double acc = 0.0;
      for (int c = 0; c < C; c++) acc += inp[static_cast<size_t>(n) * C + c] * w[static_cast<size_t>(c) * OC + o];
      out[static_cast<size_t>(n) * OC + o] = acc;
    }
}

// Accumulates dinp (N, C) and dw (C, OC) of matmul_in_out_forward.
void matmul_in_out_backward(double* dinp, double* dw, const double* dout, const double* inp, const double* w, int N,
                            int C, int OC) {
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++)
      for (int o = 0; o < OC; o++) {
        dinp[static_cast<size_t>(n) * C + c] +=
            dout[static_cast<size_t>(n) * OC + o] * w[static_cast<size_t>(c) * OC + o];
        dw[static_cast<size_t>(c) * OC + o] +=
            inp[static_cast<size_t>(n) * C + c] * dout[static_cast<size_t>(n) * OC + o];
      }
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); i++) sum += a[i] * b[i];
  return sum;
}

void add_scaled(std::vector<double>& target, double scale, const std::vector<double>& source) {
  for (size_t i = 0; i < target.size(); i++) target[i] += scale * source[i];
}

// Splits qkv (T, 3C) into q, k, v (T, C) each; joins them back for the backward.
void split_qkv(const std::vector<double>& qkv, std::vector<double>& q, std::vector<double>& k, std::vector<double>& v,
               int T, int C) {
  q.resize(static_cast<size_t>(T) * C), k.resize(static_cast<size_t>(T) * C), v.resize(static_cast<size_t>(T) * C);
  for (int t = 0; t < T; t++)
    for (int c = 0; c < C; c++) {
      q[static_cast<size_t>(t) * C + c] = qkv[static_cast<size_t>(t) * 3 * C + c];
      k[static_cast<size_t>(t) * C + c] = qkv[static_cast<size_t>(t) * 3 * C + C + c];
      v[static_cast<size_t>(t) * C + c] = qkv[static_cast<size_t>(t) * 3 * C + 2 * C + c];
    }
}

std::vector<double> join_qkv(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
                             int T, int C) {
  std::vector<double> qkv(static_cast<size_t>(T) * 3 * C);
  for (int t = 0; t < T; t++)
    for (int c = 0; c < C; c++) {
      qkv[static_cast<size_t>(t) * 3 * C + c] = q[static_cast<size_t>(t) * C + c];
      qkv[static_cast<size_t>(t) * 3 * C + C + c] = k[static_cast<size_t>(t) * C + c];
      qkv[static_cast<size_t>(t) * 3 * C + 2 * C + c] = v[static_cast<size_t>(t) * C + c];
    }
  return qkv;
}

}  // namespace

// ---- model -------------------------------------------------------------------------------------------

ReferenceSpeedrun::ReferenceSpeedrun(const llmc::SpeedrunConfig& config)
    : params(zero_speedrun_params(config)),
      grads(zero_speedrun_params(config)),
      config_(config),
      structure_(llmc::speedrun_structure(config.num_blocks)),
      scalar_{config.num_blocks} {
  const llmc::Yarn yarn(config.head_dim);
  set_rope(std::vector<double>(yarn.frequencies().begin(), yarn.frequencies().end()), yarn.attn_scale());
}

void ReferenceSpeedrun::set_rope(const std::vector<double>& frequencies, double attn_scale) {
  const int half = config_.head_dim / 2;
  if (static_cast<int>(frequencies.size()) != half)
    throw std::invalid_argument("set_rope: " + std::to_string(frequencies.size()) +
                                " frequencies, expected D/2 = " + std::to_string(half));
  std::vector<double> cos_table(static_cast<size_t>(config_.max_seq_len) * half), sin_table(cos_table.size());
  rope_tables(cos_table.data(), sin_table.data(), frequencies.data(), config_.max_seq_len, half);
  set_rope_tables(cos_table, sin_table, attn_scale);
}

void ReferenceSpeedrun::set_rope_tables(const std::vector<double>& cos_table, const std::vector<double>& sin_table,
                                        double attn_scale) {
  const size_t expected = static_cast<size_t>(config_.max_seq_len) * (config_.head_dim / 2);
  if (cos_table.size() != expected || sin_table.size() != expected)
    throw std::invalid_argument("set_rope_tables: tables must hold max_seq_len x D/2 = " + std::to_string(expected) +
                                " entries");
  cos_ = cos_table;
  sin_ = sin_table;
  attn_scale_ = attn_scale;
}

void ReferenceSpeedrun::zero_grad() { grads = zero_speedrun_params(config_); }

void ReferenceSpeedrun::check_inputs(const int* tokens, const int* targets, const int* cu_seqlens, int num_bounds,
                                     int T) const {
  const int V = config_.vocab_size;
  if (T <= 0 || T > config_.max_seq_len)
    throw std::invalid_argument("forward: T = " + std::to_string(T) + " outside [1, " +
                                std::to_string(config_.max_seq_len) + "]");
  for (int t = 0; t < T; t++) {
    if (tokens[t] < 0 || tokens[t] >= V)
      throw std::invalid_argument("forward: token " + std::to_string(tokens[t]) + " at " + std::to_string(t) +
                                  " outside [0, V)");
    if (targets != nullptr && (targets[t] < 0 || targets[t] >= V))
      throw std::invalid_argument("forward: target " + std::to_string(targets[t]) + " at " + std::to_string(t) +
                                  " outside [0, V)");
  }
  bool ok = num_bounds >= 2 && cu_seqlens[0] == 0 && cu_seqlens[num_bounds - 1] == T;
  for (int d = 1; ok && d < num_bounds; d++) ok = cu_seqlens[d] >= cu_seqlens[d - 1] && cu_seqlens[d] <= T;
  if (!ok) throw std::invalid_argument("forward: cu_seqlens must rise from 0 to T = " + std::to_string(T));
}

double ReferenceSpeedrun::forward(const int* tokens, const int* targets, const int* cu_seqlens, int num_bounds, int T,
                                  int window_short, int window_long) {
  check_inputs(tokens, targets, cu_seqlens, num_bounds, T);
  const int C = config_.channels(), V = config_.vocab_size, L = config_.num_blocks;
  T_ = T;
  window_short_ = window_short;
  window_long_ = window_long;
  tokens_.assign(tokens, tokens + T);
  have_targets_ = targets != nullptr;
  targets_.assign(T, 0);
  if (have_targets_) targets_.assign(targets, targets + T);
  cu_seqlens_.assign(cu_seqlens, cu_seqlens + num_bounds);

  // Embeddings, smear, x0 = norm(smeared).
  const size_t TC = static_cast<size_t>(T) * C;
  e_.resize(TC);
  embedding_forward(e_.data(), tokens, params.embed.data(), T, C);
  for (int k = 0; k < kSpeedrunValueEmbeds; k++) {
    ve_[k].resize(TC);
    embedding_forward(ve_[k].data(), tokens, params.value_embeds[k].data(), T, C);
  }
  smeared_.resize(TC);
  smear_forward(smeared_.data(), e_.data(), params.smear_gate.data(), params.scalars[scalar_.smear_lambda()], T, C);
  x0_.resize(TC);
  rstd0_.resize(T);
  rmsnorm_forward(x0_.data(), rstd0_.data(), smeared_.data(), T, C);

  // Blocks 1..L-1 with the U-net stack.
  blocks_.assign(L, SpeedrunBlockActivations{});
  popped_from_.assign(L, -1);
  std::vector<int> stack;
  std::vector<double> x = x0_;
  for (int i = 1; i < L; i++) {
    const llmc::SpeedrunBlock& role = structure_.blocks[i];
    if (role.pop_skip >= 0) {
      popped_from_[i] = stack.back();
      stack.pop_back();
      blocks_[i].skip_in = blocks_[popped_from_[i]].x_out;
      add_scaled(x, sigmoid(params.scalars[scalar_.skip_weight(role.pop_skip)]), blocks_[i].skip_in);
    }
    block_forward(i, x);
    if (role.push_skip) stack.push_back(i);
  }

  // Backout, final norm, head, soft cap, cross-entropy.
  x_final_ = x;
  add_scaled(x_final_, -params.scalars[scalar_.backout_lambda()], blocks_[structure_.backout_block].x_out);
  xf_.resize(TC);
  rstd_f_.resize(T);
  rmsnorm_forward(xf_.data(), rstd_f_.data(), x_final_.data(), T, C);
  z_.resize(static_cast<size_t>(T) * V);
  matmul_forward(z_.data(), xf_.data(), params.head.data(), nullptr, T, C, V);
  logits_.resize(z_.size());
  for (size_t i = 0; i < z_.size(); i++) logits_[i] = kSoftcapScale * sigmoid(z_[i] / kSoftcapDivisor);
  losses_.assign(T, NAN);
  if (!have_targets_) return NAN;
  softcap_cross_entropy_forward(losses_.data(), z_.data(), targets_.data(), T, V);
  double total = 0.0;
  for (double loss : losses_) total += loss;
  return total;
}

void ReferenceSpeedrun::block_forward(int i, std::vector<double>& x) {
  SpeedrunBlockActivations& acts = blocks_[i];
  const llmc::SpeedrunBlock& role = structure_.blocks[i];
  acts.x_in = x;
  acts.x_mix.resize(x.size());
  mix_forward(acts.x_mix.data(), params.scalars[scalar_.block_lambda(i, 0)], acts.x_in.data(),
              params.scalars[scalar_.block_lambda(i, 1)], x0_.data(), x.size());
  acts.x_attn = acts.x_mix;
  if (role.attention) attention_forward(i, acts);
  acts.x_out = acts.x_attn;
  if (role.mlp) mlp_forward(i, acts);
  x = acts.x_out;
}

void ReferenceSpeedrun::attention_forward(int i, SpeedrunBlockActivations& acts) {
  const int T = T_, C = config_.channels(), H = config_.num_heads, D = config_.head_dim;
  const SpeedrunBlockParams& p = params.blocks[i];
  const size_t TC = static_cast<size_t>(T) * C;
  acts.xn_attn.resize(TC);
  acts.rstd_attn.resize(T);
  rmsnorm_forward(acts.xn_attn.data(), acts.rstd_attn.data(), acts.x_mix.data(), T, C);
  std::vector<double> qkv(static_cast<size_t>(T) * 3 * C);
  matmul_forward(qkv.data(), acts.xn_attn.data(), p.qkvo.data(), nullptr, T, C, 3 * C);  // rows 0..3C-1: W_q, W_k, W_v
  split_qkv(qkv, acts.q, acts.k, acts.v, T, C);
  acts.qn.resize(TC), acts.kn.resize(TC), acts.rstd_q.resize(static_cast<size_t>(T) * H),
      acts.rstd_k.resize(static_cast<size_t>(T) * H);
  rmsnorm_forward(acts.qn.data(), acts.rstd_q.data(), acts.q.data(), T * H, D);
  rmsnorm_forward(acts.kn.data(), acts.rstd_k.data(), acts.k.data(), T * H, D);
  acts.qr.resize(TC), acts.kr.resize(TC);
  rope_forward(acts.qr.data(), acts.qn.data(), cos_.data(), sin_.data(), T, H, D);
  rope_forward(acts.kr.data(), acts.kn.data(), cos_.data(), sin_.data(), T, H, D);
  const int table = structure_.blocks[i].value_embed;
  acts.v_mixed.resize(TC);
  mix_forward(acts.v_mixed.data(), params.scalars[scalar_.sa_lambda(i, 0)], acts.v.data(),
              params.scalars[scalar_.sa_lambda(i, 1)], table >= 0 ? ve_[table].data() : nullptr, TC);
  acts.y.resize(TC);
  std::vector<double> lse(static_cast<size_t>(H) * T);
  window_attention_forward(acts.y.data(), lse.data(), acts.qr.data(), acts.kr.data(), acts.v_mixed.data(), T, H, D,
                           PackedDocuments{cu_seqlens_, window_of(i)}, attn_scale_);
  acts.y_gated.resize(TC);
  attention_gate_forward(acts.y_gated.data(), acts.y.data(), acts.xn_attn.data(), p.attn_gate.data(), T, H, D);
  std::vector<double> out(TC);
  matmul_forward(out.data(), acts.y_gated.data(), p.qkvo.data() + static_cast<size_t>(3) * C * C, nullptr, T, C,
                 C);  // W_o
  add_scaled(acts.x_attn, 1.0, out);
}

void ReferenceSpeedrun::mlp_forward(int i, SpeedrunBlockActivations& acts) {
  const int T = T_, C = config_.channels(), C4 = 4 * C;
  const SpeedrunBlockParams& p = params.blocks[i];
  acts.xn_mlp.resize(static_cast<size_t>(T) * C);
  acts.rstd_mlp.resize(T);
  rmsnorm_forward(acts.xn_mlp.data(), acts.rstd_mlp.data(), acts.x_attn.data(), T, C);
  acts.h.resize(static_cast<size_t>(T) * C4);
  matmul_in_out_forward(acts.h.data(), acts.xn_mlp.data(), p.fc.data(), T, C, C4);
  acts.a.resize(acts.h.size());
  relu_squared_forward(acts.a.data(), acts.h.data(), acts.h.size());
  std::vector<double> out(static_cast<size_t>(T) * C);
  matmul_forward(out.data(), acts.a.data(), p.proj.data(), nullptr, T, C4, C);
  add_scaled(acts.x_out, 1.0, out);
}

void ReferenceSpeedrun::backward(double dloss) {
  if (!have_targets_) throw std::logic_error("backward: the last forward had no targets");
  const int T = T_, C = config_.channels(), V = config_.vocab_size, L = config_.num_blocks;
  const size_t TC = static_cast<size_t>(T) * C;
  dblock_out_.assign(L, std::vector<double>());
  dx0_.assign(TC, 0.0);
  for (auto& d : dve_) d.assign(TC, 0.0);

  // Cross-entropy and soft cap, head, final norm.
  const std::vector<double> dlosses(T, dloss);
  std::vector<double> dz(static_cast<size_t>(T) * V, 0.0), dxf(TC, 0.0), dx(TC, 0.0);
  softcap_cross_entropy_backward(dz.data(), z_.data(), targets_.data(), dlosses.data(), T, V);
  matmul_backward(dxf.data(), grads.head.data(), nullptr, dz.data(), xf_.data(), params.head.data(), T, C, V);
  rmsnorm_backward(dx.data(), dxf.data(), x_final_.data(), rstd_f_.data(), T, C);

  // Backout: x_final = x - backout_lambda * x_out[backout_block].
  const int backout = structure_.backout_block;
  grads.scalars[scalar_.backout_lambda()] -= dot(blocks_[backout].x_out, dx);
  dblock_out_[backout].assign(TC, 0.0);
  add_scaled(dblock_out_[backout], -params.scalars[scalar_.backout_lambda()], dx);

  for (int i = L - 1; i >= 1; i--) dx = block_backward(i, dx);
  add_scaled(dx, 1.0, dx0_);  // block 1's input stream is x0 itself
  input_backward(dx);
}

std::vector<double> ReferenceSpeedrun::block_backward(int i, std::vector<double> dx_out) {
  const SpeedrunBlockActivations& acts = blocks_[i];
  const llmc::SpeedrunBlock& role = structure_.blocks[i];
  if (!dblock_out_[i].empty()) add_scaled(dx_out, 1.0, dblock_out_[i]);  // skip and backout readers
  std::vector<double> dx_attn = dx_out;
  if (role.mlp) mlp_backward(i, acts, dx_out, dx_attn);
  std::vector<double> dx_mix = dx_attn;
  if (role.attention) attention_backward(i, acts, dx_attn, dx_mix);

  // x_mix = lambda_0 x_in + lambda_1 x0.
  std::vector<double> dx_in(dx_mix.size(), 0.0);
  mix_backward(dx_in.data(), dx0_.data(), &grads.scalars[scalar_.block_lambda(i, 0)],
               &grads.scalars[scalar_.block_lambda(i, 1)], dx_mix.data(), params.scalars[scalar_.block_lambda(i, 0)],
               acts.x_in.data(), params.scalars[scalar_.block_lambda(i, 1)], x0_.data(), dx_mix.size());
  // x_in = x_prev + sigmoid(skip_w) * x_out[popped block].
  if (role.pop_skip >= 0) {
    const int index = scalar_.skip_weight(role.pop_skip);
    const double gate = sigmoid(params.scalars[index]);
    grads.scalars[index] += gate * (1.0 - gate) * dot(acts.skip_in, dx_in);
    std::vector<double>& dsource = dblock_out_[popped_from_[i]];
    if (dsource.empty()) dsource.assign(dx_in.size(), 0.0);
    add_scaled(dsource, gate, dx_in);
  }
  return dx_in;
}

void ReferenceSpeedrun::mlp_backward(int i, const SpeedrunBlockActivations& acts, const std::vector<double>& dx_out,
                                     std::vector<double>& dx_attn) {
  const int T = T_, C = config_.channels(), C4 = 4 * C;
  const SpeedrunBlockParams& p = params.blocks[i];
  SpeedrunBlockParams& g = grads.blocks[i];
  std::vector<double> da(static_cast<size_t>(T) * C4, 0.0), dh(static_cast<size_t>(T) * C4, 0.0),
      dxn(static_cast<size_t>(T) * C, 0.0);
  matmul_backward(da.data(), g.proj.data(), nullptr, dx_out.data(), acts.a.data(), p.proj.data(), T, C4, C);
  relu_squared_backward(dh.data(), acts.h.data(), da.data(), dh.size());
  matmul_in_out_backward(dxn.data(), g.fc.data(), dh.data(), acts.xn_mlp.data(), p.fc.data(), T, C, C4);
  rmsnorm_backward(dx_attn.data(), dxn.data(), acts.x_attn.data(), acts.rstd_mlp.data(), T, C);
}

void ReferenceSpeedrun::attention_backward(int i, const SpeedrunBlockActivations& acts,
                                           const std::vector<double>& dx_attn, std::vector<double>& dx_mix) {
  const int T = T_, C = config_.channels(), H = config_.num_heads, D = config_.head_dim;
  const size_t TC = static_cast<size_t>(T) * C;
  const SpeedrunBlockParams& p = params.blocks[i];
  SpeedrunBlockParams& g = grads.blocks[i];
  // Output projection and gate.
  std::vector<double> dy_gated(TC, 0.0), dy(TC, 0.0), dxn(TC, 0.0);
  matmul_backward(dy_gated.data(), g.qkvo.data() + static_cast<size_t>(3) * C * C, nullptr, dx_attn.data(),
                  acts.y_gated.data(), p.qkvo.data() + static_cast<size_t>(3) * C * C, T, C, C);
  attention_gate_backward(dy.data(), dxn.data(), g.attn_gate.data(), dy_gated.data(), acts.y.data(),
                          acts.xn_attn.data(), p.attn_gate.data(), T, H, D);
  // Attention.
  std::vector<double> dqr(TC, 0.0), dkr(TC, 0.0), dv_mixed(TC, 0.0);
  window_attention_backward(dqr.data(), dkr.data(), dv_mixed.data(), dy.data(), acts.qr.data(), acts.kr.data(),
                            acts.v_mixed.data(), T, H, D, PackedDocuments{cu_seqlens_, window_of(i)}, attn_scale_);
  // v = sa_0 v + sa_1 ve.
  const int table = structure_.blocks[i].value_embed;
  std::vector<double> dq(TC, 0.0), dk(TC, 0.0), dv(TC, 0.0), dqn(TC, 0.0), dkn(TC, 0.0);
  mix_backward(dv.data(), table >= 0 ? dve_[table].data() : nullptr, &grads.scalars[scalar_.sa_lambda(i, 0)],
               table >= 0 ? &grads.scalars[scalar_.sa_lambda(i, 1)] : nullptr, dv_mixed.data(),
               params.scalars[scalar_.sa_lambda(i, 0)], acts.v.data(), params.scalars[scalar_.sa_lambda(i, 1)],
               table >= 0 ? ve_[table].data() : nullptr, TC);
  // RoPE and per-head norm of q and k.
  rope_backward(dqn.data(), dqr.data(), cos_.data(), sin_.data(), T, H, D);
  rope_backward(dkn.data(), dkr.data(), cos_.data(), sin_.data(), T, H, D);
  rmsnorm_backward(dq.data(), dqn.data(), acts.q.data(), acts.rstd_q.data(), T * H, D);
  rmsnorm_backward(dk.data(), dkn.data(), acts.k.data(), acts.rstd_k.data(), T * H, D);
  // QKV projection and the block's input norm.
  const std::vector<double> dqkv = join_qkv(dq, dk, dv, T, C);
  matmul_backward(dxn.data(), g.qkvo.data(), nullptr, dqkv.data(), acts.xn_attn.data(), p.qkvo.data(), T, C, 3 * C);
  rmsnorm_backward(dx_mix.data(), dxn.data(), acts.x_mix.data(), acts.rstd_attn.data(), T, C);
}

void ReferenceSpeedrun::input_backward(const std::vector<double>& dx0) {
  const int T = T_, C = config_.channels();
  std::vector<double> dsmeared(static_cast<size_t>(T) * C, 0.0), de(static_cast<size_t>(T) * C, 0.0);
  rmsnorm_backward(dsmeared.data(), dx0.data(), smeared_.data(), rstd0_.data(), T, C);
  smear_backward(de.data(), grads.smear_gate.data(), &grads.scalars[scalar_.smear_lambda()], dsmeared.data(), e_.data(),
                 params.smear_gate.data(), params.scalars[scalar_.smear_lambda()], T, C);
  embedding_backward(grads.embed.data(), de.data(), tokens_.data(), T, C);
  for (int k = 0; k < kSpeedrunValueEmbeds; k++)
    embedding_backward(grads.value_embeds[k].data(), dve_[k].data(), tokens_.data(), T, C);
}

}  // namespace ref
