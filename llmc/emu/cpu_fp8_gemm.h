// The arithmetic of the emulated cuBLASLt's FP8 GEMMs (llmc/emu/cublaslt.cpp): decodes the fp8 operands and
// sums their products with a model of the Hopper FP8 tensor core's accumulator.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include <cuda_bf16.h>
#include <library_types.h>

#include "llmc/base/parallel_for.h"
#include "llmc/emu/fp8_convert.h"

namespace llmc::emu {

// One FP8 GEMM, row-major and K-major: D (M,N) = alpha * a_scale * b_scale * A (M,K) @ B^T (B stored (N,K))
// + beta * D, dense. A and B are e4m3 or e5m2, D bf16 or fp32; the scales point to one float each (null: 1).
struct CpuFp8Gemm {
  void* d = nullptr;
  cudaDataType_t d_type = CUDA_R_16BF;
  const void* a = nullptr;
  cudaDataType_t a_type = CUDA_R_8F_E4M3;
  const void* b = nullptr;
  cudaDataType_t b_type = CUDA_R_8F_E4M3;
  int m = 0, n = 0, k = 0;
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  float alpha = 1.0f, beta = 0.0f;
  bool fast_accumulation = false;
};

// The accumulator model. Products of two fp8 values are exact (at most 4 + 4 significant bits). One FP8 MMA
// (wgmma, K = 32 on sm_90) adds its 32 products to the accumulator the way the FP8 tensor core does it: every
// addend, the accumulator included, is aligned to the largest one's exponent E and truncated to the grid
// 2^(E - 13), then summed (DeepSeek-V3's measurement on H800: FP8 accumulation "retains around 14 bits",
// arXiv:2412.19437 section 3.3.2). With fast accumulation the whole K sum stays in that accumulator; without
// it the accumulator is added to an fp32 sum (round to nearest) and restarted every 128 (4 MMAs, CUTLASS's
// default promotion interval; cuBLASLt: "intermediate results will ... periodically be promoted to a higher
// precision"). The truncation makes the emulated error at least as large as the measured hardware's, so a
// tolerance that holds here holds on the GPU. Every output element is summed in increasing k.
inline constexpr int kFp8MmaDepth = 32;
inline constexpr int kFp8PromotionDepth = 128;
inline constexpr int kFp8AccumulatorFractionBits = 13;

// `partial` plus `count` products into the truncating accumulator. The largest addend is a normal float
// (products are at least 2^-25, running sums multiples of them), so its exponent is read from its bits; the
// addends divided by the grid are below 2^14 in magnitude, so truncating them is a conversion to int and
// their sum (below 2^20) is exact, as is its conversion back.
inline float fp8_mma_step(float partial, const float* products, int count) {
  float largest = std::fabs(partial);
  bool finite = largest <= std::numeric_limits<float>::max();
  for (int i = 0; i < count; i++) {
    const float magnitude = std::fabs(products[i]);
    finite = finite && magnitude <= std::numeric_limits<float>::max();  // false for inf and NaN
    largest = magnitude > largest ? magnitude : largest;
  }
  if (!finite) {  // an e5m2 infinity or a NaN operand: IEEE sums give inf or NaN
    for (int i = 0; i < count; i++) partial += products[i];
    return partial;
  }
  if (largest == 0.0f) return 0.0f;
  uint32_t largest_bits;
  std::memcpy(&largest_bits, &largest, sizeof largest_bits);
  const int grid_exponent = static_cast<int>(largest_bits >> 23) - 127 - kFp8AccumulatorFractionBits;
  const uint32_t inverse_bits = static_cast<uint32_t>(127 - grid_exponent) << 23,
                 grid_bits = static_cast<uint32_t>(127 + grid_exponent) << 23;
  float inverse_grid, grid;
  std::memcpy(&inverse_grid, &inverse_bits, sizeof inverse_grid);
  std::memcpy(&grid, &grid_bits, sizeof grid);
  int32_t units = static_cast<int32_t>(partial * inverse_grid);  // truncates toward zero
  for (int i = 0; i < count; i++) units += static_cast<int32_t>(products[i] * inverse_grid);
  return static_cast<float>(units) * grid;
}

// One output element: the dot product of a decoded K-major row of A with a column of B read with `b_stride`.
inline float fp8_dot(const float* a_row, const float* b, size_t b_stride, int k, bool fast_accumulation) {
  float products[kFp8MmaDepth];
  float partial = 0.0f, promoted = 0.0f;
  for (int k0 = 0; k0 < k; k0 += kFp8MmaDepth) {
    const int count = k - k0 < kFp8MmaDepth ? k - k0 : kFp8MmaDepth;
    for (int i = 0; i < count; i++) products[i] = a_row[k0 + i] * b[(k0 + i) * b_stride];
    partial = fp8_mma_step(partial, products, count);
    const bool promote = (k0 + count) % kFp8PromotionDepth == 0 || k0 + count == k;
    if (!fast_accumulation && promote) {
      promoted += partial;
      partial = 0.0f;
    }
  }
  return fast_accumulation ? partial : promoted;
}

// The same arithmetic for kFp8Lanes output columns at once (GCC vector extension; the running sums of the
// lanes are independent): what the GEMM runs when every operand value is finite. Equal to fp8_dot bit for
// bit (tested).
inline constexpr int kFp8Lanes = 4;
typedef float Fp8Lanes __attribute__((vector_size(4 * kFp8Lanes)));
typedef int32_t Fp8LaneInts __attribute__((vector_size(4 * kFp8Lanes)));

inline Fp8Lanes fp8_mma_step_lanes(Fp8Lanes partial, const Fp8Lanes* products, int count) {
  const Fp8LaneInts magnitude_mask = Fp8LaneInts{} + 0x7fffffff;
  // At least 2^-100: a lane whose addends are all zero gets a valid grid, and its sum stays +0.
  Fp8Lanes largest = reinterpret_cast<Fp8Lanes>(reinterpret_cast<Fp8LaneInts>(partial) & magnitude_mask);
  largest = largest > 0x1p-100f ? largest : Fp8Lanes{} + 0x1p-100f;
  for (int i = 0; i < count; i++) {
    const Fp8Lanes magnitude = reinterpret_cast<Fp8Lanes>(reinterpret_cast<Fp8LaneInts>(products[i]) & magnitude_mask);
    largest = magnitude > largest ? magnitude : largest;
  }
  const Fp8LaneInts biased_exponent = reinterpret_cast<Fp8LaneInts>(largest) >> 23;  // largest > 0: sign bit 0
  const Fp8Lanes inverse_grid = reinterpret_cast<Fp8Lanes>((254 + kFp8AccumulatorFractionBits - biased_exponent) << 23);
  const Fp8Lanes grid = reinterpret_cast<Fp8Lanes>((biased_exponent - kFp8AccumulatorFractionBits) << 23);
  Fp8LaneInts units = __builtin_convertvector(partial * inverse_grid, Fp8LaneInts);  // truncates toward zero
  for (int i = 0; i < count; i++) units += __builtin_convertvector(products[i] * inverse_grid, Fp8LaneInts);
  return __builtin_convertvector(units, Fp8Lanes) * grid;
}

// Row `a_row` of A against one panel of B: (K, kFp8Lanes) values, column-interleaved.
inline Fp8Lanes fp8_dot_lanes(const float* a_row, const float* panel, int k, bool fast_accumulation) {
  Fp8Lanes products[kFp8MmaDepth];
  Fp8Lanes partial = {}, promoted = {};
  for (int k0 = 0; k0 < k; k0 += kFp8MmaDepth) {
    const int count = k - k0 < kFp8MmaDepth ? k - k0 : kFp8MmaDepth;
    for (int i = 0; i < count; i++) {
      Fp8Lanes b;
      std::memcpy(&b, panel + static_cast<size_t>(k0 + i) * kFp8Lanes, sizeof b);
      products[i] = a_row[k0 + i] * b;
    }
    partial = fp8_mma_step_lanes(partial, products, count);
    const bool promote = (k0 + count) % kFp8PromotionDepth == 0 || k0 + count == k;
    if (!fast_accumulation && promote) {
      promoted += partial;
      partial = Fp8Lanes{};
    }
  }
  return fast_accumulation ? partial : promoted;
}

// A decoded as (M, K) rows; B decoded into panels of kFp8Lanes columns, (K, kFp8Lanes) each, zero-padded;
// whether each row and panel holds only finite values (e5m2 has infinities, both formats NaN).
struct DecodedFp8Operands {
  std::vector<float> a, panels;
  std::vector<char> a_row_finite, panel_finite;
};

inline DecodedFp8Operands decode_fp8_operands(const CpuFp8Gemm& g) {
  const Fp8DecodeTable& a_table = fp8_decode_table(g.a_type == CUDA_R_8F_E4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2);
  const Fp8DecodeTable& b_table = fp8_decode_table(g.b_type == CUDA_R_8F_E4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2);
  const uint8_t* a = static_cast<const uint8_t*>(g.a);
  const uint8_t* b = static_cast<const uint8_t*>(g.b);
  const int panels = (g.n + kFp8Lanes - 1) / kFp8Lanes;
  DecodedFp8Operands decoded;
  decoded.a.resize(static_cast<size_t>(g.m) * g.k);
  decoded.a_row_finite.assign(g.m, 1);
  for (size_t i = 0; i < decoded.a.size(); i++) {
    decoded.a[i] = a_table.value[a[i]];
    if (!std::isfinite(decoded.a[i])) decoded.a_row_finite[i / g.k] = 0;
  }
  decoded.panels.assign(static_cast<size_t>(panels) * g.k * kFp8Lanes, 0.0f);
  decoded.panel_finite.assign(panels, 1);
  for (int j = 0; j < g.n; j++) {
    for (int kk = 0; kk < g.k; kk++) {
      const float value = b_table.value[b[static_cast<size_t>(j) * g.k + kk]];
      decoded.panels[(static_cast<size_t>(j / kFp8Lanes) * g.k + kk) * kFp8Lanes + j % kFp8Lanes] = value;
      if (!std::isfinite(value)) decoded.panel_finite[j / kFp8Lanes] = 0;
    }
  }
  return decoded;
}

// The epilogue: D = (alpha * a_scale * b_scale) * sum + beta * D in fp32, rounded once to D's type.
inline void store_fp8_gemm_result(const CpuFp8Gemm& g, size_t index, float sum, float scale) {
  float value = scale * sum;
  if (g.d_type == CUDA_R_32F) {
    float* d = static_cast<float*>(g.d);
    if (g.beta != 0.0f) value += g.beta * d[index];
    d[index] = value;
  } else {
    __nv_bfloat16* d = static_cast<__nv_bfloat16*>(g.d);
    if (g.beta != 0.0f) value += g.beta * __bfloat162float(d[index]);
    d[index] = __float2bfloat16(value);
  }
}

inline void cpu_fp8_gemm(const CpuFp8Gemm& g, int threads) {
  const DecodedFp8Operands decoded = decode_fp8_operands(g);
  const float scale = g.alpha * (g.a_scale != nullptr ? *g.a_scale : 1.0f) * (g.b_scale != nullptr ? *g.b_scale : 1.0f);
  const int panels = static_cast<int>(decoded.panel_finite.size());
  const int workers = threads < g.m ? threads : g.m;
  parallel_for(static_cast<size_t>(g.m), workers > 0 ? workers : 1, [&](int, size_t row) {
    const float* a_row = decoded.a.data() + row * g.k;
    for (int p = 0; p < panels; p++) {
      const float* panel = decoded.panels.data() + static_cast<size_t>(p) * g.k * kFp8Lanes;
      float sums[kFp8Lanes];
      if (decoded.a_row_finite[row] && decoded.panel_finite[p]) {
        const Fp8Lanes lanes = fp8_dot_lanes(a_row, panel, g.k, g.fast_accumulation);
        std::memcpy(sums, &lanes, sizeof sums);
      } else {
        for (int lane = 0; lane < kFp8Lanes; lane++)
          sums[lane] = fp8_dot(a_row, panel + lane, kFp8Lanes, g.k, g.fast_accumulation);
      }
      for (int lane = 0; lane < kFp8Lanes && p * kFp8Lanes + lane < g.n; lane++)
        store_fp8_gemm_result(g, row * g.n + p * kFp8Lanes + lane, sums[lane], scale);
    }
  });
}

}  // namespace llmc::emu
