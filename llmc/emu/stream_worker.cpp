// The in-order executor behind each emulated CUDA stream (see stream_worker.h).
#include "llmc/emu/stream_worker.h"

#include <cstdio>
#include <cstdlib>
#include <exception>

namespace llmc::emu {

StreamWorker::StreamWorker(std::string name) : name_(std::move(name)), thread_([this] { run(); }) {}

StreamWorker::~StreamWorker() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
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
  uint64_t sequence;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
    sequence = ++enqueued_;
  }
  changed_.notify_all();
  return sequence;
}

uint64_t StreamWorker::last_enqueued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return enqueued_;
}

bool StreamWorker::is_complete(uint64_t sequence) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return completed_ >= sequence;
}

void StreamWorker::wait_until_complete(uint64_t sequence) const {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return completed_ >= sequence; });
}

void StreamWorker::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and drained
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      task();
      task = nullptr;  // release what the task captured before reporting completion
    } catch (const std::exception& error) {
      // A GPU would turn this into a sticky asynchronous error; stopping loudly is clearer.
      std::fprintf(stderr, "llmc emu: stream %s: task failed: %s\n", name_.c_str(), error.what());
      std::abort();
    }
    lock.lock();
    ++completed_;
    changed_.notify_all();
  }
}

}  // namespace llmc::emu
