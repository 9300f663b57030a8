// Tests of block-level semantics, run by both targets: reductions through shared memory and
// barriers, static and dynamic shared memory, thread/block indexing, atomics under contention.
// Expected values come from plain host loops over the same inputs (exact integer or
// order-matched float arithmetic).
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "test/support/device_buffer.h"

namespace {

using llmc::test::DeviceBuffer;

// Tree reduction in shared memory with a barrier per level; one partial sum per block.
__global__ void block_sum_kernel(const int* input, int* block_sums, int n) {
  __shared__ int partial[1024];
  const int tid = threadIdx.x;
  const int index = blockIdx.x * blockDim.x + tid;
  partial[tid] = index < n ? input[index] : 0;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (tid < stride) partial[tid] += partial[tid + stride];
    __syncthreads();
  }
  if (tid == 0) block_sums[blockIdx.x] = partial[0];
}

TEST(Block, SharedMemoryTreeReductionWithBarriers) {
  for (int block : {32, 256, 1024}) {
    const int n = 3 * block + 17;  // last block partly empty
    std::vector<int> input(n);
    for (int i = 0; i < n; ++i) input[i] = (i * 37) % 101 - 50;
    const int blocks = (n + block - 1) / block;
    DeviceBuffer<int> d_input(input), d_sums(blocks);
    LLMC_LAUNCH(block_sum_kernel, blocks, block, 0, nullptr, d_input.get(), d_sums.get(), n);
    const std::vector<int> sums = d_sums.download_raw();
    for (int b = 0; b < blocks; ++b) {
      int expected = 0;
      for (int i = b * block; i < std::min(n, (b + 1) * block); ++i) expected += input[i];
      EXPECT_EQ(sums[b], expected) << "block " << b << " of size " << block;
    }
  }
}

// Every thread writes its coordinates; checks threadIdx/blockIdx/blockDim/gridDim in 3-D.
__global__ void coordinates_kernel(int4* out) {
  const int threads_per_block = blockDim.x * blockDim.y * blockDim.z;
  const int block_linear = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const int thread_linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  out[block_linear * threads_per_block + thread_linear] =
      make_int4(threadIdx.x + 100 * threadIdx.y + 10000 * threadIdx.z,
                blockIdx.x + 100 * blockIdx.y + 10000 * blockIdx.z,
                blockDim.x + 100 * blockDim.y + 10000 * blockDim.z,
                gridDim.x + 100 * gridDim.y + 10000 * gridDim.z);
}

TEST(Block, ThreeDimensionalIndexing) {
  const dim3 grid(3, 2, 2), block(4, 3, 2);
  const int total = 12 * 24;
  DeviceBuffer<int4> d_out(total);
  LLMC_LAUNCH(coordinates_kernel, grid, block, 0, nullptr, d_out.get());
  const std::vector<int4> out = d_out.download_raw();
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned tz = 0; tz < 2; ++tz)
          for (unsigned ty = 0; ty < 3; ++ty)
            for (unsigned tx = 0; tx < 4; ++tx) {
              const int index = (bx + 3 * (by + 2 * bz)) * 24 + (tx + 4 * (ty + 3 * tz));
              EXPECT_EQ(out[index].x, static_cast<int>(tx + 100 * ty + 10000 * tz));
              EXPECT_EQ(out[index].y, static_cast<int>(bx + 100 * by + 10000 * bz));
              EXPECT_EQ(out[index].z, 4 + 300 + 20000);
              EXPECT_EQ(out[index].w, 3 + 200 + 20000);
            }
}

// Dynamic shared memory: each block reverses its slice through shared memory (needs the barrier:
// a thread reads the element another thread wrote).
__global__ void reverse_kernel(const float* input, float* output) {
  LLMC_DYNAMIC_SHARED(float, staging);
  const int tid = threadIdx.x;
  const int base = blockIdx.x * blockDim.x;
  staging[tid] = input[base + tid];
  __syncthreads();
  output[base + tid] = staging[blockDim.x - 1 - tid];
}

TEST(Block, DynamicSharedMemoryReverse) {
  const int block = 512, blocks = 3, n = block * blocks;
  std::vector<float> input(n);
  for (int i = 0; i < n; ++i) input[i] = 0.5f * i;
  DeviceBuffer<float> d_in(input), d_out(n);
  LLMC_LAUNCH(reverse_kernel, blocks, block, block * sizeof(float), nullptr, d_in.get(), d_out.get());
  const std::vector<float> out = d_out.download_raw();
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < block; ++t) EXPECT_EQ(out[b * block + t], input[b * block + block - 1 - t]);
}

// More than 48 KiB of dynamic shared memory needs the opt-in, as on a GPU.
__global__ void large_shared_kernel(int* out, int words) {
  LLMC_DYNAMIC_SHARED(int, buffer);
  for (int i = threadIdx.x; i < words; i += blockDim.x) buffer[i] = i;
  __syncthreads();
  if (threadIdx.x == 0) {
    long long sum = 0;
    for (int i = 0; i < words; ++i) sum += buffer[i];
    out[0] = static_cast<int>(sum % 1000003);
  }
}

TEST(Block, DynamicSharedMemoryAbove48KiBNeedsOptIn) {
  const int words = 100 * 1024 / 4;
  const size_t bytes = words * sizeof(int);
  DeviceBuffer<int> d_out(1);
  EXPECT_THROW(LLMC_LAUNCH(large_shared_kernel, 1, 256, bytes, nullptr, d_out.get(), words),
               llmc::CudaError);
  CUDA_CHECK(cudaFuncSetAttribute(large_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(bytes)));
  LLMC_LAUNCH(large_shared_kernel, 1, 256, bytes, nullptr, d_out.get(), words);
  const long long expected = (static_cast<long long>(words) * (words - 1) / 2) % 1000003;
  EXPECT_EQ(d_out.download_raw()[0], expected);
}

TEST(Block, InvalidLaunchConfigurationNamesTheKernel) {
  DeviceBuffer<int> d_out(1);
  try {
    LLMC_LAUNCH(large_shared_kernel, 1, 2048, 0, nullptr, d_out.get(), 1);
    FAIL() << "a 2048-thread block was accepted";
  } catch (const llmc::CudaError& error) {
    EXPECT_NE(std::string(error.what()).find("large_shared_kernel"), std::string::npos) << error.what();
  }
  (void)cudaGetLastError();
}

// Atomics under contention: every thread of many blocks hits the same few counters.
__global__ void atomic_counters_kernel(int* int_counter, unsigned* unsigned_counter, float* float_sum,
                                       int* maximum, int* cas_counter) {
  const int global = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(int_counter, 1);
  atomicAdd(unsigned_counter, 3u);
  atomicAdd(float_sum, 1.0f);  // integers below 2^24: exact in any order
  atomicMax(maximum, (global * 7919) % 100003);
  // A CAS loop increment, the way generic atomics are built. The first read is atomic too: a plain read
  // racing with other threads' CAS is a data race in CUDA's memory model (the TSan build reports it).
  int observed = atomicAdd(cas_counter, 0);
  while (true) {
    const int previous = atomicCAS(cas_counter, observed, observed + 2);
    if (previous == observed) break;
    observed = previous;
  }
}

TEST(Block, AtomicsUnderContentionAreExact) {
  const int blocks = 40, block = 256, total = blocks * block;
  DeviceBuffer<int> d_int(std::vector<int>{0}), d_max(std::vector<int>{-1}), d_cas(std::vector<int>{0});
  DeviceBuffer<unsigned> d_unsigned(std::vector<unsigned>{0});
  DeviceBuffer<float> d_float(std::vector<float>{0.0f});
  LLMC_LAUNCH(atomic_counters_kernel, blocks, block, 0, nullptr, d_int.get(), d_unsigned.get(),
              d_float.get(), d_max.get(), d_cas.get());
  int expected_max = -1;
  for (int g = 0; g < total; ++g) expected_max = std::max(expected_max, (g * 7919) % 100003);
  EXPECT_EQ(d_int.download_raw()[0], total);
  EXPECT_EQ(d_unsigned.download_raw()[0], 3u * total);
  EXPECT_EQ(d_float.download_raw()[0], static_cast<float>(total));
  EXPECT_EQ(d_max.download_raw()[0], expected_max);
  EXPECT_EQ(d_cas.download_raw()[0], 2 * total);
}

}  // namespace
