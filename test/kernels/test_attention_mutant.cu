// Built once per mutant of the window attention (cmake/kernels.cmake: a copy of the kernel headers with
// one line removed, found first on the include path): the emulated run of a representative problem
// must be caught, by results that differ from the double reference or by the emulation stopping the
// kernel (SIGABRT, e.g. cp.async copies left in flight). A mutant that passes fails this test.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "test/kernels/window_attention_case.h"
#include "test/support/gpu_test.h"

#if !defined(LLMC_FP32)
namespace {

using namespace window_attention_test;

[[noreturn]] void run_mutant_and_exit() {
  std::mt19937 rng(99);
  const Problem problem({"mutant", 256, 1, random_documents(256, 200, rng), 100, 0.12f, true}, 99);
  const Result result = run_kernels(problem);
  const bool correct = matches_reference(problem, result, reference(problem)) &&
                       llmc::test::bitwise_equal(result.raw_gradients[0], result.raw_gradients[1]);
  std::fprintf(stderr, correct ? "mutant not caught: results match the reference\n"
                               : "mutant caught: results differ from the reference\n");
  std::_Exit(correct ? 0 : 3);
}

bool caught(int status) {
  return (WIFEXITED(status) && WEXITSTATUS(status) == 3) || (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

TEST(AttentionMutant, IsCaughtByTheEmulatedTest) {
  if (!LLMC_IS_EMULATION) GTEST_SKIP() << "emulation-only: a mutant's behaviour on a GPU is undefined";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(run_mutant_and_exit(), caught, "mutant caught|llmc emu: error in kernel");
}

}  // namespace
#endif  // !LLMC_FP32
