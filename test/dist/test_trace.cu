// Tests of the Chrome-trace recorder and of the overlap figures: the interval arithmetic against
// hand-worked cases and a brute-force count on an integer grid; a two-stream recording (a comm slice
// held inside a compute slice by a gate, another after it) whose JSON parses, has both tracks,
// named slices with their args, begin <= end, and figures that agree with the slices.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "llmc/cuda/cuda_common.h"
#include "llmc/dist/trace.h"
#include "test/support/stream_gate.h"
#include "test/support/test_helpers.h"

namespace {

using llmc::OverlapFigures;
using llmc::TraceInterval;
using llmc::Tracer;
using llmc::TraceTrack;
using nlohmann::json;

TEST(Overlap, HandWorkedCases) {
  // comm [5,25] against compute [0,10] and [20,30]: covered 5 + 5 of 20.
  OverlapFigures f = llmc::compute_overlap({{0, 10}, {20, 30}}, {{5, 25}});
  EXPECT_DOUBLE_EQ(f.comm_us, 20.0);
  EXPECT_DOUBLE_EQ(f.exposed_comm_us, 10.0);
  EXPECT_DOUBLE_EQ(f.overlapped_fraction, 0.5);
  // Nested compute slices count once; comm [8,12] is covered on [8,10].
  f = llmc::compute_overlap({{0, 10}, {2, 4}}, {{8, 12}});
  EXPECT_DOUBLE_EQ(f.comm_us, 4.0);
  EXPECT_DOUBLE_EQ(f.exposed_comm_us, 2.0);
  // Overlapping comm slices count once; nothing covers them.
  f = llmc::compute_overlap({{20, 30}}, {{0, 5}, {3, 8}});
  EXPECT_DOUBLE_EQ(f.comm_us, 8.0);
  EXPECT_DOUBLE_EQ(f.exposed_comm_us, 8.0);
  EXPECT_DOUBLE_EQ(f.overlapped_fraction, 0.0);
  // Fully hidden.
  f = llmc::compute_overlap({{0, 100}}, {{10, 20}, {30, 40}});
  EXPECT_DOUBLE_EQ(f.exposed_comm_us, 0.0);
  EXPECT_DOUBLE_EQ(f.overlapped_fraction, 1.0);
  // No communication at all.
  f = llmc::compute_overlap({{0, 100}}, {});
  EXPECT_DOUBLE_EQ(f.comm_us, 0.0);
  EXPECT_DOUBLE_EQ(f.overlapped_fraction, 0.0);
}

// Random integer intervals: the figures equal a count of unit cells (an independent method).
TEST(Overlap, AgreesWithBruteForceOnAGrid) {
  std::mt19937 random(12345);
  std::uniform_int_distribution<int> point(0, 199), how_many(0, 8);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<TraceInterval> compute, comm;
    for (auto* list : {&compute, &comm}) {
      const int n = how_many(random);
      for (int k = 0; k < n; ++k) {
        int a = point(random), b = point(random);
        if (a > b) std::swap(a, b);
        list->push_back({static_cast<double>(a), static_cast<double>(b)});
      }
    }
    int comm_cells = 0, exposed_cells = 0;
    for (int t = 0; t < 200; ++t) {
      auto covers = [t](const std::vector<TraceInterval>& list) {
        for (const TraceInterval& i : list) {
          if (i.begin_us <= t && t + 1 <= i.end_us) return true;
        }
        return false;
      };
      if (covers(comm)) {
        ++comm_cells;
        if (!covers(compute)) ++exposed_cells;
      }
    }
    const OverlapFigures f = llmc::compute_overlap(compute, comm);
    ASSERT_DOUBLE_EQ(f.comm_us, comm_cells) << "trial " << trial;
    ASSERT_DOUBLE_EQ(f.exposed_comm_us, exposed_cells) << "trial " << trial;
  }
}

using llmc::test::Gate;

void CUDART_CB sleep_2ms(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }

class TraceFiles : public llmc::test::TempDirTest {
 protected:
  TraceFiles() : TempDirTest("llmc_test_trace") {}
};

// Two non-blocking streams, two events between them, and two device buffers whose 16 MiB copies are
// the traced "communication": real work on either target, and no host function (CUDA may run the
// host functions of all streams on one thread, which the gate would block).
class TracedStreams : public TraceFiles {
 protected:
  static constexpr size_t kCopyBytes = size_t{16} << 20;
  void SetUp() override {
    TraceFiles::SetUp();
    CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&comm_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&compute_started_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaMalloc(&copy_source_, kCopyBytes));
    CUDA_CHECK(cudaMalloc(&copy_target_, kCopyBytes));
    CUDA_CHECK(cudaMemset(copy_source_, 1, kCopyBytes));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  void TearDown() override {
    CUDA_CHECK(cudaFree(copy_source_));
    CUDA_CHECK(cudaFree(copy_target_));
    CUDA_CHECK(cudaEventDestroy(compute_started_));
    CUDA_CHECK(cudaEventDestroy(compute_done_));
    CUDA_CHECK(cudaStreamDestroy(compute_));
    CUDA_CHECK(cudaStreamDestroy(comm_));
    TraceFiles::TearDown();
  }

  // Step 0: "backward" held open by the gate; reduce_scatter of bucket 1 inside it; then an all_gather
  // of bucket 1 that waits for the backward's end, so it is fully exposed. Step 1: one compute slice
  // of at least 2 ms, to see steps numbered and placed after step 0. Returns both steps' figures.
  std::pair<OverlapFigures, OverlapFigures> record_two_steps(Tracer& tracer) {
    Gate busy;
    const Tracer::SliceId backward = tracer.begin(compute_, TraceTrack::kCompute, "backward layer 1", {{"layer", 1}});
    CUDA_CHECK(cudaEventRecord(compute_started_, compute_));
    CUDA_CHECK(cudaLaunchHostFunc(compute_, Gate::wait_callback, &busy));
    tracer.end(backward, compute_);
    CUDA_CHECK(cudaEventRecord(compute_done_, compute_));

    CUDA_CHECK(cudaStreamWaitEvent(comm_, compute_started_, 0));
    const Tracer::SliceId reduce =
        tracer.begin(comm_, TraceTrack::kComm, "reduce_scatter", {{"bucket", 1}, {"bytes", 4096}});
    CUDA_CHECK(cudaMemcpyAsync(copy_target_, copy_source_, kCopyBytes, cudaMemcpyDeviceToDevice, comm_));
    tracer.end(reduce, comm_);
    CUDA_CHECK(cudaStreamSynchronize(comm_));  // the comm slice ended while compute is still held
    busy.open();
    CUDA_CHECK(cudaStreamWaitEvent(comm_, compute_done_, 0));
    const Tracer::SliceId gather =
        tracer.begin(comm_, TraceTrack::kComm, "all_gather", {{"bucket", 1}, {"bytes", 4096}});
    CUDA_CHECK(cudaMemcpyAsync(copy_source_, copy_target_, kCopyBytes, cudaMemcpyDeviceToDevice, comm_));
    tracer.end(gather, comm_);
    const OverlapFigures step0 = tracer.flush_step();

    const Tracer::SliceId forward = tracer.begin(compute_, TraceTrack::kCompute, "forward", {});
    CUDA_CHECK(cudaLaunchHostFunc(compute_, sleep_2ms, nullptr));
    tracer.end(forward, compute_);
    return {step0, tracer.flush_step()};
  }

  cudaStream_t compute_ = nullptr, comm_ = nullptr;
  cudaEvent_t compute_started_ = nullptr, compute_done_ = nullptr;
  void* copy_source_ = nullptr;
  void* copy_target_ = nullptr;
};

// The track names (by tid) and the "X" slices (by name) of a written trace; every event has pid `pid`.
struct ParsedTrace {
  std::map<int, std::string> track_names;
  std::map<std::string, json> slices;
  TraceInterval interval(const std::string& name) {
    const double ts = slices[name].at("ts").get<double>();
    return TraceInterval{ts, ts + slices[name].at("dur").get<double>()};
  }
};

ParsedTrace read_trace(const std::string& path, int pid) {
  std::ifstream file(path);
  EXPECT_TRUE(file.good()) << path;
  const json document = json::parse(file);  // throws (fails the test) if not JSON
  ParsedTrace trace;
  for (const json& event : document.at("traceEvents")) {
    EXPECT_EQ(event.at("pid"), pid);
    if (event.at("ph") == "M" && event.at("name") == "thread_name") {
      trace.track_names[event.at("tid").get<int>()] = event.at("args").at("name").get<std::string>();
    } else if (event.at("ph") == "X") {
      trace.slices[event.at("name").get<std::string>()] = event;
    }
  }
  return trace;
}

TEST_F(TracedStreams, RecordsBothTracksAndWritesChromeJson) {
  Tracer tracer(true, 7);
  const auto [step0, step1] = record_two_steps(tracer);
  EXPECT_EQ(step1.comm_us, 0.0);
  tracer.write(path("trace.json"));
  ParsedTrace trace = read_trace(path("trace.json"), 7);
  std::map<std::string, json>& slices = trace.slices;

  EXPECT_EQ(trace.track_names[1], "compute");
  EXPECT_EQ(trace.track_names[2], "comm");
  ASSERT_EQ(slices.size(), 4u);
  EXPECT_EQ(slices["backward layer 1"].at("tid"), 1);
  EXPECT_EQ(slices["backward layer 1"].at("args").at("layer"), 1);
  EXPECT_EQ(slices["reduce_scatter"].at("tid"), 2);
  EXPECT_EQ(slices["reduce_scatter"].at("args").at("bucket"), 1);
  EXPECT_EQ(slices["reduce_scatter"].at("args").at("bytes"), 4096);
  EXPECT_EQ(slices["all_gather"].at("args").at("step"), 0);
  EXPECT_EQ(slices["forward"].at("args").at("step"), 1);

  for (const auto& [name, slice] : slices) EXPECT_GE(slice.at("dur").get<double>(), 0.0) << name;
  const TraceInterval backward_i = trace.interval("backward layer 1"), reduce_i = trace.interval("reduce_scatter");
  const TraceInterval gather_i = trace.interval("all_gather"), forward_i = trace.interval("forward");
  // The compute-stream sleep of step 1 lasted at least 2 ms; the copies took some time.
  EXPECT_GE(forward_i.end_us - forward_i.begin_us, 2000.0 * 0.99);
  EXPECT_GT(reduce_i.end_us - reduce_i.begin_us, 0.0);
  EXPECT_GT(gather_i.end_us - gather_i.begin_us, 0.0);
  // The orderings the streams and events imposed, seen in the timestamps (1 us of float slack).
  EXPECT_LE(backward_i.begin_us, reduce_i.begin_us + 1.0);
  EXPECT_LE(reduce_i.end_us, backward_i.end_us + 1.0);
  EXPECT_GE(gather_i.begin_us, backward_i.end_us - 1.0);
  EXPECT_GE(forward_i.begin_us, backward_i.end_us - 1.0);

  // The figures of step 0: the all-gather is exposed, the reduce-scatter hidden.
  const OverlapFigures from_json = llmc::compute_overlap({backward_i}, {reduce_i, gather_i});
  EXPECT_NEAR(step0.comm_us, from_json.comm_us, 1e-6);
  EXPECT_NEAR(step0.exposed_comm_us, from_json.exposed_comm_us, 1e-6);
  EXPECT_NEAR(step0.comm_us, (reduce_i.end_us - reduce_i.begin_us) + (gather_i.end_us - gather_i.begin_us), 2.0);
  EXPECT_NEAR(step0.exposed_comm_us, gather_i.end_us - gather_i.begin_us, 2.0);
  EXPECT_GT(step0.overlapped_fraction, 0.0);
  EXPECT_LT(step0.overlapped_fraction, 1.0);
}

TEST(Tracer, MisuseIsReported) {
  Tracer tracer(true, 0);
  const Tracer::SliceId open = tracer.begin(nullptr, TraceTrack::kCompute, "never ended");
  EXPECT_THROW(tracer.flush_step(), std::logic_error);
  tracer.end(open, nullptr);
  EXPECT_THROW(tracer.end(open, nullptr), std::logic_error);  // ended twice
  EXPECT_NO_THROW(tracer.flush_step());
  EXPECT_THROW(tracer.end(open, nullptr), std::logic_error);  // belongs to a flushed step
  EXPECT_EQ(tracer.slices().size(), 1u);
}

// A discarded step (the untimed warm-up's) leaves no slices and no step number behind: the next step is step 0.
TEST(Tracer, DiscardedStepLeavesNothing) {
  Tracer tracer(true, 0);
  tracer.end(tracer.begin(nullptr, TraceTrack::kCompute, "warm-up forward"), nullptr);
  tracer.discard_step();
  EXPECT_TRUE(tracer.slices().empty());
  tracer.end(tracer.begin(nullptr, TraceTrack::kCompute, "forward"), nullptr);
  tracer.flush_step();
  ASSERT_EQ(tracer.slices().size(), 1u);
  EXPECT_EQ(tracer.slices()[0].at("name"), "forward");
  EXPECT_EQ(tracer.slices()[0].at("args").at("step"), 0);
}

TEST_F(TraceFiles, DisabledRecordsAndWritesNothing) {
  Tracer tracer(false, 0);
  const Tracer::SliceId slice = tracer.begin(nullptr, TraceTrack::kComm, "x", {{"bucket", 0}});
  tracer.end(slice, nullptr);
  const OverlapFigures f = tracer.flush_step();
  EXPECT_EQ(f.comm_us, 0.0);
  EXPECT_TRUE(tracer.slices().empty());
  const std::string path = this->path("trace.json");
  tracer.write(path);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Tracer, WriteToMissingDirectoryNamesTheFile) {
  Tracer tracer(true, 0);
  tracer.end(tracer.begin(nullptr, TraceTrack::kCompute, "x"), nullptr);
  tracer.flush_step();
  try {
    tracer.write("/nonexistent-llmc-dir/trace_rank0.json");
    ADD_FAILURE() << "write did not throw";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("/nonexistent-llmc-dir/trace_rank0.json"), std::string::npos)
        << error.what();
  }
}

}  // namespace
