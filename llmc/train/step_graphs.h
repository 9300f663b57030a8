// The trainer's --cuda-graphs: every training micro-step is one CUDA graph launch. A micro-step's device part (the
// forward over the uploaded batch, the backward and, in the step's last micro-step, the optimizer's hooks, its end
// and the loss's sum) is captured the first time its shape comes -- its place in the step, the model's and the
// optimizer's step_shape -- and replayed at every later micro-step of that shape, while the host's part runs before
// each launch (the batch's upload, the optimizer's replay_step). Each step's first launch is ordered after the step
// before on the host's side of the graph (the optimizer's waits, enqueued outside it), so that nothing captured waits
// for an event recorded outside the capture, as CUDA requires; after a step's last launch the optimizer's own streams
// wait for it (after_graph_launch). A shape's first micro-step runs eagerly, uncaptured
// (its one-time set-ups -- a scale's first copy, a GEMM's first algorithm search -- are no graph's), the second is
// captured, and the later ones replay it.
#pragma once
#include <cuda_runtime.h>

#include <map>
#include <string>

#include "llmc/train/train_step.h"

namespace llmc {

class StepGraphs {
 public:
  // Graphs for the parts' steps; throws std::invalid_argument naming --cuda-graphs and why they cannot be captured.
  explicit StepGraphs(const StepParts& parts);
  ~StepGraphs();
  StepGraphs(const StepGraphs&) = delete;
  StepGraphs& operator=(const StepGraphs&) = delete;

  // What enqueue_train_step does, the micro-steps as graph launches (captured first where their shape is new).
  void enqueue_step(StepParts& parts, int step, float lr, Batch& batch);
  // Graphs captured so far, and launches of them.
  size_t captured() const { return graphs_.size(); }
  long long launches() const { return launches_; }

 private:
  struct Graph {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
  };
  // Why the parts' steps cannot be captured ("" when they can): a model or optimizer without a step shape, a tracer.
  static std::string why_not_captured(const StepParts& parts);
  // What names micro-step `micro`'s graph: its place in the step, the model's and (last) the optimizer's shape.
  static std::string micro_step_shape(const StepParts& parts, int step, int micro);
  // Micro-step `micro`'s device part (enqueue_uploaded_micro_step, the batch uploaded) as a graph.
  static Graph capture(StepParts& parts, int step, float lr, int micro);

  std::map<std::string, Graph> graphs_;  // by shape
  std::map<std::string, int> eager_;     // shapes run eagerly so far (once each)
  long long launches_ = 0;
};

}  // namespace llmc
