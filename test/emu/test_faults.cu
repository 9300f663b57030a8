// Faults a GPU raises, raised by the emulation too: kernel pointer arguments into pageable host memory,
// shared memory (static + dynamic) over the limits, launches over __launch_bounds__, misaligned vector
// accesses of any type, ldmatrix on a non-shared address or with lanes disagreeing on .trans, warp
// operations whose lanes disagree. Emulation-only (on a GPU these are faults or undefined behaviour).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/mma.cuh"
#include "test/support/device_buffer.h"
#include "test/emu/emulation_only.h"
#include "test/support/gpu_test.h"

namespace {

using llmc::test::DeviceBuffer;

__global__ void copy_kernel(const int* in, int* out) { out[threadIdx.x] = in[threadIdx.x]; }
__global__ void length_kernel(const int* begin, const int* end, int* out) { *out = static_cast<int>(end - begin); }

TEST(Faults, PageableHostPointerArgumentIsRejectedAtLaunch) {
  SKIP_UNLESS_EMULATION();
  std::vector<int> host(32, 1);
  DeviceBuffer<int> out(32);
  try {
    LLMC_LAUNCH(copy_kernel, 1, 32, 0, nullptr, host.data(), out.get());
    FAIL() << "the launch was accepted";
  } catch (const llmc::CudaError& error) {
    EXPECT_EQ(error.code(), cudaErrorInvalidValue);
    EXPECT_NE(std::string(error.what()).find("pageable host memory"), std::string::npos) << error.what();
  }
  // Pinned host memory, device memory, null and one-past-the-end pointers are fine.
  int* pinned = nullptr;
  CUDA_CHECK(cudaMallocHost(&pinned, 32 * sizeof(int)));
  for (int i = 0; i < 32; ++i) pinned[i] = i;
  LLMC_LAUNCH(copy_kernel, 1, 32, 0, nullptr, pinned, out.get());
  LLMC_LAUNCH(length_kernel, 1, 1, 0, nullptr, static_cast<const int*>(nullptr), out.get() + 32, out.get());
  CUDA_CHECK(cudaDeviceSynchronize());
  CUDA_CHECK(cudaFreeHost(pinned));
}

#if defined(LLMC_EMULATION)
// 49 KiB of static shared memory: more than a kernel may declare (nvcc rejects it at compile time).
__global__ void too_much_static_shared_kernel(int* out) {
  __shared__ char buffer[49 * 1024];
  buffer[threadIdx.x] = 1;
  __syncthreads();
  out[threadIdx.x] = buffer[(threadIdx.x + 1) % 32];
}
#endif

// 40 KiB static: with 16 KiB of dynamic shared memory the block needs more than 48 KiB.
__global__ void static_plus_dynamic_kernel(int* out) {
  __shared__ int tile[10 * 1024];
  LLMC_DYNAMIC_SHARED(int, extra);
  tile[threadIdx.x] = static_cast<int>(threadIdx.x);
  extra[threadIdx.x] = 1;
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % 32] + extra[threadIdx.x];
}

cudaError_t launch_code(void (*launch)()) {
  try {
    launch();
    return cudaSuccess;
  } catch (const llmc::CudaError& error) {
    return error.code();
  }
}

TEST(Faults, StaticPlusDynamicSharedMemoryIsCheckedAgainstTheLimits) {
  SKIP_UNLESS_EMULATION();
  static DeviceBuffer<int> out(32);
#if defined(LLMC_EMULATION)
  EXPECT_EQ(launch_code([] { LLMC_LAUNCH(too_much_static_shared_kernel, 1, 32, 0, nullptr, out.get()); }),
            cudaErrorInvalidValue);
#endif
  EXPECT_EQ(launch_code([] { LLMC_LAUNCH(static_plus_dynamic_kernel, 1, 32, 8 * 1024, nullptr, out.get()); }),
            cudaSuccess);  // 48 KiB in all
  EXPECT_EQ(launch_code([] { LLMC_LAUNCH(static_plus_dynamic_kernel, 1, 32, 16 * 1024, nullptr, out.get()); }),
            cudaErrorInvalidValue);
  // The opt-in counts the static part too: 40 KiB + 188 KiB > 227 KiB.
  EXPECT_EQ(cudaFuncSetAttribute(static_plus_dynamic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 188 * 1024),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CUDA_CHECK(cudaFuncSetAttribute(static_plus_dynamic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 187 * 1024));
  EXPECT_EQ(launch_code([] { LLMC_LAUNCH(static_plus_dynamic_kernel, 1, 32, 16 * 1024, nullptr, out.get()); }),
            cudaSuccess);
  CUDA_CHECK(cudaDeviceSynchronize());
}

__global__ void __launch_bounds__(64) bounded_kernel(int* out) { out[threadIdx.x] = 1; }

TEST(Faults, LaunchBoundsAreRecordedAndChecked) {
  SKIP_UNLESS_EMULATION();
  static DeviceBuffer<int> out(128);
  EXPECT_EQ(launch_code([] { LLMC_LAUNCH(bounded_kernel, 1, 64, 0, nullptr, out.get()); }), cudaSuccess);
  EXPECT_EQ(launch_code([] { LLMC_LAUNCH(bounded_kernel, 1, 128, 0, nullptr, out.get()); }),
            cudaErrorLaunchOutOfResources);
  CUDA_CHECK(cudaDeviceSynchronize());
}

// A float4 load 4 bytes past a 16-byte boundary: every misaligned typed access stops the program.
__global__ void misaligned_float4_kernel(const float* in, float* out) {
  const float4 value = *reinterpret_cast<const float4*>(in + 1);
  out[threadIdx.x] = value.x;
}

TEST(Faults, MisalignedFloat4LoadIsReported) {
  SKIP_UNLESS_EMULATION();
  EXPECT_DEATH(
      {
        DeviceBuffer<float> in(64);
        DeviceBuffer<float> out(32);
        LLMC_LAUNCH(misaligned_float4_kernel, 1, 32, 0, nullptr, in.get(), out.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "misaligned address .* for type 'const struct float4', which requires 16 byte alignment");
}

__global__ void ldmatrix_from_global_kernel(const uint16_t* matrix, uint32_t* out) {
  uint32_t r[4];
  llmc::ldmatrix_x4(r, matrix + (threadIdx.x % 16) * 16 + (threadIdx.x / 16) * 8);
  out[threadIdx.x] = r[0];
}

__global__ void ldmatrix_mixed_trans_kernel(uint32_t* out) {
  __shared__ __align__(16) uint16_t tile[16 * 16];
  for (int i = threadIdx.x; i < 256; i += 32) tile[i] = static_cast<uint16_t>(i);
  __syncthreads();
  uint32_t r[4];
  const uint16_t* row = tile + (threadIdx.x % 16) * 16 + (threadIdx.x / 16) * 8;
  if (threadIdx.x < 16) {
    llmc::ldmatrix_x4(r, row);
  } else {
    llmc::ldmatrix_x4_trans(r, row);
  }
  out[threadIdx.x] = r[0];
}

TEST(Faults, LdmatrixNeedsASharedAddress) {
  SKIP_UNLESS_EMULATION();
  EXPECT_DEATH(
      {
        DeviceBuffer<uint16_t> matrix(256);
        DeviceBuffer<uint32_t> out(32);
        LLMC_LAUNCH(ldmatrix_from_global_kernel, 1, 32, 0, nullptr, matrix.get(), out.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "ldmatrix_from_global_kernel.*ldmatrix_x4: row address of lane [0-9]+ is not in the block's shared memory");
}

TEST(Faults, LdmatrixLanesMustAgreeOnTranspose) {
  SKIP_UNLESS_EMULATION();
  EXPECT_DEATH(
      {
        DeviceBuffer<uint32_t> out(32);
        LLMC_LAUNCH(ldmatrix_mixed_trans_kernel, 1, 32, 0, nullptr, out.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "ldmatrix_mixed_trans_kernel.*wait at different warp operations.*ldmatrix_x4 .*ldmatrix_x4_trans");
}

// Half the warp shuffles down, the other half xor: the lanes of one collective disagree.
__global__ void mixed_shuffles_kernel(int* out) {
  int value = static_cast<int>(threadIdx.x);
  if (threadIdx.x < 16) {
    value = __shfl_down_sync(0xffffffffu, value, 1);
  } else {
    value = __shfl_xor_sync(0xffffffffu, value, 1);
  }
  out[threadIdx.x] = value;
}

TEST(Faults, WarpLanesAtDifferentCollectivesAreReported) {
  SKIP_UNLESS_EMULATION();
  EXPECT_DEATH(
      {
        DeviceBuffer<int> out(32);
        LLMC_LAUNCH(mixed_shuffles_kernel, 1, 32, 0, nullptr, out.get());
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "mixed_shuffles_kernel.*wait at different warp operations");
}

}  // namespace
