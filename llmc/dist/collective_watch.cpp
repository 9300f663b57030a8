// Events after collectives, queried when the watchdog fires (see collective_watch.h).
#include "llmc/dist/collective_watch.h"

#include <cstdio>

#include "llmc/cuda/cuda_common.h"

namespace llmc {

CollectiveWatch::CollectiveWatch(int device, size_t capacity) : device_(device), ring_(capacity) {
  for (Entry& entry : ring_) CUDA_CHECK(cudaEventCreateWithFlags(&entry.done, cudaEventDisableTiming));
}

CollectiveWatch::~CollectiveWatch() {
  for (Entry& entry : ring_) CUDA_REPORT(cudaEventDestroy(entry.done));
}

void CollectiveWatch::enqueued(const char* name, const std::string* what, int step, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& entry = ring_[recorded_ % ring_.size()];
  entry.name = name;
  entry.what = what;
  entry.step = step;
  entry.when = std::chrono::steady_clock::now();
  CUDA_CHECK(cudaEventRecord(entry.done, stream));
  ++recorded_;
}

std::string CollectiveWatch::first_unfinished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  // The caller is another thread: CUDA's current device is per thread.
  if (cudaSetDevice(device_) != cudaSuccess) return "";
  const size_t first = recorded_ > ring_.size() ? recorded_ - ring_.size() : 0;
  for (size_t i = first; i < recorded_; i++) {
    const Entry& entry = ring_[i % ring_.size()];
    if (cudaEventQuery(entry.done) != cudaErrorNotReady) continue;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - entry.when).count();
    char ago[32];
    std::snprintf(ago, sizeof ago, "%.1f s", seconds);
    return std::string(entry.name) + " of " + *entry.what + " in step " + std::to_string(entry.step) +
           ", enqueued " + ago + " ago";
  }
  return "";
}

}  // namespace llmc
