// Tests of the head-128 sliding-window attention over packed documents (llmc/kernels/window_attention.cuh,
// bf16 build only) against the double-precision reference: output, log-sum-exp, dq, dk and dv for
// random document boundaries (a one-token document in each random packing, and a document that fills
// the sequence), windows from 0 and 1 token to longer than the sequence, several softmax scales, both
// q/k/v layouts; the backward run twice must agree bitwise; the plan lists every tile once. Emulated
// cases are small (T up to 400); the GPU twin adds T = 4,096 with documents up to 2,048 tokens.
// With LLMC_ATTENTION_DUMP_DIR set, the JAX-oracle case also writes its data for
// check_window_attention_jax.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "test/kernels/window_attention_case.h"
#include "test/support/gpu_test.h"

#if !defined(LLMC_FP32)
namespace {

using namespace window_attention_test;

std::vector<Case> emulated_cases() {
  std::mt19937 rng(1313);
  std::vector<Case> cases;
  cases.push_back({"tiny_sequence", 5, 2, {2, 1, 2}, 3, 0.25f, false});
  cases.push_back({"one_token_docs_window_1", 200, 2, random_documents(200, 60, rng), 1, 0.1f, false});
  cases.push_back({"window_0_attends_itself", 130, 1, random_documents(130, 130, rng), 0, 0.1f, true});
  cases.push_back({"one_document_fills_window_above_T", 320, 1, {320}, 400, 0.08838835f, true});
  cases.push_back({"random_docs_window_64_padded_rows", 333, 2, random_documents(333, 333, rng), 64, 0.1318f,
                   false, 8});
  cases.push_back({"random_docs_window_127_sharp", 290, 1, random_documents(290, 200, rng), 127, 0.5f, true});
  cases.push_back({"random_docs_window_200", 400, 1, random_documents(400, 400, rng), 200, 0.116946f, false});
  return cases;
}

// The GPU adds the speedrun's shapes: documents up to 2,048 tokens in a 4,096-token sequence, the
// training windows, and one 2,048-token document filling its sequence.
std::vector<Case> gpu_cases() {
  std::vector<Case> cases = emulated_cases();
  std::mt19937 rng(2048);
  std::vector<int> documents = random_documents(4096 - 2048, 2048, rng);
  documents.insert(documents.begin() + 1, 2048);
  for (int window : {1, 128, 384, 1664, 5000})
    cases.push_back({"T4096_window_" + std::to_string(window), 4096, 2, documents, window, 0.1f, window % 2 == 0});
  cases.push_back({"T2048_one_document_window_896", 2048, 6, {2048}, 896, 0.131778f, true});
  return cases;
}

std::vector<Case> cases() { return LLMC_IS_EMULATION ? emulated_cases() : gpu_cases(); }

class WindowAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(WindowAttentionTest, MatchesReferenceAndBackwardIsBitwiseRepeatable) {
  LLMC_REQUIRE_GPU();
  const Problem problem(GetParam(), 7000 + static_cast<uint32_t>(GetParam().T * 31 + GetParam().window));
  const Result result = run_kernels(problem);
  EXPECT_TRUE(matches_reference(problem, result, reference(problem)));
  EXPECT_TRUE(llmc::test::bitwise_equal(result.raw_gradients[0], result.raw_gradients[1]))
      << problem.c.name << ": the backward is not bitwise repeatable";
  // The plan lists each tile of each kernel exactly once.
  const int forward = llmc::window_attention::forward_tiles(problem.c.T);
  const int backward = llmc::window_attention::backward_tiles(problem.c.T);
  const int lengths[3] = {forward, backward, backward};
  size_t offset = 0;
  for (int length : lengths) {
    std::vector<int> order(result.plan.begin() + static_cast<long>(offset),
                           result.plan.begin() + static_cast<long>(offset) + length);
    std::sort(order.begin(), order.end());
    for (int i = 0; i < length; i++) EXPECT_EQ(order[i], i) << problem.c.name << ": plan list at " << offset;
    offset += static_cast<size_t>(length);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, WindowAttentionTest, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

void write_doubles(const std::string& path, const std::vector<double>& values) {
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(values.data()), (std::streamsize)(values.size() * sizeof(double)));
  if (!file) throw std::runtime_error(path + ": cannot write");
}

// The case check_window_attention_jax.py cross-checks: it is also an ordinary reference test.
TEST(WindowAttentionOracle, JaxCase) {
  LLMC_REQUIRE_GPU();
  std::mt19937 rng(4242);
  const Problem problem({"jax_oracle", 192, 2, random_documents(192, 120, rng), 50, 0.12f, true}, 4242);
  const Result result = run_kernels(problem);
  EXPECT_TRUE(matches_reference(problem, result, reference(problem)));
  const char* directory = std::getenv("LLMC_ATTENTION_DUMP_DIR");
  if (directory == nullptr) return;
  const std::string dir(directory);
  std::ofstream meta(dir + "/meta.txt");
  meta << problem.c.T << " " << problem.c.heads << " " << problem.c.window << " " << problem.c.scale << "\n";
  for (int entry : problem.cu) meta << entry << " ";
  meta << "\n";
  const std::pair<const char*, const std::vector<double>*> arrays[] = {
      {"q", &problem.q},   {"k", &problem.k},     {"v", &problem.v},   {"dout", &problem.dout},
      {"out", &result.out}, {"lse", &result.lse}, {"dq", &result.dq}, {"dk", &result.dk},
      {"dv", &result.dv}};
  for (const auto& [name, values] : arrays) write_doubles(dir + "/" + name + ".f64", *values);
  ASSERT_TRUE(meta.good()) << dir << "/meta.txt: cannot write";
}

// One forward and one backward of a problem's fused layout with the stores' extra work (QK-norm + RoPE, gate, value
// mix), the results downloaded as Result (its gradients of the q, k, v slices, and their raw bits in
// raw_gradients[0]). Run again, it repeats the forward and backward on the same inputs.
struct FusedRun {
  const Problem& problem;
  DeviceBuffer<floatX> qkv, dqkv, out, dout;
  DeviceBuffer<float> lse, delta;
  DeviceBuffer<int> cu, plan;

  explicit FusedRun(const Problem& p)
      : problem(p), qkv(p.layout_elements()), dqkv(p.layout_elements()), out(tensor()), dout(tensor()),
        lse(static_cast<size_t>(p.c.heads) * p.c.T), delta(2 * static_cast<size_t>(p.c.heads) * p.c.T),
        cu(p.cu.size()), plan(llmc::window_attention::plan_ints(p.c.T)) {
    std::vector<double> host(p.layout_elements(), 0.0);
    const std::vector<double>* inputs[3] = {&p.q, &p.k, &p.v};
    for (int s = 0; s < 3; s++) host = p.to_layout(*inputs[s], std::move(host), s);
    qkv.upload(host);
    dout.upload(p.dout);
    cu.upload(std::vector<double>(p.cu.begin(), p.cu.end()));
    dqkv.fill_nan();
  }
  size_t tensor() const { return static_cast<size_t>(problem.c.T) * problem.c.heads * D; }

  Result run(const llmc::window_attention::NormRopeBackward& norm_rope, const llmc::window_attention::OutputGate& gate,
             const llmc::window_attention::ValueMixBackward& mix,
             const llmc::window_attention::PairNormRopeBackward& pair_rope = {}, bool accumulate_dv = false) {
    namespace wa = llmc::window_attention;
    const wa::Problem shape = problem.device_problem(cu.get());
    const int64_t slice = static_cast<int64_t>(problem.c.heads) * D, stride = problem.row_stride;
    floatX *q = qkv.get(), *dq = dqkv.get();
    wa::plan(plan.get(), shape, nullptr);
    wa::forward(out.get(), lse.get(), q, q + slice, q + 2 * slice, stride, plan.get(), shape, nullptr, gate);
    wa::backward(dq, dq + slice, dq + 2 * slice, stride, delta.get(), dout.get(), out.get(), lse.get(), q, q + slice,
                 q + 2 * slice, stride, plan.get(), shape, nullptr, norm_rope, gate, mix, pair_rope, accumulate_dv);
    Result r;
    r.out = out.download();
    r.lse = lse.download();
    r.raw_gradients[0] = dqkv.download_raw();
    const std::vector<double> gradients = dqkv.download();
    r.dq = problem.from_layout(gradients, 0), r.dk = problem.from_layout(gradients, 1);
    r.dv = problem.from_layout(gradients, 2);
    return r;
  }
};

// The QK-norm and RoPE backward in the dq and dk stores (NormRopeBackward). q and k are rot = R (x rstd) of raw
// heads x, rounded to bf16 as the forward's kernel writes them; dq and dk must be the gradients of x. Oracle: the
// double attention backward at the rounded rot, then dx = rstd (dn - n mean(dn n)), dn = R^T d(rot), with n = x rstd
// exact and the tables' bf16 values. Tolerance: the attention's, plus the kernel's n = R^T rot from the rounded rot
// and tables whose c^2 + s^2 is 1 only to a bf16 rounding (3 roundings in n, entering dx through the mean term and
// once more through R^T), and D more fp32 terms for the dot; the cancellation allowance passes through rstd.
TEST(WindowAttentionNormRope, DqAndDkAreTheRawHeadsGradients) {
  LLMC_REQUIRE_GPU();
  std::mt19937 rng(515);
  Problem problem({"norm_rope", 150, 2, random_documents(150, 100, rng), 48, 0.12f, true}, 515);
  const int T = problem.c.T, H = problem.c.heads, half = D / 2;
  std::vector<double> cos_table(static_cast<size_t>(T) * half), sin_table(cos_table.size());
  for (int t = 0; t < T; t++)  // half-truncated: the last quarter of the pairs not rotated
    for (int j = 0; j < half; j++) {
      const double theta = j < half / 2 ? t * std::pow(1024.0, -j / (half / 2.0)) : 0.0;
      cos_table[static_cast<size_t>(t) * half + j] = std::cos(theta);
      sin_table[static_cast<size_t>(t) * half + j] = std::sin(theta);
    }
  cos_table = llmc::test::round_to_floatx(cos_table);
  sin_table = llmc::test::round_to_floatx(sin_table);
  // raw q (heads 0..H-1) and k (H..2H-1), their rstd in rstd's [T, 2H] rows, and rot into the problem's q and k
  std::vector<double> raw[2], rstd(static_cast<size_t>(T) * 2 * H);
  std::vector<double>* rotated[2] = {&problem.q, &problem.k};
  for (int s = 0; s < 2; s++) {
    raw[s] = llmc::test::random_values(static_cast<size_t>(T) * H * D, rng, -2.0, 2.0);
    for (int t = 0; t < T; t++)
      for (int h = 0; h < H; h++) {
        const double* x = raw[s].data() + (static_cast<size_t>(t) * H + h) * D;
        double squares = 0.0;
        for (int d = 0; d < D; d++) squares += x[d] * x[d];
        const double r = 1.0 / std::sqrt(squares / D + FLT_EPSILON);
        rstd[static_cast<size_t>(t) * 2 * H + s * H + h] = r;
        double* y = rotated[s]->data() + (static_cast<size_t>(t) * H + h) * D;
        for (int j = 0; j < half; j++) {
          const double c = cos_table[static_cast<size_t>(t) * half + j], sn = sin_table[static_cast<size_t>(t) * half + j];
          y[j] = x[j] * r * c + x[j + half] * r * sn;
          y[j + half] = -x[j] * r * sn + x[j + half] * r * c;
        }
      }
    *rotated[s] = llmc::test::round_to_floatx(*rotated[s]);
  }
  DeviceBuffer<float> d_rstd(rstd.size());
  DeviceBuffer<floatX> d_cos(cos_table.size()), d_sin(sin_table.size());
  d_rstd.upload(rstd);
  d_cos.upload(cos_table);
  d_sin.upload(sin_table);
  FusedRun run(problem);
  const Result result = run.run({d_rstd.get(), d_cos.get(), d_sin.get()}, {}, {});
  const Result again = run.run({d_rstd.get(), d_cos.get(), d_sin.get()}, {}, {});
  const Expected attention = reference(problem);
  // the double norm and rotation backward of each head row
  std::vector<double> expected[2] = {attention.dq, attention.dk};
  for (int s = 0; s < 2; s++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < H; h++) {
        const size_t row = (static_cast<size_t>(t) * H + h) * D;
        const double r = rstd[static_cast<size_t>(t) * 2 * H + s * H + h];
        std::vector<double> dn(D), n(D);
        double dot = 0.0;
        for (int j = 0; j < half; j++) {
          const double c = cos_table[static_cast<size_t>(t) * half + j], sn = sin_table[static_cast<size_t>(t) * half + j];
          const double g1 = expected[s][row + j], g2 = expected[s][row + j + half];
          dn[j] = g1 * c - g2 * sn, dn[j + half] = g1 * sn + g2 * c;
        }
        for (int d = 0; d < D; d++) n[d] = raw[s][row + d] * r, dot += dn[d] * n[d];
        for (int d = 0; d < D; d++) expected[s][row + d] = r * (dn[d] - n[d] * dot / D);
      }
  const double tolerance = llmc::test::tolerance(6 + 3 + 3, 2 * D + 2 * problem.max_keys());
  double max_rstd = 0.0;
  for (double r : rstd) max_rstd = std::max(max_rstd, r);
  EXPECT_TRUE(llmc::test::all_close(result.dq, expected[0], tolerance,
                                    max_rstd * cancellation_allowance(problem, attention, problem.k)))
      << "dq";
  EXPECT_TRUE(llmc::test::all_close(result.dk, expected[1], tolerance,
                                    max_rstd * cancellation_allowance(problem, attention, problem.q)))
      << "dk";
  EXPECT_TRUE(llmc::test::all_close(result.dv, attention.dv, gradient_tolerance(problem))) << "dv";
  EXPECT_TRUE(llmc::test::bitwise_equal(result.raw_gradients[0], again.raw_gradients[0]));
}

// The 2026-07-17 QK-norm and adjacent-pair RoPE backward in the dq and dk stores (PairNormRopeBackward), in the
// plain view and the paired one (two view rows per token, each of half the heads, positions 2t + head % 2; with an
// even and an odd number of view heads), and with dK left plain (the key offset's layers). The model's q and k are
// rot = R (x rstd) of raw heads x, pairs (2m, 2m+1) of dims [0, 64) rotated, rounded to bf16; the view's
// [T, heads, 128] flattens to the model's [tokens, model heads, 128] (view row r, head s: token r / 2, head
// (r % 2) heads + s), so the problem's q and k are those vectors. dq_raw, dk_raw: the model's rows of 2 model heads
// of q, then of k (d_qk_raw). Oracle and tolerance as for NormRopeBackward above (the tables' c^2 + s^2 off by a
// bf16 rounding, n = R^T rot from the rounded rot).
TEST(WindowAttentionPairNormRope, DqAndDkAreTheRawHeadsGradientsPlainAndPaired) {
  LLMC_REQUIRE_GPU();
  struct Variant { const char* name; bool paired, fuse_k; int heads; };  // odd view heads: the model's 3
  for (const Variant variant : {Variant{"plain", false, true, 2}, Variant{"paired", true, true, 2},
                                Variant{"paired, 3 heads, dk plain", true, false, 3}}) {
    SCOPED_TRACE(variant.name);
    std::mt19937 rng(919);
    Problem problem({"pair_rope", 160, variant.heads, random_documents(160, 100, rng), 40, 0.12f, true}, 919);
    const int T = problem.c.T, tokens = variant.paired ? T / 2 : T;
    const int model_heads = variant.paired ? 2 * problem.c.heads : problem.c.heads, pairs = D / 4;
    std::vector<double> cos_table(static_cast<size_t>(T) * pairs), sin_table(cos_table.size());
    for (int position = 0; position < T; position++)
      for (int m = 0; m < pairs; m++) {
        const double theta = position * std::pow(1024.0, -m / (pairs - 1.0));
        cos_table[static_cast<size_t>(position) * pairs + m] = std::cos(theta);
        sin_table[static_cast<size_t>(position) * pairs + m] = std::sin(theta);
      }
    cos_table = llmc::test::round_to_floatx(cos_table);
    sin_table = llmc::test::round_to_floatx(sin_table);
    auto position_of = [&](int t, int h) { return variant.paired ? 2 * t + h % 2 : t; };
    std::vector<double> raw[2], rstd[2];
    std::vector<double>* rotated[2] = {&problem.q, &problem.k};
    for (int s = 0; s < 2; s++) {
      raw[s] = llmc::test::random_values(static_cast<size_t>(tokens) * model_heads * D, rng, -2.0, 2.0);
      rstd[s].resize(static_cast<size_t>(tokens) * model_heads);
      for (int t = 0; t < tokens; t++)
        for (int h = 0; h < model_heads; h++) {
          const size_t row = static_cast<size_t>(t) * model_heads + h;
          const double* x = raw[s].data() + row * D;
          double squares = 0.0;
          for (int d = 0; d < D; d++) squares += x[d] * x[d];
          const double r = 1.0 / std::sqrt(squares / D + FLT_EPSILON);
          rstd[s][row] = r;
          double* y = rotated[s]->data() + row * D;
          const size_t table_row = static_cast<size_t>(position_of(t, h)) * pairs;
          for (int m = 0; m < pairs; m++) {
            const double c = cos_table[table_row + m], sn = sin_table[table_row + m];
            y[2 * m] = x[2 * m] * r * c + x[2 * m + 1] * r * sn;
            y[2 * m + 1] = x[2 * m + 1] * r * c - x[2 * m] * r * sn;
          }
          for (int d = 2 * pairs; d < D; d++) y[d] = x[d] * r;
        }
      *rotated[s] = llmc::test::round_to_floatx(*rotated[s]);
    }
    DeviceBuffer<float> d_rstd_q(rstd[0].size()), d_rstd_k(rstd[1].size());
    DeviceBuffer<floatX> d_cos(cos_table.size()), d_sin(sin_table.size());
    const int64_t raw_stride = 2LL * model_heads * D;
    DeviceBuffer<floatX> d_raw(static_cast<size_t>(tokens) * raw_stride);
    d_rstd_q.upload(rstd[0]);
    d_rstd_k.upload(rstd[1]);
    d_cos.upload(cos_table);
    d_sin.upload(sin_table);
    d_raw.fill_nan();
    llmc::window_attention::PairNormRopeBackward rope;
    rope.rstd_q = d_rstd_q.get(), rope.rstd_k = variant.fuse_k ? d_rstd_k.get() : nullptr;
    rope.cos_table = d_cos.get(), rope.sin_table = d_sin.get(), rope.paired_rows = variant.paired;
    rope.dq_raw = d_raw.get(), rope.dk_raw = d_raw.get() + model_heads * D, rope.raw_row_stride = raw_stride;
    FusedRun run(problem);
    const Result result = run.run({}, {}, {}, rope);
    const std::vector<double> got = d_raw.download();
    const auto bits = d_raw.download_raw();
    run.run({}, {}, {}, rope);
    EXPECT_TRUE(llmc::test::bitwise_equal(bits, d_raw.download_raw())) << "a second run's bits";
    const Expected attention = reference(problem);
    const std::vector<double>* gradients[2] = {&attention.dq, &attention.dk};
    std::vector<double> expected[2], kernel[2];
    for (int s = 0; s < 2; s++) {
      expected[s].resize(raw[s].size());
      kernel[s].resize(raw[s].size());
      for (int t = 0; t < tokens; t++)
        for (int h = 0; h < model_heads; h++) {
          const size_t row = static_cast<size_t>(t) * model_heads + h;
          const double r = rstd[s][row];
          const double* g = gradients[s]->data() + row * D;
          const size_t table_row = static_cast<size_t>(position_of(t, h)) * pairs;
          std::vector<double> dn(g, g + D), n(D);
          for (int m = 0; m < pairs; m++) {
            const double c = cos_table[table_row + m], sn = sin_table[table_row + m];
            dn[2 * m] = g[2 * m] * c - g[2 * m + 1] * sn, dn[2 * m + 1] = g[2 * m] * sn + g[2 * m + 1] * c;
          }
          double dot = 0.0;
          for (int d = 0; d < D; d++) n[d] = raw[s][row * D + d] * r, dot += dn[d] * n[d];
          for (int d = 0; d < D; d++) {
            expected[s][row * D + d] = r * (dn[d] - n[d] * dot / D);
            kernel[s][row * D + d] = got[static_cast<size_t>(t) * raw_stride + s * model_heads * D + h * D + d];
          }
        }
    }
    const double tolerance = llmc::test::tolerance(6 + 3 + 3, 2 * D + 2 * problem.max_keys());
    const double max_rstd = std::max(*std::max_element(rstd[0].begin(), rstd[0].end()),
                                     *std::max_element(rstd[1].begin(), rstd[1].end()));
    EXPECT_TRUE(llmc::test::all_close(kernel[0], expected[0], tolerance,
                                      max_rstd * cancellation_allowance(problem, attention, problem.k)))
        << "dq_raw";
    if (variant.fuse_k) {
      EXPECT_TRUE(llmc::test::all_close(kernel[1], expected[1], tolerance,
                                        max_rstd * cancellation_allowance(problem, attention, problem.q)))
          << "dk_raw";
    } else {
      EXPECT_TRUE(std::all_of(kernel[1].begin(), kernel[1].end(), [](double x) { return std::isnan(x); }))
          << "dk_raw written without rstd_k";
      EXPECT_TRUE(llmc::test::all_close(result.dk, attention.dk, gradient_tolerance(problem),
                                        cancellation_allowance(problem, attention, problem.q)))
          << "plain dk";
    }
    EXPECT_TRUE(llmc::test::all_close(result.dv, attention.dv, gradient_tolerance(problem))) << "dv";
  }
}

// The output gate in the kernels (OutputGate): the forward writes g O with g = sigmoid(xn[t][0:12] . w[h]); the
// backward, given the gated output and its gradient dout, must give the gradients of q, k, v through dO = g dout
// and the gate logits' gradient g (1 - g) sum_d dout O. Oracle: the double attention at the same inputs, gated in
// double. Tolerances: the attention's (the gate is an fp32 factor, no rounding of its own before the output's); the
// logit gradient's delta sums dout times the rounded gated output, so beside the fp32 sum of D terms each term may
// be off by half a bf16 ulp: per row, (1 - g) kStorageRoundoff / 2 times the row's sum of |dout g O|.
TEST(WindowAttentionGate, GatedOutputAndGradientsMatchTheDoubleGate) {
  LLMC_REQUIRE_GPU();
  std::mt19937 rng(616);
  const Problem problem({"gate", 170, 2, random_documents(170, 120, rng), 60, 0.12f, true}, 616);
  const int T = problem.c.T, H = problem.c.heads, xn_stride = 16;
  const std::vector<double> xn = llmc::test::round_to_floatx(llmc::test::random_values(T * xn_stride, rng, -2, 2));
  const std::vector<double> w = llmc::test::round_to_floatx(llmc::test::random_values(H * 12, rng, -1, 1));
  std::vector<double> gate(static_cast<size_t>(T) * H);  // [T, H]
  for (int t = 0; t < T; t++)
    for (int h = 0; h < H; h++) {
      double dot = 0.0;
      for (int c = 0; c < 12; c++) dot += xn[static_cast<size_t>(t) * xn_stride + c] * w[h * 12 + c];
      gate[static_cast<size_t>(t) * H + h] = 1.0 / (1.0 + std::exp(-dot));
    }
  DeviceBuffer<floatX> d_xn(xn.size()), d_w(w.size());
  DeviceBuffer<float> d_logit_grads(static_cast<size_t>(T) * H);
  d_xn.upload(xn);
  d_w.upload(w);
  d_logit_grads.fill_nan();
  FusedRun run(problem);
  const Result r = run.run({}, {d_xn.get(), xn_stride, d_w.get(), d_logit_grads.get()}, {});
  // the double oracle: the ungated attention, gated; its backward at dO = g dout
  Expected e = reference(problem);
  Problem gated = problem;
  std::vector<double> out_gated = e.out, logit_grads(gate.size()), allowance(gate.size());
  for (size_t row = 0; row < gate.size(); row++) {  // row = t H + h
    double dot = 0.0, magnitude = 0.0;
    for (int d = 0; d < D; d++) {
      out_gated[row * D + d] *= gate[row];
      gated.dout[row * D + d] *= gate[row];
      dot += problem.dout[row * D + d] * e.out[row * D + d];
      magnitude += std::fabs(problem.dout[row * D + d] * out_gated[row * D + d]);
    }
    logit_grads[row] = dot * gate[row] * (1.0 - gate[row]);
    allowance[row] = (1.0 - gate[row]) * llmc::test::kStorageRoundoff / 2 * magnitude +
                     llmc::test::tolerance(0, D) * std::fabs(logit_grads[row]);
  }
  const Expected g = reference(gated);
  const Expected expected{out_gated, e.lse, g.dq, g.dk, g.dv};
  EXPECT_TRUE(matches_reference(gated, r, expected));
  const std::vector<double> got = d_logit_grads.download();
  int bad = 0;
  for (size_t row = 0; row < got.size(); row++)
    if (!(std::fabs(got[row] - logit_grads[row]) <= allowance[row])) bad++;
  EXPECT_EQ(bad, 0) << "logit gradients off by more than their rounding";
}

// The value mix in the dV store (ValueMixBackward): v = a v_raw + b ve as the attention reads it (rounded), v_raw in
// padded rows; dv must be a dV, dve (given) must gain b dV, and dscalars[1], [2] (given) the sums of dV v_raw and
// dV ve; without ve, dve and dscalars[2] untouched. Oracle: the double attention's dV. Tolerances: dV's (the
// attention's gradient tolerance, relative to dV's elements and rms), times the fp32 factor; dve's plus half a bf16
// ulp of the sum it rounds; each scalar's the same tolerance over sum(|dV v_raw| + rms(dV) |v_raw|), plus an fp32
// sum of all T H D terms. That bound adds worst cases over 38,400 terms, so each scalar is also held to the sum over
// the kernel's own dv (its rounding, half a bf16 ulp per term, and the fp32 sum): dout, v_raw and -ve positive, so
// the sums do not cancel and that bound is a fraction of a percent of them.
TEST(WindowAttentionValueMix, DvAndTheMixGradientsMatchTheDoubleMix) {
  LLMC_REQUIRE_GPU();
  for (const bool with_ve : {true, false}) {
    SCOPED_TRACE(with_ve ? "with ve" : "without ve");
    std::mt19937 rng(with_ve ? 717 : 718);
    Problem problem({"value_mix", 150, 2, random_documents(150, 100, rng), 50, 0.12f, true}, 717);
    const int T = problem.c.T, H = problem.c.heads, raw_stride = H * D + 8;
    const size_t n = static_cast<size_t>(T) * H * D;
    const double a = 0.75, b = with_ve ? -0.5 : 0.0;
    const std::vector<double> v_raw = llmc::test::round_to_floatx(llmc::test::random_values(n, rng, 0.5, 1.5));
    const std::vector<double> ve = llmc::test::round_to_floatx(llmc::test::random_values(n, rng, -1.5, -0.5));
    problem.dout = llmc::test::round_to_floatx(llmc::test::random_values(n, rng, 0.0, 1.0));
    const std::vector<double> dve0 = llmc::test::round_to_floatx(llmc::test::random_values(n, rng, -0.1, 0.1));
    for (size_t i = 0; i < n; i++) problem.v[i] = a * v_raw[i] + b * ve[i];
    problem.v = llmc::test::round_to_floatx(problem.v);
    std::vector<double> raw_rows(static_cast<size_t>(T) * raw_stride, 0.0);
    for (size_t row = 0; row < static_cast<size_t>(T); row++)
      for (int i = 0; i < H * D; i++) raw_rows[row * raw_stride + i] = v_raw[row * H * D + i];
    DeviceBuffer<floatX> d_raw(raw_rows.size()), d_ve(n), d_dve(n);
    DeviceBuffer<float> d_scalars(4), d_dscalars(4),
        d_partials(llmc::window_attention::value_mix_partials_floats(T, H));
    d_raw.upload(raw_rows);
    d_ve.upload(ve);
    d_dve.upload(dve0);
    d_scalars.upload({9.0, a, with_ve ? b : 9.0, 9.0});
    d_dscalars.upload({0.25, 0.25, 0.25, 0.25});
    llmc::window_attention::ValueMixBackward mix;
    mix.scalars = d_scalars.get(), mix.a_index = 1, mix.b_index = 2;
    mix.v_raw = d_raw.get(), mix.v_raw_stride = raw_stride;
    mix.ve = with_ve ? d_ve.get() : nullptr, mix.dve = with_ve ? d_dve.get() : nullptr;
    mix.partials = d_partials.get(), mix.dscalars = d_dscalars.get();
    FusedRun run(problem);
    const Result r = run.run({}, {}, mix);
    const Expected e = reference(problem);
    const double tolerance = gradient_tolerance(problem), dv_rms = llmc::test::rms(e.dv);
    std::vector<double> expected_dv = e.dv;
    for (double& value : expected_dv) value *= a;
    // dq and dk are other tests' (with inputs this biased, dS = P (dP - delta) cancels past their allowance)
    EXPECT_TRUE(llmc::test::all_close(r.dv, expected_dv, tolerance)) << "dv";
    const std::vector<double> dve = d_dve.download(), dscalars = d_dscalars.download();
    int bad = 0;
    double sums[2] = {0.25, 0.25}, bounds[2] = {0.0, 0.0}, magnitudes[2] = {0.0, 0.0};
    double own_sums[2] = {0.25, 0.25}, own_magnitudes[2] = {0.0, 0.0};  // over the kernel's dv / a
    const std::vector<double>* operands[2] = {&v_raw, &ve};
    for (size_t i = 0; i < n; i++) {
      const double want = dve0[i] + b * e.dv[i];
      const double allowed = std::fabs(b) * tolerance * (std::fabs(e.dv[i]) + dv_rms) +
                             llmc::test::kStorageRoundoff / 2 * std::fabs(want);
      if (with_ve ? !(std::fabs(dve[i] - want) <= allowed) : dve[i] != dve0[i]) bad++;
      for (int k = 0; k < 2; k++) {
        const double x = (*operands[k])[i];
        sums[k] += e.dv[i] * x;
        bounds[k] += tolerance * (std::fabs(e.dv[i]) + dv_rms) * std::fabs(x);
        magnitudes[k] += std::fabs(e.dv[i] * x);
        own_sums[k] += r.dv[i] / a * x;
        own_magnitudes[k] += std::fabs(r.dv[i] / a * x);
      }
    }
    EXPECT_EQ(bad, 0) << "dve elements off by more than their rounding (or touched without ve)";
    for (int k = 0; k < 2; k++) bounds[k] += 2.0 * n * llmc::test::kFp32Roundoff * magnitudes[k];
    EXPECT_NEAR(dscalars[1], sums[0], bounds[0]) << "a's gradient";
    const double own_bound = llmc::test::kStorageRoundoff / 2 + 2.0 * n * llmc::test::kFp32Roundoff;
    EXPECT_NEAR(dscalars[1], own_sums[0], own_bound * own_magnitudes[0]) << "a's gradient and the kernel's dv";
    if (with_ve) {
      EXPECT_NEAR(dscalars[2], sums[1], bounds[1]) << "b's gradient";
      EXPECT_NEAR(dscalars[2], own_sums[1], own_bound * own_magnitudes[1]) << "b's gradient and the kernel's dv";
    } else {
      EXPECT_EQ(dscalars[2], 0.25) << "b's gradient without ve";
    }
    EXPECT_EQ(dscalars[0], 0.25);
    EXPECT_EQ(dscalars[3], 0.25);
  }
}

// accumulate_dv (the #89 model's XSA layers, whose XSA backward stores its share of dv first): a backward adding into
// the previous one's dv gives twice it, bf16(dV + bf16(dV)), one rounding more than 2 bf16(dV); dq and dk are
// overwritten as before, bit for bit.
TEST(WindowAttentionAccumulatedDv, AddsTheAttentionsDvToTheOldContents) {
  LLMC_REQUIRE_GPU();
  std::mt19937 rng(616);
  Problem problem({"accumulate_dv", 150, 2, random_documents(150, 100, rng), 48, 0.12f, true}, 616);
  FusedRun run(problem);
  const Result first = run.run({}, {}, {});
  const Result second = run.run({}, {}, {}, {}, /*accumulate_dv=*/true);
  std::vector<double> twice = first.dv;
  for (double& value : twice) value *= 2.0;
  EXPECT_TRUE(llmc::test::all_close(second.dv, twice, llmc::test::tolerance(2, 0))) << "dv";
  EXPECT_EQ(second.dq, first.dq);
  EXPECT_EQ(second.dk, first.dk);
}

TEST(WindowAttentionLaunch, RejectsBadArguments) {
  LLMC_REQUIRE_GPU();
  namespace wa = llmc::window_attention;
  DeviceBuffer<int> cu(2), plan(wa::plan_ints(64));
  DeviceBuffer<floatX> qkv(64 * 3 * D), out(64 * D);
  DeviceBuffer<float> lse(64);
  const wa::Problem good{64, 1, cu.get(), 1, 16, 0.1f};
  auto forward = [&](const wa::Problem& problem, int64_t stride, const floatX* k) {
    wa::forward(out.get(), lse.get(), qkv.get(), k, qkv.get() + 2 * D, stride, plan.get(), problem, nullptr);
  };
  wa::Problem bad = good;
  bad.T = 0;
  EXPECT_THROW(forward(bad, 3 * D, qkv.get() + D), std::invalid_argument);
  bad = good;
  bad.window = -1;
  EXPECT_THROW(forward(bad, 3 * D, qkv.get() + D), std::invalid_argument);
  bad = good;
  bad.scale = 0.0f;
  EXPECT_THROW(forward(bad, 3 * D, qkv.get() + D), std::invalid_argument);
  EXPECT_THROW(forward(good, 3 * D + 4, qkv.get() + D), std::invalid_argument);  // stride not a multiple of 8
  EXPECT_THROW(forward(good, D - 8, qkv.get() + D), std::invalid_argument);      // rows overlap
  EXPECT_THROW(forward(good, 3 * D, qkv.get() + D + 1), std::invalid_argument);  // misaligned k
}

}  // namespace
#endif  // !LLMC_FP32
