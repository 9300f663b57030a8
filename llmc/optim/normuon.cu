// NorMuonRunner: the workspace plan and the order of one NorMuon step's kernels (see normuon.h).
#include "llmc/optim/normuon.h"

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "llmc/kernels/matmul.cuh"
#include "llmc/kernels/normuon.cuh"

namespace llmc {

namespace {
constexpr size_t kAlignment = 256;
size_t aligned(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

struct RunnerLayout {
  size_t orthogonal, partials, steps, ratios, polar, total;
};

RunnerLayout runner_layout(int rows, int cols, bool per_column, int max_count) {
  if (rows <= 0 || cols <= 0 || max_count <= 0)
    throw std::invalid_argument("NorMuonRunner: shape and count must be positive (rows=" + std::to_string(rows) +
                                " cols=" + std::to_string(cols) + " max_count=" + std::to_string(max_count) + ")");
  RunnerLayout layout;
  const size_t stat_len = per_column ? cols : rows;
  layout.orthogonal = 0;
  layout.partials = aligned(static_cast<size_t>(max_count) * rows * cols * sizeof(floatX));
  layout.steps = layout.partials + aligned(normuon_partial_floats(max_count, rows, cols, per_column) * sizeof(float));
  layout.ratios = layout.steps + aligned(static_cast<size_t>(max_count) * stat_len * sizeof(float));
  layout.polar = layout.ratios + aligned(static_cast<size_t>(max_count) * sizeof(float));
  layout.total = layout.polar + PolarExpress::workspace_bytes(rows, cols, max_count);
  return layout;
}

// The part of the caller's workspace that Polar Express gets, after checking the whole is big enough.
char* polar_workspace(void* workspace, size_t bytes, const RunnerLayout& layout) {
  if (workspace == nullptr || bytes < layout.total || reinterpret_cast<uintptr_t>(workspace) % kAlignment != 0)
    throw std::invalid_argument("NorMuonRunner: workspace of " + std::to_string(bytes) + " bytes; needs " +
                                std::to_string(layout.total) + " bytes, 256-byte aligned");
  return static_cast<char*>(workspace) + layout.polar;
}
}  // namespace

size_t NorMuonRunner::workspace_bytes(int rows, int cols, bool variance_per_column, int max_count) {
  return runner_layout(rows, cols, variance_per_column, max_count).total;
}

NorMuonRunner::NorMuonRunner(int rows, int cols, NorMuonShapeRules rules, int max_count, void* workspace,
                             size_t workspace_bytes, NorMuonSettings settings, std::vector<PolarExpressStep> steps)
    : rows_(rows),
      cols_(cols),
      max_count_(max_count),
      rules_(rules),
      settings_(settings),
      polar_(
          rows, cols, max_count,
          polar_workspace(workspace, workspace_bytes, runner_layout(rows, cols, rules.variance_per_column, max_count)),
          PolarExpress::workspace_bytes(rows, cols, max_count), std::move(steps),
          settings.split_update_above_rows > 0 && rows > settings.split_update_above_rows
              ? PolarExpressUpdate::kSplit
              : PolarExpressUpdate::kFused) {
  const RunnerLayout layout = runner_layout(rows, cols, rules.variance_per_column, max_count);
  char* base = static_cast<char*>(workspace);
  orthogonal_ = reinterpret_cast<floatX*>(base + layout.orthogonal);
  partials_ = reinterpret_cast<float*>(base + layout.partials);
  partial_floats_ = normuon_partial_floats(max_count, rows, cols, rules.variance_per_column);
  steps_ = reinterpret_cast<float*>(base + layout.steps);
  ratios_ = reinterpret_cast<float*>(base + layout.ratios);
}

NorMuonStepValues NorMuonRunner::step_values(double lr, double momentum) const {
  return NorMuonStepValues{static_cast<float>(momentum), static_cast<float>(1.0 - momentum), static_cast<float>(lr),
                           static_cast<float>(lr * settings_.weight_decay)};
}

NorMuonStepValues NorMuonRunner::bank_step_values(double lr, double momentum) const {
  return NorMuonStepValues{static_cast<float>(momentum), static_cast<float>(1.0 - momentum),
                           static_cast<float>(lr * rules_.lr_scale), static_cast<float>(lr * settings_.weight_decay)};
}

template <typename P, typename G>
void NorMuonRunner::step(MatmulContext& context, const NorMuonBatch<P, G>& batch, const NorMuonStepScalars& scalars,
                         cudaStream_t stream) const {
  if (batch.count <= 0 || batch.count > max_count_)
    throw std::invalid_argument("NorMuonRunner::step: count " + std::to_string(batch.count) + " outside [1, " +
                                std::to_string(max_count_) + "]");
  const size_t elements = static_cast<size_t>(rows_) * cols_;
  normuon_momentum<P, G>(batch.grads, batch.momentum, orthogonal_, batch.count, elements, scalars.mu,
                         scalars.one_minus_mu, stream);
  polar_.run(context, orthogonal_, orthogonal_, batch.count, stream);
  normuon_variance(orthogonal_, batch.variance, batch.count, rows_, cols_, rules_.variance_per_column, settings_.beta2,
                   partials_, partial_floats_, steps_, ratios_, stream);
  normuon_apply(orthogonal_, steps_, ratios_, batch.params, batch.copies, batch.lr_multipliers, batch.count, rows_,
                cols_, rules_.variance_per_column, scalars.rate, scalars.rate_decay, rules_.lr_scale, stream);
}

void NorMuonRunner::step_bank(MatmulContext& context, const NorMuonBankBatch& batch, const NorMuonStepScalars& scalars,
                              cudaStream_t stream) const {
  if (batch.count <= 0 || batch.count > max_count_)
    throw std::invalid_argument("NorMuonRunner::step_bank: count " + std::to_string(batch.count) + " outside [1, " +
                                std::to_string(max_count_) + "]");
#if !defined(LLMC_FP32)
  if (batch.mantissas == nullptr)
    throw std::invalid_argument("NorMuonRunner::step_bank: bf16 parameters need their mantissa state");
#endif
  const size_t elements = static_cast<size_t>(rows_) * cols_;
  normuon_momentum<float, floatX>(batch.grads, batch.momentum, orthogonal_, batch.count, elements, scalars.mu,
                                  scalars.one_minus_mu, stream);
  polar_.run(context, orthogonal_, orthogonal_, batch.count, stream);
  normuon_variance(orthogonal_, batch.variance, batch.count, rows_, cols_, rules_.variance_per_column, settings_.beta2,
                   partials_, partial_floats_, steps_, ratios_, stream);
  normuon_apply_mantissa(orthogonal_, steps_, ratios_, batch.params, batch.mantissas, batch.lr_multipliers,
                         batch.count, rows_, cols_, rules_.variance_per_column, scalars.rate, scalars.rate_decay,
                         stream);
}

template void NorMuonRunner::step<float, float>(MatmulContext&, const NorMuonBatch<float>&,
                                                const NorMuonStepScalars&, cudaStream_t) const;
#if !defined(LLMC_FP32)
template void NorMuonRunner::step<floatX, floatX>(MatmulContext&, const NorMuonBatch<floatX>&,
                                                  const NorMuonStepScalars&, cudaStream_t) const;
template void NorMuonRunner::step<float, floatX>(MatmulContext&, const NorMuonBatch<float, floatX>&,
                                                 const NorMuonStepScalars&, cudaStream_t) const;
#endif

}  // namespace llmc
