// The speedrun's sharded Adam (llmc/kernels/adam_sharded.cuh) against the float64 numpy oracle
// test/optim/optim_reference.py: a bf16 table's row shard (bf16 m, v, parameter) and the fp32 scalars'
// shard over the first two updates (bias correction at t = 1 and t = 2), rows outside the shard untouched;
// the row shards, the step size, and repeatability.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "llmc/kernels/adam_sharded.cuh"
#include "test/support/captured_graph.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"
#include "test/support/python_oracle.h"

namespace {

using namespace llmc::test;  // random_values, DeviceBuffer, kStorageRoundoff
using llmc::floatX;

template <typename T>
constexpr double parameter_roundoff() {
  return std::is_same_v<T, float> ? kFp32Roundoff : kStorageRoundoff;
}

template <typename T>
std::vector<double> round_to_t(std::vector<double> values) {
  for (double& v : values) v = llmc::to_float(llmc::from_float<T>(static_cast<float>(v)));
  return values;
}

std::vector<double> rows_of(const std::vector<double>& values, int cols, llmc::AdamRowShard shard) {
  return std::vector<double>(values.begin() + static_cast<size_t>(shard.row_begin) * cols,
                             values.begin() + static_cast<size_t>(shard.row_end) * cols);
}

// The suite's fixture: each test's own temporary directory for the oracle's files.
class AdamSharded : public llmc::test::OracleTest {};

// Every element within the oracle's bound (see mode_adam there for the derivation).
::testing::AssertionResult within_bound(const std::vector<double>& got, const std::vector<double>& want,
                                        const std::vector<double>& bound, const char* what) {
  for (size_t i = 0; i < got.size(); i++)
    if (!(std::fabs(got[i] - want[i]) <= bound[i]))
      return ::testing::AssertionFailure()
             << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << ", bound " << bound[i];
  return ::testing::AssertionSuccess();
}

// Two updates of rows [shard) of a [rows, cols] tensor of P with state S; each checked against the oracle
// given the device's state before it (so that the second checks t = 2 on its own).
template <typename P, typename S>
void check_two_updates(const llmc::test::OracleTest& test, int rows, int cols, int world, int rank, double lr,
                       unsigned seed, const llmc::AdamShardedSettings& settings = llmc::AdamShardedSettings()) {
  const llmc::AdamRowShard shard = llmc::adam_row_shard(rows, world, rank);
  const size_t shard_n = static_cast<size_t>(shard.rows()) * cols;
  std::mt19937 rng(seed);
  std::vector<double> param = round_to_t<P>(random_values(static_cast<size_t>(rows) * cols, rng, -1.0, 1.0));
  DeviceBuffer<P> d_param(param.size()), d_grad(shard_n);
  DeviceBuffer<S> d_m(shard_n), d_v(shard_n);
  d_param.upload(param);
  d_m.fill_zero();
  d_v.fill_zero();
  std::vector<double> m(shard_n, 0.0), v(shard_n, 0.0);
  for (int t = 1; t <= 2; t++) {
    const std::vector<double> grad = round_to_t<P>(random_values(shard_n, rng, -0.01, 0.01));
    d_grad.upload(grad);
    llmc::adam_sharded_update<P, S>(d_param.get(), d_grad.get(), d_m.get(), d_v.get(), cols, shard, settings, lr, t,
                                    nullptr);
    const llmc::test::PythonOracle oracle = test.oracle();
    oracle.put("grad", {shard_n}, grad);
    oracle.put("param", {shard_n}, rows_of(param, cols, shard));
    oracle.put("m", {shard_n}, m);
    oracle.put("v", {shard_n}, v);
    char json[512];
    std::snprintf(json, sizeof json,
                  "{\"beta1\": %.17g, \"beta2\": %.17g, \"eps\": %.17g, \"lr\": %.17g, \"t\": %d, \"state_bf16\": %s, "
                  "\"state_roundoff\": %.17g, \"param_roundoff\": %.17g, \"decay\": %.17g}",
                  settings.beta1, settings.beta2, settings.eps, lr, t, std::is_same_v<S, float> ? "false" : "true",
                  parameter_roundoff<S>(), parameter_roundoff<P>(),
                  static_cast<double>(static_cast<float>(llmc::adam_decay(settings, lr))));
    oracle.config(json);
    oracle.run("adam");
    const std::vector<double> got_param = d_param.download();
    m = d_m.download();
    v = d_v.download();
    EXPECT_TRUE(within_bound(m, oracle.get("m_out"), oracle.get("m_bound"), "m")) << "t=" << t;
    EXPECT_TRUE(within_bound(v, oracle.get("v_out"), oracle.get("v_bound"), "v")) << "t=" << t;
    EXPECT_TRUE(within_bound(rows_of(got_param, cols, shard), oracle.get("param_out"), oracle.get("param_bound"), "p"))
        << "t=" << t;
    for (size_t i = 0; i < param.size(); i++) {
      const size_t row = i / cols;
      if (row < static_cast<size_t>(shard.row_begin) || row >= static_cast<size_t>(shard.row_end)) {
        ASSERT_EQ(got_param[i], param[i]) << "row " << row << " outside the shard changed";
      }
    }
    param = got_param;
  }
}

TEST_F(AdamSharded, TableRowShardInFloatXFirstTwoUpdates) {
  LLMC_REQUIRE_GPU();
  check_two_updates<floatX, floatX>(*this, 16, 24, 4, 2, 0.008 * 75, 900);  // bf16 in the record; embed lr x75
}

TEST_F(AdamSharded, Fp32ScalarsShardFirstTwoUpdates) {
  LLMC_REQUIRE_GPU();
  check_two_updates<float, float>(*this, 64, 1, 8, 3, 0.008 * 5, 910);  // scalars' lr x5
}

// The 2026-07-17 record's Adam on a bf16 table (the value embeddings: betas (0.75, 0.95), lr x75, wd_mul 5)
// with fp32 moments and cautious decay, and on the fp32 scalars (betas (0.9, 0.99), lr x5, no decay).
TEST_F(AdamSharded, Record2026TableWithCautiousDecayFirstTwoUpdates) {
  LLMC_REQUIRE_GPU();
  check_two_updates<floatX, float>(*this, 16, 24, 4, 1, 0.008 * 75, 930,
                                   llmc::AdamShardedSettings::record_2026(0.75, 0.95, 5.0));
}

TEST_F(AdamSharded, Record2026ScalarsFirstTwoUpdates) {
  LLMC_REQUIRE_GPU();
  check_two_updates<float, float>(*this, 64, 1, 8, 5, 0.008 * 5, 940,
                                  llmc::AdamShardedSettings::record_2026(0.9, 0.99, 0.0));
}

// The decay's mask is strict (update p > 0): none where the signs disagree or either is 0 (g = 0 gives a zero
// update). With m = v = 0, g = +-1 and t = 1 the update is step_size x sign(g), the eps below fp32's reach.
TEST_F(AdamSharded, CautiousDecayOnlyWhereUpdateAndParameterAgreeStrictly) {
  LLMC_REQUIRE_GPU();
  const std::vector<double> p = {0.5, -0.5, 0.5, -0.5, 0.0, 0.5}, g = {1.0, -1.0, -1.0, 1.0, 1.0, 0.0};
  DeviceBuffer<float> d_param(6), d_grad(6), d_m(6), d_v(6);
  d_param.upload(p);
  d_grad.upload(g);
  d_m.fill_zero();
  d_v.fill_zero();
  const llmc::AdamShardedSettings settings = llmc::AdamShardedSettings::record_2026(0.5, 0.75, 150.0);
  const double lr = 0.25;  // step size 0.25 sqrt(0.25) / 0.5 = 0.25; decay 0.0625 x 0.005 x 150 = 0.046875
  llmc::adam_sharded_update<float, float>(d_param.get(), d_grad.get(), d_m.get(), d_v.get(), 1, {0, 6}, settings, lr,
                                          1, nullptr);
  const std::vector<double> got = d_param.download();
  const double step = 0.25, decay = 0.046875;
  ASSERT_DOUBLE_EQ(llmc::adam_step_size(settings, lr, 1), step);
  ASSERT_DOUBLE_EQ(llmc::adam_decay(settings, lr), decay);
  const std::vector<double> want = {0.5 - step - decay * 0.5, -0.5 + step + decay * 0.5, 0.5 + step, -0.5 - step,
                                    -step, 0.5};
  EXPECT_EQ(got, want);  // every value above is exact in fp32
}

TEST_F(AdamSharded, RowShardsCoverTheTensor) {
  for (int rank = 0; rank < 8; rank++) {
    const llmc::AdamRowShard shard = llmc::adam_row_shard(50304, 8, rank);
    EXPECT_EQ(shard.row_begin, rank * 6288);
    EXPECT_EQ(shard.rows(), 6288);
    EXPECT_EQ(llmc::adam_row_shard(64, 8, rank).rows(), 8);
  }
  // 10 rows on 4 ranks: 3, 3, 3, 1; 2 rows on 4 ranks: 1, 1, 0, 0 (empty shards are legal).
  const int expected_rows[4] = {3, 3, 3, 1};
  for (int rank = 0; rank < 4; rank++) EXPECT_EQ(llmc::adam_row_shard(10, 4, rank).rows(), expected_rows[rank]);
  EXPECT_EQ(llmc::adam_row_shard(2, 4, 3).rows(), 0);
  EXPECT_EQ(llmc::adam_row_shard(2, 4, 3).row_begin, 2);
  EXPECT_THROW(llmc::adam_row_shard(10, 4, 4), std::invalid_argument);
}

TEST_F(AdamSharded, StepSizeIsBiasCorrected) {
  const llmc::AdamShardedSettings settings;
  EXPECT_DOUBLE_EQ(llmc::adam_step_size(settings, 0.008, 1), 0.008 * std::sqrt(1 - 0.95) / (1 - 0.65));
  EXPECT_DOUBLE_EQ(llmc::adam_step_size(settings, 0.008, 2), 0.008 * std::sqrt(1 - 0.95 * 0.95) / (1 - 0.65 * 0.65));
  EXPECT_THROW(llmc::adam_step_size(settings, 0.008, 0), std::invalid_argument);
}

TEST_F(AdamSharded, UpdateIsBitwiseRepeatable) {
  LLMC_REQUIRE_GPU();
  const int rows = 8, cols = 16;
  const llmc::AdamRowShard shard = llmc::adam_row_shard(rows, 2, 1);
  std::mt19937 rng(920);
  const std::vector<double> param = random_values(rows * cols, rng), grad = random_values(shard.rows() * cols, rng);
  std::vector<std::vector<floatX>> results;
  for (int run = 0; run < 2; run++) {
    DeviceBuffer<floatX> d_param(param.size()), d_grad(grad.size()), d_m(grad.size()), d_v(grad.size());
    d_param.upload(param);
    d_grad.upload(grad);
    d_m.fill_zero();
    d_v.fill_zero();
    for (int t = 1; t <= 3; t++)
      llmc::adam_sharded_update<floatX, floatX>(d_param.get(), d_grad.get(), d_m.get(), d_v.get(), cols, shard,
                                                llmc::AdamShardedSettings(), 0.008, t, nullptr);
    results.push_back(d_param.download_raw());
  }
  EXPECT_TRUE(bitwise_equal(results[0], results[1]));
}

// One update captured in a CUDA graph reads its step size and decay from the device as it runs
// (llmc/cuda/step_scalar.h): replayed for updates 1 to 3 at three rates, each written before its launch, it is bit
// for bit the updates with the values fixed at launch.
TEST_F(AdamSharded, CapturedUpdateReadsItsValuesFromTheDevice) {
  LLMC_REQUIRE_GPU();
  const int rows = 8, cols = 16;
  const llmc::AdamRowShard shard = llmc::adam_row_shard(rows, 2, 1);
  const llmc::AdamShardedSettings settings = llmc::AdamShardedSettings::record_2026(0.8, 0.95, 5.0);
  const std::vector<double> rates = {0.008, 0.006, 0.003};
  std::mt19937 rng(921);
  const std::vector<double> param = random_values(rows * cols, rng), grad = random_values(shard.rows() * cols, rng);
  std::vector<std::vector<float>> results;
  for (bool captured : {false, true}) {
    DeviceBuffer<float> d_param(param.size()), d_grad(grad.size()), d_m(grad.size()), d_v(grad.size()), values(2);
    d_param.upload(param);
    d_grad.upload(grad);
    d_m.fill_zero();
    d_v.fill_zero();
    values.fill_zero();
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreate(&stream));
    auto update = [&](llmc::StepScalar step_size, llmc::StepScalar decay) {
      llmc::adam_sharded_update<float, float>(d_param.get(), d_grad.get(), d_m.get(), d_v.get(), cols, shard, settings,
                                              step_size, decay, stream);
    };
    {
      const llmc::test::CapturedGraph graph(
          stream, [&] { update(llmc::StepScalar::at(values.get()), llmc::StepScalar::at(values.get() + 1)); });
      for (int t = 1; t <= 3; t++) {
        const llmc::AdamStepValues step = llmc::adam_step_values(settings, rates[t - 1], t);
        if (!captured) {
          update(llmc::StepScalar::fixed(step.step_size), llmc::StepScalar::fixed(step.decay));
          continue;
        }
        CUDA_CHECK(cudaStreamSynchronize(stream));  // the last launch has read the values
        values.upload_raw({step.step_size, step.decay});
        graph.launch(stream);
      }
      CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    CUDA_CHECK(cudaStreamDestroy(stream));
    results.push_back(d_param.download_raw());
  }
  EXPECT_TRUE(bitwise_equal(results[0], results[1]));
}

}  // namespace
