// The two loss results of a model (see loss_means.h).
#include <stdexcept>
#include <string>

#include "llmc/cuda/cuda_common.h"
#include "llmc/family/loss_means.h"
#include "llmc/kernels/classifier.cuh"

namespace llmc {

LossMeans::LossMeans() {
  CUDA_CHECK(cudaMalloc(&device_, 2 * sizeof(double)));
  CUDA_CHECK(cudaMallocHost(&host_, 2 * sizeof(double)));
  for (cudaEvent_t& event : ready_) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
}

LossMeans::~LossMeans() {
  for (cudaEvent_t event : ready_) CUDA_REPORT(cudaEventDestroy(event));
  CUDA_REPORT(cudaFreeHost(host_));
  CUDA_REPORT(cudaFree(device_));
}

void LossMeans::enqueue(const float* losses, size_t count, int result, cudaStream_t stream) {
  if (result < 0 || result > 1) throw std::out_of_range("LossMeans::enqueue: result " + std::to_string(result));
  mean_of_losses(device_ + result, losses, count, stream);
  memcpy_async(host_ + result, device_ + result, sizeof(double), cudaMemcpyDeviceToHost, stream);
  // External: in a step captured as a CUDA graph each launch records it (llmc/train/step_graphs.h).
  CUDA_CHECK(cudaEventRecordWithFlags(ready_[result], stream, cudaEventRecordExternal));
}

double LossMeans::read(int result) {
  if (result < 0 || result > 1) throw std::out_of_range("LossMeans::read: result " + std::to_string(result));
  CUDA_CHECK(cudaEventSynchronize(ready_[result]));
  return host_[result];
}

}  // namespace llmc
