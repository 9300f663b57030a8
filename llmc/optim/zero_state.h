// ZeRO-1 AdamW's checkpoint state (llmc/optim/zero.h), host side: each rank keeps its contiguous shard of
// every bucket of the fp32 master weights and of both moments, concatenated in bucket order, saved as the
// named arrays master, adam_m and adam_v. Re-sharding for another number of ranks: a bucket's contents --
// its tensors' offsets inside it and its size -- do not depend on the number of ranks; only the padding at
// its end does (llmc/family/param_layout.h). So an element is (bucket, offset in the bucket) under any
// world size, and a new shard is assembled from the pieces of the old shards that overlap it; what no old
// shard holds is padding, which is zero.
#pragma once
#include <cstdint>
#include <vector>

#include "llmc/checkpoint/checkpoint.h"
#include "llmc/family/param_layout.h"

namespace llmc {

// One rank's three arrays, each shard_elements(layout) floats.
struct ZeroShards {
  std::vector<float> master, adam_m, adam_v;
};

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

// The copies that build rank `to_rank`'s state under layout `to` from the state files written under
// layout `from` (the same model: the same buckets of the same tensors; throws std::invalid_argument
// otherwise), in target order. Target elements no copy covers are bucket padding (zero).
std::vector<ShardCopy> reshard_plan(const ParamLayout& from, const ParamLayout& to, int to_rank);

// The named arrays a checkpoint keeps (master, adam_m, adam_v: the names a version 2-4 file's unnamed arrays
// are read under, state_file.h).
std::vector<NamedStateArray> zero_state_arrays(const ZeroShards& shards);

// This rank's shards under `layout` (this run's world size and rank: the reader's) from the checkpoint: its
// own arrays when the checkpoint was written by as many ranks, else assembled from the old ranks' pieces by
// reshard_plan. Throws FileError naming the state file whose arrays are missing or of another size.
ZeroShards read_zero_state(const CheckpointReader& checkpoint, const ParamLayout& layout);

}  // namespace llmc
