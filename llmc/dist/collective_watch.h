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
  // The same inside a stream capture (a CUDA graph's, llmc/train/step_graphs.h): the collective's event is an
  // external record, which every launch of the graph records. Returns the collective's id for relaunched(); `id`
  // not -1: that collective again, in another graph of the same collectives (its event recorded there too).
  int captured(const char* name, const std::string* what, cudaStream_t stream, int id = -1);
  // A launch, for step `step`, of a graph whose collectives are `ids`: they are watched as enqueued now.
  void relaunched(const std::vector<int>& ids, int step);
  // From any thread: "all_gather of bucket 3 (layer 2) in step 7, enqueued 2.9 s ago" for the oldest
  // recorded collective that has not completed, or "" when all have.
  std::string first_unfinished() const;

 private:
  struct Entry {
    const char* name = nullptr;
    const std::string* what = nullptr;
    int step = 0;
    std::chrono::steady_clock::time_point when;
    cudaEvent_t done = nullptr;  // the slot's own event, or a captured collective's
  };
  struct Captured {
    const char* name = nullptr;
    const std::string* what = nullptr;
    cudaEvent_t done = nullptr;
  };
  void watch(const char* name, const std::string* what, int step, cudaEvent_t done);  // the caller holds mutex_

  int device_;
  mutable std::mutex mutex_;
  std::vector<Entry> ring_;
  std::vector<cudaEvent_t> slot_events_;  // ring_[i]'s own event, for collectives enqueued outside captures
  std::vector<Captured> captured_;        // by id
  size_t recorded_ = 0;  // total ever; entry i lives at ring_[i % capacity]
};

}  // namespace llmc
