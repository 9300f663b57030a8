// The collectives one step of the speedrun optimizer enqueues on a rank, from its plan alone (no device): what
// SpeedrunOptimizer's reduce_bucket, share_bucket, untie_moments and enqueue_grad_norm give NCCL, named as its
// trace names them and with the sizes it records (multirank.Modded89Optimizer compares them with the trainer's
// trace). For the benchmark of calls and bytes per step at the full model (bench_speedrun_collectives).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "llmc/family/param_layout.h"
#include "llmc/optim/speedrun_state_plan.h"

namespace llmc {

enum class CollectiveKind { kReduce, kAllReduce, kReduceScatter, kAllGather, kBroadcast, kSendRecv };

// One NCCL call: its kind and the bytes of the buffer it is given (the whole buffer of a reduce-scatter or an
// all-gather, not a rank's shard; for the sparse row exchange's sends and receives, what the rank sends to the
// others).
struct PlannedCall {
  CollectiveKind kind;
  size_t bytes;
};

// One traced collective: a group of calls (a bucket's Muon reduces, its owners' broadcasts) or a single one.
struct PlannedCollective {
  std::string name;  // the trace's: muon_reduce, reduce_scatter, sparse_rows, broadcast, all_gather, all_reduce
  int bucket = -1;   // -1: the untie's moment gathers and the gradient norm, which belong to no bucket
  bool traced = true;  // the gradient norm's all-reduce of one float has no slice of its own
  std::vector<PlannedCall> calls;
  size_t bytes() const;
};

// What decides a step's collectives besides the plan.
struct CollectiveStep {
  int world_size = 1;
  bool adam_step = false;    // odd 0-based steps: the Adam buckets reduce-scatter and all-gather
  size_t fp32_offset = 0;    // the model's fp32 parameters (elements of the buffer), all-reduced after their
  size_t fp32_count = 0;     // bucket's all-gather on Adam steps
  size_t untie_elements = 0;  // the untie step's: the head's C x V moments, gathered by two all-reduces; else 0
  size_t element_bytes = 2;   // of a parameter (floatX)
  // The row-sparse bucket (-1: none) whose reduce on Adam steps is the sparse row exchange instead of a
  // reduce-scatter, and the bytes the rank sends there to the others: they depend on the tokens, so the caller
  // estimates them.
  int sparse_bucket = -1;
  size_t sparse_bytes = 0;
};

// Every collective of one step on a rank of `plan`, in the order the backward makes the buckets final (the last
// bucket first): each bucket's reduces, then each bucket's shares, then the untie's and the norm's. None on one
// rank.
std::vector<PlannedCollective> speedrun_step_collectives(const ParamLayout& layout, const SpeedrunRankPlan& plan,
                                                         const CollectiveStep& step);

}  // namespace llmc
