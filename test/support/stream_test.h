// The fixture of device tests that need a stream of their own: skipped, visibly, without a GPU; the
// stream is created before each test and destroyed after it.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "llmc/cuda/cuda_common.h"
#include "test/support/gpu_test.h"

namespace llmc::test {

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LLMC_REQUIRE_GPU();
    CUDA_CHECK(cudaStreamCreate(&stream));
  }
  void TearDown() override {
    if (stream) CUDA_CHECK(cudaStreamDestroy(stream));
  }
  cudaStream_t stream = nullptr;
};

}  // namespace llmc::test
