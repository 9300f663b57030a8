// The FP8 formats of the FP8 head for kernels and host code of both builds: the storage types
// (cuda_fp8.h's __nv_fp8_e4m3 / __nv_fp8_e5m2, what cuBLASLt reads as CUDA_R_8F_E4M3 / CUDA_R_8F_E5M2) and
// the conversions. float -> fp8 rounds to nearest even and saturates to the largest finite value, as the only
// FP8 conversion instruction of sm_89/sm_90 does (cvt.rn.satfinite.{e4m3,e5m2}x2.f32); the emulated build
// runs llmc/emu/fp8_convert.h's model of it (Fp8Traits::kFormat names the format there).
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "llmc/cuda/cuda_common.h"
#include "llmc/emu/fp8_convert.h"

namespace llmc {

using fp8e4m3 = __nv_fp8_e4m3;
using fp8e5m2 = __nv_fp8_e5m2;

template <class Fp8>
struct Fp8Traits;
template <>
struct Fp8Traits<fp8e4m3> {
  static constexpr float kMaxFinite = 448.0f;
  static constexpr const char* kName = "e4m3";
  static constexpr emu::Fp8Format kFormat = emu::Fp8Format::kE4M3;
  static constexpr __nv_fp8_interpretation_t kInterpretation = __NV_E4M3;
};
template <>
struct Fp8Traits<fp8e5m2> {
  static constexpr float kMaxFinite = 57344.0f;
  static constexpr const char* kName = "e5m2";
  static constexpr emu::Fp8Format kFormat = emu::Fp8Format::kE5M2;
  static constexpr __nv_fp8_interpretation_t kInterpretation = __NV_E5M2;
};

template <class Fp8>
__host__ __device__ __forceinline__ Fp8 fp8_from_bits(uint8_t bits) {
  Fp8 value;
  value.__x = bits;
  return value;
}

// Two values in one 16-bit word, `low` in the low byte (the memory order of two consecutive elements):
// one cvt instruction on sm_89+.
template <class Fp8>
__host__ __device__ __forceinline__ uint16_t fp8x2_from_floats(float low, float high) {
#if defined(LLMC_EMULATION)
  return static_cast<uint16_t>(emu::fp8_encode(low, Fp8Traits<Fp8>::kFormat) |
                               (emu::fp8_encode(high, Fp8Traits<Fp8>::kFormat) << 8));
#else
  return __nv_cvt_float2_to_fp8x2(make_float2(low, high), __NV_SATFINITE, Fp8Traits<Fp8>::kInterpretation);
#endif
}

template <class Fp8>
__host__ __device__ __forceinline__ Fp8 fp8_from_float(float x) {
  return fp8_from_bits<Fp8>(static_cast<uint8_t>(fp8x2_from_floats<Fp8>(x, 0.0f) & 0xffu));
}

template <class Fp8>
__host__ __device__ __forceinline__ float fp8_to_float(Fp8 x) {
#if defined(LLMC_EMULATION)
  return emu::fp8_decode(x.__x, Fp8Traits<Fp8>::kFormat);
#else
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(x.__x, Fp8Traits<Fp8>::kInterpretation)));
#endif
}

}  // namespace llmc
