// A CUDA graph of what a test enqueues on one stream: captured (global mode) and instantiated at construction,
// launched as often as the test likes, both freed at destruction; and a model's training micro-steps run eagerly or
// replayed from one such graph. For tests whose subject is what the graph computes; the capture rules themselves
// are test/emu/test_graphs.cu's.
#pragma once

#include <cuda_runtime.h>

#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/family/trainable_model.h"

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

// One training micro-step of `model` per batch (the forward into loss slot 0 with dloss 1, a first micro-step's
// backward), batch i put on the device by upload(i) (upload_batch, training), observe()'s result after each: run
// eagerly, or with `replayed` captured once with batch 0 and launched for each batch.
template <class Upload, class Observe>
auto micro_step_results(TrainableModel& model, size_t batches, Upload upload, Observe observe, bool replayed) {
  std::vector<decltype(observe())> results;
  const auto device_part = [&model] {
    model.forward_uploaded(0, /*compute_dlogits=*/true, 1.0f);
    model.backward(/*first_micro_step=*/true);
  };
  if (!replayed) {
    for (size_t i = 0; i < batches; i++) {
      upload(i);
      device_part();
      results.push_back(observe());
    }
    return results;
  }
  upload(0);
  const CapturedGraph graph(model.stream(), device_part);
  for (size_t i = 0; i < batches; i++) {
    upload(i);
    graph.launch(model.stream());
    results.push_back(observe());
  }
  return results;
}

}  // namespace llmc::test
