// The emulated device's stream capture and graph launches (see emulated_device.h and stream_capture.h): CUDA's
// capture rules as the CUDA programming guide states them (no waits on a capturing stream or the device, no
// potentially unsafe calls by the mode's threads, no legacy-stream work beside a capturing blocking stream, no
// dependency across a capture's boundary, every fork joined), and replays that run each captured stream's nodes in
// order on a worker of its own, the streams side by side, as on a GPU.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "llmc/emu/emulated_device.h"

namespace llmc::emu {

namespace {

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// An external event record node's part of a launch: the record's task on its lane, which the event now stands for,
// as cudaEventRecord on a stream would make it (its timestamp taken when the lane reaches it).
uint64_t record_at_launch(CUevent_st* event, const std::shared_ptr<StreamWorker>& lane) {
  auto timestamp = std::make_shared<std::atomic<int64_t>>(-1);
  const uint64_t sequence = lane->enqueue([timestamp] { timestamp->store(steady_now_ns()); });
  std::lock_guard<std::mutex> lock(event->mutex);
  event->worker = lane;
  event->sequence = sequence;
  event->recorder_priority = 0;
  event->timestamp_ns = std::move(timestamp);
  event->capture = nullptr;
  event->captured_nodes.clear();
  return sequence;
}

void report(const std::string& why) { std::fprintf(stderr, "emulation: stream capture: %s\n", why.c_str()); }

}  // namespace

bool EmulatedDevice::blocking_stream_captures() const {
  for (const CUstream_st* stream : streams_)
    if (stream->capture != nullptr && !(stream->flags & cudaStreamNonBlocking)) return true;
  return false;
}

cudaError_t EmulatedDevice::refuse_in_capture(CUstream_st* stream, const std::string& why, cudaError_t error) {
  for (CUstream_st* other : streams_) {
    if (other->capture == nullptr) continue;
    const bool blocking = !(other->flags & cudaStreamNonBlocking);
    if (other == stream || (stream == nullptr && blocking)) other->capture->invalidate(why);
  }
  report(why + " is not allowed while a stream captures: the capture is invalidated");
  return error;
}

cudaError_t EmulatedDevice::begin_capture(cudaStream_t handle, cudaStreamCaptureMode mode) {
  if (is_legacy_handle(handle)) return cudaErrorStreamCaptureUnsupported;  // the legacy stream cannot capture
  std::lock_guard<std::mutex> lock(stream_mutex_);
  CUstream_st* stream = resolve(handle);
  if (stream->capture != nullptr) return cudaErrorIllegalState;
  stream->capture = std::make_shared<StreamCapture>(stream, mode);
  return cudaSuccess;
}

cudaError_t EmulatedDevice::end_capture(cudaStream_t handle, CapturedGraph* graph) {
  std::lock_guard<std::mutex> lock(stream_mutex_);
  CUstream_st* stream = resolve(handle);
  const std::shared_ptr<StreamCapture> capture = stream->capture;
  if (capture == nullptr) return cudaErrorIllegalState;
  if (capture->origin() != stream) {
    capture->invalidate("cudaStreamEndCapture on a stream that joined the capture, not its origin");
    return cudaErrorStreamCaptureUnmatched;
  }
  if (capture->mode() != cudaStreamCaptureModeRelaxed && capture->thread() != std::this_thread::get_id())
    return cudaErrorStreamCaptureWrongThread;
  capture->end();
  for (CUstream_st* other : streams_)
    if (other->capture == capture) other->capture = nullptr;
  if (capture->invalidated()) return cudaErrorStreamCaptureInvalidated;
  if (const int unjoined = capture->unjoined_streams(); unjoined > 0) {
    report(std::to_string(unjoined) + " stream(s) forked into the capture did not join its origin before it ended");
    return cudaErrorStreamCaptureUnjoined;
  }
  *graph = capture->take_graph();
  return cudaSuccess;
}

cudaError_t EmulatedDevice::capture_status(cudaStream_t handle, cudaStreamCaptureStatus* status) {
  std::lock_guard<std::mutex> lock(stream_mutex_);
  CUstream_st* stream = resolve(handle);
  if (stream == &legacy_stream_ && blocking_stream_captures()) return cudaErrorStreamCaptureImplicit;
  if (stream->capture == nullptr)
    *status = cudaStreamCaptureStatusNone;
  else
    *status = stream->capture->invalidated() ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t EmulatedDevice::check_unsafe_call(const char* call) {
  std::lock_guard<std::mutex> lock(stream_mutex_);
  const std::thread::id self = std::this_thread::get_id();
  for (CUstream_st* stream : streams_) {
    const StreamCapture* capture = stream->capture.get();
    if (capture == nullptr || capture->origin() != stream) continue;
    const bool own = capture->thread() == self && capture->mode() != cudaStreamCaptureModeRelaxed;
    const bool global = capture->thread() != self && capture->mode() == cudaStreamCaptureModeGlobal;
    if (own || global) return refuse_in_capture(stream, call, cudaErrorStreamCaptureUnsupported);
  }
  return cudaSuccess;
}

cudaError_t EmulatedDevice::check_not_capturing(cudaStream_t handle, const char* call) {
  std::lock_guard<std::mutex> lock(stream_mutex_);
  CUstream_st* stream = resolve(handle);
  if (stream == &legacy_stream_ && blocking_stream_captures())
    return refuse_in_capture(nullptr, call, cudaErrorStreamCaptureImplicit);
  if (stream->capture != nullptr) return refuse_in_capture(stream, call, cudaErrorStreamCaptureUnsupported);
  return cudaSuccess;
}

cudaError_t EmulatedDevice::record_event_in_capture(cudaEvent_t event, cudaStream_t handle, bool* handled) {
  std::lock_guard<std::mutex> lock(stream_mutex_);
  CUstream_st* stream = resolve(handle);
  *handled = stream->capture != nullptr;
  if (!*handled) {
    event->capture = nullptr;
    event->captured_nodes.clear();
    return cudaSuccess;
  }
  if (stream->capture->invalidated()) return cudaErrorStreamCaptureInvalidated;
  event->capture = stream->capture;
  event->captured_nodes = stream->capture->frontier(stream);
  return cudaSuccess;
}

cudaError_t EmulatedDevice::record_external_event_in_capture(cudaEvent_t event, cudaStream_t handle, bool* handled) {
  std::lock_guard<std::mutex> lock(stream_mutex_);
  CUstream_st* stream = resolve(handle);
  *handled = stream->capture != nullptr;
  if (!*handled) return cudaSuccess;
  if (stream->capture->invalidated()) return cudaErrorStreamCaptureInvalidated;
  stream->capture->add_event_record(stream, event);
  return cudaSuccess;
}

cudaError_t EmulatedDevice::wait_event_in_capture(cudaStream_t handle, cudaEvent_t event, bool* handled) {
  std::lock_guard<std::mutex> lock(stream_mutex_);
  CUstream_st* stream = resolve(handle);
  const std::shared_ptr<StreamCapture>& captured = event->capture;
  *handled = captured != nullptr || stream->capture != nullptr;
  if (!*handled) return cudaSuccess;
  if (captured == nullptr)  // the capture would depend on work outside it
    return refuse_in_capture(stream, "a capturing stream waiting on an event recorded outside the capture",
                             cudaErrorStreamCaptureIsolation);
  if (captured->ended() || (stream->capture != nullptr && stream->capture != captured)) {
    // The event's capture has ended, or the stream captures another graph: two graphs would merge.
    if (stream->capture != nullptr) stream->capture->invalidate("a wait on another capture's event");
    captured->invalidate("a wait on its event from another capture");
    report("a wait on an event recorded in another (or an ended) capture");
    return cudaErrorStreamCaptureIsolation;
  }
  if (is_legacy_handle(handle)) return refuse_in_capture(nullptr, "the legacy stream joining a capture",
                                                  cudaErrorStreamCaptureImplicit);
  if (captured->invalidated()) return cudaErrorStreamCaptureInvalidated;
  stream->capture = captured;  // a stream not yet in the capture forks into it
  captured->wait(stream, event->captured_nodes);
  return cudaSuccess;
}

cudaError_t EmulatedDevice::check_event_not_captured(cudaEvent_t event, const char* call) {
  if (event->capture == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(stream_mutex_);
  event->capture->invalidate(std::string(call) + " of a captured event");
  report(std::string(call) + " of an event last recorded in a capture: it stands for graph nodes, not stream work");
  return cudaErrorStreamCaptureUnsupported;
}

cudaError_t EmulatedDevice::instantiate(cudaGraphExec_t* exec, cudaGraph_t graph) {
  auto* instance = new CUgraphExec_st();
  instance->graph = std::make_shared<const CapturedGraph>(graph->graph);
  for (int lane = 0; lane < graph->graph.lanes; lane++)
    instance->lanes.push_back(std::make_shared<StreamWorker>("graph lane " + std::to_string(lane)));
  *exec = instance;
  return cudaSuccess;
}

cudaError_t EmulatedDevice::launch_graph(cudaGraphExec_t exec, cudaStream_t stream) {
  if (cudaError_t error = check_not_capturing(stream, "a graph launch into a capture (not emulated)");
      error != cudaSuccess)
    return error;
  std::lock_guard<std::mutex> lock(exec->mutex);
  uint64_t start = 0;
  if (cudaError_t error = enqueue(stream, [] {}, &start); error != cudaSuccess) return error;
  const std::shared_ptr<StreamWorker> stream_worker = resolve(stream)->worker;
  const std::shared_ptr<const CapturedGraph> graph = exec->graph;
  std::vector<uint64_t> done(graph->nodes.size(), 0);
  std::vector<bool> lane_started(exec->lanes.size(), false);
  for (size_t i = 0; i < graph->nodes.size(); i++) {
    const GraphNode& node = graph->nodes[i];
    StreamWorker& lane = *exec->lanes[static_cast<size_t>(node.lane)];
    if (!lane_started[static_cast<size_t>(node.lane)]) {  // after the stream's earlier work and the last launch
      lane.enqueue(wait_task(stream_worker, start));
      if (exec->last_stream != nullptr) lane.enqueue(wait_task(exec->last_stream, exec->last_end));
      lane_started[static_cast<size_t>(node.lane)] = true;
    }
    for (size_t dependency : node.dependencies) {
      const int other = graph->nodes[dependency].lane;
      if (other != node.lane) lane.enqueue(wait_task(exec->lanes[static_cast<size_t>(other)], done[dependency]));
    }
    if (node.records != nullptr) {
      done[i] = record_at_launch(node.records, exec->lanes[static_cast<size_t>(node.lane)]);
      continue;
    }
    done[i] = lane.enqueue([graph, i] { graph->nodes[i].task(); });
  }
  std::vector<std::function<void()>> lane_ends;
  for (size_t lane = 0; lane < exec->lanes.size(); lane++)
    if (lane_started[lane]) lane_ends.push_back(wait_task(exec->lanes[lane], exec->lanes[lane]->last_enqueued()));
  uint64_t end = 0;
  if (cudaError_t error = enqueue(stream, [lane_ends] { for (const auto& wait : lane_ends) wait(); }, &end);
      error != cudaSuccess)
    return error;
  exec->last_stream = stream_worker;
  exec->last_end = end;
  return cudaSuccess;
}

}  // namespace llmc::emu
