// Tests of AdamW (llmc/kernels/adamw.cuh) against the double-precision reference over several steps (with
// master weights; in place in fp32), and its segments in one launch against one launch per segment, bitwise.
// Built for fp32 and bf16, emulated on the CPU and natively on a GPU.
#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "llmc/kernels/adamw.cuh"
#include "test/reference/reference_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

void run_adamw_against_reference(bool with_master) {
  const size_t n = 3000, shard_start = 1000, shard_size = 1500;  // update a shard in the middle
  const int steps = 5;
  std::mt19937 rng(1010);
  const std::vector<double> params = random_values(n, rng);
  llmc::AdamWSettings hp;
  hp.weight_decay = 0.1f;
  const float learning_rate = 1e-2f;
  const float grad_scale = 0.5f;  // a power of two: the reference sees exactly the scaled gradients
  DeviceBuffer<floatX> d_params(n), d_grads(n);
  DeviceBuffer<float> d_master(n), d_m(n), d_v(n);
  d_params.upload(params);
  d_master.upload(params);
  d_m.fill_zero();
  d_v.fill_zero();
  std::vector<double> ref_params = params, ref_m(n, 0.0), ref_v(n, 0.0);
  for (int step = 1; step <= steps; step++) {
    const std::vector<double> grads = random_values(n, rng);
    d_grads.upload(grads);
    llmc::adamw_update(d_params.get() + shard_start, with_master ? d_master.get() + shard_start : nullptr,
                       d_grads.get() + shard_start, d_m.get() + shard_start, d_v.get() + shard_start, shard_size, step,
                       learning_rate, hp, grad_scale, nullptr);
    std::vector<double> scaled(shard_size);
    for (size_t i = 0; i < shard_size; i++) scaled[i] = grads[shard_start + i] * grad_scale;
    ref::adamw_update(ref_params.data() + shard_start, scaled.data(), ref_m.data() + shard_start,
                      ref_v.data() + shard_start, shard_size, step, learning_rate, hp.beta1, hp.beta2, hp.eps,
                      hp.weight_decay);
  }
  // fp32 state: each step adds a few roundings to m, v and the master weight (~10 operations); the
  // floatX parameters are the master rounded once. Outside the shard nothing may change.
  const std::vector<double> got_params = d_params.download();
  EXPECT_TRUE(all_close(got_params, llmc::test::round_to_floatx(ref_params), tolerance(1, 10 * steps)));
  std::vector<double> got_m = d_m.download(), got_v = d_v.download();
  EXPECT_TRUE(all_close(got_m, ref_m, tolerance(0, 4 * steps)));
  EXPECT_TRUE(all_close(got_v, ref_v, tolerance(0, 4 * steps)));
  if (with_master) {
    EXPECT_TRUE(all_close(d_master.download(), ref_params, tolerance(0, 10 * steps)));
  }
  for (size_t i = 0; i < n; i++) {
    if (i >= shard_start && i < shard_start + shard_size) continue;
    ASSERT_EQ(got_params[i], params[i]) << "element " << i << " outside the shard changed";
    ASSERT_EQ(got_m[i], 0.0) << "moment " << i << " outside the shard changed";
  }
}

// One launch over a shard's weight-decay segments with the gradient scale read on the device computes
// exactly what one launch per segment with the scale from the host did (the same operations per element).
TEST(AdamWKernel, SegmentsInOneLaunchMatchOneLaunchPerSegmentBitwise) {
  LLMC_REQUIRE_GPU();
  const size_t n = 3000;
  const std::vector<std::pair<size_t, float>> segment_ends = {{700, 0.1f}, {1000, 0.0f}, {3000, 0.1f}};
  std::mt19937 rng(1011);
  const std::vector<double> params = random_values(n, rng), grads = random_values(n, rng);
  llmc::AdamWSettings hp;
  const float grad_scale = 0.37f;
  std::vector<std::vector<float>> results[2];
  for (int variant = 0; variant < 2; variant++) {
    DeviceBuffer<floatX> d_params(n), d_grads(n);
    DeviceBuffer<float> d_master(n), d_m(n), d_v(n), d_scale(1);
    d_params.upload(params);
    d_master.upload(params);
    d_grads.upload(grads);
    d_m.fill_zero();
    d_v.fill_zero();
    d_scale.upload_raw({grad_scale});
    llmc::AdamWSegments segments;
    size_t begin = 0;
    for (const auto& [end, decay] : segment_ends) {
      if (variant == 0) {  // one launch per segment, the scale from the host
        llmc::AdamWSettings segment_hp = hp;
        segment_hp.weight_decay = decay;
        llmc::adamw_update(d_params.get() + begin, d_master.get() + begin, d_grads.get() + begin, d_m.get() + begin,
                           d_v.get() + begin, end - begin, 3, 1e-2f, segment_hp, grad_scale, nullptr);
      }
      segments.add(begin, end - begin, decay);
      begin = end;
    }
    if (variant == 1)
      llmc::adamw_update(d_params.get(), d_master.get(), d_grads.get(), d_m.get(), d_v.get(), segments, 3, 1e-2f, hp,
                         1.0f, d_scale.get(), nullptr);
    const std::vector<floatX> raw_params = d_params.download_raw();
    std::vector<float> params_out(n);
    for (size_t i = 0; i < n; i++) params_out[i] = llmc::to_float(raw_params[i]);
    results[variant] = {params_out, d_master.download_raw(), d_m.download_raw(), d_v.download_raw()};
  }
  for (size_t part = 0; part < results[0].size(); part++)
    EXPECT_TRUE(bitwise_equal(results[0][part], results[1][part])) << "part " << part;
}

TEST(AdamWKernel, MasterWeightsMatchReferenceOverSteps) {
  LLMC_REQUIRE_GPU();
  run_adamw_against_reference(/*with_master=*/true);
}

#if defined(LLMC_FP32)
// Without master weights the parameters themselves carry the state: only meaningful in fp32.
TEST(AdamWKernel, InPlaceFp32ParametersMatchReferenceOverSteps) {
  LLMC_REQUIRE_GPU();
  run_adamw_against_reference(/*with_master=*/false);
}
#endif

}  // namespace
