// The copy plan of re-sharding (see reshard.h).
#include "llmc/checkpoint/reshard.h"

#include <algorithm>
#include <stdexcept>


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

ParamLayout relayout(const ParamLayout& layout, int world_size) {
  std::vector<std::vector<TensorSpec>> buckets(layout.buckets.size());
  for (const TensorView& view : layout.tensors)
    buckets[static_cast<size_t>(view.bucket)].push_back(static_cast<const TensorSpec&>(view));
  return place_param_layout(buckets, world_size);
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

}  // namespace llmc
