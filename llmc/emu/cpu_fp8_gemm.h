// The FP8 GEMM of the emulated build (Fp8GemmArgs, llmc/kernels/fp8_gemm_args.h): decodes the fp8 operands and
// sums their products with a model of the Hopper FP8 tensor core's accumulator, run by fp8_gemm() of
// llmc/kernels/fp8_matmul.cuh as a stream-ordered host function.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "llmc/emu/fp8.h"
#include "llmc/kernels/fp8_gemm_args.h"
#include "llmc/parallel_for.h"
#include "llmc/precision.h"

namespace llmc::emu {

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

// `partial` plus `count` products into the truncating accumulator. All values are exact in float: the
// addends divided by the grid are integers below 2^14, their sum below 2^20. (fmax skips a NaN product, whose
// units then make the sum NaN.)
inline float fp8_mma_step(float partial, const float* products, int count) {
  float largest = std::fabs(partial);
  for (int i = 0; i < count; i++) largest = std::fmax(largest, std::fabs(products[i]));
  if (largest == 0.0f) return 0.0f;
  if (!std::isfinite(largest)) {  // an e5m2 infinity or NaN operand: IEEE sums give inf or NaN
    for (int i = 0; i < count; i++) partial += products[i];
    return partial;
  }
  const int grid_exponent = std::ilogb(largest) - kFp8AccumulatorFractionBits;
  const float inverse_grid = std::ldexp(1.0f, -grid_exponent);
  float units = std::trunc(partial * inverse_grid);
  for (int i = 0; i < count; i++) units += std::trunc(products[i] * inverse_grid);
  return std::ldexp(units, grid_exponent);
}

// One output element: the dot product of two decoded K-major rows.
inline float fp8_dot(const float* a_row, const float* b_row, int k, bool fast_accumulation) {
  float products[kFp8MmaDepth];
  float partial = 0.0f, promoted = 0.0f;
  for (int k0 = 0; k0 < k; k0 += kFp8MmaDepth) {
    const int count = k - k0 < kFp8MmaDepth ? k - k0 : kFp8MmaDepth;
    for (int i = 0; i < count; i++) products[i] = a_row[k0 + i] * b_row[k0 + i];
    partial = fp8_mma_step(partial, products, count);
    const bool promote = (k0 + count) % kFp8PromotionDepth == 0 || k0 + count == k;
    if (!fast_accumulation && promote) {
      promoted += partial;
      partial = 0.0f;
    }
  }
  return fast_accumulation ? partial : promoted;
}

inline std::vector<float> decode_fp8_matrix(const void* data, cudaDataType_t type, size_t count) {
  const Fp8DecodeTable& table = fp8_decode_table(type == CUDA_R_8F_E4M3 ? Fp8Format::kE4M3 : Fp8Format::kE5M2);
  const uint8_t* codes = static_cast<const uint8_t*>(data);
  std::vector<float> values(count);
  for (size_t i = 0; i < count; i++) values[i] = table.value[codes[i]];
  return values;
}

// The epilogue: D = (alpha * a_scale * b_scale) * sum + beta * D in fp32, rounded once to D's type.
inline void cpu_fp8_gemm(const Fp8GemmArgs& g, int threads) {
  const std::vector<float> a = decode_fp8_matrix(g.a, g.a_type, static_cast<size_t>(g.m) * g.k);
  const std::vector<float> b = decode_fp8_matrix(g.b, g.b_type, static_cast<size_t>(g.n) * g.k);
  const float scale = g.alpha * (g.a_scale != nullptr ? *g.a_scale : 1.0f) * (g.b_scale != nullptr ? *g.b_scale : 1.0f);
  const int workers = threads < g.m ? threads : g.m;
  parallel_for(static_cast<size_t>(g.m), workers > 0 ? workers : 1, [&](int, size_t row) {
    const float* a_row = a.data() + row * g.k;
    for (int j = 0; j < g.n; j++) {
      float value = scale * fp8_dot(a_row, b.data() + static_cast<size_t>(j) * g.k, g.k, g.fast_accumulation);
      const size_t index = row * g.n + j;
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
  });
}

}  // namespace llmc::emu
