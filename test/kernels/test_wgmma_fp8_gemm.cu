// Tests of the FP8 up projection with the ReLU^2 epilogue (llmc/kernels/wgmma_fp8_gemm.cuh): post against the
// double product of the decoded e4m3 operands, within the FP8 accumulator's bound (test/kernels/fp8_test_support.h)
// carried through bf16(relu(pre)^2); the e4m3 copy and the maximum exactly those of the kernel's own post; rows past
// M untouched; emulated, every output bit for bit that of the unfused path (fp8_gemm, then relu_squared_fp8_forward),
// whose accumulator model the emulated wgmma shares. Shapes and pointers it does not take are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/family/fused_gemms.h"
#include "llmc/kernels/fp8_matmul.cuh"
#include "llmc/kernels/fp8_mlp.cuh"
#include "llmc/kernels/wgmma_fp8_gemm.cuh"
#include "test/kernels/fp8_test_support.h"
#include "test/support/device_buffer.h"
#include "test/support/gpu_test.h"
#include "test/support/require_hopper.h"

namespace wgmma_fp8_gemm_test {

using llmc::test::DeviceBuffer;
using llmc::test::Fp8Matrix;
using bf16 = __nv_bfloat16;

struct Problem {
  int m, n, k;
  Fp8Matrix a, w;  // (M, K) and (N, K) e4m3
  float a_scale, w_scale, s_act;
};

Problem make_problem(int m, int n, int k, float s_act, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto e4m3 = llmc::emu::Fp8Format::kE4M3;
  return Problem{m, n, k, llmc::test::random_fp8_matrix(static_cast<size_t>(m) * k, e4m3, 40.0, rng),
                 llmc::test::random_fp8_matrix(static_cast<size_t>(n) * k, e4m3, 40.0, rng), 0.0371f, 0.00923f, s_act};
}

struct Outputs {
  std::vector<uint16_t> post;  // bf16 bits
  std::vector<uint8_t> post8;
  float amax;
};

constexpr int kGuardRows = 8;
constexpr uint16_t kPostSentinel = 0xc480;  // bf16 -1024
constexpr uint8_t kCodeSentinel = 0xfe;     // e4m3 -448

// The fused kernel (unfused: fp8_gemm into a bf16 pre, then relu_squared_fp8_forward). post and post8 get guard rows
// past M, filled with sentinels the fused kernel must leave alone.
Outputs run(const Problem& p, bool fused) {
  const size_t mn = static_cast<size_t>(p.m) * p.n, rows = static_cast<size_t>(p.m) + kGuardRows;
  DeviceBuffer<uint8_t> a(p.a.codes), w(p.w.codes);
  DeviceBuffer<uint16_t> post(std::vector<uint16_t>(rows * p.n, kPostSentinel));
  DeviceBuffer<uint8_t> post8(std::vector<uint8_t>(rows * p.n, kCodeSentinel));
  DeviceBuffer<float> scalars(std::vector<float>{p.a_scale, p.w_scale, p.s_act, -1.0f});
  auto* post_bf16 = reinterpret_cast<bf16*>(post.get());
  auto* codes = reinterpret_cast<llmc::fp8e4m3*>(post8.get());
  float* amax = scalars.get() + 3;
  if (fused) {
    llmc::WgmmaFp8ReluSquaredArgs g;
    g.post = post_bf16, g.post8 = codes, g.post_amax = amax;
    g.a = reinterpret_cast<const llmc::fp8e4m3*>(a.get()), g.w = reinterpret_cast<const llmc::fp8e4m3*>(w.get());
    g.a_scale = scalars.get(), g.w_scale = scalars.get() + 1, g.s_act = scalars.get() + 2;
    g.m = p.m, g.n = p.n, g.k = p.k;
    llmc::wgmma_fp8_relu_squared_launch(g, nullptr);
  } else {
#if defined(LLMC_FP32)
    throw std::logic_error("the unfused path writes floatX, bf16 only in the bf16 build");
#else
    DeviceBuffer<bf16> pre(mn);
    llmc::Fp8GemmArgs up;
    up.d = pre.get(), up.d_type = CUDA_R_16BF, up.a = a.get(), up.b = w.get(), up.m = p.m, up.n = p.n, up.k = p.k;
    up.a_scale = scalars.get(), up.b_scale = scalars.get() + 1;
    llmc::MatmulContext context;
    llmc::fp8_gemm(context, up, nullptr);
    llmc::relu_squared_fp8_forward(post_bf16, codes, amax, pre.get(), scalars.get() + 2, mn, nullptr);
#endif
  }
  CUDA_CHECK(cudaDeviceSynchronize());
  Outputs out{post.download_raw(), post8.download_raw(), scalars.download_raw()[3]};
  for (size_t i = mn; i < rows * p.n; ++i) {
    EXPECT_EQ(out.post[i], kPostSentinel) << "post written past row M at " << i;
    EXPECT_EQ(out.post8[i], kCodeSentinel) << "post8 written past row M at " << i;
  }
  out.post.resize(mn);
  out.post8.resize(mn);
  return out;
}

float bf16_bits_value(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

// post within bf16(relu(pre)^2) of every pre the accumulator bound allows (pre itself rounded to bf16 first); the
// codes and the maximum exactly the kernel's own post's.
void expect_post_codes_and_maximum(const Problem& p, const Outputs& out) {
  const double scale = static_cast<double>(p.a_scale) * p.w_scale, bf16_unit = std::ldexp(1.0, -8);
  const float inverse = 1.0f / p.s_act;
  float largest = 0.0f;
  int failures = 0;
  for (int i = 0; i < p.m && failures < 5; ++i) {
    for (int j = 0; j < p.n && failures < 5; ++j) {
      const size_t at = static_cast<size_t>(i) * p.n + j;
      const llmc::test::DotWithBound dot = llmc::test::fp8_dot_with_bound(
          p.a.values.data() + static_cast<size_t>(i) * p.k, p.w.values.data() + static_cast<size_t>(j) * p.k, p.k,
          /*fast_accumulation=*/false);
      const double tolerance = llmc::test::fp8_gemm_tolerance(dot, scale, 0.0, bf16_unit);
      const double low = scale * dot.exact - tolerance, high = scale * dot.exact + tolerance;
      const double least = low > 0.0 ? low * low : 0.0, most = high > 0.0 ? high * high : 0.0;
      const float post = bf16_bits_value(out.post[at]);
      largest = std::max(largest, post);
      const uint8_t code = llmc::emu::fp8_encode(std::fmin(post * inverse, 448.0f), llmc::emu::Fp8Format::kE4M3);
      if (!(post >= least * (1.0 - bf16_unit) && post <= most * (1.0 + bf16_unit)) || out.post8[at] != code) {
        ADD_FAILURE() << "[" << i << "," << j << "] post " << post << " in [" << least << ", " << most
                      << "]? code 0x" << std::hex << int{out.post8[at]} << " expected 0x" << int{code};
        failures++;
      }
    }
  }
  EXPECT_EQ(out.amax, largest);
}

// M = 208 cuts the second row tile, N = 144 the second column tile (multiples of 16: cuBLASLt's FP8 GEMM takes no
// others); K = 96 is one k-tile of three MMAs, K = 320
// two whole k-tiles (each a promotion) and one of two MMAs, K = 672 five around the four-slot ring and one of one
// MMA: every count of MMAs a k-tile can have (multiply_stage's four cases); s_act 0.5 saturates many codes.
struct Shape {
  int m, n, k;
  float s_act;
};
const std::vector<Shape> kShapes = {{128, 128, 128, 37.0f}, {208, 144, 96, 0.5f}, {80, 256, 320, 900.0f},
                                    {64, 128, 672, 4000.0f}};

TEST(WgmmaFp8Gemm, ReluSquaredEpilogueWithinTheAccumulatorBound) {
  LLMC_REQUIRE_HOPPER();
  for (const Shape& s : kShapes) {
    SCOPED_TRACE("M N K = " + std::to_string(s.m) + " " + std::to_string(s.n) + " " + std::to_string(s.k));
    const Problem p = make_problem(s.m, s.n, s.k, s.s_act, 17);
    expect_post_codes_and_maximum(p, run(p, true));
  }
}

#if defined(LLMC_EMULATION) && !defined(LLMC_FP32)
// The emulated wgmma sums as the emulated cuBLASLt does (four K = 32 steps of the FP8 accumulator model, then an
// fp32 promotion), so the fused kernel is the unfused path bit for bit: loads, swizzle, promotion cadence and
// epilogue arithmetic all show here.
TEST(WgmmaFp8Gemm, EmulatedBitForBitTheUnfusedPath) {
  for (const Shape& s : kShapes) {
    SCOPED_TRACE("M N K = " + std::to_string(s.m) + " " + std::to_string(s.n) + " " + std::to_string(s.k));
    const Problem p = make_problem(s.m, s.n, s.k, s.s_act, 23);
    const Outputs fused = run(p, true), unfused = run(p, false);
    EXPECT_EQ(fused.post, unfused.post);
    EXPECT_EQ(fused.post8, unfused.post8);
    EXPECT_EQ(fused.amax, unfused.amax);
  }
}
#endif

TEST(WgmmaFp8Gemm, RefusesShapesAndPointersItDoesNotTake) {
  LLMC_REQUIRE_HOPPER();
  DeviceBuffer<uint8_t> codes(64 * 256);
  DeviceBuffer<uint16_t> post(64 * 64);
  DeviceBuffer<float> scalars(4);
  llmc::WgmmaFp8ReluSquaredArgs good;
  good.post = reinterpret_cast<bf16*>(post.get()), good.post8 = reinterpret_cast<llmc::fp8e4m3*>(codes.get());
  good.post_amax = scalars.get() + 3, good.a_scale = scalars.get(), good.w_scale = scalars.get(),
  good.s_act = scalars.get();
  good.a = reinterpret_cast<const llmc::fp8e4m3*>(codes.get()), good.w = good.a;
  good.m = 64, good.n = 64, good.k = 64;
  const auto refused = [](llmc::WgmmaFp8ReluSquaredArgs g) {
    EXPECT_THROW(llmc::wgmma_fp8_relu_squared_launch(g, nullptr), std::invalid_argument);
  };
  auto g = good;
  g.k = 48;  // not a whole MMA
  refused(g);
  g = good, g.n = 60;
  refused(g);
  g = good, g.m = 0;
  refused(g);
  g = good, g.s_act = nullptr;
  refused(g);
  g = good, g.post8 = good.post8 + 1;
  refused(g);
  g = good, g.a = good.a + 8;
  refused(g);
}

}  // namespace wgmma_fp8_gemm_test
