// Tests of the GEMM wrapper and the linear layer (llmc/kernels/matmul.cuh) against the double-precision
// reference: all transpose combinations, batched, alpha/beta, a separate addend, plans built once per key,
// the fastest-algorithm selection; the forward (bias, GELU epilogue) and backward (bias gradient, GELU).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "llmc/kernels/matmul.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"
#include "test/reference/reference_ops.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

class GemmTest : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(GemmTest, BatchedTransposedMatchesReference) {
  LLMC_REQUIRE_GPU();
  const bool trans_a = std::get<0>(GetParam()), trans_b = std::get<1>(GetParam());
  const int batch = 3, M = 24, N = 40, K = 16;
  const float alpha = 0.5f, beta = 1.0f;  // powers of two: exact in every precision
  std::mt19937 rng(500 + 2 * trans_a + trans_b);
  const std::vector<double> a = random_values(static_cast<size_t>(batch) * M * K, rng);
  const std::vector<double> b = random_values(static_cast<size_t>(batch) * K * N, rng);
  const std::vector<double> d_initial = random_values(static_cast<size_t>(batch) * M * N, rng);

  std::vector<double> expected = d_initial;
  for (int p = 0; p < batch; p++) {
    // The reference computes inp (M,K) @ weight^T with weight (N,K): build op(A) and op(B)^T explicitly.
    std::vector<double> op_a(static_cast<size_t>(M) * K), op_b_transposed(static_cast<size_t>(N) * K),
        product(static_cast<size_t>(M) * N);
    const double* a_p = a.data() + static_cast<size_t>(p) * M * K;
    const double* b_p = b.data() + static_cast<size_t>(p) * K * N;
    for (int i = 0; i < M; i++)
      for (int k = 0; k < K; k++)
        op_a[static_cast<size_t>(i) * K + k] =
            trans_a ? a_p[static_cast<size_t>(k) * M + i] : a_p[static_cast<size_t>(i) * K + k];
    for (int j = 0; j < N; j++)
      for (int k = 0; k < K; k++)
        op_b_transposed[static_cast<size_t>(j) * K + k] =
            trans_b ? b_p[static_cast<size_t>(j) * K + k] : b_p[static_cast<size_t>(k) * N + j];
    ref::matmul_forward(product.data(), op_a.data(), op_b_transposed.data(), nullptr, M, K, N);
    for (size_t i = 0; i < product.size(); i++)
      expected[static_cast<size_t>(p) * M * N + i] =
          alpha * product[i] + beta * expected[static_cast<size_t>(p) * M * N + i];
  }

  DeviceBuffer<floatX> d_a(a.size()), d_b(b.size()), d_d(d_initial.size());
  d_a.upload(a);
  d_b.upload(b);
  d_d.upload(d_initial);
  llmc::MatmulContext context;
  llmc::GemmArgs g;
  g.d = d_d.get();
  g.a = d_a.get();
  g.b = d_b.get();
  g.m = M;
  g.n = N;
  g.k = K;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.alpha = alpha;
  g.beta = beta;
  g.batch = batch;
  g.stride_a = static_cast<long long>(M) * K;
  g.stride_b = static_cast<long long>(K) * N;
  g.stride_d = static_cast<long long>(M) * N;
  llmc::gemm(context, g, nullptr);
  EXPECT_TRUE(all_close(d_d.download(), expected, tolerance(1, K + 1)));
}

INSTANTIATE_TEST_SUITE_P(AllTransposes, GemmTest, ::testing::Combine(::testing::Bool(), ::testing::Bool()));

// D (M,N) (+)= A (M,K) @ B (K,N) in double, for the plan tests.
std::vector<double> reference_product(const std::vector<double>& a, const std::vector<double>& b,
                                      const std::vector<double>& d_initial, int M, int N, int K, double beta) {
  std::vector<double> expected(static_cast<size_t>(M) * N);
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double sum = 0.0;
      for (int k = 0; k < K; k++) sum += a[static_cast<size_t>(i) * K + k] * b[static_cast<size_t>(k) * N + j];
      const size_t index = static_cast<size_t>(i) * N + j;
      expected[index] = sum + beta * d_initial[index];
    }
  return expected;
}

// A plan is built on the first call with a key only; later calls with equal keys reuse it and give the same
// bits, and every part of the key (transposition, accumulation, epilogue, alignment) makes a new plan.
TEST(GemmPlans, BuiltOncePerKeyAndReused) {
  LLMC_REQUIRE_GPU();
  const int M = 24, N = 40, K = 16;
  std::mt19937 rng(520);
  const std::vector<double> a = random_values(static_cast<size_t>(M) * K + 8, rng),
                            b = random_values(static_cast<size_t>(K) * N, rng),
                            bias = random_values(N, rng);
  DeviceBuffer<floatX> d_a(a.size()), d_b(b.size()), d_bias(N), d_d(static_cast<size_t>(M) * N);
  d_a.upload(a);
  d_b.upload(b);
  d_bias.upload(bias);
  llmc::MatmulContext context;
  llmc::GemmArgs g;
  g.d = d_d.get();
  g.a = d_a.get();
  g.b = d_b.get();
  g.m = M;
  g.n = N;
  g.k = K;
  std::vector<std::vector<floatX>> results;
  for (int call = 0; call < 3; call++) {
    llmc::gemm(context, g, nullptr);
    results.push_back(d_d.download_raw());
  }
  EXPECT_EQ(context.plans().builds(), 1);
  EXPECT_TRUE(bitwise_equal(results[0], results[1]) && bitwise_equal(results[0], results[2]));
  const std::vector<double> a_rows(a.begin(), a.begin() + static_cast<long>(M) * K);
  EXPECT_TRUE(all_close(d_d.download(), reference_product(a_rows, b, std::vector<double>(M * N, 0.0), M, N, K, 0.0),
                        tolerance(1, K)));
  llmc::GemmArgs accumulate = g, with_bias = g, misaligned = g;
  accumulate.beta = 1.0f;
  with_bias.bias = d_bias.get();
  misaligned.a = d_a.get() + 1;  // 2-byte (bf16) or 4-byte (fp32) aligned instead of 256
  for (const llmc::GemmArgs& variant : {accumulate, with_bias, misaligned}) llmc::gemm(context, variant, nullptr);
  EXPECT_EQ(context.plans().builds(), 4);
  llmc::gemm(context, g, nullptr);
  EXPECT_EQ(context.plans().builds(), 4) << "the first key's plan was built again";
  EXPECT_EQ(context.plans().size(), 4u);
}

// kFastest times its candidates at the first call (on a GPU; the emulated build has nothing to time): the
// timed runs must leave no trace in D, also when D is accumulated into (beta = 1: D saved and restored),
// and the later calls with the chosen algorithm give the same product. Few output tiles and a long K: the
// shape of the weight gradients that get split-K candidates.
TEST(GemmPlans, FastestSelectionKeepsResults) {
  LLMC_REQUIRE_GPU();
  const int M = 64, N = 64, K = 4096;
  std::mt19937 rng(530);
  const std::vector<double> a = random_values(static_cast<size_t>(M) * K, rng),
                            b = random_values(static_cast<size_t>(K) * N, rng),
                            d_initial = random_values(static_cast<size_t>(M) * N, rng);
  const std::vector<double> expected = reference_product(a, b, d_initial, M, N, K, 1.0);
  DeviceBuffer<floatX> d_a(a.size()), d_b(b.size()), d_d(d_initial.size());
  d_a.upload(a);
  d_b.upload(b);
  llmc::MatmulContext context(llmc::MatmulContext::kDefaultWorkspaceBytes, llmc::GemmAlgoSelection::kFastest);
  llmc::GemmArgs g;
  g.d = d_d.get();
  g.a = d_a.get();
  g.b = d_b.get();
  g.m = M;
  g.n = N;
  g.k = K;
  g.beta = 1.0f;
  for (int call = 0; call < 3; call++) {  // the first call times; the timings are read by a later one
    SCOPED_TRACE("call " + std::to_string(call));
    d_d.upload(d_initial);
    llmc::gemm(context, g, nullptr);
    // One rounding of the fp32 sum of K products plus D; a split-K algorithm sums in another order, which
    // the same bound covers.
    EXPECT_TRUE(all_close(d_d.download(), expected, tolerance(1, K + 1)));
  }
  EXPECT_EQ(context.plans().builds(), 1);
}

// D = alpha * A @ B + beta * C with C separate from D (batched): C must be read, not written, and D's
// previous contents must not leak in (D starts as NaN).
TEST(GemmWrapper, SeparateAddendIsReadNotWritten) {
  LLMC_REQUIRE_GPU();
  const int batch = 2, M = 12, N = 20, K = 8;
  const float alpha = 1.0f, beta = 2.0f;  // exact in every precision
  std::mt19937 rng(510);
  const std::vector<double> a = random_values((size_t)batch * M * K, rng);
  const std::vector<double> b = random_values((size_t)batch * K * N, rng);
  const std::vector<double> c = random_values((size_t)batch * M * N, rng);
  std::vector<double> expected((size_t)batch * M * N);
  for (int p = 0; p < batch; p++)
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) {
        double sum = 0.0;
        for (int k = 0; k < K; k++) sum += a[((size_t)p * M + i) * K + k] * b[((size_t)p * K + k) * N + j];
        const size_t index = ((size_t)p * M + i) * N + j;
        expected[index] = alpha * sum + beta * c[index];
      }
  DeviceBuffer<floatX> d_a(a.size()), d_b(b.size()), d_c(c.size()), d_d(expected.size());  // d_d: NaN
  d_a.upload(a);
  d_b.upload(b);
  d_c.upload(c);
  llmc::MatmulContext context;
  llmc::GemmArgs g;
  g.d = d_d.get();
  g.a = d_a.get();
  g.b = d_b.get();
  g.c = d_c.get();
  g.m = M;
  g.n = N;
  g.k = K;
  g.alpha = alpha;
  g.beta = beta;
  g.batch = batch;
  g.stride_a = (long long)M * K;
  g.stride_b = (long long)K * N;
  g.stride_d = (long long)M * N;
  llmc::gemm(context, g, nullptr);
  // One rounding of the fp32 sum of K products and the addend.
  EXPECT_TRUE(all_close(d_d.download(), expected, tolerance(1, K + 1)));
  EXPECT_TRUE(bitwise_equal(d_c.download(), round_to_floatx(c))) << "the addend C was modified";
}

TEST(GemmWrapper, RejectsBadShapes) {
  LLMC_REQUIRE_GPU();
  llmc::MatmulContext context;
  llmc::GemmArgs g;  // null pointers, zero sizes
  EXPECT_THROW(llmc::gemm(context, g, nullptr), std::invalid_argument);
}

// Big enough that the emulated CPU GEMM splits the rows over the machine's cores (130 rows: an uneven split);
// on a GPU the same shapes go through cuBLASLt.
TEST(MatmulKernel, LargerForwardMatchesReference) {
  LLMC_REQUIRE_GPU();
  const int N = 130, C = 192, OC = 256;
  std::mt19937 rng(616);
  const std::vector<double> inp = random_values(static_cast<size_t>(N) * C, rng),
                            weight = random_values(static_cast<size_t>(OC) * C, rng);
  const std::vector<double> bias = random_values(OC, rng);
  DeviceBuffer<floatX> d_inp(inp.size()), d_weight(weight.size()), d_bias(OC), d_out(static_cast<size_t>(N) * OC);
  d_inp.upload(inp);
  d_weight.upload(weight);
  d_bias.upload(bias);
  llmc::MatmulContext context;
  llmc::matmul_forward(context, d_out.get(), nullptr, d_inp.get(), d_weight.get(), d_bias.get(), N, C, OC, nullptr);
  std::vector<double> expected(static_cast<size_t>(N) * OC);
  ref::matmul_forward(expected.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  EXPECT_TRUE(all_close(d_out.download(), expected, tolerance(1, C + 1)));
}

struct LinearData {
  static constexpr int N = 48, C = 72, OC = 40;
  std::mt19937 rng{606};
  std::vector<double> inp = random_values(static_cast<size_t>(N) * C, rng);
  std::vector<double> weight = random_values(static_cast<size_t>(OC) * C, rng);
  std::vector<double> bias = random_values(OC, rng);
};

TEST(MatmulKernel, ForwardWithAndWithoutBiasAndGeluMatchesReference) {
  LLMC_REQUIRE_GPU();
  LinearData data;
  const int N = data.N, C = data.C, OC = data.OC;
  DeviceBuffer<floatX> d_inp(static_cast<size_t>(N) * C), d_weight(static_cast<size_t>(OC) * C), d_bias(OC);
  DeviceBuffer<floatX> d_out(static_cast<size_t>(N) * OC), d_pre(static_cast<size_t>(N) * OC);
  d_inp.upload(data.inp);
  d_weight.upload(data.weight);
  d_bias.upload(data.bias);
  llmc::MatmulContext context;

  std::vector<double> expected(static_cast<size_t>(N) * OC), expected_no_bias(static_cast<size_t>(N) * OC);
  ref::matmul_forward(expected.data(), data.inp.data(), data.weight.data(), data.bias.data(), N, C, OC);
  ref::matmul_forward(expected_no_bias.data(), data.inp.data(), data.weight.data(), nullptr, N, C, OC);

  llmc::matmul_forward(context, d_out.get(), nullptr, d_inp.get(), d_weight.get(), d_bias.get(), N, C, OC, nullptr);
  EXPECT_TRUE(all_close(d_out.download(), expected, tolerance(1, C + 1)));

  d_out.fill_nan();
  llmc::matmul_forward(context, d_out.get(), nullptr, d_inp.get(), d_weight.get(), nullptr, N, C, OC, nullptr);
  EXPECT_TRUE(all_close(d_out.download(), expected_no_bias, tolerance(1, C)));

  d_out.fill_nan();
  llmc::matmul_forward(context, d_out.get(), d_pre.get(), d_inp.get(), d_weight.get(), d_bias.get(), N, C, OC,
                       nullptr);
  std::vector<double> expected_gelu(expected.size());
  ref::gelu_forward(expected_gelu.data(), expected.data(), expected.size());
  EXPECT_TRUE(all_close(d_pre.download(), expected, tolerance(1, C + 1)));
  // GELU of the pre-activation: the unfused GPU path rounds pre-activation before the GELU (2 roundings).
  EXPECT_TRUE(all_close(d_out.download(), expected_gelu, tolerance(2, C + 9)));
}

TEST(MatmulKernel, BackwardMatchesReferenceAndIsDeterministic) {
  LLMC_REQUIRE_GPU();
  LinearData data;
  const int N = data.N, C = data.C, OC = data.OC;
  const std::vector<double> dout = random_values(static_cast<size_t>(N) * OC, data.rng);
  const std::vector<double> dweight_initial = random_values(static_cast<size_t>(OC) * C, data.rng);
  const std::vector<double> dbias_initial = random_values(OC, data.rng);
  DeviceBuffer<floatX> d_inp(static_cast<size_t>(N) * C), d_weight(static_cast<size_t>(OC) * C),
      d_dout(static_cast<size_t>(N) * OC);
  DeviceBuffer<floatX> d_dinp(static_cast<size_t>(N) * C), d_dweight(static_cast<size_t>(OC) * C), d_dbias(OC);
  const size_t scratch_floats = llmc::matmul_backward_scratch_floats(N, OC);
  DeviceBuffer<float> d_scratch(scratch_floats);
  d_scratch.fill_zero();  // the bias gradient's fold counters start at zero (every call leaves them so)
  d_inp.upload(data.inp);
  d_weight.upload(data.weight);
  d_dout.upload(dout);
  llmc::MatmulContext context;

  std::vector<double> dinp(static_cast<size_t>(N) * C, 0.0), dweight = dweight_initial, dbias = dbias_initial;
  ref::matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), data.inp.data(), data.weight.data(), N,
                       C, OC);
  std::vector<std::vector<floatX>> runs;
  for (int run = 0; run < 2; run++) {
    d_dinp.fill_nan();  // overwritten, never read
    d_dweight.upload(dweight_initial);
    d_dbias.upload(dbias_initial);
    llmc::matmul_backward(context, d_dinp.get(), d_dweight.get(), d_dbias.get(), d_dout.get(), d_inp.get(),
                          d_weight.get(), nullptr, N, C, OC, /*accumulate_param_grads=*/true, d_scratch.get(),
                          scratch_floats, nullptr);
    std::vector<floatX> all = d_dinp.download_raw();
    for (const auto& part : {d_dweight.download_raw(), d_dbias.download_raw()})
      all.insert(all.end(), part.begin(), part.end());
    runs.push_back(all);
  }
  EXPECT_TRUE(all_close(d_dinp.download(), dinp, tolerance(1, OC)));
  EXPECT_TRUE(all_close(d_dweight.download(), dweight, tolerance(1, N + 1)));
  EXPECT_TRUE(all_close(d_dbias.download(), dbias, tolerance(1, N + 1)));
  EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "matmul backward is not deterministic";

  // Without accumulation the NaN-filled parameter gradients must be fully overwritten.
  d_dweight.fill_nan();
  d_dbias.fill_nan();
  llmc::matmul_backward(context, nullptr, d_dweight.get(), d_dbias.get(), d_dout.get(), d_inp.get(), d_weight.get(),
                        nullptr, N, C, OC, /*accumulate_param_grads=*/false, d_scratch.get(), scratch_floats, nullptr);
  std::vector<double> dweight_fresh(static_cast<size_t>(OC) * C, 0.0), dbias_fresh(OC, 0.0),
      unused(static_cast<size_t>(N) * C, 0.0);
  ref::matmul_backward(unused.data(), dweight_fresh.data(), dbias_fresh.data(), dout.data(), data.inp.data(),
                       data.weight.data(), N, C, OC);
  EXPECT_TRUE(all_close(d_dweight.download(), dweight_fresh, tolerance(1, N)));
  EXPECT_TRUE(all_close(d_dbias.download(), dbias_fresh, tolerance(1, N)));
}

TEST(MatmulKernel, BackwardThroughGeluMatchesReference) {
  LLMC_REQUIRE_GPU();
  // fcproj-like layer: its input was gelu(pre); dinp becomes the gradient w.r.t. pre.
  LinearData data;
  const int N = data.N, C = data.C, OC = data.OC;
  const std::vector<double> pre = random_values(static_cast<size_t>(N) * C, data.rng, -3.0, 3.0);
  const std::vector<double> dout = random_values(static_cast<size_t>(N) * OC, data.rng);
  DeviceBuffer<floatX> d_pre(static_cast<size_t>(N) * C), d_inp(static_cast<size_t>(N) * C),
      d_weight(static_cast<size_t>(OC) * C), d_dout(static_cast<size_t>(N) * OC);
  DeviceBuffer<floatX> d_dinp(static_cast<size_t>(N) * C), d_dweight(static_cast<size_t>(OC) * C);
  const size_t scratch_floats = llmc::matmul_backward_scratch_floats(N, OC);
  DeviceBuffer<float> d_scratch(scratch_floats);
  d_scratch.fill_zero();  // the bias gradient's fold counters start at zero (every call leaves them so)
  d_pre.upload(pre);
  d_inp.upload(data.inp);
  d_weight.upload(data.weight);
  d_dout.upload(dout);
  llmc::MatmulContext context;
  llmc::matmul_backward(context, d_dinp.get(), d_dweight.get(), nullptr, d_dout.get(), d_inp.get(), d_weight.get(),
                        d_pre.get(), N, C, OC, /*accumulate_param_grads=*/false, d_scratch.get(), scratch_floats,
                        nullptr);
  std::vector<double> dinp_after_matmul(static_cast<size_t>(N) * C, 0.0), dweight(static_cast<size_t>(OC) * C, 0.0),
      dpre(static_cast<size_t>(N) * C, 0.0);
  ref::matmul_backward(dinp_after_matmul.data(), dweight.data(), nullptr, dout.data(), data.inp.data(),
                       data.weight.data(), N, C, OC);
  ref::gelu_backward(dpre.data(), pre.data(), dinp_after_matmul.data(), dpre.size());
  EXPECT_TRUE(all_close(d_dinp.download(), dpre, tolerance(2, OC + 8)));
}

}  // namespace
