// A bf16 GEMM on Hopper's warpgroup MMA whose epilogue does the speedrun MLPs' elementwise work, so that ReLU^2
// and its derivative never make a pass of their own: out (M, N) = A (M, K) W, A row-major, W stored (K, N) row-major
// or (w_k_major) (N, K) row-major (out = A W^T), fp32 accumulation, rounded to bf16 as cuBLASLt's output is, then
//   kPlain:                       out;
//   kReluSquared:                 out = pre, and post = relu(pre)^2 (the fc GEMM: pre and post of the MLP); out null:
//                                 post only (the 2026-07-17 model, whose backward reads post);
//   kReluSquaredBackward:         out = 2 relu(saved) * product, saved the forward's pre (the down projection's
//                                 input gradient times ReLU^2's slope);
//   kReluSquaredBackwardFromPost: out = 2 sqrt(saved) * product, saved the forward's post (the 2026-07-17 record's
//                                 backward, which keeps no pre-activation);
//   kQkvRope:                     out = qkv (N = 3C), and qkv.rot: q and k heads RMS-normalised and rotated, v mixed
//                                 with the value embedding (the 2025-10-31 model's attention input, WgmmaQkvRope).
// sm_90a only (llmc/cuda/wgmma.cuh); 128 x 128 output tiles, two warpgroups, 64-deep k-tiles through a 4-stage
// cp.async ring loading two tiles ahead while one product group stays in flight; N and K multiples of 8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "llmc/cuda/async_copies.cuh"
#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/cuda/wgmma.cuh"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/relu_squared.cuh"
#include "llmc/kernels/residual_mix.cuh"
#include "llmc/kernels/rmsnorm.cuh"

namespace llmc {

enum class WgmmaEpilogue { kPlain, kReluSquared, kReluSquaredBackward, kReluSquaredBackwardFromPost, kQkvRope };

// kQkvRope's tensors: from qkv (T, 3C) of heads of D, rot (T, 3C) gets qk_norm_rope_forward's q and k (per head
// n = x / rms(x), halves rotated by the tables' cos and sin) and mix_forward's v (a v + b ve, b = 0 without ve),
// rstd (T, 2C / D) each q and k head's 1/rms. D divides 128 and is a multiple of 16 (a tile holds whole heads;
// the lane holding column j of a head holds j + D/2).
struct WgmmaQkvRope {
  __nv_bfloat16* rot = nullptr;
  float* rstd = nullptr;
  const __nv_bfloat16* cos_table = nullptr;    // (T, D/2)
  const __nv_bfloat16* sin_table = nullptr;    // (T, D/2)
  const __nv_bfloat16* value_embed = nullptr;  // (T, C), or null
  const float* scalars = nullptr;              // where a and b are read
  MixCoefficient a, b;
  int head_dim = 0;
};

struct WgmmaGemmArgs {
  __nv_bfloat16* out = nullptr;          // (M, N); kReluSquared may leave it null (post only)
  __nv_bfloat16* post = nullptr;         // kReluSquared: (M, N) relu(out)^2
  const __nv_bfloat16* saved = nullptr;  // the backward epilogues: (M, N) the forward's pre- or post-activation
  const __nv_bfloat16* a = nullptr;      // (M, K) row-major
  const __nv_bfloat16* w = nullptr;      // (K, N) row-major, or (N, K) row-major with w_k_major
  bool w_k_major = false;
  int m = 0, n = 0, k = 0;
  WgmmaQkvRope qkv;  // kQkvRope only
};

namespace wgmma_gemm {

using bf16 = __nv_bfloat16;

inline constexpr int kTileM = 128, kTileN = 128, kTileK = 64, kStages = 4, kLoadAhead = kStages - 2;
inline constexpr int kThreads = 256;  // two warpgroups, 64 rows each
inline constexpr int kTileABytes = kTileM * kSwizzle128RowBytes;            // 128 K-major rows of 64
inline constexpr int kHalfBBytes = kTileK * kSwizzle128RowBytes;            // 64 k-rows of 64 columns
inline constexpr int kStageBytes = kTileABytes + 2 * kHalfBBytes;           // 32 KiB
inline constexpr int kSharedBytes = 1024 + kStages * kStageBytes;           // + the 1024-byte alignment

// The block's ring of stages in dynamic shared memory, moved up to a 1024-byte boundary (the 128-byte swizzle
// works on shared-address bits; kSharedBytes has room for the move).
__device__ inline unsigned char* aligned_ring(unsigned char* shared) {
  return shared + (1024 - shared_space_address(shared) % 1024) % 1024;
}

// Whether the kernel takes this shape: rows of 16 bytes (N and K multiples of 8); tiles are cut at M, N and K.
inline bool shape_fits(int n, int k) { return n > 0 && k > 0 && n % 8 == 0 && k % 8 == 0; }

// Stage `slot` <- k-tile `k_tile`: A rows m0.. as K-major swizzled rows; W's k-rows as two N-major halves of 64
// columns, or with kWKMajor its rows n0.. as K-major swizzled rows like A's; zeros past M, N and K (they add nothing
// to the product). 1024 16-byte chunks of each per stage, 4 + 4 per thread.
template <bool kWKMajor>
__device__ inline void load_stage(AsyncCopies& copies, unsigned char* stage, const WgmmaGemmArgs& g, int m0,
                                  int n0, int k_tile) {
  const int k0 = k_tile * kTileK;
  for (int chunk = threadIdx.x; chunk < kTileM * 8; chunk += kThreads) {
    const int row = chunk / 8, column = chunk % 8, m = m0 + row;
    const bool inside = m < g.m && k0 + column * 8 < g.k;
    const bf16* source = g.a + (inside ? static_cast<size_t>(m) * g.k + k0 + column * 8 : 0);
    copies.copy16_or_zero(stage + swizzle128_offset(row, column), source, inside);
  }
  unsigned char* tile_b = stage + kTileABytes;
  if constexpr (kWKMajor) {
    for (int chunk = threadIdx.x; chunk < kTileN * 8; chunk += kThreads) {
      const int row = chunk / 8, column = chunk % 8, n = n0 + row;
      const bool inside = n < g.n && k0 + column * 8 < g.k;
      const bf16* source = g.w + (inside ? static_cast<size_t>(n) * g.k + k0 + column * 8 : 0);
      copies.copy16_or_zero(tile_b + swizzle128_offset(row, column), source, inside);
    }
  } else {
    for (int chunk = threadIdx.x; chunk < kTileK * 16; chunk += kThreads) {
      const int k = chunk / 16, column = chunk % 16;
      const bool inside = k0 + k < g.k && n0 + column * 8 < g.n;
      const bf16* source = g.w + (inside ? static_cast<size_t>(k0 + k) * g.n + n0 + column * 8 : 0);
      copies.copy16_or_zero(tile_b + (column / 8) * kHalfBBytes + swizzle128_offset(k, column % 8), source, inside);
    }
  }
}

// The four 16-deep products of one k-tile for this warpgroup's 64 rows.
template <bool kWKMajor>
__device__ inline void multiply_stage(WarpgroupMma& mma, float (&acc)[64], const unsigned char* stage, int group,
                                      bool accumulate) {
  const unsigned char* tile_a = stage + group * (kTileABytes / 2);
  const unsigned char* tile_b = stage + kTileABytes;
  mma.fence();
  for (int s = 0; s < kTileK / 16; ++s) {
    const uint64_t b = kWKMajor ? swizzle128_descriptor(tile_b, 32 * s)
                                : swizzle128_mn_descriptor(tile_b + 2048 * s, kHalfBBytes, 1024);
    mma.mma_m64n128k16<!kWKMajor>(acc, swizzle128_descriptor(tile_a, 32 * s), b, accumulate || s > 0);
  }
  mma.commit();
}

template <WgmmaEpilogue kEpilogue>
__device__ inline void store_pair(const WgmmaGemmArgs& g, size_t at, float x0, float x1) {
  __nv_bfloat162 value = __floats2bfloat162_rn(x0, x1);  // cuBLASLt's rounding of its output
  if constexpr (kEpilogue == WgmmaEpilogue::kReluSquared) {
    const float pre0 = __low2float(value), pre1 = __high2float(value);
    *reinterpret_cast<__nv_bfloat162*>(g.post + at) =
        __floats2bfloat162_rn(relu_squared(pre0), relu_squared(pre1));
  } else if constexpr (kEpilogue != WgmmaEpilogue::kPlain) {  // relu_squared_backward(_from_post)'s arithmetic
    constexpr bool kFromPost = kEpilogue == WgmmaEpilogue::kReluSquaredBackwardFromPost;
    const __nv_bfloat162 saved = *reinterpret_cast<const __nv_bfloat162*>(g.saved + at);
    value = __floats2bfloat162_rn(relu_squared_slope<kFromPost>(__low2float(saved)) * __low2float(value),
                                  relu_squared_slope<kFromPost>(__high2float(saved)) * __high2float(value));
  }
  if (kEpilogue != WgmmaEpilogue::kReluSquared || g.out != nullptr)
    *reinterpret_cast<__nv_bfloat162*>(g.out + at) = value;
}

// The first of this thread's two accumulator rows (the other is 8 below) in the tile at m0: llmc/emu/wgmma_model.h's
// layout, warpgroup w holding rows 64w.. of the tile.
__device__ inline int thread_first_row(int m0) {
  const int warp = threadIdx.x / 32;
  return m0 + 64 * (warp / 4) + 16 * (warp % 4) + (threadIdx.x % 32) / 4;
}

// store(at, x0, x1) for each of this thread's accumulator pairs of the tile at (m0, n0): the pair's offset in a
// row-major (m, n) output and its two values; rows past m and columns past n skipped (n is a multiple of 8, so a
// column pair is wholly inside or outside).
template <class Store>
__device__ inline void for_each_accumulator_pair(const float (&acc)[64], int m0, int n0, int m, int n, Store&& store) {
  const int lane = threadIdx.x % 32, row0 = thread_first_row(m0);
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + 8 * half;
    if (row >= m) continue;
    for (int i = 0; i < kTileN / 8; ++i) {
      const int column = n0 + 8 * i + 2 * (lane % 4);
      if (column < n) store(static_cast<size_t>(row) * n + column, acc[4 * i + 2 * half], acc[4 * i + 2 * half + 1]);
    }
  }
}

// This thread's accumulators to the output through the epilogue.
template <WgmmaEpilogue kEpilogue>
__device__ inline void store_tile(const WgmmaGemmArgs& g, const float (&acc)[64], int m0, int n0) {
  for_each_accumulator_pair(acc, m0, n0, g.m, g.n,
                            [&](size_t at, float x0, float x1) { store_pair<kEpilogue>(g, at, x0, x1); });
}

__device__ inline float bf16_rounded(float x) { return __bfloat162float(__float2bfloat16(x)); }

// kQkvRope on one row's head of D columns from c0: the quad's four lanes hold its columns (D / 8 tiles from
// first_tile, two values each), the quad sums the squares (rows past M too: the shuffles need every lane).
__device__ inline void store_qk_head(const WgmmaGemmArgs& g, const float (&acc)[64], int half, int row, int c0,
                                     int first_tile) {
  const WgmmaQkvRope& q = g.qkv;
  const int D = q.head_dim, pair = threadIdx.x % 4;
  float sum_squares = 0.0f;
  for (int i = first_tile; i < first_tile + D / 8; ++i) {
    const float x0 = bf16_rounded(acc[4 * i + 2 * half]), x1 = bf16_rounded(acc[4 * i + 2 * half + 1]);
    sum_squares += x0 * x0 + x1 * x1;
  }
  sum_squares += __shfl_xor_sync(0xffffffffu, sum_squares, 1);
  sum_squares += __shfl_xor_sync(0xffffffffu, sum_squares, 2);
  const float r = rsqrtf(sum_squares / D + kRmsNormEps);
  if (row >= g.m) return;
  const size_t at = static_cast<size_t>(row) * g.n + c0;
  for (int i = first_tile; i < first_tile + D / 16; ++i) {
    const int j = 8 * (i - first_tile) + 2 * pair;  // this pair's column in the first half
    const __nv_bfloat162 c = *reinterpret_cast<const __nv_bfloat162*>(q.cos_table + static_cast<size_t>(row) * (D / 2) + j);
    const __nv_bfloat162 s = *reinterpret_cast<const __nv_bfloat162*>(q.sin_table + static_cast<size_t>(row) * (D / 2) + j);
    float y1[2], y2[2];
    for (int e = 0; e < 2; ++e) {
      const float n1 = bf16_rounded(acc[4 * i + 2 * half + e]) * r;
      const float n2 = bf16_rounded(acc[4 * (i + D / 16) + 2 * half + e]) * r;
      const float ce = e == 0 ? __low2float(c) : __high2float(c), se = e == 0 ? __low2float(s) : __high2float(s);
      y1[e] = n1 * ce + n2 * se;
      y2[e] = LLMC_MUTANT("wgmma_gemm.rope_second_half_sign", -n1 * se + n2 * ce, n1 * se + n2 * ce);
    }
    *reinterpret_cast<__nv_bfloat162*>(q.rot + at + j) = __floats2bfloat162_rn(y1[0], y1[1]);
    *reinterpret_cast<__nv_bfloat162*>(q.rot + at + j + D / 2) = __floats2bfloat162_rn(y2[0], y2[1]);
  }
  if (pair == 0) q.rstd[static_cast<size_t>(row) * (2 * (g.n / 3) / D) + c0 / D] = r;
}

// kQkvRope on one row's v head: a v + b ve, as mix_forward computes it.
__device__ inline void store_v_head(const WgmmaGemmArgs& g, const float (&acc)[64], int half, int row, int c0,
                                    int first_tile) {
  const WgmmaQkvRope& q = g.qkv;
  const int C = g.n / 3, pair = threadIdx.x % 4;
  const float a = mix_coefficient(q.scalars, q.a), b = q.value_embed != nullptr ? mix_coefficient(q.scalars, q.b) : 0.0f;
  for (int i = first_tile; i < first_tile + q.head_dim / 8; ++i) {
    const int column = c0 + 8 * (i - first_tile) + 2 * pair;
    float y[2] = {0.0f, 0.0f};
    if (q.value_embed != nullptr) {
      const __nv_bfloat162 ve =
          *reinterpret_cast<const __nv_bfloat162*>(q.value_embed + static_cast<size_t>(row) * C + column - 2 * C);
      y[0] = __low2float(ve), y[1] = __high2float(ve);
    }
    const float x0 = bf16_rounded(acc[4 * i + 2 * half]), x1 = bf16_rounded(acc[4 * i + 2 * half + 1]);
    *reinterpret_cast<__nv_bfloat162*>(q.rot + static_cast<size_t>(row) * g.n + column) =
        __floats2bfloat162_rn(a * x0 + b * y[0], a * x1 + b * y[1]);
  }
}

// kQkvRope's rot and rstd for this thread's rows, head by head (the loop bounds are the warp's, not the row's).
__device__ inline void store_qkv_rope_tile(const WgmmaGemmArgs& g, const float (&acc)[64], int m0, int n0) {
  const int D = g.qkv.head_dim, C = g.n / 3, row0 = thread_first_row(m0);
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + 8 * half;
    for (int head = 0; head < kTileN / D && n0 + head * D < g.n; ++head) {
      const int c0 = n0 + head * D;
      if (c0 < 2 * C) {
        store_qk_head(g, acc, half, row, c0, head * D / 8);
      } else if (row < g.m) {
        store_v_head(g, acc, half, row, c0, head * D / 8);
      }
    }
  }
}

template <WgmmaEpilogue kEpilogue, bool kWKMajor>
__global__ void __launch_bounds__(256, 1) gemm_kernel(WgmmaGemmArgs g) {
  LLMC_DYNAMIC_SHARED(unsigned char, shared);
  unsigned char* ring = aligned_ring(shared);
  const int n0 = static_cast<int>(blockIdx.x) * kTileN, m0 = static_cast<int>(blockIdx.y) * kTileM;
  const int k_tiles = (g.k + kTileK - 1) / kTileK, group = threadIdx.x / 128;
  AsyncCopies copies;
  WarpgroupMma mma;
  float acc[64];
  for (int t = 0; t < kLoadAhead; ++t) {
    if (t < k_tiles) load_stage<kWKMajor>(copies, ring + (t % kStages) * kStageBytes, g, m0, n0, t);
    copies.commit();
  }
  for (int t = 0; t < k_tiles; ++t) {
    copies.wait<kLoadAhead - 1>();  // k-tile t has landed (this thread's copies)
    fence_proxy_async_shared();     // ... visible to the tensor cores' reads
    if (LLMC_MUTANT("wgmma_gemm.ring_without_barrier", true, false))
      __syncthreads();  // ... and everyone's; the products of t - 2 are done in every warp
    const int ahead = t + kLoadAhead;  // into the slot k-tile t - 2 used
    if (ahead < k_tiles) load_stage<kWKMajor>(copies, ring + (ahead % kStages) * kStageBytes, g, m0, n0, ahead);
    copies.commit();
    multiply_stage<kWKMajor>(mma, acc, ring + (t % kStages) * kStageBytes, group, t > 0);
    // the products of t - 1 done: its slot may be refilled after the next barrier
    if (LLMC_MUTANT("wgmma_gemm.products_not_waited", true, false)) mma.wait<1>();
  }
  mma.wait<0>();
  copies.wait<0>();
  if constexpr (kEpilogue == WgmmaEpilogue::kQkvRope) {
    store_tile<WgmmaEpilogue::kPlain>(g, acc, m0, n0);
    // The heads' loops index by the runtime head size, so they read a copy: indexed so, the accumulators would
    // leave the registers and ptxas would serialise every wgmma of the main loop (its advisory C7514).
    float values[64];
    for (int i = 0; i < 64; ++i) values[i] = acc[i];
    store_qkv_rope_tile(g, values, m0, n0);
  } else {
    store_tile<kEpilogue>(g, acc, m0, n0);
  }
}

// kQkvRope's shape and tensors (std::invalid_argument otherwise).
inline void check_qkv_rope(const WgmmaGemmArgs& g) {
  const WgmmaQkvRope& q = g.qkv;
  const int D = q.head_dim;
  if (D <= 0 || kTileN % D != 0 || D % 16 != 0 || g.n % 3 != 0 || (g.n / 3) % D != 0)
    throw std::invalid_argument("wgmma_gemm (qk-norm, rope, v mix): head size " + std::to_string(D) + " and N " +
                                std::to_string(g.n) + " need D dividing 128, a multiple of 16, and N = 3C with C a "
                                "multiple of D");
  if (q.rot == nullptr || q.rstd == nullptr || q.cos_table == nullptr || q.sin_table == nullptr ||
      q.scalars == nullptr)
    throw std::invalid_argument("wgmma_gemm (qk-norm, rope, v mix): rot, rstd, the tables and the scalars are needed");
}

// kQkvRope's bytes beyond the GEMM's and rot's: the tables and the value embedding read, rstd written.
inline double qkv_rope_extra_bytes(const WgmmaGemmArgs& g) {
  const double M = g.m, C = g.n / 3.0, D = g.qkv.head_dim;
  return M * (2.0 * (D / 2.0) * 2.0 + (g.qkv.value_embed != nullptr ? C * 2.0 : 0.0) + 2.0 * C / D * 4.0);
}

}  // namespace wgmma_gemm

// Enqueues the GEMM with its epilogue. Throws std::invalid_argument for shapes or pointers the kernel does not
// take (N and K multiples of 8, 16-byte aligned operands, the epilogue's extra tensors present).
inline void wgmma_gemm_launch(WgmmaEpilogue epilogue, const WgmmaGemmArgs& g, cudaStream_t stream) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (g.m <= 0 || !wgmma_gemm::shape_fits(g.n, g.k)) {
    throw std::invalid_argument("wgmma_gemm: shape " + std::to_string(g.m) + " x " + std::to_string(g.n) + " x " +
                                std::to_string(g.k) + " needs positive sizes, N and K multiples of 8");
  }
  if (epilogue == WgmmaEpilogue::kQkvRope) wgmma_gemm::check_qkv_rope(g);
  const bool extra_present = epilogue == WgmmaEpilogue::kPlain || epilogue == WgmmaEpilogue::kQkvRope ? true
                             : epilogue == WgmmaEpilogue::kReluSquared ? g.post != nullptr && aligned(g.post)
                                                                       : g.saved != nullptr && aligned(g.saved);
  const bool out_present = g.out != nullptr || epilogue == WgmmaEpilogue::kReluSquared;
  if (!out_present || !aligned(g.out) || !aligned(g.a) || !aligned(g.w) || !extra_present) {
    throw std::invalid_argument("wgmma_gemm: out (null only for the ReLU^2 epilogue), a, w (and post or saved for the "
                                "ReLU^2 epilogues) must be 16-byte aligned device pointers");
  }
  const double mn = static_cast<double>(g.m) * g.n;
  // out, and post, saved or rot
  const double io_tensors = epilogue == WgmmaEpilogue::kPlain || g.out == nullptr ? 1.0 : 2.0;
  const KernelCost cost{2.0 * (static_cast<double>(g.m) * g.k + static_cast<double>(g.k) * g.n + io_tensors * mn) +
                            (epilogue == WgmmaEpilogue::kQkvRope ? wgmma_gemm::qkv_rope_extra_bytes(g) : 0.0),
                        2.0 * mn * g.k};
  const dim3 grid(static_cast<unsigned>((g.n + wgmma_gemm::kTileN - 1) / wgmma_gemm::kTileN),
                  static_cast<unsigned>((g.m + wgmma_gemm::kTileM - 1) / wgmma_gemm::kTileM));
  // Told to benchmarks as a GEMM (LaunchKind::kGemm: timed at the tensor cores' peak), not a memory-bound kernel.
  const auto launch = [&](auto kernel, const char* name) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, wgmma_gemm::kSharedBytes));
    observed_launch(
        LaunchKind::kGemm, stream, cost, [&] { return std::string(name); },
        [&] {
          launch_kernel(kernel, name, __FILE__, __LINE__, grid, dim3(wgmma_gemm::kThreads), wgmma_gemm::kSharedBytes,
                        stream, g);
        });
  };
  // The kernel of `kind` (a std::integral_constant of the epilogue) for W's layout.
  const auto launch_epilogue = [&](auto kind, const char* name) {
    constexpr WgmmaEpilogue kEpilogue = decltype(kind)::value;
    if (g.w_k_major) launch(wgmma_gemm::gemm_kernel<kEpilogue, true>, name);
    else launch(wgmma_gemm::gemm_kernel<kEpilogue, false>, name);
  };
  using E = WgmmaEpilogue;
  switch (epilogue) {
    case E::kPlain: return launch_epilogue(std::integral_constant<E, E::kPlain>{}, "wgmma gemm");
    case E::kReluSquared: return launch_epilogue(std::integral_constant<E, E::kReluSquared>{}, "wgmma gemm + relu^2");
    case E::kReluSquaredBackward:
      return launch_epilogue(std::integral_constant<E, E::kReluSquaredBackward>{}, "wgmma gemm + relu^2 backward");
    case E::kReluSquaredBackwardFromPost:
      return launch_epilogue(std::integral_constant<E, E::kReluSquaredBackwardFromPost>{},
                             "wgmma gemm + relu^2 backward from post");
    case E::kQkvRope:
      return launch_epilogue(std::integral_constant<E, E::kQkvRope>{}, "wgmma gemm + qk-norm, rope, v mix");
  }
}

// The models' call, on their floatX tensors: the bf16 build's are the kernel's; the fp32 build has no wgmma GEMM
// (llmc/family/fused_gemms.h refuses --wgmma-gemms there first) and throws std::logic_error.
inline void wgmma_gemm_launch(WgmmaEpilogue epilogue, floatX* out, floatX* post, const floatX* saved,
                              const floatX* a, const floatX* w, bool w_k_major, int m, int n, int k,
                              cudaStream_t stream) {
#if defined(LLMC_FP32)
  (void)epilogue, (void)out, (void)post, (void)saved, (void)a, (void)w, (void)w_k_major, (void)m, (void)n, (void)k,
      (void)stream;
  throw std::logic_error("wgmma_gemm_launch: the wgmma GEMM is bf16 only (this is the fp32 build)");
#else
  WgmmaGemmArgs g;
  g.out = out, g.post = post, g.saved = saved, g.a = a, g.w = w, g.w_k_major = w_k_major, g.m = m, g.n = n, g.k = k;
  wgmma_gemm_launch(epilogue, g, stream);
#endif
}

}  // namespace llmc
