// The trainer's command-line options: one struct holding every hyperparameter in one visible place, parsed
// once into typed values (the choices into their enums), their CLI11 definitions (so --help documents
// exactly what is parsed), and the cross-checks. (Test hooks are not options: llmc/train/debug_hooks.h.)
#pragma once
#include <cstdint>
#include <string>

#include "llmc/base/enum_names.h"
#include "llmc/family/fp8_choice.h"
#include "llmc/kernels/gemm_algo_selection.h"
#include "llmc/optim/overlap_mode.h"
#include "llmc/optim/row_exchange.h"
#include "llmc/schedule/lr_schedule.h"
#include "llmc/train/batch_schedule.h"
#include "llmc/train/loss_reduction.h"
#include "llmc/train/loss_schedule.h"
#include "llmc/train/train_batches.h"
#include "llmc/train/window_schedule.h"

namespace CLI { class App; }

namespace llmc {

// --grad-clip not given: 1.0 with ZeRO AdamW (llm.c's recipe), off with the speedrun optimizer (the record
// clips nothing, docs/recipes.md).
constexpr double kGradClipAuto = -1.0;

// --optimizer: ZeRO-1 AdamW, the speedrun's NorMuon + sharded Adam, or the model family's own.
enum class OptimizerChoice { kAuto, kZeroAdamW, kSpeedrun };
inline constexpr EnumName<OptimizerChoice> kOptimizerChoiceNames[] = {
    {OptimizerChoice::kAuto, "auto"}, {OptimizerChoice::kZeroAdamW, "zero-adamw"}, {OptimizerChoice::kSpeedrun, "speedrun"}};

struct TrainOptions {
  // recipe: "" (none), "modded-2025-10-31" or "llmc-gpt2-124m"; sets the defaults below (llmc/train/recipe.h)
  std::string recipe;
  // data
  std::string train_data = "data/cache/fineweb10B/fineweb_train_*.bin";
  std::string val_data = "data/cache/fineweb10B/fineweb_val_*.bin";
  // model: "dN" (d12 = GPT-2 124M), a preset ("tiny", "small", "speedrun", "speedrun-tiny") or a model file
  std::string model = "d12";
  // batch
  int batch_size = 4;                  // B: sequences per micro-step per rank
  int seq_len = 1024;                  // T
  int64_t total_batch_tokens = -1;     // tokens per optimizer step over all ranks; -1 = B*T*world_size
  int steps = 100;                     // optimizer steps
  // optimizer
  double lr = 6e-4;
  int warmup_steps = 0;
  LrDecay lr_schedule = LrDecay::kCosine;                          // cosine | linear | constant | speedrun
  WindowScheduleKind window_schedule = WindowScheduleKind::kFixed;  // fixed | speedrun (speedrun models' windows)
  LossScheduleKind loss_schedule = LossScheduleKind::kFixed;        // fixed | modded89 (its MTP/prefix weights)
  BatchScheduleKind batch_schedule = BatchScheduleKind::kFixed;     // fixed | modded89 (its stage batches)
  bool untimed_warmup = false;  // the schedule's warm-up steps first, untimed, then the start's state restored
  double final_lr_frac = 0.0;
  double weight_decay = 0.0;
  double grad_clip = kGradClipAuto;    // 0 = off; see effective_grad_clip()
  LossReduction loss_reduction = LossReduction::kAuto;  // auto | mean | sum; see effective_loss_reduction()
  // evaluation, checkpoints, output
  int val_every = 0;                   // 0 = only at the end
  int64_t val_tokens = 0;              // 0 = no validation
  int val_seq_len = 0;                 // tokens per validation sequence; 0 = --seq-len (see validation_seq_len())
  int checkpoint_every = 0;            // 0 = only at the end (if --output-dir is given)
  std::string output_dir;              // log.txt, checkpoints, traces; empty = stdout only
  std::string resume;                  // a checkpoint prefix written by --checkpoint-every, or "latest"
  int keep_checkpoints = 0;            // keep the newest N complete checkpoints; 0 = all
  // robustness (docs/robustness.md)
  double timeout = 0;                  // seconds a step, validation or checkpoint may take; 0 = automatic
  std::string stop_signals = "TERM,INT,USR1";  // checkpoint and stop at the next step boundary
  uint64_t seed = 1337;
  bool shuffle = false;
  TrainLoaderChoice train_loader = TrainLoaderChoice::kAuto;  // auto | window | bos (auto: train_batches.h)
  // distributed
  OverlapMode overlap = OverlapMode::kFull;         // none | rs | full
  RowExchange bigram_exchange = RowExchange::kSparse;  // sparse | dense (the 2026-07-17 model's bigram table)
  OptimizerChoice optimizer = OptimizerChoice::kAuto;  // auto | zero-adamw | speedrun (auto: by the model family)
  std::string trace_dir;
  // samples: rank 0 prints sample_tokens tokens continuing sample_prompt every sample_every steps
  int sample_every = 0;                // 0 = never
  int sample_tokens = 64;
  std::string sample_prompt;           // "" = start from <|endoftext|>
  std::string vocab_dir;               // the GPT-2 BPE files of the samples and of the #89 prefix-token loss
  // performance
  GemmAlgoSelection gemm_algo = GemmAlgoSelection::kHeuristic;  // heuristic | fastest
  Fp8Choice fp8_mlp = Fp8Choice::kAuto;    // on | off | auto (the 2026-07-17 model's MLPs in FP8; docs/fp8.md)
  Fp8Choice fp8_head = Fp8Choice::kAuto;  // on | off | auto (speedrun models' head GEMMs in FP8; docs/fp8.md)
  bool cuda_graphs = false;  // each training micro-step one CUDA graph launch (llmc/train/step_graphs.h)
  bool wgmma_gemms = false;  // the speedrun models' GEMMs with elementwise epilogues (llmc/kernels/wgmma_gemm.cuh)

  int grad_accum_steps(int world_size) const;  // total_batch_tokens / (B*T*world_size)
  int validation_seq_len() const { return val_seq_len > 0 ? val_seq_len : seq_len; }
  // The clipping threshold in force: --grad-clip, or its default for the optimizer chosen.
  double effective_grad_clip(bool speedrun_optimizer) const;
  // The loss the backward differentiates: --loss-reduction, or its default for the optimizer chosen.
  LossReduction effective_loss_reduction(bool speedrun_optimizer) const;
};

// Every option with its help text and its allowed values; a value outside them fails the parse with
// "--steps: must be at least 1, got 0" (the option and the allowed range in plain words). Once parsed,
// --recipe sets every option of its recipe that the command line did not give.
void add_train_options(CLI::App& app, TrainOptions& options);

// train_gpt2's command line (`about`: --help's first line) parsed into `options` with add_train_options, and
// `config` the options as CLI11's config text (every option, defaults too), which the trainer logs. Returns -1 to
// go on, else the exit status after CLI11 printed --help (0) or the error. Here, not in train_gpt2.cu, so that
// CLI11's header-only parser is compiled once rather than in each build of the program.
int parse_train_command_line(int argc, char** argv, const std::string& about, TrainOptions& options,
                             std::string& config);

// Throws std::invalid_argument with a message naming the options that contradict each other.
void validate_train_options(const TrainOptions& options, int world_size);

}  // namespace llmc
