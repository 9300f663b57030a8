// Events after collectives, queried when the watchdog fires (see collective_watch.h).
#include "llmc/dist/collective_watch.h"

#include <cstdio>

#include "llmc/cuda/cuda_common.h"

namespace llmc {

CollectiveWatch::CollectiveWatch(int device, size_t capacity)
    : device_(device), ring_(capacity), slot_events_(capacity) {
  for (cudaEvent_t& event : slot_events_) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
}

CollectiveWatch::~CollectiveWatch() {
  for (cudaEvent_t event : slot_events_) CUDA_REPORT(cudaEventDestroy(event));
  for (const Captured& collective : captured_) CUDA_REPORT(cudaEventDestroy(collective.done));
}

void CollectiveWatch::watch(const char* name, const std::string* what, int step, cudaEvent_t done) {
  Entry& entry = ring_[recorded_ % ring_.size()];
  entry.name = name;
  entry.what = what;
  entry.step = step;
  entry.when = std::chrono::steady_clock::now();
  entry.done = done;
  ++recorded_;
}

void CollectiveWatch::enqueued(const char* name, const std::string* what, int step, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  cudaEvent_t done = slot_events_[recorded_ % ring_.size()];
  CUDA_CHECK(cudaEventRecord(done, stream));
  watch(name, what, step, done);
}

int CollectiveWatch::captured(const char* name, const std::string* what, cudaStream_t stream, int id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (id < 0) {
    Captured collective{name, what, nullptr};
    CUDA_CHECK(cudaEventCreateWithFlags(&collective.done, cudaEventDisableTiming));
    captured_.push_back(collective);
    id = static_cast<int>(captured_.size()) - 1;
  }
  CUDA_CHECK(cudaEventRecordWithFlags(captured_.at(static_cast<size_t>(id)).done, stream, cudaEventRecordExternal));
  return id;
}

void CollectiveWatch::relaunched(const std::vector<int>& ids, int step) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int id : ids) {
    const Captured& collective = captured_.at(static_cast<size_t>(id));
    watch(collective.name, collective.what, step, collective.done);
  }
}

std::string CollectiveWatch::first_unfinished() const {
  std::lock_guard<std::mutex> lock(mutex_);
  // The caller is another thread: CUDA's current device is per thread.
  if (cudaSetDevice(device_) != cudaSuccess) return "";
  const size_t first = recorded_ > ring_.size() ? recorded_ - ring_.size() : 0;
  for (size_t i = first; i < recorded_; i++) {
    const Entry& entry = ring_[i % ring_.size()];
    // A captured collective's event stands for its latest launch: only its latest entry is that launch's.
    bool relaunched_since = false;
    for (size_t later = i + 1; later < recorded_ && !relaunched_since; later++)
      relaunched_since = ring_[later % ring_.size()].done == entry.done;
    if (relaunched_since || cudaEventQuery(entry.done) != cudaErrorNotReady) continue;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - entry.when).count();
    char ago[32];
    std::snprintf(ago, sizeof ago, "%.1f s", seconds);
    return std::string(entry.name) + " of " + *entry.what + " in step " + std::to_string(entry.step) +
           ", enqueued " + ago + " ago";
  }
  return "";
}

}  // namespace llmc
