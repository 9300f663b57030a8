// The 2026-07-17 model's FP8 MLP (llmc/model/modded89/modded89_fp8_mlp.h) on its own: the life of its scales
// (current for the up projection's input, delayed for the down projection's, the weight scale bootstrapped for the
// first 16 updates and one update late after them, everything back to the start at a reset) and its outputs
// against the products of the codes it should have made, within the FP8 accumulator's bound
// (test/kernels/fp8_test_support.h). Built for fp32 and bf16 activations, emulated and on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <type_traits>
#include <vector>

#include "llmc/base/bf16_bits.h"
#include "llmc/emu/fp8_convert.h"
#include "llmc/kernels/fp8_mlp.cuh"
#include "llmc/kernels/matmul.cuh"
#include "llmc/model/modded89/modded89_fp8_mlp.h"
#include "test/kernels/fp8_test_support.h"
#include "test/support/captured_graph.h"
#include "test/support/device_buffer.h"
#include "test/support/stream_test.h"

namespace modded89_fp8_mlp_test {  // named: the GPU build compiles the model tests as one translation unit

using llmc::floatX;
using llmc::test::DeviceBuffer;

constexpr int kT = 32, kC = 64, kHidden = 4 * kC, kLayers = 2;
constexpr bool kFp32 = std::is_same_v<floatX, float>;

float round_to_floatx(double value) { return llmc::to_float(llmc::from_float<floatX>(static_cast<float>(value))); }
float round_to_bf16(float value) { return llmc::bf16_bits_to_float(llmc::float_to_bf16_bits(value)); }
double e4m3(float value) {
  return llmc::emu::fp8_decode(llmc::emu::fp8_encode(value, llmc::emu::Fp8Format::kE4M3), llmc::emu::Fp8Format::kE4M3);
}
double largest_magnitude(const std::vector<double>& values) {
  double m = 0.0;
  for (double v : values) m = std::max(m, std::fabs(v));
  return m;
}

std::vector<double> normal_values(size_t n, double sigma, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, sigma);
  std::vector<double> values(n);
  for (double& v : values) v = round_to_floatx(normal(rng));
  return values;
}

class Modded89Fp8MlpTest : public llmc::test::StreamTest {
 protected:
  // One layer's inputs: xn of unit rows, c_fc at the record's init scale, c_proj as after some training.
  struct Layer {
    std::vector<double> xn, c_fc, c_proj;
    DeviceBuffer<floatX> d_xn{kT * kC}, d_weights{2 * kHidden * kC};  // c_fc (4C, C), then c_proj (4C, C)
    DeviceBuffer<floatX> d_pre{kT * kHidden}, d_post{kT * kHidden}, d_out{kT * kC};
    const floatX* c_fc_device() const { return d_weights.get(); }
    const floatX* c_proj_device() const { return d_weights.get() + kHidden * kC; }
    void upload() {
      d_xn.upload(xn);
      std::vector<double> both(c_fc);
      both.insert(both.end(), c_proj.begin(), c_proj.end());
      d_weights.upload(both);
    }
  };

  static void fill(Layer& layer, unsigned seed) {
    std::mt19937 rng(seed);
    layer.xn = normal_values(kT * kC, 1.0, rng);
    layer.c_fc = normal_values(kHidden * kC, 0.5 / std::sqrt(kC), rng);
    layer.c_proj = normal_values(kHidden * kC, 0.02, rng);
    layer.upload();
  }

  void forward(llmc::Modded89Fp8Mlp& mlp, int index, Layer& layer) {
    mlp.forward(matmul_, index, layer.d_xn.get(), layer.c_fc_device(), layer.c_proj_device(), layer.d_pre.get(),
                layer.d_post.get(), layer.d_out.get(), kT, stream);
  }

  llmc::MatmulContext matmul_;
  DeviceBuffer<unsigned char> memory_{llmc::Modded89Fp8Mlp::bytes(kT, kC, kLayers)};
};

float factor(double headroom) { return llmc::fp8_mlp_scale_factor(headroom); }

// Construction and every reset: activation scale 1, a bootstrap; a forward sets the current x scale, the up
// weights' bf16 scale, and the delayed activation scale for the next forward; updates of steps 0..15 bootstrap
// the down weights' scale, later ones use the scale the previous refresh computed from the older weights.
TEST_F(Modded89Fp8MlpTest, ScalesFollowTheRecordsLifecycle) {
  LLMC_REQUIRE_GPU();
  llmc::Modded89Fp8Mlp mlp(kT, kC, kLayers, memory_.get(), stream);
  Layer layer;
  fill(layer, 9400);
  EXPECT_EQ(mlp.download_scales(stream).activation, std::vector<float>(kLayers, 1.0f));
  forward(mlp, 0, layer);
  llmc::Modded89Fp8Mlp::Scales scales = mlp.download_scales(stream);
  const float x_amax = static_cast<float>(largest_magnitude(layer.xn));
  const float fc_amax = static_cast<float>(largest_magnitude(layer.c_fc));
  float proj_amax = static_cast<float>(largest_magnitude(layer.c_proj));
  EXPECT_EQ(scales.x[0], x_amax * factor(1.0));
  EXPECT_EQ(scales.up_weight[0], round_to_bf16(fc_amax / 448.0f));
  EXPECT_EQ(scales.down_used[0], proj_amax * factor(1.0)) << "bootstrap: the scale of the weights quantised";
  EXPECT_EQ(scales.down_next[0], proj_amax * factor(1.12));
  const float post_amax = static_cast<float>(largest_magnitude(layer.d_post.download()));
  EXPECT_EQ(scales.activation[0], post_amax * factor(1.80)) << "for the next forward";
  EXPECT_EQ(scales.activation[1], 1.0f) << "layer 1 has not run";

  forward(mlp, 0, layer);  // a second micro-step: no update, no refresh
  EXPECT_EQ(mlp.download_scales(stream).down_used[0], scales.down_used[0]);

  auto update = [&](double by) {  // an optimizer step that scales c_proj
    for (double& w : layer.c_proj) w = round_to_floatx(w * by);
    layer.upload();
    return static_cast<float>(largest_magnitude(layer.c_proj));
  };
  const float old_amax = proj_amax;
  proj_amax = update(2.0);
  mlp.before_step(16);  // step 15's update: still a bootstrap
  forward(mlp, 0, layer);
  scales = mlp.download_scales(stream);
  EXPECT_EQ(scales.down_used[0], proj_amax * factor(1.0)) << "bootstrap after step 15 (was " << old_amax << ")";
  const float delayed = scales.down_next[0];
  EXPECT_EQ(delayed, proj_amax * factor(1.12));
  proj_amax = update(3.0);
  mlp.before_step(17);  // step 16's update: the delayed scale
  forward(mlp, 0, layer);
  scales = mlp.download_scales(stream);
  EXPECT_EQ(scales.down_used[0], delayed) << "the weights one update older, with headroom 1.12";
  EXPECT_EQ(scales.down_next[0], proj_amax * factor(1.12));

  mlp.reset(stream);
  EXPECT_EQ(mlp.download_scales(stream).activation, std::vector<float>(kLayers, 1.0f));
  forward(mlp, 0, layer);
  EXPECT_EQ(mlp.download_scales(stream).down_used[0], proj_amax * factor(1.0)) << "a reset bootstraps";
}

// pre = x_s s_up (x8 . W8) with fp32 accumulation, post = relu(pre)^2, out = s_act s_w (post8 . Wd8) with fast
// accumulation: each element against the exact product of the codes the record's formulas give (x8 = e4m3(xn /
// x_s), W8 = e4m3(bf16(c_fc / s_up)), post8 = e4m3(min(post / s_act, 448)), Wd8 = e4m3(c_proj / s_w)), within the
// accumulator's bound plus the output's rounding. Run twice, so that the second forward's delayed activation scale
// is the first one's.
TEST_F(Modded89Fp8MlpTest, OutputsAreTheProductsOfTheRecordsCodes) {
  LLMC_REQUIRE_GPU();
  llmc::Modded89Fp8Mlp mlp(kT, kC, kLayers, memory_.get(), stream);
  Layer layer;
  fill(layer, 9500);
  const double output_roundoff = kFp32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8);
  float s_act = 1.0f;
  for (int run = 0; run < 2; run++) {
    forward(mlp, 1, layer);
    const llmc::Modded89Fp8Mlp::Scales scales = mlp.download_scales(stream);
    const float x_s = scales.x[1], s_up = scales.up_weight[1], s_w = scales.down_used[1];
    std::vector<double> x8(kT * kC), w8(kHidden * kC), wd8(kC * kHidden);  // wd8 (C, 4C): c_proj^T
    for (size_t i = 0; i < x8.size(); i++) x8[i] = e4m3(static_cast<float>(layer.xn[i]) / x_s);
    for (size_t i = 0; i < w8.size(); i++) w8[i] = e4m3(round_to_bf16(static_cast<float>(layer.c_fc[i]) / s_up));
    for (int h = 0; h < kHidden; h++)
      for (int c = 0; c < kC; c++)
        wd8[static_cast<size_t>(c) * kHidden + h] = e4m3(static_cast<float>(layer.c_proj[h * kC + c]) / s_w);
    const std::vector<double> pre = layer.d_pre.download(), post = layer.d_post.download(),
                              out = layer.d_out.download();
    int failures = 0;
    for (int t = 0; t < kT && failures < 5; t++) {
      for (int j = 0; j < kHidden && failures < 5; j++) {
        const llmc::test::DotWithBound dot =
            llmc::test::fp8_dot_with_bound(&x8[t * kC], &w8[j * kC], kC, /*fast_accumulation=*/false);
        const double scale = static_cast<double>(x_s) * s_up;
        const double got = pre[t * kHidden + j];
        if (std::fabs(got - scale * dot.exact) > llmc::test::fp8_gemm_tolerance(dot, scale, 0.0, output_roundoff)) {
          ADD_FAILURE() << "run " << run << " pre(" << t << "," << j << ") = " << got << ", expected "
                        << scale * dot.exact;
          failures++;
        }
      }
    }
    std::vector<double> post8(kT * kHidden);
    for (size_t i = 0; i < post8.size(); i++)
      post8[i] = e4m3(std::fmin(static_cast<float>(post[i]) * (1.0f / s_act), 448.0f));
    for (int t = 0; t < kT && failures < 5; t++) {
      for (int c = 0; c < kC && failures < 5; c++) {
        const llmc::test::DotWithBound dot = llmc::test::fp8_dot_with_bound(&post8[t * kHidden], &wd8[c * kHidden],
                                                                            kHidden, /*fast_accumulation=*/true);
        const double scale = static_cast<double>(s_act) * s_w;
        const double got = out[t * kC + c];
        if (std::fabs(got - scale * dot.exact) > llmc::test::fp8_gemm_tolerance(dot, scale, 0.0, output_roundoff)) {
          ADD_FAILURE() << "run " << run << " out(" << t << "," << c << ") = " << got << ", expected "
                        << scale * dot.exact << " (s_act " << s_act << ")";
          failures++;
        }
      }
    }
    s_act = scales.activation[1];  // what the next forward divides by
  }
}

// A checkpoint's arrays carry every scale and which copies were made: a model restored from them (after its own
// reset, as a resumed run) uses the saving model's delayed scales, where a fresh one would bootstrap; arrays of
// another shape are refused.
TEST_F(Modded89Fp8MlpTest, CheckpointArraysContinueTheScales) {
  LLMC_REQUIRE_GPU();
  llmc::Modded89Fp8Mlp saving(kT, kC, kLayers, memory_.get(), stream);
  Layer layer;
  fill(layer, 9700);
  for (int step = 0; step < 18; step++) {  // past the bootstrap: the down scale is the delayed one
    saving.before_step(step);
    forward(saving, 0, layer);
  }
  const std::vector<llmc::NamedStateArray> arrays = saving.save_state(stream);
  ASSERT_EQ(arrays.size(), 2u);
  EXPECT_EQ(arrays[0].name, "model.fp8_mlp.scales");
  const llmc::Modded89Fp8Mlp::Scales before = saving.download_scales(stream);
  for (double& w : layer.c_proj) w = round_to_floatx(w * 1.5);  // step 17's update
  layer.upload();
  DeviceBuffer<unsigned char> other_memory(llmc::Modded89Fp8Mlp::bytes(kT, kC, kLayers));
  llmc::Modded89Fp8Mlp restored(kT, kC, kLayers, other_memory.get(), stream);
  restored.restore_state(arrays, stream);
  EXPECT_EQ(restored.download_scales(stream).activation, before.activation);
  for (llmc::Modded89Fp8Mlp* mlp : {&saving, &restored}) {
    mlp->before_step(18);
    forward(*mlp, 0, layer);
  }
  const float used = saving.download_scales(stream).down_used[0];
  EXPECT_EQ(used, before.down_next[0]) << "the delayed scale, not a bootstrap";
  EXPECT_EQ(restored.download_scales(stream).down_used[0], used);
  EXPECT_EQ(restored.download_scales(stream).activation, saving.download_scales(stream).activation);
  std::vector<llmc::NamedStateArray> short_arrays = arrays;
  short_arrays[0].bytes.resize(8);
  EXPECT_THROW(restored.restore_state(short_arrays, stream), std::runtime_error);
  EXPECT_THROW(restored.restore_state({arrays[1]}, stream), std::runtime_error);
}

// Every scale lives on the device and nothing waits for the host, so a layer's forward, its weights' refresh
// included, captures into a CUDA graph (the emulation refuses what a GPU would: host waits, pageable copies) and
// each replay computes what the eager calls do, bit for bit: the same outputs, and the delayed activation scale
// carried from replay to replay.
TEST_F(Modded89Fp8MlpTest, ForwardWithRefreshReplaysFromAGraphBitwise) {
  LLMC_REQUIRE_GPU();
  Layer layer;
  fill(layer, 9800);
  DeviceBuffer<unsigned char> eager_memory(llmc::Modded89Fp8Mlp::bytes(kT, kC, kLayers));
  llmc::Modded89Fp8Mlp eager(kT, kC, kLayers, eager_memory.get(), stream);
  llmc::Modded89Fp8Mlp captured(kT, kC, kLayers, memory_.get(), stream);
  std::vector<std::vector<double>> outputs;
  for (int replay = 0; replay < 3; replay++) {
    eager.before_step(1);  // every forward after an update: a refresh (a bootstrap: step 0's update)
    forward(eager, 0, layer);
    outputs.push_back(layer.d_out.download());
  }
  ASSERT_NE(outputs[0], outputs[1]) << "the first forward's activation scale is 1, the next ones' delayed";
  const std::vector<float> eager_activation = eager.download_scales(stream).activation;
  // The refresh is enqueued by the forward that finds the copies stale: capture one such forward.
  captured.before_step(1);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const llmc::test::CapturedGraph graph(stream, [&] { forward(captured, 0, layer); });
  for (int replay = 0; replay < 3; replay++) {
    graph.launch(stream);
    EXPECT_EQ(layer.d_out.download(), outputs[static_cast<size_t>(replay)]) << "replay " << replay;
  }
  EXPECT_EQ(captured.download_scales(stream).activation, eager_activation);
}

TEST_F(Modded89Fp8MlpTest, RefusesShapesTheFp8GemmsCannotTake) {
  LLMC_REQUIRE_GPU();
  EXPECT_FALSE(llmc::Modded89Fp8Mlp::shape_fits(40, kC));
  EXPECT_FALSE(llmc::Modded89Fp8Mlp::shape_fits(kT, 40));
  EXPECT_THROW(llmc::Modded89Fp8Mlp(40, kC, kLayers, memory_.get(), stream), std::invalid_argument);
  llmc::Modded89Fp8Mlp mlp(kT, kC, kLayers, memory_.get(), stream);
  Layer layer;
  fill(layer, 9600);
  EXPECT_THROW(mlp.forward(matmul_, 0, layer.d_xn.get(), layer.c_fc_device(), layer.c_proj_device(),
                           layer.d_pre.get(), layer.d_post.get(), layer.d_out.get(), 24, stream),
               std::invalid_argument);
  EXPECT_THROW(mlp.forward(matmul_, 2, layer.d_xn.get(), layer.c_fc_device(), layer.c_proj_device(),
                           layer.d_pre.get(), layer.d_post.get(), layer.d_out.get(), kT, stream),
               std::out_of_range);
}

}  // namespace modded89_fp8_mlp_test
