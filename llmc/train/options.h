// The trainer's command-line options: one struct holding every hyperparameter in one visible place,
// their CLI11 definitions (so --help documents exactly what is parsed), and the cross-checks. (Test
// hooks are not options: llmc/train/debug_hooks.h.)
#pragma once
#include <cstdint>
#include <string>

namespace CLI { class App; }

namespace llmc {

// --grad-clip not given: 1.0 with ZeRO AdamW (llm.c's recipe), off with the speedrun optimizer (the record
// clips nothing, SPEEDRUN.md section 2).
constexpr double kGradClipAuto = -1.0;

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
  std::string lr_schedule = "cosine";  // cosine | linear | constant | speedrun
  std::string window_schedule = "fixed";  // fixed | speedrun (speedrun models' attention windows)
  double final_lr_frac = 0.0;
  double weight_decay = 0.0;
  double grad_clip = kGradClipAuto;    // 0 = off; see effective_grad_clip()
  // evaluation, checkpoints, output
  int val_every = 0;                   // 0 = only at the end
  int64_t val_tokens = 0;              // 0 = no validation
  int checkpoint_every = 0;            // 0 = only at the end (if --output-dir is given)
  std::string output_dir;              // log.txt, checkpoints, traces; empty = stdout only
  std::string resume;                  // a checkpoint prefix written by --checkpoint-every, or "latest"
  int keep_checkpoints = 0;            // keep the newest N complete checkpoints; 0 = all
  // robustness (docs/robustness.md)
  double timeout = 0;                  // seconds a step, validation or checkpoint may take; 0 = automatic
  std::string stop_signals = "TERM,INT,USR1";  // checkpoint and stop at the next step boundary
  uint64_t seed = 1337;
  bool shuffle = false;
  std::string train_loader = "auto";   // auto | window | bos (auto: bos for speedrun models; train_batches.h)
  // distributed
  std::string overlap = "full";        // none | rs | full
  std::string optimizer = "auto";      // auto | zero-adamw | speedrun (auto: by the model family)
  std::string trace_dir;
  // samples: rank 0 prints sample_tokens tokens continuing sample_prompt every sample_every steps
  int sample_every = 0;                // 0 = never
  int sample_tokens = 64;
  std::string sample_prompt;           // "" = start from <|endoftext|>
  std::string vocab_dir;               // the GPT-2 BPE files the samples are encoded and decoded with
  // performance
  std::string gemm_algo = "heuristic";  // heuristic | fastest
  std::string fp8_head = "auto";        // on | off | auto (speedrun models' head GEMMs in FP8; docs/fp8.md)

  int grad_accum_steps(int world_size) const;
  // The clipping threshold in force: --grad-clip, or its default for the optimizer chosen.
  double effective_grad_clip(bool speedrun_optimizer) const;  // total_batch_tokens / (B*T*world_size)
};

// Every option with its help text and its allowed values; a value outside them fails the parse with
// "--steps: must be at least 1, got 0" (the option and the allowed range in plain words). Once parsed,
// --recipe sets every option of its recipe that the command line did not give.
void add_train_options(CLI::App& app, TrainOptions& options);

// Throws std::invalid_argument with a message naming the options that contradict each other.
void validate_train_options(const TrainOptions& options, int world_size);

}  // namespace llmc
