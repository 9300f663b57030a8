// Tests of CUDA graphs made by stream capture, run by both targets: a capture records instead of running, each
// launch of the instantiated graph replays it in order with the stream's other work, a stream that waits on a
// captured event forks into the capture and must join back, and what CUDA forbids inside a capture (waits on a
// capturing stream or the device, potentially unsafe calls in the capture's mode, legacy-stream work beside a
// blocking capture) fails and invalidates the capture. Where the emulation is stricter than CUDA, or checks what
// only it can (lanes replayed side by side), the test is emulation-only.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "test/emu/emulation_only.h"
#include "test/support/device_buffer.h"

// A named namespace: the GPU build compiles this file in one unit with other emulation tests (cmake/emu.cmake).
namespace graph_test {

using llmc::test::DeviceBuffer;

// x = 3x + k: not commutative across k, so the result encodes the execution order.
__global__ void affine_kernel(int* x, int k) { *x = 3 * *x + k; }

__global__ void copy_kernel(const int* source, int* target) { *target = *source; }

void CUDART_CB count_call(void* counter) { static_cast<std::atomic<int>*>(counter)->fetch_add(1); }

int affine(int x, int k) { return 3 * x + k; }

int read_back(const DeviceBuffer<int>& buffer, cudaStream_t stream) {
  int* pinned = nullptr;
  CUDA_CHECK(cudaMallocHost(&pinned, sizeof(int)));
  CUDA_CHECK(cudaMemcpyAsync(pinned, buffer.get(), sizeof(int), cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  const int value = *pinned;
  CUDA_CHECK(cudaFreeHost(pinned));
  return value;
}

cudaStreamCaptureStatus capture_status(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status;
}

struct Streams {
  cudaStream_t a = nullptr, b = nullptr;
  explicit Streams(unsigned flags = cudaStreamNonBlocking) {
    CUDA_CHECK(cudaStreamCreateWithFlags(&a, flags));
    CUDA_CHECK(cudaStreamCreateWithFlags(&b, flags));
  }
  ~Streams() {
    CUDA_REPORT(cudaStreamDestroy(a));
    CUDA_REPORT(cudaStreamDestroy(b));
  }
};

// Ends a capture that a forbidden call invalidated: no graph, and the stream captures no more.
void expect_capture_invalidated(cudaStream_t stream) {
  EXPECT_EQ(capture_status(stream), cudaStreamCaptureStatusInvalidated);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  EXPECT_EQ(capture_status(stream), cudaStreamCaptureStatusNone);
  (void)cudaGetLastError();  // the errors above are the test's, not a later call's
}

TEST(Graphs, CaptureRecordsAndEveryLaunchReplaysInStreamOrder) {
  LLMC_REQUIRE_GPU();
  Streams streams;
  DeviceBuffer<int> d_x(std::vector<int>{1});
  std::atomic<int> calls{0};
  CUDA_CHECK(cudaStreamBeginCapture(streams.a, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(capture_status(streams.a), cudaStreamCaptureStatusActive);
  LLMC_LAUNCH(affine_kernel, 1, 1, 0, streams.a, d_x.get(), 1);
  CUDA_CHECK(cudaLaunchHostFunc(streams.a, count_call, &calls));
  LLMC_LAUNCH(affine_kernel, 1, 1, 0, streams.a, d_x.get(), 2);
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(streams.a, &graph));
  ASSERT_NE(graph, nullptr);
  EXPECT_EQ(read_back(d_x, streams.a), 1);  // recorded, not run
  EXPECT_EQ(calls.load(), 0);
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  int expected = 1;
  for (int launch = 0; launch < 3; launch++) {
    CUDA_CHECK(cudaGraphLaunch(exec, streams.a));
    LLMC_LAUNCH(affine_kernel, 1, 1, 0, streams.a, d_x.get(), 10 + launch);  // after the graph, before the next
    expected = affine(affine(affine(expected, 1), 2), 10 + launch);
  }
  EXPECT_EQ(read_back(d_x, streams.a), expected);
  EXPECT_EQ(calls.load(), 3);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
}

// b forks from a at `forked`, copies x to y and joins back at `joined`; a's work after the join reads y.
TEST(Graphs, ForkedStreamJoinsTheCaptureAndMustJoinBack) {
  LLMC_REQUIRE_GPU();
  Streams streams;
  DeviceBuffer<int> d_x(std::vector<int>{2}), d_y(std::vector<int>{0});
  cudaEvent_t forked, joined;
  CUDA_CHECK(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
  CUDA_CHECK(cudaStreamBeginCapture(streams.a, cudaStreamCaptureModeGlobal));
  LLMC_LAUNCH(affine_kernel, 1, 1, 0, streams.a, d_x.get(), 1);  // x = 7
  CUDA_CHECK(cudaEventRecord(forked, streams.a));
  EXPECT_EQ(capture_status(streams.b), cudaStreamCaptureStatusNone);
  CUDA_CHECK(cudaStreamWaitEvent(streams.b, forked, 0));
  EXPECT_EQ(capture_status(streams.b), cudaStreamCaptureStatusActive);
  LLMC_LAUNCH(copy_kernel, 1, 1, 0, streams.b, d_x.get(), d_y.get());  // y = 7
  CUDA_CHECK(cudaEventRecord(joined, streams.b));
  CUDA_CHECK(cudaStreamWaitEvent(streams.a, joined, 0));
  LLMC_LAUNCH(affine_kernel, 1, 1, 0, streams.a, d_y.get(), 2);  // y = 23
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(streams.a, &graph));
  EXPECT_EQ(capture_status(streams.b), cudaStreamCaptureStatusNone);
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, streams.a));
  EXPECT_EQ(read_back(d_y, streams.a), 23);
  CUDA_CHECK(cudaGraphLaunch(exec, streams.a));  // x = 22, y = 22, then 68
  EXPECT_EQ(read_back(d_y, streams.a), 68);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));

  // The same fork without the join: the capture cannot end.
  CUDA_CHECK(cudaStreamBeginCapture(streams.a, cudaStreamCaptureModeGlobal));
  CUDA_CHECK(cudaEventRecord(forked, streams.a));
  CUDA_CHECK(cudaStreamWaitEvent(streams.b, forked, 0));
  LLMC_LAUNCH(copy_kernel, 1, 1, 0, streams.b, d_x.get(), d_y.get());
  graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(streams.a, &graph), cudaErrorStreamCaptureUnjoined);
  EXPECT_EQ(graph, nullptr);
  EXPECT_EQ(capture_status(streams.a), cudaStreamCaptureStatusNone);
  EXPECT_EQ(capture_status(streams.b), cudaStreamCaptureStatusNone);
  (void)cudaGetLastError();
  CUDA_CHECK(cudaEventDestroy(forked));
  CUDA_CHECK(cudaEventDestroy(joined));
}

// Waiting for a capturing stream (or the whole device) waits for nothing that will run: CUDA refuses it and
// invalidates the capture.
TEST(Graphs, WaitsInsideACaptureInvalidateIt) {
  LLMC_REQUIRE_GPU();
  Streams streams;
  DeviceBuffer<int> d_x(std::vector<int>{1});
  for (int call = 0; call < 3; call++) {
    SCOPED_TRACE(call);
    CUDA_CHECK(cudaStreamBeginCapture(streams.a, cudaStreamCaptureModeGlobal));
    LLMC_LAUNCH(affine_kernel, 1, 1, 0, streams.a, d_x.get(), 1);
    const cudaError_t error = call == 0   ? cudaStreamSynchronize(streams.a)
                              : call == 1 ? cudaStreamQuery(streams.a)
                                          : cudaDeviceSynchronize();
    EXPECT_EQ(error, cudaErrorStreamCaptureUnsupported);
    expect_capture_invalidated(streams.a);
  }
  EXPECT_EQ(read_back(d_x, streams.a), 1);  // nothing captured ever ran
}

// cudaMalloc is potentially unsafe: refused while this thread captures in global mode, allowed in relaxed mode.
TEST(Graphs, MallocFollowsTheCaptureMode) {
  LLMC_REQUIRE_GPU();
  Streams streams;
  void* memory = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(streams.a, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(cudaMalloc(&memory, 256), cudaErrorStreamCaptureUnsupported);
  expect_capture_invalidated(streams.a);
  CUDA_CHECK(cudaStreamBeginCapture(streams.a, cudaStreamCaptureModeRelaxed));
  CUDA_CHECK(cudaMalloc(&memory, 256));
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(streams.a, &graph));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaFree(memory));
}

// Another thread is held to the rules of a global-mode capture, not of a thread-local one (CUDA's modes); work
// on the legacy default stream beside a capturing blocking stream would depend on it implicitly.
TEST(Graphs, OtherThreadsAndTheLegacyStreamDuringACapture) {
  SKIP_UNLESS_EMULATION();  // CUDA's documented rules, with codes not yet seen on a GPU
  Streams streams;
  for (const cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
    CUDA_CHECK(cudaStreamBeginCapture(streams.a, mode));
    cudaError_t other = cudaSuccess;
    void* memory = nullptr;
    std::thread([&] { other = cudaMalloc(&memory, 256); }).join();
    if (mode == cudaStreamCaptureModeGlobal) {
      EXPECT_EQ(other, cudaErrorStreamCaptureUnsupported);
      expect_capture_invalidated(streams.a);
    } else {
      EXPECT_EQ(other, cudaSuccess);
      cudaGraph_t graph = nullptr;
      CUDA_CHECK(cudaStreamEndCapture(streams.a, &graph));
      CUDA_CHECK(cudaGraphDestroy(graph));
      CUDA_CHECK(cudaFree(memory));
    }
  }
  Streams blocking(cudaStreamDefault);
  DeviceBuffer<int> d_x(std::vector<int>{1});
  CUDA_CHECK(cudaStreamBeginCapture(blocking.a, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(cudaMemsetAsync(d_x.get(), 0, sizeof(int), nullptr), cudaErrorStreamCaptureImplicit);
  expect_capture_invalidated(blocking.a);
}

// What the emulation refuses beyond the checks above: a capture waiting on work outside it, a query of a captured
// event (it stands for graph nodes), a copy from pageable memory (staged when called: no replay could repeat it).
TEST(Graphs, EmulationRefusesWhatItCannotReplay) {
  SKIP_UNLESS_EMULATION();
  Streams streams;
  cudaEvent_t outside, inside;
  CUDA_CHECK(cudaEventCreateWithFlags(&outside, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&inside, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(outside, streams.b));
  CUDA_CHECK(cudaStreamBeginCapture(streams.a, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(cudaStreamWaitEvent(streams.a, outside, 0), cudaErrorStreamCaptureIsolation);
  expect_capture_invalidated(streams.a);
  CUDA_CHECK(cudaStreamBeginCapture(streams.a, cudaStreamCaptureModeGlobal));
  CUDA_CHECK(cudaEventRecord(inside, streams.a));
  EXPECT_EQ(cudaEventQuery(inside), cudaErrorStreamCaptureUnsupported);
  expect_capture_invalidated(streams.a);
  DeviceBuffer<int> d_x(std::vector<int>{1});
  const int pageable = 5;
  CUDA_CHECK(cudaStreamBeginCapture(streams.a, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(cudaMemcpyAsync(d_x.get(), &pageable, sizeof(int), cudaMemcpyHostToDevice, streams.a),
            cudaErrorStreamCaptureUnsupported);
  expect_capture_invalidated(streams.a);
  CUDA_CHECK(cudaEventDestroy(outside));
  CUDA_CHECK(cudaEventDestroy(inside));
}

// A replay runs each captured stream's nodes on a lane of its own, side by side: a lane that waits for the other
// lane's later node would never finish if the lanes ran one after the other.
TEST(Graphs, ReplayRunsTheForkedLanesSideBySide) {
  SKIP_UNLESS_EMULATION();  // a GPU may run host functions of two streams one at a time
  Streams streams;
  std::atomic<bool> flag{false}, saw_flag{false};
  auto* state = new std::pair<std::atomic<bool>*, std::atomic<bool>*>(&flag, &saw_flag);
  cudaEvent_t forked, joined;
  CUDA_CHECK(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
  CUDA_CHECK(cudaStreamBeginCapture(streams.a, cudaStreamCaptureModeGlobal));
  CUDA_CHECK(cudaEventRecord(forked, streams.a));
  CUDA_CHECK(cudaStreamWaitEvent(streams.b, forked, 0));
  CUDA_CHECK(cudaLaunchHostFunc(
      streams.a,
      [](void* p) {  // waits up to 10 s for the other lane
        auto* s = static_cast<std::pair<std::atomic<bool>*, std::atomic<bool>*>*>(p);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!s->first->load() && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        s->second->store(s->first->load());
      },
      state));
  CUDA_CHECK(cudaLaunchHostFunc(
      streams.b, [](void* p) { static_cast<std::pair<std::atomic<bool>*, std::atomic<bool>*>*>(p)->first->store(true); },
      state));
  CUDA_CHECK(cudaEventRecord(joined, streams.b));
  CUDA_CHECK(cudaStreamWaitEvent(streams.a, joined, 0));
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(streams.a, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphLaunch(exec, streams.a));
  CUDA_CHECK(cudaStreamSynchronize(streams.a));
  EXPECT_TRUE(saw_flag.load());
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaEventDestroy(forked));
  CUDA_CHECK(cudaEventDestroy(joined));
  delete state;
}

// An event recorded with cudaEventRecordExternal inside a capture is an event record node: each launch records the
// event where the node stands, so the host and other streams wait for the graph's work up to there (not for the
// whole graph: here the rest of the graph blocks until the test has seen the value). Before the first launch the
// event is as it was.
TEST(Graphs, ExternalEventRecordNodeRecordsAtEachLaunch) {
  Streams streams;
  DeviceBuffer<int> x(1), y(1);
  x.fill_zero();
  std::atomic<bool> release{false};
  cudaEvent_t reached;
  CUDA_CHECK(cudaEventCreateWithFlags(&reached, cudaEventDisableTiming));
  CUDA_CHECK(cudaStreamBeginCapture(streams.a, cudaStreamCaptureModeGlobal));
  LLMC_LAUNCH(affine_kernel, 1, 1, 0, streams.a, x.get(), 1);
  CUDA_CHECK(cudaEventRecordWithFlags(reached, streams.a, cudaEventRecordExternal));
  CUDA_CHECK(cudaLaunchHostFunc(
      streams.a,
      [](void* p) {  // holds the graph's end (up to 10 s) until the test has read x
        auto* flag = static_cast<std::atomic<bool>*>(p);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!flag->load() && std::chrono::steady_clock::now() < deadline)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        flag->store(false);
      },
      &release));
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(streams.a, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  EXPECT_EQ(cudaEventQuery(reached), cudaSuccess);  // never recorded yet
  int* seen = nullptr;  // pinned before the launches: freeing it would wait for the whole device
  CUDA_CHECK(cudaMallocHost(&seen, sizeof(int)));
  int want = 0;
  for (int launch = 0; launch < 2; launch++) {
    CUDA_CHECK(cudaGraphLaunch(exec, streams.a));
    want = affine(want, 1);
    CUDA_CHECK(cudaEventSynchronize(reached));
    CUDA_CHECK(cudaStreamWaitEvent(streams.b, reached, 0));
    LLMC_LAUNCH(copy_kernel, 1, 1, 0, streams.b, x.get(), y.get());
    CUDA_CHECK(cudaMemcpyAsync(seen, y.get(), sizeof(int), cudaMemcpyDeviceToHost, streams.b));
    CUDA_CHECK(cudaStreamSynchronize(streams.b));
    EXPECT_EQ(*seen, want) << "launch " << launch;
    EXPECT_EQ(cudaStreamQuery(streams.a), cudaErrorNotReady) << "the graph's end waits for the test";
    release.store(true);
    CUDA_CHECK(cudaStreamSynchronize(streams.a));
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaEventDestroy(reached));
  CUDA_CHECK(cudaFreeHost(seen));
}

}  // namespace graph_test
