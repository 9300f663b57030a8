// The 2026-07-17 record's NorMuon step on its banks (NorMuonRunner::step_bank, SPEEDRUN89.md section 5)
// against the float64 numpy oracle test/optim/optim_reference.py for a Q/K-, a V/O- and an MLP-shaped batch
// (the last through Polar Express's split update), the update kernel bit for bit against the oracle's
// float32 arithmetic, and the mantissa state carrying what a bf16 parameter alone would drop.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "llmc/kernels/normuon.cuh"
#include "llmc/optim/normuon.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"
#include "test/support/normuon_oracle_check.h"
#include "test/support/python_oracle.h"

namespace {

using namespace llmc::test;  // random_values, DeviceBuffer, kStorageRoundoff
using llmc::floatX;

constexpr bool kBf16Params = !std::is_same_v<floatX, float>;

// The fp32 master of a parameter: a bf16 parameter's bits above its mantissa state, or the fp32 parameter.
float master_of(floatX param, uint16_t mantissa) {
#if defined(LLMC_FP32)
  (void)mantissa;
  return param;
#else
  const uint32_t bits = (static_cast<uint32_t>(__bfloat16_as_ushort(param)) << 16) | mantissa;
  float master;
  std::memcpy(&master, &bits, sizeof master);
  return master;
#endif
}

std::string record_steps_json() {
  std::string steps = "[";
  for (const auto& s : llmc::polar_express_record_steps()) {
    char triple[128];
    std::snprintf(triple, sizeof triple, "%s[%.17g, %.17g, %.17g]", steps.size() > 1 ? ", " : "", s.a, s.b, s.c);
    steps += triple;
  }
  return steps + "]";
}

struct BankCase {
  std::string name;
  int count, rows, cols;
  std::vector<double> lr_mul;  // per matrix
  int split_above_rows;        // the settings' split_update_above_rows
};

struct BankState {
  std::vector<double> grads, momentum, variance;
  std::vector<floatX> params;
  std::vector<uint16_t> mantissas;
  std::vector<double> masters() const {
    std::vector<double> out(params.size());
    for (size_t i = 0; i < params.size(); i++) out[i] = master_of(params[i], mantissas[i]);
    return out;
  }
};

BankState random_bank_state(const BankCase& c, bool per_column, unsigned seed) {
  std::mt19937 rng(seed);
  const size_t n = static_cast<size_t>(c.count) * c.rows * c.cols,
               stats = static_cast<size_t>(c.count) * (per_column ? c.cols : c.rows);
  BankState s;
  s.grads = random_values(n, rng);  // floatX-representable
  s.momentum = random_values(n, rng, -0.5, 0.5);
  for (double& m : s.momentum) m = static_cast<float>(m);
  const double typical = 1.0 / std::max(c.rows, c.cols);
  s.variance = random_values(stats, rng, 0.2 * typical, 2.0 * typical);
  for (double& v : s.variance) v = static_cast<float>(v);
  const std::vector<double> params = random_values(n, rng, -0.1, 0.1);
  std::uniform_int_distribution<int> low_half(0, 0xFFFF);
  for (size_t i = 0; i < n; i++) {
    s.params.push_back(llmc::from_float<floatX>(static_cast<float>(params[i])));
    s.mantissas.push_back(kBf16Params ? static_cast<uint16_t>(low_half(rng)) : 0);
  }
  return s;
}

BankState run_bank_step(const BankCase& c, const BankState& before, double lr, double mu) {
  const llmc::NorMuonShapeRules rules = llmc::normuon_shape_rules(c.rows, c.cols);
  const size_t matrix = static_cast<size_t>(c.rows) * c.cols;
  DeviceBuffer<floatX> grads(before.grads.size()), params(before.params);
  DeviceBuffer<float> momentum(before.momentum.size()), variance(before.variance.size()), lr_mul(c.count);
  DeviceBuffer<uint16_t> mantissas(before.mantissas);
  grads.upload(before.grads);
  momentum.upload(before.momentum);
  variance.upload(before.variance);
  lr_mul.upload(c.lr_mul);
  std::vector<floatX*> param_pointers(c.count);
  std::vector<const floatX*> grad_pointers(c.count);
  for (int b = 0; b < c.count; b++) {
    param_pointers[b] = params.get() + b * matrix;
    grad_pointers[b] = grads.get() + b * matrix;
  }
  DeviceBuffer<floatX*> param_table(param_pointers);
  DeviceBuffer<const floatX*> grad_table(grad_pointers);
  llmc::NorMuonSettings settings = llmc::NorMuonSettings::record_2026();
  settings.split_update_above_rows = c.split_above_rows;
  DeviceBuffer<char> workspace(llmc::NorMuonRunner::workspace_bytes(c.rows, c.cols, rules.variance_per_column, c.count));
  llmc::NorMuonRunner runner(c.rows, c.cols, rules, c.count, workspace.get(), workspace.size(), settings);
  llmc::NorMuonBankBatch batch;
  batch.count = c.count;
  batch.params = param_table.get();
  batch.grads = grad_table.get();
  batch.momentum = momentum.get();
  batch.variance = variance.get();
  batch.mantissas = mantissas.get();
  batch.lr_multipliers = lr_mul.get();
  llmc::MatmulContext context;
  runner.step_bank(context, batch, lr, mu, nullptr);
  BankState after;
  after.grads = before.grads;
  after.params = params.download_raw();
  after.mantissas = mantissas.download_raw();
  after.momentum = momentum.download();
  after.variance = variance.download();
  return after;
}

class NorMuonBank : public llmc::test::OracleTest {};

// Per matrix: the master's update, the momentum and the variance within the largest error of the oracle's
// noisy replicas (every stored value perturbed by its roundoff plus the fp32 operations feeding it).
void check_bank_step(const llmc::test::PythonOracle& oracle, const BankCase& c, unsigned seed) {
  const llmc::NorMuonShapeRules rules = llmc::normuon_shape_rules(c.rows, c.cols);
  const BankState before = random_bank_state(c, rules.variance_per_column, seed);
  const double lr = 0.023 * 1.3546, mu = 0.9;  // the record's lr factor at step 600, a warm-up momentum
  const BankState after = run_bank_step(c, before, lr, mu);
  const llmc::NorMuonSettings settings = llmc::NorMuonSettings::record_2026();

  const size_t count = c.count, rows = c.rows, cols = c.cols, stats = rules.variance_per_column ? cols : rows;
  const std::vector<double> master_before = before.masters(), master_after = after.masters();
  oracle.put("grads", {count, rows, cols}, before.grads);
  oracle.put("master", {count, rows, cols}, master_before);
  oracle.put("momentum", {count, rows, cols}, before.momentum);
  oracle.put("variance", {count, stats}, before.variance);
  oracle.put("lr_mul", {count}, c.lr_mul);
  char json[1024];
  std::snprintf(json, sizeof json,
                "{\"storage_roundoff\": %.17g, \"momentum\": %.17g, \"lr\": %.17g, \"weight_decay\": %.17g, "
                "\"beta2\": %.17g, \"shape_scale\": %.17g, \"per_column\": %s, \"split_above_rows\": %d, "
                "\"steps\": %s}",
                kStorageRoundoff, mu, lr, settings.weight_decay, settings.beta2, rules.lr_scale,
                rules.variance_per_column ? "true" : "false", c.split_above_rows, record_steps_json().c_str());
  oracle.config(json);
  oracle.run("normuon_bank");
  expect_step_matches_oracle(oracle, c.name, "master", c.count, rows * cols, stats,
                             {master_before, master_after, after.momentum, after.variance});
}

// Q/K: wide [256, 768] matrices in the record, per-column variance.
TEST_F(NorMuonBank, QkShapedMatricesMatchFloat64) {
  LLMC_REQUIRE_GPU();
  check_bank_step(oracle(), {"qk", 4, 8, 24, {1, 1, 1, 1}, 1024}, 900);
}

// V/O: square, per-row variance.
TEST_F(NorMuonBank, VoShapedMatricesMatchFloat64) {
  LLMC_REQUIRE_GPU();
  check_bank_step(oracle(), {"vo", 3, 16, 16, {1, 1, 1}, 1024}, 910);
}

// MLP: tall 4:1 (lr scale 2) with c_proj's x2, through the split update (the record's above 1,024 rows,
// here above 32 so that a small shape takes it).
TEST_F(NorMuonBank, MlpShapedPairThroughTheSplitUpdateMatchesFloat64) {
  LLMC_REQUIRE_GPU();
  check_bank_step(oracle(), {"mlp", 2, 64, 16, {1, 2}, 32}, 920);
}

// The update kernel alone, bit for bit against the oracle's float32 arithmetic: the bf16 scale, the cautious
// mask both ways, c_proj's x2, the master's two halves.
TEST_F(NorMuonBank, UpdateKernelIsBitwiseTheRecordsFloat32Arithmetic) {
  LLMC_REQUIRE_GPU();
  const int count = 2, rows = 6, cols = 10;
  const size_t n = static_cast<size_t>(count) * rows * cols;
  std::mt19937 rng(930);
  const std::vector<double> x = random_values(n, rng), steps_values = random_values(count * rows, rng, 10.0, 60.0),
                            ratio_values = random_values(count, rng, 0.5, 1.5);
  BankState state = random_bank_state({"update", count, rows, cols, {1, 2}, 0}, false, 931);
  DeviceBuffer<floatX> dx(n), params(state.params);
  DeviceBuffer<float> steps(count * rows), ratios(count), lr_mul(count);
  DeviceBuffer<uint16_t> mantissas(state.mantissas);
  dx.upload(x);
  steps.upload(steps_values);
  ratios.upload(ratio_values);
  lr_mul.upload({1.0, 2.0});
  std::vector<floatX*> pointers = {params.get(), params.get() + rows * cols};
  DeviceBuffer<floatX*> table(pointers);
  const double lr = 0.023 * 0.9123, weight_decay = 1.2, shape_scale = 2.0;
  llmc::normuon_apply_mantissa<floatX>(dx.get(), steps.get(), ratios.get(), table.get(),
                                       kBf16Params ? mantissas.get() : nullptr, lr_mul.get(), count, rows, cols,
                                       /*per_column=*/false, lr, weight_decay, shape_scale, nullptr);

  const llmc::test::PythonOracle o = oracle();
  const size_t c3 = count, r3 = rows, k3 = cols;
  o.put("x", {c3, r3, k3}, dx.download());
  o.put("steps", {c3, r3}, steps.download());
  o.put("ratios", {c3}, ratio_values);
  o.put("lr_mul", {c3}, {1.0, 2.0});
  std::vector<double> param_bits(n), mantissa_values(n), param_values(n);
  for (size_t i = 0; i < n; i++) {
    const float master = master_of(state.params[i], state.mantissas[i]);
    uint32_t bits;
    std::memcpy(&bits, &master, sizeof bits);
    param_bits[i] = bits >> 16;
    mantissa_values[i] = bits & 0xFFFF;
    param_values[i] = master;
  }
  o.put("param_bits", {c3, r3, k3}, param_bits);
  o.put("mantissas", {c3, r3, k3}, mantissa_values);
  o.put("params", {c3, r3, k3}, param_values);
  char json[256];
  std::snprintf(json, sizeof json,
                "{\"param_bf16\": %s, \"per_column\": false, \"lr_times_shape\": %.9g, \"wd_lr\": %.9g}",
                kBf16Params ? "true" : "false", static_cast<float>(lr * shape_scale),
                static_cast<float>(lr * weight_decay));
  o.config(json);
  o.run("mantissa_update");
  const std::vector<floatX> got_params = params.download_raw();
  const std::vector<uint16_t> got_mantissas = mantissas.download_raw();
  int decayed = 0;
  if (kBf16Params) {
    const std::vector<double> want_bits = o.get("param_bits_out"), want_mantissas = o.get("mantissas_out");
    for (size_t i = 0; i < n; i++) {
      const float got = master_of(got_params[i], got_mantissas[i]);
      uint32_t bits;
      std::memcpy(&bits, &got, sizeof bits);
      ASSERT_EQ(bits >> 16, static_cast<uint32_t>(want_bits[i])) << "element " << i;
      ASSERT_EQ(bits & 0xFFFF, static_cast<uint32_t>(want_mantissas[i])) << "element " << i;
    }
  } else {
    const std::vector<double> want = o.get("params_out");
    for (size_t i = 0; i < n; i++) ASSERT_EQ(llmc::to_float(got_params[i]), want[i]) << "element " << i;
  }
  for (size_t i = 0; i < n; i++) decayed += x[i] * param_values[i] >= 0;
  EXPECT_GT(decayed, 0) << "the case must decay somewhere";
  EXPECT_LT(decayed, static_cast<int>(n)) << "and leave somewhere undecayed";
}

// Updates of 1/32 of a bf16 ulp: a bf16 parameter alone would never move; through the mantissa state the
// master climbs exactly, and the parameter shows it only when the master crosses the next bf16 value
// (truncation: 31/32 of an ulp still reads as the old value, where rounding would already show the next).
TEST_F(NorMuonBank, MantissaCarriesUpdatesBelowHalfAnUlp) {
  LLMC_REQUIRE_GPU();
  DeviceBuffer<floatX> x(1), param(1);
  DeviceBuffer<float> steps(1), ratios(1), lr_mul(1);
  DeviceBuffer<uint16_t> mantissa(1);
  x.upload({-1.0});
  param.upload({1.0});
  steps.upload({1.0});
  ratios.upload({1.0});
  lr_mul.upload({1.0});
  mantissa.fill_zero();
  std::vector<floatX*> pointers = {param.get()};
  DeviceBuffer<floatX*> table(pointers);
  const double lr = std::ldexp(1.0, -12);  // 1/32 of bf16's ulp at 1.0 (2^-7); no decay: x p < 0
  for (int step = 1; step <= 32; step++) {
    llmc::normuon_apply_mantissa<floatX>(x.get(), steps.get(), ratios.get(), table.get(),
                                         kBf16Params ? mantissa.get() : nullptr, lr_mul.get(), 1, 1, 1, true, lr, 1.2,
                                         1.0, nullptr);
    const double master = master_of(param.download_raw()[0], mantissa.download_raw()[0]);
    ASSERT_EQ(master, 1.0 + step * lr) << "after step " << step;
    if (kBf16Params && step == 31) {
      EXPECT_EQ(param.download()[0], 1.0) << "truncated, not rounded";
    }
  }
  EXPECT_EQ(param.download()[0], 1.0 + std::ldexp(1.0, -7));
}

TEST_F(NorMuonBank, StepIsBitwiseRepeatableAndNeedsItsMantissas) {
  LLMC_REQUIRE_GPU();
  const BankCase c{"mlp", 2, 64, 16, {1, 2}, 32};
  const BankState before = random_bank_state(c, false, 940);
  const BankState first = run_bank_step(c, before, 0.023, 0.95), second = run_bank_step(c, before, 0.023, 0.95);
  EXPECT_TRUE(bitwise_equal(first.masters(), second.masters()));
  EXPECT_TRUE(bitwise_equal(first.momentum, second.momentum));
  EXPECT_TRUE(bitwise_equal(first.variance, second.variance));
  const llmc::NorMuonShapeRules rules = llmc::normuon_shape_rules(8, 16);
  DeviceBuffer<char> workspace(llmc::NorMuonRunner::workspace_bytes(8, 16, rules.variance_per_column, 2));
  llmc::NorMuonRunner runner(8, 16, rules, 2, workspace.get(), workspace.size(), llmc::NorMuonSettings::record_2026());
  llmc::NorMuonBankBatch batch;
  llmc::MatmulContext context;
  batch.count = 3;
  EXPECT_THROW(runner.step_bank(context, batch, 0.023, 0.95, nullptr), std::invalid_argument);
#if !defined(LLMC_FP32)
  batch.count = 2;
  EXPECT_THROW(runner.step_bank(context, batch, 0.023, 0.95, nullptr), std::invalid_argument);
#endif
}

}  // namespace
