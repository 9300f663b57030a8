#!/usr/bin/env bash
# The classic llm.c GPT-2 124M run on one node of 8 GPUs (the trainer's --recipe llmc-gpt2-124m: 10B
# FineWeb tokens in 19,073 steps of 524,288 tokens, 64 x 1024 per GPU, AdamW lr 6e-4, 700 warmup steps,
# cosine decay to 0, weight decay 0.1, grad clip 1.0, validation every 250 steps on 10,485,760 val
# tokens) with a checkpoint every 5,000 steps (and the trainer's final one). One run, logged to
# runs/<NAME>/run1.log.
#
# It is run_speedrun.sh with RECIPE=llmc-gpt2-124m, RUNS=1 and checkpoints on; every override (NAME,
# NPROC, LAUNCHER, DATA_DIR, STEPS, LR, ..., DRY_RUN=1) is documented at the top of
# scripts/run_speedrun.sh.
set -euo pipefail
export NAME=${NAME:-gpt2_124m_$(date -u +%Y%m%d_%H%M%S)}
export RECIPE=llmc-gpt2-124m
export RUNS=1
export CHECKPOINT_EVERY=${CHECKPOINT_EVERY:-5000}
exec "$(dirname "${BASH_SOURCE[0]}")/run_speedrun.sh"
