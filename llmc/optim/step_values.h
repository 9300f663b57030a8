// The per-step arguments of an optimizer's kernels (rates, momenta, bias-corrected step sizes) in device memory,
// where the kernels read them as they run (llmc/cuda/step_scalar.h) instead of taking them at launch: a step
// captured in a CUDA graph then replays with the values of the step it is launched for. The host fills a pinned
// slot each step and one copy puts it on the device, ordered before the step's updates; two slots by step parity,
// each refilled once its last copy has left it, so the host fills step s + 1's while step s runs.
#pragma once
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"

namespace llmc {

class DeviceStepValues {
 public:
  explicit DeviceStepValues(size_t count) : count_(count), slot_floats_(std::max<size_t>(count, 1)) {
    CUDA_CHECK(cudaMallocHost(&host_, 2 * slot_floats_ * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&device_, slot_floats_ * sizeof(float)));
    for (cudaEvent_t& event : copied_) {
      CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      CUDA_CHECK(cudaEventRecord(event, nullptr));  // the slots start free
    }
  }
  ~DeviceStepValues() {
    for (cudaEvent_t event : copied_) {
      CUDA_REPORT(cudaEventSynchronize(event));  // no copy may still read a slot
      CUDA_REPORT(cudaEventDestroy(event));
    }
    CUDA_REPORT(cudaFree(device_));
    CUDA_REPORT(cudaFreeHost(host_));
  }
  DeviceStepValues(const DeviceStepValues&) = delete;
  DeviceStepValues& operator=(const DeviceStepValues&) = delete;

  size_t count() const { return count_; }
  // Step `step`'s slot to fill (`count` floats), once the copy that last read it is done (the host may wait).
  float* slot(int step) {
    CUDA_CHECK(cudaEventSynchronize(copied_[step % 2]));
    return slot_of(step);
  }
  // Enqueues the copy of step `step`'s slot to the device values on `stream`, after whatever the stream ran before
  // (the previous step's kernels that read them).
  void upload(int step, cudaStream_t stream) {
    if (count_ > 0) memcpy_async(device_, slot_of(step), count_ * sizeof(float), cudaMemcpyHostToDevice, stream);
    CUDA_CHECK(cudaEventRecordWithFlags(copied_[step % 2], stream, cudaEventRecordExternal));  // also when captured
  }
  // Where value `index` lives on the device.
  const float* device(size_t index) const {
    if (index >= count_)
      throw std::out_of_range("DeviceStepValues: value " + std::to_string(index) + " of " + std::to_string(count_));
    return device_ + index;
  }

 private:
  float* slot_of(int step) const { return host_ + static_cast<size_t>(step % 2) * slot_floats_; }

  size_t count_, slot_floats_;  // slot_floats_: count_, at least 1 (no empty allocations)
  float* host_ = nullptr;    // pinned: two slots of count_ floats
  float* device_ = nullptr;  // count_ floats
  cudaEvent_t copied_[2] = {nullptr, nullptr};
};

}  // namespace llmc
