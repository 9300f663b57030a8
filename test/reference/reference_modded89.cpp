// The 2026-07-17 record's model in double on the reference tape (see reference_modded89.h). Comments cite
// SPEEDRUN89.md's steps.
#include "test/reference/reference_modded89.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>

#include "llmc/base/bf16_bits.h"
#include "test/reference/reference_tape_attention.h"
#include "test/reference/reference_tape_ops.h"

namespace ref {

namespace {

using llmc::GateColumn;
using llmc::Modded89Layer;

constexpr double kNormEps = FLT_EPSILON;  // rms_norm's eps=None for bf16/fp32 inputs
constexpr double kDcNormEps = 1e-6;
constexpr double kMuddScale = 0.1;
constexpr int kDcW1Column = 29, kDcW2Column = 35;  // of the post gate

// The soft-capped multi-token loss of logits z (T, V): the node's value is the objective (the loss plus the
// lse terms whose targets fall past the last row), its backward the record's logit gradient.
NodeId mtp_objective(Tape& t, NodeId z, const Modded89Batch& batch, bool round_u, double* loss) {
  const int T = t.rows(z), V = t.cols(z);
  std::vector<double> u(t.value(z).size());
  for (size_t i = 0; i < u.size(); i++) {
    u[i] = mtp_softcap_u(t.value(z)[i]);
    if (round_u) u[i] = llmc::bf16_bits_to_float(llmc::float_to_bf16_bits(static_cast<float>(u[i])));
  }
  std::vector<double> losses, dz;
  mtp_cross_entropy(&losses, &dz, u, batch.targets.data(), batch.prefix_of.empty() ? nullptr : batch.prefix_of.data(),
                    batch.weights, 1.0, T, V);
  double objective = 0.0;
  *loss = 0.0;
  for (int r = 0; r < T; r++) {
    *loss += losses[static_cast<size_t>(r)];
    double sum = 0.0;
    for (int j = 0; j < V; j++) sum += std::exp(kMtpSoftcapScale * u[static_cast<size_t>(r) * V + j]);
    double dropped = 0.0;  // the weights of the terms past the last row
    for (int k = 0; k < batch.weights.tokens; k++)
      if (r + k >= T) dropped += batch.weights.next[k];
    objective += losses[static_cast<size_t>(r)] + dropped * std::log(sum);
  }
  return t.push({objective}, 1, 1, [z, dz](Tape& tape, NodeId self) {
    const double dout = tape.grad(self)[0];
    std::vector<double>& dlogits = tape.grad(z);
    for (size_t i = 0; i < dz.size(); i++) dlogits[i] += dout * dz[i];
  });
}

// The per-row view of a per-token gate column: one gate for all C columns.
NodeId gated(Tape& t, NodeId x, NodeId gate, int column) {
  return mul_gate(t, x, gate, column, t.cols(x));
}

}  // namespace

Modded89Reference::Modded89Reference(const llmc::Modded89Layout& layout)
    : params(layout.total_size, 0.0), grads(layout.total_size, 0.0), layout_(layout) {
  std::vector<double> frequencies(static_cast<size_t>(layout.config.rotary_pairs()));
  const int n = layout.config.rotary_pairs();
  for (int m = 0; m < n; m++)
    frequencies[static_cast<size_t>(m)] = std::pow(1.0 / 1024.0, n > 1 ? m / double(n - 1) : 0.0);
  set_rope(frequencies, 0.1);
  set_windows(layout.config.window_block, 3 * layout.config.window_block);
}

void Modded89Reference::set_rope(const std::vector<double>& frequencies, double attn_scale) {
  const size_t pairs = static_cast<size_t>(layout_.config.rotary_pairs());
  if (frequencies.size() != pairs) throw std::invalid_argument("set_rope: expected D / 4 frequencies");
  const size_t positions = 2 * static_cast<size_t>(layout_.config.max_seq_len);
  cos_.assign(positions * pairs, 0.0);
  sin_.assign(positions * pairs, 0.0);
  for (size_t p = 0; p < positions; p++)
    for (size_t m = 0; m < pairs; m++) {
      cos_[p * pairs + m] = std::cos(static_cast<double>(p) * frequencies[m]);
      sin_[p * pairs + m] = std::sin(static_cast<double>(p) * frequencies[m]);
    }
  attn_scale_ = attn_scale;
}

void Modded89Reference::set_windows(int short_tokens, int long_tokens) {
  short_window_ = short_tokens;
  long_window_ = long_tokens;
}

double Modded89Reference::forward(const Modded89Batch& batch) {
  const llmc::Modded89Config& cfg = layout_.config;
  const llmc::Modded89Structure& structure = layout_.structure;
  const int T = static_cast<int>(batch.tokens.size()), C = cfg.channels(), H = cfg.num_heads, D = cfg.head_dim,
            V = cfg.vocab_size;
  if (T < 1 || T > cfg.max_seq_len || batch.targets.size() != batch.tokens.size() ||
      batch.bigram_hashes.size() != batch.tokens.size())
    throw std::invalid_argument("Modded89Reference::forward: tokens, targets and hashes must be T <= max_seq_len each");
  if (sign_rows < 1 || sign_table.size() != static_cast<size_t>(sign_rows) * C)
    throw std::invalid_argument("Modded89Reference::forward: the sign table is not sign_rows x C");
  tape_ = Tape();
  Tape& t = tape_;
  leaves_.clear();
  for (const llmc::TensorView& view : layout_.tensors) {
    const int rows = static_cast<int>(view.shape[0]);
    leaves_.push_back(
        t.leaf(std::vector<double>(params.begin() + static_cast<std::ptrdiff_t>(view.offset),
                                   params.begin() + static_cast<std::ptrdiff_t>(view.offset + view.numel)),
               rows, static_cast<int>(view.numel / view.shape[0])));
  }
  auto P = [&](const std::string& name) {
    return leaves_[static_cast<size_t>(layout_.index_of(name))];
  };
  // The record uses r, p and the gate scale as bf16 copies of their fp32 parameters (`.bfloat16()`, `type_as(x)`).
  auto used = [&](NodeId parameter) { return bf16_parameter_copies ? bf16_copy(t, parameter) : parameter; };
  const NodeId scalars = P("scalars"), resid = used(P("resid_lambdas")), post = used(P("post_lambdas"));
  auto norm = [&](NodeId x) { return rms_norm(t, x, C, kNormEps); };
  // A small MLP: scale (lin(gelu(lin(x, w1)), w2) + b2).
  auto small_mlp = [&](NodeId x, const std::string& prefix, NodeId scale_node) {
    const NodeId hidden = gelu(t, linear(t, x, P(prefix + ".w1")));
    const NodeId out = add_row(t, linear(t, hidden, P(prefix + ".w2")), P(prefix + ".b2"));
    return scale_node >= 0 ? scale(t, out, scale_node, 0) : scale_const(t, out, kMuddScale);
  };
  std::vector<int> doc_of_token(static_cast<size_t>(T));
  for (size_t d = 0; d + 1 < batch.cu_seqlens.size(); d++)
    for (int r = batch.cu_seqlens[d]; r < batch.cu_seqlens[d + 1] && r < T; r++)
      doc_of_token[static_cast<size_t>(r)] = static_cast<int>(d);
  std::vector<int> table_rows(static_cast<size_t>(T));
  auto value_embed = [&](int table) {
    for (int r = 0; r < T; r++) table_rows[static_cast<size_t>(r)] = table * V + batch.tokens[static_cast<size_t>(r)];
    return gather_rows(t, P("value_embeds"), table_rows);
  };

  // 1. Embedding, smear (reads the un-smeared e, crosses documents), x0.
  const NodeId e = gather_rows(t, P("embed"), batch.tokens);
  const NodeId e_prev = shift_rows(t, e);
  const NodeId smear_gate = sigmoid(t, linear(t, columns(t, e, 0, 12), P("smear_gate")));
  const NodeId smeared = add(t, e, scale(t, mul_gate(t, e_prev, smear_gate, 0, C), scalars, 22));
  const NodeId x0 = norm(smeared);
  // 2. Bigram rows times their sign rows (row 0 at t = 0).
  std::vector<double> signs(static_cast<size_t>(T) * C);
  for (int r = 0; r < T; r++) {
    const int row =
        r == 0 ? 0 : (batch.tokens[static_cast<size_t>(r - 1)] ^ batch.tokens[static_cast<size_t>(r)]) % sign_rows;
    for (int c = 0; c < C; c++) signs[static_cast<size_t>(r) * C + c] = sign_table[static_cast<size_t>(row) * C + c];
  }
  const NodeId b = mul_constant(t, gather_rows(t, P("bigram_embed"), batch.bigram_hashes), signs);
  // 3. The pre gate, from x0.
  const NodeId gate_scale = used(P("mudd_gate_scale"));
  const NodeId G0 = small_mlp(x0, "gate0", gate_scale);
  NodeId G1 = -1;
  auto gate_node = [&](const GateColumn& g) { return g.gate == 0 ? G0 : G1; };
  // 4.
  NodeId x = add(t, x0, gated(t, b, G0, structure.layers[0].bigram_gate.column));
  const NodeId cache0 = x;
  NodeId cache3 = -1, cache7 = -1, cache9 = -1, mu = -1;

  // Attention of layer i on xn, with aux_v (or -1) added to v (section 2).
  auto attention = [&](int i, NodeId xn, NodeId aux_v) {
    const Modded89Layer& layer = structure.layers[static_cast<size_t>(i)];
    const std::string prefix = "layers." + std::to_string(i) + ".";
    const NodeId qk = P(prefix + "qk"), vo = P(prefix + "vo");
    NodeId q = scale(t, linear(t, xn, flat_slice(t, qk, 0, C, C)), scalars, 2 * i);
    NodeId k = scale(t, linear(t, xn, flat_slice(t, qk, static_cast<size_t>(C) * C, C, C)), scalars, 2 * i);
    NodeId v = scale(t, linear(t, xn, flat_slice(t, vo, 0, C, C)), scalars, 2 * i);
    std::vector<int> position(static_cast<size_t>(T) * H);
    for (int r = 0; r < T; r++)
      for (int h = 0; h < H; h++) position[static_cast<size_t>(r) * H + h] = layer.paired_heads ? 2 * r + h % 2 : r;
    q = rotary_pairs(t, rms_norm(t, q, D, kNormEps), H, D, cfg.rotary_pairs(), cos_, sin_, position);
    k = rotary_pairs(t, rms_norm(t, k, D, kNormEps), H, D, cfg.rotary_pairs(), cos_, sin_, position);
    if (layer.key_offset) k = key_offset(t, k, H, D);
    if (layer.value_embed >= 0) {  // aux_v_h = 2 sigmoid([xn[0:6], ve[0:6]] . W_veg[h]) ve_h
      const NodeId ve = value_embed(layer.value_embed);
      const NodeId in = concat_columns(t, columns(t, xn, 0, 6), columns(t, ve, 0, 6));
      const NodeId g = scale_const(t, sigmoid(t, linear(t, in, P(prefix + "ve_gate"))), 2.0);
      v = add(t, v, mul_gate(t, ve, g, 0, D));
    }
    if (aux_v >= 0) v = add(t, v, aux_v);
    const int window = layer.long_window ? long_window_ : short_window_;
    NodeId y;
    if (layer.paired_heads) {  // the interleaved [2T, H/2, D] view: rows 2t (heads 0..H/2-1), 2t+1 (the rest)
      std::vector<int> doc_of_row(2 * static_cast<size_t>(T));
      for (size_t r = 0; r < doc_of_row.size(); r++) doc_of_row[r] = doc_of_token[r / 2];
      auto rows2 = [&](NodeId a) { return flat_slice(t, a, 0, 2 * T, C / 2); };
      y = flat_slice(t, window_attention(t, rows2(q), rows2(k), rows2(v), H / 2, D, doc_of_row, window, attn_scale_), 0,
                     T, C);
    } else {
      y = window_attention(t, q, k, v, H, D, doc_of_token, window, attn_scale_);
    }
    if (layer.dc) {
      const NodeId w1 = rms_norm(t, columns(t, G1, kDcW1Column, H), H, kDcNormEps);
      y = dc_correction(t, y, q, k, v, w1, columns(t, G1, kDcW2Column, H), H, D, doc_of_token, cfg.dc_window,
                        attn_scale_);
    }
    if (layer.xsa.present()) y = xsa(t, y, v, gate_node(layer.xsa), layer.xsa.column, H, D);
    if (layer.output_gate.present()) y = mul_gate(t, y, gate_node(layer.output_gate), layer.output_gate.column, D);
    return scale(t, linear(t, y, flat_slice(t, vo, static_cast<size_t>(C) * C, C, C)), scalars, 2 * i + 1);
  };
  auto mlp = [&](int i, NodeId xn) {
    const NodeId bank = P("layers." + std::to_string(i) + ".mlp");
    const int hidden = cfg.mlp_hidden();
    const NodeId act = relu_square(t, linear(t, xn, flat_slice(t, bank, 0, hidden, C)));
    return matmul(t, act, flat_slice(t, bank, static_cast<size_t>(hidden) * C, hidden, C));
  };

  // 5. The layers.
  for (int i = 0; i < llmc::kModded89Layers; i++) {
    const Modded89Layer& layer = structure.layers[static_cast<size_t>(i)];
    if (i == structure.post_gate_layer) G1 = small_mlp(x, "gate1", gate_scale);
    if (i == structure.skip_to) {
      const NodeId skip = sigmoid(t, flat_slice(t, scalars, 23, 1, 1));
      x = add(t, x, gated(t, scale(t, cache3, skip, 0), G1, structure.skip_gate.column));
    }
    if (layer.mudd) {  // MUDD0's dense connections around layer 10's attention
      cache9 = x;
      mu = small_mlp(x, "mudd0", -1);
      const NodeId v_mudd = add(t, add(t, gated(t, cache0, mu, 0), gated(t, cache7, mu, 1)), gated(t, x, mu, 2));
      x = add(t, add(t, add(t, x, gated(t, x, mu, 5)), gated(t, cache0, mu, 3)), gated(t, cache7, mu, 4));
      const NodeId aux_v = add(t, mul_gate(t, value_embed(4), mu, 6, C / 2), v_mudd);
      const NodeId a = attention(i, norm(cache7), aux_v);
      x = add(t, add(t, gated(t, x, mu, 8), gated(t, a, mu, 9)), add(t, gated(t, cache0, mu, 10), gated(t, b, mu, 11)));
    } else if (layer.attention) {
      const NodeId a = attention(i, norm(layer.reads_layer7 ? cache7 : x), -1);
      x = add(t, add(t, scale(t, x, resid, 2 * i), scale(t, a, post, 2 * i)),
              gated(t, x0, gate_node(layer.x0_gate), layer.x0_gate.column));
      if (i != 0) x = add(t, x, gated(t, b, gate_node(layer.bigram_gate), layer.bigram_gate.column));
    }
    const NodeId m = mlp(i, norm(x));
    x = layer.mudd ? add(t, gated(t, x, mu, 12), gated(t, m, mu, 13))
                   : add(t, scale(t, x, resid, 2 * i + 1), scale(t, m, post, 2 * i + 1));
    if (i == 3) cache3 = x;
    if (i == 7) cache7 = x;
  }
  // 6. MUDD1 after the loop.
  const NodeId mu1 = small_mlp(x, "mudd1", -1);
  x = add(t, x,
          add(t, add(t, gated(t, cache0, mu1, 0), gated(t, cache7, mu1, 1)),
              add(t, add(t, gated(t, cache9, mu1, 2), gated(t, value_embed(0), mu1, 3)), gated(t, cache3, mu1, 4))));
  // 7. Head and loss.
  const NodeId z = matmul(t, norm(x), P("head"));
  double loss = 0.0;
  objective_node_ = mtp_objective(t, z, batch, round_softcap_to_bf16, &loss);
  objective_ = t.value(objective_node_)[0];
  return loss;
}

void Modded89Reference::backward() {
  if (objective_node_ < 0) throw std::logic_error("Modded89Reference::backward without a forward");
  tape_.backward(objective_node_);
  grads.assign(layout_.total_size, 0.0);
  for (size_t i = 0; i < layout_.tensors.size(); i++) {
    const std::vector<double>& g = tape_.grad(leaves_[i]);
    std::copy(g.begin(), g.end(), grads.begin() + static_cast<std::ptrdiff_t>(layout_.tensors[i].offset));
  }
}

std::vector<double> init_modded89_params(const llmc::Modded89Layout& layout, unsigned seed) {
  const llmc::Modded89Config& cfg = layout.config;
  const int C = cfg.channels(), V = cfg.vocab_size;
  std::vector<double> p(layout.total_size, 0.0);
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto fill_uniform = [&](const std::string& name, double bound, size_t count) {
    std::uniform_real_distribution<double> uniform(-bound, bound);
    const llmc::TensorView& view = layout.find(name);
    for (size_t i = 0; i < count; i++) p[view.offset + i] = uniform(rng);
  };
  auto at = [&](const std::string& name) { return p.begin() + static_cast<std::ptrdiff_t>(layout.find(name).offset); };
  const llmc::TensorView& embed = layout.find("embed");
  for (size_t i = 0; i < embed.numel; i++) p[embed.offset + i] = 0.005 * normal(rng);
  for (int v = 0; v < V; v++)  // tied: head [C, V] = embed^T
    for (int c = 0; c < C; c++)
      at("head")[static_cast<std::ptrdiff_t>(c) * V + v] = p[embed.offset + static_cast<size_t>(v) * C + c];
  const llmc::TensorView& ve = layout.find("value_embeds");
  for (size_t i = 0; i < ve.numel; i++) p[ve.offset + i] = 0.01 * normal(rng);
  const double a = std::sqrt(3.0) * 0.5 / std::sqrt(static_cast<double>(C));
  for (int i = 0; i < llmc::kModded89Layers; i++) {
    const std::string prefix = "layers." + std::to_string(i) + ".";
    if (layout.structure.layers[static_cast<size_t>(i)].attention) {
      fill_uniform(prefix + "qk", a, layout.find(prefix + "qk").numel);
      fill_uniform(prefix + "vo", a, layout.find(prefix + "vo").numel);
    }
    fill_uniform(prefix + "mlp", a, static_cast<size_t>(cfg.mlp_hidden()) * C);  // c_fc; c_proj stays zero
  }
  for (const char* name : {"gate0.w1", "gate1.w1", "mudd0.w1", "mudd1.w1"})
    fill_uniform(name, 1.0 / std::sqrt(static_cast<double>(C)), layout.find(name).numel);
  for (int i = 0; i < llmc::kModded89Layers; i++) {
    at("scalars")[2 * i] = 0.5;
    at("scalars")[2 * i + 1] = 1.0;
    at("resid_lambdas")[2 * i] = at("resid_lambdas")[2 * i + 1] = std::sqrt(1.1);
    at("post_lambdas")[2 * i] = at("post_lambdas")[2 * i + 1] = 1.0;
  }
  at("scalars")[23] = -1.5;
  at("mudd_gate_scale")[0] = 0.1;
  // Biases, stored as effective / 0.1 (mu8 and mu12 as the record stores them: bf16(sqrt(1.1) / 0.1) = 10.5).
  for (int c = 12; c < 18; c++) at("gate0.b2")[c] = at("gate1.b2")[c] = 2.5;
  for (int k = 0; k < 4; k++) at("gate0.b2")[19 + 2 * k] = 0.5;
  for (int k = 0; k < 5; k++) at("gate1.b2")[19 + 2 * k] = 0.5;
  at("gate1.b2")[28] = 5.0;
  for (int c = kDcW1Column; c < kDcW1Column + 6; c++) at("gate1.b2")[c] = 10.0;
  at("mudd0.b2")[6] = at("mudd0.b2")[7] = 20.0;
  at("mudd0.b2")[8] = at("mudd0.b2")[12] = 10.5;
  at("mudd0.b2")[9] = at("mudd0.b2")[13] = 10.0;
  at("mudd0.b2")[11] = 0.5;
  at("mudd1.b2")[1] = -5.0;
  return p;
}

}  // namespace ref
