// Where every speedrun-model parameter lives in the flat parameter buffer (llmc/family/param_layout.h).
// Buckets in forward order: 0 the embeddings (embed, ve0..2, smear gate, the scalar vector), one per
// block that has attention or an MLP (blocks 1..L-1; block 0 has no parameters), the head last. The
// backward makes them final from the last: head, blocks L-1..1, embeddings (the scalars' gradient is
// complete only after the smear's backward, so the scalar vector rides with the embeddings).
#pragma once

#include <string>
#include <vector>

#include "llmc/family/param_layout.h"
#include "llmc/model/modded44/speedrun_config.h"

namespace llmc {

// The kinds of speedrun tensor (TensorView::kind), with shapes (C = H * D, V the vocabulary):
enum class SpeedrunTensor {
  kEmbed,       // [V, C] bf16, Adam
  kValueEmbed,  // [V, C] bf16, Adam: ve0, ve1, ve2 (TensorView::layer = table index)
  kSmearGate,   // [1, 12] bf16, Muon
  kScalars,     // [SpeedrunScalarIndex::count()] fp32, Adam
  kQkvo,        // [C, 4C] fp32, Muon: read as W_q, W_k, W_v, W_o, four stacked [C, C] (out, in)
  kAttnGate,    // [H, 12] bf16, Muon
  kFc,          // [C, 4C] fp32, Muon: (in, out)
  kProj,        // [C, 4C] fp32, Muon: (out, in)
  kHead,        // [V, C] bf16, Adam
};
const char* speedrun_tensor_name(SpeedrunTensor kind);  // "embed", "ve", "smear_gate", "qkvo", ...

struct SpeedrunLayout : ParamLayout {
  SpeedrunConfig config;
  SpeedrunStructure structure;

  // The view of `kind` of block `block` (qkvo, attn_gate, fc, proj), of value-embedding table `block`
  // (kValueEmbed), or the only one (others; pass -1). Throws std::out_of_range naming what is missing.
  const TensorView& tensor(SpeedrunTensor kind, int block = -1) const;
  static constexpr int embeddings_bucket() { return 0; }
  int block_bucket(int block) const;  // -1 for a block without parameters (block 0)
  int head_bucket() const { return num_buckets() - 1; }

 private:
  friend SpeedrunLayout make_speedrun_layout(const SpeedrunConfig& config, int world_size);
  std::vector<int> tensor_index_;  // [kind * (L + 1) + (block + 1)] -> index into tensors, -1 if absent
  std::vector<int> block_bucket_;  // [block] -> bucket or -1
};

inline SpeedrunTensor speedrun_kind(const TensorView& view) { return static_cast<SpeedrunTensor>(view.kind); }

// Validates the config, then lays out the buffer. Throws std::invalid_argument.
SpeedrunLayout make_speedrun_layout(const SpeedrunConfig& config, int world_size);

// The tensors in the model file's order (docs/speedrun_model.md, as the reference's named_tensors):
// embed, ve0, ve1, ve2, smear_gate, then per block qkvo, attn_gate (attention blocks), fc, proj (MLP
// blocks), head, scalars. Indices into layout.tensors.
std::vector<int> speedrun_file_order(const SpeedrunLayout& layout);

}  // namespace llmc
