// A small RAII device buffer for tests of both targets: allocate, upload a host vector, download.
// Every CUDA call is checked (throws llmc::CudaError).
#pragma once

#include <cstddef>
#include <vector>

#include "llmc/cuda_common.h"

namespace llmc::test {

template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    CUDA_CHECK(cudaMalloc(&data_, count * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    CUDA_CHECK(cudaMemcpy(data_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~DeviceBuffer() { (void)cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  size_t size() const { return count_; }
  // A cudaMemcpy on the legacy default stream: ordered after earlier work in it and in blocking
  // streams (CUDA's legacy semantics), NOT after work in cudaStreamNonBlocking streams.
  std::vector<T> to_host() const {
    std::vector<T> host(count_);
    CUDA_CHECK(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t count_;
  T* data_ = nullptr;
};

}  // namespace llmc::test
