// Polar Express orthogonalisation (Amsel et al. 2025), as NorMuon uses it: for a batch of matrices of one
// shape, X = G / (||G||_F * 1.02 + 1e-6), then five odd polynomial steps X = a X + (b A + c A A) X with
// A = X X^T, all in floatX (bf16) GEMMs with fp32 accumulation through the project's GEMM wrapper.
#pragma once

#include <cstddef>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/matmul_context.h"
#include "llmc/cuda/precision.h"

namespace llmc {

// One step's coefficients: X <- a X + b (X X^T) X + c (X X^T)^2 X.
struct PolarExpressStep {
  double a, b, c;
};

// The record's five steps (computed for 5 iterations, safety factor 2e-2, cushion 2).
std::vector<PolarExpressStep> polar_express_record_steps();

// How a step's last product X' = a X + B X (tall: a X + X B) is rounded: once, from one GEMM with X as its C
// (#44; the 2026-07-17 record for matrices of up to 1,024 rows), or the product first, with a X added by a
// second kernel (the record's split, for its MLP bank of 3,072-row matrices).
enum class PolarExpressUpdate { kFused, kSplit };

constexpr float kPolarExpressNormScale = 1.02f;  // ||G||_F * 1.02 + 1e-6 bounds the spectral norm below 1
constexpr float kPolarExpressNormEps = 1e-6f;

// Runs Polar Express on batches of up to max_batch contiguous row-major matrices of rows x cols.
// A tall matrix (rows > cols) is orthogonalised as its transpose (A = X^T X, X <- a X + X B^T), which
// is the reference's transpose-run-transpose without moving data. The workspace is the caller's
// (planned once, e.g. in the device arena); run() allocates nothing.
class PolarExpress {
 public:
  static size_t workspace_bytes(int rows, int cols, int max_batch);

  PolarExpress(int rows, int cols, int max_batch, void* workspace, size_t workspace_bytes,
               std::vector<PolarExpressStep> steps = polar_express_record_steps(),
               PolarExpressUpdate update = PolarExpressUpdate::kFused);

  // out[i] = orthogonalised in[i] for i < batch (batch <= max_batch); out may be in.
  void run(MatmulContext& context, const floatX* in, floatX* out, int batch, cudaStream_t stream) const;

  int rows() const { return rows_; }
  int cols() const { return cols_; }
  int max_batch() const { return max_batch_; }

 private:
  void step(MatmulContext& context, const PolarExpressStep& coefficients, const floatX* x, floatX* next, int batch,
            cudaStream_t stream) const;

  int rows_, cols_, max_batch_;
  int small_;  // min(rows, cols): the side of A = X X^T (or X^T X)
  bool tall_;
  std::vector<PolarExpressStep> steps_;
  PolarExpressUpdate update_;
  floatX* x_work_;  // [max_batch, rows, cols]: the other half of the ping-pong with `out`
  floatX* gram_;    // A [max_batch, small, small]
  floatX* poly_;    // B [max_batch, small, small]
  float* scratch_;  // Frobenius partial sums
  size_t scratch_floats_;
};

}  // namespace llmc
