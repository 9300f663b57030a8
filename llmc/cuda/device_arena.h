// One device allocation carved into many named buffers (as llm.c allocates its activations), so the
// footprint is known up front and running out of GPU memory is one clear error with the size asked.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace llmc {

class DeviceArena {
 public:
  DeviceArena() = default;
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // Registers a buffer of `count` elements; *slot is set by allocate(). Buffers start 256-byte aligned.
  template <typename T>
  void request(T** slot, size_t count) {
    requests_.push_back(Request{reinterpret_cast<void**>(slot), count * sizeof(T)});
  }
  // One cudaMalloc for every request. Throws llmc::CudaError naming `what`, the bytes asked for and the
  // bytes free when the device has too little memory.
  void allocate(const std::string& what);
  size_t bytes() const { return total_bytes_; }
  // What allocate() will ask for (alignment included), without allocating: for memory plans.
  size_t requested_bytes() const;

 private:
  struct Request {
    void** slot;
    size_t bytes;
  };
  std::vector<Request> requests_;
  void* base_ = nullptr;
  size_t total_bytes_ = 0;
};

}  // namespace llmc
