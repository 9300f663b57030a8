// Where every GPT-2 parameter lives in the single flat parameter buffer. Tensors are grouped in
// buckets (embeddings, one per transformer layer, final LayerNorm) so that gradient communication and
// the sharded optimizer work per bucket; gradients, master weights and optimizer moments share it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "llmc/model/model_config.h"

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

// Elements per bucket are padded to a multiple of world_size * kBucketAlignElements so that each rank
// owns an equal, contiguous shard whose start stays 32-element aligned; each tensor starts at a
// multiple of kTensorAlignElements inside its bucket (16-byte bf16 loads).
constexpr size_t kBucketAlignElements = 32;
constexpr size_t kTensorAlignElements = 8;

struct TensorView {
  std::string name;           // "wte", "h3.qkvw", "lnfw"
  TensorKind kind;
  int layer;                  // transformer layer, or -1 for wte, wpe, lnfw, lnfb
  int bucket;                 // index into ParamLayout::buckets
  size_t offset;              // element offset in the whole buffer
  std::vector<size_t> shape;  // rows, cols (matrices) or length (vectors)
  size_t numel;
  bool weight_decay;          // AdamW decays 2-D tensors (wte, wpe, qkvw, attprojw, fcw, fcprojw) as llm.c
};

struct ParamBucket {
  size_t offset;       // element offset of the bucket in the whole buffer
  size_t size;         // elements up to the end of its last tensor (includes alignment gaps)
  size_t padded_size;  // size rounded up to a multiple of world_size * kBucketAlignElements
  size_t shard_size;   // padded_size / world_size: the contiguous slice owned by each rank
  int first_tensor;    // tensors [first_tensor, first_tensor + num_tensors) of ParamLayout::tensors
  int num_tensors;
};

struct ParamLayout {
  GPT2Config config;
  int world_size = 1;
  std::vector<ParamBucket> buckets;  // 0: embeddings, 1..L: layers 0..L-1, L+1: final LayerNorm
  std::vector<TensorView> tensors;   // in buffer order
  size_t total_size = 0;             // elements of the buffer, padding included
  size_t num_parameters = 0;         // real parameters (sum of numel), padding excluded

  // The view of `kind` in transformer layer `layer` (layer ignored for non-layer kinds; pass -1).
  // Throws std::out_of_range when the layer does not exist.
  const TensorView& tensor(TensorKind kind, int layer = -1) const;
  int num_buckets() const { return static_cast<int>(buckets.size()); }
  static int layer_bucket(int layer) { return layer + 1; }
  int final_norm_bucket() const { return config.num_layers + 1; }

 private:
  friend ParamLayout make_param_layout(const GPT2Config& config, int world_size);
  std::vector<int> tensor_index_;  // [kind * (L+1) + (layer+1)] -> index into tensors, -1 if absent
};

// Validates the config and world_size (1..4096), then lays out the buffer. Throws std::invalid_argument.
ParamLayout make_param_layout(const GPT2Config& config, int world_size);

}  // namespace llmc
