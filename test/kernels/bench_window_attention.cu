// Benchmark rows of the window attention (llmc/kernels/window_attention.cuh) at the speedrun's shapes:
// T = 32,768 tokens of packed documents, 6 heads of 128, the training windows. Documents come from a
// token shard (--shard: the first sequence the BOS-aligned loader deals from it) or from a documented
// synthetic distribution. FLOPs count only attended (query, key) pairs: forward 4 * 128 per pair and
// head, backward 2.5 times that (FlashAttention's convention); "executed" counts what the kernels'
// tiles compute. Prints the shapes, FLOPs, HBM bytes and the time at the H200's ceilings (790 TFLOP/s
// bf16 dense, 4.3 TB/s) everywhere; on a GPU (or with --run) it also times the kernels.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "llmc/base/command_line.h"
#include "llmc/cuda/cuda_common.h"
#include "llmc/data/document_packing.h"
#include "llmc/kernels/simple_window_attention.cuh"
#include "llmc/kernels/window_attention.cuh"

#if !defined(LLMC_FP32)
namespace {

namespace wa = llmc::window_attention;
using bf16 = __nv_bfloat16;
constexpr double kPeakFlops = 790e12, kPeakBytes = 4.3e12;
// The simple path (simple_window_attention.cuh) runs fp32 FMAs on the CUDA cores, no tensor cores: the H200's
// fp32 ceiling, 67 TFLOP/s (SXM, non-tensor).
constexpr double kPeakFp32Flops = 67e12;
constexpr int D = wa::kHeadDim;

// Synthetic documents: log-normal lengths (median 400 tokens, the reference's note on FineWeb, and
// sigma 1.2: a heavy tail), cut to 2,048 as the loader cuts them, the last one cut to fill T.
std::vector<int> synthetic_documents(int T) {
  std::mt19937 rng(2025);
  std::lognormal_distribution<double> length(std::log(400.0), 1.2);
  std::vector<int> lengths;
  int total = 0;
  while (total < T) {
    const int next = std::min({std::max(1, static_cast<int>(length(rng))), 2048, T - total});
    lengths.push_back(next);
    total += next;
  }
  return lengths;
}

std::vector<int> shard_documents(const std::string& path, int T) {
  const llmc::IndexedShard shard = llmc::read_indexed_shard(path, 50257);
  llmc::DealtStep step;
  if (!llmc::deal_step(shard, 0, T, 2048, 1, &step)) throw std::runtime_error(path + ": too small for one sequence");
  std::vector<int> lengths;
  for (const llmc::TokenRange& piece : step.sequences[0]) lengths.push_back(static_cast<int>(piece.end - piece.begin));
  lengths.back() -= 1;  // the T+1-th token is a target only
  if (lengths.back() == 0) lengths.pop_back();
  return lengths;
}

// Host mirror of the kernels' geometry (window_attention_geometry.cuh) for the FLOP and byte counts.
struct Geometry {
  std::vector<int> document_start, document_end;  // per token
  int T, window;
  Geometry(const std::vector<int>& lengths, int window_) : T(0), window(window_) {
    for (int length : lengths) {
      for (int i = 0; i < length; i++) {
        document_start.push_back(T);
        document_end.push_back(T + length);
      }
      T += length;
    }
    window = std::min(window, T);
  }
  int first_key(int q) const { return std::max(document_start[q], q - window); }
  int last_query(int k) const { return std::min(document_end[k] - 1, k + window); }
};

struct Work {
  double pairs = 0;                         // attended (query, key) pairs of one head
  double forward_tiles = 0, dq_tiles = 0, dkdv_tiles = 0;  // warp x 64-tile products computed
  double forward_loads = 0, backward_loads = 0;            // 64-row tiles read from HBM
};

Work count_work(const Geometry& g) {
  Work w;
  for (int q = 0; q < g.T; q++) w.pairs += q - g.first_key(q) + 1;
  for (int q0 = 0; q0 < g.T; q0 += wa::kForwardRows) {  // forward: K and V tiles per block, 32-row warps
    const int last = std::min(q0 + wa::kForwardRows, g.T) - 1;
    w.forward_loads += 2 * (last / 64 - g.first_key(q0) / 64 + 1) + 2;  // + Q (128 rows)
    for (int r0 = q0; r0 <= last; r0 += 32) w.forward_tiles += std::min(r0 + 31, g.T - 1) / 64 - g.first_key(r0) / 64 + 1;
  }
  for (int t0 = 0; t0 < g.T; t0 += 64) {  // dq per query tile, dK/dV per key tile, 16-row warps
    const int last = std::min(t0 + 63, g.T - 1);
    w.backward_loads += 2 * (last / 64 - g.first_key(t0) / 64 + 1) + 2;               // dq: K, V; Q, dO
    w.backward_loads += 2 * (g.last_query(last) / 64 - t0 / 64 + 1) + 2;              // dkdv: Q, dO; K, V
    for (int r0 = t0; r0 <= last; r0 += 16) {
      w.dq_tiles += std::min(r0 + 15, g.T - 1) / 64 - g.first_key(r0) / 64 + 1;
      w.dkdv_tiles += g.last_query(std::min(r0 + 15, g.T - 1)) / 64 - r0 / 64 + 1;
    }
  }
  return w;
}

struct Timing {
  float forward_ms = -1, backward_ms = -1;
};

// Mean ms per call of `forward` and of `backward` over `repeats` calls, after one warm-up call each.
Timing time_pair(const std::function<void()>& forward, const std::function<void()>& backward, int repeats) {
  Timing timing;
  float* results[2] = {&timing.forward_ms, &timing.backward_ms};
  int which = 0;
  for (const std::function<void()>* work : {&forward, &backward}) {
    (*work)();  // warm-up
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start, nullptr));
    for (int i = 0; i < repeats; i++) (*work)();
    CUDA_CHECK(cudaEventRecord(stop, nullptr));
    CUDA_CHECK(cudaEventSynchronize(stop));
    CUDA_CHECK(cudaEventElapsedTime(results[which], start, stop));
    *results[which++] /= static_cast<float>(repeats);
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
  }
  return timing;
}

// Times the fast kernels (window_attention.cuh), or with `simple` the simple path, on the documents given; with
// `norm_rope` the fast backward runs the QK-norm and RoPE backward in its dq and dk stores (the 2025-10-31 model's).
Timing time_kernels(const std::vector<int>& lengths, int window, int heads, float scale, int repeats, bool simple,
                    bool norm_rope) {
  int T = 0;
  std::vector<int> cu{0};
  for (int length : lengths) cu.push_back(T += length);
  cu.resize(std::max<size_t>(cu.size(), 128), T);
  const size_t elements = static_cast<size_t>(T) * heads * D;
  bf16 *qkv, *dqkv, *out, *dout;
  float *lse, *delta;
  int *d_cu, *plan;
  CUDA_CHECK(cudaMalloc(&qkv, 3 * elements * sizeof(bf16)));
  CUDA_CHECK(cudaMalloc(&dqkv, 3 * elements * sizeof(bf16)));
  CUDA_CHECK(cudaMalloc(&out, elements * sizeof(bf16)));
  CUDA_CHECK(cudaMalloc(&dout, elements * sizeof(bf16)));
  CUDA_CHECK(cudaMalloc(&lse, static_cast<size_t>(heads) * T * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&delta, static_cast<size_t>(heads) * T * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&d_cu, cu.size() * sizeof(int)));
  CUDA_CHECK(cudaMalloc(&plan, wa::plan_ints(T) * sizeof(int)));
  float* rstd;  // the stores' inputs: any finite values time the same (bytes 0x3f: 0.75 as fp32 and as bf16)
  bf16* tables;
  CUDA_CHECK(cudaMalloc(&rstd, static_cast<size_t>(2) * heads * T * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&tables, static_cast<size_t>(T) * D * sizeof(bf16)));  // cos and sin, T x 64 each
  CUDA_CHECK(cudaMemset(rstd, 0x3f, static_cast<size_t>(2) * heads * T * sizeof(float)));
  CUDA_CHECK(cudaMemset(tables, 0x3f, static_cast<size_t>(T) * D * sizeof(bf16)));
  const wa::NormRopeBackward stores =
      norm_rope ? wa::NormRopeBackward{rstd, tables, tables + static_cast<size_t>(T) * D / 2} : wa::NormRopeBackward{};
  std::vector<bf16> host(3 * elements);  // a cheap hash in [-1, 1): realistic bits, no RNG cost for 75M values
  for (size_t i = 0; i < host.size(); i++)
    host[i] = __float2bfloat16(static_cast<float>((static_cast<uint32_t>(i) * 2654435761u) >> 8) / 8388608.0f - 1.0f);
  CUDA_CHECK(cudaMemcpy(qkv, host.data(), host.size() * sizeof(bf16), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(dout, host.data(), elements * sizeof(bf16), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_cu, cu.data(), cu.size() * sizeof(int), cudaMemcpyHostToDevice));
  const int num_docs = static_cast<int>(cu.size()) - 1;
  const wa::Problem problem{T, heads, d_cu, num_docs, window, scale};
  const llmc::simple_attention::Problem simple_problem{T, heads, D, d_cu, num_docs, window, scale};
  const int64_t stride = 3LL * heads * D;
  const bf16 *q = qkv, *k = qkv + heads * D, *v = qkv + 2 * heads * D;
  bf16 *dq = dqkv, *dk = dqkv + heads * D, *dv = dqkv + 2 * heads * D;
  std::function<void()> forward = [&] { wa::forward(out, lse, q, k, v, stride, plan, problem, nullptr); };
  std::function<void()> backward = [&] {
    wa::backward(dq, dk, dv, stride, delta, dout, out, lse, q, k, v, stride, plan, problem, nullptr, stores);
  };
  if (simple) {
    forward = [&] { llmc::simple_attention::forward(out, lse, q, k, v, stride, simple_problem, nullptr); };
    backward = [&] {
      llmc::simple_attention::backward(dq, dk, dv, stride, delta, dout, out, lse, q, k, v, stride, simple_problem,
                                       nullptr);
    };
  } else {
    wa::plan(plan, problem, nullptr);
  }
  const Timing timing = time_pair(forward, backward, repeats);
  for (void* pointer : {(void*)qkv, (void*)dqkv, (void*)out, (void*)dout, (void*)lse, (void*)delta, (void*)d_cu, (void*)plan,
                        (void*)rstd, (void*)tables})
    CUDA_CHECK(cudaFree(pointer));
  return timing;
}

std::vector<int> parse_windows(const std::string& text) {
  std::vector<int> windows;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');) windows.push_back(std::stoi(item));
  return windows;
}

// The simple path's rows: the same attended pairs and FLOPs, on the CUDA cores' fp32 ceiling; every
// (query, head) thread reads its keys' K and V rows (forward), the backward's dq threads K and V again and
// its dk/dv threads Q and dO per pair: "key reads" is that traffic through the caches, HBM as the fast path.
void print_simple_rows(const std::vector<int>& lengths, const std::vector<int>& windows, int heads, float scale,
                       int repeats, bool run) {
  std::printf("\nsimple path (fp32 CUDA cores, ceiling %.0f TFLOP/s)\n", kPeakFp32Flops / 1e12);
  std::printf("| W | pairs/head | fwd GFLOP | bwd GFLOP | key reads MB fwd/bwd | fwd us ideal | bwd us ideal | fwd ms | "
              "bwd ms |\n|---|---|---|---|---|---|---|---|---|\n");
  for (int window : windows) {
    const Geometry geometry(lengths, window);
    const Work w = count_work(geometry);
    const double forward = 4.0 * D * w.pairs * heads, backward = 2.5 * forward;
    const double row = D * 2.0;  // one bf16 row of a head
    const double forward_reads = w.pairs * heads * 2 * row, backward_reads = 2 * forward_reads;
    const double tensor = static_cast<double>(geometry.T) * heads * D * 2, row_floats = geometry.T * heads * 4.0;
    auto at_peak = [](double flops, double bytes) { return std::max(flops / kPeakFp32Flops, bytes / kPeakBytes) * 1e6; };
    std::printf("| %d | %.0f | %.1f | %.1f | %.0f / %.0f | %.1f | %.1f |", window, w.pairs, forward / 1e9,
                backward / 1e9, forward_reads / 1e6, backward_reads / 1e6, at_peak(forward, 4 * tensor + row_floats),
                at_peak(backward, 8 * tensor + 4 * row_floats));
    if (run) {
      const Timing timing = time_kernels(lengths, window, heads, scale, repeats, /*simple=*/true, /*norm_rope=*/false);
      std::printf(" %.3f | %.3f |\n", timing.forward_ms, timing.backward_ms);
    } else {
      std::printf(" - | - |\n");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int T = 32768, heads = 6, repeats = 20;
  float scale = 0.12f;
  std::string windows_text = "384,896,1408,1664", shard;
#if defined(LLMC_EMULATION)
  bool run = false;  // the emulation would take hours at T = 32,768
#else
  int devices = 0;
  bool run = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  (void)cudaGetLastError();  // no GPU is an answer here, not an error to keep
#endif
  llmc::CommandLine app{"Window attention benchmark rows: shapes, unmasked FLOPs, bytes, ceilings, and GPU timings"};
  app.option("--tokens", T, "Tokens in the packed sequence");
  app.option("--heads", heads, "Heads of 128");
  app.option("--windows", windows_text, "Comma-separated windows W (tokens)");
  app.option("--shard", shard, "Token shard whose first BOS-aligned sequence gives the documents");
  app.option("--scale", scale, "Softmax scale");
  app.option("--repeats", repeats, "Timed calls per row");
  app.flag("--run,!--no-run", run, "Time the kernels (default: on a GPU only)");
  bool simple = false;
  app.flag("--simple", simple,
           "Also the simple path's rows (simple_window_attention.cuh: one thread per query or key, fp32 on the "
           "CUDA cores; the fp32 build's and small shapes' attention)");
  bool norm_rope = false;
  app.flag("--norm-rope", norm_rope,
           "Time the backward with the QK-norm and RoPE backward in its dq and dk stores (the 2025-10-31 model's)");
  if (const int exit_status = app.parse(argc, argv); exit_status >= 0) return exit_status;
  try {
    const std::vector<int> lengths = shard.empty() ? synthetic_documents(T) : shard_documents(shard, T);
    std::printf("window attention, T = %d, %d heads of %d, %zu documents (%s), scale %g%s\n", T, heads, D,
                lengths.size(), shard.empty() ? "synthetic: log-normal, median 400, sigma 1.2, cut at 2048" : shard.c_str(),
                scale, run ? (norm_rope ? "; backward with the QK-norm and RoPE stores" : "")
                           : "; timings not run (no GPU; --run runs them emulated)");
    std::printf("| W | pairs/head | fwd GFLOP | fwd exec GFLOP | bwd GFLOP | bwd exec GFLOP | HBM MB fwd/bwd | "
                "tile reads MB fwd/bwd | fwd us ideal/exec | bwd us ideal/exec | fwd ms | fwd TFLOP/s | bwd ms | "
                "bwd TFLOP/s |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int window : parse_windows(windows_text)) {
      const Work w = count_work(Geometry(lengths, window));
      const double tile = 16.0 * 64 * D * 2;  // FLOPs of one 16 x 64 x 128 product
      const double forward = 4.0 * D * w.pairs * heads, backward = 2.5 * forward;
      const double forward_exec = w.forward_tiles * 2 * tile * 2 * heads;  // 32-row warps, S and P V
      const double backward_exec = (w.dq_tiles * 3 + w.dkdv_tiles * 4) * tile * heads;
      // HBM: each tensor once (q, k, v in, out and lse out; backward: q, k, v, out, dout, lse in, delta
      // written and read twice, dq, dk, dv out). Tile reads: what the blocks pull through L2.
      const double tensor = static_cast<double>(T) * heads * D * 2, row_floats = static_cast<double>(T) * heads * 4;
      const double forward_bytes = 4 * tensor + row_floats, backward_bytes = 8 * tensor + 4 * row_floats;
      const double tile_bytes = 64.0 * D * 2;
      const double forward_tiles = w.forward_loads * tile_bytes * heads, backward_tiles = w.backward_loads * tile_bytes * heads;
      auto at_peak = [](double flops, double bytes) { return std::max(flops / kPeakFlops, bytes / kPeakBytes) * 1e6; };
      Timing timing;
      if (run) timing = time_kernels(lengths, window, heads, scale, repeats, /*simple=*/false, norm_rope);
      std::printf("| %d | %.0f | %.1f | %.1f | %.1f | %.1f | %.0f / %.0f | %.0f / %.0f | %.1f / %.1f | %.1f / %.1f |", window,
                  w.pairs, forward / 1e9, forward_exec / 1e9, backward / 1e9, backward_exec / 1e9, forward_bytes / 1e6,
                  backward_bytes / 1e6, forward_tiles / 1e6, backward_tiles / 1e6, at_peak(forward, forward_bytes),
                  at_peak(forward_exec, forward_bytes), at_peak(backward, backward_bytes),
                  at_peak(backward_exec, backward_bytes));
      if (run) {
        std::printf(" %.3f | %.1f | %.3f | %.1f |\n", timing.forward_ms, forward / (timing.forward_ms * 1e-3) / 1e12,
                    timing.backward_ms, backward / (timing.backward_ms * 1e-3) / 1e12);
      } else {
        std::printf(" - | - | - | - |\n");
      }
    }
    if (simple) print_simple_rows(lengths, parse_windows(windows_text), heads, scale, repeats, run);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench_window_attention: %s\n", error.what());
    return 1;
  }
  return 0;
}
#else
int main() {
  std::printf("bench_window_attention: the window attention is bf16-only; build without LLMC_FP32\n");
  return 0;
}
#endif  // !LLMC_FP32
