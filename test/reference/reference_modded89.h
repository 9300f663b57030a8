// The 2026-07-17 record's model (SPEEDRUN89.md sections 1-3; docs/recipes.md#the-2026-07-17-model-being-ported)
// in double precision on the reference tape: the oracle of the device model. Parameters live in the flat
// buffer of make_modded89_layout (padding ignored); the forward reads like the recipe, the backward is the
// tape's. Every value is exact where the record rounds to bf16 (the reference is the model, not its
// arithmetic).
#pragma once

#include <vector>

#include "llmc/model/modded89/modded89_layout.h"
#include "test/reference/reference_mtp_loss.h"
#include "test/reference/reference_tape.h"

namespace ref {

// One packed sequence of T tokens.
struct Modded89Batch {
  std::vector<int> tokens, targets;  // T each (targets[t] = the token after tokens[t])
  std::vector<int> cu_seqlens;       // 0, every later document start, T
  std::vector<int> bigram_hashes;    // T rows of the bigram table (llmc::bigram_hashes)
  MtpWeights weights;                // the stage's next-token and prefix weights
  std::vector<int> prefix_of;        // [V] the prefix token of each token or -1; empty: no prefix term
};

class Modded89Reference {
 public:
  explicit Modded89Reference(const llmc::Modded89Layout& layout);

  std::vector<double> params;      // layout order
  std::vector<double> grads;       // layout order, after backward()
  std::vector<double> sign_table;  // [sign_rows, C] of +-1: the bigram sign trick's table
  int sign_rows = 0;
  // u = sigmoid((z + 5) / 7.5) rounded to bf16 as the record's kernel (and ours, in both builds) stores it: for
  // comparing a device model's training loss. The gradient then treats the rounded u as the function.
  bool round_softcap_to_bf16 = false;
  // r, p (resid_lambdas, post_lambdas) and the gate MLPs' scale used as bf16 copies of their values, as the
  // record (and the device model) uses them; the gradient passes the cast. Off for finite differences, which
  // cannot see through a rounding.
  bool bf16_parameter_copies = true;

  // The rotary frequencies (D / 4) and the attention scale; tables for positions 0 .. 2 max_seq_len - 1.
  void set_rope(const std::vector<double>& frequencies, double attn_scale);
  // The attention windows in tokens (a key at distance > window is masked).
  void set_windows(int short_tokens, int long_tokens);

  // The batch's training loss: the sum over rows of the weighted next-token and prefix terms. Records the
  // tape for backward().
  double forward(const Modded89Batch& batch);
  // The gradient, into `grads`, of the training objective: the loss plus, per row t, the weights of the
  // next-token terms that fall past the last row times lse_t (the record's fused kernel's gradient,
  // docs/kernels.md#multi-token-cross-entropy).
  void backward();
  // The objective backward() differentiates, of the last forward (for finite differences).
  double objective() const { return objective_; }

 private:
  llmc::Modded89Layout layout_;
  std::vector<double> cos_, sin_;
  double attn_scale_ = 0.1;
  int short_window_ = 0, long_window_ = 0;
  Tape tape_;
  std::vector<NodeId> leaves_;  // per layout tensor
  NodeId objective_node_ = -1;
  double objective_ = 0.0;
};

// The record's initialisation (SPEEDRUN89.md section 1) in the layout, from `seed`: embed N(0, 0.005) and the
// head its transpose (tied), value embeddings 0.01 N(0, 1), bigram zero; Q, K, V, O and c_fc U(+-1/32 at C =
// 768: sqrt(3) 0.5 / sqrt(C)), c_proj zero; sa lambdas (0.5, 1), smear 0, skip -1.5, resid lambdas sqrt(1.1),
// post lambdas 1, gate scale 0.1; gates and second layers of the small MLPs zero, their first layers
// U(+-1/sqrt(C)), the biases the record's effective values / 0.1.
std::vector<double> init_modded89_params(const llmc::Modded89Layout& layout, unsigned seed);

}  // namespace ref
