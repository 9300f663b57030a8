// Asynchronous global -> shared copies of 16 or 4 bytes (cp.async, sm_80+) for pipelined kernels: a thread
// issues copies, closes them into a group with commit(), and wait<N>() blocks until all but its N
// newest groups have landed. The copies of other threads become visible after a __syncthreads that
// follows their wait. nvcc: inline PTX. Emulated build: llmc/emu/cp_async_queue.h, where a copy is poison
// until its wait, so a missing wait or barrier is caught in CI.
#pragma once

#include <cstdint>

#include "llmc/cuda/cuda_common.h"

namespace llmc {

// One per thread, declared in the kernel: on the GPU it holds nothing (the hardware tracks the
// groups); in the emulation it holds the thread's copies in flight and reports, when the thread
// exits, any copy that no wait covered.
class AsyncCopies {
 public:
  // 16 bytes, cached in L2 only (.cg: for tiles read once by this block).
  __device__ void copy16(void* shared_destination, const void* global_source) {
    copy16_or_zero(shared_destination, global_source, true);
  }
  // 16 bytes when `copy`, else 16 zero bytes without reading the source (rows past the end).
  __device__ void copy16_or_zero(void* shared_destination, const void* global_source, bool copy) {
#if defined(LLMC_EMULATION)
    queue_.issue(shared_destination, global_source, 16, copy ? 16 : 0);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned destination = static_cast<unsigned>(__cvta_generic_to_shared(shared_destination));
    const int source_bytes = copy ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(global_source),
                 "r"(source_bytes)
                 : "memory");
#elif defined(__CUDA_ARCH__)
    __trap();  // built only for sm_80+
#endif
  }
  // 16 bytes, cached in L1 as well (.ca: for data other blocks on this SM read too).
  __device__ void copy16_cached(void* shared_destination, const void* global_source) {
#if defined(LLMC_EMULATION)
    queue_.issue(shared_destination, global_source, 16, 16);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned destination = static_cast<unsigned>(__cvta_generic_to_shared(shared_destination));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" ::"r"(destination), "l"(global_source) : "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
  }
  // 4 bytes (.ca: the only form below 16 bytes) when `copy`, else 4 zero bytes without reading.
  __device__ void copy4_or_zero(void* shared_destination, const void* global_source, bool copy) {
#if defined(LLMC_EMULATION)
    queue_.issue(shared_destination, global_source, 4, copy ? 4 : 0);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned destination = static_cast<unsigned>(__cvta_generic_to_shared(shared_destination));
    const int source_bytes = copy ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(destination), "l"(global_source),
                 "r"(source_bytes)
                 : "memory");
#elif defined(__CUDA_ARCH__)
    __trap();
#endif
  }
  // Closes the copies issued since the previous commit into one group (possibly empty).
  __device__ void commit() {
#if defined(LLMC_EMULATION)
    queue_.commit();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
  }
  // Waits until at most `kPendingGroups` of this thread's newest committed groups are in flight.
  template <int kPendingGroups>
  __device__ void wait() {
    static_assert(kPendingGroups >= 0, "cp.async.wait_group counts groups: 0 or more");
#if defined(LLMC_EMULATION)
    queue_.wait(kPendingGroups);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kPendingGroups) : "memory");
#endif
  }

#if defined(LLMC_EMULATION)
 private:
  emu::CpAsyncQueue queue_;
#endif
};

}  // namespace llmc
