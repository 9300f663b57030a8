// The emulated CUDA device: memory registry, streams (with the legacy default stream's
// ordering), events, and kernel launches. The CUDA runtime API is process-global by design, so
// the device is one object per process; runtime_api.cpp maps each cuda* call onto it.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "llmc/emu/block_runner.h"
#include "llmc/emu/stream_worker.h"

// The opaque handle types of the CUDA runtime (declared by driver_types.h).
struct CUstream_st {
  std::shared_ptr<llmc::emu::StreamWorker> worker;
  unsigned flags = 0;
  int priority = 0;
};
struct CUevent_st {
  unsigned flags = 0;
  std::mutex mutex;
  // The latest record: complete once `worker` has completed task `sequence`.
  std::shared_ptr<llmc::emu::StreamWorker> worker;
  uint64_t sequence = 0;
  int recorder_priority = 0;  // of the stream that recorded it
  std::shared_ptr<std::atomic<int64_t>> timestamp_ns;  // -1 until the record executed
};

namespace llmc::emu {

enum class MemoryKind { kDevice, kPinnedHost, kPageableHost };

// Emulated hardware limits (those of an H100/H200, the GPUs this project targets).
inline constexpr int kMaxThreadsPerBlock = 1024;
// Static + dynamic shared memory of a block without the opt-in (also the most static shared memory a
// kernel may declare), and with cudaFuncAttributeMaxDynamicSharedMemorySize.
inline constexpr size_t kDefaultSharedLimit = 48 * 1024;
inline constexpr size_t kMaxSharedOptIn = 227 * 1024;
inline constexpr int kLeastStreamPriority = 0;
inline constexpr int kGreatestStreamPriority = -5;

class EmulatedDevice {
 public:
  static EmulatedDevice& instance();

  // ---- memory ----
  cudaError_t allocate(void** pointer, size_t bytes, MemoryKind kind);
  cudaError_t release(void* pointer, MemoryKind kind);
  // cudaFreeAsync's release, run by the stream that reached it: no device-wide synchronisation (the stream's
  // earlier tasks are done; another stream still using the memory is the program's race, as on a GPU).
  cudaError_t release_in_stream_order(void* pointer);
  // Kind of the memory at [pointer, pointer+bytes); device ranges past their allocation's end
  // are errors (a GPU faults on them).
  cudaError_t classify(const void* pointer, size_t bytes, MemoryKind* kind) const;
  // A non-null pointer into no device or pinned allocation (nor one past the end of one).
  bool is_pageable_host_memory(const void* pointer) const;
  size_t device_bytes_in_use() const;
  size_t total_memory_bytes() const { return total_memory_bytes_; }

  // ---- streams ----
  CUstream_st* resolve(cudaStream_t stream);  // null / legacy / per-thread -> the legacy stream
  cudaStream_t create_stream(unsigned flags, int priority);
  void destroy_stream(cudaStream_t stream);
  // Enqueues with CUDA's legacy default-stream ordering; returns the task's sequence number.
  uint64_t enqueue(cudaStream_t stream, std::function<void()> task);
  void synchronize_stream(cudaStream_t stream);
  void synchronize_all();

  // ---- kernels ----
  // `pointer_arguments`: the kernel's pointer-typed arguments (a GPU faults on pageable host memory).
  cudaError_t launch(KernelLaunchInfo launch, std::function<void()> thread_body,
                     const std::vector<const void*>& pointer_arguments, cudaStream_t stream,
                     std::string* error_detail);
  cudaError_t set_max_dynamic_shared(const void* kernel_address, int bytes);
  // How blocks and their threads are scheduled, for launches enqueued from now on. Default from the
  // environment: LLMC_EMU_SCHEDULE=forward|reverse|drift (forward) and LLMC_EMU_SEED=<n> (1).
  void set_schedule(Schedule schedule);
  Schedule schedule() const;

  const cudaDeviceProp& properties() const { return properties_; }

  // Whether new device allocations are filled with the uninitialised-memory pattern (default: yes).
  // A benchmark that enqueues a full-size step without executing it (llmc/base/launch_observer.h) turns it
  // off, so that gigabytes of activations are reserved but never touched.
  void set_fill_new_memory(bool fill) { fill_new_memory_.store(fill); }

  // Fault injection for the tests (LLMC_EMU_DROP_WAITS_ON_PRIORITY_STREAMS=1): cudaStreamWaitEvent
  // ignores events recorded on a stream of greater priority than the waiting one. In the trainer that is
  // the compute stream's wait for a bucket's all-gather on the comm stream: test/train/test_multirank.py
  // must see the results change.
  bool drops_waits_on_priority_streams() const { return drop_waits_on_priority_streams_; }

 private:
  EmulatedDevice();
  cudaError_t check_launch(const KernelLaunchInfo& launch, const std::vector<const void*>& pointer_arguments,
                           std::string* error_detail);
  void run_grid(const KernelLaunchInfo& launch, const std::function<void()>& thread_body,
                Schedule schedule, uint64_t launch_sequence);

  struct Allocation {
    size_t bytes;
    MemoryKind kind;
  };
  mutable std::mutex memory_mutex_;
  std::map<uintptr_t, Allocation> allocations_;  // by start address
  size_t device_bytes_in_use_ = 0;
  size_t total_memory_bytes_ = 0;

  std::mutex stream_mutex_;  // orders enqueues across streams (legacy-stream semantics)
  CUstream_st legacy_stream_;
  std::vector<CUstream_st*> streams_;  // created streams, alive
  int streams_created_ = 0;

  std::mutex kernel_attribute_mutex_;
  std::unordered_map<const void*, size_t> dynamic_shared_limit_;  // per kernel, after opt-in

  // Blocks run one at a time in the whole process: __shared__ variables are plain statics. (Each
  // stream worker has its own BlockRunner, so that TSan sees its fibers only in its own kernels.)
  std::mutex block_mutex_;

  mutable std::mutex schedule_mutex_;
  Schedule schedule_;
  uint64_t launches_ = 0;  // numbers launches, to seed each one's schedule
  bool drop_waits_on_priority_streams_ = false;
  std::atomic<bool> fill_new_memory_{true};
  cudaDeviceProp properties_{};
};

}  // namespace llmc::emu
