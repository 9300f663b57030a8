// Tests of the KV-cache kernels (llmc/kernels/kv_cache.cuh) against the double-precision causal
// attention over the whole sequence: prefill then single tokens, several head sizes (one that does not
// divide the block), the cache's contents (exact copies, untouched slots stay NaN), and that the result
// of a token does not depend on how the sequence was cut into calls.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "test/kernels/kv_cache_case.h"
#include "test/support/gpu_test.h"

namespace {

// Qualified: the GPU test binary compiles this file in one unit with others (cmake/emu.cmake).
namespace kv = kv_cache_test;

class KvCacheAttention : public ::testing::TestWithParam<int> {};

TEST_P(KvCacheAttention, PrefillThenDecodeMatchesFullCausalAttention) {
  LLMC_REQUIRE_GPU();
  const kv::Case c{40, 3, GetParam(), {7, 1, 1, 1, 5, 1, 1, 2}};
  std::mt19937 rng(1000 + c.hs);
  const std::vector<double> qkv = kv::random_qkv(c, rng);
  const kv::Result result = kv::run_kernels(c, qkv);
  EXPECT_TRUE(llmc::test::all_close(result.out, kv::reference_attention(c, qkv), kv::output_tolerance(c)));

  // Keys and values are copied bit for bit into (NH, max_T, hs) each; slots past the sequence stay NaN.
  const int C = c.NH * c.hs, T = c.total();
  const size_t values = static_cast<size_t>(c.NH) * c.max_T * c.hs;
  for (int h = 0; h < c.NH; h++)
    for (int t = 0; t < c.max_T; t++)
      for (int d = 0; d < c.hs; d++) {
        const size_t slot = (static_cast<size_t>(h) * c.max_T + t) * c.hs + d;
        if (t < T) {
          const size_t key = static_cast<size_t>(t) * 3 * C + C + h * c.hs + d;
          ASSERT_EQ(result.cache[slot], qkv[key]) << "key h" << h << " t" << t;
          ASSERT_EQ(result.cache[values + slot], qkv[key + C]) << "value h" << h << " t" << t;
        } else {
          ASSERT_TRUE(std::isnan(result.cache[slot]) && std::isnan(result.cache[values + slot])) << "slot " << t;
        }
      }
}

INSTANTIATE_TEST_SUITE_P(HeadSizes, KvCacheAttention, ::testing::Values(64, 48, 16));

// Each query sums over the same keys in the same order whatever the calls were: bitwise equal outputs.
TEST(KvCacheAttentionChunks, OutputDoesNotDependOnHowTheSequenceWasCut) {
  LLMC_REQUIRE_GPU();
  const kv::Case whole{24, 2, 64, {24}};
  const kv::Case pieces{24, 2, 64, {1, 1, 9, 1, 4, 1, 1, 1, 5}};
  std::mt19937 rng(77);
  const std::vector<double> qkv = kv::random_qkv(whole, rng);
  EXPECT_TRUE(llmc::test::bitwise_equal(kv::run_kernels(whole, qkv).out, kv::run_kernels(pieces, qkv).out));
}

TEST(KvCacheAttentionShapes, RejectsTokensPastTheCacheAndHugeHeads) {
  EXPECT_THROW(llmc::check_cached_attention_shape(2, 39, 40, 64, 1), std::out_of_range);
  EXPECT_THROW(llmc::check_cached_attention_shape(0, 0, 40, 64, 1), std::out_of_range);
  EXPECT_THROW(llmc::check_cached_attention_shape(1, 0, 40, 512, 1), std::invalid_argument);
  EXPECT_THROW(llmc::check_cached_attention_shape(1, 0, 40, 64, 3), std::invalid_argument);
  EXPECT_NO_THROW(llmc::check_cached_attention_shape(1, 39, 40, 64, 1));
}

}  // namespace
