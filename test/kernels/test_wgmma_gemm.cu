// Tests of the warpgroup-MMA GEMM with the MLPs' epilogues (llmc/kernels/wgmma_gemm.cuh), W stored (K, N) or
// (N, K): the product against the double reference of the bf16 inputs, within fp32 accumulation error and one
// bf16 rounding; the ReLU^2 epilogues bitwise against the host's ReLU^2 of the kernel's own rounded product (also
// without out); rows past M untouched; shapes and missing outputs it does not take refused. Emulated, and on a
// Hopper GPU (the kernel is sm_90a only).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/family/fused_gemms.h"
#include "llmc/kernels/wgmma_gemm.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"
#include "test/support/require_hopper.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using bf16 = __nv_bfloat16;

double bf16_value(double x) { return static_cast<double>(__bfloat162float(__float2bfloat16(static_cast<float>(x)))); }

struct Problem {
  int m, n, k;
  std::vector<double> a, w;  // bf16-representable, (M, K) and (K, N)
  bool w_k_major;            // the kernel gets W stored transposed, (N, K)
};

Problem make_problem(int m, int n, int k, uint32_t seed, bool w_k_major = false) {
  std::mt19937 rng(seed);
  Problem p{m, n, k, random_values(static_cast<size_t>(m) * k, rng), random_values(static_cast<size_t>(k) * n, rng),
            w_k_major};
  for (double& x : p.a) x = bf16_value(x);
  for (double& x : p.w) x = bf16_value(x);
  return p;
}

struct Outputs {
  std::vector<double> out, post;
};

// Runs the kernel; out and post get 8 guard rows past M, filled with a sentinel the kernel must leave alone.
constexpr double kSentinel = -1024.0;  // exact in bf16
Outputs run(const Problem& p, llmc::WgmmaEpilogue epilogue, const std::vector<double>& saved = {},
            bool with_out = true) {
  const size_t rows = static_cast<size_t>(p.m) + 8, mn = static_cast<size_t>(p.m) * p.n;
  DeviceBuffer<bf16> a(p.a.size()), w(p.w.size()), out(rows * p.n), post(rows * p.n), d_saved(mn);
  a.upload(p.a);
  std::vector<double> w_stored = p.w;
  if (p.w_k_major) {
    for (int k = 0; k < p.k; ++k)
      for (int n = 0; n < p.n; ++n)
        w_stored[static_cast<size_t>(n) * p.k + k] = p.w[static_cast<size_t>(k) * p.n + n];
  }
  w.upload(w_stored);
  out.upload(std::vector<double>(rows * p.n, kSentinel));
  post.upload(std::vector<double>(rows * p.n, kSentinel));
  if (!saved.empty()) d_saved.upload(saved);
  llmc::WgmmaGemmArgs g;
  g.out = with_out ? out.get() : nullptr, g.post = post.get(), g.saved = d_saved.get(), g.a = a.get(), g.w = w.get();
  g.w_k_major = p.w_k_major, g.m = p.m, g.n = p.n, g.k = p.k;
  llmc::wgmma_gemm_launch(epilogue, g, nullptr);
  Outputs result{out.download(), post.download()};
  for (size_t i = mn; i < rows * p.n; ++i) {
    EXPECT_EQ(result.out[i], kSentinel) << "out written past row M at " << i;
    EXPECT_EQ(result.post[i], kSentinel) << "post written past row M at " << i;
  }
  result.out.resize(mn);
  result.post.resize(mn);
  return result;
}

// |out - ref| <= e + 2^-8 (|ref| + e), e = (K + 1) 2^-24 sum_k |a w|: fp32 accumulation, then one bf16 rounding.
void expect_product(const Problem& p, const std::vector<double>& out) {
  for (int m = 0; m < p.m; ++m) {
    for (int n = 0; n < p.n; ++n) {
      double ref = 0.0, magnitude = 0.0;
      for (int k = 0; k < p.k; ++k) {
        const double term = p.a[static_cast<size_t>(m) * p.k + k] * p.w[static_cast<size_t>(k) * p.n + n];
        ref += term;
        magnitude += std::fabs(term);
      }
      const double e = (p.k + 1) * std::ldexp(magnitude, -24);
      ASSERT_LE(std::fabs(out[static_cast<size_t>(m) * p.n + n] - ref), e + std::ldexp(std::fabs(ref) + e, -8))
          << "m " << m << " n " << n;
    }
  }
}

// M = 200 cuts the second row tile; K = 384 is six k-tiles, around the four-slot ring more than once; N = 136 and
// K = 40 cut the last column tile and the only k-tile (the speedrun-tiny model's fc is 64 x 128 x 32).
const std::vector<std::vector<int>> kShapes = {{128, 128, 64}, {200, 256, 384}, {72, 136, 40}};

TEST(WgmmaGemm, ProductMatchesReference) {
  LLMC_REQUIRE_HOPPER();
  for (const bool w_k_major : {false, true}) {
    for (const auto& shape : kShapes) {
      SCOPED_TRACE("M N K = " + std::to_string(shape[0]) + " " + std::to_string(shape[1]) + " " +
                   std::to_string(shape[2]) + (w_k_major ? ", W (N, K)" : ", W (K, N)"));
      const Problem p = make_problem(shape[0], shape[1], shape[2], 11, w_k_major);
      expect_product(p, run(p, llmc::WgmmaEpilogue::kPlain).out);
    }
  }
}

// The fc epilogue: out is the same product as the plain kernel's (bitwise: same kernel, same order), post its
// ReLU^2 rounded to bf16; without out (the 2026-07-17 model's), the same post and no pre.
TEST(WgmmaGemm, ReluSquaredEpilogueWritesPreAndPost) {
  LLMC_REQUIRE_HOPPER();
  for (const auto& shape : kShapes) {
    const Problem p = make_problem(shape[0], shape[1], shape[2], 12);
    const Outputs plain = run(p, llmc::WgmmaEpilogue::kPlain);
    const Outputs fused = run(p, llmc::WgmmaEpilogue::kReluSquared);
    const Outputs post_only = run(p, llmc::WgmmaEpilogue::kReluSquared, {}, /*with_out=*/false);
    for (size_t i = 0; i < plain.out.size(); ++i) {
      ASSERT_EQ(fused.out[i], plain.out[i]) << i;
      const double pre = fused.out[i];
      ASSERT_EQ(fused.post[i], bf16_value(static_cast<float>(pre > 0.0 ? pre * pre : 0.0))) << i;
      ASSERT_EQ(post_only.post[i], fused.post[i]) << i;
      ASSERT_EQ(post_only.out[i], kSentinel) << "pre written without out at " << i;
    }
  }
}

// The backward epilogues: bf16(2 relu(pre) * bf16(product)) from the pre-activation, bf16(2 sqrt(post) *
// bf16(product)) from the post-activation (W stored (N, K), as the 2026-07-17 model reads its c_proj): the unfused
// path's arithmetic, bitwise.
TEST(WgmmaGemm, ReluSquaredBackwardEpiloguesScaleByTheSlope) {
  LLMC_REQUIRE_HOPPER();
  for (const bool from_post : {false, true}) {
    for (const auto& shape : kShapes) {
      const Problem p = make_problem(shape[0], shape[1], shape[2], 13, from_post);
      std::mt19937 rng(14);
      std::vector<double> saved = random_values(static_cast<size_t>(p.m) * p.n, rng, from_post ? 0.0 : -2.0, 2.0);
      for (double& x : saved) x = bf16_value(x);
      const Outputs plain = run(p, llmc::WgmmaEpilogue::kPlain);
      const Outputs fused = run(p, from_post ? llmc::WgmmaEpilogue::kReluSquaredBackwardFromPost
                                             : llmc::WgmmaEpilogue::kReluSquaredBackward, saved);
      int positive = 0;
      for (size_t i = 0; i < plain.out.size(); ++i) {
        const float x = static_cast<float>(saved[i]);
        const float slope = from_post ? 2.0f * std::sqrt(x) : x > 0.0f ? 2.0f * x : 0.0f;
        ASSERT_EQ(fused.out[i], bf16_value(slope * static_cast<float>(plain.out[i]))) << i;
        positive += saved[i] > 0.0;
      }
      EXPECT_GT(positive, 0);
    }
  }
}

// kQkvRope (the 2025-10-31 model's attention input): out is the plain product (bitwise); rot's q and k heads are
// qk_norm_rope_forward's n = x / rms(x) rotated by the tables, within one bf16 rounding (2^-8 relative) plus the
// fp32 arithmetic's 2^-15 of the terms (the sum of squares over D in another order, rsqrtf, two products); rstd
// within 2^-16; v is a v + b ve within one bf16 rounding (b = 0 without ve). Heads of 16 (a tile of 8 heads, N cut
// at 96), 64 and 128 (a tile per head), M cut.
TEST(WgmmaGemm, QkvRopeEpilogueNormalisesRotatesAndMixes) {
  LLMC_REQUIRE_HOPPER();
  struct Case { int m, C, k, D; bool value_embed; };
  for (const Case& c : {Case{72, 32, 40, 16, true}, Case{64, 128, 64, 64, false}, Case{130, 256, 64, 128, true}}) {
    SCOPED_TRACE("M " + std::to_string(c.m) + " C " + std::to_string(c.C) + " D " + std::to_string(c.D));
    const int N = 3 * c.C, half = c.D / 2, heads = 2 * c.C / c.D;
    const Problem p = make_problem(c.m, N, c.k, 18, /*w_k_major=*/true);
    std::mt19937 rng(19);
    std::vector<double> cos_t = random_values(static_cast<size_t>(c.m) * half, rng), sin_t = cos_t;
    for (double& x : sin_t) x = random_values(1, rng)[0];
    std::vector<double> ve = random_values(static_cast<size_t>(c.m) * c.C, rng);
    for (auto* v : {&cos_t, &sin_t, &ve})
      for (double& x : *v) x = bf16_value(x);
    const std::vector<float> scalars = {0.75f, -1.25f};
    DeviceBuffer<bf16> a(p.a.size()), w(p.w.size()), out(static_cast<size_t>(c.m) * N), rot(static_cast<size_t>(c.m) * N);
    DeviceBuffer<bf16> d_cos(cos_t.size()), d_sin(sin_t.size()), d_ve(ve.size());
    DeviceBuffer<float> rstd(static_cast<size_t>(c.m) * heads), d_scalars(2);
    a.upload(p.a);
    std::vector<double> w_stored(p.w.size());
    for (int k = 0; k < c.k; ++k)
      for (int n = 0; n < N; ++n) w_stored[static_cast<size_t>(n) * c.k + k] = p.w[static_cast<size_t>(k) * N + n];
    w.upload(w_stored);
    d_cos.upload(cos_t), d_sin.upload(sin_t), d_ve.upload(ve);
    d_scalars.upload_raw(scalars);
    llmc::WgmmaGemmArgs g;
    g.out = out.get(), g.a = a.get(), g.w = w.get(), g.w_k_major = true, g.m = c.m, g.n = N, g.k = c.k;
    g.qkv.rot = rot.get(), g.qkv.rstd = rstd.get(), g.qkv.cos_table = d_cos.get(), g.qkv.sin_table = d_sin.get();
    g.qkv.value_embed = c.value_embed ? d_ve.get() : nullptr, g.qkv.scalars = d_scalars.get();
    g.qkv.a = {llmc::MixScalar::kIdentity, 0}, g.qkv.b = {llmc::MixScalar::kIdentity, 1}, g.qkv.head_dim = c.D;
    llmc::wgmma_gemm_launch(llmc::WgmmaEpilogue::kQkvRope, g, nullptr);
    const std::vector<double> qkv = out.download(), got = rot.download(), got_rstd = rstd.download();
    EXPECT_EQ(qkv, run(p, llmc::WgmmaEpilogue::kPlain).out);
    for (int t = 0; t < c.m; ++t) {
      const double* x = qkv.data() + static_cast<size_t>(t) * N;
      const double* y = got.data() + static_cast<size_t>(t) * N;
      for (int h = 0; h < heads; ++h) {
        double sum = 0.0;
        for (int j = 0; j < c.D; ++j) sum += x[h * c.D + j] * x[h * c.D + j];
        const double r = 1.0 / std::sqrt(sum / c.D + 1.1920928955078125e-07);
        ASSERT_NEAR(got_rstd[static_cast<size_t>(t) * heads + h], r, std::ldexp(r, -16)) << "t " << t << " head " << h;
        for (int j = 0; j < half; ++j) {
          const double n1 = x[h * c.D + j] * r, n2 = x[h * c.D + j + half] * r;
          const double cs = cos_t[static_cast<size_t>(t) * half + j], sn = sin_t[static_cast<size_t>(t) * half + j];
          const double terms = std::fabs(n1 * cs) + std::fabs(n2 * sn) + std::fabs(n1 * sn) + std::fabs(n2 * cs);
          const double y1 = n1 * cs + n2 * sn, y2 = -n1 * sn + n2 * cs;
          ASSERT_NEAR(y[h * c.D + j], y1, std::ldexp(std::fabs(y1), -8) + std::ldexp(terms, -15)) << t << " " << h;
          ASSERT_NEAR(y[h * c.D + j + half], y2, std::ldexp(std::fabs(y2), -8) + std::ldexp(terms, -15)) << t;
        }
      }
      for (int col = 0; col < c.C; ++col) {
        const double v = x[2 * c.C + col], e = c.value_embed ? ve[static_cast<size_t>(t) * c.C + col] : 0.0;
        const double want = scalars[0] * v + (c.value_embed ? scalars[1] * e : 0.0);
        const double terms = std::fabs(scalars[0] * v) + std::fabs(scalars[1] * e);
        ASSERT_NEAR(y[2 * c.C + col], want, std::ldexp(std::fabs(want), -8) + std::ldexp(terms, -22))
            << "v at " << t << " " << col;
      }
    }
  }
}

// The record's widths (the fc GEMM, N = 3,072 and K = 768: 24 column tiles, 12 k-tiles) over 8,192 rows (64 row
// tiles; the record's 32,768 only repeat them), W both ways: 2,000 sampled outputs against the double reference.
// GPU only: the emulation would take hours.
TEST(WgmmaGemm, RecordShapeMatchesSampledReference) {
  LLMC_REQUIRE_HOPPER();
  if (LLMC_IS_EMULATION) GTEST_SKIP() << "skipped: GPU-only size (39 GFLOP; the emulated kernel tests cover the logic)";
  const int M = 8192, N = 3072, K = 768;
  for (const bool w_k_major : {false, true}) {
    const Problem p = make_problem(M, N, K, 16, w_k_major);
    const std::vector<double> out = run(p, llmc::WgmmaEpilogue::kPlain).out;
    std::mt19937 rng(17);
    std::uniform_int_distribution<int> row(0, M - 1), column(0, N - 1);
    for (int sample = 0; sample < 2000; ++sample) {
      const int m = sample == 0 ? M - 1 : row(rng), n = sample == 0 ? N - 1 : column(rng);
      double ref = 0.0, magnitude = 0.0;
      for (int k = 0; k < K; ++k) {
        const double term = p.a[static_cast<size_t>(m) * K + k] * p.w[static_cast<size_t>(k) * N + n];
        ref += term;
        magnitude += std::fabs(term);
      }
      const double e = (K + 1) * std::ldexp(magnitude, -24);
      ASSERT_LE(std::fabs(out[static_cast<size_t>(m) * N + n] - ref), e + std::ldexp(std::fabs(ref) + e, -8))
          << "m " << m << " n " << n << (w_k_major ? ", W (N, K)" : ", W (K, N)");
    }
  }
}

TEST(WgmmaGemm, RefusesShapesItDoesNotTake) {
  LLMC_REQUIRE_HOPPER();
  for (const auto& shape : std::vector<std::vector<int>>{{128, 100, 64}, {128, 128, 36}, {0, 128, 64}}) {
    const Problem p = make_problem(std::max(shape[0], 1), shape[1], shape[2], 15);
    DeviceBuffer<bf16> a(p.a.size()), w(p.w.size()), out(static_cast<size_t>(p.m) * p.n);
    llmc::WgmmaGemmArgs g;
    g.out = out.get(), g.a = a.get(), g.w = w.get(), g.m = shape[0], g.n = shape[1], g.k = shape[2];
    EXPECT_THROW(llmc::wgmma_gemm_launch(llmc::WgmmaEpilogue::kPlain, g, nullptr), std::invalid_argument);
  }
  // Only the fc epilogue may go without out.
  const Problem p = make_problem(128, 128, 64, 16);
  DeviceBuffer<bf16> a(p.a.size()), w(p.w.size()), post(static_cast<size_t>(p.m) * p.n);
  llmc::WgmmaGemmArgs g;
  g.post = post.get(), g.saved = post.get(), g.a = a.get(), g.w = w.get(), g.m = p.m, g.n = p.n, g.k = p.k;
  for (const auto epilogue : {llmc::WgmmaEpilogue::kPlain, llmc::WgmmaEpilogue::kReluSquaredBackward})
    EXPECT_THROW(llmc::wgmma_gemm_launch(epilogue, g, nullptr), std::invalid_argument);
}

}  // namespace
