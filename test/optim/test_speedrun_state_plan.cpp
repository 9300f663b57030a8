// The speedrun optimizer's per-rank plan and the re-sharding of its checkpoint state
// (llmc/optim/speedrun_state_plan.h), on the speedrun-tiny and modded89-tiny layouts under their records'
// roles (llmc/optim/tensor_roles.h): the plans of all ranks together cover every Muon and Adam element as
// they must, and re-sharding N ranks' arrays for M ranks puts at every element of every new array the value
// written for the same key (each old element coding its own key), with the saved gradients averaged.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/base/bf16_bits.h"
#include "llmc/model/modded44/speedrun_config.h"
#include "llmc/model/modded44/speedrun_layout.h"
#include "llmc/model/modded89/modded89_config.h"
#include "llmc/model/modded89/modded89_layout.h"
#include "llmc/optim/speedrun_state_plan.h"

namespace {

using llmc::NamedStateArray;
using llmc::SpeedrunStateField;
using llmc::StateArrayPlan;

using llmc::SpeedrunRecipe;
constexpr SpeedrunRecipe kRecipes[] = {SpeedrunRecipe::k2025_10_31, SpeedrunRecipe::k2026_07_17};

const char* recipe_name(SpeedrunRecipe recipe) {
  return recipe == SpeedrunRecipe::k2025_10_31 ? "2025-10-31" : "2026-07-17";
}

// The recipe's tiny model laid out for `world` ranks (speedrun-tiny, modded89-tiny).
llmc::ParamLayout tiny_layout(SpeedrunRecipe recipe, int world) {
  if (recipe == SpeedrunRecipe::k2025_10_31)
    return llmc::make_speedrun_layout(llmc::speedrun_config_from_name("speedrun-tiny"), world);
  return llmc::make_modded89_layout(llmc::modded89_config_from_name("modded89-tiny"), world);
}

std::vector<llmc::TensorRole> roles(SpeedrunRecipe recipe, const llmc::ParamLayout& layout) {
  return llmc::speedrun_tensor_roles(recipe, layout);
}

std::vector<std::vector<StateArrayPlan>> all_rank_arrays(SpeedrunRecipe recipe, const llmc::ParamLayout& layout,
                                                         bool saved, int x_bytes) {
  std::vector<std::vector<StateArrayPlan>> plans;
  for (int rank = 0; rank < layout.world_size; rank++)
    plans.push_back(llmc::speedrun_state_arrays(llmc::plan_speedrun_rank(layout, roles(recipe, layout), rank, {}),
                                                layout, saved, x_bytes));
  return plans;
}

// The code written for (field, bucket, key): distinct for distinct keys of one field and bucket.
uint32_t code(SpeedrunStateField field, int bucket, size_t key) {
  return static_cast<uint32_t>(key) * 16u + static_cast<uint32_t>(field) + static_cast<uint32_t>(bucket) * 7919u * 16u;
}

// Saved gradients: local to each rank, small integers (exact in bf16, and so is their mean over 2^k ranks);
// zero in the bucket's padding (past `size`, which does not depend on the world size), as gradients are.
float saved_value(int rank, size_t key, size_t bucket_size) {
  return key < bucket_size ? static_cast<float>(key % 5) + static_cast<float>(rank) : 0.0f;
}

size_t bucket_size(SpeedrunRecipe recipe, int bucket) {
  // Immutable; built once per recipe, not per element.
  static const llmc::ParamLayout layouts[] = {tiny_layout(kRecipes[0], 1), tiny_layout(kRecipes[1], 1)};
  return layouts[recipe == kRecipes[0] ? 0 : 1].buckets[bucket].size;
}

void put(NamedStateArray& array, size_t index, uint32_t value) {
  if (array.element_bytes == 4) {
    std::memcpy(array.bytes.data() + 4 * index, &value, 4);
  } else {
    const uint16_t low = static_cast<uint16_t>(value);
    std::memcpy(array.bytes.data() + 2 * index, &low, 2);
  }
}

uint32_t get(const NamedStateArray& array, size_t index) {
  if (array.element_bytes == 4) {
    uint32_t value;
    std::memcpy(&value, array.bytes.data() + 4 * index, 4);
    return value;
  }
  uint16_t low;
  std::memcpy(&low, array.bytes.data() + 2 * index, 2);
  return low;
}

uint32_t float_bits(float value, int element_bytes) {
  if (element_bytes == 2) return llmc::float_to_bf16_bits(value);
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
}

// The arrays rank `rank` writes under `plans`: every element its key's code (saved gradients: saved_value).
std::vector<NamedStateArray> coded_arrays(SpeedrunRecipe recipe, const std::vector<StateArrayPlan>& plans, int rank) {
  std::vector<NamedStateArray> arrays;
  for (const StateArrayPlan& plan : plans) {
    NamedStateArray array{plan.name, plan.element_bytes, std::vector<char>(plan.elements() * plan.element_bytes)};
    size_t at = 0;
    for (const llmc::StatePiece& piece : plan.pieces)
      for (size_t key = piece.key; key < piece.key + piece.count; key++, at++)
        put(array, at, plan.field == SpeedrunStateField::kSavedGrads
                           ? float_bits(saved_value(rank, key, bucket_size(recipe, plan.bucket)), plan.element_bytes)
                           : code(plan.field, plan.bucket, key));
    arrays.push_back(std::move(array));
  }
  return arrays;
}

// Every element of `arrays` (under `plans`) holds what the old ranks wrote for its key.
void expect_coded(SpeedrunRecipe recipe, const std::vector<NamedStateArray>& arrays,
                  const std::vector<StateArrayPlan>& plans, int old_world, const std::string& what) {
  ASSERT_EQ(arrays.size(), plans.size()) << what;
  float mean_rank = 0.0f;
  for (int r = 0; r < old_world; r++) mean_rank += static_cast<float>(r) / static_cast<float>(old_world);
  for (size_t a = 0; a < plans.size(); a++) {
    const StateArrayPlan& plan = plans[a];
    ASSERT_EQ(arrays[a].name, plan.name) << what;
    ASSERT_EQ(arrays[a].bytes.size(), plan.elements() * plan.element_bytes) << what << " " << plan.name;
    size_t at = 0;
    for (const llmc::StatePiece& piece : plan.pieces)
      for (size_t key = piece.key; key < piece.key + piece.count; key++, at++) {
        const uint32_t expected =
            plan.field == SpeedrunStateField::kSavedGrads
                ? float_bits(key < bucket_size(recipe, plan.bucket) ? static_cast<float>(key % 5) + mean_rank : 0.0f,
                             plan.element_bytes)
                : (plan.element_bytes == 4 ? code(plan.field, plan.bucket, key)
                                           : static_cast<uint16_t>(code(plan.field, plan.bucket, key)));
        ASSERT_EQ(get(arrays[a], at), expected) << what << ": " << plan.name << " element " << at << " key " << key;
      }
  }
}

// Each rank's Adam segments partition the Adam tensors; the ranks' Muon batches hold every element of an
// owned unit once (on its owner) and of a replicated unit on every rank, as the owner plan says.
TEST(SpeedrunStatePlan, RanksTogetherCoverEveryElementAsPlanned) {
  for (SpeedrunRecipe recipe : kRecipes)
    for (int world : {1, 2, 3, 4, 8}) {
      SCOPED_TRACE(std::string(recipe_name(recipe)) + ", world " + std::to_string(world));
      const llmc::ParamLayout layout = tiny_layout(recipe, world);
      std::map<size_t, int> adam_hits, muon_hits;  // parameter element -> how many ranks hold it
      for (int rank = 0; rank < world; rank++) {
        const llmc::SpeedrunRankPlan plan = llmc::plan_speedrun_rank(layout, roles(recipe, layout), rank, {});
        for (const llmc::SpeedrunBucketPlan& bucket : plan.buckets) {
          for (const llmc::AdamSegmentPlan& segment : bucket.adam_segments)
            for (size_t i = segment.offset; i < segment.offset + segment.length; i++) adam_hits[i]++;
          for (const llmc::MuonBatchPlan& batch : bucket.batches)
            for (size_t u = 0; u < batch.unit_offset.size(); u++)
              for (size_t i = 0; i < batch.unit_matrices[u] * static_cast<size_t>(batch.rows) * batch.cols; i++)
                muon_hits[batch.unit_offset[u] + i]++;
        }
      }
      std::map<size_t, int> holders;  // Muon element -> ranks that should update it, by the owner plan
      std::vector<int> tensor_index;
      const std::vector<llmc::MuonTensor> tensors =
          llmc::layout_muon_tensors(layout, roles(recipe, layout), &tensor_index);
      const llmc::MuonOwnerPlan owners = llmc::plan_muon_owners(tensors, world);
      for (const llmc::MuonOwnerUnit& unit : owners.units) {
        const llmc::MuonTensor& tensor = tensors[unit.tensor];
        const size_t matrix = static_cast<size_t>(tensor.rows) * tensor.cols;
        const size_t first = layout.tensors[tensor_index[unit.tensor]].offset + unit.first_matrix * matrix;
        for (size_t i = first; i < first + unit.matrices * matrix; i++)
          holders[i] = unit.owner == llmc::kAllRanks ? world : 1;
      }
      for (const llmc::TensorView& view : layout.tensors)
        for (size_t i = view.offset; i < view.offset + view.numel; i++) {
          if (view.group == llmc::ParamGroup::kAdam) {
            ASSERT_EQ(adam_hits[i], 1) << view.name << " element " << i - view.offset;
            ASSERT_EQ(muon_hits.count(i), 0u) << view.name;
          } else {
            ASSERT_EQ(holders.count(i), 1u) << view.name << " element " << i - view.offset << " in no owner unit";
            ASSERT_EQ(muon_hits[i], holders[i]) << view.name << " element " << i - view.offset;
            ASSERT_EQ(adam_hits.count(i), 0u) << view.name;
          }
        }
    }
}

// The 2026-07-17 roles: the banks as their matrices (Q/K head pairs [2D, C], V/O and MLP two each, the rules of
// the matrix's shape), mantissa storage with its own state array in bf16 builds, every Adam moment fp32 and the
// fp32 tensors updated in fp32; one rank holds everything.
TEST(SpeedrunStatePlan, The2026RecipesBanksAndAdamState) {
  const llmc::Modded89Config config = llmc::modded89_config_from_name("modded89-tiny");
  const llmc::ParamLayout layout = tiny_layout(SpeedrunRecipe::k2026_07_17, 1);
  const std::vector<llmc::TensorRole> r = roles(SpeedrunRecipe::k2026_07_17, layout);
  const int C = config.channels(), D = config.head_dim;
  int banks = 0;
  for (size_t t = 0; t < layout.tensors.size(); t++) {
    const llmc::TensorView& view = layout.tensors[t];
    const auto kind = static_cast<llmc::Modded89Tensor>(view.kind);
    if (view.group == llmc::ParamGroup::kMuon) {
      banks++;
      EXPECT_EQ(r[t].storage, llmc::MuonStorage::kMantissa) << view.name;
      EXPECT_EQ(r[t].cols, C) << view.name;
      const int rows = kind == llmc::Modded89Tensor::kQkBank ? 2 * D : kind == llmc::Modded89Tensor::kVoBank ? C : 4 * C;
      EXPECT_EQ(r[t].rows, rows) << view.name;
      EXPECT_EQ(r[t].matrices, kind == llmc::Modded89Tensor::kQkBank ? config.num_heads : 2) << view.name;
      EXPECT_EQ(r[t].rules.variance_per_column, rows < C) << view.name;
      EXPECT_EQ(r[t].rules.lr_scale, rows > C ? 2.0 : 1.0) << view.name;  // sqrt(4C / C)
    } else {
      EXPECT_TRUE(r[t].fp32_state) << view.name;
      EXPECT_EQ(r[t].fp32_param, view.reference_dtype == llmc::ParamDtype::kFp32) << view.name;
    }
  }
  EXPECT_EQ(banks, 31);
  for (int x_bytes : {2, 4}) {
    int mantissas = 0, adam_x = 0;
    const auto plans = all_rank_arrays(SpeedrunRecipe::k2026_07_17, layout, false, x_bytes);
    for (const StateArrayPlan& array : plans[0]) {
      mantissas += array.field == SpeedrunStateField::kMantissa;
      adam_x += array.field == SpeedrunStateField::kAdamM || array.field == SpeedrunStateField::kAdamV;
      EXPECT_NE(array.field, SpeedrunStateField::kMaster) << array.name;
      if (array.field == SpeedrunStateField::kMomentum || array.field == SpeedrunStateField::kVariance) {
        EXPECT_EQ(array.element_bytes, 4) << array.name;
      }
    }
    EXPECT_EQ(mantissas > 0, x_bytes == 2) << "floatX " << x_bytes << " bytes";
    EXPECT_EQ(adam_x, 0);
  }
}

TEST(SpeedrunStatePlan, ReshardingToTheSameWorldIsTheIdentity) {
  for (SpeedrunRecipe recipe : kRecipes)
    for (int world : {1, 2, 4}) {
      const llmc::ParamLayout layout = tiny_layout(recipe, world);
      const auto plans = all_rank_arrays(recipe, layout, /*saved=*/false, 2);
      std::vector<std::vector<NamedStateArray>> written;
      for (int r = 0; r < world; r++) written.push_back(coded_arrays(recipe, plans[r], r));
      for (int r = 0; r < world; r++) {
        const std::vector<NamedStateArray> got = llmc::reshard_speedrun_state(written, plans, plans[r]);
        ASSERT_EQ(got.size(), written[r].size());
        for (size_t a = 0; a < got.size(); a++) {
          EXPECT_EQ(got[a].name, written[r][a].name);
          EXPECT_TRUE(got[a].bytes == written[r][a].bytes)
              << recipe_name(recipe) << " world " << world << " rank " << r << " " << got[a].name;
        }
      }
    }
}

// N ranks' coded arrays re-sharded for each rank of M: every element is its key's code, and the saved
// gradients the mean over the N ranks; in bf16 (2-byte floatX) and fp32 builds.
TEST(SpeedrunStatePlan, ReshardedElementsComeFromTheirKeys) {
  const std::vector<std::pair<int, int>> moves = {{2, 1}, {1, 2}, {2, 4}, {4, 2}, {1, 4}, {4, 1}, {8, 3}, {3, 8}};
  for (SpeedrunRecipe recipe : kRecipes)
    for (int x_bytes : {2, 4})
      for (bool saved : {false, true})
        for (const auto& [old_world, new_world] : moves) {
          const std::string what = std::string(recipe_name(recipe)) + ", " + std::to_string(old_world) + " -> " +
                                   std::to_string(new_world) + " ranks, floatX " + std::to_string(x_bytes) +
                                   " bytes" + (saved ? ", saved gradients" : "");
          const auto old_plans = all_rank_arrays(recipe, tiny_layout(recipe, old_world), saved, x_bytes);
          std::vector<std::vector<NamedStateArray>> written;
          for (int r = 0; r < old_world; r++) written.push_back(coded_arrays(recipe, old_plans[r], r));
          const auto new_plans = all_rank_arrays(recipe, tiny_layout(recipe, new_world), saved, x_bytes);
          for (int r = 0; r < new_world; r++)
            expect_coded(recipe, llmc::reshard_speedrun_state(written, old_plans, new_plans[r]), new_plans[r],
                         old_world, what + ", new rank " + std::to_string(r));
        }
}

TEST(SpeedrunStatePlan, AnArrayThatDoesNotFitItsPlanIsNamed) {
  const SpeedrunRecipe recipe = SpeedrunRecipe::k2025_10_31;
  const auto plans = all_rank_arrays(recipe, tiny_layout(recipe, 2), false, 2);
  std::vector<std::vector<NamedStateArray>> written = {coded_arrays(recipe, plans[0], 0),
                                                       coded_arrays(recipe, plans[1], 1)};
  written[1][0].bytes.resize(written[1][0].bytes.size() - 2);
  try {
    llmc::reshard_speedrun_state(written, plans, all_rank_arrays(recipe, tiny_layout(recipe, 1), false, 2)[0]);
    FAIL() << "no error";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("rank 1's array 0 is " + plans[1][0].name), std::string::npos)
        << error.what();
  }
}

TEST(SpeedrunStatePlan, RolesMustMatchTheLayout) {
  const llmc::ParamLayout layout = tiny_layout(SpeedrunRecipe::k2025_10_31, 1);
  std::vector<llmc::TensorRole> r = roles(SpeedrunRecipe::k2025_10_31, layout);
  r.pop_back();
  EXPECT_THROW(llmc::plan_speedrun_rank(layout, r, 0, {}), std::invalid_argument);
  // The other recipe's roles for this layout: its kinds mean other tensors.
  EXPECT_THROW(roles(SpeedrunRecipe::k2026_07_17, layout), std::invalid_argument);
}

}  // namespace
