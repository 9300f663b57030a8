#!/usr/bin/env python3
"""Does the speedrun recipe learn faster per token than llm.c's? A small speedrun-shaped model (NorMuon +
Adam, the speedrun lr and window schedules) against a small GPT-2 (AdamW, warmup + cosine) with about the
same block parameters, the same tokens per step and token budget, on KJV (docs/recipe_comparison.md).

Tokenizes the text with tokenize_gpt2 (the first --val-tokens tokens are the held-out val shard), writes
an initialised speedrun model file of the chosen width and depth (the trainer's presets are the record
and a V=96 test model; this file is how a GPT-2-vocabulary toy gets in), runs train_gpt2 twice and
prints a Markdown table of val loss against tokens seen and the token ratio at a common loss.
"""
import argparse
import glob
import math
import os
import re
import subprocess
import sys
import time

import numpy as np

SPEEDRUN_MAGIC, SPEEDRUN_VERSION, SPEEDRUN_ARCH_2025_10_31 = 20251031, 1, 1
GPT2_VOCAB, PADDED_VOCAB = 50257, 50304
VAL_LINE = re.compile(r"step:(\d+)/(\d+) val_loss:([0-9.]+|nan|inf)")
PARAMS_LINE = re.compile(r"# model: .* parameters:(\d+)")


def speedrun_structure(L):
    """(attention, mlp) per block, as llmc/model/modded44/speedrun_config.cpp: block 0 is empty, block 7L/12 has no
    attention."""
    attention_free = 7 * L // 12
    return [(False, False)] + [(i != attention_free, True) for i in range(1, L)]


def speedrun_block_params(L, C, H):
    """Parameters of the blocks: W_q,k,v,o and the attention gate, fc and proj."""
    total = 0
    for attention, mlp in speedrun_structure(L):
        total += (4 * C * C + H * 12) if attention else 0
        total += 8 * C * C if mlp else 0
    return total


def gpt2_block_params(L, C):
    """Per layer: two layer norms (2C each), qkv (3C^2 + 3C), attn proj (C^2 + C), fc (4C^2 + 4C), fc proj
    (4C^2 + C)."""
    return L * (12 * C * C + 13 * C)


def write_speedrun_model(path, L, H, D, T, window_block, seed):
    """An fp32 speedrun model file (docs/speedrun_model.md "Model file") initialised with the distributions
    of llmc/model/modded44/speedrun_init.cpp (numpy's generator, so not the same draws): embed and the three value
    embeddings N(0, 1) rounded to bf16, W_q,k,v and fc U(-a, a) with a = sqrt(3) / (2 sqrt(C)), W_o, proj,
    the gates and the head 0, the scalars at their initial values."""
    C, V = H * D, PADDED_VOCAB
    rng = np.random.default_rng(seed)

    def bf16_normal(shape):
        bits = rng.standard_normal(shape, dtype=np.float32).view(np.uint32)
        return ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).view(np.float32)

    bound = math.sqrt(3.0) * 0.5 / math.sqrt(C)
    tensors = [bf16_normal((V, C)) for _ in range(4)]  # embed, ve0, ve1, ve2
    tensors.append(np.zeros((1, 12), np.float32))  # smear gate
    for attention, mlp in speedrun_structure(L)[1:]:
        if attention:
            qkvo = np.zeros((4 * C, C), np.float32)
            qkvo[:3 * C] = rng.uniform(-bound, bound, (3 * C, C))
            tensors += [qkvo, np.zeros((H, 12), np.float32)]
        if mlp:
            tensors += [rng.uniform(-bound, bound, (C, 4 * C)).astype(np.float32), np.zeros((C, 4 * C), np.float32)]
    tensors.append(np.zeros((V, C), np.float32))  # head
    count = (5 * L + 2 + 7) // 8 * 8
    scalars = np.ones(count, np.float32)
    scalars[:L] = -1.5  # skip weights
    for i in range(L):
        scalars[L + 2 * i:L + 2 * i + 2] = (1.0, 0.0)  # block lambdas (x, x0)
        scalars[3 * L + 2 * i:3 * L + 2 * i + 2] = (0.5, 0.5)  # sa lambdas (v, ve)
    scalars[5 * L], scalars[5 * L + 1] = 0.0, 0.5  # smear, backout
    tensors.append(scalars)
    header = np.zeros(256, np.int32)
    header[:12] = [SPEEDRUN_MAGIC, SPEEDRUN_VERSION, SPEEDRUN_ARCH_2025_10_31, 0, V, L, H, D, T, window_block,
                   count, len(tensors)]
    with open(path, "wb") as out:
        out.write(header.tobytes())
        for tensor in tensors:
            out.write(np.ascontiguousarray(tensor, np.float32).tobytes())


def run_trainer(name, command, log_path):
    """Runs one training, its output into log_path; returns (val points [(step, loss)], parameters)."""
    print(f"# {name}: {' '.join(command)}", file=sys.stderr, flush=True)
    start = time.time()
    with open(log_path, "w") as log:
        status = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode
    text = open(log_path).read()
    if status != 0:
        sys.exit(f"bench_recipes: {name} failed (exit {status}); last lines of {log_path}:\n" +
                 "\n".join(text.splitlines()[-10:]))
    points = [(int(m.group(1)), float(m.group(3))) for m in VAL_LINE.finditer(text)]
    params = PARAMS_LINE.search(text)
    print(f"# {name}: {time.time() - start:.0f} s", file=sys.stderr, flush=True)
    return points, int(params.group(1)) if params else None


def tokens_to_reach(points, tokens_per_step, target):
    """Tokens at which the val curve first reaches `target`, linearly interpolated between evaluations
    (None if it never does)."""
    previous = None
    for step, loss in points:
        if loss <= target:
            if previous is None or previous[1] == loss:
                return step * tokens_per_step
            s0, l0 = previous
            return (s0 + (l0 - target) / (l0 - loss) * (step - s0)) * tokens_per_step
        previous = (step, loss)
    return None


def markdown_report(tokens_per_step, speedrun, gpt2, block_params):
    """The table of val loss against tokens and the tokens each run needs to reach the common loss."""
    lines = ["| tokens | speedrun val loss | GPT-2 val loss |", "|---:|---:|---:|"]
    by_step = {}
    for column, points in ((0, speedrun), (1, gpt2)):
        for step, loss in points:
            by_step.setdefault(step, [None, None])[column] = loss
    for step in sorted(by_step):
        cells = ["" if v is None else f"{v:.4f}" for v in by_step[step]]
        lines.append(f"| {step * tokens_per_step:,} | {cells[0]} | {cells[1]} |")
    common = max(speedrun[-1][1], gpt2[-1][1])
    reach_s = tokens_to_reach(speedrun, tokens_per_step, common)
    reach_g = tokens_to_reach(gpt2, tokens_per_step, common)
    lines.append("")
    lines.append(f"Block parameters: speedrun {block_params[0]:,}, GPT-2 {block_params[1]:,} "
                 f"(ratio {block_params[0] / block_params[1]:.2f}).")
    lines.append(f"Common loss (the worse final val loss): {common:.4f}. Tokens to reach it: speedrun "
                 f"{reach_s:,.0f}, GPT-2 {reach_g:,.0f}; GPT-2 / speedrun = {reach_g / reach_s:.2f}.")
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trainer", default="./train_gpt2_emu", help="train_gpt2 binary (default %(default)s)")
    parser.add_argument("--tokenizer", default="./tokenize_gpt2", help="tokenize_gpt2 binary")
    parser.add_argument("--text", default="../shared/data/text/kjv.txt", help="text to train on")
    parser.add_argument("--work-dir", default="bench_recipes_out", help="shards, model file and logs")
    parser.add_argument("--val-tokens", type=int, default=2048, help="held-out tokens (the text's start)")
    parser.add_argument("--seq-len", type=int, default=256, help="T of both models")
    parser.add_argument("--batch", type=int, default=2, help="sequences per step (GPT-2: -b; speedrun: "
                        "one packed sequence of batch * seq-len tokens)")
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--val-every", type=int, default=8)
    parser.add_argument("--speedrun-blocks", type=int, default=10, help="L of the speedrun model (even, >= 8)")
    parser.add_argument("--speedrun-heads", type=int, default=2)
    parser.add_argument("--speedrun-head-dim", type=int, default=32, help="a multiple of 16")
    parser.add_argument("--window-block", type=int, default=32, help="speedrun attention window unit")
    parser.add_argument("--gpt2-model", default="d2", help="GPT-2 preset dN (L=N, C=64N)")
    parser.add_argument("--gpt2-lr", type=float, default=None, help="AdamW peak lr (default: 6e-4 * 768 / C)")
    parser.add_argument("--gpt2-warmup", type=int, default=None, help="warmup steps (default: steps / 10)")
    parser.add_argument("--seed", type=int, default=1337)
    return parser.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    os.makedirs(args.work_dir, exist_ok=True)
    tokens_per_step = args.batch * args.seq_len
    if args.val_tokens % tokens_per_step != 0:
        sys.exit(f"bench_recipes: --val-tokens {args.val_tokens} must be a multiple of batch * seq-len "
                 f"({tokens_per_step})")
    match = re.fullmatch(r"d(\d+)", args.gpt2_model)
    if not match:
        sys.exit(f"bench_recipes: --gpt2-model '{args.gpt2_model}' is not a dN preset")
    gpt2_L, gpt2_C = int(match.group(1)), 64 * int(match.group(1))
    gpt2_lr = args.gpt2_lr if args.gpt2_lr is not None else 6e-4 * 768 / gpt2_C
    warmup = args.gpt2_warmup if args.gpt2_warmup is not None else max(1, args.steps // 10)

    for stale in glob.glob(os.path.join(args.work_dir, "kjv_*.bin")):
        os.remove(stale)  # tokenize_gpt2 refuses to mix with an earlier run's shards
    subprocess.run([args.tokenizer, "--output-dir", args.work_dir, "--name", "kjv", "--val-tokens",
                    str(args.val_tokens + 1), args.text], check=True, stdout=subprocess.DEVNULL)
    data = ["--train-data", os.path.join(args.work_dir, "kjv_train_*.bin"),
            "--val-data", os.path.join(args.work_dir, "kjv_val_*.bin"), "--val-tokens", str(args.val_tokens),
            "--val-every", str(args.val_every), "--steps", str(args.steps), "--seed", str(args.seed)]
    model_file = os.path.join(args.work_dir, "speedrun_model.bin")
    write_speedrun_model(model_file, args.speedrun_blocks, args.speedrun_heads, args.speedrun_head_dim,
                         tokens_per_step, args.window_block, args.seed)
    # Both runs read the same fixed windows (--train-loader auto would pick the BOS loader for this model, and
    # the text is one document): the comparison is of the models and optimizers, not of the loaders.
    speedrun_cmd = [args.trainer, "--model", model_file, "-b", "1", "-t", str(tokens_per_step),
                    "--optimizer", "speedrun", "--lr", "1.0", "--lr-schedule", "speedrun",
                    "--window-schedule", "speedrun", "--train-loader", "window"] + data
    gpt2_cmd = [args.trainer, "--model", args.gpt2_model, "-b", str(args.batch), "-t", str(args.seq_len),
                "--optimizer", "zero-adamw", "--lr", f"{gpt2_lr:.6g}", "--warmup-steps", str(warmup),
                "--lr-schedule", "cosine", "--final-lr-frac", "0.0", "--weight-decay", "0.1",
                "--grad-clip", "1.0"] + data
    speedrun, speedrun_params = run_trainer("speedrun", speedrun_cmd, os.path.join(args.work_dir, "speedrun.log"))
    gpt2, gpt2_params = run_trainer("gpt2", gpt2_cmd, os.path.join(args.work_dir, "gpt2.log"))
    if not speedrun or not gpt2:
        sys.exit("bench_recipes: a run printed no val_loss lines (see the logs in " + args.work_dir + ")")
    C = args.speedrun_heads * args.speedrun_head_dim
    block_params = (speedrun_block_params(args.speedrun_blocks, C, args.speedrun_heads),
                    gpt2_block_params(gpt2_L, gpt2_C))
    print(f"speedrun: L={args.speedrun_blocks} H={args.speedrun_heads} D={args.speedrun_head_dim} C={C}, "
          f"{speedrun_params} parameters in all; GPT-2 {args.gpt2_model}: L={gpt2_L} C={gpt2_C}, "
          f"{gpt2_params} in all, lr {gpt2_lr:.3g}, warmup {warmup}")
    print(markdown_report(tokens_per_step, speedrun, gpt2, block_params))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
