// The emulator's model of the tensor-core instructions of llmc/cuda/mma.cuh (mma.m16n8k16 with bf16
// operands and fp32 accumulation, ldmatrix .x4 with and without .trans), executed at a warp rendezvous by
// the fragment layouts of the PTX ISA: bf16 x bf16 products are exact; the 16 products and C are summed in
// double and rounded once to fp32. ldmatrix checks each lane's row address as a GPU faults on it.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include <cuda_runtime.h>

#include "llmc/emu/block_runner.h"

namespace llmc::emu {

inline float bf16_bits_to_float(uint32_t bits16) {
  const uint32_t bits = (bits16 & 0xffffu) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

struct MmaInputs {
  const uint32_t* a;
  const uint32_t* b;
  const float* c;
};

inline void resolve_mma_m16n8k16_bf16(const WarpOperation& operation) {
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const auto& in = *static_cast<const MmaInputs*>(operation.lanes[lane]->input);
    const int group = lane / 4, pair = lane % 4;
    for (int half = 0; half < 2; ++half) {  // low / high 16 bits
      A[group][2 * pair + half] = bf16_bits_to_float(in.a[0] >> (16 * half));
      A[group + 8][2 * pair + half] = bf16_bits_to_float(in.a[1] >> (16 * half));
      A[group][2 * pair + 8 + half] = bf16_bits_to_float(in.a[2] >> (16 * half));
      A[group + 8][2 * pair + 8 + half] = bf16_bits_to_float(in.a[3] >> (16 * half));
      B[2 * pair + half][group] = bf16_bits_to_float(in.b[0] >> (16 * half));
      B[2 * pair + 8 + half][group] = bf16_bits_to_float(in.b[1] >> (16 * half));
    }
    C[group][2 * pair] = in.c[0];
    C[group][2 * pair + 1] = in.c[1];
    C[group + 8][2 * pair] = in.c[2];
    C[group + 8][2 * pair + 1] = in.c[3];
  }
  for (int lane = 0; lane < 32; ++lane) {
    float* d = static_cast<float*>(operation.lanes[lane]->output);
    const int group = lane / 4, pair = lane % 4;
    const int rows[4] = {group, group, group + 8, group + 8};
    const int cols[4] = {2 * pair, 2 * pair + 1, 2 * pair, 2 * pair + 1};
    for (int i = 0; i < 4; ++i) {
      double sum = C[rows[i]][cols[i]];
      for (int k = 0; k < 16; ++k) sum += static_cast<double>(A[rows[i]][k]) * B[k][cols[i]];
      d[i] = static_cast<float>(sum);
    }
  }
}

// One lane's row of an ldmatrix, read from shared memory when the lane executes the instruction.
struct LdmatrixRow {
  uint16_t elements[8];
};

// input: the lane's LdmatrixRow; output: uint32_t[4].
template <bool Transpose>
void resolve_ldmatrix_x4(const WarpOperation& operation) {
  for (int lane = 0; lane < 32; ++lane) {
    uint32_t* out = static_cast<uint32_t*>(operation.lanes[lane]->output);
    const int group = lane / 4, pair = lane % 4;
    for (int matrix = 0; matrix < 4; ++matrix) {
      uint16_t element[2];
      for (int half = 0; half < 2; ++half) {
        // Element [r][c] of matrix m is column c of the row lane 8*m + r read.
        const int r = Transpose ? 2 * pair + half : group;
        const int c = Transpose ? group : 2 * pair + half;
        element[half] = static_cast<const LdmatrixRow*>(operation.lanes[8 * matrix + r]->input)->elements[c];
      }
      out[matrix] = static_cast<uint32_t>(element[0]) | (static_cast<uint32_t>(element[1]) << 16);
    }
  }
}

// The lane's part of ldmatrix: checks the address as the GPU would fault on it and reads the row now,
// so that what another thread writes to it later is not seen (the exchange happens at the rendezvous).
template <bool Transpose>
void ldmatrix_x4(uint32_t (&r)[4], const void* row_address, const char* name) {
  if (reinterpret_cast<uintptr_t>(row_address) % 16 != 0) {
    fail_in_kernel(std::string(name) + ": row address of lane " + std::to_string(current_lane()) +
                        " is not 16-byte aligned");
  }
  if (!is_shared_memory(row_address, 16)) {
    fail_in_kernel(std::string(name) + ": row address of lane " + std::to_string(current_lane()) +
                        " is not in the block's shared memory (ldmatrix reads .shared only)");
  }
  LdmatrixRow row;
  std::memcpy(&row, row_address, sizeof row);
  WarpLanePost post;
  post.input = &row;
  post.output = r;
  warp_rendezvous(&resolve_ldmatrix_x4<Transpose>, name, 0xffffffffu, post, __FILE__, __LINE__);
}

// The lane's part of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (all 32 lanes together).
inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4],
                              const char* file, int line) {
  MmaInputs inputs{a, b, c};
  float result[4];
  WarpLanePost post;
  post.input = &inputs;
  post.output = result;
  warp_rendezvous(&resolve_mma_m16n8k16_bf16, "mma_m16n8k16_bf16", 0xffffffffu, post, file, line);
  for (int i = 0; i < 4; ++i) d[i] = result[i];
}

}  // namespace llmc::emu
