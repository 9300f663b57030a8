// The one device buffer of the tests (both targets): a typed cudaMalloc that starts filled with NaN
// bits (0xff bytes: NaN for floating types, -1 for ints), so an output element a kernel forgets to
// write cannot pass; raw and converting (via double) uploads and downloads. Every CUDA call is checked.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <type_traits>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/cuda/precision.h"

namespace llmc::test {

template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), bytes()));
    fill_nan();
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload_raw(host); }
  ~DeviceBuffer() {
    const cudaError_t status = cudaFree(data_);
    if (status != cudaSuccess) ADD_FAILURE() << "cudaFree failed: " << cudaGetErrorString(status);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

  // Fills and uploads are complete on return, for work in any stream: cudaMemset is asynchronous, and
  // cudaMemcpy from pageable memory returns once the data is staged, before the device copy is done;
  // work in non-blocking streams is not ordered after either.
  void fill_nan() { fill(0xff); }
  void fill_zero() { fill(0); }

  // Host values converted to T (floatX values must be representable, see random_values).
  void upload(const std::vector<double>& values) {
    EXPECT_EQ(values.size(), count_);
    std::vector<T> host(count_);
    for (size_t i = 0; i < count_; i++) host[i] = from_double(values[i]);
    upload_raw(host);
  }
  void upload_raw(const std::vector<T>& host) {
    EXPECT_EQ(host.size(), count_);
    CUDA_CHECK(cudaMemcpy(data_, host.data(), bytes(), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
  // Waits for the whole device first, so that work in non-blocking streams is included.
  std::vector<T> download_raw() const {
    std::vector<T> host(count_);
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaMemcpy(host.data(), data_, bytes(), cudaMemcpyDeviceToHost));
    return host;
  }
  std::vector<double> download() const {
    const std::vector<T> host = download_raw();
    std::vector<double> values(count_);
    for (size_t i = 0; i < count_; i++) values[i] = to_double(host[i]);
    return values;
  }

 private:
  void fill(int byte) {
    CUDA_CHECK(cudaMemset(data_, byte, bytes()));
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
  }
  static T from_double(double value) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(value);
    else
      return llmc::from_float<T>(static_cast<float>(value));
  }
  static double to_double(T value) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<double>(value);
    else
      return llmc::to_float(value);
  }

  size_t count_;
  T* data_ = nullptr;
};

}  // namespace llmc::test
