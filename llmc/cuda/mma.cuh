// Tensor-core device functions: the only way project kernels use tensor cores. nvcc: inline PTX
// (sm_80+). Emulated build: an exact model of the same instruction through a warp rendezvous,
// following the fragment layouts of the PTX ISA, so tensor-core kernels also run in CI.
#pragma once

#include <cstdint>

#include "llmc/cuda/cuda_common.h"

namespace llmc {

// ---- fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16" with .bf16) ---------------
// lane = 0..31, group = lane / 4, pair = lane % 4. Each 32-bit register holds two bf16, the
// lower-numbered column (A) or row (B) in its low 16 bits.
//   A (16 x 16, row-major "row"):   a[0] = A[group    ][2*pair .. 2*pair+1]
//                                   a[1] = A[group + 8][2*pair .. 2*pair+1]
//                                   a[2] = A[group    ][2*pair+8 .. 2*pair+9]
//                                   a[3] = A[group + 8][2*pair+8 .. 2*pair+9]
//   B (16 x 8, "col": K x N):       b[0] = B[2*pair .. 2*pair+1  ][group]
//                                   b[1] = B[2*pair+8 .. 2*pair+9][group]
//   C, D (16 x 8, fp32):            c[0] = C[group][2*pair],     c[1] = C[group][2*pair+1]
//                                   c[2] = C[group + 8][2*pair], c[3] = C[group + 8][2*pair+1]
// D = A * B + C with fp32 accumulation. All 32 lanes of the warp must execute it together.
//
// Emulated arithmetic: bf16 x bf16 products are exact; the 16 products and C are summed in double
// and rounded once to fp32. Tensor cores accumulate with their own internal precision, so for
// general inputs the GPU may differ in the last bits; where every partial sum is exact in fp32
// (e.g. small integers), both are bitwise equal to a plain fp32 matrix product.

#if defined(LLMC_EMULATION)
namespace emu_mma {

inline float bf16_bits_to_float(uint32_t bits16) { return __uint_as_float((bits16 & 0xffffu) << 16); }

struct MmaInputs {
  const uint32_t* a;
  const uint32_t* b;
  const float* c;
};

inline void resolve_mma_m16n8k16_bf16(const emu::WarpOperation& operation) {
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
void resolve_ldmatrix_x4(const emu::WarpOperation& operation) {
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
    emu::fail_in_kernel(std::string(name) + ": row address of lane " + std::to_string(emu::current_lane()) +
                        " is not 16-byte aligned");
  }
  if (!emu::is_shared_memory(row_address, 16)) {
    emu::fail_in_kernel(std::string(name) + ": row address of lane " + std::to_string(emu::current_lane()) +
                        " is not in the block's shared memory (ldmatrix reads .shared only)");
  }
  LdmatrixRow row;
  std::memcpy(&row, row_address, sizeof row);
  emu::WarpLanePost post;
  post.input = &row;
  post.output = r;
  emu::warp_rendezvous(&resolve_ldmatrix_x4<Transpose>, name, 0xffffffffu, post, __FILE__, __LINE__);
}

}  // namespace emu_mma
#endif  // LLMC_EMULATION

// D = A * B + C on one warp (layouts above).
__device__ inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                         const float (&c)[4]) {
#if defined(LLMC_EMULATION)
  emu_mma::MmaInputs inputs{a, b, c};
  float result[4];
  emu::WarpLanePost post;
  post.input = &inputs;
  post.output = result;
  emu::warp_rendezvous(&emu_mma::resolve_mma_m16n8k16_bf16, "mma_m16n8k16_bf16", 0xffffffffu, post,
                       __FILE__, __LINE__);
  for (int i = 0; i < 4; ++i) d[i] = result[i];
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#elif defined(__CUDA_ARCH__)
  __trap();  // built only for sm_80+; an older device must not silently skip the product
#endif
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: four 8 x 8 matrices of 16-bit elements from
// shared memory. Lane 8*m + r passes the (16-byte aligned) address of row r of matrix m. Lane
// (group, pair) receives in r[m] the elements [group][2*pair], [group][2*pair+1] of matrix m, or
// with .trans the elements [2*pair][group], [2*pair+1][group]. Loading A of the MMA above from a
// row-major 16 x 16 tile: lane passes &tile[lane % 16][(lane / 16) * 8]; loading B (K x N
// row-major) for two n-tiles: .trans with &tile[lane % 16][(lane / 16) * 8], giving b of n-tile 0
// in r[0], r[1] and of n-tile 1 in r[2], r[3].
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row_address) {
#if defined(LLMC_EMULATION)
  emu_mma::ldmatrix_x4<false>(r, row_address, "ldmatrix_x4");
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row_address) {
#if defined(LLMC_EMULATION)
  emu_mma::ldmatrix_x4<true>(r, row_address, "ldmatrix_x4_trans");
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(row_address));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

}  // namespace llmc
