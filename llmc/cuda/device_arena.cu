// Single-allocation device arena (see device_arena.h).
#include "llmc/cuda/device_arena.h"

#include <cstdio>

#include "llmc/cuda/cuda_common.h"

namespace llmc {

namespace {
constexpr size_t kAlignment = 256;
std::string gib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return text;
}
}  // namespace

DeviceArena::~DeviceArena() {
  if (base_ != nullptr) CUDA_REPORT(cudaFree(base_));
}

size_t DeviceArena::requested_bytes() const {
  size_t total = 0;
  for (const Request& r : requests_) total += (r.bytes + kAlignment - 1) / kAlignment * kAlignment;
  return total;
}

void DeviceArena::allocate(const std::string& what) {
  total_bytes_ = requested_bytes();
  const cudaError_t status = cudaMalloc(&base_, total_bytes_);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free allocation error before asking for the free memory
    size_t free_bytes = 0, device_bytes = 0;
    const bool known = cudaMemGetInfo(&free_bytes, &device_bytes) == cudaSuccess;
    throw_cuda_error(status, "cudaMalloc", __FILE__, __LINE__,
                     "out of GPU memory: " + what + " asked for " + gib(total_bytes_) +
                         (known ? " but only " + gib(free_bytes) + " of " + gib(device_bytes) + " are free" : "") +
                         " (reduce --batch-size or --seq-len)");
  }
  char* cursor = static_cast<char*>(base_);
  for (const Request& r : requests_) {
    *r.slot = cursor;
    cursor += (r.bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
}

}  // namespace llmc
