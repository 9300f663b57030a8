// IntListUpload (int_list_upload.h).
#include "llmc/cuda/int_list_upload.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "llmc/cuda/cuda_common.h"

namespace llmc {

IntListUpload::IntListUpload(const std::vector<size_t>& slot_capacities, std::string what) : what_(std::move(what)) {
  size_t total = 0;
  for (size_t capacity : slot_capacities) {
    Slot slot;
    slot.at = total;
    slot.capacity = capacity;
    slots_.push_back(slot);
    total += 2 * capacity;
  }
  const size_t bytes = std::max<size_t>(total, 1) * sizeof(int);
  CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&staging_), bytes));
  CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_), bytes));
  for (Slot& slot : slots_)
    for (cudaEvent_t& event : slot.copied) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
}

IntListUpload::~IntListUpload() {
  // A destructor must not throw: report a failure and carry on releasing.
  for (Slot& slot : slots_)
    for (int b = 0; b < 2; b++) {
      if (slot.pending[b]) CUDA_REPORT(cudaEventSynchronize(slot.copied[b]));
      CUDA_REPORT(cudaEventDestroy(slot.copied[b]));
    }
  CUDA_REPORT(cudaFree(device_));
  CUDA_REPORT(cudaFreeHost(staging_));
}

const int* IntListUpload::upload(int slot_index, const std::vector<int>& list, cudaStream_t stream) {
  Slot& slot = slots_.at(static_cast<size_t>(slot_index));
  if (list.size() > slot.capacity)
    throw std::length_error(what_ + ": " + std::to_string(list.size()) + " ints to upload in slot " +
                            std::to_string(slot_index) + ", room for " + std::to_string(slot.capacity));
  const int b = slot.next;
  const size_t at = slot.at + static_cast<size_t>(b) * slot.capacity;
  if (list.empty()) return device_ + at;
  slot.next = 1 - b;
  if (slot.pending[b]) wait_unless_complete(slot.copied[b]);  // the buffer's staging is free again
  std::copy(list.begin(), list.end(), staging_ + at);
  memcpy_async(device_ + at, staging_ + at, list.size() * sizeof(int), cudaMemcpyHostToDevice, stream);
  CUDA_CHECK(cudaEventRecord(slot.copied[b], stream));
  slot.pending[b] = true;
  return device_ + at;
}

}  // namespace llmc
