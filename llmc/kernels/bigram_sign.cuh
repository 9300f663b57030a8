// The 2026-07-17 record's sign trick on the bigram embedding: row t of the gathered bigram rows is multiplied
// by a row of a fixed +-1 table chosen by the token pair, out[t] = in[t] * signs[(tokens[t-1] XOR tokens[t])
// mod 8192] (row 0 at t = 0; crosses documents). A product with +-1 is exact, so the same kernel is the
// backward (dout -> the gradient to scatter into the table). Elementwise in 16-byte packets.
#pragma once
#include <algorithm>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"
#include "llmc/kernels/packet_io.cuh"
#include "llmc/kernels/reduction.cuh"
#include "llmc/kernels/mutant.h"

namespace llmc {

constexpr int kBigramSignRows = 8192;  // a power of two: mod is a mask

// continues: tokens[-1] is the previous token (a KV cache's continuation), which row 0 pairs with.
__host__ __device__ __forceinline__ int bigram_sign_row(const int* tokens, int t, bool continues) {
  return t == 0 && !continues ? 0
                              : (LLMC_MUTANT("bigram_sign.current_token_only", tokens[t - 1] ^ tokens[t], tokens[t])) &
                                    (kBigramSignRows - 1);
}

template <typename Tx>
__global__ void bigram_sign_kernel(Tx* out, const Tx* in, const int* tokens, const Tx* signs, int T, int C,
                                   bool continues) {
  using Packet = Packed128<Tx>;
  const int packets_per_row = C / Packet::size;
  const size_t total = static_cast<size_t>(T) * packets_per_row;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t p = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += stride) {
    const int t = static_cast<int>(p / packets_per_row), column = static_cast<int>(p % packets_per_row) * Packet::size;
    const Packet x = load128(in + static_cast<size_t>(t) * C + column);
    const Packet s = load128(signs + static_cast<size_t>(bigram_sign_row(tokens, t, continues)) * C + column);
    Packet y;
    for (int j = 0; j < Packet::size; j++) y[j] = from_float<Tx>(to_float(x[j]) * to_float(s[j]));
    store128(out + static_cast<size_t>(t) * C + column, y);
  }
}

// out (T, C) = in (T, C) times the sign rows (signs: kBigramSignRows x C of +-1); tokens (T, non-negative) on
// the device. out may alias in. Forward and backward alike. continues: tokens[-1] is the token before row 0's (a KV
// cache's continuation).
inline void bigram_sign(floatX* out, const floatX* in, const int* tokens, const floatX* signs, int T, int C,
                        cudaStream_t stream, bool continues = false) {
  require_packets<floatX>("bigram_sign", "C", C);
  require_aligned16("bigram_sign", {out, in, signs});
  if (T < 0) throw std::invalid_argument("bigram_sign: negative row count");
  if (T == 0) return;
  constexpr int kBlock = 256;
  const size_t packets = static_cast<size_t>(T) * (C / Packed128<floatX>::size);
  // in read and out written once, the tokens, and at most T rows of the sign table (each row read once).
  const double tc = static_cast<double>(T) * C, sign_rows = std::min(T, kBigramSignRows);
  const KernelCost cost{(2.0 * tc + sign_rows * C) * sizeof(floatX) + 4.0 * T, tc};
  LLMC_LAUNCH_COSTED(cost, bigram_sign_kernel<floatX>, dim3(elementwise_grid(packets, kBlock)), dim3(kBlock), 0, stream,
                     out, in, tokens, signs, T, C, continues);
}

}  // namespace llmc
