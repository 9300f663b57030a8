// Row access in 16-byte packets for the row-wise kernels (LayerNorm, column sums, classifier, encoder):
// P = 16 / sizeof(Tx) consecutive elements of a row as fp32 values, one 128-bit load or store when the
// launcher found the rows packet-aligned (kVector), else P element accesses with the columns past the
// row's end read as 0 and not written. Both forms give the same values, so a kernel computes the same
// bits either way; the launcher picks kVector with rows_are_packets().
#pragma once

#include <cstdint>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"

namespace llmc {

template <typename Tx>
constexpr int packet_size() {
  return Packed128<Tx>::size;
}

// True when every row of `columns` elements starting at each pointer is a whole number of aligned packets.
template <typename Tx, typename... Pointers>
bool rows_are_packets(long long columns, const Pointers*... pointers) {
  return columns % packet_size<Tx>() == 0 && ((reinterpret_cast<uintptr_t>(pointers) % 16 == 0) && ...);
}

// values[j] = row[c + j] for j < P (0 past C). c is a multiple of P.
template <typename Tx, bool kVector>
__device__ __forceinline__ void load_packet(float (&values)[Packed128<Tx>::size], const Tx* row, int c, int C) {
  constexpr int P = Packed128<Tx>::size;
  if constexpr (kVector) {
    (void)C;
    const Packed128<Tx> packet = load128(row + c);
    for (int j = 0; j < P; j++) values[j] = to_float(packet[j]);
  } else {
    for (int j = 0; j < P; j++) values[j] = c + j < C ? to_float(row[c + j]) : 0.0f;
  }
}

// Streaming form of load_packet for data read once (cache-streaming hint on the GPU).
template <typename Tx, bool kVector>
__device__ __forceinline__ void load_packet_streaming(float (&values)[Packed128<Tx>::size], const Tx* row, int c,
                                                      int C) {
  constexpr int P = Packed128<Tx>::size;
  if constexpr (kVector) {
    (void)C;
    const Packed128<Tx> packet = load128cs(row + c);
    for (int j = 0; j < P; j++) values[j] = to_float(packet[j]);
  } else {
    for (int j = 0; j < P; j++) values[j] = c + j < C ? to_float(row[c + j]) : 0.0f;
  }
}

// row[c + j] = values[j] rounded to Tx, for j < P and c + j < C.
template <typename Tx, bool kVector>
__device__ __forceinline__ void store_packet(Tx* row, int c, int C, const float (&values)[Packed128<Tx>::size]) {
  constexpr int P = Packed128<Tx>::size;
  if constexpr (kVector) {
    (void)C;
    Packed128<Tx> packet;
    for (int j = 0; j < P; j++) packet[j] = from_float<Tx>(values[j]);
    store128(row + c, packet);
  } else {
    for (int j = 0; j < P; j++)
      if (c + j < C) row[c + j] = from_float<Tx>(values[j]);
  }
}

}  // namespace llmc
