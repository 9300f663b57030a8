// train_gpt2: trains GPT-2 on token shards, data-parallel over MPI ranks (one GPU each) with a ZeRO-1
// AdamW whose communication overlaps the backward pass. train() sets a run up and runs the loop;
// enqueue_train_step() is one optimizer step, and it talks to the model and the optimizer only through
// their per-bucket hooks (llmc/family/trainable_model.h, llmc/optim/bucket_optimizer.h). The rest lives
// in llmc/.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "llmc/cuda/cuda_common.h"
#include "llmc/data/dataloader.h"
#include "llmc/dist/comm.h"
#include "llmc/dist/trace.h"
#include "llmc/base/file_io.h"
#include "llmc/optim/speedrun_optimizer.h"
#include "llmc/optim/zero.h"
#include "llmc/checkpoint/checkpoint.h"
#include "llmc/checkpoint/checkpoint_dir.h"
#include "llmc/train/debug_hooks.h"
#include "llmc/train/log.h"
#include "llmc/schedule/lr_schedule.h"
#include "llmc/train/mfu.h"
#include "llmc/model/registry.h"
#include "llmc/train/options.h"
#include "llmc/train/run_info.h"
#include "llmc/train/samples.h"
#include "llmc/train/stop_signals.h"
#include "llmc/train/train_batches.h"
#include "llmc/train/train_step.h"
#include "llmc/train/watchdog.h"
#include "llmc/train/window_schedule.h"

using namespace llmc;

namespace {

using Clock = std::chrono::steady_clock;
double elapsed_ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

constexpr bool kFp32Build = std::is_same<floatX, float>::value;

// ---- one optimizer step: llmc/train/train_step.h ----------------------------------------------------

double evaluate(TrainableModel& model, BucketOptimizer& optimizer, ValLoader& val_loader, const CommContext& comm,
                Batch& batch) {
  val_loader.reset();
  double loss_sum = 0.0;
  for (int64_t s = 0; s < val_loader.num_steps(); s++) {
    val_loader.next_batch(batch.inputs.data(), batch.targets.data());
    model.forward(batch.inputs.data(), batch.targets.data(), 0, /*compute_dlogits=*/false, 0.0f,
                  optimizer.before_bucket_use());
    loss_sum += model.mean_loss(1);
  }
  return comm.all_reduce_mean(loss_sum / static_cast<double>(val_loader.num_steps()));
}

// ---- set-up ----------------------------------------------------------------------------------------

cudaStream_t create_compute_stream() {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  return stream;
}

OptimizerSettings optimizer_settings(const TrainOptions& opt) {
  OptimizerSettings settings;
  settings.adamw.weight_decay = static_cast<float>(opt.weight_decay);
  settings.grad_clip = static_cast<float>(opt.effective_grad_clip(/*speedrun_optimizer=*/false));
  settings.overlap = parse_overlap_mode(opt.overlap);
  return settings;
}

// --optimizer (auto: the model family's own). The speedrun optimizer has no clipping: --grad-clip is
// refused here rather than ignored.
std::unique_ptr<BucketOptimizer> make_optimizer(const TrainOptions& opt, const ModelFamily& family,
                                                TrainableModel& model, CommContext& comm, Tracer& tracer) {
  const bool family_speedrun = family.default_optimizer() == StateOptimizer::kSpeedrun;
  const bool speedrun = opt.optimizer == "speedrun" || (opt.optimizer == "auto" && family_speedrun);
  if (!speedrun) return std::make_unique<ZeroOptimizer>(model, comm, optimizer_settings(opt), &tracer);
  if (!family_speedrun)
    throw std::invalid_argument("--optimizer speedrun needs a speedrun model (--model speedrun, speedrun-tiny or its file)");
  if (opt.effective_grad_clip(/*speedrun_optimizer=*/true) > 0)
    throw std::invalid_argument("--optimizer speedrun has no gradient clipping: drop --grad-clip or pass 0");
  SpeedrunOptimizerSettings settings;
  // The Muon momentum's schedule: the record's stretched to --steps, as --lr-schedule speedrun's (at least
  // the 4 steps that stretch needs).
  settings.schedule = SpeedrunSchedule::for_total_steps(std::max(4, opt.steps));
  settings.overlap = parse_overlap_mode(opt.overlap);
  return std::make_unique<SpeedrunOptimizer>(model, comm, settings, &tracer);
}

// --train-loader (auto: by the model family, llmc/train/train_batches.h).
TrainLoaderKind train_loader_kind(const TrainOptions& opt, const ModelFamily& family) {
  return choose_train_loader(opt.train_loader, family.trains_on_documents(), family.vocab_size(), opt.shuffle);
}

// The fields both loaders' configurations share.
template <class LoaderConfig>
LoaderConfig loader_config(const std::string& pattern, const TrainOptions& opt, const CommContext& comm,
                           int vocab_size) {
  LoaderConfig config;
  config.pattern = pattern;
  config.batch_size = opt.batch_size;
  config.seq_len = opt.seq_len;
  config.rank = comm.rank();
  config.world_size = comm.world_size();
  config.vocab_size = vocab_size;
  return config;
}

std::unique_ptr<TrainBatches> make_train_batches(TrainLoaderKind kind, const TrainOptions& opt,
                                                 const CommContext& comm, const ModelFamily& family, int grad_accum) {
  TrainBatchesConfig config = loader_config<TrainBatchesConfig>(opt.train_data, opt, comm, family.vocab_size());
  config.grad_accum = grad_accum;
  config.shuffle = opt.shuffle;
  config.seed = opt.seed;
  return make_train_batches(kind, config);
}

std::unique_ptr<ValLoader> make_val_loader(const TrainOptions& opt, const CommContext& comm, int vocab_size) {
  if (opt.val_tokens <= 0) return nullptr;
  ValLoaderConfig config = loader_config<ValLoaderConfig>(opt.val_data, opt, comm, vocab_size);
  config.val_tokens = opt.val_tokens;
  return std::make_unique<ValLoader>(config);
}

// --window-schedule speedrun: the record's windows stretched to --steps, set on the model before each step
// (fixed: the model keeps its first windows). Setting the first ones fails at once for GPT-2.
std::unique_ptr<WindowSchedule> make_window_schedule(const TrainOptions& opt, FamilyModel& model) {
  if (opt.window_schedule != "speedrun") return nullptr;
  const SpeedrunSchedule schedule = SpeedrunSchedule::for_total_steps(opt.steps);
  const AttentionWindows first = schedule.windows(0);
  model.set_attention_windows(first.short_blocks, first.long_blocks, /*apply_yarn=*/false);
  return std::make_unique<WindowSchedule>(schedule, [&model](const AttentionWindows& windows, bool yarn) {
    return model.set_attention_windows(windows.short_blocks, windows.long_blocks, yarn);
  });
}

// What this run's checkpoints must match to be resumed.
ResumeExpectations resume_expectations(const ModelFamily& family, const BucketOptimizer& optimizer,
                                       TrainLoaderKind loader) {
  ResumeExpectations expected;
  expected.model = family.state_model();
  expected.describe_model = describe_state_model;
  expected.model_file_digest = [&family](const std::string& path) { return family.model_file_digest(path); };
  expected.optimizer = optimizer.state_kind();
  expected.loader = loader;
  return expected;
}

void log_lines(TrainLog& log, const std::vector<std::string>& lines) {
  for (const std::string& line : lines) log.line(line);
}

// The loop's own state, saved with every checkpoint.
struct LoopState {
  int step = 0;  // optimizer steps done
  double train_time_ms = 0.0;
  std::string last_checkpoint;  // prefix; "" for none
};

// Everything a run trains with, built in dependency order: the model (loaded, or initialised from the
// seed), the optimizer and its master weights, the data loaders, and the state of a resumed checkpoint.
struct Run {
  Run(const TrainOptions& options, CommContext& communicator)
      : opt(options),
        comm(communicator),
        resume_prefix(llmc::resume_prefix(opt.resume, opt.output_dir)),
        start(locate_model(opt.model, resume_prefix.empty() ? "" : checkpoint_model_path(resume_prefix),
                           comm.world_size())),
        loader_kind(train_loader_kind(opt, *start.family)),  // before the model: a refusal costs nothing
        grad_accum(opt.grad_accum_steps(comm.world_size())),
        fp8_head(start.family->use_fp8_head(opt.fp8_head, opt.seq_len)),
        model(start.family->build(comm.world_size(), opt.batch_size, opt.seq_len, grad_accum, create_compute_stream(),
                                  fp8_head)),
        tracer(!opt.trace_dir.empty(), comm.rank()),
        optimizer(make_optimizer(opt, *start.family, *model, comm, tracer)),
        train_batches(make_train_batches(loader_kind, opt, comm, *start.family, grad_accum)),
        val_loader(make_val_loader(opt, comm, start.family->vocab_size())),
        windows(make_window_schedule(opt, *model)) {
    model->set_gemm_algo_selection(parse_gemm_algo_selection(opt.gemm_algo));
    if (start.params.empty()) start.params = start.family->init_params(opt.seed, comm.world_size());
    model->upload_params(start.params);
    optimizer->init_master(start.params);
    if (resume_prefix.empty()) return;
    // Written by this many ranks or another: the optimizer re-shards its own state, the loader maps its position.
    const CheckpointReader checkpoint(resume_prefix, comm.rank(), comm.world_size(),
                                      resume_expectations(*start.family, *optimizer, train_batches->kind()));
    optimizer->restore_state(checkpoint);
    train_batches->resume(checkpoint.written(), checkpoint.state_path(0));
    loop = LoopState{static_cast<int>(checkpoint.written().step), checkpoint.written().train_time_ms, resume_prefix};
    resumed_from = checkpoint.written();
  }

  const TrainOptions& opt;
  CommContext& comm;
  const std::string resume_prefix;  // "" when starting fresh
  ModelStart start;
  const TrainLoaderKind loader_kind;
  const int grad_accum;
  const bool fp8_head;  // the speedrun model's head in FP8 (--fp8-head)
  std::unique_ptr<FamilyModel> model;
  Tracer tracer;
  std::unique_ptr<BucketOptimizer> optimizer;
  std::unique_ptr<TrainBatches> train_batches;  // --train-loader
  std::unique_ptr<ValLoader> val_loader;
  std::unique_ptr<WindowSchedule> windows;  // null: fixed windows
  LoopState loop;
  TrainStateHeader resumed_from;  // what the checkpoint's writer saw (when resuming)
};

LogHeader describe_run(const Run& run, const std::string& options_text, const DebugHooks& debug) {
  LogHeader header;
  header.run = collect_run_info();
  header.precision = kPrecisionName;
  header.world_size = run.comm.world_size();
  header.model = run.start.family->describe();
  header.num_parameters = run.model->layout().num_parameters;
  header.model_source = run.start.file.empty() ? "init seed " + std::to_string(run.opt.seed) : "from " + run.start.file;
  header.options_text = options_text;
  header.batch_size = run.opt.batch_size;
  header.seq_len = run.opt.seq_len;
  header.grad_accum = run.grad_accum;
  header.activation_bytes = run.model->activation_bytes();
  header.optimizer_state_bytes = run.optimizer->state_bytes();
  header.overlap = run.opt.overlap;
  if (run.opt.resume == "latest" && run.resume_prefix.empty())
    header.notes.push_back("--resume latest: no checkpoint in " + run.opt.output_dir + ", starting fresh");
  if (!run.resume_prefix.empty())
    header.notes.push_back("resumed from " + run.resume_prefix + " at step " + std::to_string(run.loop.step) +
                           (run.resumed_from.world_size == run.comm.world_size()
                                ? ""
                                : " (written by " + std::to_string(run.resumed_from.world_size) +
                                      " ranks, optimizer state re-sharded)"));
  header.notes.push_back("train loader: " + run.train_batches->describe() + " (--train-loader " +
                         run.opt.train_loader + ")");
  if (run.optimizer->state_kind() == StateOptimizer::kSpeedrun)
    header.notes.push_back("optimizer: speedrun (NorMuon + sharded Adam)");
  header.notes.push_back(std::string("head: ") + (run.fp8_head ? "fp8" : "bf16") + " (--fp8-head " + run.opt.fp8_head +
                         "), activations " + std::to_string(header.activation_bytes) + " bytes");
  if (debug.any()) header.notes.push_back("debug: " + debug.describe());
  if (run.opt.lr_schedule == "speedrun" || run.windows)
    header.notes.push_back("speedrun schedule: " + SpeedrunSchedule::for_total_steps(run.opt.steps).describe());
  return header;
}

// Rank 0's samples (--sample-every): a KV-cache decoder over the model's own parameter buffer, on its
// stream, with activations for chunks of kSampleChunk tokens; none on other ranks or without the option.
constexpr int kSampleChunk = 64;

std::unique_ptr<TrainingSamples> make_samples(Run& run) {
  if (run.opt.sample_every == 0 || !run.comm.is_main_rank()) return nullptr;
  return std::make_unique<TrainingSamples>(run.model->make_decoder(kSampleChunk), run.opt.vocab_dir,
                                           run.opt.sample_prompt, run.opt.sample_tokens, run.opt.seed);
}

// ---- the loop's bookkeeping --------------------------------------------------------------------------

// Whether this run writes checkpoints (with --output-dir).
bool writes_checkpoints(const Run& run) { return !run.opt.output_dir.empty(); }

// The model file once (rank 0) and every rank's optimizer shard, complete on every rank or not at all
// (llmc/checkpoint/checkpoint_writer.h); then, with --keep-checkpoints, the oldest ones go.
void write_run_checkpoint(const std::string& prefix, Run& run, TrainLog& log) {
  run.optimizer->wait_for_all_params();
  const std::vector<float> params = run.comm.is_main_rank() ? run.model->download_params() : std::vector<float>();
  TrainState state;
  state.step = run.loop.step;
  state.rank = run.comm.rank();
  state.world_size = run.comm.world_size();
  state.model = run.start.family->state_model();
  run.train_batches->save_position(state);
  state.batch_size = run.opt.batch_size;
  state.grad_accum = run.grad_accum;
  state.seq_len = run.opt.seq_len;
  state.train_time_ms = run.loop.train_time_ms;
  state.optimizer = run.optimizer->state_kind();
  state.arrays = run.optimizer->save_state(run.loop.step);
  const ModelFileWriter write_model = [&run, &params](const std::string& path) {
    return run.model->write_model_file(path, params, /*fp32=*/false);
  };
  save_checkpoint(prefix, run.comm, CheckpointContents{write_model, state});
  run.loop.last_checkpoint = prefix;
  log.line("# checkpoint " + prefix);
  if (!run.comm.is_main_rank()) return;
  for (const std::string& problem : prune_checkpoints(run.opt.output_dir, run.opt.keep_checkpoints))
    log.line("# warning: --keep-checkpoints could not delete " + problem);
}

// Throughput figures of the step line, from the step's duration.
class ThroughputMeter {
 public:
  explicit ThroughputMeter(const Run& run)
      : tokens_per_step_(static_cast<double>(run.opt.batch_size) * run.opt.seq_len * run.grad_accum *
                         run.comm.world_size()),
        flops_per_token_(run.model->flops_per_token(run.opt.seq_len)),
        world_size_(run.comm.world_size()) {
    if (!kFp32Build) peak_flops_ = bf16_peak_flops(collect_run_info().device_name);
  }
  double tokens_per_second(double step_ms) const { return tokens_per_step_ / (step_ms / 1000.0); }
  std::string mfu(double step_ms) const {
    return format_mfu(flops_per_token_ * tokens_per_second(step_ms) / world_size_, peak_flops_);
  }

 private:
  double tokens_per_step_, flops_per_token_;
  int world_size_;
  std::optional<double> peak_flops_;
};

std::string step_line(const Run& run, int step, const StepResult& result, float lr, double step_ms,
                      const ThroughputMeter& meter, Tracer& tracer) {
  TrainStepRecord record;
  record.step = step;
  record.total_steps = run.opt.steps;
  record.loss = result.loss;
  record.train_time_ms = run.loop.train_time_ms;
  record.step_avg_ms = run.loop.train_time_ms / step;
  record.tokens_per_second = meter.tokens_per_second(step_ms);
  record.mfu = meter.mfu(step_ms);
  record.lr = lr;
  record.grad_norm = result.grad_norm;
  record.eta_seconds = (run.opt.steps - step) * record.step_avg_ms / 1000.0;
  std::string line = format_train_line(record);
  if (!tracer.enabled()) return line;
  const OverlapFigures overlap = tracer.flush_step();
  char figures[128];
  std::snprintf(figures, sizeof figures, " comm:%.2fms exposed_comm:%.2fms overlapped:%.1f%%", overlap.comm_us / 1000,
                overlap.exposed_comm_us / 1000, 100.0 * overlap.overlapped_fraction);
  return line + figures;
}

bool due(int every, int step, bool last_step) { return last_step || (every > 0 && step % every == 0); }

void write_trace(const TrainOptions& opt, const Tracer& tracer, const CommContext& comm) {
  if (opt.trace_dir.empty()) return;
  if (comm.is_main_rank()) make_directories(opt.trace_dir, "trace directory");
  comm.barrier();
  tracer.write(opt.trace_dir + "/trace_rank" + std::to_string(comm.rank()) + ".json");
}

// ---- the run -----------------------------------------------------------------------------------------

// What watches the loop: the watchdog (a hung step, collective or file system ends the job) and the stop
// signals (a signal ends it cleanly at a step boundary).
struct Guards {
  Watchdog& watchdog;
  const StopSignals& signals;
};

// The stop signal some rank received (the same answer on every rank), 0 if none. One host all-reduce of
// a scalar per step: microseconds, beside the step's own all-reduce of the loss (docs/robustness.md).
int agreed_stop_signal(const CommContext& comm, const StopSignals& signals) {
  return static_cast<int>(comm.all_reduce_max(static_cast<double>(signals.received())));
}

// The training loop's host side of one step, once the device has finished it: the log line, the stop on a
// non-finite loss, the debug dump, validation, samples and checkpoints, each watched by the watchdog.
// `since_` is when the previous step's host side ended: with steps enqueued one ahead, the time between
// two reads is the device's step time.
class StepFinisher {
 public:
  StepFinisher(Run& run, TrainLog& log, const DebugHooks& debug, Watchdog& watchdog, TrainingSamples* samples,
               StepParts& parts, Batch& batch)
      : run_(run),
        log_(log),
        debug_(debug),
        watchdog_(watchdog),
        samples_(samples),
        parts_(parts),
        batch_(batch),
        meter_(run),
        since_(Clock::now()) {}

  // Whether step `step` needs the model's state right after it (parameters, gradients, the batch, the
  // loader's position, a trace): then the next step is enqueued only after finish(step). A stop signal
  // needs no entry here: the ranks agree on it before the next step is enqueued, which then is not.
  bool needs_state_after(int step) const {
    const TrainOptions& opt = run_.opt;
    const bool last = step == opt.steps;
    return last || run_.tracer.enabled() || debug_.wants_dump(step) ||
           (run_.val_loader && due(opt.val_every, step, last)) ||
           (samples_ != nullptr && step % opt.sample_every == 0) ||
           (writes_checkpoints(run_) && due(opt.checkpoint_every, step, last));
  }

  // Reads step `step` (waiting for the device) and does its host work. Returns false to stop the run.
  // The caller has armed the watchdog's step activity: the wait in the read is what it covers.
  bool finish(int step, float lr) {
    const TrainOptions& opt = run_.opt;
    StepResult result = read_train_step(parts_, step);
    const double step_ms = elapsed_ms(since_);
    watchdog_.step_finished(step_ms / 1000.0);
    run_.loop.step = step;
    run_.loop.train_time_ms += step_ms;
    result.loss = debug_.loss_seen(step, result.loss);
    if (!std::isfinite(result.loss)) {
      log_.line("error: step " + std::to_string(step) + ": the loss is " + std::to_string(result.loss) +
                "; stopping. Last good checkpoint: " +
                (run_.loop.last_checkpoint.empty() ? "none" : run_.loop.last_checkpoint));
      return false;
    }
    if (debug_.wants_dump(step) && run_.comm.is_main_rank())
      debug_.dump_step(batch_.inputs, batch_.targets, result.loss, run_.model->download_grads(), opt.batch_size,
                       opt.seq_len, kPrecisionName);
    log_.line(step_line(run_, step, result, lr, step_ms, meter_, run_.tracer));
    validate_sample_checkpoint(step);
    since_ = Clock::now();  // validation, samples and checkpoints are not training time
    return true;
  }

 private:
  // What is due after step `step`, each under its own watchdog activity (and limit).
  void validate_sample_checkpoint(int step) {
    const TrainOptions& opt = run_.opt;
    const bool last_step = step == opt.steps;
    if (run_.val_loader && due(opt.val_every, step, last_step)) {
      watchdog_.begin(Watchdog::Activity::kValidation, step);
      if (run_.windows) log_lines(log_, run_.windows->before_step(step));  // the next step's; the last: 20 blocks
      const double val_loss = evaluate(*run_.model, *run_.optimizer, *run_.val_loader, run_.comm, batch_);
      log_.line(format_val_line(step, opt.steps, val_loss, run_.loop.train_time_ms, run_.loop.train_time_ms / step));
    }
    if (samples_ != nullptr && step % opt.sample_every == 0) {
      watchdog_.begin(Watchdog::Activity::kSamples, step);
      run_.optimizer->wait_for_all_params();  // the decoder reads every parameter: all updates applied first
      for (const std::string& line : samples_->sample(step)) log_.line(line);
    }
    if (writes_checkpoints(run_) && due(opt.checkpoint_every, step, last_step)) {
      watchdog_.begin(Watchdog::Activity::kCheckpoint, step);
      write_run_checkpoint(checkpoint_prefix(opt.output_dir, step), run_, log_);
    }
  }

  Run& run_;
  TrainLog& log_;
  const DebugHooks& debug_;
  Watchdog& watchdog_;
  TrainingSamples* samples_;  // null: no samples
  StepParts& parts_;
  Batch& batch_;
  const ThroughputMeter meter_;
  Clock::time_point since_;
};

// Every rank stops after the same finished step `step` with a complete checkpoint of it (unless the step
// wrote its own already).
int stop_by_signal(Run& run, TrainLog& log, Guards& guards, int signal, int step) {
  std::string how = "no checkpoint written (no --output-dir)";
  if (writes_checkpoints(run)) {
    const std::string prefix = checkpoint_prefix(run.opt.output_dir, step);
    guards.watchdog.begin(Watchdog::Activity::kCheckpoint, step);
    if (run.loop.last_checkpoint != prefix) write_run_checkpoint(prefix, run, log);
    how = "resume with --resume " + run.loop.last_checkpoint;
  }
  log.line("# stopped by signal " + signal_name(signal) + " at step " + std::to_string(step) + "; " + how);
  return kExitStoppedBySignal;
}

// The training loop: steps up to --steps, with validation, samples, checkpoints, the stop on a non-finite
// loss and on a stop signal. The host enqueues step s + 1 before it reads step s (unless step s's state is
// needed first), so it never waits inside a step and the device runs the steps back to back. The ranks
// agree on a stop signal before step s + 1 is enqueued: stopping then leaves step s the last one on the
// device, finished and checkpointed whole. Returns the exit status.
int train_loop(Run& run, TrainLog& log, const DebugHooks& debug, Guards& guards, TrainingSamples* samples) {
  const TrainOptions& opt = run.opt;
  const LrSchedule schedule{opt.lr, opt.warmup_steps, opt.steps, opt.final_lr_frac, parse_lr_decay(opt.lr_schedule)};
  StepParts parts{*run.model, *run.optimizer, *run.train_batches, run.tracer, run.comm, run.grad_accum};
  Batch batch(static_cast<size_t>(opt.batch_size) * opt.seq_len);
  StepFinisher finisher(run, log, debug, guards.watchdog, samples, parts, batch);
  const int first_step = run.loop.step + 1;
  int unread = 0;  // an enqueued step not read yet, or 0
  float unread_lr = 0.0f;
  for (int step = first_step; step <= opt.steps; step++) {
    // Armed before the enqueue, which may wait (a full launch queue, the staging ring), and before the read
    // of the step before, which waits for the device; named after the oldest step the host has not read.
    guards.watchdog.begin(Watchdog::Activity::kStep, unread != 0 ? unread : step);
    if (step > first_step) {
      if (const int signal = agreed_stop_signal(run.comm, guards.signals)) {
        if (unread != 0 && !finisher.finish(unread, unread_lr)) return 1;
        return stop_by_signal(run, log, guards, signal, step - 1);
      }
    }
    const float lr = static_cast<float>(schedule.at(step - 1));
    try {
      // Set at enqueue time, with step s - 1 possibly still running: the forward reads the windows when it
      // is enqueued, and a YaRN update of the RoPE tables is ordered after step s - 1 on the stream.
      if (run.windows) log_lines(log, run.windows->before_step(step - 1));
      enqueue_train_step(parts, step, lr, batch);
    } catch (...) {  // e.g. the loader refusing the next shard: the step before it still gets its log line
      if (unread != 0) finisher.finish(unread, unread_lr);
      throw;
    }
    if (unread != 0 && !finisher.finish(unread, unread_lr)) return 1;
    unread = step;
    unread_lr = lr;
    if (finisher.needs_state_after(step)) {
      guards.watchdog.begin(Watchdog::Activity::kStep, step);
      if (!finisher.finish(step, lr)) return 1;
      unread = 0;
    }
  }
  return 0;
}

int train(const TrainOptions& opt, const std::string& options_text, CommContext& comm) {
  validate_train_options(opt, comm.world_size());
  const DebugHooks debug = DebugHooks::from_environment();
  const StopSignals signals(parse_stop_signals(opt.stop_signals));
  if (!opt.output_dir.empty() && comm.is_main_rank()) make_directories(opt.output_dir, "output directory");
  comm.barrier();
  Run run(opt, comm);
  const std::unique_ptr<TrainingSamples> samples = make_samples(run);
  // Opened only now that the set-up has succeeded: a run that cannot start leaves no log.txt behind.
  TrainLog log(opt.output_dir.empty() ? "" : opt.output_dir + "/log.txt", comm.is_main_rank());
  for (const std::string& line : format_log_header(describe_run(run, options_text, debug))) log.line(line);
  try {
    if (debug.dumps() && comm.is_main_rank())
      run.model->write_model_file(debug.prepare_model_dump(), run.model->download_params(), /*fp32=*/true);
    Watchdog watchdog(
        opt.timeout, [&run] { return run.optimizer->unfinished_collective(); },
        [&comm](const std::string& why) { comm.abort_job(why, kExitWatchdog); });
    Guards guards{watchdog, signals};
    const int status = train_loop(run, log, debug, guards, samples.get());
    watchdog.idle();
    write_trace(opt, run.tracer, run.comm);
    return status;
  } catch (const std::exception& error) {
    log.record_failure(error.what());
    throw;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"train_gpt2: train GPT-2 on token shards (data-parallel under mpirun, ZeRO-1 AdamW)"};
  TrainOptions options;
  add_train_options(app, options);
  CLI11_PARSE(app, argc, argv);
  // Outside the try: it must outlive the error path (see stop_after_error).
  std::unique_ptr<CommContext> comm;
  try {
    comm = std::make_unique<CommContext>();
    return train(options, app.config_to_str(/*default_also=*/true, /*write_description=*/false), *comm);
  } catch (const AgreedError& error) {  // every rank knows it: all stop normally
    return stop_after_agreed_error(error, *comm);
  } catch (const std::exception& error) {
    return stop_after_error(error.what(), comm.get());
  }
}
