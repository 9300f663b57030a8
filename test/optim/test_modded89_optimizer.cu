// SpeedrunOptimizer under the 2026-07-17 recipe (modded89_optimizer_settings) on 1, 2 or 4 emulated ranks
// against the composition of its tested pieces on one rank, bitwise, at the modded89-tiny shape through the
// stand-in model: NorMuonRunner::step_bank per bank (mantissa state, c_proj's x2), the table's Adam per tensor
// with fp32 moments on odd 0-based steps with two steps' gradients, the fp32 tensors in fp32, and the tie: on
// the Adam steps up to the untie the head's gradient absorbs the embedding's (both summed over the pair
// first), the embedding is not updated and becomes the head transposed; after the untie's update the
// embedding's moments are the head's transposed, and from the next Adam step it moves on its own. Rank r's
// gradients are (r + 1) G (bf16), so the mean over ranks is exact. The three overlap modes bitwise equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/dist/comm.h"
#include "llmc/kernels/adam_sharded.cuh"
#include "llmc/model/modded89/modded89_config.h"
#include "llmc/model/modded89/modded89_layout.h"
#include "llmc/optim/modded89_param_table.h"
#include "llmc/optim/normuon.h"
#include "llmc/optim/speedrun_optimizer.h"
#include "test/dist/comm_test_context.h"
#include "test/support/device_buffer.h"
#include "test/support/gpu_test.h"
#include "test/support/rank_gradients.h"
#include "test/support/stand_in_speedrun_model.h"

namespace {

using namespace llmc;
using llmc::test::DeviceBuffer;
using llmc::test::StandInModel;
using llmc::test::mean_over_ranks;
using llmc::test::rank_grads;
using llmc::test::round_x;
using llmc::test::enqueue_stand_in_step;

constexpr int kSteps = 8;  // stages from 0/2/5/7, the untie at 5: tied Adam steps 1, 3, 5, untied 7

Modded89Layout tiny_layout(int world) {
  return make_modded89_layout(modded89_config_from_name("modded89-tiny"), world);
}

// The model's fp32 span: the scalars through the gate scale (Modded89Model::take_fp32_params).
std::pair<size_t, size_t> fp32_span(const Modded89Layout& layout) {
  const TensorView& first = layout.find(modded89_tensor_name(Modded89Tensor::kScalars));
  const TensorView& last = layout.find(modded89_tensor_name(Modded89Tensor::kGateScale));
  return {first.offset, last.offset + last.numel - first.offset};
}

// floatX values, zero in the padding; the embedding is the head transposed (the tied start).
std::vector<float> random_buffer(const Modded89Layout& layout, double scale, unsigned seed, bool tie) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> values(layout.total_size, 0.0f);
  for (const TensorView& view : layout.tensors)
    for (size_t i = 0; i < view.numel; i++) values[view.offset + i] = round_x(static_cast<float>(normal(rng)));
  if (tie) {
    const TensorView& head = layout.find("head");
    const TensorView& embed = layout.find("embed");
    const size_t C = head.shape[0], V = head.shape[1];
    for (size_t v = 0; v < V; v++)
      for (size_t c = 0; c < C; c++) values[embed.offset + v * C + c] = values[head.offset + c * V + v];
  }
  return values;
}

SpeedrunOptimizerSettings test_settings(OverlapMode overlap, bool all_owned) {
  SpeedrunOptimizerSettings settings = modded89_optimizer_settings(Modded89Schedule::for_total_steps(kSteps));
  settings.overlap = overlap;
  if (all_owned) settings.owners.replicate_below_seconds = 0.0;
  return settings;
}

struct StepInputs {
  std::vector<float> params0;
  std::vector<std::vector<float>> grads;
  std::vector<float> lrs;
  std::vector<std::vector<RowSparseGrad>> rows;  // with row-sparse tables: each step's rows of them
};

// The tables the model lists as row-sparse (Modded89Model::row_sparse_grads).
std::vector<RowSparseGrad> sparse_tables(const Modded89Layout& layout) {
  std::vector<RowSparseGrad> tables;
  for (const char* name : {"embed", "value_embeds", "bigram_embed"})
    tables.push_back({layout.index_of(name), {}});
  return tables;
}

// With row_sparse, each step's gradients of the tables are zero outside a random third of their rows (another
// third each step, so a step's rows and the saved step's differ).
StepInputs make_run(const Modded89Layout& layout, bool row_sparse = false) {
  StepInputs run;
  run.params0 = random_buffer(layout, 0.5, 1, /*tie=*/true);
  std::mt19937 rng(7);
  for (int s = 0; s < kSteps; s++) {
    run.grads.push_back(random_buffer(layout, 0.01 * (s + 1), 100 + s, /*tie=*/false));
    run.lrs.push_back(s == 2 ? 0.5f : 1.0f);
    if (!row_sparse) continue;
    run.rows.push_back(sparse_tables(layout));
    for (RowSparseGrad& table : run.rows.back()) {
      const TensorView& view = layout.tensors[static_cast<size_t>(table.tensor)];
      for (size_t row = 0; row < view.shape[0]; row++) {
        if (rng() % 3 == 0) {
          table.rows.push_back(static_cast<int>(row));
          continue;
        }
        std::fill_n(run.grads.back().begin() + view.offset + row * view.shape[1], view.shape[1], 0.0f);
      }
    }
  }
  return run;
}

// After a step the model's gradients of the tables are zero outside the step's rows and the rows the optimizer
// said it wrote (TrainableModel::grad_rows_written): what the model's next zeroing relies on.
void expect_tables_zero_elsewhere(const Modded89Layout& layout, StandInModel& model, const StepInputs& run, int s) {
  const std::vector<float> grads = model.download_grads();
  const std::vector<RowSparseGrad> written = model.take_written_rows();
  for (const RowSparseGrad& table : run.rows[static_cast<size_t>(s)]) {
    const TensorView& view = layout.tensors[static_cast<size_t>(table.tensor)];
    std::vector<bool> known(view.shape[0], false);
    for (int row : table.rows) known[static_cast<size_t>(row)] = true;
    for (const RowSparseGrad& w : written)
      for (int row : w.rows)
        if (w.tensor == table.tensor) {
          if (row < 0) known.assign(known.size(), true);
          if (row >= 0) known[static_cast<size_t>(row)] = true;
        }
    size_t stray = 0;
    for (size_t i = 0; i < view.numel; i++) stray += !known[i / view.shape[1]] && grads[view.offset + i] != 0.0f;
    EXPECT_EQ(stray, 0u) << view.name << ": nonzero gradients outside the rows the model would zero, after step "
                         << s + 1;
  }
}

std::vector<std::vector<float>> run_optimizer(CommContext& comm, const StepInputs& run, OverlapMode overlap, bool all_owned) {
  const Modded89Layout layout = tiny_layout(comm.world_size());
  const auto [fp32_offset, fp32_count] = fp32_span(layout);
  StandInModel model(layout, fp32_offset, fp32_count);
  model.upload_params(run.params0);
  if (!run.rows.empty()) model.set_row_sparse(sparse_tables(layout));
  SpeedrunOptimizer optimizer(model, comm, test_settings(overlap, all_owned));
  optimizer.init_master(model.download_params());
  std::vector<std::vector<float>> out;
  for (int s = 0; s < kSteps; s++) {
    model.set_grads(rank_grads(run.grads[s], comm.rank()));
    if (!run.rows.empty()) model.set_row_sparse(run.rows[static_cast<size_t>(s)]);
    enqueue_stand_in_step(model, optimizer, s + 1, run.lrs[s]);
    optimizer.wait_for_all_params();
    out.push_back(model.download_params());
    if (!run.rows.empty()) expect_tables_zero_elsewhere(layout, model, run, s);
  }
  return out;
}

// The composition on one rank, from the averaged gradients.
class Composition {
 public:
  Composition(const Modded89Layout& layout, const std::vector<float>& params0, const SpeedrunOptimizerSettings& settings)
      : layout_(layout), settings_(settings), params_(StandInModel::to_x(params0)), grads_(layout.total_size) {
    const auto span = fp32_span(layout);
    fp32_offset_ = span.first;
    fp32_.assign(params0.begin() + span.first, params0.begin() + span.first + span.second);
    for (const TensorView& view : layout.tensors) {
      if (view.group == ParamGroup::kMuon) {
        banks_.push_back(std::make_unique<Bank>(view, settings));
      } else {
        auto state = std::make_unique<AdamState>();
        state->view = &view;
        state->m = std::make_unique<DeviceBuffer<float>>(view.numel);
        state->v = std::make_unique<DeviceBuffer<float>>(view.numel);
        state->m->fill_zero();
        state->v->fill_zero();
        adam_.push_back(std::move(state));
      }
    }
  }

  // One step from the banks' averaged gradients and (odd steps) the Adam tensors' averaged pair sums, with the
  // head's already holding the embedding's on tied steps. Returns the parameters after it.
  std::vector<float> step(int s, float lr, const std::vector<float>& muon_grads, const std::vector<float>& adam_grads) {
    const bool adam = Modded89Schedule::adam_steps_at(s);
    const int untie = settings_.modded89_schedule.untie_step();
    std::vector<float> grads = muon_grads;
    for (const auto& state : adam_)
      for (size_t i = state->view->offset; i < state->view->offset + state->view->numel; i++)
        grads[i] = adam ? adam_grads[i] : 0.0f;
    grads_.upload_raw(StandInModel::to_x(grads));
    MatmulContext context;
    for (const auto& bank : banks_)
      bank->step(context, params_, grads_, settings_.muon_lr * lr, settings_.modded89_schedule.muon_momentum(s));
    if (!adam) return output();
    adam_updates_++;
    for (const auto& state : adam_) {
      const TensorView& view = *state->view;
      const Modded89Tensor kind = static_cast<Modded89Tensor>(view.kind);
      if (kind == Modded89Tensor::kEmbed && s <= untie) continue;  // tied: the head's transpose, below
      const Modded89ParamSettings table = modded89_param_settings(kind);
      const double step_lr = settings_.adam_lr * table.lr_multiplier * lr;
      const AdamRowShard all{0, static_cast<int>(view.numel)};
      if (view.reference_dtype == ParamDtype::kFp32) {
        DeviceBuffer<float> param(std::vector<float>(fp32_.begin() + (view.offset - fp32_offset_),
                                                     fp32_.begin() + (view.offset - fp32_offset_) + view.numel));
        adam_sharded_update<float, float, floatX>(param.get(), grads_.get() + view.offset, state->m->get(),
                                                  state->v->get(), 1, all, table.adam(), step_lr, adam_updates_,
                                                  nullptr);
        const std::vector<float> updated = param.download_raw();
        std::copy(updated.begin(), updated.end(), fp32_.begin() + (view.offset - fp32_offset_));
        for (size_t i = 0; i < view.numel; i++) params_[view.offset + i] = from_float<floatX>(updated[i]);
        continue;
      }
      DeviceBuffer<floatX> param(std::vector<floatX>(params_.begin() + view.offset, params_.begin() + view.offset + view.numel));
      adam_sharded_update<floatX, float>(param.get(), grads_.get() + view.offset, state->m->get(), state->v->get(), 1,
                                         all, table.adam(), step_lr, adam_updates_, nullptr);
      const std::vector<floatX> updated = param.download_raw();
      std::copy(updated.begin(), updated.end(), params_.begin() + view.offset);
    }
    const TensorView& head = layout_.find("head");
    const TensorView& embed = layout_.find("embed");
    const size_t C = head.shape[0], V = head.shape[1];
    if (s <= untie)
      for (size_t v = 0; v < V; v++)
        for (size_t c = 0; c < C; c++) params_[embed.offset + v * C + c] = params_[head.offset + c * V + v];
    if (s == untie) {
      AdamState& head_state = adam_state(head);
      AdamState& embed_state = adam_state(embed);
      for (int moment = 0; moment < 2; moment++) {
        const std::vector<float> from = (moment == 0 ? head_state.m : head_state.v)->download_raw();
        std::vector<float> to(from.size());
        for (size_t v = 0; v < V; v++)
          for (size_t c = 0; c < C; c++) to[v * C + c] = from[c * V + v];
        (moment == 0 ? embed_state.m : embed_state.v)->upload_raw(to);
      }
    }
    return output();
  }

 private:
  // A bank: its matrices through step_bank with their own state, updated in place in params.
  struct Bank {
    Bank(const TensorView& v, const SpeedrunOptimizerSettings& settings)
        : view(&v), count(static_cast<int>(v.shape[0])), rows(static_cast<int>(v.shape[1])),
          cols(static_cast<int>(v.shape[2])), rules(normuon_shape_rules(rows, cols)),
          workspace(NorMuonRunner::workspace_bytes(rows, cols, rules.variance_per_column, count)),
          runner(rows, cols, rules, count, workspace.get(), workspace.size(), settings.normuon),
          momentum(v.numel), variance(static_cast<size_t>(count) * (rules.variance_per_column ? cols : rows)),
          mantissas(v.numel), lr_mul(count) {
      momentum.fill_zero();
      variance.fill_zero();
      mantissas.fill_zero();
      std::vector<float> multipliers(count, 1.0f);
      if (static_cast<Modded89Tensor>(v.kind) == Modded89Tensor::kMlpBank) multipliers[1] = 2.0f;  // c_proj
      lr_mul.upload_raw(multipliers);
    }
    void step(MatmulContext& context, std::vector<floatX>& params, DeviceBuffer<floatX>& grads, double lr,
              double mu) {
      DeviceBuffer<floatX> param(std::vector<floatX>(params.begin() + view->offset, params.begin() + view->offset + view->numel));
      const size_t matrix = static_cast<size_t>(rows) * cols;
      std::vector<floatX*> p;
      std::vector<const floatX*> g;
      for (int m = 0; m < count; m++) p.push_back(param.get() + m * matrix), g.push_back(grads.get() + view->offset + m * matrix);
      DeviceBuffer<floatX*> p_table(p);
      DeviceBuffer<const floatX*> g_table(g);
      NorMuonBankBatch batch;
      batch.count = count;
      batch.params = p_table.get();
      batch.grads = g_table.get();
      batch.momentum = momentum.get();
      batch.variance = variance.get();
      batch.mantissas = sizeof(floatX) == 2 ? mantissas.get() : nullptr;
      batch.lr_multipliers = lr_mul.get();
      runner.step_bank(context, batch, lr, mu, nullptr);
      const std::vector<floatX> updated = param.download_raw();
      std::copy(updated.begin(), updated.end(), params.begin() + view->offset);
    }
    const TensorView* view;
    int count, rows, cols;
    NorMuonShapeRules rules;
    DeviceBuffer<char> workspace;
    NorMuonRunner runner;
    DeviceBuffer<float> momentum, variance;
    DeviceBuffer<uint16_t> mantissas;
    DeviceBuffer<float> lr_mul;
  };
  struct AdamState {
    const TensorView* view = nullptr;
    std::unique_ptr<DeviceBuffer<float>> m, v;
  };
  AdamState& adam_state(const TensorView& view) {
    for (const auto& state : adam_)
      if (state->view == &view) return *state;
    throw std::logic_error("no Adam state for " + view.name);
  }
  std::vector<float> output() const {  // as the model's download_params(): the fp32 tensors in fp32
    std::vector<float> out = StandInModel::to_f(params_);
    std::copy(fp32_.begin(), fp32_.end(), out.begin() + fp32_offset_);
    return out;
  }

  const Modded89Layout& layout_;
  SpeedrunOptimizerSettings settings_;
  std::vector<floatX> params_;
  DeviceBuffer<floatX> grads_;
  size_t fp32_offset_ = 0;
  std::vector<float> fp32_;
  std::vector<std::unique_ptr<Bank>> banks_;
  std::vector<std::unique_ptr<AdamState>> adam_;
  long long adam_updates_ = 0;
};

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// Rank r's Adam gradient of an odd step: its two steps summed in floatX, the head's absorbing the embedding's
// (summed alike) transposed while tied.
std::vector<float> rank_adam_grads(const Modded89Layout& layout, const StepInputs& run, int s, int rank, bool tied) {
  std::vector<float> sum = rank_grads(run.grads[s - 1], rank);
  const std::vector<float> odd = rank_grads(run.grads[s], rank);
  for (size_t i = 0; i < sum.size(); i++) sum[i] = round_x(sum[i] + odd[i]);
  if (!tied) return sum;
  const TensorView& head = layout.find("head");
  const TensorView& embed = layout.find("embed");
  const size_t C = head.shape[0], V = head.shape[1];
  for (size_t c = 0; c < C; c++)
    for (size_t v = 0; v < V; v++)
      sum[head.offset + c * V + v] = round_x(sum[head.offset + c * V + v] + sum[embed.offset + v * C + c]);
  return sum;
}

class Modded89OptimizerTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    LLMC_REQUIRE_GPU();
    comm_ = &llmc::test::comm_context();
  }
  CommContext* comm_ = nullptr;
};

// The optimizer's parameters after each step against the composition's, bitwise, and the tie's shape.
void expect_composition(const CommContext& comm, const StepInputs& run, const std::vector<std::vector<float>>& got,
                        bool all_owned) {
  const int world = comm.world_size();
  const Modded89Layout layout = tiny_layout(world);
  const SpeedrunOptimizerSettings settings = test_settings(OverlapMode::kFull, all_owned);
  const int untie = settings.modded89_schedule.untie_step();
  ASSERT_EQ(untie, 5);
  Composition want(layout, run.params0, settings);
  const size_t n = layout.total_size;
  const TensorView& head = layout.find("head");
  const TensorView& embed = layout.find("embed");
  for (int s = 0; s < kSteps; s++) {
    const std::vector<float> muon = mean_over_ranks(n, world, [&](int r) { return rank_grads(run.grads[s], r); });
    const std::vector<float> adam = s % 2 == 0 ? std::vector<float>(n, 0.0f) : mean_over_ranks(n, world, [&](int r) {
      return rank_adam_grads(layout, run, s, r, s <= untie);
    });
    const std::vector<float> expected = want.step(s, run.lrs[s], muon, adam);
    for (const TensorView& view : layout.tensors) {
      size_t mismatches = 0;
      for (size_t i = view.offset; i < view.offset + view.numel; i++) mismatches += !same_bits(got[s][i], expected[i]);
      EXPECT_EQ(mismatches, 0u) << view.name << " after step " << s + 1 << " on rank " << comm.rank() << " of "
                                << world;
    }
    // The tie itself: the embedding is the head transposed through the untie's update, then it is not.
    const size_t C = head.shape[0], V = head.shape[1];
    size_t transposed = 0;
    for (size_t v = 0; v < V; v++)
      for (size_t c = 0; c < C; c++)
        transposed += same_bits(got[s][embed.offset + v * C + c], got[s][head.offset + c * V + v]);
    if (s <= untie) {
      EXPECT_EQ(transposed, C * V) << "step " << s + 1;
    } else if (s % 2 == 1) {
      EXPECT_LT(transposed, C * V / 2) << "step " << s + 1 << ": the untied embedding did not move on its own";
    }
  }
}

TEST_P(Modded89OptimizerTest, StepsEqualTheCompositionOfItsPieces) {
  const StepInputs run = make_run(tiny_layout(comm_->world_size()));
  expect_composition(*comm_, run, run_optimizer(*comm_, run, OverlapMode::kFull, GetParam()), GetParam());
}

// Tables whose gradients the model lists as row-sparse: the optimizer saves, adds and (several ranks) exchanges
// their rows alone, and the parameters are still the composition's bits.
TEST_P(Modded89OptimizerTest, RowSparseTablesStepAsTheComposition) {
  const StepInputs run = make_run(tiny_layout(comm_->world_size()), /*row_sparse=*/true);
  expect_composition(*comm_, run, run_optimizer(*comm_, run, OverlapMode::kFull, GetParam()), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Owners, Modded89OptimizerTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) { return info.param ? "AllOwned" : "Default"; });

// The overlap modes run the same kernels on the same data: bitwise the same parameters.
TEST(Modded89Optimizer, OverlapModesAgreeBitwise) {
  LLMC_REQUIRE_GPU();
  CommContext& comm = llmc::test::comm_context();
  const StepInputs run = make_run(tiny_layout(comm.world_size()));
  const auto full = run_optimizer(comm, run, OverlapMode::kFull, true);
  for (OverlapMode mode : {OverlapMode::kNone, OverlapMode::kReduceScatter}) {
    const auto other = run_optimizer(comm, run, mode, true);
    for (int s = 0; s < kSteps; s++)
      EXPECT_TRUE(std::memcmp(full[s].data(), other[s].data(), full[s].size() * sizeof(float)) == 0)
          << "overlap mode " << static_cast<int>(mode) << " differs after step " << s + 1;
  }
}

}  // namespace
