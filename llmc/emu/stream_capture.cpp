// A capture sequence's graph and its join check (see stream_capture.h).
#include "llmc/emu/stream_capture.h"

#include <algorithm>
#include <utility>

namespace llmc::emu {

StreamCapture::StreamCapture(CUstream_st* origin, cudaStreamCaptureMode mode)
    : origin_(origin), mode_(mode), thread_(std::this_thread::get_id()) {
  streams_[origin] = Lane{0, {}};
}

void StreamCapture::invalidate(const std::string& why) {
  if (invalidated_by_.empty()) invalidated_by_ = why;
}

void StreamCapture::add(const CUstream_st* stream, std::function<void()> task) {
  Lane& lane = streams_.at(stream);
  graph_.nodes.push_back(GraphNode{std::move(task), lane.frontier, lane.index});
  lane.frontier = {graph_.nodes.size() - 1};
}

void StreamCapture::add_event_record(const CUstream_st* stream, CUevent_st* event) {
  add(stream, [] {});
  graph_.nodes.back().records = event;
}

std::vector<size_t> StreamCapture::frontier(const CUstream_st* stream) const { return streams_.at(stream).frontier; }

void StreamCapture::wait(const CUstream_st* stream, const std::vector<size_t>& nodes) {
  auto found = streams_.find(stream);
  if (found == streams_.end()) {
    found = streams_.emplace(stream, Lane{graph_.lanes++, {}}).first;
  }
  std::vector<size_t>& frontier = found->second.frontier;
  for (size_t node : nodes)
    if (std::find(frontier.begin(), frontier.end(), node) == frontier.end()) frontier.push_back(node);
}

bool StreamCapture::reaches(size_t from, const std::vector<size_t>& targets) const {
  std::vector<bool> seen(graph_.nodes.size(), false);
  std::vector<size_t> stack(targets.begin(), targets.end());
  while (!stack.empty()) {
    const size_t node = stack.back();
    stack.pop_back();
    if (node == from) return true;
    if (node < from || seen[node]) continue;  // dependencies point back: nothing below `from` leads to it
    seen[node] = true;
    for (size_t dependency : graph_.nodes[node].dependencies) stack.push_back(dependency);
  }
  return false;
}

int StreamCapture::unjoined_streams() const {
  const std::vector<size_t>& joined = streams_.at(origin_).frontier;
  int unjoined = 0;
  for (const auto& [stream, lane] : streams_) {
    if (stream == origin_) continue;
    const bool rejoined = std::all_of(lane.frontier.begin(), lane.frontier.end(),
                                      [&](size_t node) { return reaches(node, joined); });
    if (!rejoined) unjoined++;
  }
  return unjoined;
}

CapturedGraph StreamCapture::take_graph() { return std::move(graph_); }

}  // namespace llmc::emu
