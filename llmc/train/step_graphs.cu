// Training micro-steps as CUDA graph launches (see step_graphs.h).
#include "llmc/train/step_graphs.h"

#include <stdexcept>

#include "llmc/cuda/cuda_common.h"

namespace llmc {

namespace {
// The forward's trace slice of a micro-step: none (graphs run untraced: the trainer refuses --trace with them, and
// a disabled tracer ends no slice).
constexpr Tracer::SliceId kUntraced = 0;
}  // namespace

StepGraphs::StepGraphs(const StepParts& parts) {
  if (const std::string why = why_not_captured(parts); !why.empty())
    throw std::invalid_argument("--cuda-graphs: " + why + "; pass --cuda-graphs off");
}

StepGraphs::~StepGraphs() {
  for (auto& [shape, graph] : graphs_) {
    CUDA_REPORT(cudaGraphExecDestroy(graph.exec));
    CUDA_REPORT(cudaGraphDestroy(graph.graph));
  }
}

std::string StepGraphs::why_not_captured(const StepParts& parts) {
  if (parts.model.step_shape().empty()) return "the model's passes cannot be captured (the speedrun families' can)";
  if (const std::string why = parts.optimizer.why_not_captured(); !why.empty()) return why;
  if (parts.tracer.enabled()) return "a traced step's slices cannot be captured";  // the trainer refuses --trace first
  return "";
}

StepGraphs::Graph StepGraphs::capture(StepParts& parts, int step, float lr, int micro) {
  const cudaStream_t stream = parts.model.stream();
  Graph graph;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  enqueue_uploaded_micro_step(parts, step, lr, micro, kUntraced);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph.graph));
  CUDA_CHECK(cudaGraphInstantiate(&graph.exec, graph.graph, 0));
  return graph;
}

std::string StepGraphs::micro_step_shape(const StepParts& parts, int step, int micro) {
  std::string shape = "micro " + std::to_string(micro) + " of " + std::to_string(parts.grad_accum) + " | " +
                      parts.model.step_shape();
  if (micro == parts.grad_accum - 1)  // the optimizer's part, and the loss's result slot
    shape += " | " + parts.optimizer.step_shape(step) + " loss result " + std::to_string(step % 2);
  return shape;
}

void StepGraphs::enqueue_step(StepParts& parts, int step, float lr, Batch& batch) {
  TrainableModel& model = parts.model;
  BucketOptimizer& optimizer = parts.optimizer;
  model.before_step(step - 1);
  optimizer.wait_for_all_params();  // the step's launches after the step before, outside the graphs
  optimizer.before_first_backward();
  for (int micro = 0; micro < parts.grad_accum; micro++) {
    const bool last = micro == parts.grad_accum - 1;
    parts.train_batches.next_batch(batch.inputs.data(), batch.targets.data());
    model.upload_batch(batch.inputs.data(), batch.targets.data(), /*training=*/true);
    const std::string shape = micro_step_shape(parts, step, micro);
    auto found = graphs_.find(shape);
    if (found == graphs_.end() && eager_[shape]++ == 0) {
      enqueue_uploaded_micro_step(parts, step, lr, micro, kUntraced);
      continue;
    }
    if (found == graphs_.end()) {
      found = graphs_.emplace(shape, capture(parts, step, lr, micro)).first;
    } else {
      if (last) optimizer.replay_step(step, lr);
      model.replayed_micro_step();
    }
    CUDA_CHECK(cudaGraphLaunch(found->second.exec, model.stream()));
    launches_++;
    if (last) optimizer.after_graph_launch();
  }
}

}  // namespace llmc
