// Tests of the simple window attention (llmc/kernels/simple_window_attention.cuh), the speedrun model's
// attention for the fp32 build and head sizes other than 128: out, lse, dq, dk, dv against the double
// reference of the window attention (test/reference/window_attention_reference.h) for random document
// packings, windows from 0 to beyond T, head sizes 8..128 and fused or separate q/k/v layouts; the
// backward run twice agrees bitwise; a KV cache's continuation (first_row) gives the whole run's rows. Built for fp32
// and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "llmc/kernels/simple_window_attention.cuh"
#include "test/reference/window_attention_reference.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using llmc::floatX;
using llmc::test::DeviceBuffer;
namespace sa = llmc::simple_attention;

struct Case {
  int T, heads, D, window;
  float scale;
  bool fused;
  int max_document;
};

// Document lengths in 1..max_length summing to T, with a one-token document first.
std::vector<int> cu_seqlens_for(int T, int max_length, std::mt19937& rng) {
  std::vector<int> cu = {0, 1};
  std::uniform_int_distribution<int> length(1, max_length);
  while (cu.back() < T) cu.push_back(std::min(T, cu.back() + length(rng)));
  cu.push_back(T);  // a trailing empty document, as the loader's padded array has
  return cu;
}

struct Outputs {
  std::vector<double> out, lse, dq, dk, dv;
};

// The largest, over keys j, of sum_i P_ij: how many queries' worth of softmax mass one key's dk/dv sums.
double max_column_mass(const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& lse,
                       const Case& c, const ref::PackedDocuments& docs) {
  double worst = 0.0;
  for (int h = 0; h < c.heads; h++)
    for (int j = 0; j < c.T; j++) {
      double mass = 0.0;
      for (int i = j; i < c.T; i++) {
        if (!docs.attends(i, j)) continue;
        double score = 0.0;
        for (int d = 0; d < c.D; d++)
          score +=
              q[(static_cast<size_t>(i) * c.heads + h) * c.D + d] * k[(static_cast<size_t>(j) * c.heads + h) * c.D + d];
        mass += std::exp(c.scale * score - lse[static_cast<size_t>(h) * c.T + i]);
      }
      worst = std::max(worst, mass);
    }
  return worst;
}

void check_case(const Case& c, uint32_t seed) {
  SCOPED_TRACE("T " + std::to_string(c.T) + " heads " + std::to_string(c.heads) + " D " + std::to_string(c.D) +
               " window " + std::to_string(c.window) + (c.fused ? " fused" : " separate"));
  std::mt19937 rng(seed);
  const std::vector<int> cu = cu_seqlens_for(c.T, c.max_document, rng);
  const size_t n = static_cast<size_t>(c.T) * c.heads * c.D;
  const std::vector<double> q = llmc::test::random_values(n, rng, -1.5, 1.5),
                            k = llmc::test::random_values(n, rng, -1.5, 1.5), v = llmc::test::random_values(n, rng),
                            dout = llmc::test::random_values(n, rng);
  const ref::PackedDocuments docs{cu, c.window};
  Outputs want{std::vector<double>(n), std::vector<double>(static_cast<size_t>(c.heads) * c.T), std::vector<double>(n),
               std::vector<double>(n), std::vector<double>(n)};
  ref::window_attention_forward(want.out.data(), want.lse.data(), q.data(), k.data(), v.data(), c.T, c.heads, c.D, docs,
                                c.scale);
  ref::window_attention_backward(want.dq.data(), want.dk.data(), want.dv.data(), dout.data(), q.data(), k.data(),
                                 v.data(), c.T, c.heads, c.D, docs, c.scale);

  // Device layout: fused [T, 3, heads, D] (stride 3 heads D) or three buffers with 8 padding elements per row.
  const int64_t row = static_cast<int64_t>(c.heads) * c.D, stride = c.fused ? 3 * row : row + 8;
  auto layout = [&](const std::vector<double>& tensor, std::vector<double>& buffer, int slice) {
    for (int t = 0; t < c.T; t++)
      for (int64_t e = 0; e < row; e++) buffer[static_cast<size_t>(t * stride + slice * row + e)] = tensor[t * row + e];
  };
  auto unlayout = [&](const std::vector<double>& buffer, int slice) {
    std::vector<double> tensor(n);
    for (int t = 0; t < c.T; t++)
      for (int64_t e = 0; e < row; e++) tensor[t * row + e] = buffer[static_cast<size_t>(t * stride + slice * row + e)];
    return tensor;
  };
  const size_t buffer_size = static_cast<size_t>(c.T * stride);
  std::vector<double> host[3];
  const std::vector<double>* inputs[3] = {&q, &k, &v};
  for (int s = 0; s < 3; s++) host[c.fused ? 0 : s].resize(buffer_size, 0.0);
  for (int s = 0; s < 3; s++) layout(*inputs[s], host[c.fused ? 0 : s], c.fused ? s : 0);
  std::vector<std::unique_ptr<DeviceBuffer<floatX>>> d_in, d_grad;
  for (int b = 0; b < (c.fused ? 1 : 3); b++) {
    d_in.push_back(std::make_unique<DeviceBuffer<floatX>>(buffer_size));
    d_in.back()->upload(host[b]);
    d_grad.push_back(std::make_unique<DeviceBuffer<floatX>>(buffer_size));
  }
  auto slice = [&](std::vector<std::unique_ptr<DeviceBuffer<floatX>>>& buffers, int s) {
    return buffers[c.fused ? 0 : s]->get() + (c.fused ? s * row : 0);
  };
  DeviceBuffer<int> d_cu(cu.size());
  d_cu.upload(std::vector<double>(cu.begin(), cu.end()));
  DeviceBuffer<floatX> d_out(n), d_dout(n);
  DeviceBuffer<float> d_lse(static_cast<size_t>(c.heads) * c.T), d_delta(static_cast<size_t>(c.heads) * c.T);
  d_dout.upload(dout);
  const sa::Problem problem{c.T, c.heads, c.D, d_cu.get(), static_cast<int>(cu.size()) - 1, c.window, c.scale};
  sa::forward(d_out.get(), d_lse.get(), slice(d_in, 0), slice(d_in, 1), slice(d_in, 2), stride, problem, nullptr);
  {  // a KV cache's continuation: rows T/2.. bitwise the whole run's (the same thread per row), the others untouched
    sa::Problem continued = problem;
    continued.first_row = c.T / 2;
    DeviceBuffer<floatX> d_rows(n);
    DeviceBuffer<float> d_rows_lse(d_lse.size());
    d_rows.upload(std::vector<double>(n, 5.0));
    d_rows_lse.upload(std::vector<double>(d_lse.size(), 5.0));
    sa::forward(d_rows.get(), d_rows_lse.get(), slice(d_in, 0), slice(d_in, 1), slice(d_in, 2), stride, continued,
                nullptr);
    const std::vector<floatX> rows = d_rows.download_raw(), whole = d_out.download_raw();
    const std::vector<double> rows_lse = d_rows_lse.download(), whole_lse = d_lse.download();
    const size_t split = static_cast<size_t>(continued.first_row) * row;
    for (size_t i = 0; i < n; i++)
      ASSERT_EQ(llmc::to_float(rows[i]), i < split ? 5.0f : llmc::to_float(whole[i])) << "continuation element " << i;
    for (size_t i = 0; i < rows_lse.size(); i++)
      ASSERT_EQ(rows_lse[i], static_cast<int>(i % c.T) < continued.first_row ? 5.0 : whole_lse[i]) << "lse " << i;
  }
  std::vector<floatX> first_bits;
  for (int run = 0; run < 2; run++) {
    for (auto& buffer : d_grad) buffer->fill_nan();
    sa::backward(slice(d_grad, 0), slice(d_grad, 1), slice(d_grad, 2), stride, d_delta.get(), d_dout.get(), d_out.get(),
                 d_lse.get(), slice(d_in, 0), slice(d_in, 1), slice(d_in, 2), stride, problem, nullptr);
    std::vector<floatX> bits;
    for (auto& buffer : d_grad) {
      const std::vector<floatX> raw = buffer->download_raw();
      bits.insert(bits.end(), raw.begin(), raw.end());
    }
    if (run == 0)
      first_bits = bits;
    else
      EXPECT_TRUE(llmc::test::bitwise_equal(bits, first_bits)) << "the backward is not bitwise repeatable";
  }
  Outputs got;
  got.out = d_out.download();
  got.lse = d_lse.download();
  std::vector<double>* grads[3] = {&got.dq, &got.dk, &got.dv};
  for (int s = 0; s < 3; s++) *grads[s] = unlayout(d_grad[c.fused ? 0 : s]->download(), c.fused ? s : 0);
  {  // accumulate_dv: a backward adding into the last one's dv gives twice it (bf16(dV + bf16(dV)): one more rounding)
    sa::backward(slice(d_grad, 0), slice(d_grad, 1), slice(d_grad, 2), stride, d_delta.get(), d_dout.get(), d_out.get(),
                 d_lse.get(), slice(d_in, 0), slice(d_in, 1), slice(d_in, 2), stride, problem, nullptr,
                 /*accumulate_dv=*/true);
    std::vector<double> twice = got.dv;
    for (double& value : twice) value *= 2.0;
    EXPECT_TRUE(llmc::test::all_close(unlayout(d_grad[c.fused ? 0 : 2]->download(), c.fused ? 2 : 0), twice,
                                      llmc::test::tolerance(2, 0)))
        << "dv accumulated";
  }

  // Tolerances. A score is an fp32 sum of D products: absolute error <= D u32 scale sum|q_d k_d|
  // (worst case, q and k up to 1.5: sum <= 2.25 D), an error delta in every exponent, which moves each
  // P by a relative delta and out = sum P v / sum P by at most 2 delta. On top: the softmax and P @ V sums
  // over at most max_keys fp32 terms and one rounding of the stored result (tolerance(1, ...)), and one
  // more rounding's worth for expf/logf. lse: delta plus the same fp32 terms. Gradients: P and dS
  // enter sums of up to max_keys terms, dP and delta sums of D terms, the stored output (rounded)
  // enters delta: 3 roundings, D + 2 max_keys fp32 terms, and 4 delta for the exponents.
  int max_keys = 0;
  for (size_t d = 1; d < cu.size(); d++) max_keys = std::max(max_keys, std::min(cu[d] - cu[d - 1], c.window + 1));
  const double exponent_error = c.D * llmc::test::kFp32Roundoff * c.scale * 2.25 * c.D;
  const double out_tol = llmc::test::tolerance(2, max_keys) + 2 * exponent_error;
  const double lse_tol = llmc::test::tolerance(0, c.D + max_keys) + 2 * exponent_error;
  const double grad_tol = llmc::test::tolerance(3, c.D + 2 * max_keys) + 4 * exponent_error;
  // dS = P (dP - delta) cancels to ~0 in rows with few keys, where the rms understates the terms: allow the
  // absolute error of dP - delta (delta from the rounded output: u_storage |dO| |O| sqrt(D); each fp32
  // dot of D terms: D u32 sum |terms|), times scale |k| for dq (sum_j P = 1) and scale |q| times the
  // largest column mass sum_i P_ij for dk.
  const double dp_error =
      llmc::test::kStorageRoundoff * llmc::test::rms(dout) * llmc::test::rms(want.out) * std::sqrt(c.D) +
      2 * c.D * llmc::test::kFp32Roundoff * c.D * llmc::test::rms(dout) *
          (llmc::test::rms(v) + llmc::test::rms(want.out));
  const double dq_allowance = 2 * c.scale * 1.5 * dp_error;
  const double dk_allowance = dq_allowance * max_column_mass(q, k, want.lse, c, docs);
  EXPECT_TRUE(llmc::test::all_close(got.out, want.out, out_tol)) << "out";
  EXPECT_TRUE(llmc::test::all_close(got.lse, want.lse, lse_tol)) << "lse";
  EXPECT_TRUE(llmc::test::all_close(got.dq, want.dq, grad_tol, dq_allowance)) << "dq";
  EXPECT_TRUE(llmc::test::all_close(got.dk, want.dk, grad_tol, dk_allowance)) << "dk";
  EXPECT_TRUE(llmc::test::all_close(got.dv, want.dv, grad_tol)) << "dv";
}

TEST(SimpleAttentionKernel, MatchesReferenceOverWindowsAndLayouts) {
  LLMC_REQUIRE_GPU();
  const Case cases[] = {
      {37, 2, 16, 0, 0.3f, true, 12},  // window 0: each query attends itself only
      {37, 2, 16, 1, 0.3f, false, 12},   {48, 3, 8, 5, 0.5f, true, 20},
      {64, 2, 32, 200, 0.1f, false, 64},  // no window: causal within documents
      {40, 1, 128, 7, 0.12f, true, 16},   // the record's head size
  };
  uint32_t seed = 1;
  for (const Case& c : cases) check_case(c, seed++);
}

TEST(SimpleAttentionKernel, RejectsBadArguments) {
  LLMC_REQUIRE_GPU();
  DeviceBuffer<int> d_cu(2);
  DeviceBuffer<floatX> buffer(64);
  DeviceBuffer<float> lse(8);
  sa::Problem problem{4, 1, 16, d_cu.get(), 1, 2, 0.1f};
  problem.head_dim = sa::kMaxHeadDim + 1;
  EXPECT_THROW(sa::forward(buffer.get(), lse.get(), buffer.get(), buffer.get(), buffer.get(), 1024, problem, nullptr),
               std::invalid_argument);
  problem.head_dim = 16;
  problem.window = -1;
  EXPECT_THROW(sa::forward(buffer.get(), lse.get(), buffer.get(), buffer.get(), buffer.get(), 16, problem, nullptr),
               std::invalid_argument);
  problem.window = 2;
  EXPECT_THROW(sa::forward(buffer.get(), lse.get(), buffer.get(), buffer.get(), buffer.get(), 8, problem, nullptr),
               std::invalid_argument);  // stride below heads * D
  problem.first_row = 4;                // no row left to compute
  EXPECT_THROW(sa::forward(buffer.get(), lse.get(), buffer.get(), buffer.get(), buffer.get(), 16, problem, nullptr),
               std::invalid_argument);
  problem.first_row = 1;  // the backward needs every row
  EXPECT_THROW(sa::backward(buffer.get(), buffer.get(), buffer.get(), 16, lse.get(), buffer.get(), buffer.get(),
                            lse.get(), buffer.get(), buffer.get(), buffer.get(), 16, problem, nullptr),
               std::invalid_argument);
}

}  // namespace
