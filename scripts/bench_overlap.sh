#!/usr/bin/env bash
# Step time and exposed communication of train_gpt2 for --overlap none | rs | full, side by side in one
# run, from the per-step figures the trainer logs with --trace (comm, exposed_comm, overlapped).
# Where GPUs are lent: mpirun over all of them with ./train_gpt2 (with one GPU, several NCCL ranks
# cannot share it, so it traces one rank and feeds the per-layer backward times to
# scripts/overlap_model.py, the 8xH100 prediction). Without a GPU: emulated ranks (./train_gpt2_emu),
# which prove the scheduling, not the speed.
#
# usage: scripts/bench_overlap.sh [--ranks N] [--steps S] [--model M] [-b B] [-t T] [--binary PATH] [--keep DIR]
set -euo pipefail

cd "$(dirname "$0")/.."
ranks="" steps="" model="" batch="" seq_len="" binary="" keep=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    -b) batch="$2"; shift 2 ;;
    -t) seq_len="$2"; shift 2 ;;
    --binary) binary="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "bench_overlap.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

gpus=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)
fi
if [[ -z "$binary" ]]; then
  if [[ $gpus -gt 0 && -x ./train_gpt2 ]]; then binary=./train_gpt2; else binary=./train_gpt2_emu; fi
fi
if [[ ! -x "$binary" ]]; then
  echo "bench_overlap.sh: $binary not found: build first (make)" >&2
  exit 1
fi
on_gpu=0
[[ "$(basename "$binary")" == train_gpt2 ]] && on_gpu=1
if [[ $on_gpu == 1 ]]; then
  ranks=${ranks:-$gpus} steps=${steps:-12} model=${model:-d12} batch=${batch:-16} seq_len=${seq_len:-1024}
else
  ranks=${ranks:-2} steps=${steps:-6} model=${model:-small} batch=${batch:-4} seq_len=${seq_len:-64}
fi

work=$(mktemp -d /tmp/bench_overlap.XXXXXX)
cleanup() { if [[ -n "$keep" ]]; then mkdir -p "$keep" && cp -r "$work"/. "$keep"/; fi; rm -rf "$work"; }
trap cleanup EXIT

# Random tokens < 100 (valid for every preset and dN vocabulary): enough for every step of every rank.
python3 - "$work/train_000001.bin" $(( (steps + 2) * ranks * batch * seq_len + 1 )) <<'EOF'
import sys
import numpy as np
path, count = sys.argv[1], int(sys.argv[2])
header = np.zeros(256, dtype=np.int32)
header[:3] = (20240520, 1, count)
with open(path, "wb") as f:
    f.write(header.tobytes())
    f.write(np.random.default_rng(0).integers(0, 100, count).astype(np.uint16).tobytes())
EOF

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
launch=()
if [[ $ranks -gt 1 ]]; then launch=(mpirun -np "$ranks" --oversubscribe --bind-to none); fi
echo "# bench_overlap: $binary, $ranks rank(s), model $model, B=$batch T=$seq_len, $steps steps (step 1 not counted)"
for mode in none rs full; do
  "${launch[@]}" "$binary" --train-data "$work/train_*.bin" --model "$model" -b "$batch" -t "$seq_len" \
    --steps "$steps" --lr 1e-4 --lr-schedule constant --grad-clip 0 --overlap "$mode" \
    --trace "$work/trace_$mode" > "$work/log_$mode.txt" 2> "$work/err_$mode.txt" || {
      echo "bench_overlap.sh: the $mode run failed:" >&2; tail -20 "$work/err_$mode.txt" >&2; exit 1; }
done

python3 - "$work" <<'EOF'
import re, sys
work = sys.argv[1]
line_re = re.compile(r"^step:(\d+)/\d+ .*train_time:(\d+)ms .* comm:([\d.]+)ms exposed_comm:([\d.]+)ms overlapped:([\d.]+)%")
print(f"{'mode':<6} {'step_ms':>9} {'comm_ms':>9} {'exposed_ms':>11} {'overlapped':>11}")
for mode in ("none", "rs", "full"):
    rows = [m.groups() for m in map(line_re.match, open(f"{work}/log_{mode}.txt")) if m]
    times = {int(s): float(t) for s, t, *_ in rows}
    kept = [r for r in rows if int(r[0]) > 1]
    if not kept:
        sys.exit(f"bench_overlap.sh: no step lines with comm figures in the {mode} log")
    step_ms = [times[int(r[0])] - times[int(r[0]) - 1] for r in kept]
    mean = lambda values: sum(values) / len(values)
    print(f"{mode:<6} {mean(step_ms):>9.2f} {mean([float(r[2]) for r in kept]):>9.2f} "
          f"{mean([float(r[3]) for r in kept]):>11.2f} {mean([float(r[4]) for r in kept]):>10.1f}%")
EOF

if [[ $on_gpu == 1 && $ranks == 1 ]]; then
  echo "# one GPU: no collectives to measure; the 8xH100 model from this GPU's per-layer backward times:"
  python3 scripts/overlap_model.py --trace "$work/trace_full/trace_rank0.json" --model "$model"
elif [[ $on_gpu == 0 ]]; then
  echo "# emulated ranks: times are CPU emulation, not GPU speed. The 8xH100 model (synthetic d12 timings):"
  python3 scripts/overlap_model.py --synthetic d12
fi
