// Mutation tests of the emulation's strictness: each mutant copy of a real kernel (kernel_mutants.cuh)
// must fail in CI's emulated runs, and each faithful copy must pass them with no report. What catches a
// mutant depends on the build: in the ThreadSanitizer build (-DLLMC_TSAN=ON) races are reported as
// races; in the other builds the drift schedule (warps drifting apart, blocks in a random order) and
// poisoned memory make the results wrong; misaligned vector accesses stop every build. Emulated build
// only: the mutants are wrong on a GPU by design.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "llmc/kernels/global_norm.cuh"
#include "llmc/kernels/residual.cuh"
#include "test/kernels/mutants/kernel_mutants.cuh"
#include "test/reference/reference_ops.h"
#include "test/support/kernel_test_utils.h"

namespace {

using mutants::Mutation;
using namespace llmc::test;  // DeviceBuffer, random_values, all_close, tolerance

#if defined(__SANITIZE_THREAD__)
constexpr bool kRaceDetector = true;
#else
constexpr bool kRaceDetector = false;
#endif
constexpr const char* kRace = "ThreadSanitizer: data race";

// Runs `body` with blocks and warps scheduled by the drift schedule (seed 1), then restores the schedule.
template <class Body>
void under_drift(Body body) {
  auto& device = llmc::emu::EmulatedDevice::instance();
  const llmc::emu::Schedule saved = device.schedule();
  device.set_schedule(llmc::emu::Schedule{llmc::emu::ScheduleMode::kDrift, 1});
  body();
  CUDA_CHECK(cudaDeviceSynchronize());
  device.set_schedule(saved);
}

#if !defined(LLMC_FP32)
// The flash forward copy on B=2, T=100 (a full and a partial 64-row tile, so tiles are reused), C=128,
// NH=2, against the double-precision reference with the real kernel's test tolerance.
template <Mutation M>
::testing::AssertionResult flash_forward_matches_reference() {
  constexpr int B = 2, T = 100, C = 128, NH = 2, hs = C / NH;
  std::mt19937 rng{1111};
  const std::vector<double> qkv = random_values((size_t)B * T * 3 * C, rng, -1.5, 1.5);
  DeviceBuffer<floatX> d_qkv(qkv.size()), d_out((size_t)B * T * C);
  DeviceBuffer<float> d_lse((size_t)B * NH * T);
  d_qkv.upload(qkv);
  const float scale = 1.0f / std::sqrt((float)hs);
  LLMC_LAUNCH(mutants::flash_forward_kernel<M>, dim3(2, B * NH), dim3(llmc::flash::kThreads), 0, nullptr,
              d_out.get(), d_lse.get(), d_qkv.get(), T, NH, scale);
  std::vector<double> out((size_t)B * T * C), preatt((size_t)B * NH * T * T), att(preatt.size());
  ref::attention_forward(out.data(), preatt.data(), att.data(), qkv.data(), B, T, C, NH);
  return all_close(d_out.download(), out, tolerance(2, hs + T));
}

TEST(Mutants, FlashForwardCopyPassesInEverySchedule) {
  EXPECT_TRUE(flash_forward_matches_reference<Mutation::kNone>());
  under_drift([] { EXPECT_TRUE(flash_forward_matches_reference<Mutation::kNone>()); });
}

TEST(Mutants, FlashForwardWithoutTheBarrierBeforeTileReuseFails) {
  if (kRaceDetector) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH((void)flash_forward_matches_reference<Mutation::kNoBarrierBeforeTileReuse>(), kRace);
  } else {
    under_drift([] { EXPECT_FALSE(flash_forward_matches_reference<Mutation::kNoBarrierBeforeTileReuse>()); });
  }
}

TEST(Mutants, FlashForwardWithoutTheBarrierAfterTileFillFails) {
  if (kRaceDetector) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH((void)flash_forward_matches_reference<Mutation::kNoBarrierAfterTileFill>(), kRace);
  } else {
    under_drift([] { EXPECT_FALSE(flash_forward_matches_reference<Mutation::kNoBarrierAfterTileFill>()); });
  }
}

#endif  // !LLMC_FP32

// The squared-sum copy over 40 blocks of 256, its total finished by the copied second stage where the
// copy does not compute it itself. Inputs are multiples of 1/4 below 2: every square and every partial
// sum is exact in fp32, so the total equals the double sum in any summation order.
struct SquaredSum {
  double expected = 0.0;
  float total = 0.0f;
};
template <Mutation M>
SquaredSum run_squared_sum() {
  constexpr int kBlocks = 40, kBlock = 256;
  const size_t n = 3 * kBlocks * kBlock + 77;
  std::vector<double> data(n);
  SquaredSum result;
  for (size_t i = 0; i < n; ++i) {
    data[i] = static_cast<double>(i % 8) / 4.0;
    result.expected += data[i] * data[i];
  }
  DeviceBuffer<float> d_data(n), d_partials(kBlocks), d_total(1);
  d_data.upload(data);
  d_total.fill_zero();
  LLMC_LAUNCH(mutants::squared_sum_kernel<M>, kBlocks, kBlock, 0, nullptr, d_partials.get(), d_total.get(),
              d_data.get(), n);
  if (M == Mutation::kNone || M == Mutation::kNoSyncwarp || M == Mutation::kUninitialisedAccumulator) {
    LLMC_LAUNCH(mutants::sum_partials_kernel<kBlock>, 1, kBlock, 0, nullptr, d_total.get(),
                static_cast<const float*>(d_partials.get()), kBlocks, false);
  }
  result.total = static_cast<float>(d_total.download()[0]);
  return result;
}

TEST(Mutants, SquaredSumCopyPassesInEverySchedule) {
  const SquaredSum lockstep = run_squared_sum<Mutation::kNone>();
  EXPECT_EQ(lockstep.total, lockstep.expected);
  under_drift([] {
    const SquaredSum result = run_squared_sum<Mutation::kNone>();
    EXPECT_EQ(result.total, result.expected);
  });
}

TEST(Mutants, WarpReductionWithoutASyncwarpFails) {
  if (kRaceDetector) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH((void)run_squared_sum<Mutation::kNoSyncwarp>(), kRace);
  } else {
    under_drift([] {
      const SquaredSum result = run_squared_sum<Mutation::kNoSyncwarp>();
      EXPECT_NE(result.total, result.expected);
    });
  }
}

TEST(Mutants, UninitialisedAccumulatorFails) {
  // Locals start as a 0xFE byte pattern (-ftrivial-auto-var-init=pattern: -1.7e38 as a float), not as
  // the lucky zero of a fresh stack.
  const SquaredSum result = run_squared_sum<Mutation::kUninitialisedAccumulator>();
  EXPECT_NE(result.total, result.expected);
}

TEST(Mutants, NonAtomicAccumulationAcrossBlocksFails) {
  if (!kRaceDetector) {
    // Blocks of a launch run one after another in the emulation, so no update is lost: only the race
    // detector sees that they are unordered.
    GTEST_SKIP() << "caught by the ThreadSanitizer build (make test runs it there)";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH((void)run_squared_sum<Mutation::kNonAtomicAccumulation>(), kRace);
}

TEST(Mutants, ReadingAnotherBlocksOutputOfTheSameLaunchFails) {
  if (kRaceDetector) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_DEATH((void)run_squared_sum<Mutation::kReadsOtherBlocksOutput>(), kRace);
  } else {
    // Blocks in a random order: the last block runs before some others and reads their poisoned
    // (NaN) partials.
    under_drift([] { EXPECT_TRUE(std::isnan(run_squared_sum<Mutation::kReadsOtherBlocksOutput>().total)); });
  }
}

template <Mutation M>
void run_residual_float4() {
  constexpr size_t kPackets = 256;
  const size_t n = 4 * kPackets + 4;  // room for the shifted packets
  DeviceBuffer<float> a(n), b(n), out(n);
  a.fill_zero();
  b.fill_zero();
  LLMC_LAUNCH(mutants::residual_float4_kernel<M>, 2, 128, 0, nullptr, out.get(), static_cast<const float*>(a.get()),
              static_cast<const float*>(b.get()), kPackets);
  CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(Mutants, MisalignedFloat4Fails) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  run_residual_float4<Mutation::kNone>();
  EXPECT_DEATH(run_residual_float4<Mutation::kMisalignedFloat4>(),
               "misaligned address .* for type 'const struct float4', which requires 16 byte alignment");
}

// The real residual and squared-sum kernels on two streams, as the optimizer overlaps them: the
// consumer stream must wait for the producer's event. The mutant drops cudaStreamWaitEvent.
void producer_consumer_kernels(bool wait_for_event) {
  constexpr size_t n = 4096;
  cudaStream_t producer, consumer;
  CUDA_CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  cudaEvent_t produced;
  CUDA_CHECK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
  DeviceBuffer<floatX> a(n), b(n), sum(n);
  const size_t scratch_floats = llmc::global_norm_scratch_floats(n);
  DeviceBuffer<float> scratch(scratch_floats), squared(1);
  scratch.fill_zero();  // the fold's counters
  a.fill_zero();
  b.fill_zero();
  CUDA_CHECK(cudaDeviceSynchronize());
  llmc::residual_forward(sum.get(), a.get(), b.get(), n, producer);
  CUDA_CHECK(cudaEventRecord(produced, producer));
  if (wait_for_event) CUDA_CHECK(cudaStreamWaitEvent(consumer, produced, 0));
  llmc::global_norm_squared(squared.get(), sum.get(), n, false, scratch.get(), scratch_floats, consumer);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaEventDestroy(produced));
  CUDA_CHECK(cudaStreamDestroy(producer));
  CUDA_CHECK(cudaStreamDestroy(consumer));
}

TEST(Mutants, MissingStreamWaitEventFails) {
  if (!kRaceDetector) {
    GTEST_SKIP() << "caught by the ThreadSanitizer build (here the outcome depends on timing)";
  }
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  producer_consumer_kernels(true);
  EXPECT_DEATH(producer_consumer_kernels(false), kRace);
}

}  // namespace
