#!/usr/bin/env bash
# The official speedrun configuration on one node of 8 GPUs: GPT-2 124M (d12) trained to a FineWeb
# val loss below 3.28, RUNS times with distinct seeds, logs in runs/<NAME>/run<k>.log where
# scripts/compare_runs.py reads them; with RUNS >= 2 it ends with compare_runs' table.
#
# Configuration (every value can be overridden from the environment, e.g. `STEPS=9000 NAME=x ...`):
#   model d12, sequence T=1024, 64 sequences per GPU x 8 GPUs = 524,288 tokens per step (no grad
#   accumulation), AdamW lr 6e-4, 700 warmup steps, cosine decay to 0, weight decay 0.1, grad clip
#   1.0, 19,073 steps (10B tokens, one pass over FineWeb 10B), validation every 250 steps and at
#   the end on the first 10,485,760 val tokens (= 20 x 524,288, llm.c's and modded-nanogpt's
#   measure). This is llm.c's GPT-2 124M schedule, which is known to reach 3.28 at 10B tokens;
#   a faster schedule becomes the official one only once recorded runs show it reaches the target.
#
# The trainer options this script uses:
#   --train-data GLOB --val-data GLOB --model d12 --batch-size B --seq-len T --total-batch-tokens N
#   --steps N --lr X --warmup-steps N --lr-schedule cosine|linear --final-lr-frac F --weight-decay X
#   --grad-clip X --val-every N --val-tokens N --checkpoint-every N --output-dir DIR --seed N
#   --overlap none|rs|full
#
# Other settings: NAME (default speedrun_<UTC time>), RUNS (default 1), SEED (first seed, default
# 1; run k uses SEED+k-1), NPROC (default 8), LAUNCHER (default "mpirun -np $NPROC"; "" runs one
# process directly; the multinode/ scripts set it), MPIRUN_ARGS (extra mpirun options), TRAINER
# (default ./train_gpt2), RUNS_DIR (default runs), DATA_DIR (default data/cache/fineweb10B), BASELINE
# (runs or a records/ directory to compare with at the end), EXTRA_ARGS (appended to the trainer's
# options), DRY_RUN=1 (print the commands, run nothing). Paths are relative to the repository root.
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
MODEL=${MODEL:-d12}
BATCH_SIZE=${BATCH_SIZE:-64}
SEQ_LEN=${SEQ_LEN:-1024}
TOTAL_BATCH_TOKENS=${TOTAL_BATCH_TOKENS:-524288}
STEPS=${STEPS:-19073}
LR=${LR:-6e-4}
WARMUP_STEPS=${WARMUP_STEPS:-700}
LR_SCHEDULE=${LR_SCHEDULE:-cosine}
FINAL_LR_FRAC=${FINAL_LR_FRAC:-0.0}
WEIGHT_DECAY=${WEIGHT_DECAY:-0.1}
GRAD_CLIP=${GRAD_CLIP:-1.0}
VAL_EVERY=${VAL_EVERY:-250}
VAL_TOKENS=${VAL_TOKENS:-10485760}
CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-0}
OVERLAP=${OVERLAP:-full}
BASELINE=${BASELINE:-}
EXTRA_ARGS=${EXTRA_ARGS:-}
DRY_RUN=${DRY_RUN:-0}

die() { echo "run_speedrun: error: $*" >&2; exit 2; }

for var in RUNS SEED NPROC BATCH_SIZE SEQ_LEN TOTAL_BATCH_TOKENS STEPS VAL_TOKENS VAL_EVERY \
           WARMUP_STEPS CHECKPOINT_EVERY; do
  [[ ${!var} =~ ^[0-9]+$ ]] || die "$var=${!var} is not a non-negative integer"
done
(( RUNS >= 1 && NPROC >= 1 && BATCH_SIZE >= 1 && SEQ_LEN >= 1 && STEPS >= 1 )) \
  || die "RUNS, NPROC, BATCH_SIZE, SEQ_LEN and STEPS must be at least 1"
[[ $NAME =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]] || die "NAME=$NAME: use letters, digits, '_', '.', '-'"
tokens_per_micro_step=$(( BATCH_SIZE * SEQ_LEN * NPROC ))
(( TOTAL_BATCH_TOKENS % tokens_per_micro_step == 0 )) \
  || die "TOTAL_BATCH_TOKENS=$TOTAL_BATCH_TOKENS is not a multiple of BATCH_SIZE*SEQ_LEN*NPROC=$tokens_per_micro_step"
(( VAL_TOKENS % tokens_per_micro_step == 0 )) \
  || die "VAL_TOKENS=$VAL_TOKENS is not a multiple of BATCH_SIZE*SEQ_LEN*NPROC=$tokens_per_micro_step"
grad_accum=$(( TOTAL_BATCH_TOKENS / tokens_per_micro_step ))

run_dir="$RUNS_DIR/$NAME"
if [[ $DRY_RUN != 1 ]]; then
  [[ -x $TRAINER ]] || die "$TRAINER not found or not executable (build it with make)"
  compgen -G "$TRAIN_DATA" >/dev/null || die "no train shards match $TRAIN_DATA (see data/fineweb_download.py)"
  compgen -G "$VAL_DATA" >/dev/null || die "no val shards match $VAL_DATA (see data/fineweb_download.py)"
  existing=$(compgen -G "$run_dir/run*.log" || true)
  [[ -z $existing ]] || die "$run_dir already holds run logs; choose another NAME"
  mkdir -p "$run_dir"
fi

echo "run_speedrun: $NAME: $RUNS run(s), $NPROC processes, $TOTAL_BATCH_TOKENS tokens/step" \
     "(grad accumulation $grad_accum), $STEPS steps -> $run_dir/" >&2

for (( k = 1; k <= RUNS; k++ )); do
  seed=$(( SEED + k - 1 ))
  log="$run_dir/run$k.log"
  # Word splitting of LAUNCHER, MPIRUN_ARGS and EXTRA_ARGS is intended: they hold several words.
  # shellcheck disable=SC2206
  command=($LAUNCHER $MPIRUN_ARGS "$TRAINER"
           --train-data "$TRAIN_DATA" --val-data "$VAL_DATA" --model "$MODEL"
           --batch-size "$BATCH_SIZE" --seq-len "$SEQ_LEN" --total-batch-tokens "$TOTAL_BATCH_TOKENS"
           --steps "$STEPS" --lr "$LR" --warmup-steps "$WARMUP_STEPS" --lr-schedule "$LR_SCHEDULE"
           --final-lr-frac "$FINAL_LR_FRAC" --weight-decay "$WEIGHT_DECAY" --grad-clip "$GRAD_CLIP"
           --val-every "$VAL_EVERY" --val-tokens "$VAL_TOKENS" --checkpoint-every "$CHECKPOINT_EVERY"
           --output-dir "$run_dir/run$k" --seed "$seed" --overlap "$OVERLAP" $EXTRA_ARGS)
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
