// One emulated CUDA stream's executor: a worker thread that runs the stream's tasks (kernels,
// copies, host functions, event records, waits) strictly in the order they were enqueued.
// Each task gets a sequence number; completion of sequence numbers is what events observe. For
// ThreadSanitizer the worker's own locking orders nothing: a task is ordered after what its enqueuer
// did before enqueueing it, and a waiter after exactly the tasks up to the one it waited for.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

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
  // Blocks until task `sequence` has run; what it and the tasks before it did happens before the
  // caller's next steps.
  void wait_until_complete(uint64_t sequence) const;
  void wait_until_idle() const { wait_until_complete(last_enqueued()); }
  const std::string& name() const { return name_; }

 private:
  void run();
  // TSan sync object on which task `sequence` publishes its completion. A ring: a waiter more than
  // kCompletionSlots tasks behind the worker also sees later tasks (ordering more, never less).
  static constexpr uint64_t kCompletionSlots = 4096;
  const void* completion_sync(uint64_t sequence) const { return &completion_sync_[sequence % kCompletionSlots]; }

  std::string name_;
  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::deque<std::unique_ptr<std::function<void()>>> queue_;
  uint64_t enqueued_ = 0;
  uint64_t completed_ = 0;
  bool stopping_ = false;
  std::unique_ptr<char[]> completion_sync_{new char[kCompletionSlots]};
  std::thread thread_;  // last: starts after the members above exist
};

// A task that waits until `worker` has run task `sequence`: how one stream's work waits for another's (an event
// wait, the legacy stream's ordering, a graph lane's dependency on another lane).
inline std::function<void()> wait_task(std::shared_ptr<StreamWorker> worker, uint64_t sequence) {
  return [worker = std::move(worker), sequence] { worker->wait_until_complete(sequence); };
}

}  // namespace llmc::emu
