// One optimizer step of training, as train_gpt2 runs it and the step benchmark measures it
// (test/train/bench_step.cu): the micro-steps' forwards and backwards, with the optimizer's per-bucket
// hooks (llmc/optim/bucket_optimizer.h), on any TrainableModel (llmc/model/trainable_model.h).
#pragma once

#include <cstddef>
#include <vector>

#include "llmc/data/dataloader.h"
#include "llmc/dist/comm.h"
#include "llmc/dist/trace.h"
#include "llmc/model/trainable_model.h"
#include "llmc/optim/bucket_optimizer.h"

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
  DataLoader& train_loader;
  Tracer& tracer;
  const CommContext& comm;
  int grad_accum;
};

struct StepResult {
  double loss;  // mean over ranks and micro-steps
  float grad_norm;
};

// The whole call sequence of a step (llmc/optim/bucket_optimizer.h): every forward waits per bucket for
// the last update; the last micro-step's backward hands each bucket to the optimizer the moment its
// gradients are final, and finish_step() enqueues what is left for after the backward.
StepResult train_step(StepParts& parts, int step, float lr, Batch& batch);

}  // namespace llmc
