// Per-rank timeline of a training run as Chrome trace-event JSON (opens in Perfetto or
// chrome://tracing): named slices on a "compute" track (tid 1) and a "comm" track (tid 2), pid = rank,
// timed by CUDA events recorded on the streams (the emulated clock in the emulated build), plus the
// per-step overlap figures the step log reports: comm time, exposed comm time, overlapped fraction.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

// Declarations only: the full header costs 2-5 s of compile time in each of the ~30 translation units that
// include this one (nvcc's among them); trace.cpp and the tests that read slices() include it.
#include <nlohmann/json_fwd.hpp>

namespace llmc {

// = the tid in the JSON. kUpdate: an optimizer's own update stream (the speedrun optimizer's NorMuon and
// Adam); it counts as compute in the overlap figures (comm hidden under it is hidden).
enum class TraceTrack : int { kCompute = 1, kComm = 2, kUpdate = 3 };

// A closed time interval in microseconds.
struct TraceInterval {
  double begin_us = 0.0;
  double end_us = 0.0;
};

struct OverlapFigures {
  double comm_us = 0.0;          // time during which some comm slice runs (union of comm slices)
  double exposed_comm_us = 0.0;  // part of it during which no compute slice runs
  // (comm - exposed) / comm; 0 when there was no communication at all.
  double overlapped_fraction = 0.0;
};

// Pure interval arithmetic behind the figures (slices on a track may nest or overlap).
OverlapFigures compute_overlap(const std::vector<TraceInterval>& compute,
                               const std::vector<TraceInterval>& comm);

class Tracer;

// A slice's arguments (e.g. {{"bucket", 3}, {"bytes", 14175744}}), written into its JSON "args" with the step.
using TraceArgs = std::vector<std::pair<std::string, int64_t>>;

// Runs `work` (which enqueues on `stream`) inside a named slice of `track`; without a tracer (null) or with a
// disabled one nothing is recorded.
template <class Work>
void traced(Tracer* tracer, cudaStream_t stream, TraceTrack track, const char* name, TraceArgs args, Work&& work);

class Tracer {
 public:
  using SliceId = size_t;

  // A disabled tracer records nothing: begin/end/flush_step return at once, write does nothing.
  Tracer(bool enabled, int rank);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool enabled() const { return enabled_; }

  // Records a begin event on `stream` now (in stream order); args become the slice's "args"
  // (e.g. {"bucket", 3}, {"bytes", 14175744}, {"layer", 11}); the step number is added.
  SliceId begin(cudaStream_t stream, TraceTrack track, std::string name, TraceArgs args = {});
  // Records the end event of `slice` on `stream` (normally the stream that did the work).
  void end(SliceId slice, cudaStream_t stream);

  // Ends the step: waits for this step's events, converts them into slices, recycles the events
  // and returns the step's overlap figures. Throws std::logic_error if a slice was never ended.
  OverlapFigures flush_step();
  // Ends the step as flush_step does but keeps none of its slices and leaves the step number (the untimed
  // warm-up's steps: the trace shows the run's own).
  void discard_step();

  // Writes every flushed slice as Chrome trace-event JSON, atomically (temp file + rename).
  void write(const std::string& path) const;

  // The flushed slices ("ph":"X" events), for tests and summaries (their reader includes nlohmann/json.hpp).
  const std::vector<nlohmann::json>& slices() const { return slices_; }

 private:
  struct PendingSlice {
    TraceTrack track;
    std::string name;
    TraceArgs args;
    cudaEvent_t begin = nullptr;
    cudaEvent_t end = nullptr;
  };

  cudaEvent_t take_event();

  bool enabled_;
  int rank_;
  int step_ = 0;
  cudaEvent_t trace_origin_ = nullptr;  // the first event ever recorded: time zero of the file
  std::vector<PendingSlice> pending_;   // this step's slices, in begin order
  std::vector<cudaEvent_t> free_events_;
  std::vector<nlohmann::json> slices_;
};

template <class Work>
void traced(Tracer* tracer, cudaStream_t stream, TraceTrack track, const char* name, TraceArgs args, Work&& work) {
  if (tracer == nullptr) {
    work();
    return;
  }
  const Tracer::SliceId slice = tracer->begin(stream, track, name, std::move(args));
  work();
  tracer->end(slice, stream);
}

}  // namespace llmc
