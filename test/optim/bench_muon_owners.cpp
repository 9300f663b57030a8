// The cost table of one full Polar Express + NorMuon pass for the record's Muon tensors: per matrix shape,
// and per rank under the owner plan for each requested world size (FLOPs, DRAM bytes, launches and the
// time at the device's ceilings; no measured GPU time). Usage: bench_muon_owners [--world 1,2,4,8] [--split]
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "llmc/optim/muon_owners.h"

namespace {

void print_shape_table(const llmc::DeviceCeilings& ceilings) {
  struct Row {
    const char* what;
    int rows, cols, param_bytes, count;
  };
  const Row rows[] = {{"attention matrix", 768, 768, 4, 40},
                      {"MLP matrix", 768, 3072, 4, 22},
                      {"attention gate", 6, 12, 2, 10},
                      {"smear gate", 1, 12, 2, 1}};
  std::printf(
      "| matrix | shape | count | Polar Express GFLOP | PE MB | NorMuon elementwise MB | "
      "us at ceilings (each) |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|\n");
  llmc::MuonCost total;
  for (const Row& r : rows) {
    const llmc::MuonCost pe = llmc::polar_express_cost(r.rows, r.cols, 5, 2, ceilings);
    const llmc::MuonCost elementwise = llmc::normuon_elementwise_cost(r.rows, r.cols, r.param_bytes, 2, ceilings);
    std::printf("| %s | %dx%d | %d | %.3f | %.2f | %.2f | %.2f |\n", r.what, r.rows, r.cols, r.count, pe.flops / 1e9,
                pe.bytes / 1e6, elementwise.bytes / 1e6, (pe.seconds + elementwise.seconds) * 1e6);
    llmc::MuonCost all = pe;
    all += elementwise;
    total += static_cast<double>(r.count) * all;
  }
  std::printf("\nAll of them on one GPU: %.1f GFLOP, %.1f MB, %.1f us at the ceilings.\n\n", total.flops / 1e9,
              total.bytes / 1e6, total.seconds * 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Cost of one Polar Express + NorMuon pass per rank under the Muon owner plan");
  std::vector<int> worlds = {1, 2, 4, 8};
  bool split = false;
  llmc::DeviceCeilings ceilings;
  app.add_option("--world", worlds, "world sizes to plan for")->delimiter(',')->check(CLI::Range(1, 64));
  app.add_flag("--split", split, "deal single matrices instead of whole tensors");
  app.add_option("--tflops", ceilings.flops_per_second, "dense bf16 ceiling in FLOP/s (H200: 790e12)");
  app.add_option("--bandwidth", ceilings.bytes_per_second, "memory bandwidth in B/s (H200: 4.3e12)");
  CLI11_PARSE(app, argc, argv);

  std::printf(
      "Ceilings: %.0f TFLOP/s, %.1f TB/s. Minimum DRAM traffic; times are max(FLOPs/peak, bytes/bw) per "
      "kernel, summed.\n\n",
      ceilings.flops_per_second / 1e12, ceilings.bytes_per_second / 1e12);
  print_shape_table(ceilings);
  const std::vector<llmc::MuonTensor> tensors = llmc::speedrun_muon_tensors();
  llmc::MuonOwnerOptions options;
  options.split_tensors = split;
  options.ceilings = ceilings;
  for (int world : worlds) {
    std::printf("### %d rank%s%s\n\n", world, world == 1 ? "" : "s", split ? " (single matrices dealt)" : "");
    std::cout << llmc::format_muon_owner_table(tensors, llmc::plan_muon_owners(tensors, world, options)) << "\n";
  }
  return 0;
}
