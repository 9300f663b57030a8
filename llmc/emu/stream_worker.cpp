// The in-order executor behind each emulated CUDA stream (see stream_worker.h). Compiled without TSan
// instrumentation in the TSan build: its queue bookkeeping is not GPU memory, and the happens-before
// edges it stands for are the explicit release/acquire calls below (its mutex orders nothing).
#include "llmc/emu/stream_worker.h"

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "llmc/emu/tsan_hooks.h"

namespace llmc::emu {

namespace {

// A lock on the worker's mutex that TSan sees as no ordering at all.
class UnorderedLock {
 public:
  explicit UnorderedLock(std::mutex& mutex) : lock_(mutex, std::defer_lock) {
    tsan::IgnoreSync ignore;
    lock_.lock();
  }
  ~UnorderedLock() {
    tsan::IgnoreSync ignore;
    lock_.unlock();
  }
  UnorderedLock(const UnorderedLock&) = delete;
  UnorderedLock& operator=(const UnorderedLock&) = delete;
  template <class Predicate>
  void wait(std::condition_variable& changed, Predicate ready) {
    while (!ready()) {
      tsan::IgnoreSync ignore;
      changed.wait(lock_);
    }
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace

StreamWorker::StreamWorker(std::string name) : name_(std::move(name)), thread_([this] { run(); }) {}

StreamWorker::~StreamWorker() {
  {
    UnorderedLock lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  // Tasks never own their own worker (the device makes sure), so this never joins itself.
  if (thread_.get_id() == std::this_thread::get_id()) {
    std::fprintf(stderr, "llmc emu: stream %s destroyed by its own task\n", name_.c_str());
    std::abort();
  }
  thread_.join();
}

uint64_t StreamWorker::enqueue(std::function<void()> task) {
  auto queued = std::make_unique<std::function<void()>>(std::move(task));
  tsan::release(queued.get());  // what the enqueuer did so far happens before the task
  uint64_t sequence;
  {
    UnorderedLock lock(mutex_);
    queue_.push_back(std::move(queued));
    sequence = ++enqueued_;
  }
  changed_.notify_all();
  return sequence;
}

uint64_t StreamWorker::last_enqueued() const {
  UnorderedLock lock(mutex_);
  return enqueued_;
}

bool StreamWorker::is_complete(uint64_t sequence) const {
  UnorderedLock lock(mutex_);
  return completed_ >= sequence;
}

void StreamWorker::wait_until_complete(uint64_t sequence) const {
  {
    UnorderedLock lock(mutex_);
    lock.wait(changed_, [&] { return completed_ >= sequence; });
  }
  if (sequence > 0) tsan::acquire(completion_sync(sequence));
}

void StreamWorker::run() {
  while (true) {
    std::unique_ptr<std::function<void()>> task;
    uint64_t sequence;
    {
      UnorderedLock lock(mutex_);
      lock.wait(changed_, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
      sequence = completed_ + 1;
    }
    tsan::acquire(task.get());
    try {
      (*task)();
      task.reset();  // release what the task captured before reporting completion
    } catch (const std::exception& error) {
      // A GPU would turn this into a sticky asynchronous error; stopping loudly is clearer.
      std::fprintf(stderr, "llmc emu: stream %s: task failed: %s\n", name_.c_str(), error.what());
      std::abort();
    }
    tsan::release(completion_sync(sequence));  // this task and every earlier one
    {
      UnorderedLock lock(mutex_);
      completed_ = sequence;
    }
    changed_.notify_all();
  }
}

}  // namespace llmc::emu
