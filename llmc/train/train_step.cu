// One optimizer step (see train_step.h).
#include "llmc/train/train_step.h"

#include <string>
#include <utility>

namespace llmc {
namespace {

// Wraps the optimizer's bucket hook so that the backward shows up on the compute track as one slice per
// bucket, each ending where that bucket's gradients become final (buckets finish in decreasing order).
class BackwardTracing {
 public:
  BackwardTracing(Tracer& tracer, const TrainableModel& model, BucketHook inner)
      : tracer_(tracer), model_(model), inner_(std::move(inner)) {
    begin_slice(model_.layout().num_buckets() - 1);
  }
  BucketHook hook() {
    return [this](int bucket) {
      tracer_.end(open_, model_.stream());
      if (inner_) inner_(bucket);
      if (bucket != 0) begin_slice(bucket - 1);
    };
  }

 private:
  void begin_slice(int bucket) {
    open_ = tracer_.begin(model_.stream(), TraceTrack::kCompute, "backward " + model_.bucket_name(bucket),
                          {{"bucket", bucket}});
  }
  Tracer& tracer_;
  const TrainableModel& model_;
  BucketHook inner_;
  Tracer::SliceId open_ = 0;
};

}  // namespace

void enqueue_uploaded_micro_step(StepParts& parts, int step, float lr, int micro, Tracer::SliceId forward_slice) {
  TrainableModel& model = parts.model;
  BucketOptimizer& optimizer = parts.optimizer;
  const bool last_micro = micro == parts.grad_accum - 1;
  model.forward_uploaded(micro, /*compute_dlogits=*/true, parts.loss_gradient_scale, optimizer.before_bucket_use());
  parts.tracer.end(forward_slice, model.stream());
  if (micro == 0) optimizer.before_first_backward();
  if (last_micro) optimizer.begin_step(step, lr);
  BackwardTracing backward_tracing(parts.tracer, model, last_micro ? optimizer.on_bucket_ready() : BucketHook());
  model.backward(/*first_micro_step=*/micro == 0, backward_tracing.hook());
  if (!last_micro) return;
  optimizer.finish_step();
  model.enqueue_mean_loss(parts.grad_accum, step % 2);
}

void enqueue_train_step(StepParts& parts, int step, float lr, Batch& batch) {
  TrainableModel& model = parts.model;
  model.before_step(step - 1);  // from the second step on, the parameters carry the previous step's update
  for (int micro = 0; micro < parts.grad_accum; micro++) {
    parts.train_batches.next_batch(batch.inputs.data(), batch.targets.data());
    const Tracer::SliceId forward_slice =
        parts.tracer.begin(model.stream(), TraceTrack::kCompute, "forward", {{"micro_step", micro}});
    model.upload_batch(batch.inputs.data(), batch.targets.data(), /*training=*/true);
    enqueue_uploaded_micro_step(parts, step, lr, micro, forward_slice);
  }
}

StepResult read_train_step(StepParts& parts, int step) {
  const double loss = parts.comm.all_reduce_mean(parts.model.read_mean_loss(step % 2));
  return StepResult{loss, parts.optimizer.grad_norm(step)};
}

StepResult train_step(StepParts& parts, int step, float lr, Batch& batch) {
  enqueue_train_step(parts, step, lr, batch);
  return read_train_step(parts, step);
}

}  // namespace llmc
