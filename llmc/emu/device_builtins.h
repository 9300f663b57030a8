// Device-side CUDA for the emulated (g++) build: qualifiers, threadIdx & co, __syncthreads, warp
// shuffles and votes, atomics, the math intrinsics kernels use, and cache-hinted loads/stores.
// Included through llmc/cuda/cuda_common.h after the real CUDA headers; never include it directly.
#pragma once

#ifndef LLMC_EMULATION
#error "llmc/emu/device_builtins.h is for the emulated build (LLMC_EMULATION) only"
#endif

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "llmc/emu/block_runner.h"

// ---- qualifiers ------------------------------------------------------------------------------
// The CUDA headers define __global__/__device__/__host__ as nothing for a host compiler.
// Shared memory: one block runs at a time in the whole process (the emulated device serialises
// blocks), so a plain static is per-block storage, and AddressSanitizer puts redzones around it. The
// device finds a kernel's __shared__ variables in the symbol table (kernel_symbols.h) and poisons them
// before every block; declare them in the kernel's body (not in a __device__ helper) for that.
#undef __shared__
#define __shared__ static
#undef __constant__
#define __constant__
// __launch_bounds__(max_threads, ...) becomes an ABI tag of the kernel's mangled name, where the device
// reads it at launch (the one channel from an attribute of a template kernel to run time). The device
// checks it when the first argument is an integer literal or a macro expanding to one, and the kernel
// is not a template in the global namespace (GCC drops ABI tags there).
#define LLMC_EMU_STRINGIFY_(x) #x
#define LLMC_EMU_STRINGIFY(x) LLMC_EMU_STRINGIFY_(x)
#define LLMC_EMU_LAUNCH_BOUNDS_(max_threads, ...) \
  __attribute__((abi_tag("llmc_launch_bounds_" LLMC_EMU_STRINGIFY(max_threads))))
#define __launch_bounds__(...) LLMC_EMU_LAUNCH_BOUNDS_(__VA_ARGS__, 0)
#undef __grid_constant__
#define __grid_constant__

// ---- host-side C++ overloads that cuda_runtime.h gives only to nvcc -----------------------------
template <class Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attribute, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attribute, value);
}

// ---- builtin variables -----------------------------------------------------------------------
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#define threadIdx (::llmc::emu::current_thread_builtins->thread_idx)
#define blockIdx (::llmc::emu::current_thread_builtins->block_idx)
#define blockDim (::llmc::emu::current_thread_builtins->block_dim)
#define gridDim (::llmc::emu::current_thread_builtins->grid_dim)
inline constexpr int warpSize = 32;

// ---- block barrier ---------------------------------------------------------------------------
// The call site is recorded so that a barrier reached from divergent code is reported precisely.
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::llmc::emu::block_barrier(file, line);
}
// Memory fences: every emulated thread of a block runs on one OS thread and blocks are serialised, so
// kernel memory is already ordered; only the compiler must not reorder. (ThreadSanitizer sees no
// ordering from a fence alone, as the CUDA memory model gives none without a matching atomic.)
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

[[noreturn]] inline void __trap() { ::llmc::emu::fail_in_kernel("__trap() called"); }

// ---- warp operations -------------------------------------------------------------------------
namespace llmc::emu {

template <class T>
struct is_shuffle_type
    : std::bool_constant<std::is_arithmetic_v<T> || std::is_same_v<T, __nv_bfloat16> ||
                         std::is_same_v<T, __nv_bfloat162> || std::is_same_v<T, __half> ||
                         std::is_same_v<T, __half2>> {};

enum class ShuffleMode { kIndex, kUp, kDown, kXor };

// PTX shfl.sync semantics: arg0 = b (lane / delta / xor mask), arg1 = c (segment mask << 8 | clamp).
template <ShuffleMode Mode, size_t Bytes>
void resolve_shuffle(const WarpOperation& operation) {
  for (int lane = 0; lane < 32; ++lane) {
    if (!((operation.mask >> lane) & 1u)) continue;
    const WarpLanePost& post = *operation.lanes[lane];
    const int b = post.arg0 & 31;
    const int clamp = post.arg1 & 31;
    const int segment_mask = (post.arg1 >> 8) & 31;
    const int max_lane = (lane & segment_mask) | (clamp & ~segment_mask);
    const int min_lane = lane & segment_mask;
    int source = lane;
    bool in_range = false;
    switch (Mode) {
      case ShuffleMode::kUp: source = lane - b; in_range = source >= max_lane; break;
      case ShuffleMode::kDown: source = lane + b; in_range = source <= max_lane; break;
      case ShuffleMode::kXor: source = lane ^ b; in_range = source <= max_lane; break;
      case ShuffleMode::kIndex: source = min_lane | (b & ~segment_mask); in_range = source <= max_lane; break;
    }
    if (!in_range) source = lane;
    if (!((operation.mask >> source) & 1u)) {
      fail_in_kernel("warp shuffle: lane " + std::to_string(lane) + " reads lane " +
                     std::to_string(source) + ", which is not in the mask (undefined on a GPU)");
    }
    std::memcpy(post.output, operation.lanes[source]->input, Bytes);
  }
}

inline int check_shuffle_width(int width) {
  if (width < 1 || width > 32 || (width & (width - 1)) != 0) {
    fail_in_kernel("warp shuffle width " + std::to_string(width) + " is not a power of two in 1..32");
  }
  return width;
}

template <ShuffleMode Mode, class T>
T shuffle(const char* name, unsigned mask, T value, int b, int c, const char* file, int line) {
  static_assert(is_shuffle_type<T>::value && sizeof(T) <= 8,
                "warp shuffles take arithmetic types, __half(2) and __nv_bfloat16(2) only");
  T result;
  WarpLanePost post;
  post.input = &value;
  post.output = &result;
  post.arg0 = b;
  post.arg1 = c;
  warp_rendezvous(&resolve_shuffle<Mode, sizeof(T)>, name, mask, post, file, line);
  return result;
}

enum class VoteMode { kBallot, kAll, kAny };

template <VoteMode Mode>
void resolve_vote(const WarpOperation& operation) {
  unsigned ballot = 0;
  for (int lane = 0; lane < 32; ++lane) {
    if (((operation.mask >> lane) & 1u) && *static_cast<const int*>(operation.lanes[lane]->input)) {
      ballot |= 1u << lane;
    }
  }
  unsigned result = ballot;
  if (Mode == VoteMode::kAll) result = ballot == operation.mask ? 1u : 0u;
  if (Mode == VoteMode::kAny) result = ballot != 0 ? 1u : 0u;
  for (int lane = 0; lane < 32; ++lane) {
    if ((operation.mask >> lane) & 1u) *static_cast<unsigned*>(operation.lanes[lane]->output) = result;
  }
}

template <VoteMode Mode>
unsigned vote(const char* name, unsigned mask, int predicate, const char* file, int line) {
  const int normalized = predicate != 0;
  unsigned result = 0;
  WarpLanePost post;
  post.input = &normalized;
  post.output = &result;
  warp_rendezvous(&resolve_vote<Mode>, name, mask, post, file, line);
  return result;
}

inline void resolve_syncwarp(const WarpOperation&) {}

// warp_butterfly of llmc/kernels/reduction.cuh as one warp operation: in each round (offset = group / 2, ..., 1)
// every lane combines its value with lane ^ offset's, the additions (or maxima) and the order of the
// __shfl_xor_sync loop a GPU runs, so each lane gets the same bits; one rendezvous instead of one per round, each
// of which costs the emulation a fiber switch per lane. arg0 = group, the same in every lane; all 32 lanes.
template <bool kSum>
void resolve_xor_butterfly(const WarpOperation& operation) {
  const int group = operation.lanes[0]->arg0;
  float values[32];
  for (int lane = 0; lane < 32; ++lane) {
    if (operation.lanes[lane]->arg0 != group) {
      fail_in_kernel("warp butterfly: lane " + std::to_string(lane) + " reduces groups of " +
                     std::to_string(operation.lanes[lane]->arg0) + " lanes, lane 0 groups of " +
                     std::to_string(group) + " (a different number of shuffles: undefined on a GPU)");
    }
    values[lane] = *static_cast<const float*>(operation.lanes[lane]->input);
  }
  for (int offset = group / 2; offset > 0; offset /= 2) {
    float next[32];
    for (int lane = 0; lane < 32; ++lane) {
      const float other = values[lane ^ offset];
      next[lane] = kSum ? values[lane] + other : fmaxf(values[lane], other);
    }
    std::memcpy(values, next, sizeof values);
  }
  for (int lane = 0; lane < 32; ++lane) *static_cast<float*>(operation.lanes[lane]->output) = values[lane];
}

template <bool kSum>
float xor_butterfly(float value, int group, const char* file, int line) {
  if (group < 1 || group > 32) fail_in_kernel("warp butterfly over groups of " + std::to_string(group) + " lanes");
  if (group == 1) return value;  // no shuffle at all, as in the loop
  float result;
  WarpLanePost post;
  post.input = &value;
  post.output = &result;
  post.arg0 = group;
  const char* name = kSum ? "__shfl_xor_sync (butterfly sum)" : "__shfl_xor_sync (butterfly max)";
  warp_rendezvous(&resolve_xor_butterfly<kSum>, name, 0xffffffffu, post, file, line);
  return result;
}

}  // namespace llmc::emu

template <class T>
T __shfl_sync(unsigned mask, T value, int src_lane, int width = 32,
              const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const int c = ((32 - ::llmc::emu::check_shuffle_width(width)) << 8) | 0x1f;
  return ::llmc::emu::shuffle<::llmc::emu::ShuffleMode::kIndex>("__shfl_sync", mask, value,
                                                                 src_lane, c, file, line);
}
template <class T>
T __shfl_up_sync(unsigned mask, T value, unsigned delta, int width = 32,
                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const int c = (32 - ::llmc::emu::check_shuffle_width(width)) << 8;
  return ::llmc::emu::shuffle<::llmc::emu::ShuffleMode::kUp>(
      "__shfl_up_sync", mask, value, static_cast<int>(delta), c, file, line);
}
template <class T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32,
                   const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const int c = ((32 - ::llmc::emu::check_shuffle_width(width)) << 8) | 0x1f;
  return ::llmc::emu::shuffle<::llmc::emu::ShuffleMode::kDown>(
      "__shfl_down_sync", mask, value, static_cast<int>(delta), c, file, line);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32,
                  const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  const int c = ((32 - ::llmc::emu::check_shuffle_width(width)) << 8) | 0x1f;
  return ::llmc::emu::shuffle<::llmc::emu::ShuffleMode::kXor>("__shfl_xor_sync", mask, value,
                                                               lane_mask, c, file, line);
}
inline unsigned __ballot_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  return ::llmc::emu::vote<::llmc::emu::VoteMode::kBallot>("__ballot_sync", mask, predicate, file, line);
}
inline int __all_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  return static_cast<int>(
      ::llmc::emu::vote<::llmc::emu::VoteMode::kAll>("__all_sync", mask, predicate, file, line));
}
inline int __any_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  return static_cast<int>(
      ::llmc::emu::vote<::llmc::emu::VoteMode::kAny>("__any_sync", mask, predicate, file, line));
}
// The one warp operation that orders memory (among the lanes in the mask), as in CUDA.
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  ::llmc::emu::WarpLanePost post;
  post.flags = ::llmc::emu::kWarpOperationOrdersMemory;
  ::llmc::emu::warp_rendezvous(&::llmc::emu::resolve_syncwarp, "__syncwarp", mask, post, file, line);
}

// ---- atomics ---------------------------------------------------------------------------------
// Relaxed read-modify-writes, as on a GPU. Each first lets the block's other threads run, so that
// compare-and-swap loops really contend (and retry); floating-point ones are such loops over the
// value's bytes, rounding to nearest even as the GPU does.
namespace llmc::emu {

template <class T>
T atomic_fetch_add(T* address, T value) {
  yield_thread();
  return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
}

// Replaces *address by update(*address) atomically; returns the old value.
template <class T, class Update>
T atomic_update(T* address, Update update) {
  yield_thread();
  T old;
  __atomic_load(address, &old, __ATOMIC_RELAXED);
  T desired = update(old);
  while (!__atomic_compare_exchange(address, &old, &desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    desired = update(old);
  }
  return old;
}

template <class T>
T atomic_exchange(T* address, T value) {
  yield_thread();
  T old;
  __atomic_exchange(address, &value, &old, __ATOMIC_RELAXED);
  return old;
}

template <class T>
T atomic_compare_and_swap(T* address, T compare, T value) {
  yield_thread();
  __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;  // holds the old value whether or not the exchange happened
}

}  // namespace llmc::emu

inline int atomicAdd(int* address, int value) { return ::llmc::emu::atomic_fetch_add(address, value); }
inline unsigned atomicAdd(unsigned* address, unsigned value) { return ::llmc::emu::atomic_fetch_add(address, value); }
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long value) {
  return ::llmc::emu::atomic_fetch_add(address, value);
}
inline float atomicAdd(float* address, float value) {
  return ::llmc::emu::atomic_update(address, [value](float old) { return old + value; });
}
inline double atomicAdd(double* address, double value) {
  return ::llmc::emu::atomic_update(address, [value](double old) { return old + value; });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* address, __nv_bfloat16 value) {
  return ::llmc::emu::atomic_update(address, [value](__nv_bfloat16 old) {
    return __float2bfloat16(__bfloat162float(old) + __bfloat162float(value));
  });
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* address, __nv_bfloat162 value) {
  return ::llmc::emu::atomic_update(address, [value](__nv_bfloat162 old) {
    __nv_bfloat162 sum;
    sum.x = __float2bfloat16(__bfloat162float(old.x) + __bfloat162float(value.x));
    sum.y = __float2bfloat16(__bfloat162float(old.y) + __bfloat162float(value.y));
    return sum;
  });
}
inline int atomicSub(int* address, int value) {  // wraps around, as on a GPU
  return ::llmc::emu::atomic_update(
      address, [value](int old) { return static_cast<int>(static_cast<unsigned>(old) - static_cast<unsigned>(value)); });
}
inline unsigned atomicSub(unsigned* address, unsigned value) {
  return ::llmc::emu::atomic_update(address, [value](unsigned old) { return old - value; });
}
inline int atomicExch(int* address, int value) { return ::llmc::emu::atomic_exchange(address, value); }
inline unsigned atomicExch(unsigned* address, unsigned value) { return ::llmc::emu::atomic_exchange(address, value); }
inline float atomicExch(float* address, float value) { return ::llmc::emu::atomic_exchange(address, value); }
inline int atomicCAS(int* address, int compare, int value) {
  return ::llmc::emu::atomic_compare_and_swap(address, compare, value);
}
inline unsigned atomicCAS(unsigned* address, unsigned compare, unsigned value) {
  return ::llmc::emu::atomic_compare_and_swap(address, compare, value);
}
inline unsigned long long atomicCAS(unsigned long long* address, unsigned long long compare,
                                    unsigned long long value) {
  return ::llmc::emu::atomic_compare_and_swap(address, compare, value);
}
inline int atomicMax(int* address, int value) {
  return ::llmc::emu::atomic_update(address, [value](int old) { return old < value ? value : old; });
}
inline unsigned atomicMax(unsigned* address, unsigned value) {
  return ::llmc::emu::atomic_update(address, [value](unsigned old) { return old < value ? value : old; });
}
inline int atomicMin(int* address, int value) {
  return ::llmc::emu::atomic_update(address, [value](int old) { return value < old ? value : old; });
}
inline unsigned atomicMin(unsigned* address, unsigned value) {
  return ::llmc::emu::atomic_update(address, [value](unsigned old) { return value < old ? value : old; });
}

// ---- integer and float helpers of device code ------------------------------------------------
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

inline int __float_as_int(float x) { int r; std::memcpy(&r, &x, 4); return r; }
inline unsigned __float_as_uint(float x) { unsigned r; std::memcpy(&r, &x, 4); return r; }
inline float __int_as_float(int x) { float r; std::memcpy(&r, &x, 4); return r; }
inline float __uint_as_float(unsigned x) { float r; std::memcpy(&r, &x, 4); return r; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}

// Math: the standard functions (expf, logf, tanhf, erff, ...) are glibc's, which are at least as
// accurate as CUDA's; results may differ from the GPU in the last bits. The fast intrinsics map
// to the accurate functions. Correctly rounded ones (_rn) are exact here as on the GPU.
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fsub_rn(float x, float y) { return x - y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fdiv_rn(float x, float y) { return x / y; }
inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
inline float __saturatef(float x) { return x != x ? 0.0f : fminf(fmaxf(x, 0.0f), 1.0f); }
inline int __float2int_rn(float x) { return static_cast<int>(nearbyintf(x)); }
inline int __float2int_rz(float x) { return static_cast<int>(x); }
inline float __int2float_rn(int x) { return static_cast<float>(x); }

// ---- cache-hinted loads and stores: plain accesses here ---------------------------------------
template <class T> inline T __ldg(const T* address) { return *address; }
template <class T> inline T __ldcs(const T* address) { return *address; }
template <class T> inline T __ldcg(const T* address) { return *address; }
template <class T> inline T __ldca(const T* address) { return *address; }
template <class T> inline T __ldlu(const T* address) { return *address; }
template <class T> inline void __stcs(T* address, T value) { *address = value; }
template <class T> inline void __stcg(T* address, T value) { *address = value; }
template <class T> inline void __stwb(T* address, T value) { *address = value; }
template <class T> inline void __stwt(T* address, T value) { *address = value; }

#include "llmc/emu/cp_async_queue.h"  // cp.async: copies that land only at their wait_group
