// Host lists of ints (a table's rows) sent to the device from pinned memory, for the kernels enqueued after the
// copy on the same stream: one slot of fixed capacity per list, each with two buffers used in turn, so that an
// upload waits only for its slot's copy before the last (a step ago where a list goes up once a step: the host
// does not stall on the device). What zeroes, saves and adds the touched rows of embedding tables uses.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace llmc {

class IntListUpload {
 public:
  // `what` names the owner in errors. Throws llmc::CudaError.
  IntListUpload(const std::vector<size_t>& slot_capacities, std::string what);
  ~IntListUpload();
  IntListUpload(const IntListUpload&) = delete;
  IntListUpload& operator=(const IntListUpload&) = delete;

  // The list's device copy in slot `slot`, valid for the work enqueued on `stream` before the slot's upload after
  // next. Waits for the copy that last used the buffer. Throws std::length_error past the slot's capacity.
  const int* upload(int slot, const std::vector<int>& list, cudaStream_t stream);

 private:
  struct Slot {
    size_t at = 0, capacity = 0;  // buffer b at at + b capacity
    cudaEvent_t copied[2] = {nullptr, nullptr};
    bool pending[2] = {false, false};
    int next = 0;  // the buffer the next upload uses
  };
  std::vector<Slot> slots_;
  std::string what_;
  int* staging_ = nullptr;  // pinned, the slots' buffers one after another
  int* device_ = nullptr;
};

}  // namespace llmc
