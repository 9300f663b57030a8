// Where every parameter of a model lives in its single flat parameter buffer, for any model family
// (GPT-2: llmc/model/gpt2/gpt2_layout.h; the speedrun model: llmc/model/modded44/speedrun_layout.h). Tensors are
// grouped in buckets so that gradient communication and the sharded optimizers work per bucket;
// gradients, master weights and optimizer moments share the layout. Each tensor also says which
// optimizer group owns it in the speedrun recipe and its storage dtype in the reference.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace llmc {

// Elements per bucket are padded to a multiple of world_size * kBucketAlignElements so that each rank
// owns an equal, contiguous shard whose start stays 32-element aligned; each tensor starts at a
// multiple of kTensorAlignElements inside its bucket (16-byte bf16 loads).
constexpr size_t kBucketAlignElements = 32;
constexpr size_t kTensorAlignElements = 8;

// Which optimizer owns a tensor (docs/recipes.md, "The optimizer"): Adam (embeddings, head, scalars) or Muon
// (block matrices and gates). GPT-2 tensors are all kAdam (AdamW).
enum class ParamGroup { kAdam, kMuon };
// The storage dtype a tensor has in the reference implementation of its family (the device buffer is
// floatX throughout; see docs/speedrun_model.md for what that changes).
enum class ParamDtype { kFp32, kBf16 };
const char* param_group_name(ParamGroup group);  // "adam", "muon"
const char* param_dtype_name(ParamDtype dtype);  // "fp32", "bf16"

// One tensor of a layout as a family describes it, before placement.
struct TensorSpec {
  std::string name;           // unique in the layout: "wte", "h3.qkvw", "blocks.3.qkvo"
  int kind = 0;               // the family's tensor kind (GPT-2: TensorKind)
  int layer = -1;             // layer / block the tensor belongs to, or -1
  std::vector<size_t> shape;  // rows, cols (matrices) or length (vectors)
  bool weight_decay = false;  // AdamW decays it
  ParamGroup group = ParamGroup::kAdam;
  ParamDtype reference_dtype = ParamDtype::kFp32;
};

struct TensorView : TensorSpec {
  int bucket = 0;     // index into ParamLayout::buckets
  size_t offset = 0;  // element offset in the whole buffer
  size_t numel = 0;
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
  int world_size = 1;
  std::vector<ParamBucket> buckets;  // in forward order; the backward makes them final from the last to 0
  std::vector<TensorView> tensors;   // in buffer order
  size_t total_size = 0;             // elements of the buffer, padding included
  size_t num_parameters = 0;         // real parameters (sum of numel), padding excluded

  int num_buckets() const { return static_cast<int>(buckets.size()); }
  // The tensor named `name`; throws std::out_of_range naming it when there is none.
  const TensorView& find(const std::string& name) const;
  // The index into `tensors` of the tensor named `name` (throws as find does), or of `view`, one of `tensors`.
  int index_of(const std::string& name) const { return index_of(find(name)); }
  int index_of(const TensorView& view) const { return static_cast<int>(&view - tensors.data()); }
  // Elements of the tensors of `group` (padding excluded).
  size_t group_parameters(ParamGroup group) const;
};

// Places the tensors bucket by bucket (buckets[b] lists bucket b's tensors in buffer order). Validates
// world_size (1..4096), empty buckets, empty shapes and duplicate names. Throws std::invalid_argument.
ParamLayout place_param_layout(const std::vector<std::vector<TensorSpec>>& buckets, int world_size);

// The same model laid out for `world_size` ranks: the tensors placed again, bucket by bucket
// (place_param_layout), which moves only the buckets' padding. Works for every family's layout.
ParamLayout relayout(const ParamLayout& layout, int world_size);

}  // namespace llmc
