// Tests of the tensor-core device functions (llmc/cuda/mma.cuh), run by both targets: fragments built
// by the documented layout and by ldmatrix must give the plain matrix product. With small-integer
// inputs every partial sum is exact in fp32, so the comparison is bitwise; with general bf16
// inputs it is bounded by fp32 accumulation error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/mma.cuh"
#include "test/support/device_buffer.h"

namespace {

using llmc::test::DeviceBuffer;

__device__ uint32_t pack_bf16_pair(__nv_bfloat16 low, __nv_bfloat16 high) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(low)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(high)) << 16);
}

// One warp: A 16x16 row-major, B 16x8 (K x N, row-major), C and D 16x8 row-major.
// Fragments gathered element by element following the layout table in mma.cuh.
__global__ void mma_by_layout_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, const float* C, float* D) {
  const int lane = threadIdx.x, group = lane / 4, pair = lane % 4;
  uint32_t a[4], b[2];
  float c[4], d[4];
  a[0] = pack_bf16_pair(A[group * 16 + 2 * pair], A[group * 16 + 2 * pair + 1]);
  a[1] = pack_bf16_pair(A[(group + 8) * 16 + 2 * pair], A[(group + 8) * 16 + 2 * pair + 1]);
  a[2] = pack_bf16_pair(A[group * 16 + 2 * pair + 8], A[group * 16 + 2 * pair + 9]);
  a[3] = pack_bf16_pair(A[(group + 8) * 16 + 2 * pair + 8], A[(group + 8) * 16 + 2 * pair + 9]);
  b[0] = pack_bf16_pair(B[(2 * pair) * 8 + group], B[(2 * pair + 1) * 8 + group]);
  b[1] = pack_bf16_pair(B[(2 * pair + 8) * 8 + group], B[(2 * pair + 9) * 8 + group]);
  c[0] = C[group * 8 + 2 * pair];
  c[1] = C[group * 8 + 2 * pair + 1];
  c[2] = C[(group + 8) * 8 + 2 * pair];
  c[3] = C[(group + 8) * 8 + 2 * pair + 1];
  llmc::mma_m16n8k16_bf16(d, a, b, c);
  D[group * 8 + 2 * pair] = d[0];
  D[group * 8 + 2 * pair + 1] = d[1];
  D[(group + 8) * 8 + 2 * pair] = d[2];
  D[(group + 8) * 8 + 2 * pair + 1] = d[3];
}

// One warp: A 16x16 and B 16x16 (K x N) staged in shared memory, loaded with ldmatrix (B with
// .trans); two MMAs give D = A * B, 16x16.
__global__ void mma_by_ldmatrix_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D) {
  __shared__ __align__(16) __nv_bfloat16 a_tile[16][16];
  __shared__ __align__(16) __nv_bfloat16 b_tile[16][16];
  const int lane = threadIdx.x, group = lane / 4, pair = lane % 4;
  for (int i = lane; i < 256; i += 32) {
    a_tile[i / 16][i % 16] = A[i];
    b_tile[i / 16][i % 16] = B[i];
  }
  __syncwarp();
  uint32_t a[4], b[4];
  llmc::ldmatrix_x4(a, &a_tile[lane % 16][(lane / 16) * 8]);
  llmc::ldmatrix_x4_trans(b, &b_tile[lane % 16][(lane / 16) * 8]);
  for (int n_tile = 0; n_tile < 2; ++n_tile) {
    const uint32_t b_tile_fragment[2] = {b[2 * n_tile], b[2 * n_tile + 1]};
    const float zero[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    float d[4];
    llmc::mma_m16n8k16_bf16(d, a, b_tile_fragment, zero);
    const int column = n_tile * 8 + 2 * pair;
    D[group * 16 + column] = d[0];
    D[group * 16 + column + 1] = d[1];
    D[(group + 8) * 16 + column] = d[2];
    D[(group + 8) * 16 + column + 1] = d[3];
  }
}

std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& values) {
  std::vector<__nv_bfloat16> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = __float2bfloat16(values[i]);
  return out;
}

TEST(Mma, LayoutGivesTheMatrixProductBitwiseOnExactInputs) {
  std::mt19937 random(7);
  std::vector<float> A(256), B(128), C(128);
  for (float& v : A) v = static_cast<float>(static_cast<int>(random() % 9) - 4);
  for (float& v : B) v = static_cast<float>(static_cast<int>(random() % 9) - 4) * 0.5f;
  for (float& v : C) v = static_cast<float>(static_cast<int>(random() % 17) - 8);
  DeviceBuffer<__nv_bfloat16> d_A(to_bf16(A)), d_B(to_bf16(B));
  DeviceBuffer<float> d_C(C), d_D(128);
  LLMC_LAUNCH(mma_by_layout_kernel, 1, 32, 0, nullptr, d_A.get(), d_B.get(), d_C.get(), d_D.get());
  const std::vector<float> D = d_D.download_raw();
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      float expected = C[i * 8 + j];  // fp32, in k order: exact here, so any order agrees
      for (int k = 0; k < 16; ++k) expected += A[i * 16 + k] * B[k * 8 + j];
      EXPECT_EQ(D[i * 8 + j], expected) << "D[" << i << "][" << j << "]";
    }
  }
}

TEST(Mma, LdmatrixFragmentsGiveTheMatrixProduct) {
  std::mt19937 random(11);
  std::vector<float> A(256), B(256);
  for (float& v : A) v = static_cast<float>(static_cast<int>(random() % 7) - 3);
  for (float& v : B) v = static_cast<float>(static_cast<int>(random() % 7) - 3) * 0.25f;
  DeviceBuffer<__nv_bfloat16> d_A(to_bf16(A)), d_B(to_bf16(B));
  DeviceBuffer<float> d_D(256);
  LLMC_LAUNCH(mma_by_ldmatrix_kernel, 1, 32, 0, nullptr, d_A.get(), d_B.get(), d_D.get());
  const std::vector<float> D = d_D.download_raw();
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      float expected = 0.0f;
      for (int k = 0; k < 16; ++k) expected += A[i * 16 + k] * B[k * 16 + j];
      EXPECT_EQ(D[i * 16 + j], expected) << "D[" << i << "][" << j << "]";
    }
  }
}

TEST(Mma, GeneralBf16InputsWithinFp32AccumulationError) {
  std::mt19937 random(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> A(256), B(128), C(128);
  for (float& v : A) v = __bfloat162float(__float2bfloat16(normal(random)));
  for (float& v : B) v = __bfloat162float(__float2bfloat16(normal(random)));
  for (float& v : C) v = normal(random);
  DeviceBuffer<__nv_bfloat16> d_A(to_bf16(A)), d_B(to_bf16(B));
  DeviceBuffer<float> d_C(C), d_D(128);
  LLMC_LAUNCH(mma_by_layout_kernel, 1, 32, 0, nullptr, d_A.get(), d_B.get(), d_C.get(), d_D.get());
  const std::vector<float> D = d_D.download_raw();
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 8; ++j) {
      double exact = C[i * 8 + j], magnitude = std::fabs(C[i * 8 + j]);
      for (int k = 0; k < 16; ++k) {
        exact += static_cast<double>(A[i * 16 + k]) * B[k * 8 + j];
        magnitude += std::fabs(static_cast<double>(A[i * 16 + k]) * B[k * 8 + j]);
      }
      // 17 terms accumulated in fp32: at most ~17 roundings of 2^-24 relative to the magnitude.
      EXPECT_NEAR(D[i * 8 + j], exact, 17 * std::ldexp(1.0, -24) * magnitude + 1e-30);
    }
  }
}

}  // namespace
