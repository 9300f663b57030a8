// CUDA graphs in the emulation: what a stream capture records (each task a stream would have run becomes a node
// that waits for the nodes before it in its stream and for the captured events its stream waited on), and the
// checks CUDA makes of a capture sequence (every forked stream joined back into the origin before it ends). The
// device (emulated_device.h) routes enqueues here while a stream captures and replays instantiated graphs.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

struct CUstream_st;
struct CUevent_st;

namespace llmc::emu {

// A task of a captured stream and the nodes it waits for; `lane`: which captured stream recorded it (0 the origin),
// so that a replay runs each lane's nodes in order and the lanes side by side, as the streams ran.
struct GraphNode {
  std::function<void()> task;
  std::vector<size_t> dependencies;  // earlier nodes
  int lane = 0;
  // An external event record node (cudaEventRecordWithFlags with cudaEventRecordExternal): each launch records
  // this event, which the host and other streams may then query and wait for as any recorded event.
  CUevent_st* records = nullptr;
};

struct CapturedGraph {
  std::vector<GraphNode> nodes;  // in capture order: dependencies always point back
  int lanes = 1;
};

// One capture sequence, from cudaStreamBeginCapture on its origin stream to cudaStreamEndCapture there. The
// device's stream mutex guards it.
class StreamCapture {
 public:
  StreamCapture(CUstream_st* origin, cudaStreamCaptureMode mode);

  CUstream_st* origin() const { return origin_; }
  cudaStreamCaptureMode mode() const { return mode_; }
  std::thread::id thread() const { return thread_; }
  bool invalidated() const { return !invalidated_by_.empty(); }
  bool ended() const { return ended_; }
  void end() { ended_ = true; }
  const std::string& invalidated_by() const { return invalidated_by_; }
  void invalidate(const std::string& why);  // keeps the first reason

  // A node on `stream`'s lane after its last one and whatever it waited on since.
  void add(const CUstream_st* stream, std::function<void()> task);
  // An external event record node on `stream`'s lane (its task empty: the launch records the event).
  void add_event_record(const CUstream_st* stream, CUevent_st* event);
  // The nodes a later node of `stream` would wait for (a captured event records this).
  std::vector<size_t> frontier(const CUstream_st* stream) const;
  // `stream` waits for `nodes` (a captured event): it joins the capture if it was not in it.
  void wait(const CUstream_st* stream, const std::vector<size_t>& nodes);

  // The streams whose work the origin does not wait for (cudaErrorStreamCaptureUnjoined when not empty).
  int unjoined_streams() const;
  CapturedGraph take_graph();

 private:
  struct Lane {
    int index = 0;
    std::vector<size_t> frontier;  // the last node and the captured events waited on since
  };
  bool reaches(size_t from, const std::vector<size_t>& targets) const;  // a target depends on `from`

  CUstream_st* origin_;
  cudaStreamCaptureMode mode_;
  std::thread::id thread_;
  std::string invalidated_by_;
  bool ended_ = false;
  std::map<const CUstream_st*, Lane> streams_;
  CapturedGraph graph_;
};

}  // namespace llmc::emu
