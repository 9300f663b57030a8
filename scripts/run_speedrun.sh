#!/usr/bin/env bash
# The official speedrun configuration on one node of 8 GPUs: a training recipe run RUNS times with
# distinct seeds to a FineWeb val loss below 3.28, logs in runs/<NAME>/run<k>.log where
# scripts/compare_runs.py reads them; with RUNS >= 2 it ends with compare_runs' table.
#
# The recipe is the trainer's --recipe (docs/recipes.md; values in llmc/train/recipe.cpp):
#   RECIPE=modded-2026-07-17 (default): modded-nanogpt's record of 2026-07-17: the modded89 model and its
#     NorMuon + Adam, 1,285 steps of 131,072 / 262,144 / 393,216 tokens by stage (one packed sequence of
#     16,384 / 32,768 / 49,152 tokens per GPU), the record's lr, window, loss-weight and batch schedules,
#     validation every 250 steps and at the end on 10,485,760 val tokens.
#   RECIPE=modded-2025-10-31: modded-nanogpt's record of 2025-10-31: the speedrun model,
#     2,245 steps of 262,144 tokens (one packed sequence of 32,768 tokens per GPU), the record's lr
#     and window schedules, the same validation.
#   RECIPE=llmc-gpt2-124m: llm.c's GPT-2 124M run (d12, 64 x 1024 tokens per GPU = 524,288 per step,
#     19,073 steps = 10B tokens, AdamW lr 6e-4, 700 warmup steps, cosine to 0, weight decay 0.1, clip
#     1.0, the same validation), known to reach 3.28; the gpt2_124m_8gpu track's configuration.
# Each recipe setting can be overridden from the environment (e.g. `STEPS=3000 NAME=x ...`); a setting
# left empty keeps the recipe's value, and only those set are passed to the trainer:
#   MODEL (--model), BATCH_SIZE (--batch-size), SEQ_LEN (--seq-len), TOTAL_BATCH_TOKENS
#   (--total-batch-tokens), STEPS (--steps), LR (--lr), WARMUP_STEPS (--warmup-steps), LR_SCHEDULE
#   (--lr-schedule cosine|linear|constant|speedrun|modded89), WINDOW_SCHEDULE (--window-schedule
#   fixed|speedrun|modded89), LOSS_SCHEDULE (--loss-schedule), BATCH_SCHEDULE (--batch-schedule),
#   FINAL_LR_FRAC (--final-lr-frac), WEIGHT_DECAY (--weight-decay), GRAD_CLIP (--grad-clip),
#   VAL_EVERY (--val-every), VAL_TOKENS (--val-tokens), VAL_SEQ_LEN (--val-seq-len).
#
# The trainer options this script always passes:
#   --recipe R --train-data GLOB --val-data GLOB --checkpoint-every N --output-dir DIR --seed N
#   --overlap none|rs|full
#
# Other settings: NAME (default speedrun_<UTC time>), RUNS (default 1), SEED (first seed, default
# 1; run k uses SEED+k-1), NPROC (default 8), LAUNCHER (default "mpirun -np $NPROC"; "" runs one
# process directly; the multinode/ scripts set it), MPIRUN_ARGS (extra mpirun options), TRAINER
# (default ./train_gpt2), RUNS_DIR (default runs), DATA_DIR (default data/cache/fineweb10B),
# CHECKPOINT_EVERY (default 0: only after the last step), OVERLAP (default full), BASELINE (runs or a
# records/ directory to compare with at the end), EXTRA_ARGS (appended to the trainer's options), DRY_RUN=1
# (print the commands, run nothing). Paths are relative to the repository root.
set -euo pipefail

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO_ROOT"

NAME=${NAME:-speedrun_$(date -u +%Y%m%d_%H%M%S)}
RUNS=${RUNS:-1}
SEED=${SEED:-1}
NPROC=${NPROC:-8}
LAUNCHER=${LAUNCHER-mpirun -np $NPROC}
MPIRUN_ARGS=${MPIRUN_ARGS:-}
TRAINER=${TRAINER:-./train_gpt2}
RUNS_DIR=${RUNS_DIR:-runs}
DATA_DIR=${DATA_DIR:-data/cache/fineweb10B}
TRAIN_DATA=${TRAIN_DATA:-$DATA_DIR/fineweb_train_*.bin}
VAL_DATA=${VAL_DATA:-$DATA_DIR/fineweb_val_*.bin}
RECIPE=${RECIPE:-modded-2026-07-17}
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-0}
OVERLAP=${OVERLAP:-full}
# The recipe settings: environment variable and trainer option.
RECIPE_SETTINGS=(MODEL:--model BATCH_SIZE:--batch-size SEQ_LEN:--seq-len TOTAL_BATCH_TOKENS:--total-batch-tokens
                 STEPS:--steps LR:--lr WARMUP_STEPS:--warmup-steps LR_SCHEDULE:--lr-schedule
                 WINDOW_SCHEDULE:--window-schedule LOSS_SCHEDULE:--loss-schedule BATCH_SCHEDULE:--batch-schedule
                 FINAL_LR_FRAC:--final-lr-frac WEIGHT_DECAY:--weight-decay GRAD_CLIP:--grad-clip
                 VAL_EVERY:--val-every VAL_TOKENS:--val-tokens VAL_SEQ_LEN:--val-seq-len)
BASELINE=${BASELINE:-}
EXTRA_ARGS=${EXTRA_ARGS:-}
DRY_RUN=${DRY_RUN:-0}

die() { echo "run_speedrun: error: $*" >&2; exit 2; }

[[ $RECIPE == modded-2026-07-17 || $RECIPE == modded-2025-10-31 || $RECIPE == llmc-gpt2-124m ]] \
  || die "RECIPE=$RECIPE: use modded-2026-07-17, modded-2025-10-31 or llmc-gpt2-124m"
recipe_args=()
for setting in "${RECIPE_SETTINGS[@]}"; do
  var=${setting%%:*}
  if [[ -n ${!var:-} ]]; then recipe_args+=("${setting#*:}" "${!var}"); fi
done
for var in RUNS SEED NPROC CHECKPOINT_EVERY BATCH_SIZE SEQ_LEN TOTAL_BATCH_TOKENS STEPS VAL_TOKENS VAL_EVERY \
           WARMUP_STEPS; do
  [[ -z ${!var:-} || ${!var} =~ ^[0-9]+$ ]] || die "$var=${!var} is not a non-negative integer"
done
(( RUNS >= 1 && NPROC >= 1 )) || die "RUNS and NPROC must be at least 1"
[[ $NAME =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || die "NAME=$NAME: use letters, digits, '_', '.', '-'"
# The batch arithmetic, where every number is given here (otherwise the trainer checks it at start).
if [[ -n ${BATCH_SIZE:-} && -n ${SEQ_LEN:-} ]]; then
  tokens_per_micro_step=$(( BATCH_SIZE * SEQ_LEN * NPROC ))
  (( tokens_per_micro_step > 0 )) || die "BATCH_SIZE and SEQ_LEN must be at least 1"
  for var in TOTAL_BATCH_TOKENS VAL_TOKENS; do
    if [[ -n ${!var:-} ]] && (( ${!var} % tokens_per_micro_step != 0 )); then
      die "$var=${!var} is not a multiple of BATCH_SIZE*SEQ_LEN*NPROC=$tokens_per_micro_step"
    fi
  done
fi

run_dir="$RUNS_DIR/$NAME"
if [[ $DRY_RUN != 1 ]]; then
  [[ -x $TRAINER ]] || die "$TRAINER not found or not executable (build it with make)"
  compgen -G "$TRAIN_DATA" >/dev/null || die "no train shards match $TRAIN_DATA (see data/fineweb_download.py)"
  compgen -G "$VAL_DATA" >/dev/null || die "no val shards match $VAL_DATA (see data/fineweb_download.py)"
  existing=$(compgen -G "$run_dir/run*.log" || true)
  [[ -z $existing ]] || die "$run_dir already holds run logs; choose another NAME"
  mkdir -p "$run_dir"
fi

echo "run_speedrun: $NAME: $RUNS run(s), $NPROC processes, recipe $RECIPE${recipe_args[*]:+ with ${recipe_args[*]}}" \
     "-> $run_dir/" >&2

for (( k = 1; k <= RUNS; k++ )); do
  seed=$(( SEED + k - 1 ))
  log="$run_dir/run$k.log"
  # Word splitting of LAUNCHER, MPIRUN_ARGS and EXTRA_ARGS is intended: they hold several words.
  # shellcheck disable=SC2206
  command=($LAUNCHER $MPIRUN_ARGS "$TRAINER" --recipe "$RECIPE"
           --train-data "$TRAIN_DATA" --val-data "$VAL_DATA" "${recipe_args[@]}"
           --checkpoint-every "$CHECKPOINT_EVERY" --output-dir "$run_dir/run$k" --seed "$seed" --overlap "$OVERLAP"
           $EXTRA_ARGS)
  if [[ $DRY_RUN == 1 ]]; then
    printf '%q ' "${command[@]}"; printf '> %q\n' "$log"
    continue
  fi
  {
    echo "# run_speedrun.sh $NAME run $k/$RUNS seed $seed"
    echo "# date: $(date -u +%Y-%m-%dT%H:%M:%SZ) host: $(hostname)"
    echo "# commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
    if command -v nvidia-smi >/dev/null; then
      nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader | sed 's/^/# gpu: /'
    fi
    echo "# command: $(printf '%q ' "${command[@]}")"
  } > "$log"
  echo "run_speedrun: run $k/$RUNS (seed $seed) -> $log" >&2
  "${command[@]}" 2>&1 | tee -a "$log"
done

if [[ $DRY_RUN != 1 && $RUNS -ge 2 ]]; then
  compare=(python3 scripts/compare_runs.py "$run_dir")
  if [[ -n $BASELINE ]]; then
    # shellcheck disable=SC2206
    compare+=(--baseline $BASELINE)
  fi
  "${compare[@]}" | tee "$run_dir/compare_runs.md"
fi
