// The gradient norm's way back to the host, shared by the bucket optimizers (zero.h, speedrun_optimizer.h):
// the squared norm a step leaves in device memory is copied to pinned host memory on the stream that made
// it, with an event, in one of two slots by step parity, so that the host reads step s's norm after step s
// + 1 has been enqueued without waiting for s + 1, and the next backward, which overwrites the gradients
// the norm's kernels read, can wait for it on the device.
#pragma once
#include <cmath>
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"

namespace llmc {

class GradNormReadback {
 public:
  GradNormReadback() {
    CUDA_CHECK(cudaMallocHost(&squared_, 2 * sizeof(float)));
    for (cudaEvent_t& event : ready_) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  ~GradNormReadback() {
    for (cudaEvent_t event : ready_) CUDA_REPORT(cudaEventDestroy(event));
    CUDA_REPORT(cudaFreeHost(squared_));
  }
  GradNormReadback(const GradNormReadback&) = delete;
  GradNormReadback& operator=(const GradNormReadback&) = delete;

  // Enqueues on `stream` the copy of step `step`'s squared norm (one float at `device_squared`) and its event.
  void enqueue(int step, const float* device_squared, cudaStream_t stream) {
    memcpy_async(squared_ + step % 2, device_squared, sizeof(float), cudaMemcpyDeviceToHost, stream);
    // External: in a step captured as a CUDA graph each launch records it (llmc/train/step_graphs.h).
    CUDA_CHECK(cudaEventRecordWithFlags(ready_[step % 2], stream, cudaEventRecordExternal));
  }
  // Makes `stream` wait until step `step`'s norm has been read out of the gradients.
  void make_wait(cudaStream_t stream, int step) const { CUDA_CHECK(cudaStreamWaitEvent(stream, ready_[step % 2], 0)); }
  // The norm of step `step`, the last step `last` or the one before it (waits for it on the host).
  float read(int step, int last) const {
    if (step != last && step != last - 1)
      throw std::out_of_range("grad_norm: step " + std::to_string(step) + " is neither the last step (" +
                              std::to_string(last) + ") nor the one before it");
    CUDA_CHECK(cudaEventSynchronize(ready_[step % 2]));
    return std::sqrt(squared_[step % 2]);
  }

 private:
  float* squared_ = nullptr;  // pinned: the squared norms of steps with even and odd numbers
  cudaEvent_t ready_[2] = {nullptr, nullptr};
};

}  // namespace llmc
