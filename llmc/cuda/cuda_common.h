// What all project CUDA code includes, in both targets (nvcc for GPUs; g++ with LLMC_EMULATION for
// the CUDA-on-CPU emulation): checked runtime calls (CUDA_CHECK; CUDA_REPORT in destructors; cuBLAS's
// sibling: llmc/cuda/cublas_check.h), the kernel-launch helper (LLMC_LAUNCH), dynamic shared memory
// (LLMC_DYNAMIC_SHARED; LLMC_LAUNCH_COSTED also states the launch's bytes and FLOPs for benchmarks) and
// 16-byte packed loads/stores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "llmc/base/cleanup_report.h"
#include "llmc/base/launch_observer.h"

#if defined(LLMC_EMULATION)
#if defined(__CUDACC__)
#error "LLMC_EMULATION is for the g++ build; nvcc compiles the real thing"
#endif
#include "llmc/emu/device_builtins.h"
#include "llmc/emu/emulated_device.h"
#endif

// ---- checked runtime calls -------------------------------------------------------------------
namespace llmc {

// Thrown for every failed CUDA runtime call or kernel launch; the message names the call,
// the source location and CUDA's error string.
class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

[[noreturn]] inline void throw_cuda_error(cudaError_t code, const char* call, const char* file,
                                          int line, const std::string& detail = "") {
  std::string message = std::string("CUDA error ") + cudaGetErrorName(code) + " (" +
                        cudaGetErrorString(code) + ") in " + call + " at " + file + ":" +
                        std::to_string(line);
  if (!detail.empty()) message += ": " + detail;
  throw CudaError(code, message);
}

inline void cuda_check(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess) throw_cuda_error(code, call, file, line);
}

inline void cuda_report(cudaError_t code, const char* call, const char* file, int line) {
  if (code != cudaSuccess) report_cleanup_failure(call, file, line, cudaGetErrorString(code));
}

}  // namespace llmc

#define CUDA_CHECK(call) ::llmc::cuda_check((call), #call, __FILE__, __LINE__)
// For destructors: reports a failure (llmc/base/cleanup_report.h) instead of throwing.
#define CUDA_REPORT(call) ::llmc::cuda_report((call), #call, __FILE__, __LINE__)

// ---- kernel launches -------------------------------------------------------------------------
// LLMC_LAUNCH(kernel, grid, block, dynamic_shared_bytes, stream, args...) replaces
// kernel<<<grid, block, dynamic_shared_bytes, stream>>>(args...) and throws llmc::CudaError naming
// the kernel if the launch is rejected. A template kernel with several arguments goes in
// parentheses: LLMC_LAUNCH((my_kernel<float, 4>), ...).
#define LLMC_LAUNCH(kernel, grid, block, dynamic_shared_bytes, stream, ...)                       \
  ::llmc::observed_launch_kernel(kernel, #kernel, __FILE__, __LINE__, ::llmc::KernelCost{}, grid, block, \
                                 dynamic_shared_bytes, stream, ##__VA_ARGS__)
// The same with the launch's cost (llmc/base/launch_observer.h): what benchmarks report for it. A launcher
// that accounts its kernels passes the bytes and FLOPs of this one launch.
#define LLMC_LAUNCH_COSTED(cost, kernel, grid, block, dynamic_shared_bytes, stream, ...)                  \
  ::llmc::observed_launch_kernel(kernel, #kernel, __FILE__, __LINE__, cost, grid, block, dynamic_shared_bytes, \
                                 stream, ##__VA_ARGS__)

#if defined(__CUDACC__)

namespace llmc {
template <typename... KernelParams, typename... Args>
void launch_kernel(void (*kernel)(KernelParams...), const char* kernel_name, const char* file,
                   int line, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                   cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(KernelParams) == sizeof...(Args), "LLMC_LAUNCH: wrong argument count");
  kernel<<<grid, block, dynamic_shared_bytes, stream>>>(std::forward<Args>(args)...);
  const cudaError_t code = cudaGetLastError();
  if (code != cudaSuccess) {
    throw_cuda_error(code, (std::string("launch of kernel ") + kernel_name).c_str(), file, line);
  }
}
}  // namespace llmc

// Dynamic shared memory of the block, as a `type*` named `name`.
#define LLMC_DYNAMIC_SHARED(type, name)                      \
  extern __shared__ __align__(16) unsigned char llmc_dynamic_shared_bytes_[]; \
  type* name = reinterpret_cast<type*>(llmc_dynamic_shared_bytes_)

#elif defined(LLMC_EMULATION)

namespace llmc {
template <typename... KernelParams, typename... Args>
void launch_kernel(void (*kernel)(KernelParams...), const char* kernel_name, const char* file,
                   int line, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                   cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(KernelParams) == sizeof...(Args), "LLMC_LAUNCH: wrong argument count");
  // Arguments are converted and copied at launch time, as CUDA does; every thread then gets its
  // own copy of the parameters.
  auto params = std::make_shared<std::tuple<std::decay_t<KernelParams>...>>(std::forward<Args>(args)...);
  emu::KernelLaunchInfo info;
  info.kernel_name = kernel_name;
  info.file = file;
  info.line = line;
  info.kernel_address = reinterpret_cast<const void*>(kernel);
  info.grid_dim = grid;
  info.block_dim = block;
  info.dynamic_shared_bytes = dynamic_shared_bytes;
  // A GPU faults on pointer arguments into pageable host memory: the device rejects them at launch.
  std::vector<const void*> pointer_arguments;
  std::apply(
      [&](const auto&... param) {
        (
            [&](const auto& value) {
              using Param = std::decay_t<decltype(value)>;
              if constexpr (std::is_pointer_v<Param> && std::is_object_v<std::remove_pointer_t<Param>>) {
                using Pointee = std::remove_cv_t<std::remove_pointer_t<Param>>;
                pointer_arguments.push_back(const_cast<const Pointee*>(value));
              }
            }(param),
            ...);
      },
      *params);
  std::string detail;
  const cudaError_t code = emu::EmulatedDevice::instance().launch(
      info, [kernel, params] { std::apply(kernel, *params); }, pointer_arguments, stream, &detail);
  if (code != cudaSuccess) {
    throw_cuda_error(code, (std::string("launch of kernel ") + kernel_name).c_str(), file, line, detail);
  }
}
}  // namespace llmc

#define LLMC_DYNAMIC_SHARED(type, name) \
  type* name = static_cast<type*>(::llmc::emu::current_dynamic_shared_memory())

#endif  // __CUDACC__ / LLMC_EMULATION

// Asks nvcc's device pass to unroll the loop that follows: a loop whose index picks an array's registers must
// unroll, or the array goes to local memory. Nothing for the emulation's host compiler.
#if defined(__CUDA_ARCH__)
#define LLMC_UNROLL _Pragma("unroll")
#else
#define LLMC_UNROLL
#endif

namespace llmc {
// Returns at once when `event` has completed; otherwise waits for it. The query's cudaErrorNotReady is
// no error, but the runtime keeps it as the last error, where a later launch check would take it for
// its own: it is cleared here (any other error is reported).
inline void wait_unless_complete(cudaEvent_t event) {
  const cudaError_t state = cudaEventQuery(event);
  if (state != cudaErrorNotReady) {
    CUDA_CHECK(state);
    return;
  }
  const cudaError_t last = cudaGetLastError();
  if (last != cudaErrorNotReady) CUDA_CHECK(last);
  CUDA_CHECK(cudaEventSynchronize(event));
}

// cudaMemsetAsync and cudaMemcpyAsync as a step uses them, told to the thread's LaunchObserver like a
// kernel (llmc/base/launch_observer.h): a benchmark counts them and their bytes, and may skip them.
inline void memset_async(void* pointer, int value, size_t bytes, cudaStream_t stream) {
  observed_launch(LaunchKind::kMemset, stream, KernelCost{static_cast<double>(bytes), 0.0},
                  [] { return std::string("cudaMemsetAsync"); },
                  [&] { CUDA_CHECK(cudaMemsetAsync(pointer, value, bytes, stream)); });
}
inline void memcpy_async(void* destination, const void* source, size_t bytes, cudaMemcpyKind kind,
                         cudaStream_t stream) {
  const char* name = kind == cudaMemcpyHostToDevice ? "cudaMemcpyAsync host to device"
                     : kind == cudaMemcpyDeviceToHost ? "cudaMemcpyAsync device to host"
                                                      : "cudaMemcpyAsync";
  observed_launch(LaunchKind::kCopy, stream, KernelCost{static_cast<double>(bytes), 0.0},
                  [&] { return std::string(name); },
                  [&] { CUDA_CHECK(cudaMemcpyAsync(destination, source, bytes, kind, stream)); });
}
}  // namespace llmc

#if defined(__CUDACC__) || defined(LLMC_EMULATION)
namespace llmc {
// launch_kernel, told to the thread's LaunchObserver (if any), which may skip it (llmc/base/launch_observer.h).
template <typename... KernelParams, typename... Args>
void observed_launch_kernel(void (*kernel)(KernelParams...), const char* kernel_name, const char* file, int line,
                            const KernelCost& cost, dim3 grid, dim3 block, size_t dynamic_shared_bytes,
                            cudaStream_t stream, Args&&... args) {
  observed_launch(
      LaunchKind::kKernel, stream, cost, [&] { return std::string(kernel_name); },
      [&] {
        launch_kernel(kernel, kernel_name, file, line, grid, block, dynamic_shared_bytes, stream,
                      std::forward<Args>(args)...);
      });
}
}  // namespace llmc
#endif

// ---- 16-byte packed loads and stores ---------------------------------------------------------
// Device code in both targets (not available to plain host C++ of the nvcc target).
#if defined(__CUDACC__) || defined(LLMC_EMULATION)

namespace llmc {

// 16 bytes of `Element`, loaded and stored as one 128-bit access (4 floats or 8 bf16).
template <class Element>
struct alignas(16) Packed128 {
  static constexpr int size = static_cast<int>(16 / sizeof(Element));
  static_assert(16 % sizeof(Element) == 0, "Packed128 needs an element size dividing 16");
  Element payload[size];

  Packed128() = default;
  __device__ __host__ explicit Packed128(int4 bits) { std::memcpy(static_cast<void*>(payload), &bits, 16); }
  __device__ __host__ static Packed128 constant(Element value) {
    Packed128 result;
    for (int i = 0; i < size; ++i) result.payload[i] = value;
    return result;
  }
  __device__ __host__ static Packed128 zeros() { return constant(Element(0.0f)); }
  __device__ __host__ Element& operator[](int index) { return payload[index]; }
  __device__ __host__ const Element& operator[](int index) const { return payload[index]; }
  __device__ __host__ int4 get_bits() const {
    int4 bits;
    std::memcpy(&bits, payload, 16);
    return bits;
  }
};

namespace detail {
// The emulation checks what a GPU would fault on (misaligned 128-bit access) and copies bytes
// with memcpy (g++ may exploit strict aliasing on a reinterpret_cast); nvcc gets one vector access.
template <class Load>
__device__ int4 load_bits(const void* address, const char* what, Load hinted_load) {
#if defined(LLMC_EMULATION)
  (void)hinted_load;
  if (reinterpret_cast<uintptr_t>(address) % 16 != 0) {
    emu::fail_in_kernel(std::string(what) + ": address not 16-byte aligned (misaligned address on a GPU)");
  }
  int4 bits;
  std::memcpy(&bits, address, 16);
  return bits;
#else
  return hinted_load(reinterpret_cast<const int4*>(address));
#endif
}
template <class Store>
__device__ void store_bits(void* address, int4 bits, const char* what, Store hinted_store) {
#if defined(LLMC_EMULATION)
  (void)hinted_store;
  if (reinterpret_cast<uintptr_t>(address) % 16 != 0) {
    emu::fail_in_kernel(std::string(what) + ": address not 16-byte aligned (misaligned address on a GPU)");
  }
  std::memcpy(address, &bits, 16);
#else
  hinted_store(reinterpret_cast<int4*>(address), bits);
#endif
}
}  // namespace detail

// Plain load (cached).
template <class Element>
__device__ Packed128<Element> load128(const Element* address) {
  return Packed128<Element>(detail::load_bits(address, "load128", [](const int4* p) { return *p; }));
}
// Streaming load: data read once (cache-streaming hint on the GPU).
template <class Element>
__device__ Packed128<Element> load128cs(const Element* address) {
  return Packed128<Element>(detail::load_bits(address, "load128cs", [](const int4* p) { return __ldcs(p); }));
}
template <class Element>
__device__ void store128(Element* target, Packed128<Element> value) {
  detail::store_bits(target, value.get_bits(), "store128", [](int4* p, int4 v) { *p = v; });
}

using f128 = Packed128<float>;
using x128 = Packed128<__nv_bfloat16>;

}  // namespace llmc

#endif  // device code
