#!/usr/bin/env bash
# Training benchmark: ms/step, tokens/s and MFU of GPT-2 d12 at T=1024 for ./train_gpt2 and, in the same
# run on the same GPU, for the PyTorch baseline (scripts/bench_train_torch.py), then the ratio.
# Without a GPU it says so, measures nothing, smoke-runs the emulated trainer on the tiny config, exits 0.
#   scripts/bench_train.sh            (env: B=16 STEPS=30 WARMUP=10 LAYERS=12 TRAINER=./train_gpt2)
set -euo pipefail
cd "$(dirname "$0")/.."

B=${B:-16}
T=1024
STEPS=${STEPS:-30}    # timed steps
WARMUP=${WARMUP:-10}  # untimed steps first (allocation, cuBLASLt heuristics, torch.compile)
LAYERS=${LAYERS:-12}
TRAINER=${TRAINER:-./train_gpt2}
work=$(mktemp -d /tmp/bench_train.XXXXXX)
trap 'rm -rf "$work"' EXIT

# Random GPT-2 tokens: speed does not depend on the text, and nothing has to be downloaded.
python3 - "$work" <<'EOF'
import sys
import numpy as np
rng = np.random.default_rng(0)
for name, vocab, count in (("random", 50257, 4_000_000), ("tiny", 100, 10_000)):  # GPT-2; the tiny preset
    tokens = rng.integers(0, vocab, size=count).astype(np.uint16)
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, tokens.size]
    with open(f"{sys.argv[1]}/{name}_train_000001.bin", "wb") as out:
        out.write(header.tobytes())
        out.write(tokens.tobytes())
EOF

if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "bench_train: no GPU here (nvidia-smi -L failed): nothing measured; speed is measured only on a GPU."
  echo "bench_train: emulated smoke run of the tiny config instead (checks that the trainer runs):"
  ./train_gpt2_emu --model tiny -b 4 -t 16 --steps 3 --train-data "$work/tiny_train_*.bin" | grep '^step:'
  exit 0
fi
if [[ ! -x $TRAINER ]]; then
  echo "bench_train: $TRAINER not found: build it first (make)" >&2
  exit 1
fi

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
echo "bench_train: GPT-2 d$LAYERS, B=$B T=$T, $WARMUP warmup + $STEPS timed steps on: $gpu ($(date -u +%F))"

"$TRAINER" --model "d$LAYERS" -b "$B" -t "$T" --steps $((WARMUP + STEPS)) --lr 6e-4 --weight-decay 0.1 \
  --grad-clip 1.0 --train-data "$work/random_train_*.bin" >"$work/ours.log"  # no -o: no checkpoint to write
python3 scripts/bench_train_torch.py --layers "$LAYERS" -b "$B" -t "$T" --steps "$STEPS" --warmup "$WARMUP" \
  --ceiling >"$work/torch.json"

python3 - "$work/ours.log" "$work/torch.json" "$WARMUP" "$B" "$T" <<'EOF'
import json, re, sys
log, torch_json, warmup, B, T = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
times = {}
params = layers = channels = None
for line in open(log):
    m = re.match(r"step:(\d+)/\d+ train_loss:\S+ train_time:(\d+)ms", line)
    if m:
        times[int(m.group(1))] = float(m.group(2))
    m = re.match(r"# model: L=(\d+) NH=\d+ C=(\d+) .* parameters:(\d+)", line)
    if m:
        layers, channels, params = int(m.group(1)), int(m.group(2)), int(m.group(3))
last, first = max(times), max(warmup, 1)
ours_ms = (times[last] - times[first]) / (last - first)  # steps first+1 .. last
theirs = json.load(open(torch_json))
flops_per_token = 6 * params + 6 * layers * channels * T  # the usual MFU formula, as llmc/train/mfu.cpp
peaks = {"H200": 989.4e12, "H100": 989.4e12, "A100": 312.0e12}  # dense bf16 spec sheets
peak = next((v for k, v in peaks.items() if k in theirs["device"]), None)
ceiling = theirs["ceiling_tflops"] * 1e12
rows = [("train_gpt2", ours_ms), ("pytorch", theirs["ms_per_step"])]
print(f"{'':12s} {'ms/step':>9s} {'tokens/s':>10s} {'MFU(spec)':>10s} {'MFU(measured GEMM)':>19s}")
for name, ms in rows:
    tps = B * T / (ms / 1000)
    spec = f"{100 * flops_per_token * tps / peak:.1f}%" if peak else "n/a"
    print(f"{name:12s} {ms:9.2f} {tps:10.0f} {spec:>10s} {100 * flops_per_token * tps / ceiling:18.1f}%")
print(f"speedup train_gpt2 / pytorch: {theirs['ms_per_step'] / ours_ms:.2f}x   "
      f"(bf16 GEMM ceiling measured: {theirs['ceiling_tflops']:.0f} TFLOP/s; torch {theirs['torch']})")
EOF
