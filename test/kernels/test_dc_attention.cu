// Kernel tests of the 2026-07-17 record's DC correction (llmc/kernels/dc_attention.cuh): the forward against
// the double reference (test/reference/reference_modded89_ops.h) over three documents and a window shorter
// than them, in place; the backward (dq, dk, dv accumulated, dw1, dw2) against central differences of that
// reference; determinism; the DC weights from the post gate's columns; the launchers' checks. Built for fp32
// and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/kernels/dc_attention.cuh"
#include "test/reference/gradient_check.h"
#include "test/reference/reference_modded89_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using gradient_check::central_differences;
using gradient_check::plus;
using llmc::floatX;

// Documents [0, 17), [17, 30), [30, 40); window 12 < 17 cuts the first document's later queries.
struct DcData {
  static constexpr int T = 40, H = 3, D = 16, C = H * D, kWindow = 12;
  static constexpr double kScale = 0.35;
  std::mt19937 rng{112};
  std::vector<double> q = random_values(static_cast<size_t>(T) * C, rng, -2.0, 2.0);
  std::vector<double> k = random_values(static_cast<size_t>(T) * C, rng, -2.0, 2.0);
  std::vector<double> v = random_values(static_cast<size_t>(T) * C, rng);
  std::vector<double> y = random_values(static_cast<size_t>(T) * C, rng);
  std::vector<double> w1 = random_values(static_cast<size_t>(T) * H, rng, -1.5, 1.5);
  std::vector<double> w2 = random_values(static_cast<size_t>(T) * H, rng, -1.5, 1.5);
  std::vector<int> doc_start;
  DcData() {
    for (int t = 0; t < T; t++) doc_start.push_back(t < 17 ? 0 : t < 30 ? 17 : 30);
  }
  std::vector<double> reference() const {
    std::vector<double> out(y.size());
    ref::dc_forward(out.data(), y.data(), q.data(), k.data(), v.data(), w1.data(), w2.data(), doc_start.data(), T, H, D,
                    kWindow, kScale);
    return out;
  }
};

struct DeviceDc {
  DeviceBuffer<floatX> q, k, v, y, w1, w2;
  DeviceBuffer<int> doc_start;
  DeviceBuffer<float> lse;
  llmc::DcInputs in;
  explicit DeviceDc(const DcData& d)
      : q(d.q.size()),
        k(d.k.size()),
        v(d.v.size()),
        y(d.y.size()),
        w1(d.w1.size()),
        w2(d.w2.size()),
        doc_start(d.T),
        lse(llmc::dc_lse_floats(d.T, d.H)) {
    q.upload(d.q), k.upload(d.k), v.upload(d.v), y.upload(d.y), w1.upload(d.w1), w2.upload(d.w2);
    doc_start.upload(std::vector<double>(d.doc_start.begin(), d.doc_start.end()));
    in.q = q.get(), in.k = k.get(), in.v = v.get();
    in.q_stride = in.k_stride = in.v_stride = d.C;
    in.w1 = w1.get(), in.w2 = w2.get(), in.w_stride = d.H;
    in.doc_start = doc_start.get();
    in.T = d.T, in.H = d.H, in.D = d.D, in.window = d.kWindow;
    in.attn_scale = static_cast<float>(d.kScale);
  }
};

TEST(DcAttentionKernel, ForwardMatchesReferenceInPlace) {
  LLMC_REQUIRE_GPU();
  DcData data;
  DeviceDc device(data);
  llmc::dc_forward(device.y.get(), device.y.get(), data.C, device.lse.get(), device.in, nullptr);
  // Scores (D products), softmax sums over the window, the head mix, and the correction (window terms, each
  // weight rounded to floatX as the record's bf16 operand), one rounding.
  EXPECT_TRUE(all_close(device.y.download(), data.reference(), tolerance(2, data.kWindow + data.D + 8)));
}

// A KV cache's continuation (first_row 23, inside the second document): rows 23.. are the whole run's bitwise (the
// same block per query), the rows before it and their lse untouched.
TEST(DcAttentionKernel, ContinuationComputesItsRowsOnly) {
  LLMC_REQUIRE_GPU();
  DcData data;
  DeviceDc whole(data), continued(data);
  DeviceBuffer<floatX> out(data.y.size());
  out.upload(data.y);
  llmc::dc_forward(whole.y.get(), whole.y.get(), data.C, whole.lse.get(), whole.in, nullptr);
  const int first = 23;
  continued.in.first_row = first;
  continued.lse.upload(std::vector<double>(continued.lse.size(), -7.0));
  llmc::dc_forward(out.get(), continued.y.get(), data.C, continued.lse.get(), continued.in, nullptr);
  const std::vector<double> got = out.download(), want = whole.y.download(), lse = continued.lse.download(),
                            whole_lse = whole.lse.download();
  const size_t split = static_cast<size_t>(first) * data.C;
  for (size_t i = 0; i < got.size(); i++) ASSERT_EQ(got[i], i < split ? data.y[i] : want[i]) << i;
  for (size_t i = 0; i < lse.size(); i++)
    ASSERT_EQ(lse[i], i < static_cast<size_t>(first) * data.H ? -7.0 : whole_lse[i]) << i;
  continued.in.first_row = data.T;
  EXPECT_THROW(llmc::dc_forward(out.get(), continued.y.get(), data.C, continued.lse.get(), continued.in, nullptr),
               std::invalid_argument);
}

TEST(DcAttentionKernel, BackwardMatchesCentralDifferencesAndRepeatsBitwise) {
  LLMC_REQUIRE_GPU();
  DcData data;
  DeviceDc device(data);
  const std::vector<double> dy = random_values(data.y.size(), data.rng);
  const std::vector<double> prefill = random_values(data.q.size(), data.rng, -0.1, 0.1);
  DeviceBuffer<floatX> d_dy(dy.size()), d_out(dy.size()), d_dq(prefill.size()), d_dk(prefill.size()),
      d_dv(prefill.size());
  DeviceBuffer<float> d_dw1(data.w1.size()), d_dw2(data.w2.size()), d_delta(data.w1.size());
  d_dy.upload(dy);
  llmc::dc_forward(d_out.get(), device.y.get(), data.C, device.lse.get(), device.in, nullptr);
  std::vector<std::vector<floatX>> runs;
  for (int run = 0; run < 2; run++) {
    d_dq.upload(prefill), d_dk.upload(prefill), d_dv.upload(prefill);
    llmc::dc_backward(d_dq.get(), data.C, d_dk.get(), data.C, d_dv.get(), data.C, d_dw1.get(), d_dw2.get(),
                      d_delta.get(), d_dy.get(), data.C, device.lse.get(), device.in, nullptr);
    runs.push_back(d_dk.download_raw());
  }
  EXPECT_TRUE(bitwise_equal(runs[0], runs[1]));
  DcData x = data;
  auto objective = [&] {
    const std::vector<double> out = x.reference();
    double sum = 0.0;
    for (size_t i = 0; i < out.size(); i++) sum += dy[i] * out[i];
    return sum;
  };
  const std::vector<double> dq = central_differences(x.q, objective), dk = central_differences(x.k, objective),
                            dv = central_differences(x.v, objective), dw1 = central_differences(x.w1, objective),
                            dw2 = central_differences(x.w2, objective);
  // Dots over D and sums over the window in fp32; dv's weights rounded to floatX as in the forward.
  const double tol = tolerance(2, 2 * (data.kWindow + data.D) + 8);
  EXPECT_TRUE(all_close(d_dq.download(), plus(prefill, dq), tol));
  EXPECT_TRUE(all_close(d_dk.download(), plus(prefill, dk), tol));
  EXPECT_TRUE(all_close(d_dv.download(), plus(prefill, dv), tol));
  EXPECT_TRUE(all_close(d_dw1.download(), dw1, tol));
  EXPECT_TRUE(all_close(d_dw2.download(), dw2, tol));
}

// The DC weights from the post gate's rows (41 columns): w1 = the 6 columns from 29 over their rms (eps 1e-6),
// w2 = the 6 from 35, side by side.
TEST(DcAttentionKernel, MixWeightsNormaliseW1AndCopyW2) {
  LLMC_REQUIRE_GPU();
  constexpr int T = 9, H = 6, kStride = 41, kW1 = 29, kW2 = 35;
  std::mt19937 rng(29);
  std::vector<double> gate = round_to_floatx(random_values(T * kStride, rng, -2.0, 2.0));
  for (int c = 0; c < H; c++) gate[3 * kStride + kW1 + c] = 0.0;  // a zero row: rsqrt(eps) times 0
  DeviceBuffer<floatX> d_gate(gate.size()), d_out(2 * T * H);
  d_gate.upload(gate);
  llmc::dc_mix_weights_forward(d_out.get(), d_gate.get(), kStride, kW1, kW2, T, H, nullptr);
  std::vector<double> expected;
  for (int t = 0; t < T; t++) {
    double sum = 0.0;
    for (int h = 0; h < H; h++) sum += gate[t * kStride + kW1 + h] * gate[t * kStride + kW1 + h];
    const double r = 1.0 / std::sqrt(sum / H + 1e-6);
    for (int h = 0; h < H; h++) expected.push_back(gate[t * kStride + kW1 + h] * r);
    for (int h = 0; h < H; h++) expected.push_back(gate[t * kStride + kW2 + h]);
  }
  // A sum of H squares and rsqrtf (a few ulps) in fp32, one rounding.
  EXPECT_TRUE(all_close(d_out.download(), expected, tolerance(1, H + 4)));
  EXPECT_THROW(llmc::dc_mix_weights_forward(d_out.get(), d_gate.get(), kStride, 36, kW2, T, H, nullptr),
               std::invalid_argument);
}

// Its backward against central differences of the double formula, columns outside w1 and w2 untouched.
TEST(DcAttentionKernel, MixWeightsBackwardMatchesCentralDifferences) {
  LLMC_REQUIRE_GPU();
  constexpr int T = 9, H = 6, kStride = 41, kW1 = 29, kW2 = 35;
  std::mt19937 rng(31);
  std::vector<double> gate = round_to_floatx(random_values(T * kStride, rng, -2.0, 2.0));
  std::vector<double> dw1 = random_values(T * H, rng), dw2 = random_values(T * H, rng);
  for (double* d : {dw1.data(), dw2.data()})
    for (int i = 0; i < T * H; i++) d[i] = static_cast<double>(static_cast<float>(d[i]));
  DeviceBuffer<floatX> d_gate(gate.size());
  DeviceBuffer<float> d_dw1(dw1.size()), d_dw2(dw2.size()), d_dgate(gate.size());
  d_gate.upload(gate);
  d_dw1.upload(dw1);
  d_dw2.upload(dw2);
  d_dgate.upload(std::vector<double>(gate.size(), 7.0));
  llmc::dc_mix_weights_backward(d_dgate.get(), d_dw1.get(), d_dw2.get(), d_gate.get(), kStride, kW1, kW2, T, H,
                                nullptr);
  std::vector<double> x = gate;
  auto objective = [&] {  // sum of dw1 . w1 + dw2 . w2 of the double forward
    double total = 0.0;
    for (int t = 0; t < T; t++) {
      double sum = 0.0;
      for (int h = 0; h < H; h++) sum += x[t * kStride + kW1 + h] * x[t * kStride + kW1 + h];
      const double r = 1.0 / std::sqrt(sum / H + 1e-6);
      for (int h = 0; h < H; h++)
        total += dw1[t * H + h] * x[t * kStride + kW1 + h] * r + dw2[t * H + h] * x[t * kStride + kW2 + h];
    }
    return total;
  };
  std::vector<double> expected = central_differences(x, objective, 1e-5);
  for (int t = 0; t < T; t++)
    for (int c = 0; c < kStride; c++)
      if (c < kW1 || c >= kW2 + H) expected[t * kStride + c] = 7.0;  // outside the columns: the prefill stays
  // Two sums of H terms and rsqrtf in fp32, no floatX rounding.
  EXPECT_TRUE(all_close(d_dgate.download(), expected, tolerance(0, 2 * H + 8)));
}

TEST(DcAttentionKernel, LaunchersRefuseBadShapes) {
  LLMC_REQUIRE_GPU();
  DcData data;
  DeviceDc device(data);
  llmc::DcInputs in = device.in;
  in.window = llmc::kDcMaxWindow + 1;
  EXPECT_THROW(llmc::dc_forward(device.y.get(), device.y.get(), data.C, device.lse.get(), in, nullptr),
               std::invalid_argument);
  in = device.in;
  in.H = llmc::kDcMaxHeads + 1;
  EXPECT_THROW(llmc::dc_forward(device.y.get(), device.y.get(), data.C, device.lse.get(), in, nullptr),
               std::invalid_argument);
}

}  // namespace
