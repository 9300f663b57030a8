// fp8_gemm() of llmc/kernels/fp8_matmul.cuh (cuBLASLt FP8 on a GPU, the CPU accumulator model emulated) against
// a double reference of the decoded operands: every operand type combination the head uses, bf16 and fp32 output,
// fast accumulation on and off, scales, alpha and beta, with the tolerance of test/kernels/fp8_test_support.h; the
// calls cuBLASLt's FP8 kernels refuse are refused; in the emulation, the fast-accumulation flag changes the result
// as modelled.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/kernels/fp8_matmul.cuh"
#if defined(LLMC_EMULATION)
#include "llmc/emu/cpu_fp8_gemm.h"  // the accumulator model itself
#endif
#include "test/kernels/fp8_test_support.h"
#include "test/support/device_buffer.h"
#include "test/support/gpu_test.h"
#include "test/support/stream_gate.h"

namespace {

using llmc::test::DeviceBuffer;
using llmc::test::DotWithBound;
using llmc::test::Fp8Matrix;

llmc::emu::Fp8Format format_of(cudaDataType_t type) {
  return type == CUDA_R_8F_E4M3 ? llmc::emu::Fp8Format::kE4M3 : llmc::emu::Fp8Format::kE5M2;
}

struct Fp8GemmCase {
  cudaDataType_t a_type, b_type, d_type;
  bool fast_accumulation;
  int m, n, k;
  float a_scale, b_scale, alpha, beta;
};

std::string case_name(const Fp8GemmCase& c) {
  return std::string(llmc::fp8_gemm_type_name(c.a_type)) + "x" + llmc::fp8_gemm_type_name(c.b_type) + "->" +
         llmc::fp8_gemm_type_name(c.d_type) + (c.fast_accumulation ? " fast" : "") + " m=" + std::to_string(c.m) +
         " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " beta=" + std::to_string(c.beta);
}

// D's initial contents (for beta) and the results, in double, whatever D's type.
template <class D>
void run_case(const Fp8GemmCase& c, unsigned seed) {
  std::mt19937 rng(seed);
  // sigma 40: values from subnormals to the saturation of e4m3 (448) within a few sigma.
  const Fp8Matrix a = llmc::test::random_fp8_matrix(static_cast<size_t>(c.m) * c.k, format_of(c.a_type), 40.0, rng);
  const Fp8Matrix b = llmc::test::random_fp8_matrix(static_cast<size_t>(c.n) * c.k, format_of(c.b_type), 40.0, rng);
  std::vector<double> d_initial(static_cast<size_t>(c.m) * c.n);
  std::normal_distribution<double> normal(0.0, 1000.0);
  for (double& value : d_initial) value = llmc::to_float(llmc::from_float<D>(static_cast<float>(normal(rng))));

  DeviceBuffer<uint8_t> d_a(a.codes), d_b(b.codes);
  DeviceBuffer<D> d_d(d_initial.size());
  d_d.upload(d_initial);
  DeviceBuffer<float> d_scales(std::vector<float>{c.a_scale, c.b_scale});
  llmc::Fp8GemmArgs g;
  g.d = d_d.get();
  g.d_type = c.d_type;
  g.a = d_a.get();
  g.a_type = c.a_type;
  g.b = d_b.get();
  g.b_type = c.b_type;
  g.m = c.m;
  g.n = c.n;
  g.k = c.k;
  g.a_scale = d_scales.get();
  g.b_scale = d_scales.get() + 1;
  g.alpha = c.alpha;
  g.beta = c.beta;
  g.fast_accumulation = c.fast_accumulation;
  llmc::MatmulContext context;
  llmc::fp8_gemm(context, g, nullptr);
  const std::vector<double> got = d_d.download();

  const double scale = static_cast<double>(c.alpha) * c.a_scale * c.b_scale;
  const double output_roundoff = c.d_type == CUDA_R_16BF ? std::ldexp(1.0, -8) : 0.0;
  int failures = 0;
  for (int i = 0; i < c.m && failures < 5; i++) {
    for (int j = 0; j < c.n && failures < 5; j++) {
      const DotWithBound dot =
          llmc::test::fp8_dot_with_bound(a.values.data() + static_cast<size_t>(i) * c.k,
                                         b.values.data() + static_cast<size_t>(j) * c.k, c.k, c.fast_accumulation);
      const size_t index = static_cast<size_t>(i) * c.n + j;
      const double addend = c.beta * d_initial[index];
      const double expected = scale * dot.exact + addend;
      const double tolerance = llmc::test::fp8_gemm_tolerance(dot, scale, addend, output_roundoff);
      if (!(std::fabs(got[index] - expected) <= tolerance)) {
        ADD_FAILURE() << case_name(c) << " D[" << i << "," << j << "] = " << got[index] << ", expected " << expected
                      << " +- " << tolerance;
        failures++;
      }
    }
  }
}

// Expects `call` to throw std::invalid_argument naming every fragment.
template <class Call>
void expect_invalid(Call call, const std::vector<std::string>& fragments) {
  try {
    call();
    ADD_FAILURE() << "expected a refusal mentioning '" << fragments.back() << "'";
  } catch (const std::invalid_argument& e) {
    for (const std::string& fragment : fragments)
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what() << " lacks " << fragment;
  }
}

void run_case(const Fp8GemmCase& c, unsigned seed) {
  if (c.d_type == CUDA_R_32F)
    run_case<float>(c, seed);
  else
    run_case<__nv_bfloat16>(c, seed);
}

// The head's three GEMMs (forward e4m3 x e4m3 -> bf16 fast; dx e5m2 x e4m3 -> bf16; dW e5m2 x e4m3 -> fp32)
// and the mirrored operand order, at non-square shapes with K across several promotion intervals.
TEST(Fp8Gemm, MatchesDoubleReferenceWithinAccumulatorBound) {
  LLMC_REQUIRE_GPU();
  const Fp8GemmCase cases[] = {
      {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, true, 48, 80, 320, 0.0625f, 0.001953125f, 1.0f, 0.0f},
      {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_16BF, false, 32, 48, 272, 0.0619f, 0.0021f, 1.0f, 0.0f},
      {CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUDA_R_16BF, false, 64, 32, 400, 0.0022f, 0.002f, 1.0f, 0.0f},
      {CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUDA_R_32F, false, 48, 32, 512, 0.0022f, 0.0619f, 1.0f, 0.0f},
      {CUDA_R_8F_E4M3, CUDA_R_8F_E5M2, CUDA_R_32F, true, 16, 64, 160, 0.5f, 0.25f, 2.0f, 1.0f},
      {CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, CUDA_R_32F, false, 32, 32, 16, 1.0f, 1.0f, 0.75f, 1.0f},
      {CUDA_R_8F_E5M2, CUDA_R_8F_E4M3, CUDA_R_16BF, true, 16, 16, 1024, 0.003f, 0.007f, 1.0f, 1.0f},
  };
  unsigned seed = 7100;
  for (const Fp8GemmCase& c : cases) run_case(c, seed++);
}

// A tiny row next to a huge product: the accumulator model drops small addends next to a large one, and fast
// accumulation drops them over all of K while promotion every 128 keeps those of later intervals. Only the
// emulation's arithmetic is specified exactly; on a GPU the bound test above is what must hold.
TEST(Fp8Gemm, EmulationHonoursFastAccumulationFlag) {
  if (!LLMC_IS_EMULATION) GTEST_SKIP() << "the exact accumulator arithmetic is the emulation's model";
  const int m = 16, n = 16, k = 512;
  std::vector<uint8_t> ones(static_cast<size_t>(m) * k, 0x38);          // e4m3 1.0
  for (int i = 0; i < m; i++) ones[static_cast<size_t>(i) * k] = 0x7e;  // 448 first: 448 * 448 = 200704
  DeviceBuffer<uint8_t> d_a(ones), d_b(ones);
  for (bool fast : {true, false}) {
    DeviceBuffer<float> d_d(static_cast<size_t>(m) * n);
    llmc::Fp8GemmArgs g;
    g.d = d_d.get();
    g.d_type = CUDA_R_32F;
    g.a = d_a.get();
    g.b = d_b.get();
    g.m = m;
    g.n = n;
    g.k = k;
    g.fast_accumulation = fast;
    llmc::MatmulContext context;
    llmc::fp8_gemm(context, g, nullptr);
    // The grid next to 200704 (2^17.6) is 2^(17 - 13) = 16: every 1 truncates to 0 while it shares a step
    // with the large sum; without fast accumulation the intervals after the first 128 start from zero.
    const double expected = fast ? 200704.0 : 200704.0 + (k - 128);
    EXPECT_EQ(d_d.download()[0], expected) << (fast ? "fast" : "promoted");
  }
}

#if defined(LLMC_EMULATION)
// The emulated GEMM sums 4 output columns at once (fp8_dot_lanes) when every operand is finite, one at a time
// (fp8_dot) otherwise: both must be the same arithmetic, bit for bit, with and without fast accumulation,
// over every pair of e4m3/e5m2 values' magnitudes (random codes, subnormals and the largest included).
TEST(Fp8Gemm, EmulationVectorPathEqualsScalarModel) {
  std::mt19937 rng(7300);
  for (const int k : {16, 208, 512}) {
    std::vector<float> a(k), panel(static_cast<size_t>(k) * llmc::emu::kFp8Lanes);
    for (float& value : a)
      value = llmc::emu::fp8_decode(static_cast<uint8_t>(rng() % 0x7f) | (rng() & 0x80), llmc::emu::Fp8Format::kE4M3);
    for (float& value : panel)
      value = llmc::emu::fp8_decode(static_cast<uint8_t>(rng() % 0x7c) | (rng() & 0x80), llmc::emu::Fp8Format::kE5M2);
    for (int lane = 0; lane < llmc::emu::kFp8Lanes; lane++) panel[lane] = 0.0f;  // a lane starting with zeros
    for (const bool fast : {true, false}) {
      const llmc::emu::Fp8Lanes lanes = llmc::emu::fp8_dot_lanes(a.data(), panel.data(), k, fast);
      for (int lane = 0; lane < llmc::emu::kFp8Lanes; lane++) {
        const float scalar = llmc::emu::fp8_dot(a.data(), panel.data() + lane, llmc::emu::kFp8Lanes, k, fast);
        float vector_value;
        std::memcpy(&vector_value, reinterpret_cast<const float*>(&lanes) + lane, sizeof vector_value);
        EXPECT_EQ(std::signbit(vector_value), std::signbit(scalar)) << "k=" << k << " lane " << lane;
        EXPECT_EQ(vector_value, scalar) << "k=" << k << " lane " << lane << (fast ? " fast" : "");
      }
    }
  }
}
#endif

// Every call cuBLASLt's FP8 kernels refuse on Hopper is refused before anything runs, in both builds.
TEST(Fp8Gemm, RefusesWhatCublasLtRefuses) {
  LLMC_REQUIRE_GPU();
  DeviceBuffer<uint8_t> d_a(64 * 64), d_b(64 * 64);
  DeviceBuffer<float> d_d(64 * 64);
  llmc::MatmulContext context;
  const auto valid = [&] {
    llmc::Fp8GemmArgs g;
    g.d = d_d.get();
    g.d_type = CUDA_R_32F;
    g.a = d_a.get();
    g.b = d_b.get();
    g.m = g.n = g.k = 64;
    return g;
  };
  const auto expect_refused = [&](llmc::Fp8GemmArgs g, const std::string& fragment) {
    expect_invalid([&] { llmc::fp8_gemm(context, g, nullptr); }, {"fp8_gemm", fragment});
  };
  llmc::Fp8GemmArgs g = valid();
  g.trans_b = false;
  expect_refused(g, "K-major");
  g = valid();
  g.trans_a = true;
  expect_refused(g, "TN");
  g = valid();
  g.a_type = g.b_type = CUDA_R_8F_E5M2;
  expect_refused(g, "e5m2 x e5m2");
  g = valid();
  g.a_type = CUDA_R_16BF;
  expect_refused(g, "e4m3 or e5m2");
  g = valid();
  g.d_type = CUDA_R_8F_E4M3;
  expect_refused(g, "bf16 or fp32");
  g = valid();
  g.k = 40;
  expect_refused(g, "multiples of 16");
  g = valid();
  g.m = 8;
  expect_refused(g, "multiples of 16");
  g = valid();
  g.a = d_a.get() + 8;
  expect_refused(g, "A is not 16-byte aligned");
  g = valid();
  g.d = d_d.get() + 2;
  expect_refused(g, "D is not 16-byte aligned");
  CUDA_CHECK(cudaDeviceSynchronize());
}

// The scales are device memory read when the GEMM runs, not when it is enqueued (static scales may be
// written by an earlier kernel of the stream): a scale changed while the stream is held is the one used.
TEST(Fp8Gemm, ReadsScalesWhenItRuns) {
  LLMC_REQUIRE_GPU();
  std::vector<uint8_t> ones(16 * 16, 0x38);  // e4m3 1.0: every element of D is 16 * scale
  DeviceBuffer<uint8_t> d_a(ones), d_b(ones);
  DeviceBuffer<float> d_d(16 * 16), d_scale(std::vector<float>{1.0f});
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  llmc::test::Gate gate;
  CUDA_CHECK(cudaLaunchHostFunc(stream, llmc::test::Gate::wait_callback, &gate));
  llmc::Fp8GemmArgs g;
  g.d = d_d.get();
  g.d_type = CUDA_R_32F;
  g.a = d_a.get();
  g.b = d_b.get();
  g.m = g.n = g.k = 16;
  g.a_scale = d_scale.get();
  llmc::MatmulContext context;
  llmc::fp8_gemm(context, g, stream);
  const float later_scale = 3.0f;
  CUDA_CHECK(cudaMemcpy(d_scale.get(), &later_scale, sizeof later_scale, cudaMemcpyHostToDevice));
  // A pageable copy may return before it lands; the legacy stream it ran on does not wait for `stream`.
  CUDA_CHECK(cudaStreamSynchronize(nullptr));
  gate.open();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaStreamDestroy(stream));
  EXPECT_EQ(d_d.download()[0], 48.0);
}

// The emulated device is an sm_90 (the trainer's --fp8-head check asks this).
TEST(Fp8Gemm, EmulatedDeviceHasFp8TensorCores) {
  if (!LLMC_IS_EMULATION) GTEST_SKIP() << "depends on the GPU";
  EXPECT_TRUE(llmc::fp8_gemm_supported(0));
}

// A GPU faults on host pointers; the emulation says so at the call.
TEST(Fp8Gemm, EmulationRefusesHostMemory) {
  if (!LLMC_IS_EMULATION) GTEST_SKIP() << "a GPU faults instead";
  alignas(16) static uint8_t host_matrix[16 * 16];
  DeviceBuffer<uint8_t> d_b(16 * 16);
  DeviceBuffer<float> d_d(16 * 16);
  const float host_scale = 1.0f;
  llmc::Fp8GemmArgs g;
  g.d = d_d.get();
  g.d_type = CUDA_R_32F;
  g.a = host_matrix;
  g.b = d_b.get();
  g.m = g.n = g.k = 16;
  llmc::MatmulContext context;
  // cuBLASLt's operands are fp8_gemm's swapped (its column-major TN call): our A is its B, our A scale its B scale.
  expect_invalid([&] { llmc::fp8_gemm(context, g, nullptr); }, {"operand B is not", "device memory"});
  g.a = d_b.get();
  g.a_scale = &host_scale;
  expect_invalid([&] { llmc::fp8_gemm(context, g, nullptr); }, {"the B scale", "device memory"});
}

}  // namespace
