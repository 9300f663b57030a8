// ZeRO's checkpoint arrays and their re-sharding (see zero_state.h).
#include "llmc/optim/zero_state.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "llmc/base/file_io.h"

namespace llmc {

namespace {
// Where each bucket's shard starts in a rank's concatenated state (the same on every rank).
std::vector<int64_t> shard_starts(const ParamLayout& layout) {
  std::vector<int64_t> starts;
  int64_t offset = 0;
  for (const ParamBucket& bucket : layout.buckets) {
    starts.push_back(offset);
    offset += static_cast<int64_t>(bucket.shard_size);
  }
  return starts;
}

// The same tensors in the same buckets at the same offsets: the layouts of one model.
bool same_model(const ParamLayout& a, const ParamLayout& b) {
  if (a.buckets.size() != b.buckets.size() || a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.buckets.size(); i++)
    if (a.buckets[i].size != b.buckets[i].size || a.buckets[i].num_tensors != b.buckets[i].num_tensors) return false;
  for (size_t i = 0; i < a.tensors.size(); i++) {
    const TensorView &x = a.tensors[i], &y = b.tensors[i];
    if (x.name != y.name || x.numel != y.numel || x.bucket != y.bucket ||
        x.offset - a.buckets[x.bucket].offset != y.offset - b.buckets[y.bucket].offset)
      return false;
  }
  return true;
}
}  // namespace

int64_t shard_elements(const ParamLayout& layout) {
  int64_t total = 0;
  for (const ParamBucket& bucket : layout.buckets) total += static_cast<int64_t>(bucket.shard_size);
  return total;
}

std::vector<ShardCopy> reshard_plan(const ParamLayout& from, const ParamLayout& to, int to_rank) {
  if (!same_model(from, to)) throw std::invalid_argument("reshard_plan: the layouts are for different models");
  if (to_rank < 0 || to_rank >= to.world_size)
    throw std::invalid_argument("reshard_plan: rank " + std::to_string(to_rank) + " outside the new world");
  const std::vector<int64_t> from_starts = shard_starts(from), to_starts = shard_starts(to);
  std::vector<ShardCopy> plan;
  for (size_t b = 0; b < to.buckets.size(); b++) {
    // In bucket coordinates: the new shard, clipped to the bucket's contents (the rest is padding).
    const int64_t size = static_cast<int64_t>(to.buckets[b].size);
    const int64_t to_shard = static_cast<int64_t>(to.buckets[b].shard_size);
    const int64_t from_shard = static_cast<int64_t>(from.buckets[b].shard_size);
    const int64_t begin = to_rank * to_shard, end = std::min(begin + to_shard, size);
    for (int64_t at = begin; at < end;) {
      const int source = static_cast<int>(at / from_shard);
      const int64_t source_end = std::min(static_cast<int64_t>(source + 1) * from_shard, end);
      plan.push_back(ShardCopy{source, from_starts[b] + (at - source * from_shard), to_starts[b] + (at - begin),
                               source_end - at});
      at = source_end;
    }
  }
  return plan;
}

std::vector<NamedStateArray> zero_state_arrays(const ZeroShards& shards) {
  std::vector<NamedStateArray> arrays;
  const std::vector<float>* sources[3] = {&shards.master, &shards.adam_m, &shards.adam_v};
  for (int i = 0; i < 3; i++) {
    NamedStateArray array{kLegacyZeroArrayNames[i], 4, std::vector<char>(sources[i]->size() * sizeof(float))};
    std::memcpy(array.bytes.data(), sources[i]->data(), array.bytes.size());
    arrays.push_back(std::move(array));
  }
  return arrays;
}

namespace {

// The rank's own arrays, each `elements` fp32 values, into `shards`.
void take_own_arrays(const CheckpointReader& checkpoint, int64_t elements, ZeroShards& shards) {
  const std::string path = checkpoint.state_path(checkpoint.rank());
  std::vector<float>* targets[3] = {&shards.master, &shards.adam_m, &shards.adam_v};
  const std::vector<NamedStateArray> arrays = checkpoint.arrays(checkpoint.rank());
  for (int i = 0; i < 3; i++) {
    const auto array = std::find_if(arrays.begin(), arrays.end(),
                                    [&](const NamedStateArray& a) { return a.name == kLegacyZeroArrayNames[i]; });
    if (array == arrays.end() || array->element_bytes != 4)
      throw FileError(path, std::string("has no fp32 array ") + kLegacyZeroArrayNames[i] + " (not a zero-adamw state)");
    if (static_cast<int64_t>(array->bytes.size()) != elements * 4)
      throw FileError(path, "holds " + std::to_string(array->bytes.size() / 4) + " elements per array, rank " +
                                std::to_string(checkpoint.rank()) + " of " + std::to_string(checkpoint.world_size()) +
                                " has " + std::to_string(elements));
    targets[i]->resize(static_cast<size_t>(elements));
    std::memcpy(targets[i]->data(), array->bytes.data(), array->bytes.size());
  }
}

}  // namespace

ZeroShards read_zero_state(const CheckpointReader& checkpoint, const ParamLayout& layout) {
  const int64_t elements = shard_elements(layout);
  ZeroShards shards;
  if (checkpoint.old_world_size() == checkpoint.world_size()) {
    take_own_arrays(checkpoint, elements, shards);
    return shards;
  }
  std::vector<float>* targets[3] = {&shards.master, &shards.adam_m, &shards.adam_v};
  for (std::vector<float>* target : targets) target->assign(static_cast<size_t>(elements), 0.0f);
  const ParamLayout old_layout = relayout(layout, checkpoint.old_world_size());
  const int64_t old_elements = shard_elements(old_layout);
  for (int old_rank = 0; old_rank < old_layout.world_size; old_rank++)
    for (const char* name : kLegacyZeroArrayNames)
      if (checkpoint.array_elements(old_rank, name) != old_elements)
        throw FileError(checkpoint.state_path(old_rank),
                        "holds " + std::to_string(checkpoint.array_elements(old_rank, name)) +
                            " elements per array, rank " + std::to_string(old_rank) + " of " +
                            std::to_string(old_layout.world_size) + " has " + std::to_string(old_elements));
  for (const ShardCopy& copy : reshard_plan(old_layout, layout, checkpoint.rank()))
    for (int i = 0; i < 3; i++)
      checkpoint.read_elements(copy.source_rank, kLegacyZeroArrayNames[i], copy.source_offset, copy.count,
                               targets[i]->data() + copy.target_offset);
  return shards;
}

}  // namespace llmc
