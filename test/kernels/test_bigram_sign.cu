// Kernel tests of the bigram sign trick (llmc/kernels/bigram_sign.cuh): every row multiplied by the sign row
// its token pair selects (row 0 at the first position), exactly (a product with +-1), also in place and as a KV
// cache's continuation, and the launcher's checks. Built for fp32 and bf16, emulated and on a GPU.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <vector>

#include "llmc/kernels/bigram_sign.cuh"
#include "test/support/gpu_test.h"
#include "test/support/kernel_test_utils.h"

namespace {

using namespace llmc::test;  // the shared helpers of test/support
using llmc::floatX;

TEST(BigramSignKernel, EachRowTimesTheSignRowOfItsTokenPair) {
  LLMC_REQUIRE_GPU();
  const int T = 40, C = 64, rows = llmc::kBigramSignRows;
  std::mt19937 rng(8192);
  const std::vector<double> in = random_values(static_cast<size_t>(T) * C, rng, -3.0, 3.0);
  std::vector<double> signs(static_cast<size_t>(rows) * C);
  for (double& s : signs) s = rng() % 2 == 0 ? 1.0 : -1.0;
  std::uniform_int_distribution<int> token(0, 50303);
  std::vector<int> tokens(T);
  for (int& t : tokens) t = token(rng);
  tokens[5] = tokens[4];  // a repeated token: XOR 0, sign row 0
  DeviceBuffer<floatX> d_in(in.size()), d_out(in.size()), d_signs(signs.size());
  DeviceBuffer<int> d_tokens(T);
  d_in.upload(in);
  d_signs.upload(signs);
  d_tokens.upload(std::vector<double>(tokens.begin(), tokens.end()));
  llmc::bigram_sign(d_out.get(), d_in.get(), d_tokens.get(), d_signs.get(), T, C, nullptr);
  std::vector<double> want(in.size());
  for (int t = 0; t < T; t++) {
    const int row = t == 0 ? 0 : (tokens[t - 1] ^ tokens[t]) % rows;
    for (int c = 0; c < C; c++)
      want[static_cast<size_t>(t) * C + c] =
          in[static_cast<size_t>(t) * C + c] * signs[static_cast<size_t>(row) * C + c];
  }
  EXPECT_EQ(d_out.download(), want);  // exact
  const int first = 5;                // a KV cache's continuation: row 0 pairs with the token before it
  DeviceBuffer<floatX> d_rows(in.size() - static_cast<size_t>(first) * C);
  llmc::bigram_sign(d_rows.get(), d_in.get() + static_cast<size_t>(first) * C, d_tokens.get() + first, d_signs.get(),
                    T - first, C, nullptr, /*continues=*/true);
  EXPECT_EQ(d_rows.download(), std::vector<double>(want.begin() + static_cast<std::ptrdiff_t>(first) * C, want.end()));
  llmc::bigram_sign(d_in.get(), d_in.get(), d_tokens.get(), d_signs.get(), T, C, nullptr);
  EXPECT_EQ(d_in.download(), want);
}

TEST(BigramSignKernel, RefusesRowsThatAreNotWholePackets) {
  LLMC_REQUIRE_GPU();
  DeviceBuffer<floatX> d_x(64), d_signs(static_cast<size_t>(llmc::kBigramSignRows) * 64);
  DeviceBuffer<int> d_tokens(1);
  EXPECT_THROW(llmc::bigram_sign(d_x.get(), d_x.get(), d_tokens.get(), d_signs.get(), 1, 63, nullptr),
               std::invalid_argument);
}

}  // namespace
