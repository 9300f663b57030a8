// Double-precision CPU GPT-2 (forward, backward, AdamW): the oracle the CUDA model and its CPU
// emulation are compared against. Parameters, gradients and AdamW moments use the SAME flat GPT2Layout
// as the real trainer (padding included, always 0), so results compare element by element.
#pragma once

#include <cstdint>
#include <vector>

#include "llmc/model/gpt2/gpt2_layout.h"

namespace ref {

// Saved activations of one transformer layer, shapes with N = B*T rows.
struct LayerActivations {
  std::vector<double> ln1, ln1_mean, ln1_rstd;  // (N,C), (N), (N)
  std::vector<double> qkv;                      // (N,3C)
  std::vector<double> atty;                     // (N,C) attention output before the projection
  std::vector<double> preatt, att;              // (B,NH,T,T)
  std::vector<double> attproj;                  // (N,C)
  std::vector<double> residual2;                // (N,C) = layer input + attproj
  std::vector<double> ln2, ln2_mean, ln2_rstd;  // (N,C), (N), (N)
  std::vector<double> fch, fch_gelu;            // (N,4C)
  std::vector<double> fcproj;                   // (N,C)
  std::vector<double> residual3;                // (N,C) = residual2 + fcproj: the layer output
};

struct Activations {
  int B = 0, T = 0;
  std::vector<double> encoded;                  // (N,C) wte[token] + wpe[t]
  std::vector<LayerActivations> layers;
  std::vector<double> lnf, lnf_mean, lnf_rstd;  // final LayerNorm
  std::vector<double> logits, probs;            // (N,Vp), padded columns of probs are 0
  std::vector<double> losses;                   // (N) per-position cross-entropy
};

struct AdamWSettings {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.0;  // applied only to tensors with TensorView::weight_decay (matrices)
  double grad_scale = 1.0;    // gradients are multiplied by this first (global-norm clipping factor)
};

class ReferenceGPT2 {
 public:
  explicit ReferenceGPT2(const llmc::GPT2Layout& layout);

  const llmc::GPT2Layout& layout() const { return layout_; }
  // Widen float parameters (layout.total_size of them, e.g. from init_gpt2_params) to double.
  void set_params(const std::vector<float>& values);

  // Runs the forward pass on tokens (B,T) and keeps the activations. With targets (B,T) it returns the
  // mean cross-entropy over B*T positions; with targets == nullptr it returns NaN and backward() is not
  // allowed. Throws std::invalid_argument for T > maxT or a token/target outside [0, V).
  double forward(const int* tokens, const int* targets, int B, int T);
  // Gradient of the last forward's mean loss, ADDED to grads (so micro-batches accumulate).
  void backward();
  void zero_grad();
  // sqrt(sum of grads^2) over all parameters.
  double grad_norm() const;
  // One AdamW step over every tensor (step is 1-based, for bias correction).
  void adamw_step(int step, const AdamWSettings& settings);

  const Activations& activations() const { return acts_; }

  // Flat buffers in layout order (layout.total_size each); public so tests can perturb and compare.
  std::vector<double> params, grads, adam_m, adam_v;

 private:
  double* param(llmc::TensorKind kind, int layer = -1) { return params.data() + layout_.tensor(kind, layer).offset; }
  double* grad(llmc::TensorKind kind, int layer = -1) { return grads.data() + layout_.tensor(kind, layer).offset; }

  llmc::GPT2Layout layout_;
  Activations acts_;
  std::vector<int> tokens_, targets_;
  bool have_targets_ = false;
};

}  // namespace ref
