// CLI11 definitions and consistency checks of the trainer's options (see options.h).
#include "llmc/train/options.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "llmc/base/command_line.h"
#include "llmc/tokenizer/bpe_vocab.h"
#include "llmc/train/recipe.h"
#include "llmc/train/stop_signals.h"

namespace llmc {

double TrainOptions::effective_grad_clip(bool speedrun_optimizer) const {
  if (grad_clip != kGradClipAuto) return grad_clip;
  return speedrun_optimizer ? 0.0 : 1.0;
}

LossReduction TrainOptions::effective_loss_reduction(bool speedrun_optimizer) const {
  if (loss_reduction != LossReduction::kAuto) return loss_reduction;
  return speedrun_optimizer ? LossReduction::kSum : LossReduction::kMean;
}

int TrainOptions::grad_accum_steps(int world_size) const {
  const int64_t tokens_per_micro_step = static_cast<int64_t>(batch_size) * seq_len * world_size;
  const int64_t total = total_batch_tokens > 0 ? total_batch_tokens : tokens_per_micro_step;
  return static_cast<int>(total / tokens_per_micro_step);
}

namespace {

// "1", "0.5", "1e-3": the shortest text of a limit.
std::string number_text(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// True when all of `text` is a number (CLI11 reports anything else as a conversion error).
bool parse_number(const std::string& text, double& value) {
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return !text.empty() && *end == '\0';
}

// Validators whose failure names the allowed values in plain words; CLI11 puts the option in front:
// "--steps: must be at least 1, got 0". Text that is not a number is left to CLI11's conversion error.
CLI::Validator at_least(double minimum) {
  return CLI::Validator(
      [minimum](std::string& text) -> std::string {
        double value = 0.0;
        if (!parse_number(text, value) || value >= minimum) return "";
        return "must be at least " + number_text(minimum) + ", got " + text;
      },
      ">=" + number_text(minimum));
}

CLI::Validator between(double low, double high) {
  return CLI::Validator(
      [low, high](std::string& text) -> std::string {
        double value = 0.0;
        if (!parse_number(text, value) || (value >= low && value <= high)) return "";
        return "must be between " + number_text(low) + " and " + number_text(high) + ", got " + text;
      },
      number_text(low) + ".." + number_text(high));
}

CLI::Validator one_of(std::vector<std::string> choices) {
  std::string listed;
  for (const std::string& choice : choices) listed += (listed.empty() ? "" : ", ") + choice;
  return CLI::Validator(
      [choices, listed](std::string& text) -> std::string {
        if (std::find(choices.begin(), choices.end(), text) != choices.end()) return "";
        return "must be one of " + listed + ", got '" + text + "'";
      },
      "{" + listed + "}");
}

// An option whose values are the names of an enum's table: parsed once, into the enum. Its callback runs for
// the default too, so that --recipe (which sets option defaults) reaches the field.
template <class Enum, size_t N>
CLI::Option* add_choice(CLI::App& app, const std::string& name, Enum& field, const EnumName<Enum> (&table)[N],
                        const std::string& help) {
  std::vector<std::string> names;
  for (const EnumName<Enum>& entry : table) names.push_back(entry.name);
  return app
      .add_option_function<std::string>(
          name, [&field, &table](const std::string& text) { field = *value_named(text, table); }, help)
      ->default_str(name_of(field, table))
      ->check(one_of(names))
      ->run_callback_for_default();
}

// The recipe: applied once the command line is parsed, to every option it did not give.
void add_recipe_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--recipe", o.recipe,
                 "Set the defaults of a whole recipe: modded-2026-07-17 (the current speedrun record: modded89 model, "
                 "1,285 steps of 131,072 / 262,144 / 393,216 tokens by stage, its lr, window, loss and batch "
                 "schedules), modded-2025-10-31 (the earlier record: speedrun model, 2,245 steps of 262,144 tokens, "
                 "speedrun lr and window schedules) or llmc-gpt2-124m (llm.c's GPT-2 124M run); options given "
                 "explicitly still win")
      ->check(one_of(recipe_names()));
  app.final_callback([&app, &o] {
    try {
      apply_recipe(app, o.recipe);
    } catch (const std::invalid_argument& error) {
      throw CLI::ValidationError("--recipe", error.what());
    }
  });
}

// Data: the shards, the training loader, the data order.
void add_data_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--train-data", o.train_data, "Glob of training token shards")->capture_default_str();
  app.add_option("--val-data", o.val_data, "Glob of validation token shards")->capture_default_str();
  add_choice(app, "--train-loader", o.train_loader, kTrainLoaderChoiceNames,
             "Training batches: window (llm.c's fixed windows of T+1 tokens), bos (the speedrun's whole "
             "documents, each starting with <|endoftext|> and cut to 2,048 tokens, packed into sequences; "
             "shards in order, docs/bos_loader.md) or auto (bos for a speedrun model whose vocabulary holds "
             "<|endoftext|>, window otherwise)");
  app.add_flag("--shuffle", o.shuffle,
               "Shuffle shard and window order each epoch (deterministic from --seed; --train-loader window only)");
  app.add_option("--seed", o.seed, "Seed of the initialisation and the data shuffle")->capture_default_str();
}

// The model and how its GEMMs run.
void add_model_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--model", o.model,
                 "dN (GPT-2 shape with N layers; d12 = 124M), a GPT-2 test preset (tiny, small), speedrun (the "
                 "modded-nanogpt 2025-10-31 record's model; -b 1) or its test preset speedrun-tiny, or a model file "
                 "(llm.c GPT-2 or speedrun) to start from")->capture_default_str();
  add_choice(app, "--fp8-head", o.fp8_head, kFp8ChoiceNames,
             "Training forward and backward of a speedrun model's head on FP8 tensor cores, as the record "
             "(validation stays bf16): on, off, or auto (on where the GPU has FP8 GEMMs, compute capability "
             "8.9+, and the sequence length, width and vocabulary are multiples of 16; off for GPT-2 models)");

  add_choice(app, "--fp8-mlp", o.fp8_mlp, kFp8ChoiceNames,
             "Training forward of the 2026-07-17 model's MLPs on FP8 tensor cores, as the record (e4m3, the up "
             "projection's input scaled by its current maximum, the down projection's by the previous forward's; "
             "backward and validation stay bf16): on, off, or auto (on for that model where the GPU has FP8 GEMMs "
             "and the sequence length and width are multiples of 16; off for the other models)");

  app.add_option("--wgmma-gemms", o.wgmma_gemms,
                 "The speedrun models' GEMMs that elementwise work follows on the project's Hopper GEMM (wgmma), with "
                 "that work in their epilogues instead of passes of its own after cuBLASLt: the MLPs' ReLU^2 (the "
                 "2026-07-17 model's FP8 forward on an FP8 wgmma GEMM) and its derivative, the 2025-10-31 "
                 "attention's QK-norm, RoPE and value mix; on or off. bf16 build, Hopper GPU; off by default until a "
                 "GPU has timed it")
      ->capture_default_str();
  add_choice(app, "--gemm-algo", o.gemm_algo, kGemmAlgoSelectionNames,
             "GEMM algorithm per shape: heuristic (cuBLASLt's first choice, runs bitwise reproducible) or "
             "fastest (the fastest of its top candidates and split-K variants, timed at first use on a GPU)");
}

// The optimizer and its communication.
void add_optimizer_options(CLI::App& app, TrainOptions& o) {
  add_choice(app, "--optimizer", o.optimizer, kOptimizerChoiceNames,
             "zero-adamw (ZeRO-1 AdamW on every tensor), speedrun (the model's record's: NorMuon on the block "
             "matrices (and #44's gates), sharded Adam on the rest, the 2026-07-17 model's head and embedding tied "
             "until its untie; no --grad-clip) or auto (speedrun for the speedrun models, zero-adamw for GPT-2); "
             "checkpoints of either resume on any number of ranks");
  app.add_option("--lr", o.lr, "Peak learning rate")->capture_default_str()->check(at_least(0));
  app.add_option("--weight-decay", o.weight_decay, "AdamW decoupled weight decay (2-D tensors only)")
      ->capture_default_str()->check(at_least(0));
  app.add_option("--grad-clip", o.grad_clip,
                 "Clip the global gradient norm to this value (0 = off); default 1.0 with --optimizer zero-adamw, "
                 "off with speedrun (which has no clipping)")
      ->check(at_least(0));
  add_choice(app, "--loss-reduction", o.loss_reduction, kLossReductionNames,
             "The loss the backward differentiates: mean (over every token of the step) or sum (over each "
             "micro-step's tokens, averaged over micro-steps and ranks: the speedrun record's); auto: sum with "
             "--optimizer speedrun, mean with zero-adamw. The logged loss is a per-token mean either way");
  add_choice(app, "--overlap", o.overlap, kOverlapModeNames,
             "Gradient communication: none (after the backward), rs (reduce-scatter during the backward), "
             "full (reduce-scatter, update and all-gather streamed during the backward)");
  add_choice(app, "--bigram-exchange", o.bigram_exchange, kRowExchangeNames,
             "The 2026-07-17 model's bigram-table gradient on several ranks (--optimizer speedrun): sparse (each "
             "rank sends the rows its tokens touched to their owners) or dense (its bucket's reduce-scatter)");
}

// The schedule and the batch.
void add_schedule_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--steps", o.steps, "Number of optimizer steps")->capture_default_str()->check(at_least(1));
  app.add_option("--warmup-steps", o.warmup_steps, "Linear warmup steps")->capture_default_str()->check(at_least(0));
  add_choice(app, "--lr-schedule", o.lr_schedule, kLrDecayNames,
             "Decay after warmup; speedrun: the 2025-10-31 record's multiplier of --lr (1, then linear to 0.1 over "
             "the second half of the scheduled steps); modded89: the 2026-07-17 record's (stages 1 / 1.52 / 1.73, "
             "cooldown to 0.15); both stretched to --steps (docs/optimizers.md)");
  app.add_option("--final-lr-frac", o.final_lr_frac, "Learning rate at the last step, as a fraction of --lr")
      ->capture_default_str()->check(between(0.0, 1.0));
  add_choice(app, "--window-schedule", o.window_schedule, kWindowScheduleNames,
             "Attention windows of a speedrun model: fixed (long 3, short 1 blocks), speedrun (the 2025-10-31 "
             "record's 3/7/11/13 blocks with YaRN at each change, 20 for the final validation) or modded89 (the "
             "2026-07-17 record's, by its stages), stretched to --steps");
  add_choice(app, "--loss-schedule", o.loss_schedule, kLossScheduleNames,
             "Training-loss weights of a modded89 model: fixed (next tokens 1, 0.5, 0.25 and the prefix term 0.25 "
             "throughout) or modded89 (the 2026-07-17 record's, linear within each stage: three next tokens, then "
             "two, then one; the prefix term to 0 by stage 3), stretched to --steps");
  add_choice(app, "--batch-schedule", o.batch_schedule, kBatchScheduleNames,
             "Tokens per sequence by step: fixed (--seq-len throughout) or modded89 (the 2026-07-17 record's stages: "
             "a third, two thirds, then all of --seq-len, a multiple of 3; documents cut to 896 tokens in stage 1, "
             "2,048 later), stretched to --steps; for a modded89 model");
  app.add_option("--cuda-graphs", o.cuda_graphs,
                 "Launch each training micro-step as one CUDA graph, captured at the first step of each shape (the "
                 "micro-step's place, windows, stage, loss weights, Adam or not, parity) and replayed after; on or off. "
                 "A speedrun model with --optimizer speedrun (the 2026-07-17 model's with --bigram-exchange dense on "
                 "several ranks), without --trace; the same bits as off")
      ->capture_default_str();
  app.add_option("--untimed-warmup", o.untimed_warmup,
                 "Before the timed steps, train the steps around each change of the step's shape (0, 1 and two "
                 "either side of each stage's start: the 2026-07-17 record's warm-up, stretched to --steps), then "
                 "restore the state the run started from, so that no timed step pays a first use; on or off; needs "
                 "--output-dir (the state is restored from a checkpoint written there and deleted after)")
      ->capture_default_str();
  app.add_option("--batch-size,-b", o.batch_size, "Micro-batch size B (sequences per rank per micro-step)")
      ->capture_default_str()->check(at_least(1));
  app.add_option("--seq-len,-t", o.seq_len, "Sequence length T")->capture_default_str()->check(at_least(1));
  app.add_option("--total-batch-tokens", o.total_batch_tokens,
                 "Tokens per optimizer step over all ranks; gradient accumulation makes up the difference "
                 "(-1 = B*T*ranks, no accumulation)")->capture_default_str();
}

// Checkpoints and resuming.
void add_checkpoint_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--output-dir,-o", o.output_dir, "Directory for log.txt and checkpoints (empty = log to stdout only)");
  app.add_option("--checkpoint-every", o.checkpoint_every,
                 "Write a checkpoint every N steps (0 = only after the last step); needs --output-dir")
      ->capture_default_str()->check(at_least(0));
  app.add_option("--resume", o.resume,
                 "Resume from a checkpoint: its path prefix (DIR/ckpt_000100) or 'latest' (newest in --output-dir)");
  app.add_option("--keep-checkpoints", o.keep_checkpoints,
                 "Keep the newest N complete checkpoints, deleting older ones once a new one is complete (0 = keep all)")
      ->capture_default_str()->check(at_least(0));
}

// Validation and samples.
void add_evaluation_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--val-every", o.val_every, "Evaluate every N steps (0 = only after the last step)")
      ->capture_default_str()->check(at_least(0));
  app.add_option("--val-tokens", o.val_tokens,
                 "Evaluate exactly the first N tokens of the val shards (a multiple of B*T*ranks, T the validation's "
                 "sequence length; 0 = no validation)")
      ->capture_default_str()->check(at_least(0));
  app.add_option("--val-seq-len", o.val_seq_len,
                 "Tokens per validation sequence (modded89: shorter than --seq-len, or longer, evaluated in forwards "
                 "of --seq-len that carry their context over, as the record's 262,144); 0 = --seq-len")
      ->capture_default_str()->check(at_least(0));
  app.add_option("--sample-every", o.sample_every,
                 "Print a sample of the model every N steps, from rank 0, outside the timed part (0 = never)")
      ->capture_default_str()
      ->check(at_least(0));
  app.add_option("--sample-tokens", o.sample_tokens, "Tokens per sample (fewer at <|endoftext|>)")
      ->capture_default_str()
      ->check(at_least(1));
  app.add_option("--sample-prompt", o.sample_prompt, "Text the samples continue (empty: <|endoftext|>)");
  o.vocab_dir = default_vocab_dir();
  app.add_option("--vocab", o.vocab_dir, "GPT-2 BPE files of the samples and of the 2026-07-17 model's prefix-token "
                 "loss (r50k_base.tiktoken, or encoder.json + vocab.bpe)")->capture_default_str();
}

// Diagnostics and long runs.
void add_diagnostic_options(CLI::App& app, TrainOptions& o) {
  app.add_option("--trace", o.trace_dir, "Write a Chrome trace-event JSON per rank into this directory");
  app.add_option("--timeout", o.timeout,
                 "Seconds a step, validation, sample or checkpoint may take before the watchdog ends every rank "
                 "(0 = automatic: 20x the measured step time, at least 60 s; 10 min for validation, samples, "
                 "checkpoints and the first steps)")->capture_default_str()->check(at_least(0));
  app.add_option("--stop-signals", o.stop_signals,
                 "Signals that make every rank stop after the current step with a checkpoint (exit status 75): "
                 "comma-separated TERM, INT, HUP, USR1, USR2, or none")->capture_default_str();
}

}  // namespace

int parse_train_command_line(int argc, char** argv, const std::string& about, TrainOptions& options,
                             std::string& config) {
  CLI::App app{about};
  add_train_options(app, options);
  const int exit_status = parse_command_line(app, argc, argv);
  if (exit_status < 0) config = app.config_to_str(/*default_also=*/true, /*write_description=*/false);
  return exit_status;
}

void add_train_options(CLI::App& app, TrainOptions& o) {
  add_recipe_options(app, o);
  add_data_options(app, o);
  add_model_options(app, o);
  add_optimizer_options(app, o);
  add_schedule_options(app, o);
  add_checkpoint_options(app, o);
  add_evaluation_options(app, o);
  add_diagnostic_options(app, o);
}

void validate_train_options(const TrainOptions& o, int world_size) {
  const int64_t tokens_per_micro_step = static_cast<int64_t>(o.batch_size) * o.seq_len * world_size;
  if (o.total_batch_tokens > 0 && o.total_batch_tokens % tokens_per_micro_step != 0)
    throw std::invalid_argument("--total-batch-tokens " + std::to_string(o.total_batch_tokens) +
                                " is not a multiple of --batch-size * --seq-len * ranks = " +
                                std::to_string(tokens_per_micro_step));
  if (o.total_batch_tokens == 0 || o.total_batch_tokens < -1)
    throw std::invalid_argument("--total-batch-tokens must be positive (or -1 for B*T*ranks)");
  if (o.warmup_steps > o.steps)
    throw std::invalid_argument("--warmup-steps " + std::to_string(o.warmup_steps) + " exceeds --steps " +
                                std::to_string(o.steps));
  const int64_t val_tokens_per_call = static_cast<int64_t>(o.batch_size) * o.validation_seq_len() * world_size;
  if (o.val_tokens > 0 && o.val_tokens % val_tokens_per_call != 0)
    throw std::invalid_argument("--val-tokens " + std::to_string(o.val_tokens) +
                                " is not a multiple of --batch-size * " +
                                (o.val_seq_len > 0 ? "--val-seq-len" : "--seq-len") + " * ranks = " +
                                std::to_string(val_tokens_per_call));
  if (o.val_every > 0 && o.val_tokens == 0)
    throw std::invalid_argument("--val-every needs --val-tokens (how many tokens to evaluate)");
  if (o.checkpoint_every > 0 && o.output_dir.empty())
    throw std::invalid_argument("--checkpoint-every needs --output-dir (where to write the checkpoints)");
  if (o.resume == "latest" && o.output_dir.empty())
    throw std::invalid_argument("--resume latest needs --output-dir (where to look for checkpoints)");
  if (o.untimed_warmup && o.output_dir.empty())
    throw std::invalid_argument("--untimed-warmup needs --output-dir (the run's starting state is restored from a "
                                "checkpoint written there); pass --output-dir DIR or --untimed-warmup off");
  if (o.cuda_graphs && !o.trace_dir.empty())
    throw std::invalid_argument("--cuda-graphs cannot be used with --trace: a graph's launches have no per-bucket "
                                "slices to time; drop one of them");
  if (o.keep_checkpoints > 0 && o.output_dir.empty())
    throw std::invalid_argument("--keep-checkpoints needs --output-dir (where the checkpoints are)");
  // The records' schedules stretched to --steps (SpeedrunSchedule and Modded89Schedule::for_total_steps) need
  // every phase.
  const bool record_lr = o.lr_schedule == LrDecay::kSpeedrun || o.lr_schedule == LrDecay::kModded89;
  std::string record_schedule;
  if (record_lr) record_schedule = "--lr-schedule " + std::string(name_of(o.lr_schedule, kLrDecayNames));
  else if (o.window_schedule != WindowScheduleKind::kFixed)
    record_schedule = "--window-schedule " + std::string(name_of(o.window_schedule, kWindowScheduleNames));
  else if (o.loss_schedule != LossScheduleKind::kFixed)
    record_schedule = "--loss-schedule " + std::string(name_of(o.loss_schedule, kLossScheduleNames));
  else if (o.batch_schedule != BatchScheduleKind::kFixed)
    record_schedule = "--batch-schedule " + std::string(name_of(o.batch_schedule, kBatchScheduleNames));
  if (!record_schedule.empty() && o.steps < 4)
    throw std::invalid_argument(record_schedule + " needs --steps >= 4 (three window phases and an extension step), " +
                                "got " + std::to_string(o.steps));
  if (o.shuffle && o.train_loader == TrainLoaderChoice::kBos)  // auto's choice is checked once the model is known (train_batches.h)
    throw std::invalid_argument("--shuffle cannot be used with --train-loader bos: the BOS loader walks the shards "
                                "in order; drop --shuffle or pass --train-loader window");
  parse_stop_signals(o.stop_signals);  // throws naming an unknown signal
}

}  // namespace llmc
