#!/usr/bin/env python3
"""Which recipe learns fastest per token? The 2026-07-17 record's (modded89: its model at the modded89-small
preset, its optimizer and lr, window, loss-weight and batch schedules), the 2025-10-31 record's (speedrun: a
small speedrun-shaped model, NorMuon + Adam, its lr and window schedules) and llm.c's (gpt2: a small GPT-2, AdamW,
warmup + cosine), with about the same tokens per step and the same token budget, on KJV, over several seeds
(docs/recipe_comparison.md).

Tokenizes the text with tokenize_gpt2 (the first --val-tokens tokens are the held-out val shard), writes an
initialised speedrun model file of the chosen width and depth for each seed (the 2025-10-31 presets are the
record and a V=96 test model; this file is how a GPT-2-vocabulary toy gets in), runs train_gpt2 once per recipe
and seed, and prints a Markdown table of the mean val loss against tokens seen and each recipe's tokens to reach
a common loss.
"""
import argparse
import glob
import math
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

SPEEDRUN_MAGIC, SPEEDRUN_VERSION, SPEEDRUN_ARCH_2025_10_31 = 20251031, 1, 1
GPT2_VOCAB, PADDED_VOCAB = 50257, 50304
VAL_LINE = re.compile(r"step:(\d+)/(\d+) val_loss:([0-9.]+|nan|inf)")
PARAMS_LINE = re.compile(r"# model: .* parameters:(\d+)")
BATCH_LINE = re.compile(r"# batch: step (\d+) \(schedule step \d+\) T=(\d+) tokens per sequence")
RECIPES = ("modded89", "speedrun", "gpt2")
MODDED89_PRESET, MODDED89_MAX_T, MODDED89_C = "modded89-small", 768, 64  # llmc/model/modded89/modded89_config.cpp


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


def modded89_block_params(C):
    """The banks of the 2026-07-17 model's 11 layers: Q/K and V/O (2C^2 each) in the 10 with attention, the MLP's fc
    and proj (4C^2 each) in all (SPEEDRUN89.md section 1, without the padding matrices)."""
    return 10 * 4 * C * C + 11 * 8 * C * C


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
    """Runs one training, its output into log_path; returns (val points [(step, loss)], parameters, log text)."""
    print(f"# {name}: {' '.join(command)}", file=sys.stderr, flush=True)
    start = time.time()
    with open(log_path, "w") as log:
        status = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT).returncode
    text = open(log_path).read()
    if status != 0:
        sys.exit(f"bench_recipes: {name} failed (exit {status}); last lines of {log_path}:\n" +
                 "\n".join(text.splitlines()[-10:]))
    points = [(int(m.group(1)), float(m.group(3))) for m in VAL_LINE.finditer(text)]
    if not points:
        sys.exit(f"bench_recipes: {name} printed no val_loss lines (see {log_path})")
    params = PARAMS_LINE.search(text)
    print(f"# {name}: {time.time() - start:.0f} s", file=sys.stderr, flush=True)
    return points, int(params.group(1)) if params else None, text


def cumulative_tokens(log_text, steps, tokens_per_step):
    """tokens[s]: the tokens seen after s steps. A run with a batch schedule prints a "# batch:" line where the
    sequence length changes (one packed sequence per step here); the others train tokens_per_step every step."""
    changes = {int(m.group(1)): int(m.group(2)) for m in BATCH_LINE.finditer(log_text)}
    tokens, per_step = [0], tokens_per_step
    for step in range(1, steps + 1):
        per_step = changes.get(step, per_step)
        tokens.append(tokens[-1] + per_step)
    return tokens


def tokens_to_reach(points, tokens, target):
    """Tokens at which the val curve [(step, loss)] first reaches `target`, linearly interpolated in tokens
    between evaluations (None if it never does)."""
    previous = None
    for step, loss in points:
        if loss <= target:
            if previous is None or previous[1] == loss:
                return float(tokens[step])
            s0, l0 = previous
            return tokens[s0] + (l0 - target) / (l0 - loss) * (tokens[step] - tokens[s0])
        previous = (step, loss)
    return None


def mean_curve(runs):
    """The seeds' mean val loss at each evaluation step all of them have."""
    steps = sorted(set.intersection(*(set(step for step, _ in run["points"]) for run in runs)))
    return [(step, statistics.fmean(dict(run["points"])[step] for run in runs)) for step in steps]


def spread(values):
    """'mean' for one value, 'mean ± sample std' for several."""
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f}"


def markdown_report(results):
    """results[recipe] = [{"seed", "points", "tokens"}, ...] in the order run: the table of mean val loss against
    tokens, each recipe's final val loss over the seeds, and the tokens each needs to reach the common loss (the
    worst recipe's mean final val loss), from the mean curve and per seed."""
    recipes = list(results)
    curves = {r: mean_curve(results[r]) for r in recipes}
    tokens = {r: results[r][0]["tokens"] for r in recipes}  # the same on every seed (one data order)
    header = "| step | " + " | ".join(f"{r} tokens | {r} val loss" for r in recipes) + " |"
    lines = [header, "|" + "---:|" * (1 + 2 * len(recipes))]
    steps = sorted(set(step for r in recipes for step, _ in curves[r]))
    for step in steps:
        cells = []
        for r in recipes:
            loss = dict(curves[r]).get(step)
            cells += [f"{tokens[r][step]:,}", "" if loss is None else f"{loss:.4f}"]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    seeds = [run["seed"] for run in results[recipes[0]]]
    lines += ["", f"Seeds {', '.join(map(str, seeds))} (mean ± sample std over them):", ""]
    common = max(curves[r][-1][1] for r in recipes)
    lines += ["| recipe | final tokens | final val loss | tokens to reach the common loss (mean curve) | per seed |",
              "|---|---:|---:|---:|---|"]
    reach = {}
    for r in recipes:
        finals = [run["points"][-1][1] for run in results[r]]
        reach[r] = tokens_to_reach(curves[r], tokens[r], common)
        per_seed = [tokens_to_reach(run["points"], tokens[r], common) for run in results[r]]
        per_seed_text = ", ".join("never" if t is None else f"{t:,.0f}" for t in per_seed)
        lines.append(f"| {r} | {tokens[r][curves[r][-1][0]]:,} | {spread(finals)} | {reach[r]:,.0f} | "
                     f"{per_seed_text} |")
    base = recipes[0]
    ratios = ", ".join(f"{r} {reach[r] / reach[base]:.2f}x" for r in recipes[1:])
    lines += ["", f"Common loss (the worst mean final val loss): {common:.4f}. Tokens to reach it, relative to "
              f"{base}: {ratios}."]
    if len(recipes) > 1 and len(seeds) > 1:
        from scipy import stats  # only for several seeds
        for r in recipes[1:]:
            test = stats.ttest_ind([run["points"][-1][1] for run in results[base]],
                                   [run["points"][-1][1] for run in results[r]], equal_var=False)
            lines.append(f"Final val loss, {base} against {r}: Welch's t = {test.statistic:.2f}, "
                         f"two-sided p = {test.pvalue:.3g}.")
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trainer", default="./train_gpt2_emu", help="train_gpt2 binary (default %(default)s)")
    parser.add_argument("--tokenizer", default="./tokenize_gpt2", help="tokenize_gpt2 binary")
    parser.add_argument("--text", default="../shared/data/text/kjv.txt", help="text to train on")
    parser.add_argument("--work-dir", default="bench_recipes_out", help="shards, model files and logs")
    parser.add_argument("--recipes", default=",".join(RECIPES),
                        help="comma-separated, the first the one the others are compared with (default %(default)s)")
    parser.add_argument("--seeds", default="1337,1338,1339", help="comma-separated initialisation seeds")
    parser.add_argument("--val-tokens", type=int, default=2048, help="held-out tokens (the text's start)")
    parser.add_argument("--seq-len", type=int, default=256, help="T of GPT-2")
    parser.add_argument("--batch", type=int, default=2, help="sequences per step (GPT-2: -b; speedrun: "
                        "one packed sequence of batch * seq-len tokens; modded89: its stages' thirds of "
                        "1.5 x batch * seq-len, the same tokens per step on average)")
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--val-every", type=int, default=8)
    parser.add_argument("--speedrun-blocks", type=int, default=10, help="L of the speedrun model (even, >= 8)")
    parser.add_argument("--speedrun-heads", type=int, default=2)
    parser.add_argument("--speedrun-head-dim", type=int, default=32, help="a multiple of 16")
    parser.add_argument("--window-block", type=int, default=32, help="speedrun attention window unit")
    parser.add_argument("--gpt2-model", default="d2", help="GPT-2 preset dN (L=N, C=64N)")
    parser.add_argument("--gpt2-lr", type=float, default=None, help="AdamW peak lr (default: 6e-4 * 768 / C)")
    parser.add_argument("--gpt2-warmup", type=int, default=None, help="warmup steps (default: steps / 10)")
    return parser.parse_args(argv)


def check_args(args):
    """The recipes and seeds as lists; exits naming the option that is wrong."""
    recipes = [r for r in args.recipes.split(",") if r]
    unknown = [r for r in recipes if r not in RECIPES]
    if not recipes or unknown or len(set(recipes)) != len(recipes):
        sys.exit(f"bench_recipes: --recipes '{args.recipes}': expected distinct names of {', '.join(RECIPES)}")
    try:
        seeds = [int(seed) for seed in args.seeds.split(",")]
    except ValueError:
        sys.exit(f"bench_recipes: --seeds '{args.seeds}' is not a comma-separated list of integers")
    tokens_per_step = args.batch * args.seq_len
    if args.val_tokens % tokens_per_step != 0:
        sys.exit(f"bench_recipes: --val-tokens {args.val_tokens} must be a multiple of batch * seq-len "
                 f"({tokens_per_step})")
    if "modded89" in recipes and (tokens_per_step % 2 != 0 or 3 * tokens_per_step // 2 > MODDED89_MAX_T):
        sys.exit(f"bench_recipes: modded89 trains on sequences of 1.5 x batch * seq-len = 1.5 x {tokens_per_step} "
                 f"tokens in its last stages: batch * seq-len must be even and at most {2 * MODDED89_MAX_T // 3} "
                 f"({MODDED89_PRESET}'s T is {MODDED89_MAX_T})")
    return recipes, seeds


def recipe_command(recipe, args, seed, data):
    """The trainer's command line for one recipe and seed (the speedrun model file is written here)."""
    tokens_per_step = args.batch * args.seq_len
    seeded = data + ["--seed", str(seed)]
    # Every run reads the same fixed windows (KJV is one document: the BOS loaders would cut it to its first
    # 896 or 2,048 tokens): the comparison is of the models, optimizers and schedules, not of the loaders.
    if recipe == "modded89":
        # The record's recipe whole (model, optimizer, schedules, loss sum), at the small preset; its stages take
        # a third, two thirds and all of its last sequence, so 1.5 x the others' tokens per step is the same on
        # average. No untimed warm-up: it changes the clock, not the trajectory.
        longest = 3 * tokens_per_step // 2
        return [args.trainer, "--recipe", "modded-2026-07-17", "--model", MODDED89_PRESET, "-t", str(longest),
                "--total-batch-tokens", str(longest), "--val-seq-len", str(tokens_per_step),
                "--untimed-warmup", "off", "--train-loader", "window"] + seeded
    if recipe == "speedrun":
        model_file = os.path.join(args.work_dir, f"speedrun_model_{seed}.bin")
        write_speedrun_model(model_file, args.speedrun_blocks, args.speedrun_heads, args.speedrun_head_dim,
                             tokens_per_step, args.window_block, seed)
        return [args.trainer, "--model", model_file, "-b", "1", "-t", str(tokens_per_step),
                "--optimizer", "speedrun", "--lr", "1.0", "--lr-schedule", "speedrun",
                "--window-schedule", "speedrun", "--train-loader", "window"] + seeded
    gpt2_C = 64 * int(args.gpt2_model[1:])
    gpt2_lr = args.gpt2_lr if args.gpt2_lr is not None else 6e-4 * 768 / gpt2_C
    warmup = args.gpt2_warmup if args.gpt2_warmup is not None else max(1, args.steps // 10)
    return [args.trainer, "--model", args.gpt2_model, "-b", str(args.batch), "-t", str(args.seq_len),
            "--optimizer", "zero-adamw", "--lr", f"{gpt2_lr:.6g}", "--warmup-steps", str(warmup),
            "--lr-schedule", "cosine", "--final-lr-frac", "0.0", "--weight-decay", "0.1",
            "--grad-clip", "1.0"] + seeded


def main(argv):
    args = parse_args(argv)
    recipes, seeds = check_args(args)
    if not re.fullmatch(r"d(\d+)", args.gpt2_model):
        sys.exit(f"bench_recipes: --gpt2-model '{args.gpt2_model}' is not a dN preset")
    os.makedirs(args.work_dir, exist_ok=True)
    for stale in glob.glob(os.path.join(args.work_dir, "kjv_*.bin")):
        os.remove(stale)  # tokenize_gpt2 refuses to mix with an earlier run's shards
    subprocess.run([args.tokenizer, "--output-dir", args.work_dir, "--name", "kjv", "--val-tokens",
                    str(args.val_tokens + 1), args.text], check=True, stdout=subprocess.DEVNULL)
    data = ["--train-data", os.path.join(args.work_dir, "kjv_train_*.bin"),
            "--val-data", os.path.join(args.work_dir, "kjv_val_*.bin"), "--val-tokens", str(args.val_tokens),
            "--val-every", str(args.val_every), "--steps", str(args.steps)]
    results, params = {}, {}
    for recipe in recipes:
        results[recipe] = []
        for seed in seeds:
            name = f"{recipe}_{seed}"
            points, params[recipe], text = run_trainer(name, recipe_command(recipe, args, seed, data),
                                                       os.path.join(args.work_dir, name + ".log"))
            tokens = cumulative_tokens(text, args.steps, args.batch * args.seq_len)
            results[recipe].append({"seed": seed, "points": points, "tokens": tokens})
    C = args.speedrun_heads * args.speedrun_head_dim
    gpt2_L = int(args.gpt2_model[1:])
    print("parameters in all: " + ", ".join(f"{r} {params[r]:,}" for r in recipes if params[r]) +
          f"; block parameters: modded89 {modded89_block_params(MODDED89_C):,} (L=11 C={MODDED89_C}), "
          f"speedrun {speedrun_block_params(args.speedrun_blocks, C, args.speedrun_heads):,} "
          f"(L={args.speedrun_blocks} C={C}), GPT-2 {gpt2_block_params(gpt2_L, 64 * gpt2_L):,} "
          f"(L={gpt2_L} C={64 * gpt2_L})")
    print(markdown_report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
