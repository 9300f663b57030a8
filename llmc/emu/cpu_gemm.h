// The GEMM of the emulated build: a blocked CPU GEMM with fp32 accumulation over the operands of a
// GemmArgs, run by llmc/kernels/matmul.cuh's gemm() as a stream-ordered host function.
#pragma once

#include <vector>

#include "llmc/kernels/gelu.cuh"
#include "llmc/kernels/gemm_args.h"
#include "llmc/base/parallel_for.h"
#include "llmc/cuda/precision.h"

namespace llmc {

// Both operands are first converted to fp32 and packed: op(A) as (M,K) rows, op(B) as panels of
// kPanelColumns columns, each panel (K, kPanelColumns) contiguous and zero-padded. A micro-kernel then
// keeps a kPanelRows x kPanelColumns block of D in registers while it streams one panel and kPanelRows
// rows of A; column panels are visited in chunks that stay in cache while all rows pass over them.
// Every output element is summed over k in increasing order in fp32 (no reassociation), so the result
// does not depend on how rows are split over threads.
constexpr int kPanelRows = 4;
constexpr int kPanelColumns = 8;

struct PackedGemmOperands {
  std::vector<float> a;  // (M, K)
  std::vector<float> b;  // (ceil(N / kPanelColumns), K, kPanelColumns)
  int panels = 0;
};

inline void pack_gemm_operands(const GemmArgs& g, int batch_index, PackedGemmOperands& packed) {
  const floatX* a = g.a + batch_index * g.stride_a;
  const floatX* b = g.b + batch_index * g.stride_b;
  packed.a.resize(static_cast<size_t>(g.m) * g.k);
  for (int i = 0; i < g.m; i++)
    for (int kk = 0; kk < g.k; kk++)
      packed.a[static_cast<size_t>(i) * g.k + kk] =
          to_float(g.trans_a ? a[static_cast<size_t>(kk) * g.m + i] : a[static_cast<size_t>(i) * g.k + kk]);
  packed.panels = (g.n + kPanelColumns - 1) / kPanelColumns;
  packed.b.assign(static_cast<size_t>(packed.panels) * g.k * kPanelColumns, 0.0f);
  for (int kk = 0; kk < g.k; kk++)
    for (int j = 0; j < g.n; j++)
      packed.b[(static_cast<size_t>(j / kPanelColumns) * g.k + kk) * kPanelColumns + j % kPanelColumns] =
          to_float(g.trans_b ? b[static_cast<size_t>(j) * g.k + kk] : b[static_cast<size_t>(kk) * g.n + j]);
}

// D block [row, row + kPanelRows) x [panel columns], accumulators in vector registers (GCC vector
// extension: 4 floats per register, plain SSE on any x86-64). Multiply and add stay separate roundings,
// as in the scalar loop. Rows past M read zero-filled A rows and are not stored.
typedef float CpuFloat4 __attribute__((vector_size(16)));
constexpr int kVectorsPerPanelRow = kPanelColumns / 4;

inline void gemm_micro_kernel(const GemmArgs& g, const float* a_rows, const float* panel, int valid_rows, int row,
                              int column, floatX* d) {
  CpuFloat4 vector_accumulator[kPanelRows][kVectorsPerPanelRow] = {};
  const int depth = g.k;
  for (int kk = 0; kk < depth; kk++) {
    CpuFloat4 b[kVectorsPerPanelRow];
    std::memcpy(b, panel + static_cast<size_t>(kk) * kPanelColumns, sizeof(b));
    for (int r = 0; r < kPanelRows; r++) {
      const float a_value = a_rows[static_cast<size_t>(r) * depth + kk];
      const CpuFloat4 a_broadcast = {a_value, a_value, a_value, a_value};
      for (int v = 0; v < kVectorsPerPanelRow; v++) vector_accumulator[r][v] += a_broadcast * b[v];
    }
  }
  float accumulator[kPanelRows][kPanelColumns];
  std::memcpy(accumulator, vector_accumulator, sizeof(accumulator));
  const int valid_columns = g.n - column < kPanelColumns ? g.n - column : kPanelColumns;
  const floatX* addend = g.c != nullptr ? g.c + (d - g.d) : d;  // C of this batch matrix (D unless given)
  for (int r = 0; r < valid_rows; r++) {
    for (int j = 0; j < valid_columns; j++) {
      const size_t index = static_cast<size_t>(row + r) * g.n + column + j;
      float value = g.alpha * accumulator[r][j];
      if (g.beta != 0.0f) value += g.beta * to_float(addend[index]);
      if (g.bias != nullptr) value += to_float(g.bias[column + j]);
      if (g.pre_gelu != nullptr) {
        g.pre_gelu[index] = from_float<floatX>(value);
        value = gelu_tanh(value);
      }
      d[index] = from_float<floatX>(value);
    }
  }
}

// Rows [row_begin, row_end) of one batch matrix.
inline void cpu_gemm_rows(const GemmArgs& g, const PackedGemmOperands& packed, int batch_index, int row_begin,
                          int row_end) {
  floatX* d = g.d + batch_index * g.stride_d;
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
        gemm_micro_kernel(g, a_rows.data(), packed.b.data() + static_cast<size_t>(p) * g.k * kPanelColumns, valid_rows,
                          row, p * kPanelColumns, d);
    }
  }
}

inline void cpu_gemm(const GemmArgs& g, int threads) {
  PackedGemmOperands packed;
  const double flops_per_batch = 2.0 * g.m * g.n * g.k;
  constexpr double kFlopsPerThread = 4e6;  // below this a thread costs more than it saves
  int workers = static_cast<int>(flops_per_batch / kFlopsPerThread);
  if (workers > threads) workers = threads;
  if (workers > g.m / kPanelRows) workers = g.m / kPanelRows;
  if (workers < 1) workers = 1;
  for (int p = 0; p < g.batch; p++) {
    pack_gemm_operands(g, p, packed);
    if (workers == 1) {
      cpu_gemm_rows(g, packed, p, 0, g.m);
      continue;
    }
    // Row ranges in whole micro-kernel blocks; the last range takes the remainder.
    const int blocks = (g.m + kPanelRows - 1) / kPanelRows;
    const int rows_per_range = (blocks + workers - 1) / workers * kPanelRows;
    parallel_for(static_cast<size_t>(workers), workers, [&](int, size_t range) {
      const int begin = static_cast<int>(range) * rows_per_range;
      const int end = begin + rows_per_range < g.m ? begin + rows_per_range : g.m;
      if (begin < end) cpu_gemm_rows(g, packed, p, begin, end);
    });
  }
}

}  // namespace llmc
