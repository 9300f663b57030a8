// Which collective a rank is waiting for, for the watchdog's report (llmc/train/watchdog.h): right after
// each collective it enqueues, the optimizer records an event on the same stream with the collective's
// name, bucket and step. When the watchdog fires, the oldest of them whose event has not completed is
// the collective the device is stuck in. Recording costs one cudaEventRecord per collective; the events
// are only queried when the watchdog fires.
#pragma once
#include <cuda_runtime.h>

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

namespace llmc {

class CollectiveWatch {
 public:
  // Keeps the last `capacity` collectives (a few steps' worth) of the device `device`.
  CollectiveWatch(int device, size_t capacity);
  ~CollectiveWatch();
  CollectiveWatch(const CollectiveWatch&) = delete;
  CollectiveWatch& operator=(const CollectiveWatch&) = delete;

  // After enqueueing collective `name` ("reduce_scatter") of step `step` on `stream`; `what` says what it
  // moves ("bucket 3 (layer 2)"). Both strings must outlive the watch.
  void enqueued(const char* name, const std::string* what, int step, cudaStream_t stream);
  // From any thread: "all_gather of bucket 3 (layer 2) in step 7, enqueued 2.9 s ago" for the oldest
  // recorded collective that has not completed, or "" when all have.
  std::string first_unfinished() const;

 private:
  struct Entry {
    const char* name = nullptr;
    const std::string* what = nullptr;
    int step = 0;
    std::chrono::steady_clock::time_point when;
    cudaEvent_t done = nullptr;
  };
  int device_;
  mutable std::mutex mutex_;
  std::vector<Entry> ring_;
  size_t recorded_ = 0;  // total ever; entry i lives at ring_[i % capacity]
};

}  // namespace llmc
