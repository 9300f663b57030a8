// What the GEMM wrapper (llmc/kernels/matmul.cuh) keeps between calls: the MatmulContext with its plan
// cache (llmc/kernels/gemm_plan_cache.h), the cuBLASLt handle and workspace, and how plans choose their
// algorithm (GemmAlgoSelection). The cuBLASLt plans themselves: llmc/kernels/gemm_cublaslt.cuh. Both builds
// run this code: the emulated one against the CPU cuBLASLt of llmc/emu/cublaslt.cpp.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/cuda/cublas_check.h"
#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/gemm_args.h"
#include "llmc/kernels/gemm_plan_cache.h"

namespace llmc {

// A cuBLASLt plan: descriptors and layouts of its key, the candidate algorithms, the chosen one, and
// while the candidates are being timed the events bracketing their runs.
struct GemmPlan {
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, output = nullptr;
  std::vector<cublasLtMatmulAlgo_t> candidates;  // [0]: the heuristic's first answer; empty: none exists
  size_t chosen = 0;
  bool timing_wanted = false;         // kFastest with several candidates, not yet timed
  std::vector<cudaEvent_t> timing;    // start and stop per candidate, until read
  std::vector<bool> candidate_ran;    // per candidate: its timed runs were enqueued without error
  GemmPlan() = default;
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;
  ~GemmPlan() {
    for (cudaEvent_t event : timing) CUDA_REPORT(cudaEventDestroy(event));
    if (output) CUBLAS_REPORT(cublasLtMatrixLayoutDestroy(output));
    if (second) CUBLAS_REPORT(cublasLtMatrixLayoutDestroy(second));
    if (first) CUBLAS_REPORT(cublasLtMatrixLayoutDestroy(first));
    if (operation) CUBLAS_REPORT(cublasLtMatmulDescDestroy(operation));
  }
};

// What the GEMM needs that outlives one call: the plans, the cuBLASLt handle, its workspace and the SM
// count. Create one per device/stream set; not copyable.
class MatmulContext {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = static_cast<size_t>(32) << 20;  // cuBLAS' recommendation for Hopper

  explicit MatmulContext(size_t workspace_bytes = kDefaultWorkspaceBytes,
                         GemmAlgoSelection selection = GemmAlgoSelection::kHeuristic)
      : selection_(selection), workspace_bytes_(workspace_bytes) {
    int device = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors_, cudaDevAttrMultiProcessorCount, device));
    CUBLAS_CHECK(cublasLtCreate(&handle_));
    CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  }
  ~MatmulContext() {
    plans_ = GemmPlanCache<GemmPlan>();  // the plans' descriptors go before the handle
    CUDA_REPORT(cudaFree(workspace_));
    CUBLAS_REPORT(cublasLtDestroy(handle_));
  }
  MatmulContext(const MatmulContext&) = delete;
  MatmulContext& operator=(const MatmulContext&) = delete;

  GemmAlgoSelection selection() const { return selection_; }
  // Applies to plans built from now on (set it before the first GEMM).
  void set_selection(GemmAlgoSelection selection) { selection_ = selection; }
  GemmPlanCache<GemmPlan>& plans() { return plans_; }
  cublasLtHandle_t handle() const { return handle_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  int multiprocessors() const { return multiprocessors_; }

 private:
  GemmAlgoSelection selection_;
  GemmPlanCache<GemmPlan> plans_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  int multiprocessors_ = 0;
};

// The key of a call with `epilogue`, its plan built on first use by `build`.
inline GemmEpilogue gemm_epilogue(const GemmArgs& g, bool fuse_gelu) {
  if (fuse_gelu) return g.bias != nullptr ? GemmEpilogue::kGeluAuxBias : GemmEpilogue::kGeluAux;
  return g.bias != nullptr ? GemmEpilogue::kBias : GemmEpilogue::kNone;
}

}  // namespace llmc
