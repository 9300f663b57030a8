// The one fork-join helper of the project (the tokenizer's chunks, tokenize_gpt2's jobs, the emulated
// GEMM's row ranges): parallel_for(items, threads, body) runs body(worker, item) for every item in
// [0, items) on up to `threads` threads, the calling thread being worker 0. Items are handed out in
// order from a shared counter, so each worker can keep its own state (index it by `worker`).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace llmc {

// Returns when every item is done. If bodies throw, no new items are started and, once every worker
// has stopped, the exception of the lowest item is rethrown (the same one for any thread count).
template <class Body>
void parallel_for(size_t items, int threads, Body&& body) {
  std::atomic<size_t> next_item{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::exception_ptr first_error;
  size_t first_error_item = items;
  auto work = [&](int worker) {
    for (size_t item = next_item++; item < items && !failed; item = next_item++) {
      try {
        body(worker, item);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (item < first_error_item) {
          first_error_item = item;
          first_error = std::current_exception();
        }
        failed = true;
      }
    }
  };
  const size_t workers = std::min(items, static_cast<size_t>(std::max(threads, 1)));
  std::vector<std::thread> helpers;
  for (size_t worker = 1; worker < workers; worker++) helpers.emplace_back(work, static_cast<int>(worker));
  work(0);
  for (std::thread& helper : helpers) helper.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace llmc
