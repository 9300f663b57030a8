// The FP8 head and the FP8 MLP's maxima against the emulation's conversion model at a small shape: the fp8 copies
// equal to the model's, the products within the accumulator bound of the double products of those copies
// (test/kernels/fp8_test_support.h), the gradient scale following the loss scale, the #89 model's (C, V) head from
// codes likewise, the block maxima with every warp's share. The check of the FP8 sites among the kernel mutants
// (fp8_emu is built with LLMC_KERNEL_MUTANTS; test/kernels/run_kernel_mutants.py switches each on and expects this
// test to fail).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <vector>

#include "llmc/emu/fp8_convert.h"
#include "llmc/kernels/fp8_head.cuh"
#include "llmc/kernels/fp8_mlp.cuh"
#include "test/kernels/fp8_test_support.h"
#include "test/support/device_buffer.h"
#include "test/support/gpu_test.h"

namespace {

using llmc::test::DeviceBuffer;
constexpr int T = 80, C = 48, V = 144;

// The values of the fp8 copy of `values` / scale (rows x cols) as the conversion model makes them.
std::vector<double> model_copy(const std::vector<double>& values, float scale, llmc::emu::Fp8Format format) {
  std::vector<double> copy(values.size());
  for (size_t i = 0; i < values.size(); i++)
    copy[i] = llmc::emu::fp8_decode(llmc::emu::fp8_encode(static_cast<float>(values[i]) / scale, format), format);
  return copy;
}

template <class Fp8>
bool copy_matches(const Fp8* device, const std::vector<double>& expected, int rows, int cols, bool transposed) {
  std::vector<Fp8> codes(expected.size());
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaMemcpy(codes.data(), device, codes.size(), cudaMemcpyDeviceToHost));
  for (int r = 0; r < rows; r++)
    for (int c = 0; c < cols; c++)
      if (llmc::emu::fp8_decode(
              codes[transposed ? static_cast<size_t>(c) * rows + r : static_cast<size_t>(r) * cols + c].__x,
              llmc::Fp8Traits<Fp8>::kFormat) != expected[static_cast<size_t>(r) * cols + c])
        return false;
  return true;
}

// got (rows x cols) = scale * sum_k a[i * sa + k * ka] b[j * sb + k * kb] within the accumulator bound.
bool product_matches(const std::vector<double>& got, int rows, int cols, int k, const double* a, size_t sa, size_t ka,
                     const double* b, size_t sb, size_t kb, double scale, bool fast, double output_roundoff) {
  std::vector<double> row_a(k), row_b(k);
  for (int i = 0; i < rows; i++) {
    for (int j = 0; j < cols; j++) {
      for (int kk = 0; kk < k; kk++) {
        row_a[kk] = a[i * sa + kk * ka];
        row_b[kk] = b[j * sb + kk * kb];
      }
      const llmc::test::DotWithBound dot = llmc::test::fp8_dot_with_bound(row_a.data(), row_b.data(), k, fast);
      const double tolerance = llmc::test::fp8_gemm_tolerance(dot, scale, 0.0, output_roundoff);
      if (!(std::fabs(got[static_cast<size_t>(i) * cols + j] - scale * dot.exact) <= tolerance)) return false;
    }
  }
  return true;
}

// fp8_head_training_forward's g_s follows the loss scale: the dz of a loss scaled by 2^-20 (a mean over 2^20
// tokens; exact in bf16) gives exactly 2^-20 times dx and dW, since every fp8 code is the same. With the
// record's fixed g_s = 1/448 these dz / g_s fall below e5m2's smallest subnormal and most codes flush to zero.
bool grad_scale_follows_loss_scale(llmc::MatmulContext& context, const std::vector<double>& x,
                                   const std::vector<double>& w, const std::vector<double>& dz) {
  DeviceBuffer<__nv_bfloat16> d_x(x.size()), d_w(w.size()), d_dz(dz.size()), d_z(dz.size()), d_dx(x.size());
  DeviceBuffer<float> d_dw(w.size());
  d_x.upload(x);
  d_w.upload(w);
  llmc::Fp8HeadWorkspace head(T, C, V, llmc::Fp8HeadScales::speedrun(C));
  std::vector<double> dx[2], dw[2];
  const float dlosses[2] = {1.0f, 0x1p-20f};
  for (int run = 0; run < 2; run++) {
    std::vector<double> scaled(dz);
    for (double& value : scaled) value *= dlosses[run];
    d_dz.upload(scaled);
    llmc::fp8_head_training_forward(context, head, d_z.get(), d_x.get(), d_w.get(), T, dlosses[run], nullptr);
    llmc::fp8_head_backward(context, head, d_dx.get(), d_dw.get(), d_dz.get(), T, false, nullptr);
    dx[run] = d_dx.download();
    dw[run] = d_dw.download();
  }
  for (size_t i = 0; i < dx[0].size(); i++)
    if (dx[1][i] != dx[0][i] * 0x1p-20) return false;
  for (size_t i = 0; i < dw[0].size(); i++)
    if (dw[1][i] != dw[0][i] * 0x1p-20) return false;
  return true;
}

// The #89 model's head: W stored (C, V), dz's codes written into g8 before fp8_head_backward_from_codes (here by
// fp8_cast, as the loss kernel writes them). Its copies and products must be the same as the (V, C) head's,
// dW transposed; an error thrown (a GEMM refusing its operands) is a difference too.
bool in_out_head_matches(llmc::MatmulContext& context, const std::vector<double>& x, const std::vector<double>& w,
                         const std::vector<double>& dz) try {
  std::vector<double> w_t(w.size());
  for (int v = 0; v < V; v++)
    for (int c = 0; c < C; c++) w_t[static_cast<size_t>(c) * V + v] = w[static_cast<size_t>(v) * C + c];
  DeviceBuffer<__nv_bfloat16> d_x(x.size()), d_w(w.size()), d_dz(dz.size()), d_z(dz.size()), d_dx(x.size());
  DeviceBuffer<float> d_dw(w.size());
  d_x.upload(x);
  d_w.upload(w_t);
  d_dz.upload(dz);
  const llmc::Fp8HeadScales s = llmc::Fp8HeadScales::speedrun(C);
  llmc::Fp8HeadWorkspace head(T, C, V, s, nullptr, llmc::Fp8HeadWeight::kInOut);
  llmc::fp8_head_forward(context, head, d_z.get(), d_x.get(), d_w.get(), T, true, nullptr);
  llmc::fp8_cast(head.g8(), d_dz.get(), static_cast<size_t>(T) * V, s.grad, nullptr);
  llmc::fp8_head_backward_from_codes(context, head, d_dx.get(), d_dw.get(), T, false, nullptr);
  using llmc::emu::Fp8Format;
  const std::vector<double> x8 = model_copy(x, s.x, Fp8Format::kE4M3), w8 = model_copy(w, s.weight, Fp8Format::kE4M3),
                            g8 = model_copy(dz, s.grad, Fp8Format::kE5M2);
  const double bf16 = std::ldexp(1.0, -8);
  // dW (C, V): rows of x8^T times rows of g8^T.
  return copy_matches(head.w8(), w8, V, C, false) && copy_matches(head.w8t(), w8, V, C, true) &&
         copy_matches(head.g8t(), g8, T, V, true) &&
         product_matches(d_z.download(), T, V, C, x8.data(), C, 1, w8.data(), C, 1, double{s.x} * s.weight, true,
                         bf16) &&
         product_matches(d_dx.download(), T, C, V, g8.data(), V, 1, w8.data(), 1, C, double{s.grad} * s.weight, false,
                         bf16) &&
         product_matches(d_dw.download(), C, V, T, x8.data(), 1, C, g8.data(), 1, V, double{s.x} * s.grad, false, 0.0);
} catch (const std::exception& error) {
  std::fprintf(stderr, "the (C, V) head threw: %s\n", error.what());
  return false;
}

// The FP8 MLP's maxima (abs_max, relu_squared_fp8_forward's amax) over values whose largest magnitude lies in the
// last warp of a block, so that a block maximum missing any warp's share differs. Exact: a maximum of bf16 values.
bool mlp_maxima_match() {
  constexpr size_t n = 8 * llmc::kFp8MlpBlock;
  std::vector<double> values(n);
  for (size_t i = 0; i < n; i++) values[i] = -1.0 + static_cast<double>(i % 97) / 64.0;
  values[n - 5] = 3.5;
  DeviceBuffer<__nv_bfloat16> d_values(n), d_post(n);
  DeviceBuffer<llmc::fp8e4m3> d_post8(n);
  DeviceBuffer<float> d_amax(1), d_scale(1);
  d_values.upload(values);
  d_scale.upload(std::vector<double>{1.0});
  llmc::abs_max(d_amax.get(), d_values.get(), n, nullptr);
  const double abs_max = d_amax.download()[0];
  llmc::relu_squared_fp8_forward(d_post.get(), d_post8.get(), d_amax.get(), d_values.get(), d_scale.get(), n, nullptr);
  const double relu_squared_max = d_amax.download()[0];
  if (abs_max != 3.5 || relu_squared_max != 3.5 * 3.5)
    std::fprintf(stderr, "FP8 MLP maxima %g and %g, expected 3.5 and 12.25\n", abs_max, relu_squared_max);
  return abs_max == 3.5 && relu_squared_max == 3.5 * 3.5;
}

bool head_matches_model() {
  std::mt19937 rng(4242);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> x(static_cast<size_t>(T) * C), w(static_cast<size_t>(V) * C), dz(static_cast<size_t>(T) * V);
  for (double& value : x) value = llmc::to_float(llmc::from_float<__nv_bfloat16>(static_cast<float>(normal(rng))));
  for (double& value : w)
    value = llmc::to_float(llmc::from_float<__nv_bfloat16>(static_cast<float>(0.05 * normal(rng))));
  for (double& value : dz)
    value = llmc::to_float(llmc::from_float<__nv_bfloat16>(static_cast<float>(0.01 * normal(rng))));
  DeviceBuffer<__nv_bfloat16> d_x(x.size()), d_w(w.size()), d_dz(dz.size()), d_z(dz.size()), d_dx(x.size());
  DeviceBuffer<float> d_dw(w.size());
  d_x.upload(x);
  d_w.upload(w);
  d_dz.upload(dz);
  llmc::MatmulContext context;
  const llmc::Fp8HeadScales s = llmc::Fp8HeadScales::speedrun(C);
  llmc::Fp8HeadWorkspace head(T, C, V, s);
  llmc::fp8_head_forward(context, head, d_z.get(), d_x.get(), d_w.get(), T, true, nullptr);
  llmc::fp8_head_backward(context, head, d_dx.get(), d_dw.get(), d_dz.get(), T, false, nullptr);

  using llmc::emu::Fp8Format;
  const std::vector<double> x8 = model_copy(x, s.x, Fp8Format::kE4M3), w8 = model_copy(w, s.weight, Fp8Format::kE4M3),
                            g8 = model_copy(dz, s.grad, Fp8Format::kE5M2);
  const double bf16 = std::ldexp(1.0, -8);
  return copy_matches(head.x8(), x8, T, C, false) && copy_matches(head.x8t(), x8, T, C, true) &&
         copy_matches(head.w8(), w8, V, C, false) && copy_matches(head.w8t(), w8, V, C, true) &&
         copy_matches(head.g8(), g8, T, V, false) && copy_matches(head.g8t(), g8, T, V, true) &&
         product_matches(d_z.download(), T, V, C, x8.data(), C, 1, w8.data(), C, 1, double{s.x} * s.weight, true,
                         bf16) &&
         product_matches(d_dx.download(), T, C, V, g8.data(), V, 1, w8.data(), 1, C, double{s.grad} * s.weight, false,
                         bf16) &&
         product_matches(d_dw.download(), V, C, T, g8.data(), 1, V, x8.data(), 1, C, double{s.x} * s.grad, false,
                         0.0) &&
         grad_scale_follows_loss_scale(context, x, w, dz) && in_out_head_matches(context, x, w, dz) &&
         mlp_maxima_match();
}

TEST(Fp8ModelCheck, HeadAndMlpMaximaMatchTheConversionModel) {
  LLMC_REQUIRE_GPU();
  EXPECT_TRUE(head_matches_model());
}

}  // namespace
