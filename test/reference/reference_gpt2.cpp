// Double-precision CPU GPT-2 built from the reference ops (see reference_gpt2.h). The layer structure
// is GPT-2's pre-LayerNorm block: x + attn(ln1(x)), then + mlp(ln2(.)); tied embedding as LM head.
#include "test/reference/reference_gpt2.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "test/reference/reference_ops.h"

namespace ref {

using llmc::TensorKind;

ReferenceGPT2::ReferenceGPT2(const llmc::GPT2Layout& layout)
    : params(layout.total_size, 0.0),
      grads(layout.total_size, 0.0),
      adam_m(layout.total_size, 0.0),
      adam_v(layout.total_size, 0.0),
      layout_(layout) {}

void ReferenceGPT2::set_params(const std::vector<float>& values) {
  if (values.size() != layout_.total_size)
    throw std::invalid_argument("ReferenceGPT2::set_params: got " + std::to_string(values.size()) +
                                " values, layout has " + std::to_string(layout_.total_size));
  for (size_t i = 0; i < values.size(); i++) params[i] = values[i];
}

void ReferenceGPT2::zero_grad() { std::fill(grads.begin(), grads.end(), 0.0); }

double ReferenceGPT2::forward(const int* tokens, const int* targets, int B, int T) {
  const llmc::GPT2Config& cfg = layout_.config;
  const int C = cfg.channels, NH = cfg.num_heads, L = cfg.num_layers, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
  if (B <= 0 || T <= 0 || T > cfg.max_seq_len)
    throw std::invalid_argument("ReferenceGPT2::forward: need B > 0 and 0 < T <= " + std::to_string(cfg.max_seq_len) +
                                ", got B=" + std::to_string(B) + " T=" + std::to_string(T));
  const size_t N = static_cast<size_t>(B) * T;
  for (size_t i = 0; i < N; i++) {
    if (tokens[i] < 0 || tokens[i] >= V)
      throw std::invalid_argument("ReferenceGPT2::forward: token " + std::to_string(tokens[i]) + " at " +
                                  std::to_string(i) + " outside [0, " + std::to_string(V) + ")");
    if (targets != nullptr && (targets[i] < 0 || targets[i] >= V))
      throw std::invalid_argument("ReferenceGPT2::forward: target " + std::to_string(targets[i]) + " at " +
                                  std::to_string(i) + " outside [0, " + std::to_string(V) + ")");
  }
  tokens_.assign(tokens, tokens + N);
  have_targets_ = targets != nullptr;
  if (have_targets_) targets_.assign(targets, targets + N);

  Activations& a = acts_;
  a.B = B;
  a.T = T;
  const size_t NC = N * C, att_size = static_cast<size_t>(B) * NH * T * T;
  a.encoded.assign(NC, 0.0);
  encoder_forward(a.encoded.data(), tokens, param(TensorKind::kWte), param(TensorKind::kWpe), B, T, C);

  a.layers.resize(static_cast<size_t>(L));
  const double* layer_input = a.encoded.data();
  for (int l = 0; l < L; l++) {
    LayerActivations& la = a.layers[static_cast<size_t>(l)];
    la.ln1.assign(NC, 0.0);
    la.ln1_mean.assign(N, 0.0);
    la.ln1_rstd.assign(N, 0.0);
    la.qkv.assign(3 * NC, 0.0);
    la.atty.assign(NC, 0.0);
    la.preatt.assign(att_size, 0.0);
    la.att.assign(att_size, 0.0);
    la.attproj.assign(NC, 0.0);
    la.residual2.assign(NC, 0.0);
    la.ln2.assign(NC, 0.0);
    la.ln2_mean.assign(N, 0.0);
    la.ln2_rstd.assign(N, 0.0);
    la.fch.assign(4 * NC, 0.0);
    la.fch_gelu.assign(4 * NC, 0.0);
    la.fcproj.assign(NC, 0.0);
    la.residual3.assign(NC, 0.0);
    const int n = static_cast<int>(N);
    layernorm_forward(la.ln1.data(), la.ln1_mean.data(), la.ln1_rstd.data(), layer_input, param(TensorKind::kLn1w, l),
                      param(TensorKind::kLn1b, l), n, C);
    matmul_forward(la.qkv.data(), la.ln1.data(), param(TensorKind::kQkvw, l), param(TensorKind::kQkvb, l), n, C, 3 * C);
    attention_forward(la.atty.data(), la.preatt.data(), la.att.data(), la.qkv.data(), B, T, C, NH);
    matmul_forward(la.attproj.data(), la.atty.data(), param(TensorKind::kAttprojw, l), param(TensorKind::kAttprojb, l),
                   n, C, C);
    residual_forward(la.residual2.data(), layer_input, la.attproj.data(), NC);
    layernorm_forward(la.ln2.data(), la.ln2_mean.data(), la.ln2_rstd.data(), la.residual2.data(),
                      param(TensorKind::kLn2w, l), param(TensorKind::kLn2b, l), n, C);
    matmul_forward(la.fch.data(), la.ln2.data(), param(TensorKind::kFcw, l), param(TensorKind::kFcb, l), n, C, 4 * C);
    gelu_forward(la.fch_gelu.data(), la.fch.data(), 4 * NC);
    matmul_forward(la.fcproj.data(), la.fch_gelu.data(), param(TensorKind::kFcprojw, l), param(TensorKind::kFcprojb, l),
                   n, 4 * C, C);
    residual_forward(la.residual3.data(), la.residual2.data(), la.fcproj.data(), NC);
    layer_input = la.residual3.data();
  }

  a.lnf.assign(NC, 0.0);
  a.lnf_mean.assign(N, 0.0);
  a.lnf_rstd.assign(N, 0.0);
  layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), layer_input, param(TensorKind::kLnfw),
                    param(TensorKind::kLnfb), static_cast<int>(N), C);
  a.logits.assign(N * Vp, 0.0);
  // Tied LM head: logits over all Vp rows of wte (the padded rows are 0, and the loss ignores them).
  matmul_forward(a.logits.data(), a.lnf.data(), param(TensorKind::kWte), nullptr, static_cast<int>(N), C, Vp);
  a.probs.assign(N * Vp, 0.0);
  a.losses.assign(N, 0.0);
  if (!have_targets_) return std::numeric_limits<double>::quiet_NaN();
  softmax_crossentropy_forward(a.losses.data(), a.probs.data(), a.logits.data(), targets, static_cast<int>(N), V, Vp);
  double mean_loss = 0.0;
  for (double loss : a.losses) mean_loss += loss;
  return mean_loss / static_cast<double>(N);
}

void ReferenceGPT2::backward() {
  if (!have_targets_ || acts_.B == 0)
    throw std::logic_error("ReferenceGPT2::backward: needs a preceding forward() with targets");
  const llmc::GPT2Config& cfg = layout_.config;
  const int C = cfg.channels, NH = cfg.num_heads, L = cfg.num_layers, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
  const int B = acts_.B, T = acts_.T;
  const int n = B * T;
  const size_t N = static_cast<size_t>(n), NC = N * C, att_size = static_cast<size_t>(B) * NH * T * T;
  const Activations& a = acts_;

  // The loss is the mean over positions, so each position's loss has gradient 1/N.
  std::vector<double> dlosses(N, 1.0 / static_cast<double>(N));
  std::vector<double> dlogits(N * Vp, 0.0);
  crossentropy_softmax_backward(dlogits.data(), a.probs.data(), targets_.data(), dlosses.data(), n, V, Vp);
  std::vector<double> dlnf(NC, 0.0);
  matmul_backward(dlnf.data(), grad(TensorKind::kWte), nullptr, dlogits.data(), a.lnf.data(), param(TensorKind::kWte), n,
                  C, Vp);
  // dresidual: gradient of the residual stream at the current point, walking the layers backwards.
  std::vector<double> dresidual(NC, 0.0);
  const double* last_output = L > 0 ? a.layers.back().residual3.data() : a.encoded.data();
  layernorm_backward(dresidual.data(), grad(TensorKind::kLnfw), grad(TensorKind::kLnfb), dlnf.data(), last_output,
                     param(TensorKind::kLnfw), a.lnf_mean.data(), a.lnf_rstd.data(), n, C);

  std::vector<double> dfcproj_in(4 * NC), dfch(4 * NC), dln(NC), datty(NC), dqkv(3 * NC), dpreatt(att_size),
      datt(att_size);
  for (int l = L - 1; l >= 0; l--) {
    const LayerActivations& la = a.layers[static_cast<size_t>(l)];
    const double* layer_input = l > 0 ? a.layers[static_cast<size_t>(l) - 1].residual3.data() : a.encoded.data();
    // residual3 = residual2 + fcproj: dresidual flows to both unchanged.
    std::fill(dfcproj_in.begin(), dfcproj_in.end(), 0.0);
    matmul_backward(dfcproj_in.data(), grad(TensorKind::kFcprojw, l), grad(TensorKind::kFcprojb, l), dresidual.data(),
                    la.fch_gelu.data(), param(TensorKind::kFcprojw, l), n, 4 * C, C);
    std::fill(dfch.begin(), dfch.end(), 0.0);
    gelu_backward(dfch.data(), la.fch.data(), dfcproj_in.data(), 4 * NC);
    std::fill(dln.begin(), dln.end(), 0.0);
    matmul_backward(dln.data(), grad(TensorKind::kFcw, l), grad(TensorKind::kFcb, l), dfch.data(), la.ln2.data(),
                    param(TensorKind::kFcw, l), n, C, 4 * C);
    layernorm_backward(dresidual.data(), grad(TensorKind::kLn2w, l), grad(TensorKind::kLn2b, l), dln.data(),
                       la.residual2.data(), param(TensorKind::kLn2w, l), la.ln2_mean.data(), la.ln2_rstd.data(), n, C);
    // residual2 = layer_input + attproj: dresidual now holds d(residual2) and flows to both.
    std::fill(datty.begin(), datty.end(), 0.0);
    matmul_backward(datty.data(), grad(TensorKind::kAttprojw, l), grad(TensorKind::kAttprojb, l), dresidual.data(),
                    la.atty.data(), param(TensorKind::kAttprojw, l), n, C, C);
    std::fill(dqkv.begin(), dqkv.end(), 0.0);
    attention_backward(dqkv.data(), dpreatt.data(), datt.data(), datty.data(), la.qkv.data(), la.att.data(), B, T, C,
                       NH);
    std::fill(dln.begin(), dln.end(), 0.0);
    matmul_backward(dln.data(), grad(TensorKind::kQkvw, l), grad(TensorKind::kQkvb, l), dqkv.data(), la.ln1.data(),
                    param(TensorKind::kQkvw, l), n, C, 3 * C);
    layernorm_backward(dresidual.data(), grad(TensorKind::kLn1w, l), grad(TensorKind::kLn1b, l), dln.data(), layer_input,
                       param(TensorKind::kLn1w, l), la.ln1_mean.data(), la.ln1_rstd.data(), n, C);
  }
  encoder_backward(grad(TensorKind::kWte), grad(TensorKind::kWpe), dresidual.data(), tokens_.data(), B, T, C);
}

double ReferenceGPT2::grad_norm() const {
  double sum = 0.0;
  for (double g : grads) sum += g * g;
  return std::sqrt(sum);
}

void ReferenceGPT2::adamw_step(int step, const AdamWSettings& s) {
  if (step < 1) throw std::invalid_argument("ReferenceGPT2::adamw_step: step is 1-based, got " + std::to_string(step));
  std::vector<double> scaled;
  for (const llmc::TensorView& view : layout_.tensors) {
    const double* g = grads.data() + view.offset;
    if (s.grad_scale != 1.0) {
      scaled.assign(g, g + view.numel);
      for (double& value : scaled) value *= s.grad_scale;
      g = scaled.data();
    }
    adamw_update(params.data() + view.offset, g, adam_m.data() + view.offset, adam_v.data() + view.offset, view.numel,
                 step, s.lr, s.beta1, s.beta2, s.eps, view.weight_decay ? s.weight_decay : 0.0);
  }
}

}  // namespace ref
