// fp8_gemm(): the FP8 GEMM of the FP8 head (Fp8GemmArgs, llmc/kernels/fp8_gemm_args.h) on cuBLASLt with
// CUDA_R_8F_E4M3/E5M2 operands, per-tensor scales through A/B_SCALE_POINTER and the fast-accumulation flag
// (sm_89 or newer). The emulated build runs the same calls on its CPU cuBLASLt (llmc/emu/cublaslt.cpp), whose
// FP8 arithmetic models the tensor core's accumulator (llmc/emu/cpu_fp8_gemm.h).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/fp8_gemm_args.h"
#include "llmc/kernels/matmul.cuh"


namespace llmc {

// Whether `device` has FP8 tensor cores (compute capability 8.9 or newer; the emulated device is 9.0): the
// trainer's test for --fp8-head.
inline bool fp8_gemm_supported(int device) {
  int major = 0, minor = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  return major * 10 + minor >= 89;
}

// D's type for activations of type Tx (fp32 or bf16).
template <class Tx>
constexpr cudaDataType_t fp8_gemm_output_type() {
  static_assert(std::is_same_v<Tx, float> || std::is_same_v<Tx, __nv_bfloat16>, "FP8 GEMM outputs are fp32 or bf16");
  return std::is_same_v<Tx, float> ? CUDA_R_32F : CUDA_R_16BF;
}

inline size_t fp8_gemm_element_bytes(cudaDataType_t type) {
  return type == CUDA_R_32F ? 4 : type == CUDA_R_16BF ? 2 : 1;
}

// Row-major D = A B^T is the column-major D^T (N,M) = B_cm^T A_cm where B_cm is our B read as a column-major
// (K,N) matrix and A_cm our A as (K,M): cuBLASLt's first operand is our B with TRANSA = T, its second our A
// with TRANSB = N -- the TN layout its FP8 kernels require. Its A scale is therefore our B's, and vice versa.
inline void set_fp8_scale(cublasLtMatmulDesc_t operation, cublasLtMatmulDescAttributes_t attribute,
                          const float* scale) {
  if (scale == nullptr) return;
  const void* pointer = scale;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(operation, attribute, &pointer, sizeof(pointer)));
}

// Descriptors and layouts of one FP8 call, destroyed on every exit path. They are built per call: the
// GEMM plan cache's key (llmc/kernels/gemm_plan_cache.h) has no FP8 types, scales or accumulation mode,
// and the head makes only three FP8 GEMMs per micro-step.
inline void create_fp8_descriptors(GemmPlan& desc, const Fp8GemmArgs& g) {
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc.operation, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t first_op = CUBLAS_OP_T, second_op = CUBLAS_OP_N;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc.operation, CUBLASLT_MATMUL_DESC_TRANSA, &first_op, sizeof(first_op)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(desc.operation, CUBLASLT_MATMUL_DESC_TRANSB, &second_op, sizeof(second_op)));
  set_fp8_scale(desc.operation, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, g.b_scale);
  set_fp8_scale(desc.operation, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, g.a_scale);
  const int8_t fast_accumulation = g.fast_accumulation ? 1 : 0;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc.operation, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accumulation,
                                              sizeof(fast_accumulation)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.first, g.b_type, g.k, g.n, g.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.second, g.a_type, g.k, g.m, g.k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&desc.output, g.d_type, g.n, g.m, g.n));
}

inline void fp8_gemm(MatmulContext& context, const Fp8GemmArgs& g, cudaStream_t stream) {
  validate_fp8_gemm(g);
  GemmPlan desc;
  create_fp8_descriptors(desc, g);
  cublaslt::Preference preference;
  preference.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, context.workspace_bytes());
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, pointer_alignment(g.b));  // cuBLASLt's A is our B
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, pointer_alignment(g.a));
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, pointer_alignment(g.d));
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, pointer_alignment(g.d));

  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  const cublasStatus_t heuristic_status =
      cublasLtMatmulAlgoGetHeuristic(context.handle(), desc.operation, desc.first, desc.second, desc.output,
                                     desc.output, preference.handle, 1, &heuristic, &found);
  if (heuristic_status == CUBLAS_STATUS_NOT_SUPPORTED || (heuristic_status == CUBLAS_STATUS_SUCCESS && found == 0))
    throw std::runtime_error(std::string("fp8_gemm: cuBLASLt has no FP8 kernel for ") + fp8_gemm_type_name(g.a_type) +
                             " x " + fp8_gemm_type_name(g.b_type) + " -> " + fp8_gemm_type_name(g.d_type) +
                             " m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
                             " (FP8 GEMMs need sm_89 or newer: use --fp8-head off)");
  CUBLAS_CHECK(heuristic_status);
  // Told to the thread's LaunchObserver as one GEMM: the operands read once, D written (and read with beta).
  const double m = g.m, n = g.n, k = g.k;
  const KernelCost cost{m * k * fp8_gemm_element_bytes(g.a_type) + n * k * fp8_gemm_element_bytes(g.b_type) +
                            m * n * fp8_gemm_element_bytes(g.d_type) * (g.beta != 0.0f ? 2.0 : 1.0),
                        2.0 * m * n * k};
  const auto name = [&g] {
    return "fp8 gemm " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k) + " " +
           fp8_gemm_type_name(g.a_type) + " x " + fp8_gemm_type_name(g.b_type) + " -> " +
           fp8_gemm_type_name(g.d_type) + (g.beta != 0.0f ? " +=" : "");
  };
  observed_launch(LaunchKind::kGemm, stream, cost, name, [&] {
    CUBLAS_CHECK(cublasLtMatmul(context.handle(), desc.operation, &g.alpha, g.b, desc.first, g.a, desc.second,
                                &g.beta, g.d, desc.output, g.d, desc.output, &heuristic.algo, context.workspace(),
                                context.workspace_bytes(), stream));
  });
}

}  // namespace llmc
