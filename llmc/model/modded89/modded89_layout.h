// Where every parameter of the 2026-07-17 record's model lives in the flat parameter buffer
// (llmc/family/param_layout.h), in buckets whose gradients become final in backward order: 0 the bigram
// table, 1 the other embeddings, the scalars and the pre gate (both final last); one per layer 0..10 (its
// bank matrices, its value-embedding gate, layer 4 the post gate, layer 10 MUDD0); the head and MUDD1 last
// (final first).
// The record's banks are stored per layer here, without the record's padding matrices (which only make 8
// ranks divide its banks and never touch the model): the optimizer batches them per shape through pointer
// tables.
#pragma once

#include <vector>

#include "llmc/family/param_layout.h"
#include "llmc/model/modded89/modded89_config.h"

namespace llmc {

// Tensor kinds (TensorView::kind), shapes with C = H D, V the vocabulary, m the MUDD width:
enum class Modded89Tensor {
  kEmbed,         // [V, C] bf16, Adam
  kValueEmbeds,   // [5V, C] bf16, Adam: five tables
  kBigram,        // [bigram_rows, C] bf16, Adam
  kSmearGate,     // [1, 12] bf16, Adam
  kScalars,       // [24] fp32, Adam: [2i, 2i+1] sa lambdas of layer i, [22] smear, [23] skip
  kResidLambdas,  // [11, 2] fp32, Adam
  kPostLambdas,   // [11, 2] fp32, Adam
  kGateScale,     // [1] fp32, Adam: the gate MLPs' output scale (0.1)
  kGateW1,        // [m, C] bf16, Adam (layer -1: the pre gate, in the embeddings' bucket; 4: the post gate)
  kGateW2,        // [41, m] bf16, Adam
  kGateB2,        // [41] bf16, Adam
  kQkBank,        // [H, 2D, C] bf16, Muon: W_q rows of head pairs (2j, 2j + 1), then W_k's
  kVoBank,        // [2, C, C] bf16, Muon: W_v, W_o (out, in)
  kMlpBank,       // [2, 4C, C] bf16, Muon: c_fc (out, in), c_proj stored (in, out)
  kValueGate,     // [H, 12] bf16, Adam: the layer's slot of the value-embedding gate bank
  kMuddW1,        // [m, C] bf16, Adam (layer 10: MUDD0; -1: MUDD1 after the loop)
  kMuddW2,        // [14, m] bf16, Adam
  kMuddB2,        // [14] bf16, Adam
  kHead,          // [C, V] bf16, Adam: stored (in, out), tied to embed^T until the untie
};
const char* modded89_tensor_name(Modded89Tensor kind);

struct Modded89Layout : ParamLayout {
  Modded89Config config;
  Modded89Structure structure;
  // The bigram table alone in the first bucket: its gradient is row-sparse, and on several ranks it travels as
  // the rows the ranks touched (docs/distributed.md#the-bigram-tables-gradient-exchange), the other embeddings'
  // as their bucket's reduce-scatter. Both are final when the backward ends.
  static constexpr int bigram_bucket() { return 0; }
  static constexpr int embeddings_bucket() { return 1; }
  static int layer_bucket(int layer) { return 2 + layer; }
  int head_bucket() const { return num_buckets() - 1; }
};

// Validates the config, then lays out the buffer. Throws std::invalid_argument.
Modded89Layout make_modded89_layout(const Modded89Config& config, int world_size);

}  // namespace llmc
