// Training micro-steps as CUDA graph launches (see step_graphs.h).
#include "llmc/train/step_graphs.h"

#include "llmc/cuda/cuda_common.h"

namespace llmc {

StepGraphs::~StepGraphs() {
  for (auto& [shape, graph] : graphs_) {
    CUDA_REPORT(cudaGraphExecDestroy(graph.exec));
    CUDA_REPORT(cudaGraphDestroy(graph.graph));
  }
}

std::string StepGraphs::why_not_captured(const StepParts& parts) {
  if (parts.model.step_shape().empty()) return "the model's passes cannot be captured (the speedrun families' can)";
  if (const std::string why = parts.optimizer.why_not_captured(); !why.empty()) return why;
  return "";
}

void StepGraphs::enqueue_micro_step(StepParts& parts, int step, float lr, int micro) {
  TrainableModel& model = parts.model;
  BucketOptimizer& optimizer = parts.optimizer;
  const bool last = micro == parts.grad_accum - 1;
  model.forward_uploaded(micro, /*compute_dlogits=*/true, parts.loss_gradient_scale, optimizer.before_bucket_use());
  if (micro == 0) optimizer.before_first_backward();
  if (last) optimizer.begin_step(step, lr);
  model.backward(/*first_micro_step=*/micro == 0, last ? optimizer.on_bucket_ready() : BucketHook());
  if (last) {
    optimizer.finish_step();
    model.enqueue_mean_loss(parts.grad_accum, step % 2);
  }
}

StepGraphs::Graph StepGraphs::capture(StepParts& parts, int step, float lr, int micro) {
  const cudaStream_t stream = parts.model.stream();
  Graph graph;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  enqueue_micro_step(parts, step, lr, micro);
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
      enqueue_micro_step(parts, step, lr, micro);
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
