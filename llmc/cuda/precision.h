// The floating-point type of parameters, activations and gradients (floatX) and its conversions.
// Default: bf16 (__nv_bfloat16) with fp32 master weights and optimizer state; defining LLMC_FP32 builds
// the same code in fp32, for tight comparisons against the double-precision reference.
#pragma once

#include <cuda_bf16.h>

namespace llmc {

#if defined(LLMC_FP32)
using floatX = float;
inline constexpr const char* kPrecisionName = "fp32";
#else
using floatX = __nv_bfloat16;
inline constexpr const char* kPrecisionName = "bf16";
#endif

// Conversions used by kernels and host code alike; arithmetic always happens in fp32.
__host__ __device__ __forceinline__ float to_float(float x) { return x; }
__host__ __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__host__ __device__ __forceinline__ T from_float(float x);
template <>
__host__ __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__host__ __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);  // round to nearest even
}

}  // namespace llmc
