// Where every GPT-2 parameter lives in the flat parameter buffer (llmc/family/param_layout.h): buckets
// are the embeddings, one per transformer layer and the final LayerNorm, in forward order; every tensor
// is in the AdamW group, fp32 in llm.c.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "llmc/model/gpt2/gpt2_config.h"
#include "llmc/family/param_layout.h"

namespace llmc {

// The 16 kinds of parameter tensor, in llm.c's order (which is also the checkpoint file order).
enum class TensorKind {
  kWte, kWpe,                                         // bucket 0: embeddings
  kLn1w, kLn1b, kQkvw, kQkvb, kAttprojw, kAttprojb,  // buckets 1..L: one transformer layer each
  kLn2w, kLn2b, kFcw, kFcb, kFcprojw, kFcprojb,
  kLnfw, kLnfb,                                       // bucket L+1: final LayerNorm
};
constexpr int kNumTensorKinds = 16;

const char* tensor_kind_name(TensorKind kind);  // "wte", "qkvw", ...
bool is_layer_tensor(TensorKind kind);          // true for ln1w..fcprojb (one instance per layer)
// The (up to 2-D) shape of one instance of `kind`, e.g. qkvw -> {3C, C}, qkvb -> {3C}.
std::vector<size_t> tensor_kind_shape(TensorKind kind, const GPT2Config& config);

// GPT-2's layout: the generic ParamLayout plus its config and lookups by (kind, layer). TensorView::kind
// holds a TensorKind (gpt2_kind() reads it back).
struct GPT2Layout : ParamLayout {
  GPT2Config config;

  // The view of `kind` in transformer layer `layer` (layer ignored for non-layer kinds; pass -1).
  // Throws std::out_of_range when the layer does not exist.
  const TensorView& tensor(TensorKind kind, int layer = -1) const;
  static int layer_bucket(int layer) { return layer + 1; }
  int final_norm_bucket() const { return config.num_layers + 1; }

 private:
  friend GPT2Layout make_param_layout(const GPT2Config& config, int world_size);
  std::vector<int> tensor_index_;  // [kind * (L+1) + (layer+1)] -> index into tensors, -1 if absent
};

inline TensorKind gpt2_kind(const TensorView& view) { return static_cast<TensorKind>(view.kind); }

// Validates the config and world_size (1..4096), then lays out the buffer. Throws std::invalid_argument.
GPT2Layout make_param_layout(const GPT2Config& config, int world_size);

}  // namespace llmc
