// Double-precision CPU reference of the speedrun model (the record (docs/recipes.md), modded-nanogpt's
// 2025-10-31 record): forward with the SUM cross-entropy over one rank's packed sequence, backward of
// every parameter, and the record's initialisation. The oracle that the device model is checked
// against; itself checked by finite differences and by an independent JAX float64 implementation.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "llmc/model/modded44/speedrun_config.h"

namespace ref {

struct SpeedrunBlockParams {
  std::vector<double> qkvo;       // [C, 4C] read as W_q, W_k, W_v, W_o: 4 stacked [C, C] (out, in); empty w/o attention
  std::vector<double> attn_gate;  // [H, 12]; empty without attention
  std::vector<double> fc;         // [C, 4C] (in, out); empty without MLP
  std::vector<double> proj;       // [C, 4C] (out, in); empty without MLP
};

struct SpeedrunParams {
  std::vector<double> embed;                                                 // [V, C]
  std::array<std::vector<double>, llmc::kSpeedrunValueEmbeds> value_embeds;  // ve0..2, [V, C] each
  std::vector<double> smear_gate;                                            // [12]
  std::vector<SpeedrunBlockParams> blocks;                                   // L blocks
  std::vector<double> head;                                                  // [V, C]
  std::vector<double> scalars;                                               // [SpeedrunScalarIndex::count()]
};

// One tensor of a SpeedrunParams: its name ("embed", "ve1", "blocks.3.qkvo", "scalars", ...), shape, the
// storage dtype of the record (bf16: embeddings, head, gates; fp32: block matrices, scalars) and values.
struct NamedTensor {
  std::string name;
  std::vector<size_t> shape;
  bool bf16;
  std::vector<double>* values;
};

// Every present tensor of `params` in a fixed order: embed, ve0, ve1, ve2, smear_gate, then per block
// qkvo, attn_gate, fc, proj (when present), head, scalars.
std::vector<NamedTensor> named_tensors(SpeedrunParams& params, const llmc::SpeedrunConfig& config);
// All tensors allocated with their shapes and filled with zeros.
SpeedrunParams zero_speedrun_params(const llmc::SpeedrunConfig& config);
// The record's initialisation: embeddings N(0,1); W_q, W_k, W_v, W_fc ~ U(-a, a) with
// a = sqrt(3) * 0.5 / sqrt(C); W_o, W_proj, head and gates 0; scalars as docs/recipes.md (skip -1.5, block
// lambdas (1, 0), sa lambdas (0.5, 0.5), smear 0, backout 0.5, padding 1). Values are rounded to their
// storage dtype (bf16 or fp32), so a device model can hold exactly the same numbers.
SpeedrunParams init_speedrun_params(const llmc::SpeedrunConfig& config, uint64_t seed);

// Activations of one block, kept for the backward. Rows are the T positions.
struct SpeedrunBlockActivations {
  std::vector<double> skip_in;                 // (T,C) the popped skip value, if the block pops one
  std::vector<double> x_in;                    // (T,C) stream after the skip add, before the lambda mix
  std::vector<double> x_mix;                   // (T,C) lambda_0 x_in + lambda_1 x0
  std::vector<double> xn_attn, rstd_attn;      // norm(x_mix)
  std::vector<double> q, k, v;                 // (T,H,D) from the QKV GEMM
  std::vector<double> qn, kn, rstd_q, rstd_k;  // per-head RMSNorm (T*H rows)
  std::vector<double> qr, kr;                  // after RoPE
  std::vector<double> v_mixed;                 // sa_0 v + sa_1 ve
  std::vector<double> y, y_gated;              // attention output, times the output gate
  std::vector<double> x_attn;                  // (T,C) x_mix + y_gated W_o^T (x_mix without attention)
  std::vector<double> xn_mlp, rstd_mlp, h, a;  // norm(x_attn), h = xn W_fc, a = relu(h)^2
  std::vector<double> x_out;                   // (T,C) block output
};

class ReferenceSpeedrun {
 public:
  explicit ReferenceSpeedrun(const llmc::SpeedrunConfig& config);

  const llmc::SpeedrunConfig& config() const { return config_; }
  const llmc::SpeedrunStructure& structure() const { return structure_; }

  // RoPE from D/2 frequencies (e.g. llmc::Yarn::frequencies()): tables cos/sin(t * w_k) for
  // t < max_seq_len computed in double; and the attention softmax scale. Starts as Yarn's reset state.
  void set_rope(const std::vector<double>& frequencies, double attn_scale);
  // The exact tables of another implementation (max_seq_len x D/2 each, row-major).
  void set_rope_tables(const std::vector<double>& cos_table, const std::vector<double>& sin_table, double attn_scale);

  // Forward over one packed sequence of T tokens with documents given by cu_seqlens (num_bounds entries:
  // 0, the cumulative document lengths, T, optionally more T's as padding). Windows in tokens: key j is
  // visible to query i iff i - j <= window (short on most attention blocks, long on the others).
  // Returns the SUM of the T per-token losses (NaN with targets == nullptr; backward() then refuses).
  // Throws std::invalid_argument for T > max_seq_len, tokens/targets outside [0, V), bad cu_seqlens.
  double forward(const int* tokens, const int* targets, const int* cu_seqlens, int num_bounds, int T, int window_short,
                 int window_long);
  // Gradient of dloss * (last forward's sum loss), ADDED to grads.
  void backward(double dloss = 1.0);
  void zero_grad();

  const std::vector<double>& losses() const { return losses_; }  // (T) per token
  const std::vector<double>& logits() const { return logits_; }  // (T, V) soft-capped

  SpeedrunParams params, grads;

 private:
  void check_inputs(const int* tokens, const int* targets, const int* cu_seqlens, int num_bounds, int T) const;
  void block_forward(int i, std::vector<double>& x);
  void attention_forward(int i, SpeedrunBlockActivations& acts);
  void mlp_forward(int i, SpeedrunBlockActivations& acts);
  // Takes the gradient of block i's output, returns the gradient of its input stream.
  std::vector<double> block_backward(int i, std::vector<double> dx_out);
  void attention_backward(int i, const SpeedrunBlockActivations& acts, const std::vector<double>& dx_attn,
                          std::vector<double>& dx_mix);
  void mlp_backward(int i, const SpeedrunBlockActivations& acts, const std::vector<double>& dx_out,
                    std::vector<double>& dx_attn);
  void input_backward(const std::vector<double>& dx0);
  int window_of(int i) const { return structure_.blocks[i].long_window ? window_long_ : window_short_; }

  llmc::SpeedrunConfig config_;
  llmc::SpeedrunStructure structure_;
  llmc::SpeedrunScalarIndex scalar_;
  std::vector<double> cos_, sin_;
  double attn_scale_ = 0.1;

  // The last forward.
  int T_ = 0, window_short_ = 0, window_long_ = 0;
  bool have_targets_ = false;
  std::vector<int> tokens_, targets_, cu_seqlens_;
  std::vector<double> e_, smeared_, x0_, rstd0_;
  std::array<std::vector<double>, llmc::kSpeedrunValueEmbeds> ve_;
  std::vector<SpeedrunBlockActivations> blocks_;
  std::vector<int> popped_from_;  // block whose output block i pops, or -1
  std::vector<double> x_final_, xf_, rstd_f_, z_, logits_, losses_;

  // Gradients collected during backward() for the block outputs (skips, backout), x0 and the ve rows.
  std::vector<std::vector<double>> dblock_out_;
  std::vector<double> dx0_;
  std::array<std::vector<double>, llmc::kSpeedrunValueEmbeds> dve_;
};

}  // namespace ref
