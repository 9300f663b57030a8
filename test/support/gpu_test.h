// The GPU-test helper of both targets: whether a GPU (or the emulated device) is usable,
// LLMC_REQUIRE_GPU() for a test that must be skipped, visibly, without one, and the GoogleTest
// environment that skips a whole binary without one (used by every GPU test main).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>

namespace llmc::test {

// True when a CUDA device can be used (always true in the emulated build).
inline bool gpu_available() {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();  // a missing driver is an answer here, not an error to keep
  return code == cudaSuccess && count > 0;
}

// Without a usable GPU, GoogleTest runs none of the tests but still counts them as passed; the
// printed line makes CTest (whose gtest_discover_tests matches "[  SKIPPED ]") and readers see them
// as skipped.
class RequireGpuEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    if (gpu_available()) return;
    std::printf("[  SKIPPED ] every test of this binary: skipped: no GPU\n");
    std::fflush(stdout);
    GTEST_SKIP() << "skipped: no GPU";
  }
};

}  // namespace llmc::test

#define LLMC_REQUIRE_GPU()                                                 \
  do {                                                                     \
    if (!::llmc::test::gpu_available()) GTEST_SKIP() << "skipped: no GPU"; \
  } while (0)

// True in the emulated build: for the few tests of emulation-only behaviour (e.g. detecting a
// divergent barrier, which is undefined behaviour on a GPU).
#if defined(LLMC_EMULATION)
#define LLMC_IS_EMULATION 1
#else
#define LLMC_IS_EMULATION 0
#endif

// Tests that run a kernel with a deliberate race to show what the emulation's schedules make of it:
// the ThreadSanitizer build reports the race itself (test/emu/test_races.cu), so they skip there.
#if defined(__SANITIZE_THREAD__)
#define LLMC_SKIP_PLANTED_RACE_UNDER_TSAN() \
  GTEST_SKIP() << "runs a planted race, which this ThreadSanitizer build reports (see test_races.cu)"
#else
#define LLMC_SKIP_PLANTED_RACE_UNDER_TSAN() static_cast<void>(0)
#endif
