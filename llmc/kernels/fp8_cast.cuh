// fp8_cast: out[i] = fp8(in[i] / scale) for fp32 or bf16 input, round to nearest even, saturating (the FP8
// head's quantisation with a static scale). Each thread turns 16 inputs (two or four 16-byte loads) into one
// 16-byte store of 16 fp8 codes; the division is IEEE (correctly rounded), so both builds agree bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/fp8.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

inline constexpr int kFp8PacketElements = 16;  // one 16-byte store of fp8 codes

// The codes of a / scale (low byte) and b / scale (high byte): IEEE division, then the saturating conversion. Every
// quantisation with a given scale (the casts, the loss kernels' e5m2 gradients) goes through it, so their codes agree
// bit for bit.
template <class Fp8>
__device__ __forceinline__ uint16_t fp8x2_scaled(float a, float b, float scale) {
  return fp8x2_from_floats<Fp8>(__fdiv_rn(a, scale), __fdiv_rn(b, scale));
}

// The 16 codes of in[0..16) / scale, in memory order (the two-value conversion: one instruction per pair).
template <class Fp8, class In>
__device__ __forceinline__ Packed128<Fp8> fp8_quantize_packet(const In* in, float scale) {
  using InPacket = Packed128<In>;
  Packed128<Fp8> codes;
  for (int part = 0; part < kFp8PacketElements / InPacket::size; part++) {
    const InPacket x = load128cs(in + part * InPacket::size);
    for (int j = 0; j < InPacket::size; j += 2) {
      const uint16_t pair = fp8x2_scaled<Fp8>(to_float(x[j]), to_float(x[j + 1]), scale);
      codes[part * InPacket::size + j] = fp8_from_bits<Fp8>(static_cast<uint8_t>(pair & 0xffu));
      codes[part * InPacket::size + j + 1] = fp8_from_bits<Fp8>(static_cast<uint8_t>(pair >> 8));
    }
  }
  return codes;
}

template <class Fp8, class In>
__global__ void fp8_cast_kernel(Fp8* out, const In* in, float scale, const float* device_scale, size_t packets) {
  if (device_scale != nullptr) scale = *device_scale;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packets; p += stride)
    store128(out + p * kFp8PacketElements, fp8_quantize_packet<Fp8>(in + p * kFp8PacketElements, scale));
}

// out (n fp8) = in (n) / scale, the scale read on the device instead where device_scale is not null. n must
// be a multiple of 16 and both pointers 16-byte aligned (the FP8 GEMMs need sizes that are multiples of 16
// anyway).
template <class Fp8, class In>
void fp8_cast(Fp8* out, const In* in, size_t n, float scale, cudaStream_t stream,
              const float* device_scale = nullptr) {
  if (n % kFp8PacketElements != 0)
    throw std::invalid_argument("fp8_cast: the element count " + std::to_string(n) + " is not a multiple of 16");
  if (!is_aligned16(out) || !is_aligned16(in))
    throw std::invalid_argument("fp8_cast: pointers must be 16-byte aligned");
  if (n == 0) return;
  constexpr int kBlock = 256;
  const size_t packets = n / kFp8PacketElements;
  LLMC_LAUNCH_COSTED((KernelCost{static_cast<double>(n) * (sizeof(In) + 1.0), 2.0 * n}), (fp8_cast_kernel<Fp8, In>),
                     dim3(elementwise_grid(packets, kBlock)), dim3(kBlock), 0, stream, out, in, scale, device_scale,
                     packets);
}

}  // namespace llmc
