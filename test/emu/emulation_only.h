// The guard of the emulation's tests of undefined behaviour (races, faults, misuse): on a GPU such a kernel's
// outcome is undefined, so the test skips there; emulated, its death tests run thread-safe (the emulation's
// stream workers are threads).
#pragma once

#include <gtest/gtest.h>

#include "test/support/gpu_test.h"

#define SKIP_UNLESS_EMULATION()                                                             \
  do {                                                                                      \
    if (!LLMC_IS_EMULATION) GTEST_SKIP() << "emulation-only: undefined behaviour on a GPU"; \
    GTEST_FLAG_SET(death_test_style, "threadsafe");                                         \
  } while (0)
