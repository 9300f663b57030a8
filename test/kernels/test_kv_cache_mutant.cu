// Built once per mutant of the KV-cache attention (cmake/kernels.cmake: a copy of kv_cache.cuh with one
// line removed, found first on the include path): the emulated run of a representative problem must
// differ from the double reference. A mutant that passes fails this test.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>

#include "test/kernels/kv_cache_case.h"
#include "test/support/gpu_test.h"

namespace {

using namespace kv_cache_test;

[[noreturn]] void run_mutant_and_exit() {
  const Case c{32, 2, 64, {9, 1, 1, 3}};
  std::mt19937 rng(5);
  const std::vector<double> qkv = random_qkv(c, rng);
  const bool correct =
      llmc::test::all_close(run_kernels(c, qkv).out, reference_attention(c, qkv), output_tolerance(c));
  std::fprintf(stderr, correct ? "mutant not caught: results match the reference\n"
                               : "mutant caught: results differ from the reference\n");
  std::_Exit(correct ? 0 : 3);
}

TEST(KvCacheMutant, IsCaughtByTheEmulatedTest) {
  if (!LLMC_IS_EMULATION) GTEST_SKIP() << "emulation-only: a mutant's behaviour on a GPU is undefined";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(run_mutant_and_exit(), ::testing::ExitedWithCode(3), "mutant caught");
}

}  // namespace
