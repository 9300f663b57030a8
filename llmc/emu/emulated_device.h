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
#include "llmc/emu/stream_capture.h"
#include "llmc/emu/stream_worker.h"

// The opaque handle types of the CUDA runtime (declared by driver_types.h).
struct CUstream_st {
  std::shared_ptr<llmc::emu::StreamWorker> worker;
  unsigned flags = 0;
  int priority = 0;
  std::shared_ptr<llmc::emu::StreamCapture> capture;  // while the stream captures (the device's stream mutex)
};
struct CUevent_st {
  unsigned flags = 0;
  std::mutex mutex;
  // The latest record: complete once `worker` has completed task `sequence`.
  std::shared_ptr<llmc::emu::StreamWorker> worker;
  uint64_t sequence = 0;
  int recorder_priority = 0;  // of the stream that recorded it
  std::shared_ptr<std::atomic<int64_t>> timestamp_ns;  // -1 until the record executed
  // Recorded last in a capture: the graph's nodes it stands for (no stream work: waiting on it joins a capture).
  std::shared_ptr<llmc::emu::StreamCapture> capture;
  std::vector<size_t> captured_nodes;
};
struct CUgraph_st {
  llmc::emu::CapturedGraph graph;
};
// An instantiated graph: its nodes, and a worker per lane that replays them (llmc/emu/device_capture.cpp).
struct CUgraphExec_st {
  std::shared_ptr<const llmc::emu::CapturedGraph> graph;
  std::vector<std::shared_ptr<llmc::emu::StreamWorker>> lanes;
  std::mutex mutex;
  // The stream task that ends the last launch: the next launch starts after it (launches of one graph are ordered).
  std::shared_ptr<llmc::emu::StreamWorker> last_stream;
  uint64_t last_end = 0;
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

// null, cudaStreamLegacy and cudaStreamPerThread: the handles the emulation maps to the legacy default stream.
bool is_legacy_handle(cudaStream_t stream);

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
  // Enqueues with CUDA's legacy default-stream ordering (*sequence: the task's number), or adds the task to the
  // stream's capture (*sequence 0). Fails where CUDA does: on the legacy stream while a blocking stream captures
  // (cudaErrorStreamCaptureImplicit, which invalidates that capture), on a stream whose capture is invalidated.
  cudaError_t enqueue(cudaStream_t stream, std::function<void()> task, uint64_t* sequence = nullptr);
  // Blocking waits: refused for a capturing stream (any, for the whole device), which invalidates the capture.
  cudaError_t synchronize_stream(cudaStream_t stream);
  cudaError_t synchronize_all();

  // ---- stream capture and graphs (device_capture.cpp; docs/emulation.md#cuda-graphs) ----
  cudaError_t begin_capture(cudaStream_t stream, cudaStreamCaptureMode mode);
  cudaError_t end_capture(cudaStream_t stream, CapturedGraph* graph);
  cudaError_t capture_status(cudaStream_t stream, cudaStreamCaptureStatus* status);
  // A call CUDA calls potentially unsafe during a capture (cudaMalloc, cudaFree, ...): refused, and the capture
  // invalidated, while this thread captures in global or thread-local mode or another thread in global mode.
  cudaError_t check_unsafe_call(const char* call);
  // A call that must not see a capturing stream (cudaStreamQuery, a stream-ordered allocation): refused, and
  // the capture invalidated, when `stream` captures.
  cudaError_t check_not_capturing(cudaStream_t stream, const char* call);
  // cudaEventRecord / cudaStreamWaitEvent / cudaEventQuery's part in a capture; *handled false: not a capture's.
  cudaError_t record_event_in_capture(cudaEvent_t event, cudaStream_t stream, bool* handled);
  // cudaEventRecordWithFlags(cudaEventRecordExternal)'s part in a capture: an event record node, recorded at each
  // launch (the event itself stays as it was until then); *handled false: not a capture's.
  cudaError_t record_external_event_in_capture(cudaEvent_t event, cudaStream_t stream, bool* handled);
  cudaError_t wait_event_in_capture(cudaStream_t stream, cudaEvent_t event, bool* handled);
  cudaError_t check_event_not_captured(cudaEvent_t event, const char* call);  // the caller holds event->mutex
  cudaError_t instantiate(cudaGraphExec_t* exec, cudaGraph_t graph);
  // The graph's nodes after the stream's earlier work, each lane on its own worker, the stream's later work after
  // all of them.
  cudaError_t launch_graph(cudaGraphExec_t exec, cudaStream_t stream);

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

  // The capture rules' shared part: invalidates every capture `stream` belongs to. The caller holds stream_mutex_.
  cudaError_t refuse_in_capture(CUstream_st* stream, const std::string& why, cudaError_t error);
  bool blocking_stream_captures() const;  // the caller holds stream_mutex_

  std::mutex stream_mutex_;  // orders enqueues across streams (legacy-stream semantics), and guards captures
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
