// A CUDA graph of what a test enqueues on one stream: captured (global mode) and instantiated at construction,
// launched as often as the test likes, both freed at destruction. For tests whose subject is what the graph
// computes; the capture rules themselves are test/emu/test_graphs.cu's.
#pragma once

#include <cuda_runtime.h>

#include "llmc/cuda/cuda_common.h"

namespace llmc::test {

class CapturedGraph {
 public:
  // Captures what enqueue() puts on `stream` (which must not be capturing already).
  template <class Enqueue>
  CapturedGraph(cudaStream_t stream, Enqueue enqueue) {
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    enqueue();
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph_));
    CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  }
  ~CapturedGraph() {
    CUDA_REPORT(cudaGraphExecDestroy(exec_));
    CUDA_REPORT(cudaGraphDestroy(graph_));
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;

  void launch(cudaStream_t stream) const { CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace llmc::test
