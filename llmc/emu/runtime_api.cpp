// The CUDA runtime API functions the project uses, defined for the emulated device, with CUDA's
// semantics (stream order, sync/async copies, events, last error). Declarations come from the real
// cuda_runtime_api.h; functions not defined here fail at link time, which is intended.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "llmc/emu/emulated_device.h"
#include "llmc/base/launch_observer.h"

using llmc::emu::EmulatedDevice;
using llmc::emu::MemoryKind;

namespace {

// CUDA's last error is per host thread.
thread_local cudaError_t last_error = cudaSuccess;

cudaError_t record(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
}

EmulatedDevice& device() { return EmulatedDevice::instance(); }

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Resolves the kinds of both ends of a copy; errors if a device range runs past its allocation.
cudaError_t classify_copy(void* dst, const void* src, size_t count, MemoryKind* dst_kind,
                          MemoryKind* src_kind) {
  cudaError_t error = device().classify(dst, count, dst_kind);
  if (error == cudaSuccess) error = device().classify(src, count, src_kind);
  return error;
}

// Whether the API call is cudaMemcpy (and friends) or cudaMemcpyAsync: CUDA's synchronisation rules
// differ ("API synchronization behavior" in the CUDA runtime documentation).
enum class CopyCall { kSynchronous, kAsynchronous };

cudaError_t enqueue_copy(void* dst, const void* src, size_t count, cudaStream_t stream, CopyCall call) {
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return record(cudaErrorInvalidValue);
  MemoryKind dst_kind, src_kind;
  if (cudaError_t error = classify_copy(dst, src, count, &dst_kind, &src_kind); error != cudaSuccess) {
    return record(error);
  }
  const bool pageable_dst = dst_kind == MemoryKind::kPageableHost;
  const bool pageable_src = src_kind == MemoryKind::kPageableHost;
  if (call == CopyCall::kSynchronous || pageable_src || pageable_dst) {
    // A wait on the stream, or a copy that reads or writes pageable memory when the call is made: no graph
    // node can replay either (refused in captures; the emulation is stricter than CUDA on pageable copies).
    const char* what = call == CopyCall::kSynchronous ? "cudaMemcpy" : "cudaMemcpyAsync with pageable host memory";
    if (cudaError_t error = device().check_not_capturing(stream, what); error != cudaSuccess) return record(error);
  }
  if (pageable_src && !pageable_dst) {
    // Staged: the call returns once the pageable source is copied, the device write happens later in
    // stream order (cudaMemcpy first waits for the stream's earlier work).
    if (call == CopyCall::kSynchronous) {
      llmc::notify_host_wait("cudaMemcpy");
      if (cudaError_t error = device().synchronize_stream(stream); error != cudaSuccess) return record(error);
    }
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + count);
    return record(device().enqueue(stream, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); }));
  }
  uint64_t sequence = 0;
  if (cudaError_t error = device().enqueue(stream, [dst, src, count] { std::memmove(dst, src, count); }, &sequence);
      error != cudaSuccess)
    return record(error);
  // Into pageable memory: returns when done. cudaMemcpy returns when done unless device to device.
  const bool device_to_device = dst_kind == MemoryKind::kDevice && src_kind == MemoryKind::kDevice;
  if (pageable_dst || (call == CopyCall::kSynchronous && !device_to_device)) {
    llmc::notify_host_wait(call == CopyCall::kSynchronous ? "cudaMemcpy" : "cudaMemcpyAsync into pageable host memory");
    device().resolve(stream)->worker->wait_until_complete(sequence);
  }
  return cudaSuccess;
}

// cudaMemset and cudaMemsetAsync on device memory are both asynchronous with respect to the host.
cudaError_t enqueue_memset(void* pointer, int value, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  MemoryKind kind;
  if (pointer == nullptr || device().classify(pointer, count, &kind) != cudaSuccess ||
      kind != MemoryKind::kDevice) {
    return record(cudaErrorInvalidValue);
  }
  return record(device().enqueue(stream, [pointer, value, count] { std::memset(pointer, value, count); }));
}

}  // namespace

extern "C" {

// ---- errors ------------------------------------------------------------------------------------

cudaError_t cudaGetLastError(void) {
  const cudaError_t error = last_error;
  last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorIllegalState: return "not allowed in the object's present state";
    case cudaErrorStreamCaptureUnsupported: return "not allowed while the stream captures (emulated)";
    case cudaErrorStreamCaptureInvalidated: return "the capture was invalidated by an earlier call (emulated)";
    case cudaErrorStreamCaptureUnmatched: return "the capture did not begin on this stream (emulated)";
    case cudaErrorStreamCaptureUnjoined: return "a stream forked into the capture did not join its origin (emulated)";
    case cudaErrorStreamCaptureIsolation: return "a dependency would cross the capture's boundary (emulated)";
    case cudaErrorStreamCaptureImplicit: return "legacy-stream work beside a capturing blocking stream (emulated)";
    case cudaErrorStreamCaptureWrongThread: return "the capture must end on the thread that began it (emulated)";
    default: return "unrecognized error code";
  }
}

// ---- device ------------------------------------------------------------------------------------

// The emulation implements the runtime API of the CUDA headers it is compiled against, and acts
// as its own driver.
cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return record(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return record(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return record(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device_index) {
  return device_index == 0 ? cudaSuccess : record(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int* device_index) {
  if (device_index == nullptr) return record(cudaErrorInvalidValue);
  *device_index = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device_index) {
  if (properties == nullptr) return record(cudaErrorInvalidValue);
  if (device_index != 0) return record(cudaErrorInvalidDevice);
  *properties = device().properties();
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device_index) {
  if (value == nullptr) return record(cudaErrorInvalidValue);
  if (device_index != 0) return record(cudaErrorInvalidDevice);
  const cudaDeviceProp& p = device().properties();
  switch (attribute) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    default: return record(cudaErrorInvalidValue);  // not emulated: say so instead of guessing
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  llmc::notify_host_wait("cudaDeviceSynchronize");
  return record(device().synchronize_all());
}

cudaError_t cudaDeviceReset(void) { return record(device().synchronize_all()); }

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return record(cudaErrorInvalidValue);
  *total_bytes = device().total_memory_bytes();
  const size_t used = device().device_bytes_in_use();
  *free_bytes = used < *total_bytes ? *total_bytes - used : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least != nullptr) *least = llmc::emu::kLeastStreamPriority;
  if (greatest != nullptr) *greatest = llmc::emu::kGreatestStreamPriority;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* function, cudaFuncAttribute attribute, int value) {
  if (function == nullptr) return record(cudaErrorInvalidDeviceFunction);
  switch (attribute) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
      return record(device().set_max_dynamic_shared(function, value));
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      return value >= -1 && value <= 100 ? cudaSuccess : record(cudaErrorInvalidValue);
    default:
      return record(cudaErrorInvalidValue);
  }
}

// ---- memory ------------------------------------------------------------------------------------

// cudaMalloc, cudaFree and the pinned allocations are what CUDA calls potentially unsafe during a capture
// (EmulatedDevice::check_unsafe_call); the stream-ordered ones are not emulated in captures.
cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  if (cudaError_t error = device().check_unsafe_call("cudaMalloc"); error != cudaSuccess) return record(error);
  return record(device().allocate(pointer, bytes, MemoryKind::kDevice));
}
cudaError_t cudaFree(void* pointer) {
  if (cudaError_t error = device().check_unsafe_call("cudaFree"); error != cudaSuccess) return record(error);
  return record(device().release(pointer, MemoryKind::kDevice));
}
// Stream-ordered allocation: the memory exists from the call on (at least as early as a GPU makes it usable
// to the stream's later work), and cudaFreeAsync releases it when the stream reaches the free, after every
// earlier task of the stream, so a use of it enqueued before the free still finds it.
cudaError_t cudaMallocAsync(void** pointer, size_t bytes, cudaStream_t stream) {
  if (cudaError_t error = device().check_not_capturing(stream, "cudaMallocAsync (not emulated in captures)");
      error != cudaSuccess)
    return record(error);
  return record(device().allocate(pointer, bytes, MemoryKind::kDevice));
}
cudaError_t cudaFreeAsync(void* pointer, cudaStream_t stream) {
  MemoryKind kind;
  if (device().classify(pointer, 1, &kind) != cudaSuccess || kind != MemoryKind::kDevice)
    return record(cudaErrorInvalidValue);
  if (cudaError_t error = device().check_not_capturing(stream, "cudaFreeAsync (not emulated in captures)");
      error != cudaSuccess)
    return record(error);
  return record(device().enqueue(stream, [pointer] {
    if (device().release_in_stream_order(pointer) != cudaSuccess)
      std::fprintf(stderr, "emulation: cudaFreeAsync: %p is no longer a device allocation\n", pointer);
  }));
}
cudaError_t cudaMallocHost(void** pointer, size_t bytes) {
  if (cudaError_t error = device().check_unsafe_call("cudaMallocHost"); error != cudaSuccess) return record(error);
  return record(device().allocate(pointer, bytes, MemoryKind::kPinnedHost));
}
cudaError_t cudaHostAlloc(void** pointer, size_t bytes, unsigned int flags) {
  if (cudaError_t error = device().check_unsafe_call("cudaHostAlloc"); error != cudaSuccess) return record(error);
  return record(device().allocate(pointer, bytes, MemoryKind::kPinnedHost));
}
cudaError_t cudaFreeHost(void* pointer) {
  if (cudaError_t error = device().check_unsafe_call("cudaFreeHost"); error != cudaSuccess) return record(error);
  return record(device().release(pointer, MemoryKind::kPinnedHost));
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return enqueue_copy(dst, src, count, nullptr, CopyCall::kSynchronous);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return enqueue_copy(dst, src, count, stream, CopyCall::kAsynchronous);
}
cudaError_t cudaMemset(void* pointer, int value, size_t count) {
  return enqueue_memset(pointer, value, count, nullptr);
}
cudaError_t cudaMemsetAsync(void* pointer, int value, size_t count, cudaStream_t stream) {
  return enqueue_memset(pointer, value, count, stream);
}

// ---- streams -----------------------------------------------------------------------------------

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  if (stream == nullptr) return record(cudaErrorInvalidValue);
  *stream = device().create_stream(cudaStreamDefault, 0);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) return record(cudaErrorInvalidValue);
  *stream = device().create_stream(flags, 0);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) return record(cudaErrorInvalidValue);
  // CUDA clamps priorities into the supported range. The emulation records the priority only.
  if (priority > llmc::emu::kLeastStreamPriority) priority = llmc::emu::kLeastStreamPriority;
  if (priority < llmc::emu::kGreatestStreamPriority) priority = llmc::emu::kGreatestStreamPriority;
  *stream = device().create_stream(flags, priority);
  return cudaSuccess;
}
cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  if (priority == nullptr) return record(cudaErrorInvalidValue);
  *priority = device().resolve(stream)->priority;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    return record(cudaErrorInvalidResourceHandle);
  }
  device().destroy_stream(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  llmc::notify_host_wait("cudaStreamSynchronize");
  return record(device().synchronize_stream(stream));
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (cudaError_t error = device().check_not_capturing(stream, "cudaStreamQuery of a capturing stream");
      error != cudaSuccess)
    return record(error);
  const auto& worker = device().resolve(stream)->worker;
  return worker->is_complete(worker->last_enqueued()) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t function, void* user_data) {
  if (function == nullptr) return record(cudaErrorInvalidValue);
  return record(device().enqueue(stream, [function, user_data] { function(user_data); }));
}

// ---- events ------------------------------------------------------------------------------------

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (event == nullptr) return record(cudaErrorInvalidValue);
  *event = new CUevent_st();
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (event == nullptr || (flags & ~known) != 0) return record(cudaErrorInvalidValue);
  if (flags & cudaEventInterprocess) return record(cudaErrorNotSupported);
  *event = new CUevent_st();
  (*event)->flags = flags;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return record(cudaErrorInvalidResourceHandle);
  delete event;  // pending records only hold the timestamp cell, which they share
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return record(cudaErrorInvalidResourceHandle);
  auto timestamp = std::make_shared<std::atomic<int64_t>>(-1);
  std::lock_guard<std::mutex> lock(event->mutex);
  bool captured = false;
  if (cudaError_t error = device().record_event_in_capture(event, stream, &captured); captured || error != cudaSuccess)
    return record(error);
  uint64_t sequence = 0;
  if (cudaError_t error = device().enqueue(stream, [timestamp] { timestamp->store(now_ns()); }, &sequence);
      error != cudaSuccess)
    return record(error);
  event->sequence = sequence;
  event->worker = device().resolve(stream)->worker;
  event->recorder_priority = device().resolve(stream)->priority;
  event->timestamp_ns = std::move(timestamp);
  return cudaSuccess;
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  if (flags != cudaEventRecordDefault && flags != cudaEventRecordExternal) return record(cudaErrorInvalidValue);
  if (event == nullptr) return record(cudaErrorInvalidResourceHandle);
  if (flags == cudaEventRecordExternal) {
    std::lock_guard<std::mutex> lock(event->mutex);
    bool captured = false;
    if (cudaError_t error = device().record_external_event_in_capture(event, stream, &captured);
        captured || error != cudaSuccess)
      return record(error);
  }
  return cudaEventRecord(event, stream);  // outside a capture an external record is a record
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event == nullptr) return record(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(event->mutex);
  if (cudaError_t error = device().check_event_not_captured(event, "cudaEventQuery"); error != cudaSuccess)
    return record(error);
  if (event->worker == nullptr) return cudaSuccess;  // never recorded: complete, as in CUDA
  return event->worker->is_complete(event->sequence) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return record(cudaErrorInvalidResourceHandle);
  std::shared_ptr<llmc::emu::StreamWorker> worker;
  uint64_t sequence;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    if (cudaError_t error = device().check_event_not_captured(event, "cudaEventSynchronize"); error != cudaSuccess)
      return record(error);
    worker = event->worker;
    sequence = event->sequence;
  }
  llmc::notify_host_wait("cudaEventSynchronize");
  if (worker != nullptr) worker->wait_until_complete(sequence);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (event == nullptr) return record(cudaErrorInvalidResourceHandle);
  std::shared_ptr<llmc::emu::StreamWorker> producer;
  uint64_t sequence;
  int producer_priority;
  {
    std::lock_guard<std::mutex> lock(event->mutex);
    bool in_capture = false;
    if (cudaError_t error = device().wait_event_in_capture(stream, event, &in_capture);
        in_capture || error != cudaSuccess)
      return record(error);
    producer = event->worker;
    sequence = event->sequence;
    producer_priority = event->recorder_priority;
  }
  // Never recorded: nothing to wait for. Same stream: stream order already implies it (and a
  // task must not own its own worker).
  CUstream_st* waiting = device().resolve(stream);
  if (producer == nullptr || producer == waiting->worker) return cudaSuccess;
  // Greater priority is a smaller number; see EmulatedDevice::drops_waits_on_priority_streams.
  if (device().drops_waits_on_priority_streams() && producer_priority < waiting->priority) return cudaSuccess;
  return record(device().enqueue(stream, llmc::emu::wait_task(producer, sequence)));
}
// ---- stream capture and graphs (docs/emulation.md#cuda-graphs) -----------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return record(cudaErrorInvalidValue);
  return record(device().begin_capture(stream, mode));
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (graph == nullptr) return record(cudaErrorInvalidValue);
  *graph = nullptr;
  llmc::emu::CapturedGraph captured;
  if (cudaError_t error = device().end_capture(stream, &captured); error != cudaSuccess) return record(error);
  *graph = new CUgraph_st{std::move(captured)};
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (status == nullptr) return record(cudaErrorInvalidValue);
  return record(device().capture_status(stream, status));
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (exec == nullptr || graph == nullptr || flags != 0) return record(cudaErrorInvalidValue);
  return record(device().instantiate(exec, graph));
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return record(cudaErrorInvalidValue);
  return record(device().launch_graph(exec, stream));
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  if (exec == nullptr) return record(cudaErrorInvalidValue);
  delete exec;  // its lanes finish their queued replays first
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  if (graph == nullptr) return record(cudaErrorInvalidValue);
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end) {
  if (milliseconds == nullptr) return record(cudaErrorInvalidValue);
  if (start == nullptr || end == nullptr) return record(cudaErrorInvalidResourceHandle);
  if ((start->flags | end->flags) & cudaEventDisableTiming) return record(cudaErrorInvalidResourceHandle);
  std::shared_ptr<std::atomic<int64_t>> start_stamp, end_stamp;
  {
    std::lock_guard<std::mutex> lock(start->mutex);
    start_stamp = start->timestamp_ns;
  }
  {
    std::lock_guard<std::mutex> lock(end->mutex);
    end_stamp = end->timestamp_ns;
  }
  if (start_stamp == nullptr || end_stamp == nullptr) return record(cudaErrorInvalidResourceHandle);
  const int64_t start_ns = start_stamp->load();
  const int64_t end_ns = end_stamp->load();
  if (start_ns < 0 || end_ns < 0) return record(cudaErrorNotReady);
  *milliseconds = static_cast<float>(static_cast<double>(end_ns - start_ns) * 1e-6);
  return cudaSuccess;
}

}  // extern "C"
