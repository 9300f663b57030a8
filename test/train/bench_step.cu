// The per-step benchmark of the training machinery (docs/benchmarks.md "Training step"): one rank of
// train_gpt2's step (llmc/train/train_step.h) on the trainer's own wiring (llmc/train/training_run.h: any
// model preset with its family's optimizer, or --optimizer's) at a chosen size, and per step the
// launches (kernels, GEMMs, memsets, copies), the GEMM plans built, the calls that block the host, the
// host time spent in the step call, and per kernel the bytes and FLOPs its launcher accounts
// (llmc/base/launch_observer.h) with the time they take at the H200's ceilings (790 TFLOP/s bf16 dense, 1,979
// TFLOP/s FP8 dense for the FP8 GEMMs, 4.3 TB/s). The emulated build enqueues the step without executing
// anything (a d12 step would take hours on a CPU), so it runs at full size anywhere; on a GPU the step runs
// and the measured time of every row and of the whole step is printed beside the ceilings. With --cuda-graphs the
// steps are train_gpt2 --cuda-graphs's (llmc/train/step_graphs.h): the launches counted are those outside the
// graphs, plus the graph launches (executed: the emulation has to run what it captures).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "llmc/base/command_line.h"
#include "llmc/base/launch_observer.h"
#include "llmc/cuda/cuda_common.h"
#include "llmc/data/shards.h"
#include "llmc/dist/comm.h"
#include "llmc/dist/trace.h"
#include "llmc/model/registry.h"
#include "llmc/tokenizer/bpe_vocab.h"
#include "llmc/train/step_graphs.h"
#include "llmc/train/train_step.h"
#include "llmc/train/training_run.h"

namespace {

using namespace llmc;
using Clock = std::chrono::steady_clock;

#if defined(LLMC_EMULATION)
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif
constexpr double kHbmBytesPerSecond = 4.3e12;
constexpr double kBf16FlopsPerSecond = 790e12;
constexpr double kFp8FlopsPerSecond = 1979e12;

struct Options {
  std::string model = "d12";
  int batch = 32, seq_len = 1024, grad_accum = 1, warmup = 1, steps = 2;
  std::string overlap = "full";
  std::string gemm_algo = "heuristic";
  std::string optimizer = "auto";
  double grad_clip = 0.0;
  std::string data;      // token shard glob; empty: Zipf tokens
  std::string vocab = default_vocab_dir();  // the GPT-2 BPE files (the 2026-07-17 model's prefix table)
  bool execute = false;  // emulated build: run the kernels too (tiny sizes only)
  bool require_costs = false;  // fail when a kernel or GEMM launch gives no bytes and FLOPs
  bool cuda_graphs = false;    // the steps as train_gpt2 --cuda-graphs launches them
  bool wgmma_gemms = false;    // the speedrun models' epilogue GEMMs as train_gpt2 --wgmma-gemms on runs them
};

const char* kind_name(LaunchKind kind) {
  switch (kind) {
    case LaunchKind::kKernel: return "kernel";
    case LaunchKind::kGemm: return "gemm";
    case LaunchKind::kMemset: return "memset";
    case LaunchKind::kCopy: return "copy";
  }
  return "?";
}

// One table row: every launch of one kernel (or GEMM shape, or call) in the observed steps.
struct Row {
  double calls = 0, bytes = 0, flops = 0, measured_ms = 0;
  bool cost_known = true;
  bool fp8 = false;  // an FP8 GEMM (fp8_matmul.cuh and wgmma_fp8_gemm.cuh name them "fp8 gemm ...")
  double ceiling_us() const {
    return 1e6 * std::max(bytes / kHbmBytesPerSecond, flops / (fp8 ? kFp8FlopsPerSecond : kBf16FlopsPerSecond));
  }
};

// Tallies what the observed steps enqueue. Without execution it skips every kernel, GEMM and memset
// (copies run: they are cheap, and a pageable one is exactly the host wait to be seen). With timing it
// brackets each launch with two events on its stream (GPU: measured time per row).
class StepObserver : public LaunchObserver {
 public:
  StepObserver(bool execute, bool timed) : execute_(execute), timed_(timed) {}
  ~StepObserver() override {
    for (const Pending& p : pending_) {
      CUDA_REPORT(cudaEventDestroy(p.start));
      CUDA_REPORT(cudaEventDestroy(p.stop));
    }
  }
  bool before_launch(const LaunchRecord& record) override {
    Row& row = rows_[{record.kind, record.name}];
    row.calls += 1;
    row.fp8 = record.kind == LaunchKind::kGemm && record.name.rfind("fp8 gemm", 0) == 0;
    if (record.cost.known()) {
      row.bytes += record.cost.bytes;
      row.flops += std::max(record.cost.flops, 0.0);
    } else {
      row.cost_known = false;
    }
    if (!execute_ && record.kind != LaunchKind::kCopy) return false;
    if (timed_) {
      Pending p{{record.kind, record.name}, nullptr, nullptr};
      CUDA_CHECK(cudaEventCreate(&p.start));
      CUDA_CHECK(cudaEventCreate(&p.stop));
      CUDA_CHECK(cudaEventRecord(p.start, record.stream));
      pending_.push_back(p);
    }
    return true;
  }
  void after_launch(const LaunchRecord& record) override {
    if (timed_) CUDA_CHECK(cudaEventRecord(pending_.back().stop, record.stream));
  }
  void on_gemm_setup() override { gemm_setups_++; }
  void on_host_wait(const char* call) override { host_waits_[call]++; }

  // After the device finished the observed steps: the events' times into the rows.
  void collect_times() {
    for (const Pending& p : pending_) {
      float ms = 0.0f;
      CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.stop));
      rows_[p.key].measured_ms += ms;
    }
  }

  using Key = std::pair<LaunchKind, std::string>;
  const std::map<Key, Row>& rows() const { return rows_; }
  long gemm_setups() const { return gemm_setups_; }
  const std::map<std::string, long>& host_waits() const { return host_waits_; }

 private:
  struct Pending {
    Key key;
    cudaEvent_t start, stop;
  };
  bool execute_, timed_;
  std::map<Key, Row> rows_;
  std::vector<Pending> pending_;
  long gemm_setups_ = 0;
  std::map<std::string, long> host_waits_;
};

// Zipf(1.1) token ids over the vocabulary in a temporary shard: text-like frequencies when no shard is
// given (the most frequent id takes ~9% of the positions).
std::string write_zipf_shard(const std::string& directory, int vocab, int64_t tokens) {
  std::vector<double> weights(static_cast<size_t>(vocab));
  for (int k = 0; k < vocab; k++) weights[static_cast<size_t>(k)] = 1.0 / std::pow(k + 1.0, 1.1);
  std::discrete_distribution<int> distribution(weights.begin(), weights.end());
  std::mt19937 rng(1);
  std::vector<uint16_t> ids(static_cast<size_t>(tokens));
  for (uint16_t& id : ids) id = static_cast<uint16_t>(distribution(rng));
  const std::string path = directory + "/zipf_000000.bin";
  write_shard(path, ids);
  return path;
}

// The trainer's options for this benchmark: the model with its family's optimizer (weight decay 0.1), a fresh
// initialisation from seed 1337, fixed windows of the token shards, no validation; lr comes with each step.
TrainOptions train_options(const Options& o, const CommContext& comm, const std::string& pattern) {
  TrainOptions t;
  t.model = o.model;
  t.batch_size = o.batch;
  t.seq_len = o.seq_len;
  t.total_batch_tokens = static_cast<int64_t>(o.batch) * o.seq_len * o.grad_accum * comm.world_size();
  t.steps = o.warmup + 2 * o.steps + 4;  // every step run here, and the speedrun schedules' minimum
  t.weight_decay = 0.1;
  t.grad_clip = o.grad_clip;
  t.overlap = parse_overlap_mode(o.overlap);
  t.gemm_algo = parse_gemm_algo_selection(o.gemm_algo);
  if (const auto optimizer = value_named(o.optimizer, kOptimizerChoiceNames)) t.optimizer = *optimizer;
  else throw std::invalid_argument("--optimizer '" + o.optimizer + "': expected " + names_listed(kOptimizerChoiceNames));
  t.train_data = pattern;
  t.vocab_dir = o.vocab;
  t.train_loader = TrainLoaderChoice::kWindow;  // train_gpt2's GPT-2 default, for every model here
  t.seed = 1337;
  t.cuda_graphs = o.cuda_graphs;
  t.wgmma_gemms = o.wgmma_gemms;
  return t;
}

// Everything one rank trains with, as train_gpt2 builds it.
struct Setup {
  Setup(const TrainOptions& options, CommContext& comm)
      : run(options, comm), batch(static_cast<size_t>(options.batch_size) * options.seq_len), parts(run.step_parts()) {
    if (options.cuda_graphs) graphs = std::make_unique<StepGraphs>(parts);
  }
  TrainingRun run;
  Batch batch;
  StepParts parts;
  std::unique_ptr<StepGraphs> graphs;  // --cuda-graphs
};

// Counts the host waits of reading the steps' results (outside the steps).
class ReadObserver : public LaunchObserver {
 public:
  bool before_launch(const LaunchRecord&) override { return true; }
  void on_host_wait(const char*) override { waits_++; }
  long waits() const { return waits_; }

 private:
  long waits_ = 0;
};

// Runs steps [first, first + count) as train_gpt2 does: step s is read after step s + 1 has been enqueued
// (the last one at the end). `observer` sees the enqueue calls, `read_observer` the reads (either may be
// null); returns the host milliseconds spent inside the enqueue calls.
double run_steps(Setup& setup, int first, int count, LaunchObserver* observer, LaunchObserver* read_observer) {
  double host_ms = 0.0;
  for (int step = first; step < first + count; step++) {
    {
      ScopedLaunchObserver scope(observer);
      const Clock::time_point start = Clock::now();
      if (setup.graphs)
        setup.graphs->enqueue_step(setup.parts, step, 1e-4f, setup.batch);
      else
        enqueue_train_step(setup.parts, step, 1e-4f, setup.batch);
      host_ms += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    }
    ScopedLaunchObserver scope(read_observer);
    if (step > first) read_train_step(setup.parts, step - 1);
  }
  ScopedLaunchObserver scope(read_observer);
  read_train_step(setup.parts, first + count - 1);
  return host_ms;
}

void print_table(const StepObserver& observer, int steps, bool measured) {
  std::printf("%-6s %-58s %7s %9s %10s %11s %11s", "kind", "name", "calls", "MB/call", "GFLOP/call",
              "ceil us/st", "share");
  std::printf(measured ? " %11s\n" : "\n", "meas us/st");
  double total_us = 0.0, total_measured_ms = 0.0;
  for (const auto& [key, row] : observer.rows()) total_us += row.ceiling_us() / steps;
  for (const auto& [key, row] : observer.rows()) {
    const double us = row.ceiling_us() / steps;
    if (row.cost_known)
      std::printf("%-6s %-58s %7.0f %9.2f %10.3f %11.1f %10.1f%%", kind_name(key.first), key.second.c_str(),
                  row.calls / steps, row.bytes / row.calls / 1e6, row.flops / row.calls / 1e9, us,
                  total_us > 0 ? 100.0 * us / total_us : 0.0);
    else
      std::printf("%-6s %-58s %7.0f %9s %10s %11s %11s", kind_name(key.first), key.second.c_str(),
                  row.calls / steps, "n/a", "n/a", "n/a", "");
    if (measured) std::printf(" %11.1f", 1e3 * row.measured_ms / steps);
    std::printf("\n");
    total_measured_ms += row.measured_ms / steps;
  }
  std::printf("%-6s %-58s %7s %9s %10s %11.1f %11s", "total", "(sum of rows, no overlap)", "", "", "", total_us, "");
  if (measured) std::printf(" %11.1f", 1e3 * total_measured_ms);
  std::printf("\n");
}

void print_summary(const StepObserver& observer, int steps, double host_ms_per_step, const ReadObserver& reads) {
  double launches[4] = {0, 0, 0, 0};
  for (const auto& [key, row] : observer.rows()) launches[static_cast<int>(key.first)] += row.calls / steps;
  double waits = 0;
  std::string wait_calls;
  for (const auto& [call, count] : observer.host_waits()) {
    waits += static_cast<double>(count) / steps;
    wait_calls += (wait_calls.empty() ? " (" : ", ") + call + " x" + std::to_string(count / steps);
  }
  if (!wait_calls.empty()) wait_calls += ")";
  std::printf("per step: launches %.0f (kernels %.0f, GEMMs %.0f, memsets %.0f, copies %.0f); GEMM plans built %.1f; "
              "host waits inside the step %.1f%s; host time in the step call %.2f ms; waits reading the results "
              "(after the next step is enqueued) %.1f\n",
              launches[0] + launches[1] + launches[2] + launches[3], launches[0], launches[1], launches[2],
              launches[3], static_cast<double>(observer.gemm_setups()) / steps, waits, wait_calls.c_str(),
              host_ms_per_step, static_cast<double>(reads.waits()) / steps);
}

// --require-costs: 1 (and the names on stderr) when a kernel or GEMM launch was not accounted, else 0.
int report_uncosted(const StepObserver& observer) {
  std::string names;
  for (const auto& [key, row] : observer.rows())
    if (!row.cost_known && (key.first == LaunchKind::kKernel || key.first == LaunchKind::kGemm))
      names += (names.empty() ? "" : ", ") + key.second;
  if (names.empty()) return 0;
  std::fprintf(stderr, "bench_step: --require-costs: launched without bytes and FLOPs: %s\n", names.c_str());
  return 1;
}

int run(const Options& o) {
  const ModelStart model = locate_model(o.model, "", /*world_size=*/1);  // a preset: its family, no parameters
  const bool execute = !kEmulated || o.execute;
#if defined(LLMC_EMULATION)
  if (!execute) emu::EmulatedDevice::instance().set_fill_new_memory(false);  // reserve, never touch
#endif
  std::string pattern = o.data, temporary;
  if (pattern.empty()) {
    temporary = (std::filesystem::temp_directory_path() / ("bench_step_" + std::to_string(::getpid()))).string();
    std::filesystem::create_directories(temporary);
    const int64_t needed = static_cast<int64_t>(o.batch) * o.seq_len * o.grad_accum * (o.warmup + o.steps + 2) + 1;
    pattern = write_zipf_shard(temporary, model.family->vocab_size(), needed);
  }
  CommContext comm;
  int status = 0;
  {
    const TrainOptions options = train_options(o, comm, pattern);
    Setup setup(options, comm);
    std::printf("bench_step (%s, %s): model %s (%s), B=%d T=%d, grad_accum %d, optimizer %s, overlap %s, "
                "grad_clip %g, gemm_algo %s, tokens %s\n",
                kPrecisionName, kEmulated ? (execute ? "emulated, executed" : "emulated, nothing executed") : "GPU",
                o.model.c_str(), model.family->describe().c_str(), o.batch, o.seq_len, o.grad_accum,
                state_optimizer_name(setup.run.optimizer->state_kind()), o.overlap.c_str(), o.grad_clip,
                o.gemm_algo.c_str(), o.data.empty() ? "Zipf(1.1) synthetic" : o.data.c_str());
    StepObserver first_step(execute, false);
    ReadObserver first_reads;
    run_steps(setup, 1, o.warmup, &first_step, &first_reads);
    std::printf("first %d step(s): GEMM plans built %ld\n", o.warmup, first_step.gemm_setups());
    const long long graph_launches_before = setup.graphs ? setup.graphs->launches() : 0;
    double host_ms = 0.0, measured_ms = 0.0;
    if (execute) {  // the step time without any observer, then one observed step for the per-row times
      CUDA_CHECK(cudaDeviceSynchronize());
      const Clock::time_point start = Clock::now();
      host_ms = run_steps(setup, 1 + o.warmup, o.steps, nullptr, nullptr) / o.steps;
      CUDA_CHECK(cudaDeviceSynchronize());
      measured_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count() / o.steps;
    }
    StepObserver observer(execute, execute);
    ReadObserver reads;
    const int observed = execute ? 1 : o.steps;
    const double observed_host_ms =
        run_steps(setup, 1 + o.warmup + (execute ? o.steps : 0), observed, &observer, &reads);
    if (!execute) host_ms = observed_host_ms / observed;
    CUDA_CHECK(cudaDeviceSynchronize());
    if (execute) observer.collect_times();
    print_summary(observer, observed, host_ms, reads);
    if (setup.graphs)
      std::printf("cuda graphs: %zu captured; graph launches per observed step %.1f (the counts above: outside them)\n",
                  setup.graphs->captured(),
                  static_cast<double>(setup.graphs->launches() - graph_launches_before) /
                      (execute ? o.steps + observed : observed));
    if (execute) std::printf("measured step time %.2f ms (%d steps, no observer)\n", measured_ms, o.steps);
    print_table(observer, observed, execute);
    if (o.require_costs) status = report_uncosted(observer);
  }
  if (!temporary.empty()) std::filesystem::remove_all(temporary);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  llmc::CommandLine app{
      "Per-step launches, host waits, host time and per-kernel bytes, FLOPs and H200 ceiling times of "
      "train_gpt2's step (one rank); measured times on a GPU."};
  Options o;
  app.option("--model", o.model,
             "model preset (dN, tiny, small; speedrun, speedrun-tiny, modded89, modded89-tiny with -b 1)");
  app.positive("-b,--batch", o.batch, "micro-batch size B");
  app.positive("-t,--seq-len", o.seq_len, "sequence length T");
  app.positive("--grad-accum", o.grad_accum, "micro-steps per step");
  app.positive("--warmup", o.warmup, "steps before the observed ones");
  app.positive("--steps", o.steps, "observed (emulated) or timed (GPU) steps");
  app.option("--overlap", o.overlap, "optimizer overlap mode: none, rs, full");
  app.option("--optimizer", o.optimizer, "zero-adamw, speedrun or auto (the family's own)");
  app.option("--grad-clip", o.grad_clip, "gradient clipping threshold (0 = off)");
  app.option("--gemm-algo", o.gemm_algo, "GEMM algorithm selection: heuristic or fastest (GPU: timed)");
  app.option("--data", o.data, "token shard glob (default: a synthetic Zipf(1.1) shard)");
  app.option("--vocab", o.vocab, "GPT-2 BPE files (a 2026-07-17 model with GPT-2's vocabulary reads them)");
  app.flag("--execute", o.execute, "emulated build: execute the kernels too (tiny sizes only)");
  app.flag("--require-costs", o.require_costs, "exit 1 if a kernel or GEMM launch has no bytes and FLOPs");
  app.flag("--cuda-graphs", o.cuda_graphs,
           "the steps as train_gpt2 --cuda-graphs launches them (emulated build: with --execute; --warmup 4 or more "
           "for the observed steps to replay)");
  app.flag("--wgmma-gemms", o.wgmma_gemms,
           "the speedrun models' epilogue GEMMs as train_gpt2 --wgmma-gemms on runs them");
  if (const int exit_status = app.parse(argc, argv); exit_status >= 0) return exit_status;
  if (o.cuda_graphs && kEmulated && !o.execute) {
    std::fprintf(stderr, "bench_step: --cuda-graphs needs --execute in the emulated build (a graph replays what it "
                         "captured; the dry run captures nothing)\n");
    return 1;
  }
  try {
    return run(o);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_step: %s\n", error.what());
    return 1;
  }
}
