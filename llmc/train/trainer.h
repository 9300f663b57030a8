// The trainer of train_gpt2: a TrainingRun (training_run.h, the run's wiring) and the loop that trains it
// to --steps -- the step pipeline, validation, samples, checkpoints, the stops on a non-finite loss and on
// a stop signal, the watchdog. The pipeline: the host enqueues step s + 1 before it reads step s (the
// PendingStep, enqueued but not read yet), unless step s's state is needed first, so it never waits inside
// a step and the device runs the steps back to back; what is due after a step (its log line, validation,
// samples, a checkpoint) happens when it is read. The ranks agree on a stop signal before step s + 1 is
// enqueued: stopping then leaves step s the last one on the device, finished and checkpointed whole.
#pragma once
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "llmc/dist/comm.h"
#include "llmc/train/debug_hooks.h"
#include "llmc/train/log.h"
#include "llmc/train/mfu.h"
#include "llmc/train/options.h"
#include "llmc/train/samples.h"
#include "llmc/train/step_graphs.h"
#include "llmc/train/stop_signals.h"
#include "llmc/train/train_step.h"
#include "llmc/train/training_run.h"
#include "llmc/train/watchdog.h"

namespace llmc {

class Trainer {
 public:
  // Checks the options, sets the run up and only then opens the log (a run that cannot start leaves no
  // log.txt behind) and writes its header. Throws std::invalid_argument naming the options that cannot
  // train together, FileError for a bad file.
  Trainer(const TrainOptions& options, const std::string& options_text, CommContext& comm);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains from the run's step to --steps and writes the trace. Returns the exit status: 0, 1 after a
  // non-finite loss, kExitStoppedBySignal after a stop signal (with a checkpoint of the last step).
  int run();

 private:
  // A step enqueued on the device and not read yet.
  struct PendingStep {
    int step;
    float lr;
    int seq_len;  // of its sequences (--batch-schedule: the stage's)
  };
  using Clock = std::chrono::steady_clock;

  // Enqueues step `step`'s calls: as graph launches with --cuda-graphs (step_graphs.h), else one by one.
  void enqueue_step(int step, float lr);
  // --untimed-warmup: the warm-up steps, then the run back at its starting state (before the clock starts).
  void untimed_warmup();
  int train_loop();
  // Whether step `step` needs the model's state right after it (parameters, gradients, the batch, the
  // loader's position, a trace): then the next step is enqueued only after finishing it.
  bool needs_state_after(int step) const;
  // Reads the pending step (waiting for the device) and does its host work. Returns false to stop the run.
  bool finish(const PendingStep& pending);
  // What is due after step `step`, each under its own watchdog activity (and limit).
  void validate(int step);
  void sample(int step);
  void checkpoint(int step);
  // Every rank stops after the same finished step with a complete checkpoint of it.
  int stop_by_signal(int signal, int step);
  bool writes_checkpoints() const { return !run_->opt.output_dir.empty(); }
  void write_trace() const;

  const TrainOptions& opt_;
  CommContext& comm_;
  const DebugHooks debug_;
  const StopSignals signals_;
  std::unique_ptr<TrainingRun> run_;
  std::unique_ptr<TrainingSamples> samples_;  // rank 0 with --sample-every; null otherwise
  std::unique_ptr<TrainLog> log_;
  std::unique_ptr<Watchdog> watchdog_;
  StepParts parts_;
  const ThroughputMeter meter_;
  Batch batch_;
  std::unique_ptr<StepGraphs> step_graphs_;  // --cuda-graphs; null otherwise
  Clock::time_point since_;  // when the previous step's host side ended: steps are read one device step apart
};

}  // namespace llmc
