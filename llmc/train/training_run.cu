// One training run's wiring (see training_run.h).
#include "llmc/train/training_run.h"

#include <algorithm>
#include <stdexcept>

#include "llmc/checkpoint/checkpoint.h"
#include "llmc/checkpoint/checkpoint_dir.h"
#include "llmc/cuda/cuda_common.h"
#include "llmc/optim/speedrun_optimizer.h"
#include "llmc/optim/zero.h"
#include "llmc/schedule/speedrun_schedule.h"
#include "llmc/train/run_info.h"

namespace llmc {

namespace {

cudaStream_t create_compute_stream() {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreate(&stream));
  return stream;
}

bool is_modded89(const ModelFamily& family) { return family.state_model().family == ModelFamilyId::kModded89; }


OptimizerSettings zero_settings(const TrainOptions& opt) {
  OptimizerSettings settings;
  settings.adamw.weight_decay = static_cast<float>(opt.weight_decay);
  settings.grad_clip = static_cast<float>(opt.effective_grad_clip(/*speedrun_optimizer=*/false));
  settings.overlap = opt.overlap;
  return settings;
}

// --optimizer (auto: the model family's own). The speedrun optimizer has no clipping: --grad-clip is
// refused here rather than ignored.
std::unique_ptr<BucketOptimizer> make_optimizer(const TrainOptions& opt, const ModelFamily& family,
                                                TrainableModel& model, CommContext& comm, Tracer& tracer) {
  const bool family_speedrun = family.default_optimizer() == StateOptimizer::kSpeedrun;
  const bool speedrun = opt.optimizer == OptimizerChoice::kSpeedrun ||
                        (opt.optimizer == OptimizerChoice::kAuto && family_speedrun);
  if (!speedrun) return std::make_unique<ZeroOptimizer>(model, comm, zero_settings(opt), &tracer);
  if (!family_speedrun)
    throw std::invalid_argument(
        "--optimizer speedrun needs a speedrun model (--model speedrun, modded89, their tiny shapes or their files)");
  if (opt.effective_grad_clip(/*speedrun_optimizer=*/true) > 0)
    throw std::invalid_argument("--optimizer speedrun has no gradient clipping: drop --grad-clip or pass 0");
  // The record's schedule stretched to --steps, as --lr-schedule speedrun's and modded89's (at least the 4
  // steps that stretch needs): the NorMuon momentum, the Adam steps and (2026-07-17) the untie.
  const bool modded89 = is_modded89(family);
  const int schedule_steps = std::max(4, opt.steps);
  SpeedrunOptimizerSettings settings;
  if (modded89)
    settings = modded89_optimizer_settings(Modded89Schedule::for_total_steps(schedule_steps));
  else
    settings.schedule = SpeedrunSchedule::for_total_steps(schedule_steps);
  settings.overlap = opt.overlap;
  settings.row_exchange = opt.bigram_exchange;
  return std::make_unique<SpeedrunOptimizer>(model, comm, settings, &tracer);
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
  config.seq_len = opt.validation_seq_len();
  config.val_tokens = opt.val_tokens;
  return std::make_unique<ValLoader>(config);
}

// The windows of --window-schedule speedrun|modded89 at every step (not fixed).
WindowPlan window_plan(const TrainOptions& opt) {
  return opt.window_schedule == WindowScheduleKind::kModded89
             ? WindowPlan::of(Modded89Schedule::for_total_steps(opt.steps))
             : WindowPlan::of(SpeedrunSchedule::for_total_steps(opt.steps));
}

// --window-schedule speedrun|modded89: that record's windows stretched to --steps, set on the model before each
// step (fixed: the model keeps its first windows). Setting the first ones fails at once for GPT-2.
std::unique_ptr<WindowSchedule> make_window_schedule(const TrainOptions& opt, FamilyModel& model) {
  if (opt.window_schedule == WindowScheduleKind::kFixed) return nullptr;
  WindowPlan plan = window_plan(opt);
  const AttentionWindows first = plan.windows[0];
  model.set_attention_windows(first.short_blocks, first.long_blocks, /*apply_yarn=*/false);
  return std::make_unique<WindowSchedule>(std::move(plan), [&model](const AttentionWindows& windows, bool yarn) {
    return model.set_attention_windows(windows.short_blocks, windows.long_blocks, yarn);
  });
}

// --loss-schedule modded89: that record's loss weights stretched to --steps, set on the model before each step
// (fixed: the model keeps its own). Setting the first ones fails at once for a model without them.
std::unique_ptr<LossWeightSchedule> make_loss_schedule(const TrainOptions& opt, FamilyModel& model) {
  if (opt.loss_schedule == LossScheduleKind::kFixed) return nullptr;
  const Modded89Schedule schedule = Modded89Schedule::for_total_steps(opt.steps);
  model.set_loss_weights(mtp_loss_weights(schedule.loss_weights(0)));
  return std::make_unique<LossWeightSchedule>(schedule, [&model](const MtpLossWeights& weights) {
    model.set_loss_weights(weights);
  });
}

// --batch-schedule modded89: that record's stage batches stretched to --steps.
std::unique_ptr<BatchSchedule> make_stage_batches(const TrainOptions& opt) {
  if (opt.batch_schedule == BatchScheduleKind::kFixed) return nullptr;
  return std::make_unique<BatchSchedule>(Modded89Schedule::for_total_steps(opt.steps), opt.seq_len);
}

// Validation sequences longer than --seq-len: a model that carries its context from forward to forward, and
// buffers that hold twice the widest context any step's windows (the final validation's too) will carry.
void check_long_validation(const TrainOptions& opt, const FamilyModel& model) {
  const std::string what = "--val-seq-len " + std::to_string(opt.validation_seq_len()) + " exceeds --seq-len " +
                           std::to_string(opt.seq_len) + ": ";
  if (!model.evaluates_long_sequences())
    throw std::invalid_argument(what + "this model evaluates only sequences that fit its buffers (modded89 carries "
                                "its context over)");
  int context = model.long_sequence_context(0);
  if (opt.window_schedule != WindowScheduleKind::kFixed)
    for (const AttentionWindows& windows : window_plan(opt).windows)
      context = std::max(context, model.long_sequence_context(std::max(windows.short_blocks, windows.long_blocks)));
  if (opt.seq_len < 2 * context)
    throw std::invalid_argument(what + "its forwards carry up to " + std::to_string(context) +
                                " rows of context (the widest window), and --seq-len must hold twice that");
}

// Every sequence length other than --seq-len that the run will ask of the model (each stage's, the validation's)
// tried at once, so that a model that refuses one (GPT-2 any, the FP8 head one that is not a multiple of 16) stops
// the run before it starts; then the model is back at --seq-len.
void try_step_lengths(const TrainOptions& opt, const BatchSchedule* stage_batches, bool validates, FamilyModel& model) {
  std::vector<int> lengths;
  if (stage_batches)
    for (int start : Modded89Schedule::for_total_steps(opt.steps).stage_starts())
      lengths.push_back(stage_batches->shape(start).seq_len);
  const int val_seq_len = opt.validation_seq_len();
  if (validates && val_seq_len > opt.seq_len) check_long_validation(opt, model);
  if (validates && val_seq_len <= opt.seq_len) lengths.push_back(val_seq_len);
  lengths.erase(std::remove(lengths.begin(), lengths.end(), opt.seq_len), lengths.end());
  for (int length : lengths) model.set_seq_len(length);
  if (!lengths.empty()) model.set_seq_len(opt.seq_len);
}

// --wgmma-gemms on, where the family has the wgmma GEMMs (the model checks the build and the GPU).
bool wgmma_gemms_for(bool on, const ModelFamily& family) {
  if (on && !family.has_wgmma_gemms())
    throw std::invalid_argument("--wgmma-gemms on: only the speedrun models (--model speedrun... or modded89...) have "
                                "the wgmma GEMMs");
  return on;
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

}  // namespace

TrainingRun::TrainingRun(const TrainOptions& options, CommContext& communicator)
    : opt(options),
      comm(communicator),
      resume_prefix(llmc::resume_prefix(opt.resume, opt.output_dir)),
      start(locate_model(opt.model, resume_prefix.empty() ? "" : checkpoint_model_path(resume_prefix),
                         comm.world_size())),
      // before the model: a refusal costs nothing
      loader_kind(choose_train_loader(opt.train_loader, start.family->trains_on_documents(),
                                      start.family->vocab_size(), opt.shuffle)),
      grad_accum(opt.grad_accum_steps(comm.world_size())),
      fp8_head(start.family->use_fp8_head(opt.fp8_head, opt.seq_len)),
      fp8_mlp(start.family->use_fp8_mlp(opt.fp8_mlp, opt.seq_len)),
      model(start.family->build(
          ModelBuild{comm.world_size(), opt.batch_size, opt.seq_len, grad_accum, create_compute_stream(), fp8_head,
                     opt.vocab_dir, fp8_mlp, wgmma_gemms_for(opt.wgmma_gemms, *start.family)})),
      tracer(!opt.trace_dir.empty(), comm.rank()),
      optimizer(make_optimizer(opt, *start.family, *model, comm, tracer)),
      loss_reduction(opt.effective_loss_reduction(optimizer->state_kind() == StateOptimizer::kSpeedrun)),
      train_batches(make_train_batches(loader_kind, opt, comm, *start.family, grad_accum)),
      val_loader(make_val_loader(opt, comm, start.family->vocab_size())),
      windows(make_window_schedule(opt, *model)),
      loss_weights(make_loss_schedule(opt, *model)),
      stage_batches(make_stage_batches(opt)) {
  model->set_gemm_algo_selection(opt.gemm_algo);
  try_step_lengths(opt, stage_batches.get(), val_loader != nullptr, *model);
  if (start.params.empty()) start.params = start.family->init_params(opt.seed, comm.world_size());
  model->upload_params(start.params);
  optimizer->init_master(start.params);
  if (resume_prefix.empty()) return;
  // Written by this many ranks or another: the optimizer re-shards its own state, the loader maps its position.
  const CheckpointReader checkpoint(resume_prefix, comm.rank(), comm.world_size(),
                                    resume_expectations(*start.family, *optimizer, train_batches->kind()));
  optimizer->restore_state(checkpoint);
  restore_model_state(checkpoint);
  train_batches->resume(checkpoint.written(), checkpoint.state_path(0));
  loop = LoopState{static_cast<int>(checkpoint.written().step), checkpoint.written().train_time_ms, resume_prefix};
  resumed_from = checkpoint.written();
}

int TrainingRun::step_seq_len(int step) const {
  return stage_batches ? stage_batches->shape(step).seq_len : opt.seq_len;
}

std::vector<std::string> TrainingRun::set_step_shape(int step, StepParts& parts) {
  if (!stage_batches) return {};
  const StepShape shape = stage_batches->shape(step);
  model->set_seq_len(shape.seq_len);
  train_batches->set_step_shape(shape.seq_len, shape.document_cut);
  parts.loss_gradient_scale = loss_gradient_scale(loss_reduction, int64_t{opt.batch_size} * shape.seq_len, grad_accum);
  return stage_batches->changes(step);
}

LogHeader TrainingRun::describe(const std::string& options_text, const DebugHooks& debug) const {
  LogHeader header;
  header.run = collect_run_info();
  header.precision = kPrecisionName;
  header.world_size = comm.world_size();
  header.model = start.family->describe();
  header.num_parameters = model->layout().num_parameters;
  header.model_source = start.file.empty() ? "init seed " + std::to_string(opt.seed) : "from " + start.file;
  header.options_text = options_text;
  header.batch_size = opt.batch_size;
  header.seq_len = opt.seq_len;
  header.grad_accum = grad_accum;
  header.activation_bytes = model->activation_bytes();
  header.optimizer_state_bytes = optimizer->state_bytes();
  header.overlap = name_of(opt.overlap, kOverlapModeNames);
  if (opt.resume == "latest" && resume_prefix.empty())
    header.notes.push_back("--resume latest: no checkpoint in " + opt.output_dir + ", starting fresh");
  if (!resume_prefix.empty())
    header.notes.push_back("resumed from " + resume_prefix + " at step " + std::to_string(loop.step) +
                           (resumed_from.world_size == comm.world_size()
                                ? ""
                                : " (written by " + std::to_string(resumed_from.world_size) +
                                      " ranks, optimizer state re-sharded)"));
  header.notes.push_back("train loader: " + train_batches->describe() + " (--train-loader " +
                         name_of(opt.train_loader, kTrainLoaderChoiceNames) + ")");
  if (optimizer->state_kind() == StateOptimizer::kSpeedrun)
    header.notes.push_back(is_modded89(*start.family)
                               ? "optimizer: speedrun, the 2026-07-17 recipe (NorMuon banks + Adam, tied until the untie)"
                               : "optimizer: speedrun (NorMuon + sharded Adam)");
  header.notes.push_back(std::string("loss gradient: ") +
                         (loss_reduction == LossReduction::kSum ? "sum over each micro-step's tokens"
                                                                : "mean over the step's tokens") +
                         " (--loss-reduction " + name_of(opt.loss_reduction, kLossReductionNames) + ")");
  header.notes.push_back(std::string("head: ") + (fp8_head ? "fp8" : "bf16") + " (--fp8-head " +
                         name_of(opt.fp8_head, kFp8ChoiceNames) + "), activations " +
                         std::to_string(header.activation_bytes) + " bytes");
  if (start.family->has_wgmma_gemms())
    header.notes.push_back(std::string("epilogue GEMMs: ") +
                           (opt.wgmma_gemms ? "wgmma, the elementwise work in the epilogues"
                                            : "cuBLASLt, the elementwise work in passes apart") +
                           " (--wgmma-gemms " + (opt.wgmma_gemms ? "on" : "off") + ")");
  if (is_modded89(*start.family))
    header.notes.push_back(std::string("mlp: ") + (fp8_mlp ? "fp8" : "bf16") +
                           " training forward (--fp8-mlp " + name_of(opt.fp8_mlp, kFp8ChoiceNames) + ")");
  if (debug.any()) header.notes.push_back("debug: " + debug.describe());
  if (opt.lr_schedule == LrDecay::kSpeedrun || opt.window_schedule == WindowScheduleKind::kSpeedrun)
    header.notes.push_back("speedrun schedule: " + SpeedrunSchedule::for_total_steps(opt.steps).describe());
  if (uses_modded89_schedule())
    header.notes.push_back("modded89 schedule: " + Modded89Schedule::for_total_steps(std::max(4, opt.steps)).describe());
  if (stage_batches) header.notes.push_back("batch schedule: " + stage_batches->describe() + " (--batch-schedule modded89)");
  return header;
}

void TrainingRun::write_checkpoint(const std::string& prefix, TrainLog& log) {
  save_state(prefix);
  loop.last_checkpoint = prefix;
  log.line("# checkpoint " + prefix);
  if (!comm.is_main_rank()) return;
  for (const std::string& problem : prune_checkpoints(opt.output_dir, opt.keep_checkpoints))
    log.line("# warning: --keep-checkpoints could not delete " + problem);
}

void TrainingRun::save_state(const std::string& prefix) {
  optimizer->wait_for_all_params();
  const std::vector<float> params = comm.is_main_rank() ? model->download_params() : std::vector<float>();
  TrainState state;
  state.step = loop.step;
  state.rank = comm.rank();
  state.world_size = comm.world_size();
  state.model = start.family->state_model();
  train_batches->save_position(state);
  state.batch_size = opt.batch_size;
  state.grad_accum = grad_accum;
  state.seq_len = opt.seq_len;
  state.train_time_ms = loop.train_time_ms;
  state.optimizer = optimizer->state_kind();
  state.arrays = optimizer->save_state(loop.step);
  for (NamedStateArray& array : model->save_model_state()) state.arrays.push_back(std::move(array));
  const ModelFileWriter write_model = [this, &params](const std::string& path) {
    return model->write_model_file(path, params, /*fp32=*/false);
  };
  save_checkpoint(prefix, comm, CheckpointContents{write_model, state});
}

std::vector<int> TrainingRun::warmup_steps() const {
  if (uses_modded89_schedule()) return Modded89Schedule::for_total_steps(opt.steps).warmup_steps();
  if (opt.lr_schedule == LrDecay::kSpeedrun || opt.window_schedule == WindowScheduleKind::kSpeedrun)
    return SpeedrunSchedule::for_total_steps(opt.steps).warmup_steps();
  return steps_around_changes({}, opt.steps);
}

void TrainingRun::restore_start_state(const std::string& prefix) {
  optimizer->wait_for_all_params();
  CUDA_CHECK(cudaDeviceSynchronize());
  // As the constructor builds a run resumed from `prefix`, on the model and optimizer already built.
  model->reset_yarn();
  model->upload_params(start.params);
  optimizer->init_master(start.params);
  const CheckpointReader checkpoint(prefix, comm.rank(), comm.world_size(),
                                    resume_expectations(*start.family, *optimizer, train_batches->kind()));
  optimizer->restore_state(checkpoint);
  restore_model_state(checkpoint);
  train_batches->resume(checkpoint.written(), checkpoint.state_path(0));
  if (stage_batches) model->set_seq_len(opt.seq_len);
  windows = make_window_schedule(opt, *model);  // the first windows and loss weights on the model again
  loss_weights = make_loss_schedule(opt, *model);
}

// The model's own state (its FP8 scales): this rank's, or with another number of ranks old rank r mod old world's
// (per-rank state such as the delayed activation scales has no owner to re-shard to; the data each rank sees
// changes with the number of ranks anyway).
void TrainingRun::restore_model_state(const CheckpointReader& checkpoint) {
  const int old_rank = checkpoint.old_world_size() == checkpoint.world_size()
                           ? checkpoint.rank()
                           : checkpoint.rank() % checkpoint.old_world_size();
  try {
    model->restore_model_state(checkpoint.model_arrays(old_rank));
  } catch (const FileError&) {
    throw;
  } catch (const std::runtime_error& error) {  // arrays that do not fit this model: name the file
    throw FileError(checkpoint.state_path(old_rank), error.what());
  }
}

bool TrainingRun::uses_modded89_schedule() const {
  const bool modded89_optimizer = optimizer->state_kind() == StateOptimizer::kSpeedrun && is_modded89(*start.family);
  return opt.lr_schedule == LrDecay::kModded89 || opt.window_schedule == WindowScheduleKind::kModded89 ||
         opt.loss_schedule == LossScheduleKind::kModded89 || stage_batches || modded89_optimizer;
}

}  // namespace llmc
