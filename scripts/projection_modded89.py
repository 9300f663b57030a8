"""The 2026-07-17 record's (#89) part of scripts/project_speedrun.py: seconds per step and time to 3.28 on 8xH100
from two bench_step runs of the modded89 model at different tokens per rank and bench_speedrun_collectives' count
of what `full` overlap exposes. A projection, not a measurement (docs/projection.md#the-2026-07-17-recipe).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

# SPEEDRUN89.md section 6: (name, steps, tokens per rank, (short, long) window in 128-token blocks).
STAGES = (("stage 1", 423, 16384, (1, 3)), ("stage 2", 424, 32768, (3, 7)),
          ("stage 3", 423, 49152, (5, 11)), ("extension", 15, 49152, (6, 13)))
BENCH_WINDOWS = (1, 3)       # the model's first windows, which bench_step runs with
LONG_LAYERS, SHORT_LAYERS = 2, 8  # attention layers with the long window (3, 10) and the short one (layer 6 has none)
WINDOW_BLOCK = 128
RECORD_MS_PER_STEP = 57.4    # 73.8 s / 1,285 steps (SPEEDRUN89.md)
RECORD_SECONDS = 73.8

# Report order; GEMM kinds at the GEMM fraction, attention at the attention fraction, the rest memory-bound.
CATEGORIES = ("bf16 GEMMs (banks, MLP backward, gate MLPs, Polar Express)", "FP8 GEMMs (head; MLP forward)",
              "window attention",
              "DC correction (layer 10)", "optimizer kernels (NorMuon, Adam)", "other memory-bound kernels",
              "copies (cudaMemcpyAsync, at HBM bandwidth)")
WINDOW_ATTENTION = re.compile(r"^(?:\w+::)*(?:window_)?(?:forward|delta|dq|dkdv)_kernel\b")
OPTIMIZER = re.compile(r"^\(?(?:adam|normuon|frobenius|polar|muon)")
# bench_step runs one rank of one, which does every rank's optimizer work. The rows the record's 8 ranks split in
# equal shards (the sharded Adam over each bucket's shard; the gradient norm over the rank's shards and owned
# matrices) count an eighth; NorMuon's kernels and Polar Express's GEMMs (the batched ones: the model's GEMMs are
# not batched) the busiest rank's share of them under the owner plan (bench_speedrun_collectives' last line).
RANKS = 8
SHARDED = re.compile(r"^\(?(?:adam_sharded|squared_sum)_kernel\b")
OWNED = re.compile(r"^\(?(?:normuon|frobenius|polar|muon)")
POLAR_GEMM = re.compile(r"\bbatch \d+")


# bench_step's ceilings (the H200's: test/train/bench_step.cu), which its ceiling column is at.
BENCH_BF16_FLOPS, BENCH_FP8_FLOPS, BENCH_BANDWIDTH = 790e12, 1979e12, 4.3e12


@dataclass
class StepRow:
    kind: str   # kernel, gemm, memset, copy
    name: str
    mb_per_call: float
    gflop_per_call: float
    bench_us: float  # per step at bench_step's ceilings (exact: its calls column rounds odd-step rows)


@dataclass
class StepRun:
    tokens: int  # B x T of the run
    rows: List[StepRow]


def parse_step(text: str, source: str) -> StepRun:
    """bench_step's header (B=.. T=..) and its rows: kind, name, calls, MB/call, GFLOP/call, ceiling us, share."""
    head = re.search(r"model (\S+) .*?B=(\d+) T=(\d+)", text)
    if not head or not head.group(1).startswith("modded89"):
        raise SystemExit(f"project_speedrun.py: {source}: not bench_step output of a modded89 model "
                         "(expected a header line 'bench_step (...): model modded89 (...), B=1 T=...')")
    row = re.compile(r"^(kernel|gemm|memset|copy)\s+(.+?)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+%$")
    rows = [StepRow(m.group(1), m.group(2).strip(), float(m.group(4)), float(m.group(5)), float(m.group(6)))
            for m in (row.match(line) for line in text.splitlines()) if m]
    if not rows:
        raise SystemExit(f"project_speedrun.py: {source}: no kernel or GEMM rows")
    return StepRun(int(head.group(2)) * int(head.group(3)), rows)


def category(row: StepRow) -> str:
    if row.kind == "copy":
        return CATEGORIES[6]
    if row.kind == "gemm":
        return CATEGORIES[1] if row.name.startswith("fp8") else CATEGORIES[0]
    if WINDOW_ATTENTION.match(row.name):
        return CATEGORIES[2]
    if row.name.startswith("dc_"):
        return CATEGORIES[3]
    if OPTIMIZER.match(row.name):
        return CATEGORIES[4]
    return CATEGORIES[5]


@dataclass
class Ceilings:
    bf16_flops: float
    fp8_flops: float
    vector_flops: float
    bandwidth: float


def call_seconds(row: StepRow, bandwidth: float, bf16: float, fp8: float, vector: float) -> float:
    """One call: the larger of its bytes and its FLOPs (the FP8 GEMMs at the FP8 peak, the other GEMMs and the
    attention's tensor-core kernels at the bf16 one, the other kernels at the fp32 vector one)."""
    fp8_gemm = row.kind == "gemm" and row.name.startswith("fp8")
    tensor = row.kind == "gemm" or category(row) == CATEGORIES[2]
    peak = fp8 if fp8_gemm else bf16 if tensor else vector
    return max(row.mb_per_call * 1e6 / bandwidth, row.gflop_per_call * 1e9 / peak)


def row_seconds(row: StepRow, c: Ceilings) -> float:
    """The row's per-step time at bench_step's ceilings, rescaled by one call's time here over there (bench_step
    times every non-FP8 row at the bf16 peak); a row too small to show bytes or FLOPs scales with bandwidth."""
    there = call_seconds(row, BENCH_BANDWIDTH, BENCH_BF16_FLOPS, BENCH_FP8_FLOPS, BENCH_BF16_FLOPS)
    here = call_seconds(row, c.bandwidth, c.bf16_flops, c.fp8_flops, c.vector_flops)
    ratio = here / there if there > 0 else BENCH_BANDWIDTH / c.bandwidth
    return row.bench_us * 1e-6 * ratio


def rank_share(row: StepRow, muon_share: float) -> float:
    """The part of a bench_step row the busiest of the record's ranks does (SHARDED, OWNED)."""
    if SHARDED.match(row.name):
        return 1.0 / RANKS
    owned = OWNED.match(row.name) if row.kind == "kernel" else row.kind == "gemm" and POLAR_GEMM.search(row.name)
    return muon_share if owned else 1.0


def category_seconds(run: StepRun, c: Ceilings, muon_share: float) -> Dict[str, float]:
    out = {name: 0.0 for name in CATEGORIES}
    for row in run.rows:
        out[category(row)] += row_seconds(row, c) * rank_share(row, muon_share)
    return out


def attention_parts(run: StepRun, c: Ceilings) -> Dict[str, Tuple[float, float]]:
    """Each attention row's seconds per step here by its bytes and by its FLOPs, apart (its calls from its time at
    bench_step's ceilings): a wider window multiplies the FLOPs, while the bytes (each tensor once) stay per token."""
    parts = {}
    for row in run.rows:
        if category(row) != CATEGORIES[2]:
            continue
        there = call_seconds(row, BENCH_BANDWIDTH, BENCH_BF16_FLOPS, BENCH_FP8_FLOPS, BENCH_BF16_FLOPS)
        calls = row.bench_us * 1e-6 / there if there > 0 else 0.0
        parts[row.name] = (calls * row.mb_per_call * 1e6 / c.bandwidth,
                           calls * row.gflop_per_call * 1e9 / c.bf16_flops)
    return parts


def window_ratio(windows: Tuple[int, int]) -> float:
    """Attention work at these windows over the bench's: (query, key) pairs per layer are about T (W + 1) per
    head whatever the layer (a paired layer has 2T rows, half the heads and a window counted in rows), so the
    sum of W + 1 over the ten attention layers, documents not cutting any window (the upper bound)."""
    def keys(w: Tuple[int, int]) -> int:
        return SHORT_LAYERS * (w[0] * WINDOW_BLOCK + 1) + LONG_LAYERS * (w[1] * WINDOW_BLOCK + 1)
    return keys(windows) / keys(BENCH_WINDOWS)


def stage_seconds(runs: Sequence[StepRun], c: Ceilings, muon_share: float = 1.0) -> List[Dict[str, float]]:
    """Each category per stage: a + b tokens through the two runs (exact for rows that are per token or per step,
    which every row is: the optimizer's and the weights' bytes do not grow with T); attention row by row, the
    larger of its bytes' time (a + b tokens) and its FLOPs' (a + b tokens, times the stage's window ratio)."""
    (t1, s1), (t2, s2) = ((r.tokens, category_seconds(r, c, muon_share)) for r in runs)
    p1, p2 = (attention_parts(r, c) for r in runs)
    def at(first: float, second: float, tokens: int) -> float:
        return first + (second - first) / (t2 - t1) * (tokens - t1)
    out = []
    for _, _, tokens, windows in STAGES:
        stage = {name: at(s1[name], s2[name], tokens) for name in CATEGORIES}
        stage[CATEGORIES[2]] = 0.0
        for row in set(p1) | set(p2):
            (b1, f1), (b2, f2) = p1.get(row, (0.0, 0.0)), p2.get(row, (0.0, 0.0))
            stage[CATEGORIES[2]] += max(at(b1, b2, tokens), at(f1, f2, tokens) * window_ratio(windows))
        out.append(stage)
    return out


@dataclass
class Exposed:
    tail_ms: float     # what `full` overlap exposes at least, mean per step over the run
    all_ms: float      # every collective exposed, mean per step
    muon_share: float  # the busiest rank's part of the NorMuon and Polar Express work


def parse_collectives(text: str, source: str) -> Exposed:
    """bench_speedrun_collectives --model modded89 --world 8: its run, exposed and NorMuon share lines."""
    everything = re.search(r"on the wire per rank, [\d.]+ s at the ceilings \(([\d.]+) ms per step\)", text)
    tail = re.search(r"([\d.]+) ms per step over the run", text)
    share = re.search(r"NorMuon and Polar Express per rank .*\(share ([\d.]+)\)", text)
    if not everything or not tail or not share or "modded89 on 8 ranks" not in text:
        raise SystemExit(f"project_speedrun.py: {source}: no run, exposed and NorMuon share lines of modded89 on 8 "
                         "ranks (expected the output of bench_speedrun_collectives --model modded89 --world 8)")
    return Exposed(float(tail.group(1)), float(everything.group(1)), float(share.group(1)))


def achievable(stage: Dict[str, float], gemm: float, attention: float, memory: float) -> Dict[str, float]:
    fraction = {CATEGORIES[0]: gemm, CATEGORIES[1]: gemm, CATEGORIES[2]: attention}
    return {name: seconds / fraction.get(name, memory) for name, seconds in stage.items()}


def mean_per_step(values: Sequence[float]) -> float:
    steps = [s for _, s, _, _ in STAGES]
    return sum(v * s for v, s in zip(values, steps)) / sum(steps)


def report(runs: Sequence[StepRun], exposed: Exposed, c: Ceilings, gemm: float, attention: float,
           memory: float) -> str:
    if len(runs) != 2 or runs[0].tokens == runs[1].tokens:
        raise SystemExit("project_speedrun.py: --modded89-step needs two bench_step outputs at different T")
    ceiling = stage_seconds(runs, c, exposed.muon_share)
    real = [achievable(s, gemm, attention, memory) for s in ceiling]
    ms = lambda seconds: f"{seconds * 1e3:.2f}"  # noqa: E731
    head = " | ".join(f"{name} ({steps} steps, T = {tokens:,}, windows {w[0]}/{w[1]})"
                      for name, steps, tokens, w in STAGES)
    lines = ["## 2026-07-17 recipe (#89) on 8xH100, per rank and step\n",
             f"Ceilings: {c.bf16_flops / 1e12:.0f} TFLOP/s bf16, {c.fp8_flops / 1e12:.0f} TFLOP/s FP8, "
             f"{c.vector_flops / 1e12:.0f} TFLOP/s fp32 vector, {c.bandwidth / 1e12:.2f} TB/s; achievable: GEMMs "
             f"{gemm:.0%}, attention {attention:.0%}, memory-bound {memory:.0%}. From bench_step rows at "
             f"T = {runs[0].tokens:,} and {runs[1].tokens:,} (each category a + b T; each attention row the larger "
             "of its bytes' a + b T and its FLOPs' times the stage's windows over the bench's 1/3 blocks, documents "
             "not cutting windows), rows summed without "
             "overlap; the optimizer's rows at one rank's part (the sharded Adam and the norm an eighth, NorMuon "
             f"and Polar Express the owner plan's busiest rank, {exposed.muon_share:.4f}); communication from "
             "bench_speedrun_collectives (370 GB/s, 60 us per call).\n",
             f"| component, ms at ceilings | {head} | mean per step | mean achievable |",
             "|---|" + "---:|" * (len(STAGES) + 2)]
    for name in CATEGORIES:
        per_stage = [s[name] for s in ceiling]
        lines.append(f"| {name} | " + " | ".join(ms(v) for v in per_stage) +
                     f" | {ms(mean_per_step(per_stage))} | {ms(mean_per_step([r[name] for r in real]))} |")
    compute = [sum(s.values()) for s in ceiling]
    compute_real = mean_per_step([sum(r.values()) for r in real])
    lines.append("| **compute** | " + " | ".join(f"**{ms(v)}**" for v in compute) +
                 f" | **{ms(mean_per_step(compute))}** | **{ms(compute_real)}** |")
    lines += ["", "| total | ms per step | time to 3.28 (1,285 steps) |", "|---|---:|---:|"]
    steps = sum(s for _, s, _, _ in STAGES)
    totals = (("lower bound: ceilings, `full` overlap (exposed tail)", mean_per_step(compute) * 1e3 + exposed.tail_ms),
              ("achievable fractions, `full` overlap (exposed tail)", compute_real * 1e3 + exposed.tail_ms),
              ("achievable fractions, all comm exposed", compute_real * 1e3 + exposed.all_ms))
    for label, step_ms in totals:
        lines.append(f"| {label} | {step_ms:.2f} | {step_ms * steps / 1e3:.1f} s |")
    lines.append(f"| record, measured (PyTorch, 8xH100) | {RECORD_MS_PER_STEP:.1f} | {RECORD_SECONDS:.1f} s |")
    return "\n".join(lines)
