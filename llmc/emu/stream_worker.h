// One emulated CUDA stream's executor: a worker thread that runs the stream's tasks (kernels,
// copies, host functions, event records, waits) strictly in the order they were enqueued.
// Each task gets a sequence number; completion of sequence numbers is what events observe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace llmc::emu {

class StreamWorker {
 public:
  explicit StreamWorker(std::string name);
  ~StreamWorker();  // finishes the queued work, then joins the worker
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;

  // Appends a task; returns its sequence number (1, 2, ...).
  uint64_t enqueue(std::function<void()> task);
  uint64_t last_enqueued() const;
  bool is_complete(uint64_t sequence) const;
  void wait_until_complete(uint64_t sequence) const;
  void wait_until_idle() const { wait_until_complete(last_enqueued()); }
  const std::string& name() const { return name_; }

 private:
  void run();

  std::string name_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::deque<std::function<void()>> queue_;
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace llmc::emu
