// Tests of the warpgroup MMA device functions (llmc/cuda/wgmma.cuh), run by both targets: a 64 x 128 x 64
// product from 128-byte-swizzled shared tiles must be the plain matrix product (bitwise with small
// integers, within fp32 accumulation error otherwise), an e4m3 one the FP8 accumulator's sum; emulated, the
// misuses a GPU leaves undefined (no fence, no wait, a partial warpgroup, unaligned or unmodelled tiles) must fail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/wgmma.cuh"
#include "llmc/emu/cpu_fp8_gemm.h"
#include "test/emu/emulation_only.h"
#include "test/kernels/fp8_test_support.h"
#include "test/support/device_buffer.h"

namespace {

using llmc::test::DeviceBuffer;

constexpr int kM = 64, kN = 128, kK = 64;
constexpr int kTileA = kM * llmc::kSwizzle128RowBytes, kTileB = kN * llmc::kSwizzle128RowBytes;
// The alignment pad, A, a 1024-byte gap (where the unaligned-tile misuse's shifted A ends, so that it races with
// nothing), B.
constexpr int kSharedBytes = 1024 + kTileA + 1024 + kTileB;

// How the test kernel misbehaves (kNone: it follows the rules).
enum class Misuse { kNone, kNoFence, kReadBeforeWait, kOverwriteBeforeWait, kUnalignedTile, kNoWait };

// A [64 x 64] row-major and B [128 x 64] row-major (K-major) or, with kBNMajor, stored as B^T [64 x 128]
// row-major (N-major), staged by ordinary stores into swizzled tiles; D [64 x 128] = A B^T row-major fp32.
// The N-major tile holds two 64-column halves 8192 bytes apart, each 8 groups of 8 k-rows.
template <bool kBNMajor>
__global__ void wgmma_product_kernel(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D, Misuse misuse) {
  LLMC_DYNAMIC_SHARED(unsigned char, shared);
  const uint32_t pad = (1024 - llmc::shared_space_address(shared) % 1024) % 1024;
  unsigned char* tile_a = shared + pad + (misuse == Misuse::kUnalignedTile ? 128 : 0);
  unsigned char* tile_b = shared + pad + kTileA + 1024;
  const int thread = threadIdx.x;
  for (int chunk = thread; chunk < kM * 8; chunk += blockDim.x) {
    const int row = chunk / 8, column = chunk % 8;
    *reinterpret_cast<uint4*>(tile_a + llmc::swizzle128_offset(row, column)) =
        *reinterpret_cast<const uint4*>(A + row * kK + column * 8);
  }
  for (int chunk = thread; chunk < kN * 8; chunk += blockDim.x) {
    if (kBNMajor) {  // k-row chunk / 16, 16-byte chunk chunk % 16 of its 128 columns
      const int k = chunk / 16, column = chunk % 16;
      *reinterpret_cast<uint4*>(tile_b + (column / 8) * 8192 + llmc::swizzle128_offset(k, column % 8)) =
          *reinterpret_cast<const uint4*>(B + k * kN + column * 8);
    } else {
      const int row = chunk / 8, column = chunk % 8;
      *reinterpret_cast<uint4*>(tile_b + llmc::swizzle128_offset(row, column)) =
          *reinterpret_cast<const uint4*>(B + row * kK + column * 8);
    }
  }
  llmc::fence_proxy_async_shared();
  __syncthreads();
  llmc::WarpgroupMma mma;
  float d[64];
  for (float& value : d) value = -1.0f;
  if (misuse != Misuse::kNoFence) mma.fence();
  for (int k = 0; k < kK / 16; ++k) {
    const uint64_t b = kBNMajor ? llmc::swizzle128_mn_descriptor(tile_b + 2048 * k, 8192, 1024)
                                : llmc::swizzle128_descriptor(tile_b, 32 * k);
    mma.mma_m64n128k16<kBNMajor>(d, llmc::swizzle128_descriptor(tile_a, 32 * k), b, k > 0);
  }
  mma.commit();
  float seen[64];
  for (int i = 0; i < 64; ++i) seen[i] = d[i];
  if (misuse == Misuse::kOverwriteBeforeWait && thread == 0) tile_a[0] ^= 0x40;  // flips a bit of A[0][0]
  if (misuse == Misuse::kNoWait) return;
  mma.wait<0>();
  if (misuse != Misuse::kReadBeforeWait) {
    for (int i = 0; i < 64; ++i) seen[i] = d[i];
  }
  const int warp = thread / 32, group = (thread % 32) / 4, pair = thread % 4;
  for (int i = 0; i < kN / 8; ++i) {
    for (int v = 0; v < 4; ++v) {
      const int row = 16 * warp + group + (v >= 2 ? 8 : 0), column = 8 * i + 2 * pair + v % 2;
      D[row * kN + column] = seen[4 * i + v];
    }
  }
}

// b is B [128 x 64] row-major; with b_n_major the kernel gets it stored transposed.
std::vector<float> run_product(const std::vector<float>& a, const std::vector<float>& b, Misuse misuse,
                               int threads = 128, bool b_n_major = false) {
  std::vector<__nv_bfloat16> a16(a.size()), b16(b.size());
  for (size_t i = 0; i < a.size(); ++i) a16[i] = __float2bfloat16(a[i]);
  for (int n = 0; n < kN; ++n) {
    for (int k = 0; k < kK; ++k) b16[b_n_major ? k * kN + n : n * kK + k] = __float2bfloat16(b[n * kK + k]);
  }
  DeviceBuffer<__nv_bfloat16> A(a16), B(b16);
  DeviceBuffer<float> D(kM * kN);
  const auto kernel = b_n_major ? wgmma_product_kernel<true> : wgmma_product_kernel<false>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
  LLMC_LAUNCH(kernel, 1, threads, kSharedBytes, nullptr, A.get(), B.get(), D.get(), misuse);
  CUDA_CHECK(cudaDeviceSynchronize());
  return D.download_raw();
}

// The product in double from the bf16-rounded inputs.
std::vector<double> reference_product(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> d(kM * kN, 0.0);
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < kN; ++n) {
      double sum = 0.0;
      for (int k = 0; k < kK; ++k) {
        sum += static_cast<double>(__bfloat162float(__float2bfloat16(a[m * kK + k]))) *
               __bfloat162float(__float2bfloat16(b[n * kK + k]));
      }
      d[m * kN + n] = sum;
    }
  }
  return d;
}

std::vector<float> small_integers(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> value(-8, 8);
  std::vector<float> out(count);
  for (float& x : out) x = static_cast<float>(value(rng));
  return out;
}

TEST(Wgmma, SmallIntegerProductIsExact) {
  const auto a = small_integers(kM * kK, 1), b = small_integers(kN * kK, 2);
  const auto expected = reference_product(a, b);
  for (bool b_n_major : {false, true}) {
    const auto d = run_product(a, b, Misuse::kNone, 128, b_n_major);
    for (int i = 0; i < kM * kN; ++i) ASSERT_EQ(d[i], static_cast<float>(expected[i])) << "element " << i;
  }
}

// Each fp32 accumulation step rounds by at most 2^-24 of the running magnitude, which is bounded by the sum
// of |products|: over 64 terms the error is below 64 * 2^-24 * sum |a b|, plus the final rounding.
TEST(Wgmma, GeneralProductIsWithinFp32AccumulationError) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> a(kM * kK), b(kN * kK);
  for (float& x : a) x = normal(rng);
  for (float& x : b) x = normal(rng);
  const auto expected = reference_product(a, b);
  for (bool b_n_major : {false, true}) {
  const auto d = run_product(a, b, Misuse::kNone, 128, b_n_major);
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < kN; ++n) {
      double magnitude = 0.0;
      for (int k = 0; k < kK; ++k) {
        magnitude += std::fabs(static_cast<double>(__bfloat162float(__float2bfloat16(a[m * kK + k]))) *
                               __bfloat162float(__float2bfloat16(b[n * kK + k])));
      }
      const double bound = (kK + 1) * std::ldexp(magnitude, -24);
      ASSERT_LE(std::fabs(d[m * kN + n] - expected[m * kN + n]), bound) << "m " << m << " n " << n;
    }
  }
  }
}

// Emulated, the accumulators are written at the wait: read before it they still hold the kernel's -1s.
TEST(Wgmma, AccumulatorsReadBeforeTheWaitAreStale) {
  SKIP_UNLESS_EMULATION();
  const auto a = small_integers(kM * kK, 4), b = small_integers(kN * kK, 5);
  const auto d = run_product(a, b, Misuse::kReadBeforeWait);
  for (float value : d) ASSERT_EQ(value, -1.0f);
}

// Emulated, the product reads shared memory at the wait: a tile changed before it changes the product. Thread
// 0 flips a bit of A[0][0] before its own wait, so its own fragment (row 0, columns 8i and 8i + 1) changes
// wherever B[n][0] is not zero; other lanes may have waited already (a race, as on a GPU), so elsewhere in
// row 0 it may or may not, and no other row changes.
TEST(Wgmma, TileOverwrittenBeforeTheWaitChangesTheProduct) {
  SKIP_UNLESS_EMULATION();
  LLMC_SKIP_PLANTED_RACE_UNDER_TSAN();
  const auto a = small_integers(kM * kK, 6), b = small_integers(kN * kK, 7);
  const auto expected = reference_product(a, b);
  const auto d = run_product(a, b, Misuse::kOverwriteBeforeWait);
  int thread0_changes = 0;
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < kN; ++n) {
      const bool differs = d[m * kN + n] != static_cast<float>(expected[m * kN + n]);
      const bool thread0 = m == 0 && n % 8 < 2;
      if (thread0 && b[n * kK] != 0.0f) {
        EXPECT_TRUE(differs) << "n " << n;
        thread0_changes += differs;
      }
      if (m > 0 || b[n * kK] == 0.0f) {
        EXPECT_FALSE(differs) << "m " << m << " n " << n;
      }
    }
  }
  EXPECT_GT(thread0_changes, 0);
}

// A [64 x 128] and B [128 x 128] e4m3 codes, row-major (K-major), staged into swizzled tiles of 128-byte rows;
// D [64 x 128] = A B^T by four m64n128k32 products accumulating, fp32.
__global__ void wgmma_e4m3_product_kernel(const uint8_t* A, const uint8_t* B, float* D) {
  LLMC_DYNAMIC_SHARED(unsigned char, shared);
  const uint32_t pad = (1024 - llmc::shared_space_address(shared) % 1024) % 1024;
  unsigned char* tile_a = shared + pad;
  unsigned char* tile_b = shared + pad + kTileA + 1024;
  const int thread = threadIdx.x;
  for (int chunk = thread; chunk < kM * 8; chunk += blockDim.x)
    *reinterpret_cast<uint4*>(tile_a + llmc::swizzle128_offset(chunk / 8, chunk % 8)) =
        *reinterpret_cast<const uint4*>(A + chunk * 16);
  for (int chunk = thread; chunk < kN * 8; chunk += blockDim.x)
    *reinterpret_cast<uint4*>(tile_b + llmc::swizzle128_offset(chunk / 8, chunk % 8)) =
        *reinterpret_cast<const uint4*>(B + chunk * 16);
  llmc::fence_proxy_async_shared();
  __syncthreads();
  llmc::WarpgroupMma mma;
  float d[64];
  mma.fence();
  for (int s = 0; s < 4; ++s)
    mma.mma_m64n128k32_e4m3(d, llmc::swizzle128_descriptor(tile_a, 32 * s), llmc::swizzle128_descriptor(tile_b, 32 * s),
                            s > 0);
  mma.commit();
  mma.wait<0>();
  const int warp = thread / 32, group = (thread % 32) / 4, pair = thread % 4;
  for (int i = 0; i < kN / 8; ++i)
    for (int v = 0; v < 4; ++v)
      D[(16 * warp + group + (v >= 2 ? 8 : 0)) * kN + 8 * i + 2 * pair + v % 2] = d[4 * i + v];
}

// The e4m3 product: within the FP8 accumulator's bound of the double product (a K = 128 sum kept in the tensor
// core's accumulator throughout) on either target; emulated, exactly the accumulator model's four steps, which
// checks the descriptors, the 1-byte elements, the decoding and the fragment layout of the e4m3 form.
TEST(Wgmma, E4m3ProductIsTheFp8AccumulatorsSum) {
  constexpr int kK8 = 128;
  std::mt19937 rng(10);
  const auto e4m3 = llmc::emu::Fp8Format::kE4M3;
  const llmc::test::Fp8Matrix a = llmc::test::random_fp8_matrix(kM * kK8, e4m3, 40.0, rng);
  const llmc::test::Fp8Matrix b = llmc::test::random_fp8_matrix(kN * kK8, e4m3, 40.0, rng);
  DeviceBuffer<uint8_t> A(a.codes), B(b.codes);
  DeviceBuffer<float> D(kM * kN);
  CUDA_CHECK(cudaFuncSetAttribute(wgmma_e4m3_product_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  kSharedBytes));
  LLMC_LAUNCH(wgmma_e4m3_product_kernel, 1, 128, kSharedBytes, nullptr, A.get(), B.get(), D.get());
  CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> d = D.download_raw();
  for (int m = 0; m < kM; ++m) {
    for (int n = 0; n < kN; ++n) {
      const double* a_row = a.values.data() + m * kK8;
      const double* b_row = b.values.data() + n * kK8;
      const llmc::test::DotWithBound dot = llmc::test::fp8_dot_with_bound(a_row, b_row, kK8, true);
      ASSERT_LE(std::fabs(d[m * kN + n] - dot.exact), dot.bound) << "m " << m << " n " << n;
#if defined(LLMC_EMULATION)
      float partial = 0.0f, products[llmc::emu::kFp8MmaDepth];
      for (int k0 = 0; k0 < kK8; k0 += llmc::emu::kFp8MmaDepth) {
        for (int k = 0; k < llmc::emu::kFp8MmaDepth; ++k)
          products[k] = static_cast<float>(a_row[k0 + k] * b_row[k0 + k]);
        partial = llmc::emu::fp8_mma_step(partial, products, llmc::emu::kFp8MmaDepth);
      }
      ASSERT_EQ(d[m * kN + n], partial) << "m " << m << " n " << n;
#endif
    }
  }
}

TEST(Wgmma, MisusesFail) {
  SKIP_UNLESS_EMULATION();
  const auto a = small_integers(kM * kK, 8), b = small_integers(kN * kK, 9);
  EXPECT_DEATH(run_product(a, b, Misuse::kNoFence), "issued without a wgmma.fence");
  EXPECT_DEATH(run_product(a, b, Misuse::kNoWait), "never covered by a wgmma.wait_group");
  EXPECT_DEATH(run_product(a, b, Misuse::kUnalignedTile), "row groups must start 1024-byte aligned");
  EXPECT_DEATH(run_product(a, b, Misuse::kNone, 64), "warpgroup the block of 64 threads does not complete");
}

}  // namespace
