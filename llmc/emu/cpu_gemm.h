// The arithmetic of the emulated cuBLASLt's bf16 and fp32 GEMMs (llmc/emu/cublaslt.cpp): a blocked CPU GEMM
// with fp32 accumulation over row-major operands of either element type, with cuBLASLt's epilogues (beta
// times C, the bias, GELU with its pre-activation kept).
#pragma once
#include <cuda_bf16.h>

#include <cstring>
#include <vector>

#include "llmc/base/parallel_for.h"

namespace llmc::emu {

enum class GemmElement { kF32, kBF16 };

// One (batched) GEMM, row-major: D (M,N) = alpha * op(A) @ op(B) + beta * C [+ bias over rows], then with
// `gelu` pre_gelu = that value and D = gelu(it). op(A) is A (M,K) or, with trans_a, A stored (K,M); likewise
// op(B) (K,N) or B stored (N,K). Leading dimensions in elements; strides between batch matrices too.
struct CpuGemm {
  GemmElement element = GemmElement::kBF16;
  void* d = nullptr;
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;     // the addend of beta
  const void* bias = nullptr;  // (N) or null
  void* pre_gelu = nullptr;    // with gelu
  bool gelu = false;
  int m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  long long lda = 0, ldb = 0, ldc = 0, ldd = 0, ld_pre_gelu = 0;
  float alpha = 1.0f, beta = 0.0f;
  int batch = 1;
  long long stride_a = 0, stride_b = 0, stride_c = 0, stride_d = 0;
};

// cuBLASLt's GELU epilogue: the tanh approximation.
inline float gelu_epilogue(float x) {
  const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}

template <class T>
float element_to_float(T value);
template <>
inline float element_to_float<float>(float value) { return value; }
template <>
inline float element_to_float<__nv_bfloat16>(__nv_bfloat16 value) { return __bfloat162float(value); }
template <class T>
T element_from_float(float value);
template <>
inline float element_from_float<float>(float value) { return value; }
template <>
inline __nv_bfloat16 element_from_float<__nv_bfloat16>(float value) { return __float2bfloat16(value); }

// Both operands are first converted to fp32 and packed: op(A) as (M,K) rows, op(B) as panels of
// kPanelColumns columns, each panel (K, kPanelColumns) contiguous and zero-padded. A micro-kernel then
// keeps a kPanelRows x kPanelColumns block of D in registers while it streams one panel and kPanelRows
// rows of A; column panels are visited in chunks that stay in cache while all rows pass over them.
//
// The sum over k is accumulated as a GPU's tensor-core GEMM does it: a tile's fp32 accumulator takes one
// MMA's worth of products at a time, in increasing k. Here each block of kAccumulationBlock products is
// summed in fp32 in order and then added to the fp32 accumulator, so the rounding error is bounded by
// kAccumulationBlock + K / kAccumulationBlock additions instead of K (measured for positive products at
// K = 65,536: 2.3e-6 of the sum, where a serial fp32 sum is 4.5e-6; test/emu/test_cublaslt.cu). The
// tensor core's own sum of an MMA's products is more precise than the serial fp32 block here, and cuBLAS
// may split K over CTAs (split-K), which only shortens the serial part: the emulated error is at least the
// GPU's. Every output element is summed in the same order whatever the split of
// rows over threads.
constexpr int kPanelRows = 4;
constexpr int kPanelColumns = 8;
constexpr int kAccumulationBlock = 16;  // the K of one bf16 mma.m16n8k16

struct PackedGemmOperands {
  std::vector<float> a;  // (M, K)
  std::vector<float> b;  // (ceil(N / kPanelColumns), K, kPanelColumns)
  int panels = 0;
};

template <class T>
void pack_gemm_operands(const CpuGemm& g, int batch_index, PackedGemmOperands& packed) {
  const T* a = static_cast<const T*>(g.a) + batch_index * g.stride_a;
  const T* b = static_cast<const T*>(g.b) + batch_index * g.stride_b;
  packed.a.resize(static_cast<size_t>(g.m) * g.k);
  for (int i = 0; i < g.m; i++)
    for (int kk = 0; kk < g.k; kk++)
      packed.a[static_cast<size_t>(i) * g.k + kk] =
          element_to_float(g.trans_a ? a[kk * g.lda + i] : a[i * g.lda + kk]);
  packed.panels = (g.n + kPanelColumns - 1) / kPanelColumns;
  packed.b.assign(static_cast<size_t>(packed.panels) * g.k * kPanelColumns, 0.0f);
  for (int kk = 0; kk < g.k; kk++)
    for (int j = 0; j < g.n; j++)
      packed.b[(static_cast<size_t>(j / kPanelColumns) * g.k + kk) * kPanelColumns + j % kPanelColumns] =
          element_to_float(g.trans_b ? b[j * g.ldb + kk] : b[kk * g.ldb + j]);
}

// D block [row, row + kPanelRows) x [panel columns], accumulators in vector registers (GCC vector
// extension: 4 floats per register, plain SSE on any x86-64). Multiply and add stay separate roundings,
// as in the scalar loop. Rows past M read zero-filled A rows and are not stored.
typedef float CpuFloat4 __attribute__((vector_size(16)));
constexpr int kVectorsPerPanelRow = kPanelColumns / 4;

template <class T>
void gemm_micro_kernel(const CpuGemm& g, int batch_index, const float* a_rows, const float* panel, int valid_rows,
                       int row, int column) {
  CpuFloat4 vector_accumulator[kPanelRows][kVectorsPerPanelRow] = {};
  const int depth = g.k;
  for (int k0 = 0; k0 < depth; k0 += kAccumulationBlock) {
    const int k_end = k0 + kAccumulationBlock < depth ? k0 + kAccumulationBlock : depth;
    CpuFloat4 block[kPanelRows][kVectorsPerPanelRow] = {};
    for (int kk = k0; kk < k_end; kk++) {
      CpuFloat4 b[kVectorsPerPanelRow];
      std::memcpy(b, panel + static_cast<size_t>(kk) * kPanelColumns, sizeof(b));
      for (int r = 0; r < kPanelRows; r++) {
        const float a_value = a_rows[static_cast<size_t>(r) * depth + kk];
        const CpuFloat4 a_broadcast = {a_value, a_value, a_value, a_value};
        for (int v = 0; v < kVectorsPerPanelRow; v++) block[r][v] += a_broadcast * b[v];
      }
    }
    for (int r = 0; r < kPanelRows; r++)
      for (int v = 0; v < kVectorsPerPanelRow; v++) vector_accumulator[r][v] += block[r][v];
  }
  float accumulator[kPanelRows][kPanelColumns];
  std::memcpy(accumulator, vector_accumulator, sizeof(accumulator));
  const int valid_columns = g.n - column < kPanelColumns ? g.n - column : kPanelColumns;
  T* d = static_cast<T*>(g.d) + batch_index * g.stride_d;
  const T* c = g.c != nullptr ? static_cast<const T*>(g.c) + batch_index * g.stride_c : nullptr;
  const T* bias = static_cast<const T*>(g.bias);
  T* pre_gelu = static_cast<T*>(g.pre_gelu);
  for (int r = 0; r < valid_rows; r++) {
    for (int j = 0; j < valid_columns; j++) {
      const long long i = row + r, jj = column + j;
      float value = g.alpha * accumulator[r][j];
      if (g.beta != 0.0f) value += g.beta * element_to_float(c[i * g.ldc + jj]);
      if (bias != nullptr) value += element_to_float(bias[jj]);
      if (g.gelu) {
        pre_gelu[i * g.ld_pre_gelu + jj] = element_from_float<T>(value);
        value = gelu_epilogue(value);
      }
      d[i * g.ldd + jj] = element_from_float<T>(value);
    }
  }
}

// Rows [row_begin, row_end) of one batch matrix.
template <class T>
void cpu_gemm_rows(const CpuGemm& g, const PackedGemmOperands& packed, int batch_index, int row_begin, int row_end) {
  constexpr size_t kChunkBytes = static_cast<size_t>(192) << 10;  // the panels of one chunk stay in L2
  int panels_per_chunk = static_cast<int>(kChunkBytes / (static_cast<size_t>(g.k) * kPanelColumns * sizeof(float)));
  if (panels_per_chunk < 1) panels_per_chunk = 1;
  std::vector<float> a_rows(static_cast<size_t>(kPanelRows) * g.k);
  for (int first_panel = 0; first_panel < packed.panels; first_panel += panels_per_chunk) {
    const int last_panel = first_panel + panels_per_chunk < packed.panels ? first_panel + panels_per_chunk
                                                                          : packed.panels;
    for (int row = row_begin; row < row_end; row += kPanelRows) {
      const int valid_rows = row_end - row < kPanelRows ? row_end - row : kPanelRows;
      for (int r = 0; r < kPanelRows; r++)
        for (int kk = 0; kk < g.k; kk++)
          a_rows[static_cast<size_t>(r) * g.k + kk] =
              r < valid_rows ? packed.a[static_cast<size_t>(row + r) * g.k + kk] : 0.0f;
      for (int p = first_panel; p < last_panel; p++)
        gemm_micro_kernel<T>(g, batch_index, a_rows.data(), packed.b.data() + static_cast<size_t>(p) * g.k * kPanelColumns,
                             valid_rows, row, p * kPanelColumns);
    }
  }
}

template <class T>
void cpu_gemm_typed(const CpuGemm& g, int threads) {
  PackedGemmOperands packed;
  const double flops_per_batch = 2.0 * g.m * g.n * g.k;
  constexpr double kFlopsPerThread = 4e6;  // below this a thread costs more than it saves
  int workers = static_cast<int>(flops_per_batch / kFlopsPerThread);
  if (workers > threads) workers = threads;
  if (workers > g.m / kPanelRows) workers = g.m / kPanelRows;
  if (workers < 1) workers = 1;
  for (int p = 0; p < g.batch; p++) {
    pack_gemm_operands<T>(g, p, packed);
    if (workers == 1) {
      cpu_gemm_rows<T>(g, packed, p, 0, g.m);
      continue;
    }
    // Row ranges in whole micro-kernel blocks; the last range takes the remainder.
    const int blocks = (g.m + kPanelRows - 1) / kPanelRows;
    const int rows_per_range = (blocks + workers - 1) / workers * kPanelRows;
    parallel_for(static_cast<size_t>(workers), workers, [&](int, size_t range) {
      const int begin = static_cast<int>(range) * rows_per_range;
      const int end = begin + rows_per_range < g.m ? begin + rows_per_range : g.m;
      if (begin < end) cpu_gemm_rows<T>(g, packed, p, begin, end);
    });
  }
}

inline void cpu_gemm(const CpuGemm& g, int threads) {
  if (g.element == GemmElement::kF32)
    cpu_gemm_typed<float>(g, threads);
  else
    cpu_gemm_typed<__nv_bfloat16>(g, threads);
}

}  // namespace llmc::emu
