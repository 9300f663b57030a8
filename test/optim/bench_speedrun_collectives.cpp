// The collectives of the speedrun optimizer per step and rank, from its plan at the full model (no device): the
// traced collectives and their NCCL calls, the buffers' bytes, the bytes a ring puts on the wire per rank and the
// time that takes at a bus bandwidth, for a NorMuon-only step, an Adam step and the untie's, and over a run.
// The bigram table's sparse exchange moves what the tokens touch: its bytes are an estimate (--bigram-rows). Last,
// the busiest rank's share of the NorMuon and Polar Express work under the owner plan.
// Usage: bench_speedrun_collectives [--model modded89] [--world 2,4,8] [--bigram-rows N | --bigram-dense] [--json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "llmc/model/modded44/speedrun_layout.h"
#include "llmc/model/modded89/modded89_layout.h"
#include "llmc/optim/speedrun_collectives.h"
#include "llmc/schedule/modded89_schedule.h"
#include "llmc/schedule/speedrun_schedule.h"

namespace {

using llmc::CollectiveKind;
using llmc::PlannedCollective;

// A model's layout at a world size and what its steps need besides the plan.
struct ModelPlan {
  llmc::ParamLayout layout;
  llmc::SpeedrunRecipe recipe;
  size_t untie_elements = 0;  // 0: never untied (#44)
  size_t fp32_offset = 0, fp32_count = 0;  // the range the model's take_fp32_params hands the optimizer
  int run_steps = 0;          // the recipe's steps
  int adam_steps = 0;         // of them
  int tied_adam_steps = 0;    // of those, the ones through the untie (the 2026-07-17 recipe)
  int head_bucket = -1;       // the tied head's (its reduce-scatter waits for the embeddings' backward)
  int sparse_bucket = -1;     // the bigram table's (the 2026-07-17 model), reduced by the sparse row exchange
  size_t sparse_row_bytes = 0;    // one of its rows
  size_t sparse_rows = 0;         // of them
  double record_ms_per_step = 0;  // the record's measured step (its time / its steps)
};

ModelPlan model_plan(const std::string& name, int world) {
  ModelPlan plan;
  const bool modded89 = name.rfind("modded89", 0) == 0;
  if (modded89) {
    const llmc::Modded89Layout layout = llmc::make_modded89_layout(llmc::modded89_config_from_name(name), world);
    plan.layout = layout;
    plan.recipe = llmc::SpeedrunRecipe::k2026_07_17;
    plan.untie_elements = layout.find("head").numel;
    const llmc::TensorView& first = layout.find(llmc::modded89_tensor_name(llmc::Modded89Tensor::kScalars));
    const llmc::TensorView& last = layout.find(llmc::modded89_tensor_name(llmc::Modded89Tensor::kGateScale));
    plan.fp32_offset = first.offset;
    plan.fp32_count = last.offset + last.numel - first.offset;
    plan.run_steps = llmc::Modded89Schedule::record().total_steps();
    plan.head_bucket = layout.head_bucket();
    plan.sparse_bucket = llmc::Modded89Layout::bigram_bucket();
    plan.sparse_rows = layout.find("bigram_embed").shape[0];
    plan.sparse_row_bytes = layout.find("bigram_embed").shape[1];  // elements, times the element bytes below
    plan.record_ms_per_step = 73.8e3 / plan.run_steps;
    for (int step = 1; step <= llmc::Modded89Schedule::record().untie_step(); step += 2) plan.tied_adam_steps++;
  } else {
    const llmc::SpeedrunLayout layout = llmc::make_speedrun_layout(llmc::speedrun_config_from_name(name), world);
    plan.layout = layout;
    const llmc::TensorView& scalars = layout.tensor(llmc::SpeedrunTensor::kScalars);
    plan.fp32_offset = scalars.offset;
    plan.fp32_count = scalars.numel;
    plan.recipe = llmc::SpeedrunRecipe::k2025_10_31;
    plan.run_steps = llmc::SpeedrunSchedule::record().total_steps();
    plan.record_ms_per_step = 137.5e3 / plan.run_steps;
  }
  for (int step = 0; step < plan.run_steps; step++) plan.adam_steps += step % 2 == 1;
  return plan;
}

// What the exchange's estimate assumes: `touched` rows per rank and Adam step (at most the table's), spread evenly
// over the owners, so that (world - 1) / world of them go to other ranks. With `dense` the bucket reduce-scatters.
struct SparseEstimate {
  bool dense = false;
  size_t touched = 0;
};

llmc::CollectiveStep step_inputs(const ModelPlan& plan, int world, bool adam, bool untie, size_t element_bytes,
                                 const SparseEstimate& sparse) {
  llmc::CollectiveStep step;
  if (plan.sparse_bucket >= 0 && !sparse.dense) {
    const double rows = static_cast<double>(std::min(sparse.touched, plan.sparse_rows)) * (world - 1) / world;
    step.sparse_bucket = plan.sparse_bucket;
    step.sparse_bytes = static_cast<size_t>(rows * plan.sparse_row_bytes * element_bytes);
  }
  step.element_bytes = element_bytes;
  step.world_size = world;
  step.adam_step = adam;
  step.untie_elements = untie ? plan.untie_elements : 0;
  step.fp32_offset = plan.fp32_offset;
  step.fp32_count = plan.fp32_count;
  return step;
}

// Bytes a rank sends for one call on a ring of `world` ranks.
double wire_bytes(const llmc::PlannedCall& call, int world) {
  const double share = static_cast<double>(world - 1) / world;
  switch (call.kind) {
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllGather: return call.bytes * share;
    case CollectiveKind::kAllReduce: return call.bytes * 2.0 * share;
    case CollectiveKind::kReduce:
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kSendRecv: return static_cast<double>(call.bytes);
  }
  return 0.0;
}

struct Row {
  int collectives = 0, calls = 0;
  double buffer_bytes = 0, wire = 0;
};

struct StepTotals {
  std::map<std::string, Row> by_name;
  Row total;
  double seconds = 0;
};

// Which of a step's collectives a total counts.
using Selection = std::function<bool(const PlannedCollective&)>;

StepTotals totals(const std::vector<PlannedCollective>& collectives, int world, double busbw, double latency,
                  const Selection& counted = nullptr) {
  StepTotals out;
  for (const PlannedCollective& c : collectives) {
    if (counted && !counted(c)) continue;
    Row& row = out.by_name[c.name];
    row.collectives++;
    out.total.collectives++;
    for (const llmc::PlannedCall& call : c.calls) {
      const double wire = wire_bytes(call, world);
      row.calls++;
      row.buffer_bytes += call.bytes;
      row.wire += wire;
      out.total.calls++;
      out.total.buffer_bytes += call.bytes;
      out.total.wire += wire;
      out.seconds += latency + wire / busbw;
    }
  }
  return out;
}

// Muon matrices of buckets that also hold Adam tensors: the bucket's reduce-scatter and all-gather carry them on
// Adam steps besides their own reduce and broadcast.
double mixed_bucket_muon_bytes(const llmc::SpeedrunRankPlan& rank_plan, size_t element_bytes) {
  double bytes = 0;
  for (const llmc::SpeedrunBucketPlan& bucket : rank_plan.buckets) {
    if (!bucket.has_adam()) continue;
    for (const llmc::MuonSpan& span : bucket.muon_spans)
      bytes += static_cast<double>(span.length) * element_bytes;
  }
  return bytes;
}

// What full overlap cannot hide, at least: the collectives of the buckets the backward makes final last, up to and
// including the first with NorMuon matrices (the embeddings, whose gradient is final when the backward ends; then
// the first layer's banks, which the next forward needs right after the embeddings), and those of no bucket (the
// gradient norm, the untie's gathers). Their updates are not counted.
Selection exposed_tail(const llmc::SpeedrunRankPlan& plan) {
  int last = 0;
  while (last + 1 < static_cast<int>(plan.buckets.size()) && plan.buckets[static_cast<size_t>(last)].muon_spans.empty())
    last++;
  return [last](const PlannedCollective& c) { return c.bucket <= last; };
}

void print_step(const char* what, const StepTotals& t) {
  std::printf("| %-15s | %-14s | %5s | %5s | %10s | %10s |\n", what, "", "", "", "", "");
  for (const auto& [name, row] : t.by_name)
    std::printf("| %-15s | %-14s | %5d | %5d | %10.2f | %10.2f |\n", "", name.c_str(), row.collectives, row.calls,
                row.buffer_bytes / 1e6, row.wire / 1e6);
  std::printf("| %-15s | %-14s | %5d | %5d | %10.2f | %10.2f | %.3f ms\n", "", "total", t.total.collectives,
              t.total.calls, t.total.buffer_bytes / 1e6, t.total.wire / 1e6, t.seconds * 1e3);
}

nlohmann::json to_json(const std::vector<PlannedCollective>& collectives) {
  nlohmann::json out = nlohmann::json::array();
  for (const PlannedCollective& c : collectives)
    out.push_back({{"name", c.name}, {"bucket", c.bucket}, {"bytes", c.bytes()}, {"traced", c.traced},
                   {"calls", c.calls.size()}});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Collectives per step of the speedrun optimizer, from its plan: calls, bytes, time at a bus bandwidth"};
  std::string model = "modded89";
  std::vector<int> worlds = {2, 4, 8};
  double busbw = 370e9, latency = 60e-6;
  bool json = false;
  size_t element_bytes = llmc::CollectiveStep{}.element_bytes;
  app.add_option("--model", model, "speedrun, modded89 or their -tiny shapes")->capture_default_str();
  app.add_option("--world", worlds, "rank counts")->delimiter(',')->check(CLI::Range(2, 1 << 16));
  app.add_option("--busbw", busbw, "bus bandwidth, bytes/s")->capture_default_str();
  app.add_option("--latency", latency, "seconds per NCCL call")->capture_default_str();
  app.add_option("--element-bytes", element_bytes, "bytes of a parameter: 2 (bf16 build), 4 (fp32 build)")
      ->capture_default_str()->check(CLI::IsMember(std::vector<size_t>{2, 4}));
  app.add_flag("--json", json, "each step kind's collectives as JSON (for the trace test), no table");
  // 28,367: bench_bigram_exchange's count on the KJV text at the record's stage 3 on 8 ranks (docs/distributed.md).
  SparseEstimate sparse{false, 28367};
  app.add_option("--bigram-rows", sparse.touched,
                 "bigram rows each rank touches per Adam step (the sparse exchange's estimate)")
      ->capture_default_str();
  app.add_flag("--bigram-dense", sparse.dense, "the bigram table reduce-scattered dense instead");
  CLI11_PARSE(app, argc, argv);
  try {
    nlohmann::json out;
    for (int world : worlds) {
      const ModelPlan plan = model_plan(model, world);
      const llmc::SpeedrunRankPlan rank_plan = llmc::plan_speedrun_rank(
          plan.layout, llmc::speedrun_tensor_roles(plan.recipe, plan.layout), 0, llmc::MuonOwnerOptions{});
      const auto collectives = [&](bool adam, bool untie) {
        return llmc::speedrun_step_collectives(plan.layout, rank_plan,
                                               step_inputs(plan, world, adam, untie, element_bytes, sparse));
      };
      const auto muon = collectives(false, false), adam = collectives(true, false);
      if (json) {
        out[std::to_string(world)] = {{"muon", to_json(muon)}, {"adam", to_json(adam)}};
        if (plan.untie_elements > 0) out[std::to_string(world)]["untie"] = to_json(collectives(true, true));
        continue;
      }
      std::printf("\n%s on %d ranks (rank 0; ring bytes per rank; %.0f GB/s bus, %.0f us per call)\n\n", model.c_str(),
                  world, busbw / 1e9, latency * 1e6);
      std::printf("| %-15s | %-14s | %5s | %5s | %10s | %10s |\n", "step", "collective", "count", "calls",
                  "buffer MB", "wire MB");
      std::printf("|---|---|---:|---:|---:|---:|\n");
      const StepTotals muon_totals = totals(muon, world, busbw, latency);
      const StepTotals adam_totals = totals(adam, world, busbw, latency);
      print_step("NorMuon only", muon_totals);
      print_step("Adam (odd)", adam_totals);
      if (plan.untie_elements > 0) print_step("the untie", totals(collectives(true, true), world, busbw, latency));
      const int muon_steps = plan.run_steps - plan.adam_steps;
      const double run_wire = muon_steps * muon_totals.total.wire + plan.adam_steps * adam_totals.total.wire;
      const double run_seconds = muon_steps * muon_totals.seconds + plan.adam_steps * adam_totals.seconds;
      std::printf("\nrun of %d steps (%d with Adam): %.1f GB on the wire per rank, %.2f s at the ceilings "
                  "(%.3f ms per step)\n",
                  plan.run_steps, plan.adam_steps, run_wire / 1e9, run_seconds, run_seconds * 1e3 / plan.run_steps);
      std::printf("of an Adam step's buffers, %.2f MB are NorMuon matrices of buckets that also hold Adam tensors "
                  "(reduce-scattered and all-gathered besides their own reduce and broadcast)\n",
                  mixed_bucket_muon_bytes(rank_plan, element_bytes) / 1e6);
      const Selection tail = exposed_tail(rank_plan);
      const double muon_exposed = totals(muon, world, busbw, latency, tail).seconds;
      const double adam_exposed = totals(adam, world, busbw, latency, tail).seconds;
      const int head = plan.head_bucket;
      const double tied_head = totals(adam, world, busbw, latency, [head](const PlannedCollective& c) {
                                 return c.bucket == head && c.name == "reduce_scatter";
                               }).seconds;
      const double mean_exposed = (muon_steps * muon_exposed + plan.adam_steps * adam_exposed +
                                   plan.tied_adam_steps * tied_head) / plan.run_steps;
      char tied[160] = "";
      if (plan.tied_adam_steps > 0)
        std::snprintf(tied, sizeof tied, " (+%.3f ms for the tied head's reduce-scatter on the %d through the untie)",
                      tied_head * 1e3, plan.tied_adam_steps);
      std::printf("exposed under full overlap, at least (the last-final buckets' collectives, their updates not "
                  "counted): %.3f ms per NorMuon step, %.3f ms per Adam step%s; %.3f ms per step over the run, beside "
                  "the record's %.1f ms per step\n",
                  muon_exposed * 1e3, adam_exposed * 1e3, tied, mean_exposed * 1e3, plan.record_ms_per_step);
      // What one rank's NorMuon and Polar Express cost of the whole pass (which one rank of one does): the
      // projection scales bench_step's rows of them by it.
      double whole = 0.0;
      for (const llmc::MuonOwnerUnit& unit : rank_plan.owners.units) whole += unit.cost.seconds;
      std::printf("NorMuon and Polar Express per rank (the owner plan's cost model): the busiest rank %.3f ms of the "
                  "whole pass's %.3f ms at the ceilings (share %.4f)\n",
                  rank_plan.owners.max_seconds() * 1e3, whole * 1e3, rank_plan.owners.max_seconds() / whole);
    }
    if (json) std::printf("%s\n", out.dump().c_str());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_speedrun_collectives: %s\n", error.what());
    return 1;
  }
  return 0;
}
