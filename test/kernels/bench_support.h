// Helpers shared by the kernel benchmarks (bench_kernels, bench_speedrun_kernels): device buffers filled
// with a deterministic pseudo-random pattern or uploaded, and event timing of a repeated piece of work.
#pragma once

#include <cstdio>
#include <functional>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/kernels/reduction.cuh"
#include "llmc/cuda/precision.h"

namespace bench {

// Deterministic pseudo-random values in [-scale, scale): realistic bit patterns for GEMMs and kernels.
template <typename T>
__global__ void fill_pattern_kernel(T* data, size_t n, float scale, unsigned seed) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    unsigned x = static_cast<unsigned>(i) * 2654435761u ^ seed;
    x ^= x >> 15;
    x *= 2246822519u;
    x ^= x >> 13;
    data[i] = llmc::from_float<T>(scale * (static_cast<float>(x & 0xffffff) / 8388608.0f - 1.0f));
  }
}

// Device allocations freed at exit; every buffer made by make() starts with the fill pattern.
class Arena {
 public:
  Arena() = default;
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() {
    for (void* pointer : allocations_) CUDA_REPORT(cudaFree(pointer));
  }
  template <typename T>
  T* make(size_t n, float scale = 1.0f) {
    T* pointer = nullptr;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&pointer), n * sizeof(T)));
    allocations_.push_back(pointer);
    LLMC_LAUNCH(fill_pattern_kernel<T>, dim3(llmc::elementwise_grid(n, 256)), dim3(256), 0, nullptr, pointer, n, scale,
                static_cast<unsigned>(allocations_.size()));
    return pointer;
  }
  template <typename T>
  T* upload(const std::vector<T>& host) {
    T* pointer = nullptr;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&pointer), host.size() * sizeof(T)));
    allocations_.push_back(pointer);
    CUDA_CHECK(cudaMemcpy(pointer, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return pointer;
  }

 private:
  std::vector<void*> allocations_;
};

// Runs `work` once to warm up, then `repeats` times between two events on `stream`: milliseconds per call.
inline double time_ms(cudaStream_t stream, int repeats, const std::function<void()>& work) {
  work();
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < repeats; i++) work();
  CUDA_CHECK(cudaEventRecord(stop, stream));
  CUDA_CHECK(cudaEventSynchronize(stop));
  float total_ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&total_ms, start, stop));
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  return total_ms / repeats;
}

}  // namespace bench
