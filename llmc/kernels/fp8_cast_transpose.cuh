// fp8_cast_transpose: the K-major fp8 copy an FP8 GEMM needs when the matrix is stored the other way round
// (Hopper FP8 GEMMs read both operands K-major): out_t (cols, rows) = fp8(in^T / scale), optionally also the
// straight copy out (rows, cols) from the same read; fp8_transpose: the same for a matrix that is already
// codes (the #89 loss kernel's e5m2 logit gradient). A block quantises (or loads) a 64 x 64 tile (16 inputs
// per thread, 16-byte loads), writes the straight rows directly, stages the codes transposed in shared memory
// and writes the transposed rows as 16-byte stores.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/fp8.h"
#include "llmc/kernels/fp8_cast.cuh"
#include "llmc/kernels/mutant.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace llmc {

inline constexpr int kFp8TransposeTile = 64;
inline constexpr int kFp8TransposeThreads = 256;  // 64 rows x 4 packets of 16
// A staged row is padded by 4 bytes so that threads writing neighbouring columns hit different banks.
inline constexpr int kFp8TransposeRowWords = (kFp8TransposeTile + 4) / 4;

// The 16 codes at in: quantised from In, or loaded as they are when In is the code type itself.
template <class Fp8, class In>
__device__ __forceinline__ Packed128<Fp8> fp8_tile_codes(const In* in, float scale) {
  if constexpr (std::is_same_v<In, Fp8>) {
    return load128cs(in);
  } else {
    return fp8_quantize_packet<Fp8>(in, scale);
  }
}

template <class Fp8, class In>
__global__ void fp8_cast_transpose_kernel(Fp8* out_t, Fp8* out, const In* in, float scale, const float* device_scale,
                                          int rows, int cols) {
  if (device_scale != nullptr) scale = *device_scale;
  __shared__ uint32_t staged_words[kFp8TransposeTile * kFp8TransposeRowWords];
  uint8_t* staged = reinterpret_cast<uint8_t*>(staged_words);  // staged[col][row] of the tile
  constexpr int kPacketsPerRow = kFp8TransposeTile / kFp8PacketElements;
  const int row0 = blockIdx.y * kFp8TransposeTile, col0 = blockIdx.x * kFp8TransposeTile;

  // Quantise: thread t reads 16 consecutive columns of tile row t / 4.
  const int tile_row = threadIdx.x / kPacketsPerRow, tile_col = (threadIdx.x % kPacketsPerRow) * kFp8PacketElements;
  const int row = row0 + tile_row, col = col0 + tile_col;
  if (row < rows && col < cols) {  // rows and cols are multiples of 16: a packet is all in or all out
    const size_t offset = static_cast<size_t>(row) * cols + col;
    const Packed128<Fp8> codes = fp8_tile_codes<Fp8>(in + offset, scale);
    if (out != nullptr) store128(out + offset, codes);
    for (int j = 0; j < kFp8PacketElements; j++)
      staged[(tile_col + j) * kFp8TransposeRowWords * 4 + tile_row] = codes[j].__x;
  }
  LLMC_MUTANT("fp8_cast_transpose.no_barrier", __syncthreads(), (void)0);  // every thread's codes staged first

  // Write: thread t writes 16 consecutive rows of tile column t / 4 as one row segment of out_t.
  const int out_row = col0 + tile_row, out_col = row0 + tile_col;  // in out_t's (cols, rows) coordinates
  if (out_row < cols && out_col < rows) {
    const uint32_t* source = staged_words + tile_row * kFp8TransposeRowWords + tile_col / 4;
    const int4 bits = make_int4(static_cast<int>(source[0]), static_cast<int>(source[1]), static_cast<int>(source[2]),
                                static_cast<int>(source[3]));
    store128(out_t + static_cast<size_t>(out_row) * rows + out_col, Packed128<Fp8>(bits));
  }
}

// out_t (cols, rows) = fp8(in (rows, cols)^T / scale); out (rows, cols) = fp8(in / scale) too unless null;
// the scale read on the device instead where device_scale is not null. rows and cols must be multiples of 16
// (as every FP8 GEMM dimension), the pointers 16-byte aligned.
template <class Fp8, class In>
void fp8_cast_transpose(Fp8* out_t, Fp8* out, const In* in, int rows, int cols, float scale, cudaStream_t stream,
                        const float* device_scale = nullptr) {
  const double elements = static_cast<double>(rows) * cols;  // in read once, one or two copies written
  const KernelCost cost{elements * (sizeof(In) + (out != nullptr ? 2.0 : 1.0)),
                        std::is_same_v<In, Fp8> ? 0.0 : 2.0 * elements};
  if (rows <= 0 || cols <= 0 || rows % kFp8PacketElements != 0 || cols % kFp8PacketElements != 0)
    throw std::invalid_argument("fp8_cast_transpose: rows and cols must be positive multiples of 16 (got " +
                                std::to_string(rows) + " x " + std::to_string(cols) + ")");
  if (!is_aligned16(out_t) || !is_aligned16(out) || !is_aligned16(in))
    throw std::invalid_argument("fp8_cast_transpose: pointers must be 16-byte aligned");
  if (out_t == nullptr || in == nullptr) throw std::invalid_argument("fp8_cast_transpose: null pointer");
  if (ceil_div(rows, kFp8TransposeTile) > 65535)  // the grid's y limit
    throw std::invalid_argument("fp8_cast_transpose: more than 65535 * 64 rows (" + std::to_string(rows) + ")");
  const dim3 grid(static_cast<unsigned>(ceil_div(cols, kFp8TransposeTile)),
                  static_cast<unsigned>(ceil_div(rows, kFp8TransposeTile)));
  LLMC_LAUNCH_COSTED(cost, (fp8_cast_transpose_kernel<Fp8, In>), grid, dim3(kFp8TransposeThreads), 0, stream, out_t,
                     out, in, scale, device_scale, rows, cols);
}

// out_t (cols, rows) = in (rows, cols)^T, codes copied exactly; the same sizes and alignment as above.
template <class Fp8>
void fp8_transpose(Fp8* out_t, const Fp8* in, int rows, int cols, cudaStream_t stream) {
  fp8_cast_transpose(out_t, static_cast<Fp8*>(nullptr), in, rows, cols, 1.0f, stream);
}

}  // namespace llmc
