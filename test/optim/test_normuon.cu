// One NorMuon step (llmc/optim/normuon.h) against the float64 numpy oracle test/optim/optim_reference.py
// for the record's kinds of batches (an attention tensor's four matrices, an MLP pair with W_fc's lr x2,
// the ten bf16 attention gates, a tall parameter), plus the momentum kernel against a direct double
// computation, the rounding of the gates' effective rates, the shape rules and repeatability.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "llmc/kernels/normuon.cuh"
#include "llmc/optim/normuon.h"
#include "test/support/captured_graph.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"
#include "test/support/normuon_oracle_check.h"
#include "test/support/python_oracle.h"

namespace {

using namespace llmc::test;  // random_values, DeviceBuffer, kStorageRoundoff, all_close
using llmc::floatX;

template <typename P>
constexpr double roundoff() {
  return std::is_same_v<P, float> ? kFp32Roundoff : kStorageRoundoff;
}

template <typename P>
std::vector<double> round_to_p(std::vector<double> values) {
  for (double& v : values) v = llmc::to_float(llmc::from_float<P>(static_cast<float>(v)));
  return values;
}

// One batch of `count` matrices with every input the step reads, and what the device made of it.
struct NorMuonCase {
  std::string name;
  int count, rows, cols;       // matrices of the batch
  int param_rows, param_cols;  // the stored parameter's shape (decides the shape rules)
  std::vector<double> lr_mul;  // per matrix
};

template <typename P>
struct NorMuonState {
  std::vector<double> grads, params, momentum, variance;
};

template <typename P>
NorMuonState<P> random_state(const NorMuonCase& c, bool per_column, unsigned seed) {
  std::mt19937 rng(seed);
  const size_t n = static_cast<size_t>(c.count) * c.rows * c.cols,
               stats = static_cast<size_t>(c.count) * (per_column ? c.cols : c.rows);
  NorMuonState<P> s;
  s.grads = round_to_p<P>(random_values(n, rng));
  s.params = round_to_p<P>(random_values(n, rng, -0.1, 0.1));
  s.momentum = round_to_p<P>(random_values(n, rng, -0.5, 0.5));
  // A running mean of squares of an orthogonalised matrix: entries ~ 1 / max(rows, cols).
  const double typical = 1.0 / std::max(c.rows, c.cols);
  s.variance = round_to_p<P>(random_values(stats, rng, 0.2 * typical, 2.0 * typical));
  return s;
}

// Runs one NorMuonRunner step on the device; returns the state after it. G: the gradients' type (P, or floatX
// under fp32 masters); with `copies`, the step also writes each master's floatX copy, returned there.
// How run_device_step passes the step's values: fixed at launch, or read from the device by a captured step
// (llmc/cuda/step_scalar.h), captured while the device holds other values and launched after they are written.
enum class StepValuesAt { kLaunch, kDeviceCaptured };

template <typename P, typename G = P>
NorMuonState<P> run_device_step(const NorMuonCase& c, const NorMuonState<P>& before, double lr, double mu,
                                std::vector<double>* copies = nullptr,
                                StepValuesAt values_at = StepValuesAt::kLaunch) {
  const llmc::NorMuonShapeRules rules = llmc::normuon_shape_rules(c.param_rows, c.param_cols);
  const size_t matrix = static_cast<size_t>(c.rows) * c.cols;
  DeviceBuffer<G> grads(before.grads.size());
  DeviceBuffer<P> params(before.params.size()), momentum(before.momentum.size()), variance(before.variance.size());
  DeviceBuffer<floatX> copy_values(before.params.size());
  grads.upload(before.grads);
  params.upload(before.params);
  momentum.upload(before.momentum);
  variance.upload(before.variance);
  std::vector<P*> param_pointers(c.count);
  std::vector<const G*> grad_pointers(c.count);
  std::vector<floatX*> copy_pointers(c.count);
  for (int b = 0; b < c.count; b++) {
    param_pointers[b] = params.get() + b * matrix;
    grad_pointers[b] = grads.get() + b * matrix;
    copy_pointers[b] = copy_values.get() + b * matrix;
  }
  DeviceBuffer<P*> param_table(param_pointers);
  DeviceBuffer<const G*> grad_table(grad_pointers);
  DeviceBuffer<floatX*> copy_table(copy_pointers);
  DeviceBuffer<float> lr_mul(c.count);
  lr_mul.upload(c.lr_mul);
  DeviceBuffer<char> workspace(
      llmc::NorMuonRunner::workspace_bytes(c.rows, c.cols, rules.variance_per_column, c.count));
  llmc::NorMuonRunner runner(c.rows, c.cols, rules, c.count, workspace.get(), workspace.size());
  llmc::NorMuonBatch<P, G> batch;
  batch.count = c.count;
  batch.params = param_table.get();
  batch.grads = grad_table.get();
  batch.momentum = momentum.get();
  batch.variance = variance.get();
  batch.lr_multipliers = lr_mul.get();
  if (copies != nullptr) batch.copies = copy_table.get();
  llmc::MatmulContext context;
  if (values_at == StepValuesAt::kLaunch) {
    runner.step(context, batch, lr, mu, nullptr);
  } else {
    const llmc::NorMuonStepValues values = runner.step_values(lr, mu), decoy = runner.step_values(2 * lr, mu / 2);
    DeviceBuffer<float> device_values(std::vector<float>{&decoy.mu, &decoy.mu + 4});
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    {
      const llmc::test::CapturedGraph graph(
          stream, [&] { runner.step(context, batch, llmc::NorMuonStepScalars::at(device_values.get()), stream); });
      device_values.upload_raw(std::vector<float>{&values.mu, &values.mu + 4});
      graph.launch(stream);
      CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    CUDA_CHECK(cudaStreamDestroy(stream));
  }
  NorMuonState<P> after;
  after.grads = before.grads;
  after.params = params.download();
  after.momentum = momentum.download();
  after.variance = variance.download();
  if (copies != nullptr) *copies = copy_values.download();
  return after;
}

// The suite's fixture: each test's own temporary directory for the oracle's files.
class NorMuon : public llmc::test::OracleTest {};

// Per matrix: the relative Frobenius error of the parameter update, the momentum and the variance buffer,
// each within the largest of the oracle's noisy replicas (every stored value perturbed by its roundoff
// plus the fp32 operations and sums feeding it).
template <typename P>
void check_step_against_oracle(const llmc::test::PythonOracle& oracle, const NorMuonCase& c, unsigned seed) {
  const llmc::NorMuonShapeRules rules = llmc::normuon_shape_rules(c.param_rows, c.param_cols);
  const NorMuonState<P> before = random_state<P>(c, rules.variance_per_column, seed);
  const double lr = 0.03 * 0.6755, mu = 0.9;  // the lr schedule at step 1500, a momentum of the warm-up
  const llmc::NorMuonSettings settings;
  const NorMuonState<P> after = run_device_step<P>(c, before, lr, mu);

  const size_t count = c.count, rows = c.rows, cols = c.cols, stats = rules.variance_per_column ? cols : rows;
  oracle.put("grads", {count, rows, cols}, before.grads);
  oracle.put("params", {count, rows, cols}, before.params);
  oracle.put("momentum", {count, rows, cols}, before.momentum);
  oracle.put("variance", {count, stats}, before.variance);
  oracle.put("lr_mul", {count}, c.lr_mul);
  std::string steps = "[";
  for (const auto& s : llmc::polar_express_record_steps()) {
    char triple[128];
    std::snprintf(triple, sizeof triple, "%s[%.17g, %.17g, %.17g]", steps.size() > 1 ? ", " : "", s.a, s.b, s.c);
    steps += triple;
  }
  char json[1024];
  std::snprintf(json, sizeof json,
                "{\"storage_roundoff\": %.17g, \"param_roundoff\": %.17g, \"param_bf16\": %s, \"momentum\": %.17g, "
                "\"lr\": %.17g, \"weight_decay\": %.17g, \"beta2\": %.17g, \"shape_scale\": %.17g, "
                "\"per_column\": %s, \"steps\": %s]}",
                kStorageRoundoff, roundoff<P>(), std::is_same_v<P, float> ? "false" : "true", mu, lr,
                settings.weight_decay, settings.beta2, rules.lr_scale, rules.variance_per_column ? "true" : "false",
                steps.c_str());
  oracle.config(json);
  oracle.run("normuon");
  expect_step_matches_oracle(oracle, c.name, "params", c.count, rows * cols, stats,
                             {before.params, after.params, after.momentum, after.variance});
}

TEST_F(NorMuon, AttentionTensorAsFourMatricesMatchesFloat64) {
  LLMC_REQUIRE_GPU();
  check_step_against_oracle<float>(oracle(), {"attention", 4, 16, 16, 16, 64, {1, 1, 1, 1}}, 800);
}

TEST_F(NorMuon, MlpPairWithFcLrMultiplierMatchesFloat64) {
  LLMC_REQUIRE_GPU();
  check_step_against_oracle<float>(oracle(), {"mlp", 2, 16, 64, 16, 64, {2, 1}}, 810);
}

TEST_F(NorMuon, AttentionGatesInParameterPrecisionMatchFloat64) {
  LLMC_REQUIRE_GPU();
  check_step_against_oracle<floatX>(oracle(), {"gates", 10, 6, 12, 6, 12, std::vector<double>(10, 1.0)}, 820);
}

TEST_F(NorMuon, TallParameterPerRowVarianceMatchesFloat64) {
  LLMC_REQUIRE_GPU();
  check_step_against_oracle<float>(oracle(), {"tall", 1, 48, 16, 48, 16, {1}}, 830);
}

// The momentum kernel alone against double: buffer = lerp(buffer, g, 1 - mu), one rounding to P after
// 3 fp32 operations; u = lerp(g, buffer, mu) rounded to P and then to floatX.
TEST_F(NorMuon, MomentumKernelMatchesDouble) {
  LLMC_REQUIRE_GPU();
  const int count = 3;
  const size_t n = 40;
  const double mu = 0.87;
  std::mt19937 rng(840);
  const std::vector<double> g = random_values(count * n, rng), buffer = random_values(count * n, rng);
  DeviceBuffer<float> grads(count * n), momentum(count * n);
  DeviceBuffer<floatX> u(count * n);
  grads.upload(g);
  momentum.upload(buffer);
  std::vector<const float*> pointers;
  for (int b = 0; b < count; b++) pointers.push_back(grads.get() + b * n);
  DeviceBuffer<const float*> table(count);
  table.upload_raw(pointers);
  llmc::normuon_momentum<float>(table.get(), momentum.get(), u.get(), count, n, mu, nullptr);
  std::vector<double> want_buffer(count * n), want_u(count * n);
  for (size_t i = 0; i < count * n; i++) {
    want_buffer[i] = mu * buffer[i] + (1 - mu) * g[i];
    want_u[i] = (1 - mu) * g[i] + mu * want_buffer[i];
  }
  EXPECT_TRUE(all_close(momentum.download(), want_buffer, 2.0 * 4 * kFp32Roundoff));
  EXPECT_TRUE(all_close(u.download(), want_u, tolerance(1, 8)));
}

// The gates' effective lr is a P number: with lr = 1.0035 (bf16: 1.0), X = 3, p = 0, no decay, step and
// ratio 1, the update is -P(P(lr) * 3): -3.0 in bf16, where an unrounded lr would give -3.015625.
TEST_F(NorMuon, GateEffectiveRatesAreRoundedToTheParameterType) {
  LLMC_REQUIRE_GPU();
  DeviceBuffer<floatX> x(1), param(1);
  DeviceBuffer<float> steps(1), ratios(1), lr_mul(1);
  x.upload({3.0});
  param.upload({0.0});
  steps.upload({1.0});
  ratios.upload({1.0});
  lr_mul.upload({1.0});
  std::vector<floatX*> pointers = {param.get()};
  DeviceBuffer<floatX*> table(1);
  table.upload_raw(pointers);
  const double lr = 1.0035;
  llmc::normuon_apply<floatX>(x.get(), steps.get(), ratios.get(), table.get(), nullptr, lr_mul.get(), 1, 1, 1, true, lr,
                              0.0, 1.0, nullptr);
  const double want = llmc::to_float(llmc::from_float<floatX>(-llmc::round_to<floatX>(static_cast<float>(lr)) * 3.0f));
  EXPECT_EQ(param.download()[0], want);
#if !defined(LLMC_FP32)
  EXPECT_EQ(want, -3.0);
  EXPECT_NE(want, llmc::to_float(llmc::from_float<floatX>(static_cast<float>(-lr * 3.0))))
      << "the case must discriminate";
#endif
}

// Cautious weight decay: decay only where the update and the parameter agree in sign (or either is 0).
TEST_F(NorMuon, CautiousWeightDecayOnlyWhereSignsAgree) {
  LLMC_REQUIRE_GPU();
  const std::vector<double> x = {0.5, 0.5, -0.5, -0.5, 0.0, 0.5}, p = {0.25, -0.25, 0.25, -0.25, 0.25, 0.0};
  DeviceBuffer<floatX> dx(6);
  DeviceBuffer<float> param(6), steps(6), ratios(1), lr_mul(1);
  dx.upload(x);
  param.upload(p);
  steps.upload(std::vector<double>(6, 1.0));
  ratios.upload({1.0});
  lr_mul.upload({1.0});
  std::vector<float*> pointers = {param.get()};
  DeviceBuffer<float*> table(1);
  table.upload_raw(pointers);
  const double lr = 0.5, wd = 0.5;  // powers of two: every product below is exact
  llmc::normuon_apply<float>(dx.get(), steps.get(), ratios.get(), table.get(), nullptr, lr_mul.get(), 1, 1, 6, true,
                             lr, wd, 1.0, nullptr);
  std::vector<double> want(6);
  for (int i = 0; i < 6; i++) want[i] = p[i] - lr * (x[i] * p[i] >= 0 ? x[i] + lr * wd * p[i] : x[i]);
  EXPECT_EQ(param.download(), want);
}

TEST_F(NorMuon, ShapeRulesFollowTheStoredParameter) {
  const llmc::NorMuonShapeRules wide = llmc::normuon_shape_rules(768, 3072);
  EXPECT_TRUE(wide.variance_per_column);
  EXPECT_EQ(wide.lr_scale, 1.0);
  const llmc::NorMuonShapeRules tall = llmc::normuon_shape_rules(3072, 768);
  EXPECT_FALSE(tall.variance_per_column);
  EXPECT_EQ(tall.lr_scale, 2.0);
  EXPECT_FALSE(llmc::normuon_shape_rules(768, 768).variance_per_column);  // rows >= cols: per row
  EXPECT_TRUE(llmc::normuon_shape_rules(6, 12).variance_per_column);
}

TEST_F(NorMuon, StepIsBitwiseRepeatable) {
  LLMC_REQUIRE_GPU();
  const NorMuonCase c{"mlp", 2, 16, 64, 16, 64, {2, 1}};
  const NorMuonState<float> before = random_state<float>(c, true, 850);
  const NorMuonState<float> first = run_device_step<float>(c, before, 0.03, 0.95);
  const NorMuonState<float> second = run_device_step<float>(c, before, 0.03, 0.95);
  EXPECT_TRUE(bitwise_equal(first.params, second.params));
  EXPECT_TRUE(bitwise_equal(first.momentum, second.momentum));
  EXPECT_TRUE(bitwise_equal(first.variance, second.variance));
}

// An fp32 master's step over the model's floatX gradients (read widened, exactly) that also writes the model's
// floatX parameters (NorMuonBatch::copies): the masters, momentum and variance bit for bit those of the step over
// the gradients widened into fp32 first, and each copy the master rounded to floatX (what the separate
// convert passes before and after the step gave).
TEST_F(NorMuon, FloatXGradientsAndCopiesGiveTheWidenedStepAndItsCast) {
  LLMC_REQUIRE_GPU();
  const NorMuonCase c{"mlp", 2, 16, 64, 16, 64, {2, 1}};
  NorMuonState<float> before = random_state<float>(c, llmc::normuon_shape_rules(16, 64).variance_per_column, 851);
  before.grads = round_to_p<floatX>(before.grads);  // what a floatX gradient holds
  const NorMuonState<float> want = run_device_step<float>(c, before, 0.03, 0.95);
  std::vector<double> copies;
  const NorMuonState<float> got = run_device_step<float, floatX>(c, before, 0.03, 0.95, &copies);
  EXPECT_TRUE(bitwise_equal(got.params, want.params));
  EXPECT_TRUE(bitwise_equal(got.momentum, want.momentum));
  EXPECT_TRUE(bitwise_equal(got.variance, want.variance));
  EXPECT_TRUE(bitwise_equal(copies, round_to_p<floatX>(want.params)));
}

// A step captured in a CUDA graph reads its rate and momentum from the device as it runs (NorMuonStepScalars::at):
// captured while the device held other values and launched after the step's were written, it is bit for bit the
// step with the values fixed at launch.
TEST_F(NorMuon, CapturedStepReadsItsValuesFromTheDevice) {
  LLMC_REQUIRE_GPU();
  const NorMuonCase c{"mlp", 2, 16, 64, 16, 64, {2, 1}};
  const NorMuonState<float> before = random_state<float>(c, llmc::normuon_shape_rules(16, 64).variance_per_column, 852);
  const NorMuonState<float> want = run_device_step<float>(c, before, 0.03, 0.95);
  const NorMuonState<float> got =
      run_device_step<float>(c, before, 0.03, 0.95, nullptr, StepValuesAt::kDeviceCaptured);
  EXPECT_TRUE(bitwise_equal(got.params, want.params));
  EXPECT_TRUE(bitwise_equal(got.momentum, want.momentum));
  EXPECT_TRUE(bitwise_equal(got.variance, want.variance));
}

TEST_F(NorMuon, RunnerRejectsBadWorkspaceAndCount) {
  LLMC_REQUIRE_GPU();
  const llmc::NorMuonShapeRules rules = llmc::normuon_shape_rules(8, 16);
  const size_t bytes = llmc::NorMuonRunner::workspace_bytes(8, 16, rules.variance_per_column, 2);
  DeviceBuffer<char> workspace(bytes);
  EXPECT_THROW(llmc::NorMuonRunner(8, 16, rules, 2, workspace.get(), bytes - 1), std::invalid_argument);
  EXPECT_THROW(llmc::NorMuonRunner(8, 0, rules, 2, workspace.get(), bytes), std::invalid_argument);
  llmc::NorMuonRunner runner(8, 16, rules, 2, workspace.get(), bytes);
  llmc::NorMuonBatch<float> batch;
  batch.count = 3;
  llmc::MatmulContext context;
  EXPECT_THROW(runner.step(context, batch, 0.03, 0.95, nullptr), std::invalid_argument);
}

}  // namespace
