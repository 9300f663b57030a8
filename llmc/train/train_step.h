// One optimizer step of training, as train_gpt2 runs it and the step benchmark measures it
// (test/train/bench_step.cu): the micro-steps' forwards and backwards, with the optimizer's per-bucket
// hooks (llmc/optim/bucket_optimizer.h), on any TrainableModel (llmc/family/trainable_model.h).
#pragma once

#include <cstddef>
#include <vector>

#include "llmc/dist/comm.h"
#include "llmc/dist/trace.h"
#include "llmc/family/trainable_model.h"
#include "llmc/optim/bucket_optimizer.h"
#include "llmc/train/train_batches.h"

namespace llmc {

// The host token arrays of one micro-batch.
struct Batch {
  explicit Batch(size_t tokens) : inputs(tokens), targets(tokens) {}
  std::vector<int> inputs, targets;
};

// What a step works with.
struct StepParts {
  TrainableModel& model;
  BucketOptimizer& optimizer;
  TrainBatches& train_batches;
  Tracer& tracer;
  const CommContext& comm;
  int grad_accum;
  float loss_gradient_scale;  // each token's dloss (llmc/train/loss_reduction.h)
};

struct StepResult {
  double loss;  // mean over ranks and micro-steps
  float grad_norm;
};

// Enqueues the whole call sequence of step `step` (llmc/optim/bucket_optimizer.h) and returns without
// waiting for the device: every forward waits per bucket (on the device) for the last update; the last
// micro-step's backward hands each bucket to the optimizer the moment its gradients are final, and
// finish_step() enqueues what is left for after the backward. The step's loss (mean over micro-steps) is
// summed on the device. The batches come from `train_batches` (--train-loader).
void enqueue_train_step(StepParts& parts, int step, float lr, Batch& batch);

// Micro-step `micro` of step `step` after its batch's upload_batch, which `forward_slice` (begun before the upload)
// covers in a trace: the forward, the optimizer's hooks, the backward and, in the step's last micro-step, the
// optimizer's finish and the loss's sum. enqueue_train_step's micro-steps; what a CUDA graph of a micro-step
// captures (llmc/train/step_graphs.h).
void enqueue_uploaded_micro_step(StepParts& parts, int step, float lr, int micro, Tracer::SliceId forward_slice);

// The loss (mean over ranks and micro-steps) and gradient norm of step `step`, the last enqueued step or
// the one before it: waits until the device has finished it. Reading step s after enqueuing step s + 1 is
// what keeps the device busy between steps (the host prepares s + 1 while s runs).
StepResult read_train_step(StepParts& parts, int step);

// Both, for callers that need the step's effects before the next one (the device idles in between).
StepResult train_step(StepParts& parts, int step, float lr, Batch& batch);

}  // namespace llmc
