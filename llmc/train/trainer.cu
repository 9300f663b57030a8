// The trainer's loop over a training run (see trainer.h).
#include "llmc/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <type_traits>
#include <vector>

#include "llmc/base/file_io.h"
#include "llmc/checkpoint/checkpoint_dir.h"
#include "llmc/cuda/precision.h"
#include "llmc/schedule/lr_schedule.h"
#include "llmc/train/mfu.h"
#include "llmc/train/run_info.h"

namespace llmc {

namespace {

constexpr bool kFp32Build = std::is_same<floatX, float>::value;
// Rank 0's samples: chunks of this many tokens through the decoder.
constexpr int kSampleChunk = 64;

double elapsed_ms(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since).count();
}

bool due(int every, int step, bool last_step) { return last_step || (every > 0 && step % every == 0); }

void log_lines(TrainLog& log, const std::vector<std::string>& lines) {
  for (const std::string& line : lines) log.line(line);
}

// The mean loss of the val sequences longer than the model's buffers (the record's 262,144 tokens per rank), each
// evaluated as one forward over it would (TrainableModel::sequence_losses), in forwards of --seq-len.
double evaluate_long_sequences(TrainingRun& run, Batch& batch, int val_seq_len) {
  ValLoader& val_loader = *run.val_loader;
  run.model->set_seq_len(run.opt.seq_len);
  run.optimizer->wait_for_all_params();  // the forwards read every parameter
  double loss_sum = 0.0;
  for (int64_t s = 0; s < val_loader.num_steps(); s++) {
    val_loader.next_batch(batch.inputs.data(), batch.targets.data());
    for (int b = 0; b < run.opt.batch_size; b++) {
      const size_t offset = static_cast<size_t>(b) * val_seq_len;
      double sequence_sum = 0.0;
      for (float loss : run.model->sequence_losses(batch.inputs.data() + offset, batch.targets.data() + offset,
                                                   val_seq_len))
        sequence_sum += loss;
      loss_sum += sequence_sum / val_seq_len / run.opt.batch_size;
    }
  }
  return run.comm.all_reduce_mean(loss_sum / static_cast<double>(val_loader.num_steps()));
}

// The mean validation loss over every rank's share of the val tokens, with the parameters of the last update.
double evaluate(TrainingRun& run, Batch& batch) {
  ValLoader& val_loader = *run.val_loader;
  val_loader.reset();
  // The val sequences' length; after them the training one (with --batch-schedule the next step sets its own).
  const int val_seq_len = run.opt.validation_seq_len();
  if (val_seq_len > run.opt.seq_len) return evaluate_long_sequences(run, batch, val_seq_len);
  if (run.stage_batches || val_seq_len != run.opt.seq_len) run.model->set_seq_len(val_seq_len);
  double loss_sum = 0.0;
  for (int64_t s = 0; s < val_loader.num_steps(); s++) {
    val_loader.next_batch(batch.inputs.data(), batch.targets.data());
    run.model->forward(batch.inputs.data(), batch.targets.data(), 0, /*compute_dlogits=*/false, 0.0f,
                       run.optimizer->before_bucket_use());
    loss_sum += run.model->mean_loss(1);
  }
  if (val_seq_len != run.opt.seq_len) run.model->set_seq_len(run.opt.seq_len);
  return run.comm.all_reduce_mean(loss_sum / static_cast<double>(val_loader.num_steps()));
}

// The lr at each 0-based step: --lr, --warmup-steps and the --lr-schedule decay to --final-lr-frac.
LrSchedule lr_schedule(const TrainOptions& opt) {
  return LrSchedule{opt.lr, opt.warmup_steps, opt.steps, opt.final_lr_frac, opt.lr_schedule};
}

// The run's throughput figures (no peak in the fp32 build: its MFU is "n/a").
ThroughputMeter throughput_meter(const TrainingRun& run) {
  const double tokens_per_step =
      static_cast<double>(run.opt.batch_size) * run.opt.seq_len * run.grad_accum * run.comm.world_size();
  const std::optional<double> peak =
      kFp32Build ? std::nullopt : bf16_peak_flops(collect_run_info().device_name);
  return ThroughputMeter(tokens_per_step, run.model->flops_per_token(run.opt.seq_len), run.comm.world_size(), peak);
}

// tokens_fraction: the step's share of --seq-len's tokens (--batch-schedule).
std::string step_line(TrainingRun& run, const ThroughputMeter& meter, int step, const StepResult& result, float lr,
                      double step_ms, double tokens_fraction) {
  TrainStepRecord record;
  record.step = step;
  record.total_steps = run.opt.steps;
  record.loss = result.loss;
  record.train_time_ms = run.loop.train_time_ms;
  record.step_avg_ms = run.loop.train_time_ms / step;
  record.tokens_per_second = meter.tokens_per_second(step_ms, tokens_fraction);
  record.mfu = meter.mfu(step_ms, tokens_fraction);
  record.lr = lr;
  record.grad_norm = result.grad_norm;
  record.eta_seconds = (run.opt.steps - step) * record.step_avg_ms / 1000.0;
  std::string line = format_train_line(record);
  if (!run.tracer.enabled()) return line;
  const OverlapFigures overlap = run.tracer.flush_step();
  char figures[128];
  std::snprintf(figures, sizeof figures, " comm:%.2fms exposed_comm:%.2fms overlapped:%.1f%%", overlap.comm_us / 1000,
                overlap.exposed_comm_us / 1000, 100.0 * overlap.overlapped_fraction);
  return line + figures;
}

// The stop signal some rank received (the same answer on every rank), 0 if none. One host all-reduce of
// a scalar per step: microseconds, beside the step's own all-reduce of the loss (docs/robustness.md).
int agreed_stop_signal(const CommContext& comm, const StopSignals& signals) {
  return static_cast<int>(comm.all_reduce_max(static_cast<double>(signals.received())));
}

// The options, checked, and the output directory made before any rank builds anything.
const TrainOptions& prepared(const TrainOptions& options, CommContext& comm) {
  validate_train_options(options, comm.world_size());
  if (!options.output_dir.empty() && comm.is_main_rank()) make_directories(options.output_dir, "output directory");
  comm.barrier();
  return options;
}

// Rank 0's samples (--sample-every): a KV-cache decoder over the model's own parameter buffer, on its
// stream; none on other ranks or without the option.
std::unique_ptr<TrainingSamples> make_samples(TrainingRun& run) {
  if (run.opt.sample_every == 0 || !run.comm.is_main_rank()) return nullptr;
  return std::make_unique<TrainingSamples>(run.model->make_decoder(kSampleChunk), run.opt.vocab_dir,
                                           run.opt.sample_prompt, run.opt.sample_tokens, run.opt.seed);
}

}  // namespace

Trainer::Trainer(const TrainOptions& options, const std::string& options_text, CommContext& comm)
    : opt_(prepared(options, comm)),
      comm_(comm),
      debug_(DebugHooks::from_environment()),
      signals_(parse_stop_signals(opt_.stop_signals)),
      run_(std::make_unique<TrainingRun>(opt_, comm_)),
      samples_(make_samples(*run_)),
      log_(std::make_unique<TrainLog>(opt_.output_dir.empty() ? "" : opt_.output_dir + "/log.txt",
                                      comm_.is_main_rank())),
      watchdog_(std::make_unique<Watchdog>(
          opt_.timeout, [this] { return run_->optimizer->unfinished_collective(); },
          [this](const std::string& why) { comm_.abort_job(why, kExitWatchdog); })),
      parts_(run_->step_parts()),
      meter_(throughput_meter(*run_)),
      batch_(static_cast<size_t>(opt_.batch_size) * std::max(opt_.seq_len, opt_.validation_seq_len())),
      since_(Clock::now()) {
  if (opt_.cuda_graphs) step_graphs_ = std::make_unique<StepGraphs>(parts_);
  for (const std::string& line : format_log_header(run_->describe(options_text, debug_))) log_->line(line);
}

void Trainer::enqueue_step(int step, float lr) {
  if (step_graphs_)
    step_graphs_->enqueue_step(parts_, step, lr, batch_);
  else
    enqueue_train_step(parts_, step, lr, batch_);
}

Trainer::~Trainer() = default;

int Trainer::run() {
  try {
    if (debug_.dumps() && comm_.is_main_rank())
      run_->model->write_model_file(debug_.prepare_model_dump(), run_->model->download_params(), /*fp32=*/true);
    untimed_warmup();
    since_ = Clock::now();
    const int status = train_loop();
    watchdog_->idle();
    if (step_graphs_)
      log_->line("# cuda graphs: " + std::to_string(step_graphs_->captured()) + " captured, " +
                 std::to_string(step_graphs_->launches()) + " launches");
    write_trace();
    return status;
  } catch (const std::exception& error) {
    log_->record_failure(error.what());
    throw;
  }
}

// Each warm-up step as the loop would train it (its lr, windows, loss weights and shape; the loader's next
// batches), read at once, its trace slices and schedule log lines dropped: what the timed steps use first (GEMM
// plans, kernels, collectives at each shape) is used here. Then the state written before it is restored on every
// rank and its files deleted. Resumed runs too: they restore the resumed state.
void Trainer::untimed_warmup() {
  if (!opt_.untimed_warmup) return;
  const Clock::time_point began = Clock::now();
  const std::string dir = opt_.output_dir + "/untimed_warmup";
  if (comm_.is_main_rank()) make_directories(dir, "untimed warm-up directory");
  comm_.barrier();
  const std::string prefix = checkpoint_prefix(dir, run_->loop.step);
  watchdog_->begin(Watchdog::Activity::kCheckpoint, run_->loop.step);
  run_->save_state(prefix);
  const LrSchedule schedule = lr_schedule(opt_);
  const std::vector<int> steps = run_->warmup_steps();
  std::string listed;
  for (int step : steps) {
    watchdog_->begin(Watchdog::Activity::kStep, step + 1);
    if (run_->windows) run_->windows->before_step(step);
    if (run_->loss_weights) run_->loss_weights->before_step(step);
    run_->set_step_shape(step, parts_);
    enqueue_step(step + 1, static_cast<float>(schedule.at(step)));
    read_train_step(parts_, step + 1);
    run_->tracer.discard_step();
    listed += (listed.empty() ? "" : " ") + std::to_string(step);
  }
  watchdog_->begin(Watchdog::Activity::kCheckpoint, run_->loop.step);
  run_->restore_start_state(prefix);
  comm_.barrier();  // every rank has read the files
  if (comm_.is_main_rank()) {
    for (const std::string& problem : remove_checkpoint(prefix))
      log_->line("# warning: --untimed-warmup could not delete " + problem);
    std::error_code ignored;  // a directory left behind (e.g. with a file the warning named) is harmless
    std::filesystem::remove(dir, ignored);
  }
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f", elapsed_ms(began) / 1000.0);
  log_->line("# untimed warm-up: " + std::to_string(steps.size()) + " steps (schedule steps " + listed + ") in " +
             seconds + " s, then the state of step " + std::to_string(run_->loop.step) + " restored");
}

int Trainer::train_loop() {
  const LrSchedule schedule = lr_schedule(opt_);
  const int first_step = run_->loop.step + 1;
  std::optional<PendingStep> pending;
  for (int step = first_step; step <= opt_.steps; step++) {
    // Armed before the enqueue, which may wait (a full launch queue, the staging ring), and before the read
    // of the step before, which waits for the device; named after the oldest step the host has not read.
    watchdog_->begin(Watchdog::Activity::kStep, pending ? pending->step : step);
    if (step > first_step) {
      if (const int signal = agreed_stop_signal(comm_, signals_)) {
        if (pending && !finish(*pending)) return 1;
        return stop_by_signal(signal, step - 1);
      }
    }
    const float lr = static_cast<float>(schedule.at(step - 1));
    try {
      // Set at enqueue time, with step s - 1 possibly still running: the forward reads the windows when it
      // is enqueued, and a YaRN update of the RoPE tables is ordered after step s - 1 on the stream.
      if (run_->windows) log_lines(*log_, run_->windows->before_step(step - 1));
      if (run_->loss_weights) log_lines(*log_, run_->loss_weights->before_step(step - 1));
      log_lines(*log_, run_->set_step_shape(step - 1, parts_));
      enqueue_step(step, lr);
    } catch (...) {  // e.g. the loader refusing the next shard: the step before it still gets its log line
      if (pending) finish(*pending);
      throw;
    }
    if (pending && !finish(*pending)) return 1;
    pending = PendingStep{step, lr, run_->step_seq_len(step - 1)};
    if (needs_state_after(step)) {
      watchdog_->begin(Watchdog::Activity::kStep, step);
      if (!finish(*pending)) return 1;
      pending.reset();
    }
  }
  return 0;
}

// A stop signal needs no entry here: the ranks agree on it before the next step is enqueued, which then is
// not.
bool Trainer::needs_state_after(int step) const {
  const bool last = step == opt_.steps;
  return last || run_->tracer.enabled() || debug_.wants_dump(step) ||
         (run_->val_loader && due(opt_.val_every, step, last)) ||
         (samples_ != nullptr && step % opt_.sample_every == 0) ||
         (writes_checkpoints() && due(opt_.checkpoint_every, step, last));
}

// The caller has armed the watchdog's step activity: the wait in the read is what it covers.
bool Trainer::finish(const PendingStep& pending) {
  const int step = pending.step;
  StepResult result = read_train_step(parts_, step);
  const double step_ms = elapsed_ms(since_);
  watchdog_->step_finished(step_ms / 1000.0);
  run_->loop.step = step;
  run_->loop.train_time_ms += step_ms;
  result.loss = debug_.loss_seen(step, result.loss);
  if (!std::isfinite(result.loss)) {
    log_->line("error: step " + std::to_string(step) + ": the loss is " + std::to_string(result.loss) +
               "; stopping. Last good checkpoint: " +
               (run_->loop.last_checkpoint.empty() ? "none" : run_->loop.last_checkpoint));
    return false;
  }
  if (debug_.wants_dump(step) && comm_.is_main_rank())
    debug_.dump_step(batch_.inputs, batch_.targets, result.loss, run_->model->download_grads(), opt_.batch_size,
                     pending.seq_len, kPrecisionName);
  log_->line(step_line(*run_, meter_, step, result, pending.lr, step_ms,
                       static_cast<double>(pending.seq_len) / opt_.seq_len));
  validate(step);
  sample(step);
  checkpoint(step);
  since_ = Clock::now();  // validation, samples and checkpoints are not training time
  return true;
}

void Trainer::validate(int step) {
  if (!run_->val_loader || !due(opt_.val_every, step, step == opt_.steps)) return;
  watchdog_->begin(Watchdog::Activity::kValidation, step);
  if (run_->windows) log_lines(*log_, run_->windows->before_step(step));  // the next step's; the last: 20 blocks
  const double val_loss = evaluate(*run_, batch_);
  log_->line(format_val_line(step, opt_.steps, val_loss, run_->loop.train_time_ms, run_->loop.train_time_ms / step));
}

void Trainer::sample(int step) {
  if (samples_ == nullptr || step % opt_.sample_every != 0) return;
  watchdog_->begin(Watchdog::Activity::kSamples, step);
  run_->optimizer->wait_for_all_params();  // the decoder reads every parameter: all updates applied first
  for (const std::string& line : samples_->sample(step)) log_->line(line);
}

void Trainer::checkpoint(int step) {
  if (!writes_checkpoints() || !due(opt_.checkpoint_every, step, step == opt_.steps)) return;
  watchdog_->begin(Watchdog::Activity::kCheckpoint, step);
  run_->write_checkpoint(checkpoint_prefix(opt_.output_dir, step), *log_);
}

// Unless the step wrote its own checkpoint already.
int Trainer::stop_by_signal(int signal, int step) {
  std::string how = "no checkpoint written (no --output-dir)";
  if (writes_checkpoints()) {
    const std::string prefix = checkpoint_prefix(opt_.output_dir, step);
    watchdog_->begin(Watchdog::Activity::kCheckpoint, step);
    if (run_->loop.last_checkpoint != prefix) run_->write_checkpoint(prefix, *log_);
    how = "resume with --resume " + run_->loop.last_checkpoint;
  }
  log_->line("# stopped by signal " + signal_name(signal) + " at step " + std::to_string(step) + "; " + how);
  return kExitStoppedBySignal;
}

void Trainer::write_trace() const {
  if (opt_.trace_dir.empty()) return;
  if (comm_.is_main_rank()) make_directories(opt_.trace_dir, "trace directory");
  comm_.barrier();
  run_->tracer.write(opt_.trace_dir + "/trace_rank" + std::to_string(comm_.rank()) + ".json");
}

}  // namespace llmc
