// The Muon owner planner (llmc/optim/muon_owners.h) and its cost model: every matrix owned exactly once,
// the list-scheduling balance bound, at least the reference's balance at 8 ranks, determinism, options
// and errors.
#include "llmc/optim/muon_owners.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <stdexcept>
#include <vector>

namespace {

using llmc::MuonOwnerPlan;
using llmc::MuonTensor;

TEST(MuonCost, PolarExpressFlopsAndLaunches) {
  // [768, 3072]: per step 2 s^2 l + 2 s^3 + 2 s^2 l with s = 768, l = 3072.
  const llmc::MuonCost mlp = llmc::polar_express_cost(768, 3072);
  const double s = 768, l = 3072;
  EXPECT_DOUBLE_EQ(mlp.flops, 5 * (4 * s * s * l + 2 * s * s * s));
  EXPECT_EQ(mlp.launches, 2 + 3 * 5);
  // A tall matrix costs what its transpose does.
  const llmc::MuonCost tall = llmc::polar_express_cost(3072, 768);
  EXPECT_DOUBLE_EQ(tall.flops, mlp.flops);
  EXPECT_DOUBLE_EQ(tall.bytes, mlp.bytes);
  // Each GEMM of a [768, 768] step is compute bound at the H200 ceilings: 2 * 768^3 / 790e12 s.
  const llmc::MuonCost square = llmc::polar_express_cost(768, 768, 1);
  const double gemm_seconds = 2.0 * s * s * s / 790e12;
  EXPECT_NEAR(square.seconds, 3 * gemm_seconds + 3.0 * s * s * 2 / 4.3e12, 1e-15);
}

TEST(MuonOwners, RecordTensorsInBackwardOrder) {
  const std::vector<MuonTensor> tensors = llmc::speedrun_muon_tensors();
  std::map<std::string, int> kinds;
  int matrices = 0;
  for (const MuonTensor& t : tensors) kinds[t.name.substr(0, t.name.find('.'))]++, matrices += t.matrices;
  EXPECT_EQ(kinds["attn"], 10);
  EXPECT_EQ(kinds["mlp_fc"], 11);
  EXPECT_EQ(kinds["mlp_proj"], 11);
  EXPECT_EQ(kinds["attn_gate"], 10);
  EXPECT_EQ(kinds["smear_gate"], 1);
  EXPECT_EQ(matrices, 40 + 22 + 10 + 1);
  EXPECT_EQ(tensors.front().name, "mlp_proj.11");
  EXPECT_EQ(tensors.back().name, "smear_gate");
}

// Every unit owned once (or replicated); the owned lists hold each owned unit once, grouped by shape.
void expect_partition(const std::vector<MuonTensor>& tensors, const MuonOwnerPlan& plan) {
  std::vector<int> seen(plan.units.size(), 0);
  for (int rank = 0; rank < plan.world; rank++) {
    std::vector<std::pair<int, int>> shapes;
    for (int u : plan.owned[rank]) {
      ASSERT_EQ(plan.units[u].owner, rank);
      seen[u]++;
      const MuonTensor& t = tensors[plan.units[u].tensor];
      if (shapes.empty() || shapes.back() != std::make_pair(t.rows, t.cols)) {
        ASSERT_EQ(std::count(shapes.begin(), shapes.end(), std::make_pair(t.rows, t.cols)), 0) << "shape split";
        shapes.emplace_back(t.rows, t.cols);
      }
    }
  }
  std::map<int, int> matrices_per_tensor;
  for (size_t u = 0; u < plan.units.size(); u++) {
    EXPECT_EQ(seen[u], plan.units[u].owner == llmc::kAllRanks ? 0 : 1) << "unit " << u;
    matrices_per_tensor[plan.units[u].tensor] += plan.units[u].matrices;
  }
  for (size_t t = 0; t < tensors.size(); t++) EXPECT_EQ(matrices_per_tensor[t], tensors[t].matrices) << tensors[t].name;
}

// Greedy least-loaded dealing guarantees max <= mean + largest unit (the last unit dealt to the max rank
// found it at most at the mean); the improvement pass only lowers the maximum.
TEST(MuonOwners, EveryWorldSizePartitionsAndBalances) {
  const std::vector<MuonTensor> tensors = llmc::speedrun_muon_tensors();
  for (bool split : {false, true}) {
    llmc::MuonOwnerOptions options;
    options.split_tensors = split;
    for (int world = 1; world <= 8; world++) {
      const MuonOwnerPlan plan = llmc::plan_muon_owners(tensors, world, options);
      expect_partition(tensors, plan);
      double largest = 0.0;
      for (const auto& unit : plan.units)
        if (unit.owner != llmc::kAllRanks) largest = std::max(largest, unit.cost.seconds);
      EXPECT_LE(plan.max_seconds(), plan.mean_seconds() + largest) << "world " << world << " split " << split;
      if (world == 1) {
        EXPECT_EQ(plan.owned[0].size() + 11, plan.units.size());  // all but the replicated gates
      }
    }
  }
}

// The reference deals by fixed chunks at 8 ranks: ranks 0-4 get 2 attention tensors + 2 MLP matrices,
// ranks 5-7 get 4 MLP matrices. The planner must be at least as balanced.
TEST(MuonOwners, AtEightRanksAtLeastAsBalancedAsTheReference) {
  const std::vector<MuonTensor> tensors = llmc::speedrun_muon_tensors();
  const MuonOwnerPlan plan = llmc::plan_muon_owners(tensors, 8);
  const llmc::MuonCost attention = 4.0 * llmc::normuon_matrix_cost(768, 768, 4);
  const llmc::MuonCost mlp = llmc::normuon_matrix_cost(768, 3072, 4);
  const double reference_max = std::max(2 * attention.seconds + 2 * mlp.seconds, 4 * mlp.seconds);
  double gates = 0.0;
  for (const auto& unit : plan.units)
    if (unit.owner == llmc::kAllRanks) gates += unit.cost.seconds;
  EXPECT_LE(plan.max_seconds(), reference_max + gates * (1 + 1e-12));
  for (int rank = 0; rank < 8; rank++) EXPECT_FALSE(plan.owned[rank].empty()) << rank;
}

TEST(MuonOwners, DeterministicAndOptionsApply) {
  const std::vector<MuonTensor> tensors = llmc::speedrun_muon_tensors();
  const MuonOwnerPlan a = llmc::plan_muon_owners(tensors, 6), b = llmc::plan_muon_owners(tensors, 6);
  ASSERT_EQ(a.units.size(), b.units.size());
  for (size_t u = 0; u < a.units.size(); u++) EXPECT_EQ(a.units[u].owner, b.units[u].owner);
  llmc::MuonOwnerOptions owned_gates;
  owned_gates.replicate_below_seconds = 0.0;
  for (const auto& unit : llmc::plan_muon_owners(tensors, 4, owned_gates).units) EXPECT_GE(unit.owner, 0);
  llmc::MuonOwnerOptions split;
  split.split_tensors = true;
  const MuonOwnerPlan matrices = llmc::plan_muon_owners(tensors, 8, split);
  EXPECT_EQ(matrices.units.size(), 40u + 22u + 11u);
}

TEST(MuonOwners, RejectsBadInput) {
  const std::vector<MuonTensor> tensors = llmc::speedrun_muon_tensors();
  EXPECT_THROW(llmc::plan_muon_owners(tensors, 0), std::invalid_argument);
  EXPECT_THROW(llmc::plan_muon_owners({}, 2), std::invalid_argument);
  EXPECT_THROW(llmc::plan_muon_owners({MuonTensor{"bad", 0, 4, 1, 4}}, 2), std::invalid_argument);
}

TEST(MuonOwners, TableHasOneRowPerRank) {
  const std::vector<MuonTensor> tensors = llmc::speedrun_muon_tensors();
  const std::string table = llmc::format_muon_owner_table(tensors, llmc::plan_muon_owners(tensors, 4));
  for (int rank = 0; rank < 4; rank++) EXPECT_NE(table.find("\n| " + std::to_string(rank) + " |"), std::string::npos);
  EXPECT_NE(table.find("Replicated on every rank"), std::string::npos);
}

}  // namespace
