// Helpers for GoogleTest tests built for both targets: whether a GPU (or the emulated device) is
// usable, and LLMC_REQUIRE_GPU() for tests that must be skipped, visibly, without one.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace llmc {

// True when a CUDA device can be used (always true in the emulated build).
inline bool gpu_available() {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();  // a missing driver is an answer here, not an error to keep
  return code == cudaSuccess && count > 0;
}

}  // namespace llmc

#define LLMC_REQUIRE_GPU()                                         \
  do {                                                             \
    if (!::llmc::gpu_available()) GTEST_SKIP() << "skipped: no GPU"; \
  } while (0)

// True in the emulated build: for the few tests of emulation-only behaviour (e.g. detecting a
// divergent barrier, which is undefined behaviour on a GPU).
#if defined(LLMC_EMULATION)
#define LLMC_IS_EMULATION 1
#else
#define LLMC_IS_EMULATION 0
#endif
