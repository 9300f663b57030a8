// Kernel tests of the 2026-07-17 record's QK-norm + adjacent-pair rotary (llmc/kernels/qk_norm_pair_rope.cuh):
// the forward against the double reference (test/reference/reference_modded89_ops.h) and the backward
// against central differences of that reference, for the plain and paired-head tables, with and without the
// partial key offset, q and k inside a QKV row; and the launchers' checks. Built for fp32 and bf16, emulated
// and on a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/kernels/qk_norm_pair_rope.cuh"
#include "test/reference/gradient_check.h"
#include "test/reference/reference_modded89_ops.h"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using gradient_check::central_differences;
using llmc::floatX;

// T rows of a QKV buffer (row stride 3C): q heads then k heads (2H heads of D) at its start, v after them.
// Tables of 2T positions (enough for the paired layers), random angles, rounded to floatX.
struct PairRopeData {
  static constexpr int T = 7, H = 2, D = 32, kPairs = 8;
  static constexpr int C = H * D, kHeads = 2 * H, kStride = 3 * C;
  std::mt19937 rng{89};
  std::vector<double> qkv = random_values(static_cast<size_t>(T) * kStride, rng, -2.0, 2.0);
  std::vector<double> cos_table, sin_table;
  PairRopeData() {
    std::uniform_real_distribution<double> angle(-3.2, 3.2);
    for (int i = 0; i < 2 * T * kPairs; i++) {
      const double theta = angle(rng);
      cos_table.push_back(std::cos(theta));
      sin_table.push_back(std::sin(theta));
    }
    cos_table = round_to_floatx(cos_table);
    sin_table = round_to_floatx(sin_table);
  }
  // The q and k heads of each row, packed (T, 2H, D).
  std::vector<double> heads() const {
    std::vector<double> out;
    for (int t = 0; t < T; t++)
      out.insert(out.end(), qkv.begin() + static_cast<long>(t) * kStride,
                 qkv.begin() + static_cast<long>(t) * kStride + 2 * C);
    return out;
  }
  std::vector<double> reference(const std::vector<double>& x, const llmc::PairRopeLayout& layout) const {
    std::vector<double> out(x.size());
    ref::qk_norm_pair_rope_forward(out.data(), x.data(), cos_table.data(), sin_table.data(), T, kHeads, D, layout.pairs,
                                   layout.position_step, layout.key_offset);
    return out;
  }
};

std::vector<llmc::PairRopeLayout> layouts() {
  std::vector<llmc::PairRopeLayout> out;
  for (const int step : {1, 2})
    for (const bool offset : {false, true}) out.push_back({PairRopeData::kPairs, step, offset});
  return out;
}

std::string describe(const llmc::PairRopeLayout& layout) {
  return "position_step " + std::to_string(layout.position_step) + (layout.key_offset ? ", key offset" : "");
}

TEST(QkNormPairRope, ForwardMatchesReference) {
  LLMC_REQUIRE_GPU();
  PairRopeData data;
  const int T = data.T;
  DeviceBuffer<floatX> d_qkv(data.qkv.size()), d_out(static_cast<size_t>(T) * data.kHeads * data.D);
  DeviceBuffer<floatX> d_cos(data.cos_table.size()), d_sin(data.sin_table.size());
  DeviceBuffer<float> d_rstd(static_cast<size_t>(T) * data.kHeads);
  d_qkv.upload(data.qkv);
  d_cos.upload(data.cos_table);
  d_sin.upload(data.sin_table);
  for (const llmc::PairRopeLayout& layout : layouts()) {
    SCOPED_TRACE(describe(layout));
    llmc::qk_norm_pair_rope_forward(d_out.get(), data.kHeads * data.D, d_qkv.get(), data.kStride, d_rstd.get(),
                                    d_cos.get(), d_sin.get(), T, data.kHeads, data.D, layout, nullptr);
    // A sum of D squares, the scale and a rotation in fp32, one rounding.
    EXPECT_TRUE(all_close(d_out.download(), data.reference(data.heads(), layout), tolerance(1, data.D + 8)));
    // A KV cache's continuation from row 3 (positions from 3; the key offset reads row 2): the whole run's rows
    // bitwise.
    const int first = 3, width = data.kHeads * data.D;
    llmc::PairRopeLayout continued = layout;
    continued.first_row = first;
    DeviceBuffer<floatX> d_rows(static_cast<size_t>(T - first) * width);
    llmc::qk_norm_pair_rope_forward(d_rows.get(), width, d_qkv.get() + static_cast<size_t>(first) * data.kStride,
                                    data.kStride, d_rstd.get(), d_cos.get(), d_sin.get(), T - first, data.kHeads,
                                    data.D, continued, nullptr);
    const std::vector<floatX> rows = d_rows.download_raw(), whole = d_out.download_raw();
    for (size_t i = 0; i < rows.size(); i++)
      ASSERT_EQ(llmc::to_float(rows[i]), llmc::to_float(whole[static_cast<size_t>(first) * width + i])) << i;
  }
}

TEST(QkNormPairRope, BackwardMatchesCentralDifferencesOfTheReference) {
  LLMC_REQUIRE_GPU();
  PairRopeData data;
  const int T = data.T, width = data.kHeads * data.D;
  const std::vector<double> dout = random_values(static_cast<size_t>(T) * width, data.rng);
  DeviceBuffer<floatX> d_qkv(data.qkv.size()), d_out(dout.size()), d_dout(dout.size()), d_dinp(dout.size());
  DeviceBuffer<floatX> d_cos(data.cos_table.size()), d_sin(data.sin_table.size());
  DeviceBuffer<float> d_rstd(static_cast<size_t>(T) * data.kHeads);
  d_qkv.upload(data.qkv);
  d_cos.upload(data.cos_table);
  d_sin.upload(data.sin_table);
  d_dout.upload(dout);
  for (const llmc::PairRopeLayout& layout : layouts()) {
    SCOPED_TRACE(describe(layout));
    llmc::qk_norm_pair_rope_forward(d_out.get(), width, d_qkv.get(), data.kStride, d_rstd.get(), d_cos.get(),
                                    d_sin.get(), T, data.kHeads, data.D, layout, nullptr);
    llmc::qk_norm_pair_rope_backward(d_dinp.get(), width, d_dout.get(), width, d_qkv.get(), data.kStride, d_rstd.get(),
                                     d_cos.get(), d_sin.get(), T, data.kHeads, data.D, layout, nullptr);
    // d/dx of sum(dout * forward(x)) by central differences in double (error ~1e-10 at step 1e-5).
    std::vector<double> x = data.heads();
    auto objective = [&] {
      const std::vector<double> y = data.reference(x, layout);
      double sum = 0.0;
      for (size_t i = 0; i < y.size(); i++) sum += dout[i] * y[i];
      return sum;
    };
    const std::vector<double> expected = central_differences(x, objective, 1e-5);
    // The rotation and two head-wide sums of D products in fp32, one rounding.
    EXPECT_TRUE(all_close(d_dinp.download(), expected, tolerance(1, 2 * data.D + 8)));
  }
}

// The 2026-07-17 model runs q and k as separate launches into separate buffers (the paired-head view needs
// each contiguous): over the k heads alone, first_key_head = 0 offsets all of them, and the results equal
// the k half of the joint launch bitwise (the same per-head arithmetic), forward and backward.
TEST(QkNormPairRope, KeyHeadsAloneEqualTheJointLaunch) {
  LLMC_REQUIRE_GPU();
  PairRopeData data;
  const int T = data.T, C = data.C, width = data.kHeads * data.D;
  const std::vector<double> dout = random_values(static_cast<size_t>(T) * width, data.rng);
  std::vector<double> dout_k;
  for (int t = 0; t < T; t++) dout_k.insert(dout_k.end(), dout.begin() + t * width + C, dout.begin() + (t + 1) * width);
  DeviceBuffer<floatX> d_qkv(data.qkv.size()), d_joint(dout.size()), d_dout(dout.size()), d_djoint(dout.size());
  DeviceBuffer<floatX> d_k(dout_k.size()), d_dout_k(dout_k.size()), d_dk(data.qkv.size());
  DeviceBuffer<floatX> d_cos(data.cos_table.size()), d_sin(data.sin_table.size());
  DeviceBuffer<float> d_rstd(static_cast<size_t>(T) * data.kHeads), d_rstd_k(static_cast<size_t>(T) * data.H);
  d_qkv.upload(data.qkv);
  d_cos.upload(data.cos_table);
  d_sin.upload(data.sin_table);
  d_dout.upload(dout);
  d_dout_k.upload(dout_k);
  for (const int step : {1, 2}) {
    SCOPED_TRACE("position_step " + std::to_string(step));
    const llmc::PairRopeLayout joint{data.kPairs, step, true}, alone{data.kPairs, step, true, 0};
    llmc::qk_norm_pair_rope_forward(d_joint.get(), width, d_qkv.get(), data.kStride, d_rstd.get(), d_cos.get(),
                                    d_sin.get(), T, data.kHeads, data.D, joint, nullptr);
    llmc::qk_norm_pair_rope_forward(d_k.get(), C, d_qkv.get() + C, data.kStride, d_rstd_k.get(), d_cos.get(),
                                    d_sin.get(), T, data.H, data.D, alone, nullptr);
    llmc::qk_norm_pair_rope_backward(d_djoint.get(), width, d_dout.get(), width, d_qkv.get(), data.kStride,
                                     d_rstd.get(), d_cos.get(), d_sin.get(), T, data.kHeads, data.D, joint, nullptr);
    llmc::qk_norm_pair_rope_backward(d_dk.get() + C, data.kStride, d_dout_k.get(), C, d_qkv.get() + C, data.kStride,
                                     d_rstd_k.get(), d_cos.get(), d_sin.get(), T, data.H, data.D, alone, nullptr);
    // floatX values widened to double exactly: equal doubles are equal values.
    const std::vector<double> joint_out = d_joint.download(), k_out = d_k.download();
    const std::vector<double> joint_grad = d_djoint.download(), k_grad = d_dk.download();
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++) {
        ASSERT_EQ(k_out[t * C + c], joint_out[t * width + C + c]) << "row " << t << " column " << c;
        ASSERT_EQ(k_grad[t * data.kStride + C + c], joint_grad[t * width + C + c])
            << "gradient row " << t << " column " << c;
      }
  }
}

TEST(QkNormPairRope, LaunchersRefuseBadLayouts) {
  LLMC_REQUIRE_GPU();
  PairRopeData data;
  const int width = data.kHeads * data.D;
  DeviceBuffer<floatX> d_x(static_cast<size_t>(data.T) * width), d_cos(data.cos_table.size()),
      d_sin(data.sin_table.size());
  DeviceBuffer<float> d_rstd(static_cast<size_t>(data.T) * data.kHeads);
  auto forward = [&](floatX* out, const llmc::PairRopeLayout& layout) {
    llmc::qk_norm_pair_rope_forward(out, width, d_x.get(), width, d_rstd.get(), d_cos.get(), d_sin.get(), data.T,
                                    data.kHeads, data.D, layout, nullptr);
  };
  const llmc::PairRopeLayout offset{data.kPairs, 1, true}, plain{data.kPairs, 1, false};
  const llmc::PairRopeLayout too_many_pairs{data.D, 1, false}, bad_step{data.kPairs, 3, false};
  EXPECT_THROW(forward(d_x.get(), offset), std::invalid_argument);  // the key offset in place
  EXPECT_NO_THROW(forward(d_x.get(), plain));                       // in place without it
  EXPECT_THROW(forward(d_x.get(), too_many_pairs), std::invalid_argument);
  EXPECT_THROW(forward(d_x.get(), bad_step), std::invalid_argument);
  EXPECT_THROW(llmc::qk_norm_pair_rope_backward(d_x.get(), width, d_x.get(), width, d_x.get(), width, d_rstd.get(),
                                                d_cos.get(), d_sin.get(), data.T, data.kHeads, data.D, offset, nullptr),
               std::invalid_argument);
}

}  // namespace
