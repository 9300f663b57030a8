// Chrome trace-event recording from CUDA events, and the overlap arithmetic (see trace.h).
#include "llmc/dist/trace.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include <nlohmann/json.hpp>

#include "llmc/base/atomic_file.h"
#include "llmc/cuda/cuda_common.h"

namespace llmc {

namespace {

// Sorted, disjoint union of the intervals (empty or inverted ones dropped).
std::vector<TraceInterval> merge(std::vector<TraceInterval> intervals) {
  intervals.erase(std::remove_if(intervals.begin(), intervals.end(),
                                 [](const TraceInterval& i) { return !(i.end_us > i.begin_us); }),
                  intervals.end());
  std::sort(intervals.begin(), intervals.end(),
            [](const TraceInterval& a, const TraceInterval& b) { return a.begin_us < b.begin_us; });
  std::vector<TraceInterval> merged;
  for (const TraceInterval& interval : intervals) {
    if (!merged.empty() && interval.begin_us <= merged.back().end_us) {
      merged.back().end_us = std::max(merged.back().end_us, interval.end_us);
    } else {
      merged.push_back(interval);
    }
  }
  return merged;
}

double length(const std::vector<TraceInterval>& disjoint) {
  double total = 0.0;
  for (const TraceInterval& interval : disjoint) total += interval.end_us - interval.begin_us;
  return total;
}

double elapsed_us(cudaEvent_t from, cudaEvent_t to) {
  float milliseconds = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&milliseconds, from, to));
  return static_cast<double>(milliseconds) * 1000.0;
}

}  // namespace

OverlapFigures compute_overlap(const std::vector<TraceInterval>& compute,
                               const std::vector<TraceInterval>& comm) {
  const std::vector<TraceInterval> compute_union = merge(compute);
  const std::vector<TraceInterval> comm_union = merge(comm);
  // Both lists are sorted and disjoint: one sweep finds the covered part of the comm time.
  double covered = 0.0;
  size_t c = 0;
  for (const TraceInterval& m : comm_union) {
    while (c < compute_union.size() && compute_union[c].end_us <= m.begin_us) ++c;
    for (size_t k = c; k < compute_union.size() && compute_union[k].begin_us < m.end_us; ++k) {
      covered += std::min(m.end_us, compute_union[k].end_us) - std::max(m.begin_us, compute_union[k].begin_us);
    }
  }
  OverlapFigures figures;
  figures.comm_us = length(comm_union);
  figures.exposed_comm_us = std::max(0.0, figures.comm_us - covered);
  figures.overlapped_fraction = figures.comm_us > 0.0 ? covered / figures.comm_us : 0.0;
  return figures;
}

Tracer::Tracer(bool enabled, int rank) : enabled_(enabled), rank_(rank) {}

Tracer::~Tracer() {
  // Destroying an event whose record is still pending is allowed: CUDA frees it once complete.
  std::vector<cudaEvent_t> events = free_events_;
  for (const PendingSlice& slice : pending_) {
    events.push_back(slice.begin);
    if (slice.end != nullptr) events.push_back(slice.end);
  }
  if (trace_origin_ != nullptr) events.push_back(trace_origin_);
  for (cudaEvent_t event : events) (void)cudaEventDestroy(event);
}

cudaEvent_t Tracer::take_event() {
  if (!free_events_.empty()) {
    cudaEvent_t event = free_events_.back();
    free_events_.pop_back();
    return event;
  }
  cudaEvent_t event = nullptr;
  CUDA_CHECK(cudaEventCreate(&event));  // timing enabled
  return event;
}

Tracer::SliceId Tracer::begin(cudaStream_t stream, TraceTrack track, std::string name, TraceArgs args) {
  if (!enabled_) return 0;
  if (trace_origin_ == nullptr) {
    CUDA_CHECK(cudaEventCreate(&trace_origin_));
    CUDA_CHECK(cudaEventRecord(trace_origin_, stream));
  }
  PendingSlice slice{track, std::move(name), std::move(args), take_event(), nullptr};
  CUDA_CHECK(cudaEventRecord(slice.begin, stream));
  pending_.push_back(std::move(slice));
  return pending_.size() - 1;
}

void Tracer::end(SliceId slice, cudaStream_t stream) {
  if (!enabled_) return;
  if (slice >= pending_.size() || pending_[slice].end != nullptr) {
    throw std::logic_error("Tracer::end: slice " + std::to_string(slice) +
                           " was not begun in this step or was already ended");
  }
  pending_[slice].end = take_event();
  CUDA_CHECK(cudaEventRecord(pending_[slice].end, stream));
}

OverlapFigures Tracer::flush_step() {
  if (!enabled_) return {};
  for (const PendingSlice& slice : pending_) {
    if (slice.end == nullptr) {
      throw std::logic_error("Tracer::flush_step: slice '" + slice.name + "' of step " +
                             std::to_string(step_) + " was begun but never ended");
    }
  }
  std::vector<TraceInterval> compute, comm;
  if (!pending_.empty()) {
    for (const PendingSlice& slice : pending_) {
      CUDA_CHECK(cudaEventSynchronize(slice.begin));
      CUDA_CHECK(cudaEventSynchronize(slice.end));
    }
    CUDA_CHECK(cudaEventSynchronize(trace_origin_));
    // cudaEventElapsedTime returns float milliseconds: measuring each slice from an event of its
    // own step keeps microsecond resolution however long the run; only the step's offset in the
    // file is measured from the trace origin.
    const cudaEvent_t step_origin = pending_.front().begin;
    const double step_offset_us = elapsed_us(trace_origin_, step_origin);
    for (PendingSlice& slice : pending_) {
      const double begin_us = step_offset_us + elapsed_us(step_origin, slice.begin);
      const double duration_us = elapsed_us(slice.begin, slice.end);
      nlohmann::json args = nlohmann::json::object();
      for (const auto& [key, value] : slice.args) args[key] = value;
      args["step"] = step_;
      const bool is_comm = slice.track == TraceTrack::kComm;
      slices_.push_back({{"name", slice.name},
                         {"cat", is_comm ? "comm" : "compute"},
                         {"ph", "X"},
                         {"pid", rank_},
                         {"tid", static_cast<int>(slice.track)},
                         {"ts", begin_us},
                         {"dur", duration_us},
                         {"args", std::move(args)}});
      (is_comm ? comm : compute).push_back({begin_us, begin_us + duration_us});
      free_events_.push_back(slice.begin);
      free_events_.push_back(slice.end);
    }
  }
  pending_.clear();
  ++step_;
  return compute_overlap(compute, comm);
}

void Tracer::discard_step() {
  if (!enabled_) return;
  const size_t kept = slices_.size();
  flush_step();
  slices_.resize(kept);
  --step_;
}

void Tracer::write(const std::string& path) const {
  if (!enabled_) return;
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_}, {"args", {{"name", "rank " + std::to_string(rank_)}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", static_cast<int>(TraceTrack::kCompute)},
                    {"args", {{"name", "compute"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", static_cast<int>(TraceTrack::kComm)},
                    {"args", {{"name", "comm"}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank_}, {"tid", static_cast<int>(TraceTrack::kUpdate)},
                    {"args", {{"name", "optimizer update"}}}});
  for (const nlohmann::json& slice : slices_) events.push_back(slice);
  const nlohmann::json document = {
      {"traceEvents", std::move(events)},
      {"displayTimeUnit", "ms"},
      {"otherData", {{"rank", rank_},
#if defined(LLMC_EMULATION)
                     {"clock", "emulated device (host steady clock at stream execution)"}
#else
                     {"clock", "CUDA events"}
#endif
                    }}};
  const std::string text = document.dump(1);
  AtomicFileWriter writer(path);
  writer.write(text.data(), text.size());
  writer.commit();
}

}  // namespace llmc
