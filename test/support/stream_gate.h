// A stream-ordered host callback that holds its stream until the test opens the gate: the tool the
// stream, event and collective tests use to make a race or an overlap happen deterministically.
#pragma once

#include <cuda_runtime.h>

#include <condition_variable>
#include <mutex>

namespace llmc::test {

class Gate {
 public:
  void open() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }
  // Enqueue with cudaLaunchHostFunc(stream, Gate::wait_callback, &gate).
  static void CUDART_CB wait_callback(void* gate) {
    Gate& self = *static_cast<Gate*>(gate);
    std::unique_lock<std::mutex> lock(self.mutex_);
    self.opened_.wait(lock, [&] { return self.open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

}  // namespace llmc::test
