// The Muon owner planner of muon_owners.h: longest-processing-time dealing, then local improvement.
#include "llmc/optim/muon_owners.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace llmc {

std::vector<MuonTensor> speedrun_muon_tensors(int C, int heads) {
  constexpr int kGateInputs = 12;  // the gates read the first 12 channels
  std::vector<MuonTensor> tensors;
  for (int block = 11; block >= 1; block--) {
    const std::string suffix = "." + std::to_string(block);
    tensors.push_back({"mlp_proj" + suffix, C, 4 * C, 1, 4});
    tensors.push_back({"mlp_fc" + suffix, C, 4 * C, 1, 4});
    if (block == 7) continue;  // block 7 has no attention
    tensors.push_back({"attn_gate" + suffix, heads, kGateInputs, 1, 2});
    tensors.push_back({"attn" + suffix, C, C, 4, 4});
  }
  tensors.push_back({"smear_gate", 1, kGateInputs, 1, 2});
  return tensors;
}

double MuonOwnerPlan::max_seconds() const {
  double result = 0.0;
  for (const MuonCost& cost : rank_cost) result = std::max(result, cost.seconds);
  return result;
}

double MuonOwnerPlan::mean_seconds() const {
  double total = 0.0;
  for (const MuonCost& cost : rank_cost) total += cost.seconds;
  return rank_cost.empty() ? 0.0 : total / rank_cost.size();
}

namespace {

constexpr int kUnassigned = -2;

void validate(const std::vector<MuonTensor>& tensors, int world) {
  if (world < 1) throw std::invalid_argument("plan_muon_owners: world size " + std::to_string(world) + " < 1");
  if (tensors.empty()) throw std::invalid_argument("plan_muon_owners: no Muon tensors");
  for (const MuonTensor& t : tensors)
    if (t.rows <= 0 || t.cols <= 0 || t.matrices <= 0 || (t.param_bytes != 2 && t.param_bytes != 4))
      throw std::invalid_argument("plan_muon_owners: tensor '" + t.name + "' has rows=" + std::to_string(t.rows) +
                                  " cols=" + std::to_string(t.cols) + " matrices=" + std::to_string(t.matrices) +
                                  " param_bytes=" + std::to_string(t.param_bytes));
}

std::vector<MuonOwnerUnit> make_units(const std::vector<MuonTensor>& tensors, const MuonOwnerOptions& options) {
  std::vector<MuonOwnerUnit> units;
  for (int i = 0; i < static_cast<int>(tensors.size()); i++) {
    const MuonTensor& t = tensors[i];
    const MuonCost one = normuon_matrix_cost(t.rows, t.cols, t.param_bytes, 2, options.ceilings);
    const int per_unit = options.split_tensors ? 1 : t.matrices;
    for (int first = 0; first < t.matrices; first += per_unit) {
      MuonOwnerUnit unit;
      unit.tensor = i;
      unit.first_matrix = first;
      unit.matrices = per_unit;
      unit.cost = static_cast<double>(per_unit) * one;
      unit.owner = unit.cost.seconds < options.replicate_below_seconds ? kAllRanks : kUnassigned;
      units.push_back(unit);
    }
  }
  return units;
}

bool same_shape(const MuonTensor& a, const MuonTensor& b) { return a.rows == b.rows && a.cols == b.cols; }

// Largest first onto the least loaded rank; among equally loaded ranks, one that already has this
// shape (fewer batches), then the lowest rank.
void deal(const std::vector<MuonTensor>& tensors, std::vector<MuonOwnerUnit>& units, std::vector<double>& load) {
  std::vector<int> order;
  for (int u = 0; u < static_cast<int>(units.size()); u++)
    if (units[u].owner == kUnassigned) order.push_back(u);
  std::stable_sort(order.begin(), order.end(),
                   [&](int x, int y) { return units[x].cost.seconds > units[y].cost.seconds; });
  for (int u : order) {
    auto has_shape = [&](int rank) {
      for (const MuonOwnerUnit& other : units)
        if (other.owner == rank && same_shape(tensors[other.tensor], tensors[units[u].tensor])) return true;
      return false;
    };
    int best = 0;
    for (int rank = 1; rank < static_cast<int>(load.size()); rank++) {
      if (load[rank] < load[best] || (load[rank] == load[best] && has_shape(rank) && !has_shape(best))) best = rank;
    }
    units[u].owner = best;
    load[best] += units[u].cost.seconds;
  }
}

// One move or swap that lowers the most loaded rank without raising any rank to its load; false when
// none exists. The best candidate (lowest resulting pair maximum) wins; ties go to the first found.
bool improve_once(std::vector<MuonOwnerUnit>& units, std::vector<double>& load) {
  const int top = static_cast<int>(std::max_element(load.begin(), load.end()) - load.begin());
  const double limit = load[top] * (1.0 - 1e-12);
  double best_pair = limit;
  int best_unit = -1, best_rank = -1, best_swap = -1;
  for (int u = 0; u < static_cast<int>(units.size()); u++) {
    if (units[u].owner != top) continue;
    const double cu = units[u].cost.seconds;
    for (int rank = 0; rank < static_cast<int>(load.size()); rank++) {
      if (rank == top) continue;
      const double moved = std::max(load[top] - cu, load[rank] + cu);
      if (moved < best_pair) best_pair = moved, best_unit = u, best_rank = rank, best_swap = -1;
      for (int v = 0; v < static_cast<int>(units.size()); v++) {
        if (units[v].owner != rank || units[v].cost.seconds >= cu) continue;
        const double cv = units[v].cost.seconds;
        const double swapped = std::max(load[top] - cu + cv, load[rank] - cv + cu);
        if (swapped < best_pair) best_pair = swapped, best_unit = u, best_rank = rank, best_swap = v;
      }
    }
  }
  if (best_unit < 0) return false;
  const double cu = units[best_unit].cost.seconds;
  units[best_unit].owner = best_rank;
  load[top] -= cu;
  load[best_rank] += cu;
  if (best_swap >= 0) {
    const double cv = units[best_swap].cost.seconds;
    units[best_swap].owner = top;
    load[best_rank] -= cv;
    load[top] += cv;
  }
  return true;
}

// Per rank: its units grouped by shape (shapes in order of first appearance), and its cost with the
// replicated units added and launches counted once per shape batch.
void summarise(const std::vector<MuonTensor>& tensors, MuonOwnerPlan& plan) {
  plan.owned.assign(plan.world, {});
  plan.rank_cost.assign(plan.world, MuonCost());
  for (int rank = 0; rank < plan.world; rank++) {
    std::vector<int> mine;
    for (int u = 0; u < static_cast<int>(plan.units.size()); u++)
      if (plan.units[u].owner == rank || plan.units[u].owner == kAllRanks) mine.push_back(u);
    std::vector<int> grouped;
    std::vector<bool> taken(mine.size(), false);
    for (size_t i = 0; i < mine.size(); i++) {
      if (taken[i]) continue;
      const MuonTensor& shape = tensors[plan.units[mine[i]].tensor];
      MuonCost batch;
      for (size_t j = i; j < mine.size(); j++) {
        if (taken[j] || !same_shape(tensors[plan.units[mine[j]].tensor], shape)) continue;
        taken[j] = true;
        batch += plan.units[mine[j]].cost;
        batch.launches = plan.units[mine[j]].cost.launches;  // one batched call per shape
        if (plan.units[mine[j]].owner == rank) grouped.push_back(mine[j]);
      }
      plan.rank_cost[rank] += batch;
    }
    plan.owned[rank] = grouped;
  }
}

}  // namespace

MuonOwnerPlan plan_muon_owners(const std::vector<MuonTensor>& tensors, int world, const MuonOwnerOptions& options) {
  validate(tensors, world);
  MuonOwnerPlan plan;
  plan.world = world;
  plan.units = make_units(tensors, options);
  std::vector<double> load(world, 0.0);
  deal(tensors, plan.units, load);
  constexpr int kMaxImprovements = 10000;  // each strictly lowers the sum of squared loads; a guard only
  for (int i = 0; i < kMaxImprovements && improve_once(plan.units, load); i++) {
  }
  summarise(tensors, plan);
  return plan;
}

namespace {
// "attn.11,10 mlp_fc.3": names of the form prefix.number grouped by prefix, in order.
std::string compact_names(const std::vector<std::string>& names) {
  std::vector<std::string> prefixes;
  std::map<std::string, std::string> numbers;
  for (const std::string& name : names) {
    const size_t dot = name.rfind('.');
    const std::string prefix = dot == std::string::npos ? name : name.substr(0, dot);
    const std::string number = dot == std::string::npos ? "" : name.substr(dot + 1);
    if (!numbers.count(prefix))
      prefixes.push_back(prefix), numbers[prefix] = number;
    else
      numbers[prefix] += "," + number;
  }
  std::string result;
  for (const std::string& prefix : prefixes)
    result += (result.empty() ? "" : " ") + prefix + (numbers[prefix].empty() ? "" : "." + numbers[prefix]);
  return result;
}
}  // namespace

std::string format_muon_owner_table(const std::vector<MuonTensor>& tensors, const MuonOwnerPlan& plan) {
  std::ostringstream out;
  out << "| rank | owns | matrices | GFLOP | MB | launches | us at ceilings |\n";
  out << "|---:|---|---|---:|---:|---:|---:|\n";
  for (int rank = 0; rank < plan.world; rank++) {
    std::vector<std::string> names;
    std::map<std::string, int> shape_counts;
    std::vector<std::string> shapes;
    for (int u : plan.owned[rank]) {
      const MuonOwnerUnit& unit = plan.units[u];
      const MuonTensor& t = tensors[unit.tensor];
      names.push_back(unit.matrices == t.matrices ? t.name : t.name + "[" + std::to_string(unit.first_matrix) + "]");
      const std::string shape = std::to_string(t.rows) + "x" + std::to_string(t.cols);
      if (!shape_counts.count(shape)) shapes.push_back(shape);
      shape_counts[shape] += unit.matrices;
    }
    std::string matrices;
    for (const std::string& shape : shapes)
      matrices += (matrices.empty() ? "" : " + ") + std::to_string(shape_counts[shape]) + " x " + shape;
    const MuonCost& cost = plan.rank_cost[rank];
    char numbers[160];
    std::snprintf(numbers, sizeof numbers, " | %.1f | %.1f | %d | %.1f |", cost.flops / 1e9, cost.bytes / 1e6,
                  cost.launches, cost.seconds * 1e6);
    out << "| " << rank << " | " << compact_names(names) << " | " << matrices << numbers << "\n";
  }
  std::vector<std::string> replicated;
  for (const MuonOwnerUnit& unit : plan.units)
    if (unit.owner == kAllRanks) replicated.push_back(tensors[unit.tensor].name);
  if (!replicated.empty()) out << "\nReplicated on every rank (included above): " << compact_names(replicated) << "\n";
  char summary[160];
  std::snprintf(summary, sizeof summary, "\nMax %.1f us, mean %.1f us per rank (imbalance %.1f%%).\n",
                plan.max_seconds() * 1e6, plan.mean_seconds() * 1e6,
                plan.mean_seconds() > 0 ? 100.0 * (plan.max_seconds() / plan.mean_seconds() - 1.0) : 0.0);
  out << summary;
  return out.str();
}

}  // namespace llmc
