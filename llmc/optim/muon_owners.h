// Which rank orthogonalises and updates which Muon matrices: tensors (or single matrices) are dealt to
// ranks so that the NorMuon work (llmc/optim/muon_cost.h) is balanced, largest first onto the least
// loaded rank, then improved by moves and swaps. Tiny tensors (the gates) can be replicated instead:
// every rank updates them from all-reduced gradients. Pure C++, deterministic.
#pragma once

#include <string>
#include <vector>

#include "llmc/optim/muon_cost.h"

namespace llmc {

// One Muon parameter: `matrices` stacked matrices of rows x cols (the attention tensor [C, 4C] is
// 4 matrices of [C, C]). Listed in the order the backward makes their gradients final.
struct MuonTensor {
  std::string name;
  int rows = 0, cols = 0;
  int matrices = 1;
  int param_bytes = 4;  // 4: fp32 block matrices; 2: bf16 gates
};

// The record's Muon tensors at width C (768): per block from 11 down to 1, the MLP (W_proj, W_fc), then
// the attention gate and the attention tensor (blocks 1-6, 8-11), and last the smear gate.
std::vector<MuonTensor> speedrun_muon_tensors(int C = 768, int heads = 6);

constexpr int kAllRanks = -1;  // owner of a replicated unit

struct MuonOwnerOptions {
  bool split_tensors = false;  // deal single matrices (an attention tensor may get up to 4 owners)
  // Units whose cost is below this (seconds at the ceilings) are replicated on every rank instead of
  // owned; the default catches the gates ([6,12], [1,12]) and no block matrix.
  double replicate_below_seconds = 1e-7;
  DeviceCeilings ceilings;
};

struct MuonOwnerUnit {
  int tensor = 0;        // index into the tensor list
  int first_matrix = 0;  // matrices [first_matrix, first_matrix + matrices) of that tensor
  int matrices = 0;
  int owner = 0;  // rank, or kAllRanks
  MuonCost cost;  // of all its matrices (launches: one batch)
};

struct MuonOwnerPlan {
  int world = 1;
  std::vector<MuonOwnerUnit> units;     // in tensor (backward) order
  std::vector<std::vector<int>> owned;  // per rank: unit indices, grouped by matrix shape, backward order within
  std::vector<MuonCost> rank_cost;      // per rank: owned units + replicated units, launches per shape batch
  double max_seconds() const;
  double mean_seconds() const;
};

MuonOwnerPlan plan_muon_owners(const std::vector<MuonTensor>& tensors, int world,
                               const MuonOwnerOptions& options = MuonOwnerOptions());

// A Markdown table of the plan: per rank, what it owns and its FLOPs, bytes, launches and time.
std::string format_muon_owner_table(const std::vector<MuonTensor>& tensors, const MuonOwnerPlan& plan);

}  // namespace llmc
