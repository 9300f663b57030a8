// Places a family's tensors in one bucketed buffer (see param_layout.h).
#include "llmc/family/param_layout.h"

#include <set>
#include <stdexcept>

namespace llmc {

namespace {

size_t round_up(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

}  // namespace

const char* param_group_name(ParamGroup group) { return group == ParamGroup::kAdam ? "adam" : "muon"; }
const char* param_dtype_name(ParamDtype dtype) { return dtype == ParamDtype::kFp32 ? "fp32" : "bf16"; }

const TensorView& ParamLayout::find(const std::string& name) const {
  for (const TensorView& view : tensors)
    if (view.name == name) return view;
  throw std::out_of_range("ParamLayout::find: no tensor named '" + name + "'");
}

size_t ParamLayout::group_parameters(ParamGroup group) const {
  size_t count = 0;
  for (const TensorView& view : tensors)
    if (view.group == group) count += view.numel;
  return count;
}

ParamLayout place_param_layout(const std::vector<std::vector<TensorSpec>>& buckets, int world_size) {
  if (world_size < 1 || world_size > 4096)
    throw std::invalid_argument("param layout: world_size must be in 1..4096, got " + std::to_string(world_size));
  ParamLayout layout;
  layout.world_size = world_size;
  const size_t bucket_multiple = static_cast<size_t>(world_size) * kBucketAlignElements;
  std::set<std::string> names;
  size_t bucket_offset = 0;
  for (const std::vector<TensorSpec>& specs : buckets) {
    if (specs.empty())
      throw std::invalid_argument("param layout: bucket " + std::to_string(layout.buckets.size()) + " is empty");
    ParamBucket bucket;
    bucket.offset = bucket_offset;
    bucket.first_tensor = static_cast<int>(layout.tensors.size());
    bucket.num_tensors = static_cast<int>(specs.size());
    size_t cursor = 0;  // within the bucket
    for (const TensorSpec& spec : specs) {
      if (spec.shape.empty()) throw std::invalid_argument("param layout: tensor '" + spec.name + "' has no shape");
      if (!names.insert(spec.name).second)
        throw std::invalid_argument("param layout: tensor name '" + spec.name + "' appears twice");
      TensorView view;
      static_cast<TensorSpec&>(view) = spec;
      view.bucket = static_cast<int>(layout.buckets.size());
      view.numel = 1;
      for (size_t dim : view.shape) view.numel *= dim;
      cursor = round_up(cursor, kTensorAlignElements);
      view.offset = bucket_offset + cursor;
      cursor += view.numel;
      layout.num_parameters += view.numel;
      layout.tensors.push_back(std::move(view));
    }
    bucket.size = cursor;
    bucket.padded_size = round_up(cursor, bucket_multiple);
    bucket.shard_size = bucket.padded_size / static_cast<size_t>(world_size);
    bucket_offset += bucket.padded_size;
    layout.buckets.push_back(bucket);
  }
  layout.total_size = bucket_offset;
  return layout;
}

ParamLayout relayout(const ParamLayout& layout, int world_size) {
  std::vector<std::vector<TensorSpec>> buckets(layout.buckets.size());
  for (const TensorView& view : layout.tensors)
    buckets[static_cast<size_t>(view.bucket)].push_back(static_cast<const TensorSpec&>(view));
  return place_param_layout(buckets, world_size);
}

}  // namespace llmc
