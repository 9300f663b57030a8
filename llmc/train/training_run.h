// One training run's wiring, built from the options in dependency order: the model (a preset initialised
// from the seed, a model file, or the model file of the checkpoint being resumed, through the model
// registry), the optimizer (--optimizer, or the family's own) and its master weights, the training and
// validation loaders, the window schedule, and what a resumed checkpoint restores (the optimizer's state,
// the loader's position, the loop's step and time). The trainer (trainer.h) runs it; the step benchmark
// (test/train/bench_step.cu) builds one to measure its step.
#pragma once
#include <memory>
#include <string>

#include "llmc/checkpoint/state_file.h"
#include "llmc/data/dataloader.h"
#include "llmc/dist/comm.h"
#include "llmc/dist/trace.h"
#include "llmc/model/registry.h"
#include "llmc/optim/bucket_optimizer.h"
#include "llmc/train/debug_hooks.h"
#include "llmc/train/log.h"
#include "llmc/train/options.h"
#include "llmc/train/train_batches.h"
#include "llmc/train/batch_schedule.h"
#include "llmc/train/loss_schedule.h"
#include "llmc/train/train_step.h"
#include "llmc/train/window_schedule.h"

namespace llmc {

// The loop's own state, saved with every checkpoint.
struct LoopState {
  int step = 0;  // optimizer steps done
  double train_time_ms = 0.0;
  std::string last_checkpoint;  // prefix; "" for none
};

struct TrainingRun {
  // Throws std::invalid_argument naming the option for a combination the model cannot train, FileError for a
  // bad model file or checkpoint.
  TrainingRun(const TrainOptions& options, CommContext& comm);

  // The pieces one step works with (llmc/train/train_step.h).
  StepParts step_parts() {
    return StepParts{*model, *optimizer, *train_batches, tracer, comm, grad_accum,
                     loss_gradient_scale(loss_reduction, int64_t{opt.batch_size} * opt.seq_len, grad_accum)};
  }
  // Before step `step` (0-based): its sequence length on the model and the loader, and its tokens' dloss into
  // `parts`, with --batch-schedule; log lines at a change. Nothing otherwise.
  std::vector<std::string> set_step_shape(int step, StepParts& parts);
  int step_seq_len(int step) const;  // step's tokens per sequence: --seq-len, or its stage's share
  // The log header: the run's environment, model, options, shapes and how it was set up.
  LogHeader describe(const std::string& options_text, const DebugHooks& debug) const;
  // Collective: checkpoint `prefix` of the state after loop.step (the model file once, every rank's
  // optimizer state; complete on every rank or not at all, llmc/checkpoint/checkpoint.h); then, with
  // --keep-checkpoints, the oldest ones go.
  void write_checkpoint(const std::string& prefix, TrainLog& log);
  // Collective: the checkpoint files of the state after loop.step at `prefix`, no more (write_checkpoint
  // without its log line, the pruning and the record as the last checkpoint).
  void save_state(const std::string& prefix);
  // --untimed-warmup: the 0-based steps the warm-up trains, ascending: the 2026-07-17 schedule's own
  // (Modded89Schedule::warmup_steps) in a run on it, else 0, 1 and two either side of each window change of
  // the 2025-10-31 schedule (none without it), below --steps.
  std::vector<int> warmup_steps() const;
  // Collective, after the warm-up: back to the state save_state wrote at `prefix` before it, as a run resumed
  // from there starts (parameters, optimizer state, loader position, RoPE without YaRN, the schedules' first
  // windows and loss weights), on the model and optimizer already built (their plans and buffers kept).
  void restore_start_state(const std::string& prefix);
  // Whether any part of the run follows the 2026-07-17 record's schedule (the log's line on it, the warm-up).
  bool uses_modded89_schedule() const;
  // The model's own checkpoint state (TrainableModel::restore_model_state), after the optimizer's.
  void restore_model_state(const CheckpointReader& checkpoint);

  const TrainOptions& opt;
  CommContext& comm;
  const std::string resume_prefix;  // "" when starting fresh
  ModelStart start;
  const TrainLoaderKind loader_kind;
  const int grad_accum;
  const bool fp8_head;  // the speedrun model's head in FP8 (--fp8-head)
  const bool fp8_mlp;   // the 2026-07-17 model's MLP forward in FP8 (--fp8-mlp)
  std::unique_ptr<FamilyModel> model;
  Tracer tracer;
  std::unique_ptr<BucketOptimizer> optimizer;
  const LossReduction loss_reduction;           // --loss-reduction resolved: mean or sum
  std::unique_ptr<TrainBatches> train_batches;  // --train-loader
  std::unique_ptr<ValLoader> val_loader;        // null: no validation
  std::unique_ptr<WindowSchedule> windows;      // null: fixed windows
  std::unique_ptr<LossWeightSchedule> loss_weights;  // null: the model's own loss weights
  std::unique_ptr<BatchSchedule> stage_batches;      // null: every step on --seq-len tokens
  LoopState loop;
  TrainStateHeader resumed_from;  // what the checkpoint's writer saw (when resuming)
};

}  // namespace llmc
