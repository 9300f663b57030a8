// The FP8 head (llmc/kernels/fp8_head.cuh), bf16 and fp32 activations, against an independent float64 oracle
// written from docs/recipes.md (test/kernels/fp8_head_reference.py: the record's scales, ml_dtypes' conversions):
//   1. the fp8 copies the head makes (x8, w8, g8 and their transposes) hold exactly the oracle's values;
//   2. z, dx and dW equal the oracle's double products of those values within the accumulator bound of
//      test/kernels/fp8_test_support.h (fast accumulation for z only) plus the epilogue and output roundings;
//   3. against the unquantised double head (x W^T, dz W, dz^T x) within the worst-case FP8 rounding bound
//      derived below; gradient accumulation adds the same dW exactly;
//   4. the same for the #89 model's head: W stored (C, V) and the e5m2 codes of dz written before the backward
//      (as its loss kernel does), the backward transposing them (fp8_head_backward_from_codes).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "llmc/emu/fp8_convert.h"
#include "llmc/kernels/fp8_head.cuh"
#include "test/kernels/fp8_test_support.h"
#include "test/support/device_buffer.h"
#include "test/support/gpu_test.h"
#include "test/support/python_oracle.h"

namespace {

using llmc::test::DeviceBuffer;
using llmc::test::DotWithBound;

constexpr int kTokens = 160, kChannels = 96, kVocab = 208;  // multiples of 16, not of the 64-wide cast tiles

class Fp8Head : public llmc::test::TempDirTest {
 protected:
  Fp8Head() : TempDirTest("llmc_fp8_head") {}
};

template <class Tx>
double roundoff() {
  return std::is_same_v<Tx, float> ? 0.0 : std::ldexp(1.0, -8);  // fp32 output adds no rounding to the epilogue's
}

template <class Tx>
std::vector<double> representable(std::vector<double> values) {
  for (double& value : values) value = llmc::to_float(llmc::from_float<Tx>(static_cast<float>(value)));
  return values;
}

// x: rows of RMS 1 like the head's input norm(x), so |x| <= sqrt(C); W ~ N(0, 0.05) kept below the 0.875 where
// W / w_s saturates; dz like a summed cross-entropy gradient: small values and one larger negative per row.
struct HeadInputs {
  std::vector<double> x, w, dz;
};

template <class Tx>
HeadInputs head_inputs(std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  HeadInputs in;
  in.x.resize(static_cast<size_t>(kTokens) * kChannels);
  for (int t = 0; t < kTokens; t++) {
    double sum_squares = 0.0;
    for (int c = 0; c < kChannels; c++) {
      in.x[t * kChannels + c] = normal(rng);
      sum_squares += in.x[t * kChannels + c] * in.x[t * kChannels + c];
    }
    for (int c = 0; c < kChannels; c++) in.x[t * kChannels + c] /= std::sqrt(sum_squares / kChannels);
  }
  in.w.resize(static_cast<size_t>(kVocab) * kChannels);
  for (double& value : in.w) value = std::fmax(-0.8, std::fmin(0.8, 0.05 * normal(rng)));
  in.dz.resize(static_cast<size_t>(kTokens) * kVocab);
  for (double& value : in.dz) value = 1e-3 * normal(rng);
  for (int t = 0; t < kTokens; t++) in.dz[t * kVocab + (t * 37) % kVocab] = -0.5 - 0.5 * std::fabs(normal(rng)) / 3.0;
  in.x = representable<Tx>(in.x);
  in.w = representable<Tx>(in.w);
  in.dz = representable<Tx>(in.dz);
  return in;
}

// Element (i, j) of A B^T for A (rows, k) and B (cols, k) row-major, or of a column view: `stride_*` steps k.
struct DotOperand {
  const double* base;
  size_t row_stride, k_stride;
  std::vector<double> row(int r, int k) const {
    std::vector<double> values(k);
    for (int i = 0; i < k; i++) values[i] = base[r * row_stride + i * k_stride];
    return values;
  }
};

// Worst-case rounding of v = value / scale to fp8: the float division (2^-24 relative), then the conversion:
// at most half a spacing, 2^-(mantissa bits + 1) relative for normal results (2^-4 e4m3, 2^-3 e5m2) or half
// the subnormal spacing absolute (2^-10, 2^-17). No saturation (the inputs stay in range).
double quantization_error(double v, llmc::emu::Fp8Format format) {
  const double relative = format == llmc::emu::Fp8Format::kE4M3 ? std::ldexp(1.0, -4) : std::ldexp(1.0, -3);
  const double absolute = format == llmc::emu::Fp8Format::kE4M3 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -17);
  return (relative + std::ldexp(1.0, -24) * (1.0 + relative)) * std::fabs(v) + absolute;
}

// |Σ q_a q_b - Σ a b| <= Σ (|a| e_b + |b| e_a + e_a e_b) with e the quantisation errors of a and b.
double quantization_bound(const std::vector<double>& a, const std::vector<double>& b, llmc::emu::Fp8Format format_a,
                          llmc::emu::Fp8Format format_b) {
  double bound = 0.0;
  for (size_t i = 0; i < a.size(); i++) {
    const double error_a = quantization_error(a[i], format_a), error_b = quantization_error(b[i], format_b);
    bound += std::fabs(a[i]) * error_b + std::fabs(b[i]) * error_a + error_a * error_b;
  }
  return bound;
}

// Checks got (rows x cols) against the oracle's product of fp8 values (tight) and against the unquantised
// product (loose, FP8 rounding included). a8/b8: the fp8 values; a/b: the unquantised values over scale.
struct ProductCheck {
  const char* name;
  int rows, cols, k;
  DotOperand a8, b8, a, b;
  llmc::emu::Fp8Format format_a, format_b;
  double scale;
  bool fast_accumulation;
  double output_roundoff;
};

void check_product(const ProductCheck& p, const std::vector<double>& got, const std::vector<double>& oracle) {
  int failures = 0;
  for (int i = 0; i < p.rows && failures < 5; i++) {
    for (int j = 0; j < p.cols && failures < 5; j++) {
      const std::vector<double> a8 = p.a8.row(i, p.k), b8 = p.b8.row(j, p.k), a = p.a.row(i, p.k), b = p.b.row(j, p.k);
      const DotWithBound dot = llmc::test::fp8_dot_with_bound(a8.data(), b8.data(), p.k, p.fast_accumulation);
      const size_t index = static_cast<size_t>(i) * p.cols + j;
      const double tight = llmc::test::fp8_gemm_tolerance(dot, p.scale, 0.0, p.output_roundoff);
      double exact = 0.0;
      for (int kk = 0; kk < p.k; kk++) exact += a[kk] * b[kk];
      const DotWithBound unquantised{exact, dot.bound + quantization_bound(a, b, p.format_a, p.format_b)};
      const double loose = llmc::test::fp8_gemm_tolerance(unquantised, p.scale, 0.0, p.output_roundoff);
      if (!(std::fabs(got[index] - oracle[index]) <= tight)) {
        ADD_FAILURE() << p.name << "[" << i << "," << j << "] = " << got[index] << ", oracle " << oracle[index]
                      << " +- " << tight;
        failures++;
      } else if (!(std::fabs(got[index] - p.scale * exact) <= loose)) {
        ADD_FAILURE() << p.name << "[" << i << "," << j << "] = " << got[index] << ", unquantised " << p.scale * exact
                      << " +- " << loose;
        failures++;
      }
    }
  }
}

// The fp8 copy on the device, decoded, must be the oracle's values exactly (transposed: stored (cols, rows)).
template <class Fp8>
void expect_fp8_copy(const char* name, Fp8* device, int rows, int cols, bool transposed,
                     const std::vector<double>& oracle) {
  std::vector<Fp8> codes(static_cast<size_t>(rows) * cols);
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(codes.data(), device, codes.size(), cudaMemcpyDeviceToHost));
  for (int r = 0; r < rows; r++) {
    for (int c = 0; c < cols; c++) {
      const size_t index = transposed ? static_cast<size_t>(c) * rows + r : static_cast<size_t>(r) * cols + c;
      const double value = llmc::emu::fp8_decode(codes[index].__x, llmc::Fp8Traits<Fp8>::kFormat);
      ASSERT_EQ(value, oracle[static_cast<size_t>(r) * cols + c]) << name << " at (" << r << "," << c << ")";
    }
  }
}

std::vector<double> divided(const std::vector<double>& values, double scale) {
  std::vector<double> result(values);
  for (double& value : result) value /= scale;
  return result;
}

// (rows, cols) row-major -> (cols, rows).
std::vector<double> transposed(const std::vector<double>& values, size_t rows, size_t cols) {
  std::vector<double> result(values.size());
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) result[c * rows + r] = values[r * cols + c];
  return result;
}

// The backward of either head: the #44 one casts dz itself; the #89 one finds dz's e5m2 codes in g8 (written
// here by fp8_cast, as the loss kernel writes them) and transposes them.
template <class Tx>
void run_head_backward(llmc::MatmulContext& context, llmc::Fp8HeadWorkspace& workspace, Tx* dx, float* dw,
                       const Tx* dz, bool accumulate) {
  if (workspace.weight_layout() == llmc::Fp8HeadWeight::kOutIn) {
    llmc::fp8_head_backward(context, workspace, dx, dw, dz, kTokens, accumulate, nullptr);
    return;
  }
  llmc::fp8_cast(workspace.g8(), dz, static_cast<size_t>(kTokens) * kVocab, workspace.scales().grad, nullptr);
  llmc::fp8_head_backward_from_codes(context, workspace, dx, dw, kTokens, accumulate, nullptr);
}

template <class Tx>
void check_head(const llmc::test::PythonOracle& oracle, unsigned seed,
                llmc::Fp8HeadWeight layout = llmc::Fp8HeadWeight::kOutIn) {
  const bool in_out = layout == llmc::Fp8HeadWeight::kInOut;
  std::mt19937 rng(seed);
  const HeadInputs in = head_inputs<Tx>(rng);
  oracle.put("x", {kTokens, kChannels}, in.x);
  oracle.put("w", {kVocab, kChannels}, in.w);
  oracle.put("dz", {kTokens, kVocab}, in.dz);
  oracle.config("{\"channels\": " + std::to_string(kChannels) + "}");
  oracle.run("head");

  const llmc::Fp8HeadScales scales = llmc::Fp8HeadScales::speedrun(kChannels);
  const std::vector<double> oracle_scales = oracle.get("scales");
  EXPECT_EQ(scales.x, oracle_scales[0]);
  EXPECT_EQ(scales.weight, oracle_scales[1]);
  EXPECT_EQ(scales.grad, oracle_scales[2]);

  DeviceBuffer<Tx> d_x(in.x.size()), d_w(in.w.size()), d_dz(in.dz.size());
  d_x.upload(in.x);
  d_w.upload(in_out ? transposed(in.w, kVocab, kChannels) : in.w);
  d_dz.upload(in.dz);
  DeviceBuffer<Tx> d_z(static_cast<size_t>(kTokens) * kVocab), d_dx(in.x.size());
  DeviceBuffer<float> d_dw(in.w.size());
  llmc::MatmulContext context;
  llmc::Fp8HeadWorkspace workspace(kTokens, kChannels, kVocab, scales, nullptr, layout);
  llmc::fp8_head_forward(context, workspace, d_z.get(), d_x.get(), d_w.get(), kTokens, true, nullptr);
  run_head_backward(context, workspace, d_dx.get(), d_dw.get(), d_dz.get(), false);

  const std::vector<double> x8 = oracle.get("x8"), w8 = oracle.get("w8"), g8 = oracle.get("g8");
  expect_fp8_copy("x8", workspace.x8(), kTokens, kChannels, false, x8);
  expect_fp8_copy("x8t", workspace.x8t(), kTokens, kChannels, true, x8);
  expect_fp8_copy("w8", workspace.w8(), kVocab, kChannels, false, w8);
  expect_fp8_copy("w8t", workspace.w8t(), kVocab, kChannels, true, w8);
  expect_fp8_copy("g8", workspace.g8(), kTokens, kVocab, false, g8);
  expect_fp8_copy("g8t", workspace.g8t(), kTokens, kVocab, true, g8);

  using llmc::emu::Fp8Format;
  const std::vector<double> xs = divided(in.x, scales.x), ws = divided(in.w, scales.weight),
                            gs = divided(in.dz, scales.grad);
  const size_t C = kChannels, V = kVocab;
  // z (T,V): k over C; rows of x and of W.
  check_product({"z",
                 kTokens,
                 kVocab,
                 kChannels,
                 {x8.data(), C, 1},
                 {w8.data(), C, 1},
                 {xs.data(), C, 1},
                 {ws.data(), C, 1},
                 Fp8Format::kE4M3,
                 Fp8Format::kE4M3,
                 static_cast<double>(scales.x) * scales.weight,
                 true,
                 roundoff<Tx>()},
                d_z.download(), oracle.get("z"));
  // dx (T,C): k over V; rows of dz, columns of W.
  check_product({"dx",
                 kTokens,
                 kChannels,
                 kVocab,
                 {g8.data(), V, 1},
                 {w8.data(), 1, C},
                 {gs.data(), V, 1},
                 {ws.data(), 1, C},
                 Fp8Format::kE5M2,
                 Fp8Format::kE4M3,
                 static_cast<double>(scales.grad) * scales.weight,
                 false,
                 roundoff<Tx>()},
                d_dx.download(), oracle.get("dx"));
  // dW (V,C): k over T; columns of dz and of x. The (C, V) weight's gradient is its transpose.
  const std::vector<double> dw = in_out ? transposed(d_dw.download(), kChannels, kVocab) : d_dw.download();
  check_product({"dW",
                 kVocab,
                 kChannels,
                 kTokens,
                 {g8.data(), 1, V},
                 {x8.data(), 1, C},
                 {gs.data(), 1, V},
                 {xs.data(), 1, C},
                 Fp8Format::kE5M2,
                 Fp8Format::kE4M3,
                 static_cast<double>(scales.x) * scales.grad,
                 false,
                 0.0},
                dw, oracle.get("dw"));

  // Gradient accumulation: the same backward again adds the same dW (an exact doubling in fp32).
  run_head_backward(context, workspace, static_cast<Tx*>(nullptr), d_dw.get(), d_dz.get(), true);
  const std::vector<double> accumulated = in_out ? transposed(d_dw.download(), kChannels, kVocab) : d_dw.download();
  for (size_t i = 0; i < dw.size(); i++) ASSERT_EQ(accumulated[i], 2.0 * dw[i]) << "dW[" << i << "] accumulated";
}

TEST_F(Fp8Head, Bf16MatchesOracleAndDoubleHead) {
  LLMC_REQUIRE_GPU();
  check_head<__nv_bfloat16>(llmc::test::PythonOracle(dir(), "test/kernels/fp8_head_reference.py"), 9100);
}

TEST_F(Fp8Head, Fp32MatchesOracleAndDoubleHead) {
  LLMC_REQUIRE_GPU();
  check_head<float>(llmc::test::PythonOracle(dir(), "test/kernels/fp8_head_reference.py"), 9200);
}

// The #89 model's head: the same copies and products from the (C, V) weight and from g8 written beforehand.
TEST_F(Fp8Head, InOutWeightAndCodesFromTheLossMatchOracle) {
  LLMC_REQUIRE_GPU();
  check_head<__nv_bfloat16>(llmc::test::PythonOracle(dir(), "test/kernels/fp8_head_reference.py"), 9150,
                            llmc::Fp8HeadWeight::kInOut);
  check_head<float>(llmc::test::PythonOracle(dir(), "test/kernels/fp8_head_reference.py"), 9250,
                    llmc::Fp8HeadWeight::kInOut);
}

// The record's constants (SPEEDRUN89.md section 4), each rounded once from its decimal value.
TEST(Fp8HeadScales, Modded89IsTheRecordsAndFollowsTheLossScale) {
  const llmc::Fp8HeadScales scales = llmc::Fp8HeadScales::modded89();
  EXPECT_EQ(scales.x, static_cast<float>(100.0 / 448.0));
  EXPECT_EQ(scales.weight, static_cast<float>(1.6 / 448.0));
  EXPECT_EQ(scales.grad, static_cast<float>(0.75 / 448.0));
  EXPECT_EQ(llmc::fp8_head_grad_scale(1.0f, llmc::kModded89GradUnit), scales.grad);
  EXPECT_EQ(llmc::fp8_head_grad_scale(0x1p-10f, llmc::kModded89GradUnit), static_cast<float>(0x1p-10 * 0.75 / 448.0));
}

// The forward without the transposed copies (fp8_cast only) gives the same logits; the backward then refuses.
TEST_F(Fp8Head, ForwardOnlyGivesSameLogitsAndBackwardNeedsKeptCopies) {
  LLMC_REQUIRE_GPU();
  std::mt19937 rng(9300);
  const HeadInputs in = head_inputs<__nv_bfloat16>(rng);
  DeviceBuffer<__nv_bfloat16> d_x(in.x.size()), d_w(in.w.size()), d_dz(in.dz.size());
  d_x.upload(in.x);
  d_w.upload(in.w);
  d_dz.upload(in.dz);
  DeviceBuffer<__nv_bfloat16> d_kept(static_cast<size_t>(kTokens) * kVocab), d_plain(d_kept.size());
  DeviceBuffer<float> d_dw(in.w.size());
  llmc::MatmulContext context;
  llmc::Fp8HeadWorkspace workspace(kTokens, kChannels, kVocab, llmc::Fp8HeadScales::speedrun(kChannels));
  llmc::fp8_head_forward(context, workspace, d_kept.get(), d_x.get(), d_w.get(), kTokens, true, nullptr);
  llmc::fp8_head_forward(context, workspace, d_plain.get(), d_x.get(), d_w.get(), kTokens, false, nullptr);
  EXPECT_EQ(d_kept.download(), d_plain.download());
  EXPECT_THROW(llmc::fp8_head_backward(context, workspace, static_cast<__nv_bfloat16*>(nullptr), d_dw.get(), d_dz.get(),
                                       kTokens, false, nullptr),
               std::logic_error);
  EXPECT_THROW(
      llmc::fp8_head_forward(context, workspace, d_plain.get(), d_x.get(), d_w.get(), kTokens + 16, false, nullptr),
      std::invalid_argument);
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace
