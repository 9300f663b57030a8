// The FP8 MLP's up projection on Hopper's warpgroup MMA with its elementwise work in the epilogue, so that the
// pre-activation never reaches memory (docs/fp8.md, "The epilogue, decided by bytes"): acc = x8 W8^T (e4m3 x e4m3,
// both K-major as FP8 wgmma requires), then pre = bf16((a_scale w_scale) acc), post = bf16(relu(pre)^2),
// post8 = e4m3(min(post / s_act, 448)) and max post: fp8_gemm followed by relu_squared_fp8_forward, in one kernel.
// sm_90a only; 128 x 128 output tiles, two warpgroups, k-tiles of 128 (four K = 32 MMAs) through the bf16 kernel's
// 4-stage cp.async ring (llmc/kernels/wgmma_gemm.cuh); N a multiple of 8, K of 32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "llmc/cuda/async_copies.cuh"
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/fp8.h"
#include "llmc/cuda/wgmma.cuh"
#include "llmc/kernels/fp8_mlp.cuh"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/relu_squared.cuh"
#include "llmc/kernels/wgmma_gemm.cuh"

namespace llmc {

struct WgmmaFp8ReluSquaredArgs {
  __nv_bfloat16* post = nullptr;     // (M, N) relu(pre)^2
  fp8e4m3* post8 = nullptr;          // (M, N) e4m3(min(post / s_act, 448))
  float* post_amax = nullptr;        // max post (the launch zeroes it first)
  const fp8e4m3* a = nullptr;        // (M, K) row-major
  const fp8e4m3* w = nullptr;        // (N, K) row-major
  const float* a_scale = nullptr;    // device scalars: pre = (a_scale w_scale) acc
  const float* w_scale = nullptr;
  const float* s_act = nullptr;      // device scalar: post8's scale
  int m = 0, n = 0, k = 0;
};

namespace wgmma_fp8_gemm {

using wgmma_gemm::kHalfBBytes;
using wgmma_gemm::kLoadAhead;
using wgmma_gemm::kSharedBytes;
using wgmma_gemm::kStageBytes;
using wgmma_gemm::kStages;
using wgmma_gemm::kThreads;
using wgmma_gemm::kTileABytes;
using wgmma_gemm::kTileM;
using wgmma_gemm::kTileN;
// A k-tile is one 128-byte swizzled row of e4m3 values: four MMAs, and the accumulator's promotion interval
// (llmc/emu/cpu_fp8_gemm.h's kFp8PromotionDepth, cuBLASLt without fast accumulation).
inline constexpr int kTileK = 128, kMmaK = 32;
static_assert(kTileABytes == kTileM * kTileK && 2 * kHalfBBytes == kTileN * kTileK, "a k-tile row is 128 bytes");

inline bool shape_fits(int m, int n, int k) { return m > 0 && n > 0 && k > 0 && n % 8 == 0 && k % kMmaK == 0; }

// Stage `slot` <- k-tile `k_tile`: A's rows m0.. and W's rows n0.. as K-major swizzled rows of 128 bytes, zeros
// past M, N and K (16-byte chunks: K is a multiple of 16, so a chunk lies wholly inside or outside).
__device__ inline void load_stage(AsyncCopies& copies, unsigned char* stage, const WgmmaFp8ReluSquaredArgs& g,
                                  int m0, int n0, int k_tile) {
  const int k0 = k_tile * kTileK;
  const auto* a = reinterpret_cast<const unsigned char*>(g.a);
  const auto* w = reinterpret_cast<const unsigned char*>(g.w);
  for (int chunk = threadIdx.x; chunk < kTileM * 8; chunk += kThreads) {
    const int row = chunk / 8, column = chunk % 8, m = m0 + row;
    const bool inside = m < g.m && k0 + column * 16 < g.k;
    copies.copy16_or_zero(stage + swizzle128_offset(row, column),
                          a + (inside ? static_cast<size_t>(m) * g.k + k0 + column * 16 : 0), inside);
  }
  for (int chunk = threadIdx.x; chunk < kTileN * 8; chunk += kThreads) {
    const int row = chunk / 8, column = chunk % 8, n = n0 + row;
    const bool inside = n < g.n && k0 + column * 16 < g.k;
    copies.copy16_or_zero(stage + kTileABytes + swizzle128_offset(row, column),
                          w + (inside ? static_cast<size_t>(n) * g.k + k0 + column * 16 : 0), inside);
  }
}

// kSteps MMAs of k 32 from the tile's start into a fresh sum, one group: unrolled, fenced and committed within
// one branch (over a runtime count, or with the fence or the commit across a branch, ptxas injects
// warpgroup.arrive, its advisory C7519, serialising what the fence already orders).
template <int kSteps>
__device__ inline void multiply_steps(WarpgroupMma& mma, float (&tile_sum)[64], const unsigned char* tile_a,
                                      const unsigned char* tile_b) {
  mma.fence();
  for (int s = 0; s < kSteps; ++s)
    mma.mma_m64n128k32_e4m3(tile_sum, swizzle128_descriptor(tile_a, 32 * s), swizzle128_descriptor(tile_b, 32 * s),
                            s > 0);
  mma.commit();
}

// One k-tile's `mmas` products (those inside K: 1 to 4) for this warpgroup's 64 rows, into a fresh sum.
__device__ inline void multiply_stage(WarpgroupMma& mma, float (&tile_sum)[64], const unsigned char* stage,
                                      int group, int mmas) {
  static_assert(kTileK / kMmaK == 4, "a k-tile is four MMAs");
  const unsigned char* tile_a = stage + group * (kTileABytes / 2);
  const unsigned char* tile_b = stage + kTileABytes;
  switch (mmas) {
    case 1: multiply_steps<1>(mma, tile_sum, tile_a, tile_b); break;
    case 2: multiply_steps<2>(mma, tile_sum, tile_a, tile_b); break;
    case 3: multiply_steps<3>(mma, tile_sum, tile_a, tile_b); break;
    default: multiply_steps<4>(mma, tile_sum, tile_a, tile_b); break;
  }
}

// This thread's accumulators through the epilogue to post and post8 (rows past M, columns past N skipped);
// returns the largest post it wrote.
__device__ inline float store_tile(const WgmmaFp8ReluSquaredArgs& g, const float (&acc)[64], int m0, int n0) {
  const float scale = *g.a_scale * *g.w_scale;  // cuBLASLt's alpha a_scale b_scale with alpha 1
  const float inverse = 1.0f / *g.s_act;        // relu_squared_fp8_forward's reciprocal
  float largest = 0.0f;
  wgmma_gemm::for_each_accumulator_pair(acc, m0, n0, g.m, g.n, [&](size_t at, float x0, float x1) {
    const __nv_bfloat162 pre = __floats2bfloat162_rn(scale * x0, scale * x1);  // cuBLASLt's bf16 output
    const ReluSquaredFp8Pair<__nv_bfloat16> pair =
        relu_squared_fp8_pair<__nv_bfloat16>(__low2float(pre), __high2float(pre), inverse);
    largest = fmaxf(largest, pair.larger);
    *reinterpret_cast<__nv_bfloat162*>(g.post + at) = __halves2bfloat162(pair.post[0], pair.post[1]);
    *reinterpret_cast<uint16_t*>(g.post8 + at) = pair.codes;
  });
  return largest;
}

__global__ void __launch_bounds__(256, 1) relu_squared_kernel(WgmmaFp8ReluSquaredArgs g) {
  __shared__ float warp_maxima[kWarpSize];
  LLMC_DYNAMIC_SHARED(unsigned char, shared);
  unsigned char* ring = wgmma_gemm::aligned_ring(shared);
  const int n0 = static_cast<int>(blockIdx.x) * kTileN, m0 = static_cast<int>(blockIdx.y) * kTileM;
  const int k_tiles = (g.k + kTileK - 1) / kTileK, group = threadIdx.x / 128;
  AsyncCopies copies;
  WarpgroupMma mma;
  float acc[64], tile_sum[64];
  for (float& value : acc) value = 0.0f;
  for (int t = 0; t < kLoadAhead; ++t) {
    if (t < k_tiles) load_stage(copies, ring + (t % kStages) * kStageBytes, g, m0, n0, t);
    copies.commit();
  }
  for (int t = 0; t < k_tiles; ++t) {
    copies.wait<kLoadAhead - 1>();  // k-tile t has landed (this thread's copies)
    fence_proxy_async_shared();     // ... visible to the tensor cores' reads
    __syncthreads();                // ... and everyone's; every warp's products of t - 1 are done (waited below)
    const int ahead = t + kLoadAhead;  // into the slot k-tile t - 2 used
    if (ahead < k_tiles) load_stage(copies, ring + (ahead % kStages) * kStageBytes, g, m0, n0, ahead);
    copies.commit();
    const int k_left = g.k - t * kTileK;
    multiply_stage(mma, tile_sum, ring + (t % kStages) * kStageBytes, group,
                   (k_left < kTileK ? k_left : kTileK) / kMmaK);
    // The promotion: the tile's sum (its products done) joins the fp32 one.
    if (LLMC_MUTANT("wgmma_fp8_gemm.tile_sum_not_waited", true, false)) mma.wait<0>();
    for (int i = 0; i < 64; ++i) acc[i] += tile_sum[i];
  }
  mma.wait<0>();
  copies.wait<0>();
  block_max_to(g.post_amax, store_tile(g, acc, m0, n0), warp_maxima);
}

}  // namespace wgmma_fp8_gemm

// Enqueues the zeroing of post_amax and the kernel. Throws std::invalid_argument for shapes it does not take
// (positive sizes, N a multiple of 8, K of 32) and null or unaligned pointers (post, post8, a, w 16-byte aligned).
inline void wgmma_fp8_relu_squared_launch(const WgmmaFp8ReluSquaredArgs& g, cudaStream_t stream) {
  if (!wgmma_fp8_gemm::shape_fits(g.m, g.n, g.k)) {
    throw std::invalid_argument("wgmma_fp8_relu_squared: shape " + std::to_string(g.m) + " x " + std::to_string(g.n) +
                                " x " + std::to_string(g.k) + " needs positive sizes, N a multiple of 8, K of 32");
  }
  if (g.post_amax == nullptr || g.a_scale == nullptr || g.w_scale == nullptr || g.s_act == nullptr ||
      !is_aligned16(g.post) || !is_aligned16(g.post8) || !is_aligned16(g.a) || !is_aligned16(g.w)) {
    throw std::invalid_argument("wgmma_fp8_relu_squared: post, post8, a and w must be 16-byte aligned device "
                                "pointers, and post_amax and the three scales device pointers");
  }
  memset_async(g.post_amax, 0, sizeof(float), stream);
  const double mn = static_cast<double>(g.m) * g.n;
  const KernelCost cost{static_cast<double>(g.m) * g.k + static_cast<double>(g.n) * g.k + 3.0 * mn + 16.0,
                        2.0 * mn * g.k};
  const dim3 grid(static_cast<unsigned>((g.n + wgmma_fp8_gemm::kTileN - 1) / wgmma_fp8_gemm::kTileN),
                  static_cast<unsigned>((g.m + wgmma_fp8_gemm::kTileM - 1) / wgmma_fp8_gemm::kTileM));
  const auto kernel = wgmma_fp8_gemm::relu_squared_kernel;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, wgmma_fp8_gemm::kSharedBytes));
  // Told to benchmarks as an FP8 GEMM (LaunchKind::kGemm, a name starting "fp8 gemm": timed at the FP8 peak).
  observed_launch(
      LaunchKind::kGemm, stream, cost,
      [&] {
        return "fp8 gemm (wgmma) " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k) +
               " e4m3 x e4m3 + relu^2, e4m3 copy";
      },
      [&] {
        launch_kernel(kernel, "fp8 wgmma gemm + relu^2", __FILE__, __LINE__, grid, dim3(wgmma_fp8_gemm::kThreads),
                      wgmma_fp8_gemm::kSharedBytes, stream, g);
      });
}

// The FP8 MLP's call, on its floatX post: the bf16 build's is the kernel's; the fp32 build has no wgmma GEMM
// (llmc/family/fused_gemms.h refuses --wgmma-gemms there first) and throws std::logic_error.
inline void wgmma_fp8_relu_squared_launch(floatX* post, fp8e4m3* post8, float* post_amax, const fp8e4m3* a,
                                          const fp8e4m3* w, const float* a_scale, const float* w_scale,
                                          const float* s_act, int m, int n, int k, cudaStream_t stream) {
#if defined(LLMC_FP32)
  (void)post, (void)post8, (void)post_amax, (void)a, (void)w, (void)a_scale, (void)w_scale, (void)s_act, (void)m,
      (void)n, (void)k, (void)stream;
  throw std::logic_error("wgmma_fp8_relu_squared_launch: the wgmma GEMMs are bf16 only (this is the fp32 build)");
#else
  WgmmaFp8ReluSquaredArgs g;
  g.post = post, g.post8 = post8, g.post_amax = post_amax, g.a = a, g.w = w;
  g.a_scale = a_scale, g.w_scale = w_scale, g.s_act = s_act, g.m = m, g.n = n, g.k = k;
  wgmma_fp8_relu_squared_launch(g, stream);
#endif
}

}  // namespace llmc
