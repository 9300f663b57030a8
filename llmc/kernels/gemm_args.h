// The description of one (batched) GEMM of the GEMM wrapper (llmc/kernels/matmul.cuh), row-major; the
// wrapper turns it into cuBLASLt's column-major call.
#pragma once

#include <stdexcept>
#include <string>

#include "llmc/base/launch_observer.h"
#include "llmc/cuda/precision.h"

namespace llmc {

// One GEMM, row-major: D (M,N) = alpha * op(A) @ op(B) + beta * C [+ bias broadcast over rows], where C is
// D itself unless `c` names another matrix of D's shape and strides (then C is only read: D = aX + BX
// needs no copy of X).
// op(A) is A (M,K) or, with trans_a, the transpose of A stored as (K,M); likewise op(B) is B (K,N) or,
// with trans_b, B stored as (N,K). Matrices are dense (leading dimension = row length).
// With pre_gelu non-null (batch 1 only): pre_gelu gets the value above and D gets gelu(pre_gelu).
struct GemmArgs {
  floatX* d = nullptr;
  const floatX* a = nullptr;
  const floatX* b = nullptr;
  int m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;  // 1 accumulates into D (or adds C)
  const floatX* c = nullptr;  // the addend of beta; null: D
  const floatX* bias = nullptr;  // (N) or null
  floatX* pre_gelu = nullptr;    // (M,N) or null
  int batch = 1;
  long long stride_a = 0, stride_b = 0, stride_d = 0;  // elements between consecutive batch matrices
};

// Minimum HBM traffic and FLOPs of one GEMM call (llmc/base/launch_observer.h): each operand read once, D
// written (and C read when beta != 0), the bias read and the pre-GELU output written.
inline KernelCost gemm_cost(const GemmArgs& g) {
  const double x = sizeof(floatX), m = g.m, n = g.n, k = g.k, batch = g.batch;
  double bytes = batch * (m * k + k * n + m * n * (g.beta != 0.0f ? 2.0 : 1.0)) * x;
  if (g.bias != nullptr) bytes += n * x;
  if (g.pre_gelu != nullptr) bytes += m * n * x;
  return KernelCost{bytes, 2.0 * m * n * k * batch};
}

// "gemm 8192x2304x768 NT +bias": the row of a benchmark table (M x N x K, whether A and B are transposed,
// the batch and the epilogue).
inline std::string gemm_name(const GemmArgs& g) {
  std::string name = "gemm " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k) + " " +
                     (g.trans_a ? "T" : "N") + (g.trans_b ? "T" : "N");
  if (g.batch > 1) name += " batch " + std::to_string(g.batch);
  if (g.bias != nullptr) name += " +bias";
  if (g.pre_gelu != nullptr) name += " +gelu";
  if (g.beta != 0.0f) name += g.c != nullptr ? " +C" : " +=";
  return name;
}

inline void validate_gemm(const GemmArgs& g) {
  if (g.m <= 0 || g.n <= 0 || g.k <= 0 || g.batch <= 0)
    throw std::invalid_argument("gemm: sizes must be positive (m=" + std::to_string(g.m) + " n=" +
                                std::to_string(g.n) + " k=" + std::to_string(g.k) +
                                " batch=" + std::to_string(g.batch) + ")");
  if (g.d == nullptr || g.a == nullptr || g.b == nullptr) throw std::invalid_argument("gemm: null matrix pointer");
  if (g.pre_gelu != nullptr && g.batch != 1) throw std::invalid_argument("gemm: GELU epilogue needs batch == 1");
  if (g.c != nullptr && g.pre_gelu != nullptr) throw std::invalid_argument("gemm: a separate C needs no GELU epilogue");
}

}  // namespace llmc
