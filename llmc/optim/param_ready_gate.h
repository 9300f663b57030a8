// Per-bucket "parameters updated" events shared by the bucket optimizers (zero.h, speedrun_optimizer.h): the
// optimizer marks a bucket ready on the stream that wrote its parameters, and the next forward (or anything
// reading every parameter) makes its stream wait only for the buckets still pending.
#pragma once
#include <cuda_runtime.h>

#include <vector>

#include "llmc/cuda/cuda_common.h"

namespace llmc {

class ParamReadyGate {
 public:
  explicit ParamReadyGate(int num_buckets) : ready_(num_buckets), pending_(num_buckets, false) {
    for (cudaEvent_t& event : ready_) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  ~ParamReadyGate() {
    for (cudaEvent_t event : ready_) CUDA_REPORT(cudaEventDestroy(event));
  }
  ParamReadyGate(const ParamReadyGate&) = delete;
  ParamReadyGate& operator=(const ParamReadyGate&) = delete;

  // The bucket's new parameters are complete once `writer`'s work enqueued so far is.
  void mark_ready(int bucket, cudaStream_t writer) {
    // External: in a step captured as a CUDA graph each launch records it (llmc/train/step_graphs.h).
    CUDA_CHECK(cudaEventRecordWithFlags(ready_[bucket], writer, cudaEventRecordExternal));
    pending_[bucket] = true;
  }
  // Makes `reader` wait for the bucket's last update (once; nothing to wait for afterwards).
  void wait(int bucket, cudaStream_t reader) {
    if (!pending_[bucket]) return;
    CUDA_CHECK(cudaStreamWaitEvent(reader, ready_[bucket], 0));
    pending_[bucket] = false;
  }
  void wait_all(cudaStream_t reader) {
    for (int bucket = 0; bucket < static_cast<int>(ready_.size()); bucket++) wait(bucket, reader);
  }

 private:
  std::vector<cudaEvent_t> ready_;
  std::vector<bool> pending_;
};

}  // namespace llmc
