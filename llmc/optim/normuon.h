// One NorMuon step for a batch of matrices of one shape that this rank owns: momentum, Polar Express,
// variance normalisation, cautious weight decay and the update (llmc/kernels/normuon.cuh), with the
// workspace planned once. Who owns which matrices is llmc/optim/muon_owners.h's business.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "llmc/cuda/step_scalar.h"
#include "llmc/kernels/matmul_context.h"
#include "llmc/optim/normuon_shape.h"
#include "llmc/optim/polar_express.h"
#include "llmc/cuda/precision.h"

namespace llmc {

// The matrices of one step. P: float (block matrices' fp32 masters) or floatX (gates; buffers in floatX too). G:
// the gradients' type, P or (fp32 masters) the model's floatX gradients, widened exactly as they are read.
template <typename P, typename G = P>
struct NorMuonBatch {
  int count = 0;
  P* const* params = nullptr;             // device array [count]: each matrix's parameter, rows x cols
  const G* const* grads = nullptr;        // device array [count]: each matrix's averaged gradient
  P* momentum = nullptr;                  // [count, rows, cols], zero-initialised
  P* variance = nullptr;                  // [count, cols] (per column) or [count, rows], zero-initialised
  const float* lr_multipliers = nullptr;  // device array [count]: 2 for W_fc, else 1
  // Optional device array [count]: each fp32 master's floatX copy (the model's parameter), written rounded by the
  // same pass that updates the master; null: none.
  floatX* const* copies = nullptr;
};

// The 2026-07-17 record's banks (SPEEDRUN89.md section 5): floatX parameters and gradients, fp32 momentum and
// variance, and in the bf16 build the lower 16 bits of each parameter's fp32 master (the parameter holds the
// upper 16); fp32 parameters (the fp32 build) are their own masters and need no mantissas.
struct NorMuonBankBatch {
  int count = 0;
  floatX* const* params = nullptr;        // device array [count]: each matrix, rows x cols
  const floatX* const* grads = nullptr;   // device array [count]: each matrix's averaged gradient
  float* momentum = nullptr;              // [count, rows, cols], zero-initialised
  float* variance = nullptr;              // [count, cols] (per column) or [count, rows], zero-initialised
  uint16_t* mantissas = nullptr;          // [count, rows, cols], zero-initialised; null in the fp32 build
  const float* lr_multipliers = nullptr;  // device array [count]: 2 for c_proj, else 1 (powers of two)
};

// The record's constants; the learning rate (0.03 x the schedule) and the momentum (scheduled) change per
// step and are arguments of step().
struct NorMuonSettings {
  double weight_decay = 1.2;  // cautious, scaled by the lr
  double beta2 = 0.95;        // of the variance buffer
  // Matrices with more rows than this take Polar Express's split update (PolarExpressUpdate); 0: none.
  int split_update_above_rows = 0;

  // The 2026-07-17 record's: weight decay 1.2, beta2 0.9, the split above 1,024 rows (its MLP bank).
  static NorMuonSettings record_2026() { return NorMuonSettings{1.2, 0.9, 1024}; }
};

// A step's per-step kernel arguments, rounded to fp32 from doubles as the host computes them: the momentum mu and
// 1 - mu, and the apply's rate pair: lr and lr x weight decay (step), or lr x the shape's scale and lr x weight
// decay (step_bank). What NorMuonStepScalars::at reads in device memory, in this order.
struct NorMuonStepValues {
  float mu, one_minus_mu, rate, rate_decay;
};
static_assert(sizeof(NorMuonStepValues) == 4 * sizeof(float), "four consecutive floats in device memory");

// The same as kernel arguments (llmc/cuda/step_scalar.h): fixed at launch, or read from the device as the kernels
// run (a step captured in a CUDA graph).
struct NorMuonStepScalars {
  StepScalar mu, one_minus_mu, rate, rate_decay;
  static NorMuonStepScalars fixed(const NorMuonStepValues& v) {
    return {StepScalar::fixed(v.mu), StepScalar::fixed(v.one_minus_mu), StepScalar::fixed(v.rate),
            StepScalar::fixed(v.rate_decay)};
  }
  static NorMuonStepScalars at(const float* device_values) {
    return {StepScalar::at(device_values), StepScalar::at(device_values + 1), StepScalar::at(device_values + 2),
            StepScalar::at(device_values + 3)};
  }
};

class NorMuonRunner {
 public:
  static size_t workspace_bytes(int rows, int cols, bool variance_per_column, int max_count);

  NorMuonRunner(int rows, int cols, NorMuonShapeRules rules, int max_count, void* workspace, size_t workspace_bytes,
                NorMuonSettings settings = NorMuonSettings(),
                std::vector<PolarExpressStep> steps = polar_express_record_steps());

  // One step of every matrix of `batch` with learning rate lr (0.03 x the schedule) and momentum mu; or with the
  // kernel arguments step_values(lr, momentum) gives.
  template <typename P, typename G>
  void step(MatmulContext& context, const NorMuonBatch<P, G>& batch, double lr, double momentum,
            cudaStream_t stream) const {
    step(context, batch, NorMuonStepScalars::fixed(step_values(lr, momentum)), stream);
  }
  template <typename P, typename G>
  void step(MatmulContext& context, const NorMuonBatch<P, G>& batch, const NorMuonStepScalars& scalars,
            cudaStream_t stream) const;
  NorMuonStepValues step_values(double lr, double momentum) const;
  // The 2026-07-17 record's step of a bank's matrices (lr: 0.023 x the schedule): momentum in fp32 over the
  // bf16 gradients, the scale rounded to bf16 before it multiplies X, the update through the fp32 master.
  void step_bank(MatmulContext& context, const NorMuonBankBatch& batch, double lr, double momentum,
                 cudaStream_t stream) const {
    step_bank(context, batch, NorMuonStepScalars::fixed(bank_step_values(lr, momentum)), stream);
  }
  void step_bank(MatmulContext& context, const NorMuonBankBatch& batch, const NorMuonStepScalars& scalars,
                 cudaStream_t stream) const;
  NorMuonStepValues bank_step_values(double lr, double momentum) const;

  int rows() const { return rows_; }
  int cols() const { return cols_; }

 private:
  int rows_, cols_, max_count_;
  NorMuonShapeRules rules_;
  NorMuonSettings settings_;
  floatX* orthogonal_;  // [max_count, rows, cols]: u, then Polar Express's X in place
  float* partials_;
  size_t partial_floats_;
  float* steps_;   // [max_count, stat_len]
  float* ratios_;  // [max_count]
  PolarExpress polar_;
};

}  // namespace llmc
