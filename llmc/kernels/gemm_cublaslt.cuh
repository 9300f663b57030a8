// gemm() (llmc/kernels/matmul.cuh) on cuBLASLt: plans built once per key -- descriptors, layouts,
// candidate algorithms -- and, with GemmAlgoSelection::kFastest, the timing of the candidates on the stream
// at the first call (the host never waits for it: a later call reads the events once they are complete and
// switches to the fastest). Both builds: the emulated one links the CPU cuBLASLt of llmc/emu/cublaslt.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/cuda/cublas_check.h"
#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/gemm_args.h"
#include "llmc/kernels/matmul_context.h"

namespace llmc {
namespace cublaslt {

// cuBLASLt is column-major. A row-major (r,c) matrix is the column-major (c,r) matrix with the same
// bytes, so the row-major D = op(A) @ op(B) is computed as the column-major D^T = op(B)^T @ op(A)^T:
// cuBLASLt's first operand is our B, its second our A, and its (rows, cols) of D are our (N, M).

constexpr int kHeuristicCandidates = 8;  // how many of the heuristic's answers kFastest times
constexpr int kTimedRuns = 3;            // timed runs per candidate, after one untimed warm-up run
constexpr int kSplitKBases = 2;          // split-K variants are made of the first few candidates
constexpr int kTileEdge = 128;           // a typical output tile, to count how many tiles fill the GPU

inline cudaDataType_t data_type() {
#if defined(LLMC_FP32)
  return CUDA_R_32F;
#else
  return CUDA_R_16BF;
#endif
}

inline void set_batch(cublasLtMatrixLayout_t layout, int batch, long long stride) {
  if (batch == 1) return;
  const int32_t batch_count = batch;
  const int64_t batch_stride = stride;
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch_count,
                                                sizeof(batch_count)));
  CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_stride,
                                                sizeof(batch_stride)));
}

inline cublasLtEpilogue_t epilogue_of(GemmEpilogue epilogue) {
  switch (epilogue) {
    case GemmEpilogue::kNone: return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::kGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmEpilogue::kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

inline bool has_aux(GemmEpilogue e) { return e == GemmEpilogue::kGeluAux || e == GemmEpilogue::kGeluAuxBias; }
inline bool has_bias(GemmEpilogue e) { return e == GemmEpilogue::kBias || e == GemmEpilogue::kGeluAuxBias; }

// The per-call pointers of the epilogue (the descriptor keeps everything else of the key).
inline void set_call_pointers(GemmPlan& plan, const GemmArgs& g, GemmEpilogue epilogue) {
  if (has_bias(epilogue)) {
    const void* bias = g.bias;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  if (has_aux(epilogue)) {
    void* aux = g.pre_gelu;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  }
}

// Operation descriptor and the three layouts of the key (C shares D's layout).
inline void create_descriptors(GemmPlan& plan, const GemmPlanKey& key) {
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.operation, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t first_op = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t second_op = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSA, &first_op, sizeof(first_op)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_TRANSB, &second_op, sizeof(second_op)));
  const cublasLtEpilogue_t epilogue = epilogue_of(key.epilogue);
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (has_aux(key.epilogue)) {
    const int64_t aux_ld = key.n;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.operation, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld,
                                                sizeof(aux_ld)));
  }
  const cudaDataType_t type = data_type();
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.first, type, key.trans_b ? key.k : key.n,
                                          key.trans_b ? key.n : key.k, key.trans_b ? key.k : key.n));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.second, type, key.trans_a ? key.m : key.k,
                                          key.trans_a ? key.k : key.m, key.trans_a ? key.m : key.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.output, type, key.n, key.m, key.n));
  set_batch(plan.first, key.batch, key.stride_b);
  set_batch(plan.second, key.batch, key.stride_a);
  set_batch(plan.output, key.batch, key.stride_d);
}

// Owns a matmul preference for the heuristic query.
struct Preference {
  cublasLtMatmulPreference_t handle = nullptr;
  Preference() { CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&handle)); }
  ~Preference() { CUBLAS_REPORT(cublasLtMatmulPreferenceDestroy(handle)); }
  Preference(const Preference&) = delete;
  Preference& operator=(const Preference&) = delete;
  template <typename T>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, T value) {
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(handle, attribute, &value, sizeof(value)));
  }
};

// The heuristic's first `count` answers for the key (none: the epilogue or shape is not supported).
inline void query_candidates(const MatmulContext& context, GemmPlan& plan, const GemmPlanKey& key, int count) {
  Preference preference;
  preference.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, context.workspace_bytes());
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);  // cuBLASLt's A is our B
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(count));
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(context.handle(), plan.operation, plan.first, plan.second, plan.output,
                                     plan.output, preference.handle, count, results.data(), &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return;
  CUBLAS_CHECK(status);
  for (int i = 0; i < found; i++)
    if (results[static_cast<size_t>(i)].state == CUBLAS_STATUS_SUCCESS)
      plan.candidates.push_back(results[static_cast<size_t>(i)].algo);
}

// Split-K variants (2, 4, 8 splits, fp32 partials reduced in the workspace: deterministic) of the first
// candidates, for keys whose output has fewer tiles than the GPU has SMs: the K = B*T weight gradients.
inline void add_split_k_candidates(const MatmulContext& context, GemmPlan& plan, const GemmPlanKey& key) {
  const long long tiles = ceil_div(key.m, kTileEdge) * ceil_div(key.n, kTileEdge) * key.batch;
  if (key.epilogue != GemmEpilogue::kNone || tiles >= context.multiprocessors()) return;
  const size_t bases = std::min<size_t>(plan.candidates.size(), kSplitKBases);
  for (size_t i = 0; i < bases; i++) {
    int32_t supported = 0, splits_now = 1;
    uint32_t schemes = 0;
    size_t written = 0;
    const cublasLtMatmulAlgo_t base = plan.candidates[i];
    if (cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &supported, sizeof(supported),
                                          &written) != CUBLAS_STATUS_SUCCESS ||
        supported == 0 ||
        cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK, &schemes, sizeof(schemes),
                                          &written) != CUBLAS_STATUS_SUCCESS ||
        (schemes & CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) == 0 ||
        cublasLtMatmulAlgoConfigGetAttribute(&base, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits_now, sizeof(splits_now),
                                             &written) != CUBLAS_STATUS_SUCCESS ||
        splits_now > 1)
      continue;
    for (int32_t splits : {2, 4, 8}) {
      cublasLtMatmulAlgo_t algo = base;
      const uint32_t scheme = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      cublasLtMatmulHeuristicResult_t check = {};
      if (cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof(splits)) ==
              CUBLAS_STATUS_SUCCESS &&
          cublasLtMatmulAlgoConfigSetAttribute(&algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &scheme,
                                               sizeof(scheme)) == CUBLAS_STATUS_SUCCESS &&
          cublasLtMatmulAlgoCheck(context.handle(), plan.operation, plan.first, plan.second, plan.output,
                                  plan.output, &algo, &check) == CUBLAS_STATUS_SUCCESS &&
          check.workspaceSize <= context.workspace_bytes())
        plan.candidates.push_back(algo);
    }
  }
}

inline std::unique_ptr<GemmPlan> build_plan(const MatmulContext& context, const GemmPlanKey& key) {
  auto plan = std::make_unique<GemmPlan>();
  create_descriptors(*plan, key);
  const bool fastest = context.selection() == GemmAlgoSelection::kFastest;
  query_candidates(context, *plan, key, fastest ? kHeuristicCandidates : 1);
  if (fastest) add_split_k_candidates(context, *plan, key);
  plan->timing_wanted = plan->candidates.size() > 1;
  return plan;
}

inline cublasStatus_t enqueue(const MatmulContext& context, const GemmPlan& plan, size_t candidate,
                              const GemmArgs& g, cudaStream_t stream) {
  const floatX* addend = g.c != nullptr ? g.c : g.d;
  return cublasLtMatmul(context.handle(), plan.operation, &g.alpha, g.b, plan.first, g.a, plan.second, &g.beta,
                        addend, plan.output, g.d, plan.output, &plan.candidates[candidate], context.workspace(),
                        context.workspace_bytes(), stream);
}

// Element extent [first, last) of a batched matrix, to see whether D overlaps an input.
inline bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const uintptr_t a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}
inline size_t matrix_bytes(long long rows, long long cols, int batch, long long stride) {
  return static_cast<size_t>((batch - 1) * stride + rows * cols) * sizeof(floatX);
}

// kFastest, first call with usable pointers: every candidate runs once untimed and kTimedRuns times
// between two events, on `stream`. The runs overwrite D (and the GELU aux), which the real call that
// follows writes again; when that call reads D (beta != 0, no separate C) D is saved first and restored
// after. A GEMM writing over its own inputs is not timed (its plan keeps the heuristic's choice).
inline void start_timing(const MatmulContext& context, GemmPlan& plan, const GemmArgs& g, cudaStream_t stream) {
  plan.timing_wanted = false;
  const size_t d_bytes = matrix_bytes(g.m, g.n, g.batch, g.stride_d);
  const size_t a_bytes = matrix_bytes(g.m, g.k, g.batch, g.stride_a), b_bytes = matrix_bytes(g.k, g.n, g.batch, g.stride_b);
  if (overlaps(g.d, d_bytes, g.a, a_bytes) || overlaps(g.d, d_bytes, g.b, b_bytes) ||
      (g.c != nullptr && overlaps(g.d, d_bytes, g.c, d_bytes)))
    return;
  void* saved = nullptr;
  const bool restore = g.beta != 0.0f && g.c == nullptr;
  if (restore) {
    CUDA_CHECK(cudaMallocAsync(&saved, d_bytes, stream));
    CUDA_CHECK(cudaMemcpyAsync(saved, g.d, d_bytes, cudaMemcpyDeviceToDevice, stream));
  }
  plan.candidate_ran.assign(plan.candidates.size(), false);
  plan.timing.assign(2 * plan.candidates.size(), nullptr);
  for (size_t i = 0; i < plan.candidates.size(); i++) {
    CUDA_CHECK(cudaEventCreate(&plan.timing[2 * i]));
    CUDA_CHECK(cudaEventCreate(&plan.timing[2 * i + 1]));
    bool ok = enqueue(context, plan, i, g, stream) == CUBLAS_STATUS_SUCCESS;  // warm-up (and the check)
    CUDA_CHECK(cudaEventRecord(plan.timing[2 * i], stream));
    for (int run = 0; ok && run < kTimedRuns; run++) ok = enqueue(context, plan, i, g, stream) == CUBLAS_STATUS_SUCCESS;
    CUDA_CHECK(cudaEventRecord(plan.timing[2 * i + 1], stream));
    plan.candidate_ran[i] = ok;
  }
  if (restore) {
    CUDA_CHECK(cudaMemcpyAsync(g.d, saved, d_bytes, cudaMemcpyDeviceToDevice, stream));
    CUDA_CHECK(cudaFreeAsync(saved, stream));
  }
}

// Once the timed runs are complete (checked without waiting): the fastest candidate becomes the choice.
inline void finish_timing_if_done(GemmPlan& plan) {
  if (plan.timing.empty()) return;
  const cudaError_t state = cudaEventQuery(plan.timing.back());
  if (state == cudaErrorNotReady) return;
  CUDA_CHECK(state);
  float best_ms = 0.0f;
  for (size_t i = 0; i < plan.candidates.size(); i++) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, plan.timing[2 * i], plan.timing[2 * i + 1]));
    if (plan.candidate_ran[i] && (i == 0 || ms < best_ms)) {
      best_ms = ms;
      plan.chosen = i;
    }
  }
  for (cudaEvent_t event : plan.timing) CUDA_CHECK(cudaEventDestroy(event));
  plan.timing.clear();
}

// The plan of `g` with `epilogue`, built on first use.
inline GemmPlan& plan_for(MatmulContext& context, const GemmArgs& g, GemmEpilogue epilogue) {
  return context.plans().find_or_build(gemm_plan_key(g, epilogue),
                                       [&](const GemmPlanKey& key) { return build_plan(context, key); });
}

// Enqueues g with its plan (told to the thread's LaunchObserver as one GEMM; the timing runs of a first
// call are set-up, not counted).
inline void run(MatmulContext& context, GemmPlan& plan, const GemmArgs& g, GemmEpilogue epilogue,
                cudaStream_t stream) {
  finish_timing_if_done(plan);
  observed_launch(LaunchKind::kGemm, stream, gemm_cost(g), [&] { return gemm_name(g); }, [&] {
    set_call_pointers(plan, g, epilogue);
    if (plan.timing_wanted) start_timing(context, plan, g, stream);
    CUBLAS_CHECK(enqueue(context, plan, plan.chosen, g, stream));
  });
}

}  // namespace cublaslt

inline void gemm(MatmulContext& context, const GemmArgs& g, cudaStream_t stream) {
  validate_gemm(g);
  // cuBLASLt wants the GELU aux leading dimension divisible by 8; without an algorithm for the GELU
  // epilogue (its plan has no candidates) the GEMM writes pre_gelu and a kernel applies GELU.
  if (g.pre_gelu != nullptr && g.n % 8 == 0) {
    const GemmEpilogue epilogue = gemm_epilogue(g, /*fuse_gelu=*/true);
    GemmPlan& plan = cublaslt::plan_for(context, g, epilogue);
    if (!plan.candidates.empty()) {
      cublaslt::run(context, plan, g, epilogue, stream);
      return;
    }
  }
  GemmArgs unfused = g;
  if (g.pre_gelu != nullptr) {
    unfused.d = g.pre_gelu;  // GEMM (+bias) into pre_gelu, then GELU into D
    unfused.pre_gelu = nullptr;
  }
  const GemmEpilogue epilogue = gemm_epilogue(unfused, /*fuse_gelu=*/false);
  GemmPlan& plan = cublaslt::plan_for(context, unfused, epilogue);
  if (plan.candidates.empty())
    throw std::runtime_error("gemm: cuBLASLt found no algorithm for m=" + std::to_string(g.m) +
                             " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
                             " batch=" + std::to_string(g.batch));
  cublaslt::run(context, plan, unfused, epilogue, stream);
  if (g.pre_gelu != nullptr) gelu_forward(g.d, g.pre_gelu, static_cast<size_t>(g.m) * g.n, stream);
}

}  // namespace llmc
