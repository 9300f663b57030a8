// Tensor-core device functions: the only way project kernels use tensor cores. nvcc: inline PTX
// (sm_80+). Emulated build: the emulator's exact model of the same instructions (llmc/emu/mma_model.h,
// through a warp rendezvous, following the fragment layouts of the PTX ISA), so tensor-core kernels also
// run in CI.
#pragma once

#include <cstdint>

#include "llmc/cuda/cuda_common.h"
#if defined(LLMC_EMULATION)
#include "llmc/emu/mma_model.h"
#endif

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
// The emulated build runs the emulator's model of both instructions (llmc/emu/mma_model.h): exact bf16
// products summed in double and rounded once to fp32, so for general inputs the GPU may differ in the
// last bits; where every partial sum is exact in fp32 (e.g. small integers), both are bitwise equal to a
// plain fp32 matrix product.


// D = A * B + C on one warp (layouts above).
__device__ inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                         const float (&c)[4]) {
#if defined(LLMC_EMULATION)
  emu::mma_m16n8k16_bf16(d, a, b, c, __FILE__, __LINE__);
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
  emu::ldmatrix_x4<false>(r, row_address, "ldmatrix_x4");
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
  emu::ldmatrix_x4<true>(r, row_address, "ldmatrix_x4_trans");
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
