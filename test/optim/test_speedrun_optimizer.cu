// SpeedrunOptimizer on 1, 2 or 4 emulated ranks (mpirun -np N; every rank runs every test) against the
// composition of its tested pieces on one rank: NorMuonRunner per Muon tensor (fp32 master for the block
// matrices, the gates in floatX) and the sharded Adam kernel on whole tensors, stepping on odd 0-based
// steps with the sum of two steps' gradients. Bitwise, at the speedrun-tiny shape, through a stand-in
// model whose backward delivers given gradients bucket by bucket (last bucket first) and calls the hooks
// as the real one does. Rank r's gradients are (r + 1) G (bf16): the mean over ranks is then exact in
// fp32 whatever the order of the sum, so the single-rank composition can be fed the same averaged bits.
// Also: the three overlap modes bitwise equal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/dist/comm.h"
#include "llmc/kernels/adam_sharded.cuh"
#include "llmc/model/modded44/speedrun_config.h"
#include "llmc/model/modded44/speedrun_layout.h"
#include "llmc/optim/muon_cost.h"
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

// The 2025-10-31 record's per-tensor rates and Adam constants, written here from the record (train_gpt.py), not
// read from the optimizer's roles: W_fc's lr x2; Adam lr x75 for the embeddings, x1 the head, x5 the scalars;
// betas (0.65, 0.95), eps 1e-8, no weight decay.
constexpr float kFcLrMultiplier = 2.0f;
constexpr double kEmbedLrMultiplier = 75.0, kHeadLrMultiplier = 1.0, kScalarLrMultiplier = 5.0;
const AdamShardedSettings kRecordAdam{0.65, 0.95, 1e-8, 0.0, 1.0};

// Values representable in floatX (so host and device agree), zero in the padding.
std::vector<float> random_buffer(const ParamLayout& layout, double scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<float> values(layout.total_size, 0.0f);
  for (const TensorView& view : layout.tensors)
    for (size_t i = 0; i < view.numel; i++) values[view.offset + i] = to_float(from_float<floatX>(static_cast<float>(normal(rng))));
  return values;
}

struct StepInputs {
  std::vector<float> params0;
  std::vector<std::vector<float>> grads;  // per step: G (rank r gets (r + 1) G)
  std::vector<float> lrs;                 // per step
};

StepInputs make_run(const ParamLayout& layout, int steps) {
  StepInputs run;
  run.params0 = random_buffer(layout, 0.5, 1);
  for (int s = 0; s < steps; s++) {
    run.grads.push_back(random_buffer(layout, 0.01 * (s + 1), 100 + s));
    run.lrs.push_back(s == 2 ? 0.5f : 1.0f);
  }
  return run;
}

// Who updates the Muon matrices. At speedrun-tiny's sizes every unit costs less than the default
// replication threshold, so the record's arrangement (gates replicated, block matrices owned) needs a
// threshold between the gates' cost and the smallest block matrix's.
enum class Ownership { kRecord, kAllOwned, kAllReplicated, kSplitTensors };

SpeedrunOptimizerSettings test_settings(OverlapMode overlap, Ownership ownership = Ownership::kRecord) {
  SpeedrunOptimizerSettings settings;
  settings.schedule = SpeedrunSchedule::scaled(12);  // momentum warms up within the first steps
  settings.overlap = overlap;
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  const double gate = normuon_matrix_cost(config.num_heads, kSpeedrunGateWidth, 2).seconds;
  const double block = normuon_matrix_cost(config.channels(), config.channels(), 4).seconds;
  settings.owners.replicate_below_seconds = ownership == Ownership::kAllOwned        ? 0.0
                                            : ownership == Ownership::kAllReplicated ? 1.0
                                                                                     : 0.5 * (gate + block);
  settings.owners.split_tensors = ownership == Ownership::kSplitTensors;
  return settings;
}

// Parameters after each step of the optimizer under test (the host waits for each step).
// With `norms`, grad_norm() of every step too.
std::vector<std::vector<float>> run_optimizer(CommContext& comm, const StepInputs& run, OverlapMode overlap,
                                              Ownership ownership = Ownership::kRecord,
                                              std::vector<float>* norms = nullptr) {
  StandInModel model(speedrun_config_from_name("speedrun-tiny"), comm.world_size());
  model.upload_params(run.params0);
  SpeedrunOptimizer optimizer(model, comm, test_settings(overlap, ownership));
  // The arrangement asked for is the one tested: owned units on every rank (more than one rank), or none.
  std::vector<int> owned(comm.world_size(), 0);
  int replicated = 0;
  for (const MuonOwnerUnit& unit : optimizer.owner_plan().units) unit.owner == kAllRanks ? replicated++ : owned[unit.owner]++;
  if (ownership == Ownership::kAllReplicated) {
    EXPECT_EQ(std::count(owned.begin(), owned.end(), 0), comm.world_size());
  } else {
    EXPECT_EQ(std::count(owned.begin(), owned.end(), 0), 0);
    EXPECT_EQ(replicated > 0, ownership == Ownership::kRecord || ownership == Ownership::kSplitTensors);
  }
  optimizer.init_master(model.download_params());
  std::vector<std::vector<float>> out;
  for (size_t s = 0; s < run.grads.size(); s++) {
    const int step = static_cast<int>(s) + 1;
    model.set_grads(rank_grads(run.grads[s], comm.rank()));
    enqueue_stand_in_step(model, optimizer, step, run.lrs[s]);
    optimizer.wait_for_all_params();
    if (norms != nullptr) norms->push_back(optimizer.grad_norm(step));
    out.push_back(model.download_params());
  }
  return out;
}

// The composition: per Muon tensor one NorMuonRunner (its own state), per Adam tensor the sharded Adam
// kernel on all rows with the summed gradients of the even and the odd step.
class Composition {
 public:
  Composition(const SpeedrunLayout& layout, const std::vector<float>& params0, const SpeedrunOptimizerSettings& settings)
      : layout_(layout),
        settings_(settings),
        params_(StandInModel::to_x(params0)),
        grads_(layout.total_size),
        scalars_(layout.tensor(SpeedrunTensor::kScalars)),
        scalars32_(params0.begin() + scalars_.offset, params0.begin() + scalars_.offset + scalars_.numel) {
    for (const TensorView& view : layout.tensors) {
      if (view.group != ParamGroup::kMuon) continue;
      const SpeedrunTensor kind = speedrun_kind(view);
      auto tensor = std::make_unique<MuonState>();
      tensor->view = &view;
      tensor->fp32 = kind == SpeedrunTensor::kQkvo || kind == SpeedrunTensor::kFc || kind == SpeedrunTensor::kProj;
      tensor->count = kind == SpeedrunTensor::kQkvo ? 4 : 1;
      tensor->rows = static_cast<int>(view.shape[0]);
      tensor->cols = static_cast<int>(view.numel / view.shape[0] / tensor->count);
      const NorMuonShapeRules rules = normuon_shape_rules(static_cast<int>(view.shape[0]), static_cast<int>(view.shape[1]));
      const size_t stat = static_cast<size_t>(tensor->count) * (rules.variance_per_column ? tensor->cols : tensor->rows);
      const size_t bytes = NorMuonRunner::workspace_bytes(tensor->rows, tensor->cols, rules.variance_per_column, tensor->count);
      tensor->workspace = std::make_unique<DeviceBuffer<char>>(bytes);
      tensor->runner = std::make_unique<NorMuonRunner>(tensor->rows, tensor->cols, rules, tensor->count,
                                                       tensor->workspace->get(), bytes, settings.normuon);
      tensor->lr_mul = std::make_unique<DeviceBuffer<float>>(std::vector<float>(
          tensor->count, kind == SpeedrunTensor::kFc ? kFcLrMultiplier : 1.0f));
      const size_t bytes_per = tensor->fp32 ? sizeof(float) : sizeof(floatX);
      tensor->momentum = std::make_unique<DeviceBuffer<char>>(view.numel * bytes_per);
      tensor->variance = std::make_unique<DeviceBuffer<char>>(stat * bytes_per);
      tensor->momentum->fill_zero();
      tensor->variance->fill_zero();
      if (tensor->fp32) {
        std::vector<float> master(params0.begin() + view.offset, params0.begin() + view.offset + view.numel);
        tensor->master = std::make_unique<DeviceBuffer<float>>(master);
        tensor->grad32 = std::make_unique<DeviceBuffer<float>>(view.numel);
      }
      muon_.push_back(std::move(tensor));
    }
    for (const TensorView& view : layout.tensors)
      if (view.group == ParamGroup::kAdam) {
        const bool fp32 = speedrun_kind(view) == SpeedrunTensor::kScalars;
        auto state = std::make_unique<AdamState>();
        state->view = &view;
        state->m = std::make_unique<DeviceBuffer<char>>(view.numel * (fp32 ? sizeof(float) : sizeof(floatX)));
        state->v = std::make_unique<DeviceBuffer<char>>(view.numel * (fp32 ? sizeof(float) : sizeof(floatX)));
        state->m->fill_zero();
        state->v->fill_zero();
        adam_.push_back(std::move(state));
      }
  }

  // One step: Muon from muon_grads, Adam (on odd 0-based steps) from adam_grads (already the two steps'
  // averaged sum). Returns the parameters after it.
  std::vector<float> step(int step, float lr, const std::vector<float>& muon_grads, const std::vector<float>& adam_grads) {
    const int s = step - 1;
    std::vector<float> grads = muon_grads;
    const bool adam = SpeedrunSchedule::adam_steps_at(s);
    for (const auto& state : adam_) {
      const TensorView& view = *state->view;
      for (size_t i = view.offset; i < view.offset + view.numel; i++) grads[i] = adam ? adam_grads[i] : 0.0f;
    }
    grads_.upload_raw(StandInModel::to_x(grads));
    MatmulContext context;
    const double momentum = settings_.schedule.muon_momentum(s);
    for (const auto& tensor : muon_) {
      const TensorView& view = *tensor->view;
      const size_t matrix = static_cast<size_t>(tensor->rows) * tensor->cols;
      if (tensor->fp32) {
        std::vector<float> g(grads.begin() + view.offset, grads.begin() + view.offset + view.numel);
        tensor->grad32->upload_raw(g);
        std::vector<float*> p;
        std::vector<const float*> gp;
        for (int m = 0; m < tensor->count; m++) p.push_back(tensor->master->get() + m * matrix), gp.push_back(tensor->grad32->get() + m * matrix);
        DeviceBuffer<float*> p_table(p);
        DeviceBuffer<const float*> g_table(gp);
        NorMuonBatch<float> batch;
        batch.count = tensor->count;
        batch.params = p_table.get();
        batch.grads = g_table.get();
        batch.momentum = reinterpret_cast<float*>(tensor->momentum->get());
        batch.variance = reinterpret_cast<float*>(tensor->variance->get());
        batch.lr_multipliers = tensor->lr_mul->get();
        tensor->runner->step(context, batch, settings_.muon_lr * lr, momentum, nullptr);
        const std::vector<float> master = tensor->master->download_raw();
        for (size_t i = 0; i < view.numel; i++) params_[view.offset + i] = from_float<floatX>(master[i]);
      } else {
        DeviceBuffer<floatX> param(std::vector<floatX>(params_.begin() + view.offset, params_.begin() + view.offset + view.numel));
        std::vector<floatX*> p;
        std::vector<const floatX*> gp;
        for (int m = 0; m < tensor->count; m++) p.push_back(param.get() + m * matrix), gp.push_back(grads_.get() + view.offset + m * matrix);
        DeviceBuffer<floatX*> p_table(p);
        DeviceBuffer<const floatX*> g_table(gp);
        NorMuonBatch<floatX> batch;
        batch.count = tensor->count;
        batch.params = p_table.get();
        batch.grads = g_table.get();
        batch.momentum = reinterpret_cast<floatX*>(tensor->momentum->get());
        batch.variance = reinterpret_cast<floatX*>(tensor->variance->get());
        batch.lr_multipliers = tensor->lr_mul->get();
        tensor->runner->step(context, batch, settings_.muon_lr * lr, momentum, nullptr);
        const std::vector<floatX> updated = param.download_raw();
        std::copy(updated.begin(), updated.end(), params_.begin() + view.offset);
      }
    }
    if (adam) {
      adam_updates_++;
      for (const auto& state : adam_) {
        const TensorView& view = *state->view;
        const SpeedrunTensor kind = speedrun_kind(view);
        const double mult = kind == SpeedrunTensor::kScalars ? kScalarLrMultiplier
                            : kind == SpeedrunTensor::kHead  ? kHeadLrMultiplier
                                                             : kEmbedLrMultiplier;
        const int rows = static_cast<int>(view.shape[0]);
        const int cols = static_cast<int>(view.numel / view.shape[0]);
        const AdamRowShard all{0, rows};
        if (kind == SpeedrunTensor::kScalars) {  // updated in fp32, the floatX slots a rounded copy
          DeviceBuffer<float> param(scalars32_);
          adam_sharded_update<float, float, floatX>(param.get(), grads_.get() + view.offset,
                                                    reinterpret_cast<float*>(state->m->get()),
                                                    reinterpret_cast<float*>(state->v->get()), cols, all,
                                                    kRecordAdam, settings_.adam_lr * mult * lr, adam_updates_,
                                                    nullptr);
          scalars32_ = param.download_raw();
          for (size_t i = 0; i < view.numel; i++) params_[view.offset + i] = from_float<floatX>(scalars32_[i]);
          continue;
        }
        DeviceBuffer<floatX> param(std::vector<floatX>(params_.begin() + view.offset, params_.begin() + view.offset + view.numel));
        adam_sharded_update<floatX, floatX>(param.get(), grads_.get() + view.offset, reinterpret_cast<floatX*>(state->m->get()),
                                            reinterpret_cast<floatX*>(state->v->get()), cols, all, kRecordAdam,
                                            settings_.adam_lr * mult * lr, adam_updates_, nullptr);
        const std::vector<floatX> updated = param.download_raw();
        std::copy(updated.begin(), updated.end(), params_.begin() + view.offset);
      }
    }
    // As the model's download_params(): the scalars in fp32.
    std::vector<float> out = StandInModel::to_f(params_);
    std::copy(scalars32_.begin(), scalars32_.end(), out.begin() + scalars_.offset);
    return out;
  }

 private:
  struct MuonState {
    const TensorView* view = nullptr;
    bool fp32 = false;
    int count = 1, rows = 0, cols = 0;
    std::unique_ptr<DeviceBuffer<char>> workspace, momentum, variance;
    std::unique_ptr<DeviceBuffer<float>> master, grad32, lr_mul;
    std::unique_ptr<NorMuonRunner> runner;
  };
  struct AdamState {
    const TensorView* view = nullptr;
    std::unique_ptr<DeviceBuffer<char>> m, v;
  };
  const SpeedrunLayout& layout_;
  SpeedrunOptimizerSettings settings_;
  std::vector<floatX> params_;
  DeviceBuffer<floatX> grads_;
  const TensorView& scalars_;
  std::vector<float> scalars32_;  // the scalars in fp32, as the optimizer keeps them
  std::vector<std::unique_ptr<MuonState>> muon_;
  std::vector<std::unique_ptr<AdamState>> adam_;
  long long adam_updates_ = 0;
};

// Bitwise: the same bits (NaN never expected).
bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

class SpeedrunOptimizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LLMC_REQUIRE_GPU();
    comm_ = &llmc::test::comm_context();
  }
  CommContext* comm_ = nullptr;
};

std::string ownership_name(const ::testing::TestParamInfo<Ownership>& info) {
  static const char* const names[] = {"Record", "AllOwned", "AllReplicated", "SplitTensors"};
  return names[static_cast<int>(info.param)];
}

class SpeedrunOptimizerOwnership : public SpeedrunOptimizerTest, public ::testing::WithParamInterface<Ownership> {};

TEST_P(SpeedrunOptimizerOwnership, StepsEqualTheCompositionOfNorMuonAndShardedAdam) {
  const int world = comm_->world_size();
  const SpeedrunLayout layout = make_speedrun_layout(speedrun_config_from_name("speedrun-tiny"), world);
  const StepInputs run = make_run(layout, 4);
  std::vector<float> norms;
  const std::vector<std::vector<float>> got = run_optimizer(*comm_, run, OverlapMode::kFull, GetParam(), &norms);
  Composition want(layout, run.params0, test_settings(OverlapMode::kFull));
  const size_t n = layout.total_size;
  for (size_t s = 0; s < run.grads.size(); s++) {
    const std::vector<float> muon = mean_over_ranks(n, world, [&](int r) { return rank_grads(run.grads[s], r); });
    // Each rank's two steps summed in floatX (odd steps; the even step before), then averaged.
    const std::vector<float> adam = s % 2 == 0 ? std::vector<float>(n, 0.0f) : mean_over_ranks(n, world, [&](int r) {
      std::vector<float> sum = rank_grads(run.grads[s - 1], r);
      const std::vector<float> odd = rank_grads(run.grads[s], r);
      for (size_t i = 0; i < n; i++) sum[i] = round_x(sum[i] + odd[i]);
      return sum;
    });
    const std::vector<float> expected = want.step(static_cast<int>(s) + 1, run.lrs[s], muon, adam);
    // The norm of what the optimizers used: Muon's averaged gradients, Adam's averaged sums on odd steps.
    // fp32 sums of ~10^5 squares in another order: relative 1e-5.
    double squares = 0.0;
    for (const TensorView& view : layout.tensors)
      for (size_t i = view.offset; i < view.offset + view.numel; i++) {
        const double g = view.group == ParamGroup::kMuon ? muon[i] : adam[i];
        squares += g * g;
      }
    EXPECT_NEAR(norms[s], std::sqrt(squares), 1e-5 * std::sqrt(squares)) << "step " << s + 1;
    for (const TensorView& view : layout.tensors) {
      size_t mismatches = 0, moved = 0;
      for (size_t i = view.offset; i < view.offset + view.numel; i++) {
        mismatches += !same_bits(got[s][i], expected[i]);
        moved += !same_bits(got[s][i], run.params0[i]);
      }
      EXPECT_EQ(mismatches, 0u) << view.name << " after step " << s + 1 << " on rank " << comm_->rank() << " of "
                                << world;
      const bool adam_unchanged = view.group == ParamGroup::kAdam && s == 0;  // Adam waits for step 2's gradients
      if (adam_unchanged)
        EXPECT_EQ(moved, 0u) << view.name << " moved on the even step";
      else
        EXPECT_GT(moved, view.numel / 2) << view.name << " did not move at step " << s + 1;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Arrangements, SpeedrunOptimizerOwnership,
                         ::testing::Values(Ownership::kRecord, Ownership::kAllOwned, Ownership::kAllReplicated,
                                           Ownership::kSplitTensors),
                         ownership_name);

// The scalars are fp32 parameters in the record (docs/optimizers.md#the-speedrun-optimizer-in-the-trainer):
// an Adam update of 4e-5, a hundred times below half of bf16's spacing at 1.0 (2^-8), must move them by what
// fp32 Adam gives, in both builds (a bf16 parameter would stay at 1.0). fp32: the update itself is good to a
// few ulps of 4e-5; the result is rounded once at 1.0, so one ulp of 1.0 (2^-23) bounds the difference.
TEST_F(SpeedrunOptimizerTest, ScalarUpdatesBelowBf16ResolutionAreKept) {
  const SpeedrunConfig config = speedrun_config_from_name("speedrun-tiny");
  const SpeedrunLayout layout = make_speedrun_layout(config, comm_->world_size());
  const TensorView& scalars = layout.tensor(SpeedrunTensor::kScalars);
  StandInModel model(config, comm_->world_size());
  std::vector<float> params(layout.total_size, 0.0f), grads(layout.total_size, 0.0f);
  for (size_t i = 0; i < scalars.numel; i++) {
    params[scalars.offset + i] = 1.0f;
    grads[scalars.offset + i] = i % 2 == 0 ? 1.0f : -1.0f;  // the same on every rank
  }
  model.upload_params(params);
  const SpeedrunOptimizerSettings settings = test_settings(OverlapMode::kFull);
  SpeedrunOptimizer optimizer(model, *comm_, settings);
  optimizer.init_master(model.download_params());
  const float lr = 1e-3f;
  for (int step = 1; step <= 2; step++) {  // Adam steps at step 2, on the sum of both steps' gradients
    model.set_grads(grads);
    enqueue_stand_in_step(model, optimizer, step, lr);
    optimizer.wait_for_all_params();
  }
  // The first Adam update of g = +-2: m = (1 - b1) g, v = (1 - b2) g^2, bias-corrected, in double.
  const double b1 = 0.65, b2 = 0.95, g = 2.0;  // the record's betas
  const double step_size = settings.adam_lr * kScalarLrMultiplier * lr * std::sqrt(1.0 - b2) / (1.0 - b1);
  const double update = step_size * (1.0 - b1) * g / (std::sqrt(1.0 - b2) * g + 1e-8);
  ASSERT_LT(update, std::ldexp(1.0, -8) / 50);    // far below half of bf16's spacing at 1.0
  ASSERT_GT(update, 100 * std::ldexp(1.0, -23));  // far above fp32's
  const std::vector<float> got = model.download_params();
  for (size_t i = 0; i < scalars.numel; i++) {
    const double want = i % 2 == 0 ? 1.0 - update : 1.0 + update;
    EXPECT_NEAR(got[scalars.offset + i], want, std::ldexp(1.0, -23)) << "scalar " << i;
  }
}

TEST_F(SpeedrunOptimizerTest, OverlapModesGiveBitwiseTheSameParameters) {
  const SpeedrunLayout layout = make_speedrun_layout(speedrun_config_from_name("speedrun-tiny"), comm_->world_size());
  const StepInputs run = make_run(layout, 4);
  std::vector<float> full_norms;
  const auto full = run_optimizer(*comm_, run, OverlapMode::kFull, Ownership::kRecord, &full_norms);
  for (OverlapMode mode : {OverlapMode::kNone, OverlapMode::kReduceScatter}) {
    std::vector<float> norms;
    const auto other = run_optimizer(*comm_, run, mode, Ownership::kRecord, &norms);
    for (size_t s = 0; s < full.size(); s++) EXPECT_TRUE(same_bits(norms[s], full_norms[s])) << "norm of step " << s + 1;
    for (size_t s = 0; s < full.size(); s++) {
      size_t mismatches = 0;
      for (size_t i = 0; i < full[s].size(); i++) mismatches += !same_bits(full[s][i], other[s][i]);
      EXPECT_EQ(mismatches, 0u) << "step " << s + 1 << " mode " << static_cast<int>(mode);
    }
  }
}

// The steps enqueued back to back, the host waiting only at the end (each step's gradients staged in the
// model's own buffer per step): only the optimizer's events order the next step's backward after this
// step's reads of the gradients. With the emulation dropping the compute stream's waits on the
// higher-priority streams (LLMC_EMU_DROP_WAITS_ON_PRIORITY_STREAMS=1, the ctest entry
// speedrun_optimizer_emu_dropped_waits) this must fail.
TEST_F(SpeedrunOptimizerTest, StepsEnqueuedBackToBackEqualStepsOneByOne) {
  const SpeedrunLayout layout = make_speedrun_layout(speedrun_config_from_name("speedrun-tiny"), comm_->world_size());
  const StepInputs run = make_run(layout, 4);
  const std::vector<float> want = run_optimizer(*comm_, run, OverlapMode::kFull).back();
  StandInModel model(speedrun_config_from_name("speedrun-tiny"), comm_->world_size());
  model.upload_params(run.params0);
  SpeedrunOptimizer optimizer(model, *comm_, test_settings(OverlapMode::kFull));
  optimizer.init_master(model.download_params());
  std::vector<std::unique_ptr<DeviceBuffer<floatX>>> staged;
  for (const std::vector<float>& grads : run.grads)
    staged.push_back(std::make_unique<DeviceBuffer<floatX>>(StandInModel::to_x(rank_grads(grads, comm_->rank()))));
  for (size_t s = 0; s < run.grads.size(); s++) {
    // On the compute stream: the backward copies from the staging buffer, so nothing here waits on the host.
    CUDA_CHECK(cudaMemcpyAsync(model.pending(), staged[s]->get(), staged[s]->bytes(), cudaMemcpyDeviceToDevice,
                               model.stream()));
    enqueue_stand_in_step(model, optimizer, static_cast<int>(s) + 1, run.lrs[s]);
  }
  optimizer.wait_for_all_params();
  const std::vector<float> got = model.download_params();
  size_t mismatches = 0;
  for (size_t i = 0; i < got.size(); i++) mismatches += !same_bits(got[i], want[i]);
  EXPECT_EQ(mismatches, 0u);
}

// A checkpoint's state: after step `cut` the state goes into a fresh model and optimizer (the parameters as
// the model file keeps them, floatX exactly), which continue to the last step bitwise as the uninterrupted
// run. Cut after step 1 (odd 1-based: step 2 adds the saved Adam gradients) and after step 2.
TEST_F(SpeedrunOptimizerTest, StateRestoredIntoAFreshOptimizerContinuesBitwise) {
  const SpeedrunLayout layout = make_speedrun_layout(speedrun_config_from_name("speedrun-tiny"), comm_->world_size());
  const StepInputs run = make_run(layout, 4);
  const std::vector<float> want = run_optimizer(*comm_, run, OverlapMode::kFull).back();
  auto step_through = [&](StandInModel& model, SpeedrunOptimizer& optimizer, int first, int last) {
    for (int step = first; step <= last; step++) {
      model.set_grads(rank_grads(run.grads[step - 1], comm_->rank()));
      enqueue_stand_in_step(model, optimizer, step, run.lrs[step - 1]);
      optimizer.wait_for_all_params();
    }
  };
  for (int cut : {1, 2}) {
    std::vector<NamedStateArray> state;
    std::vector<float> params;
    {
      StandInModel model(speedrun_config_from_name("speedrun-tiny"), comm_->world_size());
      model.upload_params(run.params0);
      SpeedrunOptimizer optimizer(model, *comm_, test_settings(OverlapMode::kFull));
      optimizer.init_master(model.download_params());
      step_through(model, optimizer, 1, cut);
      state = optimizer.download_state(cut);
      params = model.download_params();
    }
    const bool saved = std::any_of(state.begin(), state.end(), [](const NamedStateArray& array) {
      return array.name.find("adam.saved_grads") != std::string::npos;
    });
    EXPECT_EQ(saved, cut % 2 == 1) << "the saved Adam gradients are live after odd steps only";
    StandInModel model(speedrun_config_from_name("speedrun-tiny"), comm_->world_size());
    model.upload_params(params);
    SpeedrunOptimizer optimizer(model, *comm_, test_settings(OverlapMode::kFull));
    optimizer.init_master(params);
    // What does not fit is refused before anything is copied: a missing, an extra, a resized array, and
    // the state of another step's parity.
    std::vector<NamedStateArray> missing(state.begin(), state.end() - 1), extra = state, resized = state;
    extra.push_back(state.front());
    resized.front().bytes.resize(resized.front().bytes.size() - resized.front().element_bytes);
    for (const auto* bad : {&missing, &extra, &resized})
      EXPECT_THROW(optimizer.upload_state(*bad, cut), std::runtime_error) << "cut " << cut;
    EXPECT_THROW(optimizer.upload_state(state, cut + 1), std::runtime_error) << "cut " << cut;
    optimizer.upload_state(state, cut);
    step_through(model, optimizer, cut + 1, static_cast<int>(run.grads.size()));
    const std::vector<float> got = model.download_params();
    size_t mismatches = 0;
    for (size_t i = 0; i < got.size(); i++) mismatches += !same_bits(got[i], want[i]);
    EXPECT_EQ(mismatches, 0u) << "resumed after step " << cut;
  }
}

TEST_F(SpeedrunOptimizerTest, RefusesToStepWithoutMasters) {
  StandInModel model(speedrun_config_from_name("speedrun-tiny"), comm_->world_size());
  SpeedrunOptimizer optimizer(model, *comm_, test_settings(OverlapMode::kFull));
  EXPECT_THROW(optimizer.begin_step(1, 1.0f), std::logic_error);
}

}  // namespace
