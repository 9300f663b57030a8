// Re-sharding the ZeRO-1 optimizer state for another number of ranks, so that a checkpoint written by
// N ranks resumes on M, for any model family. Each rank's state is its contiguous shard of every bucket,
// concatenated in bucket order (llmc/optim/zero.h). A bucket's contents -- its tensors' offsets inside it
// and its size -- do not depend on the number of ranks; only the padding at its end does
// (llmc/family/param_layout.h). So an element is (bucket, offset in the bucket) under any world size, and a
// new shard is assembled from the pieces of the old shards that overlap it; what no old shard holds is
// padding, which is zero.
#pragma once
#include <cstdint>
#include <vector>

#include "llmc/family/param_layout.h"

namespace llmc {

// Copy `count` elements from element `source_offset` of old rank `source_rank`'s arrays to element
// `target_offset` of the new rank's arrays (the same for master weights, m and v).
struct ShardCopy {
  int source_rank;
  int64_t source_offset;
  int64_t target_offset;
  int64_t count;
};

// Elements of one rank's state (master, m or v each): the sum of its bucket shards.
int64_t shard_elements(const ParamLayout& layout);

// The same model laid out for `world_size` ranks: the tensors placed again, bucket by bucket
// (place_param_layout), which moves only the buckets' padding. Works for every family's layout.
ParamLayout relayout(const ParamLayout& layout, int world_size);

// The copies that build rank `to_rank`'s state under layout `to` from the state files written under
// layout `from` (the same model: the same buckets of the same tensors; throws std::invalid_argument
// otherwise), in target order. Target elements no copy covers are bucket padding (zero).
std::vector<ShardCopy> reshard_plan(const ParamLayout& from, const ParamLayout& to, int to_rank);

}  // namespace llmc
