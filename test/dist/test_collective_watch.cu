// The collective watch (llmc/dist/collective_watch.h) names the oldest collective that has not completed: one
// enqueued on a stream, or one captured in a CUDA graph and watched again at each launch of it (relaunched), where
// its event stands for the latest launch alone. A host function that waits for the test stands in for a collective
// that hangs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "llmc/cuda/cuda_common.h"
#include "llmc/dist/collective_watch.h"

namespace {

// Blocks the stream (up to 10 s) until the test releases it; then re-arms.
void CUDART_CB hold(void* flag) {
  auto* released = static_cast<std::atomic<bool>*>(flag);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!released->load() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  released->store(false);
}

TEST(CollectiveWatch, NamesTheOldestUnfinishedCollectiveEnqueuedOrCaptured) {
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::atomic<bool> released{false};
  const std::string bucket = "bucket 3 (layer 2)";
  llmc::CollectiveWatch watch(0, 16);
  EXPECT_EQ(watch.first_unfinished(), "");

  CUDA_CHECK(cudaLaunchHostFunc(stream, hold, &released));
  watch.enqueued("all_gather", &bucket, 7, stream);
  EXPECT_NE(watch.first_unfinished().find("all_gather of bucket 3 (layer 2) in step 7, enqueued"), std::string::npos)
      << watch.first_unfinished();
  released.store(true);
  CUDA_CHECK(cudaStreamSynchronize(stream));
  EXPECT_EQ(watch.first_unfinished(), "");

  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CUDA_CHECK(cudaLaunchHostFunc(stream, hold, &released));
  const int id = watch.captured("reduce_scatter", &bucket, stream);
  EXPECT_EQ(watch.captured("reduce_scatter", &bucket, stream, id), id);  // the same collective again
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  EXPECT_EQ(watch.first_unfinished(), "");  // captured, not launched
  for (int step : {8, 9}) {
    watch.relaunched({id}, step);
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    // Step 9's launch: step 8's entry shares the event, which is step 9's now; step 9 is named.
    EXPECT_NE(watch.first_unfinished().find("reduce_scatter of bucket 3 (layer 2) in step " + std::to_string(step)),
              std::string::npos)
        << watch.first_unfinished();
    released.store(true);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(watch.first_unfinished(), "") << "step " << step;
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace
