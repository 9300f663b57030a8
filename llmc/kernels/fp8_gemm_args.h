// The description of one FP8 GEMM of llmc/kernels/fp8_matmul.cuh. validate_fp8_gemm refuses, in both builds,
// every call that cuBLASLt's FP8 kernels refuse on Hopper, with a message naming the rule; the emulated
// cuBLASLt (llmc/emu/cublaslt.cpp) refuses the same calls.
#pragma once

#include <cuda_runtime.h>  // cudaDataType_t (library_types.h)

#include <cstdint>
#include <stdexcept>
#include <string>

namespace llmc {

// Row-major: D (M,N) = alpha * a_scale * b_scale * op(A) (M,K) @ op(B) (K,N) + beta * D.
// A and B are fp8 (CUDA_R_8F_E4M3 or CUDA_R_8F_E5M2, not both e5m2); D is bf16 or fp32. FP8 tensor cores
// of sm_89/sm_90 read both operands K-major: op(A) = A stored (M,K) and op(B) = B^T with B stored (N,K)
// (trans_a false, trans_b true; cuBLASLt's column-major "TN" rule). M, N and K must be multiples of 16 and
// the three matrices 16-byte aligned. The scales are device pointers to one float each (null: 1), read when
// the GEMM runs, so that static scales live on the device (cuBLASLt's A/B_SCALE_POINTER). Fast
// accumulation keeps the whole K sum in the tensor core's reduced-precision accumulator; without it the
// sum is promoted to fp32 periodically (CUBLASLT_MATMUL_DESC_FAST_ACCUM).
struct Fp8GemmArgs {
  void* d = nullptr;
  cudaDataType_t d_type = CUDA_R_16BF;
  const void* a = nullptr;
  cudaDataType_t a_type = CUDA_R_8F_E4M3;
  const void* b = nullptr;
  cudaDataType_t b_type = CUDA_R_8F_E4M3;
  int m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = true;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  float alpha = 1.0f;
  float beta = 0.0f;  // 1 accumulates into D
  bool fast_accumulation = false;
};

inline bool is_fp8_type(cudaDataType_t type) { return type == CUDA_R_8F_E4M3 || type == CUDA_R_8F_E5M2; }

inline const char* fp8_gemm_type_name(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_8F_E4M3:
      return "e4m3";
    case CUDA_R_8F_E5M2:
      return "e5m2";
    case CUDA_R_16BF:
      return "bf16";
    case CUDA_R_32F:
      return "fp32";
    default:
      return "an unsupported type";
  }
}

inline void validate_fp8_gemm(const Fp8GemmArgs& g) {
  const std::string shape =
      " (m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) + ")";
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) throw std::invalid_argument("fp8_gemm: sizes must be positive" + shape);
  if (g.m % 16 != 0 || g.n % 16 != 0 || g.k % 16 != 0)
    throw std::invalid_argument("fp8_gemm: FP8 tensor cores need m, n and k multiples of 16" + shape);
  if (g.trans_a || !g.trans_b)
    throw std::invalid_argument(
        "fp8_gemm: FP8 GEMMs take only D = A B^T with A (M,K) and B (N,K) both K-major (cuBLASLt's TN rule on "
        "sm_89/sm_90); make a transposed fp8 copy (fp8_cast_transpose)");
  if (!is_fp8_type(g.a_type) || !is_fp8_type(g.b_type))
    throw std::invalid_argument(std::string("fp8_gemm: A and B must be e4m3 or e5m2, got ") +
                                fp8_gemm_type_name(g.a_type) + " and " + fp8_gemm_type_name(g.b_type));
  if (g.a_type == CUDA_R_8F_E5M2 && g.b_type == CUDA_R_8F_E5M2)
    throw std::invalid_argument("fp8_gemm: e5m2 x e5m2 has no FP8 kernel (one operand must be e4m3)");
  if (g.d_type != CUDA_R_16BF && g.d_type != CUDA_R_32F)
    throw std::invalid_argument(std::string("fp8_gemm: D must be bf16 or fp32, got ") + fp8_gemm_type_name(g.d_type));
  if (g.d == nullptr || g.a == nullptr || g.b == nullptr) throw std::invalid_argument("fp8_gemm: null matrix pointer");
  const void* matrices[] = {g.a, g.b, g.d};
  const char* names[] = {"A", "B", "D"};
  for (int i = 0; i < 3; i++)
    if (reinterpret_cast<uintptr_t>(matrices[i]) % 16 != 0)
      throw std::invalid_argument(std::string("fp8_gemm: ") + names[i] + " is not 16-byte aligned");
}

}  // namespace llmc
