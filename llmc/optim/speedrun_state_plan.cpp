// The speedrun optimizer's per-rank plan and the re-sharding of its checkpoint state (see
// speedrun_state_plan.h and docs/optimizers.md#checkpoints).
#include "llmc/optim/speedrun_state_plan.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>
#include <tuple>

#include "llmc/base/bf16_bits.h"

namespace llmc {

namespace {

// Sorts the spans by offset and merges neighbours of one owner: one collective each.
void merge_spans(std::vector<MuonSpan>& spans) {
  std::sort(spans.begin(), spans.end(), [](const MuonSpan& a, const MuonSpan& b) { return a.offset < b.offset; });
  std::vector<MuonSpan> merged;
  for (const MuonSpan& span : spans) {
    if (!merged.empty() && merged.back().owner == span.owner && merged.back().offset + merged.back().length == span.offset)
      merged.back().length += span.length;
    else
      merged.push_back(span);
  }
  spans = std::move(merged);
}

// Per bucket: the spans of every Muon unit, and the batches of the units this rank updates (one per shape,
// type and shape rules, units in plan order).
void plan_muon(const ParamLayout& layout, const std::vector<TensorRole>& roles, SpeedrunRankPlan& plan) {
  std::vector<int> tensor_index;
  const std::vector<MuonTensor> tensors = layout_muon_tensors(layout, roles, &tensor_index);
  using Key = std::tuple<int, int, int, MuonStorage, bool, double>;  // bucket, rows, cols, storage, rules
  std::map<Key, MuonBatchPlan> batches;
  std::vector<Key> batch_order;
  for (const MuonOwnerUnit& unit : plan.owners.units) {
    const MuonTensor& tensor = tensors[unit.tensor];
    const int index = tensor_index[unit.tensor];
    const TensorView& view = layout.tensors[index];
    const TensorRole& role = roles[index];
    const size_t matrix = static_cast<size_t>(tensor.rows) * tensor.cols;
    const size_t offset = view.offset + static_cast<size_t>(unit.first_matrix) * matrix;
    plan.buckets[view.bucket].muon_spans.push_back({unit.owner, offset, unit.matrices * matrix});
    if (unit.owner != kAllRanks && unit.owner != plan.rank) continue;
    const Key key{view.bucket, tensor.rows, tensor.cols, role.storage, role.rules.variance_per_column,
                  role.rules.lr_scale};
    auto [found, inserted] = batches.emplace(key, MuonBatchPlan());
    MuonBatchPlan& batch = found->second;
    if (inserted) {
      batch_order.push_back(key);
      batch.rows = tensor.rows;
      batch.cols = tensor.cols;
      batch.storage = role.storage;
      batch.rules = role.rules;
    }
    batch.unit_offset.push_back(offset);
    batch.unit_matrices.push_back(unit.matrices);
    batch.unit_tensor.push_back(index);
    batch.unit_first_matrix.push_back(unit.first_matrix);
    batch.count += unit.matrices;
  }
  for (SpeedrunBucketPlan& bucket : plan.buckets) merge_spans(bucket.muon_spans);
  for (const Key& key : batch_order) plan.buckets[std::get<0>(key)].batches.push_back(std::move(batches[key]));
}

// Per Adam bucket: every Adam tensor, and this rank's segments of its shard with their moments' places.
void plan_adam(const ParamLayout& layout, const std::vector<TensorRole>& roles, SpeedrunRankPlan& plan) {
  for (int b = 0; b < layout.num_buckets(); b++) {
    const ParamBucket& bucket = layout.buckets[b];
    SpeedrunBucketPlan& out = plan.buckets[b];
    const size_t begin = bucket.offset + static_cast<size_t>(plan.rank) * bucket.shard_size;
    const size_t end = begin + bucket.shard_size;
    for (int t = bucket.first_tensor; t < bucket.first_tensor + bucket.num_tensors; t++) {
      const TensorView& view = layout.tensors[t];
      if (view.group != ParamGroup::kAdam) continue;
      out.adam_tensors.emplace_back(view.offset, view.numel);
      const size_t from = std::max(begin, view.offset), to = std::min(end, view.offset + view.numel);
      if (from >= to) continue;
      AdamSegmentPlan segment;
      segment.offset = from;
      segment.length = to - from;
      segment.tensor = t;
      segment.fp32_state = roles[t].fp32_state;
      segment.fp32_param = roles[t].fp32_param;
      size_t& state = segment.fp32_state ? out.adam_state_32 : out.adam_state_x;
      segment.state_offset = state;
      state += segment.length;
      out.adam_segments.push_back(segment);
    }
  }
}

}  // namespace

std::vector<MuonTensor> layout_muon_tensors(const ParamLayout& layout, const std::vector<TensorRole>& roles,
                                            std::vector<int>* tensor_index) {
  if (roles.size() != layout.tensors.size())
    throw std::invalid_argument("speedrun optimizer: " + std::to_string(roles.size()) + " tensor roles for a layout of " +
                                std::to_string(layout.tensors.size()) + " tensors");
  std::vector<MuonTensor> tensors;
  for (int b = layout.num_buckets() - 1; b >= 0; b--) {
    const ParamBucket& bucket = layout.buckets[b];
    for (int t = bucket.first_tensor; t < bucket.first_tensor + bucket.num_tensors; t++) {
      const TensorView& view = layout.tensors[t];
      if (view.group != ParamGroup::kMuon) continue;
      const TensorRole& role = roles[t];
      MuonTensor tensor;
      tensor.name = view.name;
      tensor.rows = role.rows;
      tensor.cols = role.cols;
      tensor.matrices = role.matrices;
      tensor.param_bytes = role.storage == MuonStorage::kInPlace ? 2 : 4;  // a master, or bf16 + mantissa
      tensors.push_back(tensor);
      tensor_index->push_back(t);
    }
  }
  return tensors;
}

SpeedrunRankPlan plan_speedrun_rank(const ParamLayout& layout, const std::vector<TensorRole>& roles, int rank,
                                    const MuonOwnerOptions& owners) {
  if (rank < 0 || rank >= layout.world_size)
    throw std::invalid_argument("plan_speedrun_rank: rank " + std::to_string(rank) + " outside the world of " +
                                std::to_string(layout.world_size));
  SpeedrunRankPlan plan;
  plan.rank = rank;
  std::vector<int> tensor_index;
  plan.owners = plan_muon_owners(layout_muon_tensors(layout, roles, &tensor_index), layout.world_size, owners);
  plan.buckets.resize(layout.num_buckets());
  plan_muon(layout, roles, plan);
  plan_adam(layout, roles, plan);
  return plan;
}

size_t StateArrayPlan::elements() const {
  size_t total = 0;
  for (const StatePiece& piece : pieces) total += piece.count;
  return total;
}

std::vector<StateArrayPlan> speedrun_state_arrays(const SpeedrunRankPlan& plan, const ParamLayout& layout,
                                                  bool adam_grads_saved, int x_bytes) {
  std::vector<StateArrayPlan> arrays;
  auto add = [&arrays](StateArrayPlan array) {
    if (array.elements() > 0) arrays.push_back(std::move(array));
  };
  for (int b = 0; b < static_cast<int>(plan.buckets.size()); b++) {
    const SpeedrunBucketPlan& bucket = plan.buckets[b];
    const size_t base = layout.buckets[b].offset;  // keys count from the bucket's start
    const std::string prefix = "b" + std::to_string(b) + ".";
    for (int i = 0; i < static_cast<int>(bucket.batches.size()); i++) {
      const MuonBatchPlan& batch = bucket.batches[i];
      const std::string name = prefix + "muon" + std::to_string(i) + ".";
      const int bytes = batch.fp32_buffers() ? 4 : x_bytes;
      const size_t matrix = static_cast<size_t>(batch.rows) * batch.cols;
      const size_t stat = batch.rules.variance_per_column ? batch.cols : batch.rows;
      StateArrayPlan values{name + "master", SpeedrunStateField::kMaster, b, i, 4, {}};
      StateArrayPlan variance{name + "variance", SpeedrunStateField::kVariance, b, i, bytes, {}};
      for (size_t u = 0; u < batch.unit_offset.size(); u++) {
        const size_t key = batch.unit_offset[u] - base;
        values.pieces.push_back({key, batch.unit_matrices[u] * matrix});
        for (int m = 0; m < batch.unit_matrices[u]; m++) variance.pieces.push_back({key + m * matrix, stat});
      }
      StateArrayPlan momentum{name + "momentum", SpeedrunStateField::kMomentum, b, i, bytes, values.pieces};
      StateArrayPlan mantissa{name + "mantissa", SpeedrunStateField::kMantissa, b, i, 2, values.pieces};
      if (batch.storage == MuonStorage::kFp32Master) add(values);
      if (batch.storage == MuonStorage::kMantissa && x_bytes == 2) add(mantissa);  // fp32 builds: no mantissa
      add(momentum);
      add(variance);
    }
    if (!bucket.has_adam()) continue;
    std::vector<StatePiece> x_pieces, fp32_pieces;
    for (const AdamSegmentPlan& segment : bucket.adam_segments)
      (segment.fp32_state ? fp32_pieces : x_pieces).push_back({segment.offset - base, segment.length});
    add({prefix + "adam.m", SpeedrunStateField::kAdamM, b, -1, x_bytes, x_pieces});
    add({prefix + "adam.v", SpeedrunStateField::kAdamV, b, -1, x_bytes, x_pieces});
    add({prefix + "adam.m32", SpeedrunStateField::kAdamM32, b, -1, 4, fp32_pieces});
    add({prefix + "adam.v32", SpeedrunStateField::kAdamV32, b, -1, 4, fp32_pieces});
    if (adam_grads_saved) {
      add({prefix + "adam.saved_grads", SpeedrunStateField::kSavedGrads, b, -1, x_bytes,
           {{0, layout.buckets[b].padded_size}}});
    }
  }
  return arrays;
}

namespace {

// Where an element of an old rank's array is: a contiguous run of keys at an element index of an array.
struct OldRun {
  size_t key, count;
  int rank, array;
  size_t element;
};

float element_as_float(const NamedStateArray& array, size_t index) {
  if (array.element_bytes == 4) {
    float value;
    std::memcpy(&value, array.bytes.data() + index * 4, 4);
    return value;
  }
  uint16_t bits;
  std::memcpy(&bits, array.bytes.data() + index * 2, 2);
  return bf16_bits_to_float(bits);
}

void store_float(NamedStateArray& array, size_t index, float value) {
  if (array.element_bytes == 4) {
    std::memcpy(array.bytes.data() + index * 4, &value, 4);
  } else {
    const uint16_t bits = float_to_bf16_bits(value);
    std::memcpy(array.bytes.data() + index * 2, &bits, 2);
  }
}

// Saved gradients of one bucket: the mean over the old ranks, key by key (keys past an old rank's padded
// bucket are zero there).
void fill_mean(NamedStateArray& out, const StateArrayPlan& plan, const std::vector<OldRun>& runs,
               const std::vector<std::vector<NamedStateArray>>& old_arrays, int old_world) {
  size_t at = 0;
  for (const StatePiece& piece : plan.pieces)
    for (size_t k = piece.key; k < piece.key + piece.count; k++, at++) {
      float sum = 0.0f;
      for (const OldRun& run : runs)
        if (k >= run.key && k < run.key + run.count)
          sum += element_as_float(old_arrays[run.rank][run.array], run.element + (k - run.key));
      store_float(out, at, sum / static_cast<float>(old_world));
    }
}

// Everything else: each run of keys copied from the lowest old rank that holds it.
void fill_copy(NamedStateArray& out, const StateArrayPlan& plan, const std::vector<OldRun>& runs,
               const std::vector<std::vector<NamedStateArray>>& old_arrays) {
  const size_t bytes = static_cast<size_t>(plan.element_bytes);
  size_t at = 0;
  for (const StatePiece& piece : plan.pieces) {
    size_t key = piece.key;
    const size_t end = piece.key + piece.count;
    while (key < end) {
      // Of the runs that start at or before `key` and contain it, the lowest rank's.
      auto next = std::upper_bound(runs.begin(), runs.end(), key, [](size_t k, const OldRun& r) { return k < r.key; });
      const OldRun* source = nullptr;
      for (auto it = runs.begin(); it != next; ++it)
        if (key < it->key + it->count && (source == nullptr || it->rank < source->rank)) source = &*it;
      if (source == nullptr)
        throw std::runtime_error("re-sharding the speedrun optimizer state: no rank of the checkpoint holds element " +
                                 std::to_string(key) + " of " + plan.name);
      const size_t count = std::min(end, source->key + source->count) - key;
      const NamedStateArray& from = old_arrays[source->rank][source->array];
      std::memcpy(out.bytes.data() + at * bytes, from.bytes.data() + (source->element + key - source->key) * bytes,
                  count * bytes);
      at += count;
      key += count;
    }
  }
}

}  // namespace

std::vector<NamedStateArray> reshard_speedrun_state(const std::vector<std::vector<NamedStateArray>>& old_arrays,
                                                    const std::vector<std::vector<StateArrayPlan>>& old_plans,
                                                    const std::vector<StateArrayPlan>& new_arrays) {
  // Per (field, bucket): every old rank's runs of keys, sorted by key then rank.
  std::map<std::pair<SpeedrunStateField, int>, std::vector<OldRun>> runs;
  for (size_t r = 0; r < old_plans.size(); r++) {
    if (old_arrays[r].size() != old_plans[r].size())
      throw std::runtime_error("re-sharding the speedrun optimizer state: rank " + std::to_string(r) + " wrote " +
                               std::to_string(old_arrays[r].size()) + " arrays, its plan has " +
                               std::to_string(old_plans[r].size()));
    for (size_t a = 0; a < old_plans[r].size(); a++) {
      const StateArrayPlan& plan = old_plans[r][a];
      const NamedStateArray& array = old_arrays[r][a];
      if (array.name != plan.name || array.element_bytes != plan.element_bytes ||
          array.bytes.size() != plan.elements() * static_cast<size_t>(plan.element_bytes))
        throw std::runtime_error("re-sharding the speedrun optimizer state: rank " + std::to_string(r) + "'s array " +
                                 std::to_string(a) + " is " + array.name + " of " + std::to_string(array.bytes.size()) +
                                 " bytes, its plan expects " + plan.name + " of " +
                                 std::to_string(plan.elements() * plan.element_bytes));
      size_t element = 0;
      for (const StatePiece& piece : plan.pieces) {
        runs[{plan.field, plan.bucket}].push_back({piece.key, piece.count, static_cast<int>(r), static_cast<int>(a), element});
        element += piece.count;
      }
    }
  }
  for (auto& [field, list] : runs)
    std::sort(list.begin(), list.end(), [](const OldRun& a, const OldRun& b) {
      return a.key != b.key ? a.key < b.key : a.rank < b.rank;
    });
  std::vector<NamedStateArray> out;
  for (const StateArrayPlan& plan : new_arrays) {
    NamedStateArray array{plan.name, plan.element_bytes, std::vector<char>(plan.elements() * plan.element_bytes)};
    const std::vector<OldRun>& sources = runs[{plan.field, plan.bucket}];
    if (plan.field == SpeedrunStateField::kSavedGrads)
      fill_mean(array, plan, sources, old_arrays, static_cast<int>(old_plans.size()));
    else
      fill_copy(array, plan, sources, old_arrays);
    out.push_back(std::move(array));
  }
  return out;
}

}  // namespace llmc
