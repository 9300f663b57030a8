// The benchmarks' window on the work a step enqueues (scripts-free accounting, test/train/bench_step.cu):
// every kernel launch (LLMC_LAUNCH, llmc/cuda/cuda_common.h) and every GEMM (llmc/kernels/matmul.cuh) tells
// the LaunchObserver active on the calling thread, if any, its name, stream and cost, and the emulation
// tells it about every call that blocks the host. No program or test installs one; a benchmark does,
// for the scope of a ScopedLaunchObserver (the one piece of per-thread state, like CUDA's own last error).
#pragma once

#include <cuda_runtime.h>

#include <string>

namespace llmc {

// What one launch moves and computes, as its launcher accounts it: the minimum HBM traffic (each tensor
// read or written once, L2 reuse assumed perfect) and the floating-point operations (a multiply-add
// counts two, a transcendental one). Negative: not accounted (the launcher gives no figures).
struct KernelCost {
  double bytes = -1.0;
  double flops = -1.0;
  bool known() const { return bytes >= 0.0; }
};

// The (query, key) pairs of T causal queries that each see at most `keys` keys (itself and those before it),
// in one document: what an attention launcher accounts, as it does not see the documents that cut them.
inline double causal_window_pairs(int T, int keys) {
  const double t = T, k = keys < T ? keys : T;
  return k * (k + 1) / 2 + (t - k) * k;
}

enum class LaunchKind { kKernel, kGemm, kMemset, kCopy };

struct LaunchRecord {
  LaunchKind kind = LaunchKind::kKernel;
  std::string name;  // the kernel as named at the launch site, "gemm MxNxK ..." (matmul.cuh), or the call
  cudaStream_t stream = nullptr;
  KernelCost cost;
};

class LaunchObserver {
 public:
  virtual ~LaunchObserver() = default;
  // Before the work is enqueued. Returning false skips it: accounting without execution (the emulated
  // benchmark of a full-size step, whose kernels would take hours on a CPU).
  virtual bool before_launch(const LaunchRecord& record) = 0;
  // After it was enqueued (not called for skipped work).
  virtual void after_launch(const LaunchRecord& record) { (void)record; }
  // The GEMM wrapper built a plan (descriptors, layouts, algorithm choice) instead of reusing one.
  virtual void on_gemm_setup() {}
  // The emulated runtime is about to block the host in `call` (a synchronize, a synchronous copy).
  virtual void on_host_wait(const char* call) { (void)call; }
};

// The observer of the calling thread, or null (always null outside a ScopedLaunchObserver).
inline LaunchObserver*& active_launch_observer() {
  static thread_local LaunchObserver* observer = nullptr;
  return observer;
}

// Installs `observer` on this thread for its lifetime; scopes nest.
class ScopedLaunchObserver {
 public:
  explicit ScopedLaunchObserver(LaunchObserver* observer) : previous_(active_launch_observer()) {
    active_launch_observer() = observer;
  }
  ~ScopedLaunchObserver() { active_launch_observer() = previous_; }
  ScopedLaunchObserver(const ScopedLaunchObserver&) = delete;
  ScopedLaunchObserver& operator=(const ScopedLaunchObserver&) = delete;

 private:
  LaunchObserver* previous_;
};

// Runs `enqueue` (which puts one piece of work on `stream`) unless the active observer skips it, and
// reports it around the call. `describe` builds the name only when someone listens.
template <class Describe, class Enqueue>
void observed_launch(LaunchKind kind, cudaStream_t stream, const KernelCost& cost, Describe&& describe,
                     Enqueue&& enqueue) {
  LaunchObserver* observer = active_launch_observer();
  if (observer == nullptr) {
    enqueue();
    return;
  }
  const LaunchRecord record{kind, describe(), stream, cost};
  if (!observer->before_launch(record)) return;
  enqueue();
  observer->after_launch(record);
}

inline void notify_gemm_setup() {
  if (LaunchObserver* observer = active_launch_observer()) observer->on_gemm_setup();
}

inline void notify_host_wait(const char* call) {
  if (LaunchObserver* observer = active_launch_observer()) observer->on_host_wait(call);
}

}  // namespace llmc
