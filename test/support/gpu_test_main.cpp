// GoogleTest main for the .cu test binaries of both targets. On the nvcc target with no usable GPU
// (no device, or a driver too old), every test is reported as skipped ("skipped: no GPU").
// In the emulated build the emulated device is always there.
#include <gtest/gtest.h>

#include "test/support/gpu_test.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new llmc::test::RequireGpuEnvironment());
  return RUN_ALL_TESTS();
}
