// Hopper's warpgroup MMA (wgmma, sm_90a) for the project's kernels: shared-memory matrix descriptors for
// K-major bf16 (or e4m3) tiles in the 128-byte swizzle, and the fence / mma_async / commit / wait sequence.
// nvcc: inline PTX (sm_90a only; other targets trap). Emulated build: llmc/emu/wgmma_model.h, which runs each product
// late, at its wait_group, so a missing wait or fence, or a tile overwritten too early, fails in CI.
#pragma once

#include <cstdint>

#include "llmc/cuda/cuda_common.h"
#if defined(LLMC_EMULATION)
#include "llmc/emu/wgmma_model.h"
#endif

namespace llmc {

// Address of a shared-memory pointer in the shared state space (what descriptors and swizzles use).
__device__ inline uint32_t shared_space_address(const void* pointer) {
#if defined(LLMC_EMULATION)
  return emu::shared_window_address(pointer);
#else
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
#endif
}

// Tiles of rows of 64 bf16 (128 bytes) in the 128-byte swizzle: the 16-byte chunk c of row r sits at chunk
// c ^ (r % 8) of its row. Valid when the tile starts at a 1024-byte-aligned shared address, as the hardware
// swizzles on address bits.
inline constexpr int kSwizzle128RowBytes = 128;
__host__ __device__ constexpr int swizzle128_offset(int row, int chunk) {
  return row * kSwizzle128RowBytes + ((chunk ^ (row % 8)) * 16);
}

// Descriptor of a K-major bf16 operand in the 128-byte swizzle whose 8-row groups are 1024 bytes apart,
// starting at `tile` (1024-byte aligned in the shared space) plus `k_byte_offset` (the k-slice: 32 bytes per
// 16 elements, below 128).
__device__ inline uint64_t swizzle128_descriptor(const void* tile, uint32_t k_byte_offset) {
  const uint64_t start = (shared_space_address(tile) + k_byte_offset) & 0x3ffffu;
  const uint64_t leading_byte_offset = 16, stride_byte_offset = 1024, swizzle_128_bytes = 1;
  return (start >> 4) | ((leading_byte_offset >> 4) << 16) | ((stride_byte_offset >> 4) << 32) |
         (swizzle_128_bytes << 62);
}

// Descriptor of an N-major (or M-major) bf16 operand in the 128-byte swizzle: rows of 64 elements along N (128
// bytes), 8 k-rows per 1024-byte group, the next 8 k-rows `k_group_bytes` further, the next 64 columns of N
// `n_group_bytes` further; `tile` 1024-byte aligned in the shared space.
__device__ inline uint64_t swizzle128_mn_descriptor(const void* tile, uint32_t n_group_bytes, uint32_t k_group_bytes) {
  const uint64_t start = shared_space_address(tile) & 0x3ffffu, swizzle_128_bytes = 1;
  return (start >> 4) | (static_cast<uint64_t>(n_group_bytes >> 4) << 16) |
         (static_cast<uint64_t>(k_group_bytes >> 4) << 32) | (swizzle_128_bytes << 62);
}

// fence.proxy.async.shared::cta: this thread's ordinary shared-memory writes (cp.async included) become
// visible to the async proxy that wgmma reads through. Put it after the writes, before the barrier that
// precedes the wgmma. The emulation does not model proxies (docs/emulation.md).
__device__ inline void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

// The 64 fp32 accumulators of an m64n128 wgmma as inline-PTX operands %0..%63, for each form below.
#define LLMC_WGMMA_ACCUMULATOR_REGISTERS                                                                  \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, " \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 "
#define LLMC_WGMMA_ACCUMULATOR_OPERANDS(d)                                                                 \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),   \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),    \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),   \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),   \
      "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),   \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),   \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),   \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// One per thread, declared in the kernel: on the GPU it holds nothing (the hardware tracks the groups); in
// the emulation it holds the products in flight and reports any that no wait covered when the thread exits.
// All four warps of a warpgroup (128 consecutive threads, starting at a multiple of 128) call each member.
class WarpgroupMma {
 public:
  // wgmma.fence: before the first mma_async after the accumulators were written or read by other code.
  __device__ void fence() {
#if defined(LLMC_EMULATION)
    queue_.fence();
#elif defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
  }

  // d (this thread's 64 fp32 of the 64 x 128 accumulator; layout in llmc/emu/wgmma_model.h) = A B^T, plus d
  // when `accumulate`. A: 64 x 16 K-major (swizzle128_descriptor); B: 128 x 16, K-major (swizzle128_descriptor)
  // or, with kBNMajor, N-major (swizzle128_mn_descriptor).
  template <bool kBNMajor>
  __device__ void mma_m64n128k16(float (&d)[64], uint64_t a, uint64_t b, bool accumulate) {
#if defined(LLMC_EMULATION)
    queue_.issue(d, 128, a, b, kBNMajor ? emu::OperandMajor::kMN : emu::OperandMajor::kK, accumulate);
#elif defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" LLMC_WGMMA_ACCUMULATOR_REGISTERS
      "}, %64, %65, p, 1, 1, 0, %67;\n}\n"
      : LLMC_WGMMA_ACCUMULATOR_OPERANDS(d)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)), "n"(kBNMajor ? 1 : 0));
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
  }

  // d += A B^T (d = A B^T without `accumulate`) for e4m3 operands, both K-major (FP8 wgmma takes no other):
  // A 64 x 32, B 128 x 32, each row of 32 bytes a k-slice of a 128-byte swizzled row (swizzle128_descriptor, the
  // bf16 layout's bytes). The FP8 tensor core's accumulator keeps fewer bits than fp32 (llmc/emu/cpu_fp8_gemm.h):
  // promote the sum into an fp32 one every few products.
  __device__ void mma_m64n128k32_e4m3(float (&d)[64], uint64_t a, uint64_t b, bool accumulate) {
#if defined(LLMC_EMULATION)
    queue_.issue(d, 128, a, b, emu::OperandMajor::kK, accumulate, emu::WgmmaInput::kE4M3);
#elif defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {" LLMC_WGMMA_ACCUMULATOR_REGISTERS
      "}, %64, %65, p, 1, 1;\n}\n"
      : LLMC_WGMMA_ACCUMULATOR_OPERANDS(d)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
  }

  // wgmma.commit_group: the mma_async issued since the last commit form the newest group.
  __device__ void commit() {
#if defined(LLMC_EMULATION)
    queue_.commit();
#elif defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
  }

  // wgmma.wait_group: waits until at most kPendingGroups of the newest groups are in flight; the
  // accumulators of the others may then be read.
  template <int kPendingGroups>
  __device__ void wait() {
    static_assert(kPendingGroups >= 0 && kPendingGroups <= 7, "wgmma.wait_group takes 0..7");
#if defined(LLMC_EMULATION)
    queue_.wait(kPendingGroups);
#elif defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPendingGroups) : "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
  }

#if defined(LLMC_EMULATION)
 private:
  emu::WgmmaQueue queue_;
#endif
};

}  // namespace llmc
