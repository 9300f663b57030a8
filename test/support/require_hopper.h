// LLMC_REQUIRE_HOPPER(): skips a test, visibly, unless a Hopper GPU (compute capability 9.x, what the wgmma kernels
// need; the emulated device is one) is there.
#pragma once

#include "llmc/family/fused_gemms.h"
#include "test/support/gpu_test.h"

#define LLMC_REQUIRE_HOPPER()                                                                               \
  do {                                                                                                     \
    LLMC_REQUIRE_GPU();                                                                                    \
    if (llmc::current_device_major() != 9) GTEST_SKIP() << "skipped: wgmma needs a Hopper GPU (sm_90a)"; \
  } while (0)
