// The speedrun optimizer's collectives per step, from its plan (see speedrun_collectives.h).
#include "llmc/optim/speedrun_collectives.h"

namespace llmc {

size_t PlannedCollective::bytes() const {
  size_t total = 0;
  for (const PlannedCall& call : calls) total += call.bytes;
  return total;
}

namespace {

// reduce_bucket: on Adam steps the whole bucket's reduce-scatter (the row-sparse bucket's: the sparse row
// exchange, one group of sends and receives); every step one group of the Muon spans' reduces to their owners
// (all-reduces for the replicated ones).
void add_reduces(std::vector<PlannedCollective>& out, const ParamBucket& bucket, const SpeedrunBucketPlan& plan,
                 int index, const CollectiveStep& step) {
  if (plan.has_adam() && step.adam_step && index == step.sparse_bucket)
    out.push_back({"sparse_rows", index, true, {{CollectiveKind::kSendRecv, step.sparse_bytes}}});
  else if (plan.has_adam() && step.adam_step)
    out.push_back({"reduce_scatter", index, true,
                   {{CollectiveKind::kReduceScatter, bucket.padded_size * step.element_bytes}}});
  if (plan.muon_spans.empty()) return;
  PlannedCollective group{"muon_reduce", index, true, {}};
  for (const MuonSpan& span : plan.muon_spans)
    group.calls.push_back({span.owner == kAllRanks ? CollectiveKind::kAllReduce : CollectiveKind::kReduce,
                           span.length * step.element_bytes});
  out.push_back(group);
}

// share_bucket: the owners' broadcasts of their updated spans in one group; on Adam steps the bucket's all-gather
// and, in the bucket that holds the fp32 parameters, their all-reduce (each rank's updated share, zero elsewhere).
void add_shares(std::vector<PlannedCollective>& out, const ParamBucket& bucket, const SpeedrunBucketPlan& plan,
                int index, const CollectiveStep& step) {
  PlannedCollective group{"broadcast", index, true, {}};
  for (const MuonSpan& span : plan.muon_spans)
    if (span.owner != kAllRanks) group.calls.push_back({CollectiveKind::kBroadcast, span.length * step.element_bytes});
  if (!group.calls.empty()) out.push_back(group);
  if (!plan.has_adam() || !step.adam_step) return;
  out.push_back({"all_gather", index, true, {{CollectiveKind::kAllGather, bucket.padded_size * step.element_bytes}}});
  const bool holds_fp32 = step.fp32_count > 0 && step.fp32_offset >= bucket.offset &&
                          step.fp32_offset < bucket.offset + bucket.padded_size;
  if (holds_fp32)
    out.push_back({"all_reduce", index, true, {{CollectiveKind::kAllReduce, step.fp32_count * sizeof(float)}}});
}

}  // namespace

std::vector<PlannedCollective> speedrun_step_collectives(const ParamLayout& layout, const SpeedrunRankPlan& plan,
                                                         const CollectiveStep& step) {
  std::vector<PlannedCollective> out;
  if (step.world_size <= 1) return out;
  const int buckets = layout.num_buckets();
  for (int b = buckets - 1; b >= 0; b--) add_reduces(out, layout.buckets[b], plan.buckets[b], b, step);
  for (int b = buckets - 1; b >= 0; b--) add_shares(out, layout.buckets[b], plan.buckets[b], b, step);
  for (int moment = 0; moment < 2 && step.untie_elements > 0; moment++)
    out.push_back({"all_reduce", -1, true, {{CollectiveKind::kAllReduce, step.untie_elements * sizeof(float)}}});
  out.push_back({"all_reduce", -1, false, {{CollectiveKind::kAllReduce, sizeof(float)}}});
  return out;
}

}  // namespace llmc
