// The mean of a model's per-position losses read back without idling the device: two results, each a device
// double copied to pinned host memory behind its own event, so that a trainer can read step s's loss after it
// has enqueued step s + 1 (TrainableModel::enqueue_mean_loss / read_mean_loss).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace llmc {

class LossMeans {
 public:
  LossMeans();  // throws llmc::CudaError
  ~LossMeans();
  LossMeans(const LossMeans&) = delete;
  LossMeans& operator=(const LossMeans&) = delete;

  // Enqueues the mean of losses[0, count) (device floats, count > 0) into result 0 or 1 on `stream`.
  void enqueue(const float* losses, size_t count, int result, cudaStream_t stream);
  // Waits for the last enqueue into `result`, then returns it. Throws std::out_of_range for another result.
  double read(int result);

 private:
  double* device_ = nullptr;
  double* host_ = nullptr;
  cudaEvent_t ready_[2] = {nullptr, nullptr};
};

}  // namespace llmc
