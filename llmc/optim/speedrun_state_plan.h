// What one rank of the speedrun optimizer holds, as a pure function of the model's layout, the world
// size and the rank: its Muon batches (the matrices it updates), the Muon units' spans and owners, its
// Adam shard segments, and the arrays of its checkpoint state in world-independent coordinates. The
// optimizer allocates from this plan, and a checkpoint written by N ranks is re-sharded for M from it.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "llmc/family/param_layout.h"
#include "llmc/optim/muon_owners.h"
#include "llmc/optim/normuon_shape.h"
#include "llmc/optim/tensor_roles.h"
#include "llmc/checkpoint/state_file.h"  // NamedStateArray

namespace llmc {

// Matrices of one shape and storage in one bucket that the rank updates (owned or replicated), units in plan
// order; each unit is `unit_matrices[i]` matrices from parameter element `unit_offset[i]`, matrices
// [unit_first_matrix[i], ...) of layout tensor `unit_tensor[i]`.
struct MuonBatchPlan {
  int rows = 0, cols = 0, count = 0;
  MuonStorage storage = MuonStorage::kFp32Master;
  NorMuonShapeRules rules{false, 1.0};
  std::vector<size_t> unit_offset;
  std::vector<int> unit_matrices;
  std::vector<int> unit_tensor, unit_first_matrix;
  // fp32 momentum and variance (masters and mantissas alike); floatX for the gates updated in place.
  bool fp32_buffers() const { return storage != MuonStorage::kInPlace; }
  size_t variance_elements() const { return static_cast<size_t>(count) * (rules.variance_per_column ? cols : rows); }
};

// Contiguous Muon units of one owner (kAllRanks: replicated): one reduce to the owner and one broadcast.
struct MuonSpan {
  int owner = 0;
  size_t offset = 0, length = 0;
};

// The part of an Adam tensor inside the rank's shard of its bucket, and where its moments sit.
struct AdamSegmentPlan {
  size_t offset = 0, length = 0;  // parameter elements
  int tensor = 0;                 // index into the layout's tensors
  bool fp32_state = false;        // fp32 moments (TensorRole), else floatX
  bool fp32_param = false;        // updated in the model's fp32 copy
  size_t state_offset = 0;        // into the bucket's floatX or fp32 moment arrays
};

struct SpeedrunBucketPlan {
  std::vector<MuonBatchPlan> batches;
  std::vector<MuonSpan> muon_spans;                     // by offset, every Muon unit of the bucket
  std::vector<std::pair<size_t, size_t>> adam_tensors;  // (offset, numel) of every Adam tensor
  std::vector<AdamSegmentPlan> adam_segments;           // this rank's
  size_t adam_state_x = 0, adam_state_32 = 0;           // elements of the floatX and fp32 moment arrays
  bool has_adam() const { return !adam_tensors.empty(); }
};

struct SpeedrunRankPlan {
  int rank = 0;
  MuonOwnerPlan owners;
  std::vector<SpeedrunBucketPlan> buckets;
};

// The Muon tensors in backward order as the owner planner sees them (roles: one per layout tensor,
// speedrun_tensor_roles); tensor_index[i] is tensor i's index in the layout.
std::vector<MuonTensor> layout_muon_tensors(const ParamLayout& layout, const std::vector<TensorRole>& roles,
                                            std::vector<int>* tensor_index);

// The plan of rank `rank` of layout.world_size under `roles` (one per layout tensor). Throws
// std::invalid_argument for a bad rank or a role count that is not the layout's.
SpeedrunRankPlan plan_speedrun_rank(const ParamLayout& layout, const std::vector<TensorRole>& roles, int rank,
                                    const MuonOwnerOptions& owners);

// Which field of the plan a state array holds.
enum class SpeedrunStateField {
  kMaster, kMomentum, kVariance, kAdamM, kAdamV, kAdamM32, kAdamV32, kSavedGrads, kMantissa
};

// Elements [key, key + count) of the array's world-independent coordinates, stored next in the array.
// Keys count parameter elements from the start of the array's bucket (a bucket's contents do not depend
// on the world size, only its padding and so the later buckets' offsets do): masters, momentum, Adam
// moments and saved gradients by element; a variance by its matrix's first element plus the statistic's
// index.
struct StatePiece {
  size_t key = 0, count = 0;
};

struct StateArrayPlan {
  std::string name;  // "b3.muon0.master", "b0.adam.m", ... (docs/optimizers.md)
  SpeedrunStateField field = SpeedrunStateField::kMaster;
  int bucket = 0, batch = -1;  // batch: for the Muon fields
  int element_bytes = 4;
  std::vector<StatePiece> pieces;
  size_t elements() const;
};

// The arrays of a rank's checkpoint state in file order (non-empty ones only); saved gradients when the
// checkpoint follows a step without Adam. x_bytes: sizeof(floatX) of the build (mantissas: bf16 builds only).
std::vector<StateArrayPlan> speedrun_state_arrays(const SpeedrunRankPlan& plan, const ParamLayout& layout,
                                                  bool adam_grads_saved, int x_bytes);

// Rank `new_rank`'s arrays under `new_arrays`, from every old rank's arrays (old_arrays[r] as written,
// old_plans[r] their plans). Each element is copied from an old rank that held the same key (the lowest
// such rank: replicated gates are the same on all); saved gradients, local to each rank, become the mean
// over the old ranks (fp32, rounded once), so the next reduction sees the same mean. Throws
// std::runtime_error naming the array and key when no old rank holds an element, or an array's size does
// not match its plan.
std::vector<NamedStateArray> reshard_speedrun_state(const std::vector<std::vector<NamedStateArray>>& old_arrays,
                                                    const std::vector<std::vector<StateArrayPlan>>& old_plans,
                                                    const std::vector<StateArrayPlan>& new_arrays);

}  // namespace llmc
