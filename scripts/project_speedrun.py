#!/usr/bin/env python3
"""Projects seconds per step and time to 3.28 on 8xH100 for the speedrun recipes (modded-nanogpt records
2025-10-31 and 2026-07-17) and for llm.c's GPT-2 124M recipe, from FLOP counts, the project's benchmark rows and
the H100's ceilings. A projection, not a measurement: see docs/projection.md for the method.

usage: project_speedrun.py [--kernels KERNELS.txt --muon MUON.txt [--attention ATTN.txt]]
                           [--modded89-step STEP1.txt --modded89-step STEP2.txt --modded89-collectives COLL.txt]
                           [--gemm-fraction 0.7 ...]
  KERNELS.txt: output of `build/bench_speedrun_kernels_emu --dry-run`
  MUON.txt:    output of `build/bench_muon_owners --world 8`
  ATTN.txt:    output of `build/bench_window_attention_emu --windows 128,384,640,768,896,1408,1664`
  STEP*.txt:   output of `build/bench_step_emu --model modded89 -b 1 -t T --vocab DIR` at two T
  COLL.txt:    output of `build/bench_speedrun_collectives --model modded89 --world 8`
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Sequence, Tuple

import projection_modded89

# The record's recipe (docs/recipes.md: the model, the windows, the steps).
C = 768
HEADS = 6
HEAD_DIM = 128
VOCAB = 50304
RANKS = 8
TOKENS_PER_RANK = 32768
ATTENTION_BLOCKS = (1, 2, 3, 4, 5, 6, 8, 9, 10, 11)  # block 0 empty, block 7 MLP only
MLP_BLOCKS = tuple(range(1, 12))
LONG_WINDOW_BLOCKS = (4, 11)
WINDOW_UNIT = 128  # tokens per window block
# (steps, long window in 128-token blocks); short = long // 2.
WINDOW_PHASES = ((735, 3), (735, 7), (735, 11), (40, 13))
RECORD_MS_PER_STEP = 61.3   # the record's logs: 137.5 s / 2,245 steps (docs/recipes.md)
RECORD_SECONDS = 137.5
ADAM_TABLES = 5             # embed, ve0..2, head: [V, C] each
SCALARS = 64
GATE_ELEMENTS = 10 * HEADS * 12 + 12

# llm.c's GPT-2 124M recipe (d12) for comparison.
GPT2_LAYERS = 12
GPT2_HEADS = 12
GPT2_SEQ = 1024
GPT2_TOKENS_PER_STEP = 524288
GPT2_STEPS = 19073
GPT2_MEASURED_MS = 140.0    # llm.c's published 8xH100 run: ~140 ms per step, 3.28 in ~45 min
GPT2_MEASURED_MIN = 45.0

# Attention FLOPs per visible (query, key) pair and head, in units of head_dim: forward Q K^T and P V
# (2 + 2); backward as FlashAttention computes it: Q K^T recomputed, dV, dP, dQ, dK (5 x 2).
ATTN_FWD_PER_PAIR = 4
ATTN_BWD_PER_PAIR = 10


@dataclass
class Gemm:
    """One matrix product C[M, N] = A[M, K] B[K, N]: 2 M N K FLOPs."""
    name: str
    m: int
    n: int
    k: int
    count: int = 1

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k * self.count


def linear_gemms(name: str, tokens: int, d_in: int, d_out: int, count: int) -> List[Gemm]:
    """Forward y = x W^T, backward dx = dy W and dW = dy^T x of `count` [d_out, d_in] linear layers."""
    return [Gemm(f"{name} fwd y", tokens, d_out, d_in, count),
            Gemm(f"{name} bwd dx", tokens, d_in, d_out, count),
            Gemm(f"{name} bwd dW", d_out, d_in, tokens, count)]


def block_gemms(tokens: int = TOKENS_PER_RANK) -> List[Gemm]:
    """Every block-matrix GEMM of one rank's step: W_qkv [3C, C] and W_o [C, C] in the attention
    blocks, W_fc [4C, C] and W_proj [C, 4C] in the MLP blocks, forward and backward."""
    n_attn, n_mlp = len(ATTENTION_BLOCKS), len(MLP_BLOCKS)
    return (linear_gemms("attn qkv", tokens, C, 3 * C, n_attn)
            + linear_gemms("attn out", tokens, C, C, n_attn)
            + linear_gemms("mlp fc", tokens, C, 4 * C, n_mlp)
            + linear_gemms("mlp proj", tokens, 4 * C, C, n_mlp))


def head_gemms(tokens: int = TOKENS_PER_RANK) -> List[Gemm]:
    """The head z = x W^T with W [V, C] and its backward (the three FP8 GEMMs of the record)."""
    return linear_gemms("head", tokens, C, VOCAB, 1)


def visible_pairs(seq_len: int, window: int, doc_len: int = 0) -> int:
    """(query, key) pairs a causal sliding-window mask lets through in one buffer of seq_len tokens:
    query i sees keys i - window .. i of its own document (window + 1 keys at most). doc_len 0: one
    document fills the buffer (documents never cut a window: the upper bound); else documents of
    doc_len tokens (the last one cut by the buffer's end)."""
    doc = doc_len if doc_len > 0 else seq_len
    total = 0
    start = 0
    while start < seq_len:
        n = min(doc, seq_len - start)
        full = max(0, n - (window + 1))            # positions that see the whole window
        ramp = n - full                            # positions p < window + 1 see p + 1 keys
        total += ramp * (ramp + 1) // 2 + full * (window + 1)
        start += n
    return total


def executed_pairs(seq_len: int, window: int, tile_q: int, tile_k: int, doc_len: int = 0) -> int:
    """Pairs a tiled kernel computes: every (tile_q x tile_k) tile holding at least one visible pair is
    computed whole (a warp's 32 rows against a 64-key tile in our kernel). Documents as visible_pairs."""
    doc = doc_len if doc_len > 0 else seq_len
    total = 0
    for q0 in range(0, seq_len, tile_q):
        q1 = min(q0 + tile_q, seq_len) - 1
        # The first key any row sees is the first row's: a row's first key never decreases with the
        # row, and a document starting inside the tile leaves no gap in the keys the rows see.
        first_key = max((q0 // doc) * doc, q0 - window)
        tiles = q1 // tile_k - first_key // tile_k + 1
        total += tiles * tile_k * (q1 - q0 + 1)
    return total


def speedrun_windows(long_blocks: int) -> List[int]:
    """Window in tokens of every attention block for a long window of long_blocks 128-token blocks."""
    long_w = long_blocks * WINDOW_UNIT
    short_w = (long_blocks // 2) * WINDOW_UNIT
    return [long_w if b in LONG_WINDOW_BLOCKS else short_w for b in ATTENTION_BLOCKS]


def attention_flops(pairs_per_layer: Sequence[int], heads: int, head_dim: int) -> Tuple[float, float]:
    """(forward, backward) attention FLOPs from the visible pairs of each layer."""
    pairs = float(sum(pairs_per_layer))
    return (pairs * heads * head_dim * ATTN_FWD_PER_PAIR, pairs * heads * head_dim * ATTN_BWD_PER_PAIR)


@dataclass
class KernelRow:
    name: str
    calls: int
    mb_per_call: float
    gflop_per_call: float
    ceiling_us: float
    us_per_step: float

    @property
    def is_gemm(self) -> bool:
        """The head GEMMs: counted from the FLOPs here, not as memory-bound kernels."""
        return "GEMM" in self.name or re.match(r"fp8 head: \w+ = ", self.name) is not None


@dataclass
class KernelTable:
    bandwidth: float          # the benchmark's ceilings (bytes/s, FLOP/s)
    bf16_flops: float
    fp8_flops: float
    rows: List[KernelRow] = field(default_factory=list)
    total_us: float = 0.0


def parse_kernel_table(text: str, source: str) -> KernelTable:
    """Rows of bench_speedrun_kernels --dry-run: name, calls, MB/call, GFLOP/call, ceiling us, us/step."""
    head = re.search(r"ceilings ([\d.]+) TB/s, ([\d.]+) TFLOP/s bf16, ([\d.]+) TFLOP/s fp8", text)
    if not head:
        raise SystemExit(f"project_speedrun.py: {source}: no 'ceilings ... TB/s' header line "
                         "(expected the output of bench_speedrun_kernels --dry-run)")
    table = KernelTable(float(head.group(1)) * 1e12, float(head.group(2)) * 1e12,
                        float(head.group(3)) * 1e12)
    row = re.compile(r"^(.+?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s*$")
    for line in text.splitlines():
        if line.startswith("total per training step"):
            table.total_us = float(line.split()[-2])
            continue
        m = row.match(line)
        if m and not line.startswith("kernel "):
            table.rows.append(KernelRow(m.group(1).strip(), int(m.group(2)), float(m.group(3)),
                                        float(m.group(4)), float(m.group(5)), float(m.group(6))))
    if not table.rows or table.total_us == 0.0:
        raise SystemExit(f"project_speedrun.py: {source}: no kernel rows or no 'total per training step'")
    return table


@dataclass
class MuonMatrix:
    gflop: float      # Polar Express
    pe_mb: float
    elementwise_mb: float
    ceiling_us: float


@dataclass
class MuonRank:
    rank: int
    matrices: Dict[str, int]   # shape "768x768" -> count
    gflop: float
    mb: float
    ceiling_us: float


@dataclass
class MuonTable:
    bandwidth: float
    flops: float
    per_shape: Dict[str, MuonMatrix]
    ranks: List[MuonRank]


def parse_muon_table(text: str, source: str) -> MuonTable:
    """The per-matrix table and the last per-rank table of bench_muon_owners."""
    head = re.search(r"Ceilings: ([\d.]+) TFLOP/s, ([\d.]+) TB/s", text)
    if not head:
        raise SystemExit(f"project_speedrun.py: {source}: no 'Ceilings: ...' line "
                         "(expected the output of bench_muon_owners --world 8)")
    per_shape: Dict[str, MuonMatrix] = {}
    shape_row = re.compile(r"^\| [^|]+ \| (\d+x\d+) \| \d+ \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$")
    rank_row = re.compile(r"^\| (\d+) \| [^|]* \| ([^|]+) \| ([\d.]+) \| ([\d.]+) \| \d+ \| ([\d.]+) \|$")
    ranks: List[MuonRank] = []
    for line in text.splitlines():
        if line.startswith("### "):
            ranks = []  # keep the last world size printed
        m = shape_row.match(line)
        if m:
            per_shape[m.group(1)] = MuonMatrix(*(float(m.group(i)) for i in range(2, 6)))
            continue
        m = rank_row.match(line)
        if m:
            counts: Dict[str, int] = {}
            for part in m.group(2).split("+"):
                n, shape = part.strip().split(" x ")
                counts[shape] = counts.get(shape, 0) + int(n)
            ranks.append(MuonRank(int(m.group(1)), counts, float(m.group(3)), float(m.group(4)),
                                  float(m.group(5))))
    if not per_shape or not ranks:
        raise SystemExit(f"project_speedrun.py: {source}: no per-matrix or per-rank table")
    return MuonTable(float(head.group(2)) * 1e12, float(head.group(1)) * 1e12, per_shape, ranks)


@dataclass
class Machine:
    """Ceilings of one GPU and of its interconnect, and the fractions of them assumed achievable."""
    bf16_flops: float = 989e12
    fp8_flops: float = 1979e12
    vector_flops: float = 67e12    # fp32 CUDA cores: the FLOP term of the memory-bound kernels
    bandwidth: float = 3.35e12
    link_bandwidth: float = 450e9  # NVLink4 line rate per direction per GPU
    busbw: float = 370e9           # NCCL's achieved bus bandwidth (scripts/overlap_model.py)
    latency: float = 60e-6         # per collective (scripts/overlap_model.py's fit)
    gemm_fraction: float = 0.7
    attention_fraction: float = 0.5
    memory_fraction: float = 0.8


def memory_kernels_seconds(table: KernelTable, m: Machine, fraction: float) -> float:
    """The benchmark's non-GEMM rows at this machine: per call max(bytes / bw, FLOPs / vector peak)."""
    total = 0.0
    for row in table.rows:
        if row.is_gemm or row.calls == 0:
            continue
        per_call = max(row.mb_per_call * 1e6 / (m.bandwidth * fraction),
                       row.gflop_per_call * 1e9 / (m.vector_flops * fraction))
        total += row.calls * per_call
    return total


def muon_matrix_seconds(mat: MuonMatrix, flops: float, bandwidth: float) -> float:
    """Polar Express at max(FLOPs, its bytes), then NorMuon's elementwise bytes."""
    return max(mat.gflop * 1e9 / flops, mat.pe_mb * 1e6 / bandwidth) + mat.elementwise_mb * 1e6 / bandwidth


def muon_rank_seconds(table: MuonTable, rank: MuonRank, flops: float, bandwidth: float) -> float:
    return sum(n * muon_matrix_seconds(table.per_shape[shape], flops, bandwidth)
               for shape, n in rank.matrices.items())


def adam_step_seconds(bandwidth: float) -> float:
    """One sharded Adam step per rank: read bf16 grad, read/write bf16 param, m and v of 1/RANKS of the
    five tables (14 B per element; scalars negligible), plus zeroing the full bf16 gradients of the
    tables (they accumulate two steps)."""
    shard = ADAM_TABLES * VOCAB * C / RANKS
    return (shard * 14 + ADAM_TABLES * VOCAB * C * 2) / bandwidth


@dataclass
class Collective:
    name: str
    bytes: float
    kind: str       # "rs", "ag" (ring: (n-1)/n of the bytes per GPU) or "reduce" (ring reduce: all of them)
    count: int      # collectives it is split into (each pays the latency)
    every: int = 1  # 2: odd steps only


def speedrun_collectives(muon_bytes: int) -> List[Collective]:
    block_elements = (len(ATTENTION_BLOCKS) * 4 + len(MLP_BLOCKS) * 8) * C * C
    adam_bytes = ADAM_TABLES * VOCAB * C * 2 + SCALARS * 4
    return [Collective("Muon gradients: reduce to owner (32 tensors)", block_elements * muon_bytes,
                       "reduce", 32),
            Collective("Muon parameters: all-gather from owners (32 tensors)", block_elements * muon_bytes,
                       "ag", 32),
            Collective("gates: all-reduce (replicated)", GATE_ELEMENTS * 2 * 2, "rs", 1),
            Collective("Adam gradients: reduce-scatter (6 tensors, odd steps)", adam_bytes, "rs", 6, 2),
            Collective("Adam parameters: all-gather (6 tensors, odd steps)", adam_bytes, "ag", 6, 2),
            Collective("fp32 scalars: all-reduce of the updated shares (odd steps)", SCALARS * 4 * 2, "rs", 1, 2)]


def collective_seconds(c: Collective, busbw: float, latency: float) -> float:
    """Time of one step's share: count x latency + bytes x (n-1)/n / busbw (ring rs/ag), or
    bytes / busbw (ring reduce), divided by `every`."""
    share = (RANKS - 1) / RANKS if c.kind in ("rs", "ag") else 1.0
    return (c.count * latency + c.bytes * share / busbw) / c.every


def hidden_tail_seconds(muon_bytes: int, pe_seconds: float, adam_seconds: float, busbw: float,
                        latency: float) -> float:
    """What `full` overlap cannot hide: the collectives of the gradients made final last in the
    backward, which the next forward needs first: the four embedding tables (reduce-scatter, shard
    update, all-gather, and the fp32 scalars' all-reduce; odd steps only, so half per step) and block 1's
    three Muon tensors (reduce, the owner's Polar Express, all-gather)."""
    tables = 4 * VOCAB * C * 2
    share = (RANKS - 1) / RANKS
    embed = (2 * (4 * latency + tables * share / busbw) + latency + adam_seconds * 4 / 5) / 2
    block1 = 3 * C * 4 * C * muon_bytes
    muon = 3 * latency + block1 / busbw + 3 * latency + block1 * share / busbw + pe_seconds
    return embed + muon


@dataclass
class Component:
    kind: str  # gemm, head, attention, memory, muon, adam
    name: str
    work: str
    ceiling_s: float
    achievable_s: float
    flops: float = 0.0  # useful FLOPs, where the work is FLOPs


AttentionModel = Callable[[int], Tuple[float, float]]  # window -> (useful, executed) fwd + bwd FLOPs


def analytic_attention(doc_len: int, tile_q: int, tile_k: int) -> AttentionModel:
    """One layer's attention FLOPs from the pair counts of visible_pairs / executed_pairs."""
    def layer(window: int) -> Tuple[float, float]:
        useful = attention_flops([visible_pairs(TOKENS_PER_RANK, window, doc_len)], HEADS, HEAD_DIM)
        executed = attention_flops([executed_pairs(TOKENS_PER_RANK, window, tile_q, tile_k, doc_len)],
                                   HEADS, HEAD_DIM)
        return sum(useful), sum(executed)
    return layer


def parse_attention_table(text: str, source: str) -> Dict[int, Tuple[float, float]]:
    """Rows of bench_window_attention: W | pairs/head | fwd GFLOP | fwd exec | bwd GFLOP | bwd exec | ...
    -> window: (useful, executed) fwd + bwd FLOPs of one layer."""
    rows: Dict[int, Tuple[float, float]] = {}
    row = re.compile(r"^\| (\d+) \| \d+ \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|")
    for line in text.splitlines():
        m = row.match(line)
        if m:
            fwd, fwd_exec, bwd, bwd_exec = (float(m.group(i)) * 1e9 for i in range(2, 6))
            rows[int(m.group(1))] = (fwd + bwd, fwd_exec + bwd_exec)
    if not rows:
        raise SystemExit(f"project_speedrun.py: {source}: no 'W | pairs/head | ...' rows "
                         "(expected the output of bench_window_attention)")
    return rows


def table_attention(rows: Dict[int, Tuple[float, float]], source: str) -> AttentionModel:
    def layer(window: int) -> Tuple[float, float]:
        if window not in rows:
            raise SystemExit(f"project_speedrun.py: {source}: no row for window {window} (run "
                             "bench_window_attention --windows 128,384,640,768,896,1408,1664)")
        return rows[window]
    return layer


def speedrun_components(kernels: KernelTable, muon: MuonTable, m: Machine, long_blocks: int,
                        attention: AttentionModel) -> List[Component]:
    """Per-rank compute components of one step with a long window of long_blocks."""
    out: List[Component] = []
    gemm = sum(g.flops for g in block_gemms())
    out.append(Component("gemm", "block matrix GEMMs (bf16): qkv, out, fc, proj; fwd + dx + dW",
                         f"{gemm / 1e12:.2f} TFLOP", gemm / m.bf16_flops,
                         gemm / (m.bf16_flops * m.gemm_fraction)))
    head = sum(g.flops for g in head_gemms())
    out.append(Component("head", "head GEMMs (FP8): z, dx, dW", f"{head / 1e12:.2f} TFLOP", head / m.fp8_flops,
                         head / (m.fp8_flops * m.gemm_fraction)))
    windows = speedrun_windows(long_blocks)
    useful = sum(attention(w)[0] for w in windows)
    executed = sum(attention(w)[1] for w in windows)
    out.append(Component("attention", f"attention (bf16), windows {long_blocks}/{long_blocks // 2} blocks",
                         f"{useful / 1e12:.3f} TFLOP useful, {executed / 1e12:.3f} executed",
                         useful / m.bf16_flops, executed / (m.bf16_flops * m.attention_fraction), useful))
    mem_bytes = sum(r.calls * r.mb_per_call for r in kernels.rows if not r.is_gemm) * 1e6
    out.append(Component("memory", "memory-bound kernels (benchmark rows, head GEMMs excluded)",
                         f"{mem_bytes / 1e9:.2f} GB", memory_kernels_seconds(kernels, m, 1.0),
                         memory_kernels_seconds(kernels, m, m.memory_fraction)))
    worst = max(muon.ranks, key=lambda r: muon_rank_seconds(muon, r, m.bf16_flops, m.bandwidth))
    out.append(Component("muon", f"NorMuon + Polar Express, busiest rank ({worst.rank})",
                         f"{worst.gflop:.1f} GFLOP, {worst.mb:.0f} MB",
                         muon_rank_seconds(muon, worst, m.bf16_flops, m.bandwidth),
                         muon_rank_seconds(muon, worst, m.bf16_flops * m.gemm_fraction,
                                           m.bandwidth * m.memory_fraction)))
    adam_gb = (ADAM_TABLES * VOCAB * C / RANKS * 14 + ADAM_TABLES * VOCAB * C * 2) / 1e9
    out.append(Component("adam", "sharded Adam (odd steps, half per step)", f"{adam_gb / 2:.2f} GB",
                         adam_step_seconds(m.bandwidth) / 2,
                         adam_step_seconds(m.bandwidth * m.memory_fraction) / 2))
    return out


def backward_seconds(components: List[Component]) -> float:
    """Achievable time of the backward the collectives hide under: 2/3 of the GEMMs, 10/14 of the
    attention, half of the memory-bound kernels (their backward rows are about half their bytes)."""
    c = {x.kind: x.achievable_s for x in components}
    attention_share = ATTN_BWD_PER_PAIR / (ATTN_FWD_PER_PAIR + ATTN_BWD_PER_PAIR)
    return 2 / 3 * (c["gemm"] + c["head"]) + attention_share * c["attention"] + 0.5 * c["memory"]


def format_ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


@dataclass
class Phases:
    """The components of every window phase, and means weighted by the phases' steps."""
    components: List[List[Component]]
    steps: List[int]

    def mean(self, values: Sequence[float]) -> float:
        return sum(s * v for s, v in zip(self.steps, values)) / sum(self.steps)

    def mean_total(self, attr: str) -> float:
        return self.mean([sum(getattr(c, attr) for c in p) for p in self.components])


def header_line(kernels: KernelTable, muon: MuonTable, m: Machine, attention_text: str) -> str:
    return (f"Ceilings: {m.bf16_flops / 1e12:.0f} TFLOP/s bf16, {m.fp8_flops / 1e12:.0f} TFLOP/s FP8, "
            f"{m.vector_flops / 1e12:.0f} TFLOP/s fp32 vector, {m.bandwidth / 1e12:.2f} TB/s HBM, "
            f"NVLink {m.link_bandwidth / 1e9:.0f} GB/s. Achievable: GEMMs {m.gemm_fraction:.0%}, "
            f"attention {m.attention_fraction:.0%} (of executed tile FLOPs), "
            f"memory-bound {m.memory_fraction:.0%}, collectives {m.latency * 1e6:.0f} us + "
            f"bytes / {m.busbw / 1e9:.0f} GB/s. Attention: {attention_text}. Benchmark ceilings rescaled "
            f"from {kernels.bandwidth / 1e12:.1f} TB/s (kernel rows), Muon from "
            f"{muon.flops / 1e12:.0f} TFLOP/s / {muon.bandwidth / 1e12:.1f} TB/s.\n")


def compute_rows(phases: Phases) -> List[str]:
    lines = ["| component | work per rank and step | ms at ceilings | ms achievable |", "|---|---|---:|---:|"]
    for i, comp in enumerate(phases.components[0]):
        ceiling = phases.mean([p[i].ceiling_s for p in phases.components])
        achievable = phases.mean([p[i].achievable_s for p in phases.components])
        name, work = comp.name, comp.work
        if comp.kind == "attention":
            name = "attention (bf16), mean over the window phases"
            work = f"{phases.mean([p[i].flops for p in phases.components]) / 1e12:.3f} TFLOP useful"
        lines.append(f"| {name} | {work} | {format_ms(ceiling)} | {format_ms(achievable)} |")
    lines.append(f"| **compute** | | **{format_ms(phases.mean_total('ceiling_s'))}** | "
                 f"**{format_ms(phases.mean_total('achievable_s'))}** |")
    return lines


@dataclass
class Communication:
    exposed_line: float   # all exposed, at the line rate
    exposed: float        # all exposed, achievable
    tail_line: float      # `full` overlap, at the line rate
    tail: float           # `full` overlap, achievable
    backward: float


def communication(phases: Phases, muon: MuonTable, m: Machine, muon_bytes: int) -> Tuple[Communication, List[str]]:
    """Both bounds on the exposed communication, and their table rows."""
    collectives = speedrun_collectives(muon_bytes)
    lines = [f"| comm: {c.name} | {c.bytes / 1e6:.0f} MB | "
             f"{format_ms(collective_seconds(c, m.link_bandwidth, 0.0))} | "
             f"{format_ms(collective_seconds(c, m.busbw, m.latency))} |" for c in collectives]
    square = muon.per_shape[f"{C}x{C}"]
    attn_pe = 4 * muon_matrix_seconds(square, m.bf16_flops, m.bandwidth)
    attn_pe_real = 4 * muon_matrix_seconds(square, m.bf16_flops * m.gemm_fraction,
                                           m.bandwidth * m.memory_fraction)
    exposed = sum(collective_seconds(c, m.busbw, m.latency) for c in collectives)
    backward = phases.mean([backward_seconds(p) for p in phases.components])
    tail = max(hidden_tail_seconds(muon_bytes, attn_pe_real, adam_step_seconds(m.bandwidth * m.memory_fraction),
                                   m.busbw, m.latency), exposed - backward)
    comm = Communication(sum(collective_seconds(c, m.link_bandwidth, 0.0) for c in collectives), exposed,
                         hidden_tail_seconds(muon_bytes, attn_pe, adam_step_seconds(m.bandwidth),
                                             m.link_bandwidth, 0.0), tail, backward)
    lines.append(f"| **communication, all exposed** | | **{format_ms(comm.exposed_line)}** | "
                 f"**{format_ms(comm.exposed)}** |")
    lines.append(f"| **communication, `full` overlap (exposed tail)** | backward {format_ms(backward)} ms "
                 f"hides the rest | **{format_ms(comm.tail_line)}** | **{format_ms(comm.tail)}** |")
    return comm, lines


def total_rows(phases: Phases, comm: Communication) -> List[str]:
    total_steps = sum(phases.steps)
    lines = ["| total | ms per step | time to 3.28 (2,245 steps) |", "|---|---:|---:|"]
    ceiling, achievable = phases.mean_total("ceiling_s"), phases.mean_total("achievable_s")
    for label, step in (("lower bound: ceilings, `full` overlap", ceiling + comm.tail_line),
                        ("achievable fractions, `full` overlap (comm hidden)", achievable + comm.tail),
                        ("achievable fractions, all comm exposed", achievable + comm.exposed)):
        lines.append(f"| {label} | {format_ms(step)} | {step * total_steps:.1f} s |")
    lines.append(f"| record, measured (PyTorch, 8xH100) | {RECORD_MS_PER_STEP:.1f} | {RECORD_SECONDS:.1f} s |")
    return lines


def phase_rows(phases: Phases, comm: Communication) -> List[str]:
    lines = ["Per window phase (achievable, `full` overlap):\n",
             "| steps | long/short window (blocks) | attention ms | step ms |", "|---|---|---:|---:|"]
    first = 0
    for (steps, long_blocks), p in zip(WINDOW_PHASES, phases.components):
        attn = next(c for c in p if c.kind == "attention")
        step = sum(c.achievable_s for c in p) + comm.tail
        lines.append(f"| {first}-{first + steps - 1} | {long_blocks}/{long_blocks // 2} | "
                     f"{format_ms(attn.achievable_s)} | {format_ms(step)} |")
        first += steps
    return lines


def speedrun_report(kernels: KernelTable, muon: MuonTable, m: Machine, muon_bytes: int,
                    attention: AttentionModel, attention_text: str) -> str:
    phases = Phases([speedrun_components(kernels, muon, m, long_blocks, attention)
                     for _, long_blocks in WINDOW_PHASES], [steps for steps, _ in WINDOW_PHASES])
    comm, comm_lines = communication(phases, muon, m, muon_bytes)
    lines = ["## Speedrun recipe (modded-nanogpt 2025-10-31) on 8xH100, per rank and step\n",
             header_line(kernels, muon, m, attention_text)]
    lines += compute_rows(phases) + comm_lines + [""] + total_rows(phases, comm) + [""] + phase_rows(phases, comm)
    return "\n".join(lines)


def gpt2_matmul_params(layers: int = GPT2_LAYERS, channels: int = C, vocab: int = VOCAB) -> int:
    """Weights that take part in a matmul: 12 C^2 per layer (qkv 3, proj 1, fc 4, fcproj 4) + the head."""
    return layers * 12 * channels * channels + vocab * channels


def gpt2_report(m: Machine) -> str:
    tokens = GPT2_TOKENS_PER_STEP // RANKS
    gemm = 6.0 * gpt2_matmul_params() * tokens
    pairs = visible_pairs(GPT2_SEQ, GPT2_SEQ) * (tokens // GPT2_SEQ) * GPT2_LAYERS
    fwd, bwd = attention_flops([pairs], GPT2_HEADS, C // GPT2_HEADS)
    attn = fwd + bwd
    floor = gemm / m.bf16_flops + attn / m.bf16_flops
    achievable = gemm / (m.bf16_flops * m.gemm_fraction) + attn / (m.bf16_flops * m.attention_fraction)
    lines = ["## llm.c GPT-2 124M recipe (d12) on 8xH100, per rank and step, GEMMs and attention only\n",
             f"{GPT2_TOKENS_PER_STEP:,} tokens per step ({tokens:,} per rank), {GPT2_STEPS:,} steps; "
             f"6 x {gpt2_matmul_params() / 1e6:.1f}M matmul weights x tokens, plus causal attention "
             f"(T = {GPT2_SEQ}). Its memory-bound kernels and communication are not counted (no "
             "benchmark rows for them here), so both projections are lower bounds.\n",
             "| | GEMM TFLOP | attention TFLOP | ms per step | time to 3.28 |",
             "|---|---:|---:|---:|---:|",
             f"| ceilings | {gemm / 1e12:.2f} | {attn / 1e12:.2f} | {format_ms(floor)} | "
             f"{floor * GPT2_STEPS / 60:.1f} min |",
             f"| achievable fractions | | | {format_ms(achievable)} | {achievable * GPT2_STEPS / 60:.1f} min |",
             f"| llm.c, measured (its published 8xH100 run) | | | {GPT2_MEASURED_MS:.0f} | ~{GPT2_MEASURED_MIN:.0f} min |"]
    return "\n".join(lines)


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise SystemExit(f"project_speedrun.py: cannot read {path}: {e.strerror}")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--kernels", help="output of bench_speedrun_kernels_emu --dry-run (the 2025-10-31 recipe)")
    p.add_argument("--muon", help="output of bench_muon_owners --world 8 (the 2025-10-31 recipe)")
    p.add_argument("--modded89-step", action="append", default=[],
                   help="output of bench_step_emu --model modded89 -b 1 -t T; twice, at two T (the 2026-07-17 recipe)")
    p.add_argument("--modded89-collectives",
                   help="output of bench_speedrun_collectives --model modded89 --world 8 (the 2026-07-17 recipe)")
    d = Machine()
    p.add_argument("--bf16-tflops", type=float, default=d.bf16_flops / 1e12, help="dense bf16 peak")
    p.add_argument("--fp8-tflops", type=float, default=d.fp8_flops / 1e12, help="dense FP8 peak")
    p.add_argument("--vector-tflops", type=float, default=d.vector_flops / 1e12,
                   help="fp32 CUDA-core peak (FLOP term of memory-bound kernels)")
    p.add_argument("--hbm-tbs", type=float, default=d.bandwidth / 1e12, help="HBM bandwidth, TB/s")
    p.add_argument("--nvlink-gbs", type=float, default=d.link_bandwidth / 1e9,
                   help="NVLink line rate per direction per GPU (ceiling column)")
    p.add_argument("--busbw-gbs", type=float, default=d.busbw / 1e9,
                   help="achieved NCCL bus bandwidth (achievable column)")
    p.add_argument("--latency-us", type=float, default=d.latency * 1e6, help="per collective")
    p.add_argument("--gemm-fraction", type=float, default=d.gemm_fraction,
                   help="achievable fraction of the bf16/FP8 peaks for GEMMs and Polar Express")
    p.add_argument("--attention-fraction", type=float, default=d.attention_fraction,
                   help="achievable fraction of the bf16 peak on the attention's executed FLOPs")
    p.add_argument("--memory-fraction", type=float, default=d.memory_fraction,
                   help="achievable fraction of the HBM bandwidth for memory-bound kernels")
    p.add_argument("--muon-comm-bytes", type=int, default=2, choices=(2, 4),
                   help="bytes per element of Muon gradients and gathered parameters (2: our bf16 "
                        "buffers; 4: the record's fp32)")
    p.add_argument("--doc-length", type=int, default=0,
                   help="documents of this many tokens cut the attention windows (0: never, the upper bound)")
    p.add_argument("--tile", default="32x64", help="attention tile QxK computed whole when any pair is visible")
    p.add_argument("--attention", help="output of bench_window_attention --windows "
                                       "128,384,640,768,896,1408,1664: use its rows (its documents and "
                                       "its kernel's executed FLOPs) instead of --doc-length/--tile")
    args = p.parse_args(argv)
    if bool(args.kernels) != bool(args.muon):
        p.error("--kernels and --muon go together (the 2025-10-31 recipe)")
    if bool(args.modded89_step) != bool(args.modded89_collectives) or len(args.modded89_step) not in (0, 2):
        p.error("the 2026-07-17 recipe needs --modded89-step twice (two T) and --modded89-collectives")
    if not args.kernels and not args.modded89_step:
        p.error("nothing to project: give --kernels and --muon, or --modded89-step (twice) and --modded89-collectives")
    for name in ("gemm_fraction", "attention_fraction", "memory_fraction"):
        if not 0.0 < getattr(args, name) <= 1.0:
            p.error(f"--{name.replace('_', '-')} must be in (0, 1]")
    if not re.fullmatch(r"\d+x\d+", args.tile) or "0" in args.tile.split("x"):
        p.error(f"--tile must be QxK with positive integers, got '{args.tile}'")
    if args.doc_length < 0:
        p.error("--doc-length must be >= 0")
    return args


def record44_report(args: argparse.Namespace, m: Machine) -> str:
    """The 2025-10-31 recipe's report from --kernels, --muon and --attention (or the analytic attention)."""
    kernels = parse_kernel_table(read_text(args.kernels), args.kernels)
    muon = parse_muon_table(read_text(args.muon), args.muon)
    if args.attention:
        rows = parse_attention_table(read_text(args.attention), args.attention)
        attention = table_attention(rows, args.attention)
        first = read_text(args.attention).splitlines()[0]
        docs = re.search(r"\d+ documents \([^)]*\)", first)
        text = (f"executed pairs of bench_window_attention's kernel rows"
                f"{' with ' + docs.group(0) if docs else ''}")
    else:
        tile_q, tile_k = (int(x) for x in args.tile.split("x"))
        attention = analytic_attention(args.doc_length, tile_q, tile_k)
        docs_text = (f"documents of {args.doc_length} tokens" if args.doc_length else
                     "windows never cut by documents (upper bound)")
        text = f"{docs_text}, {tile_q}x{tile_k} tiles computed whole"
    return speedrun_report(kernels, muon, m, args.muon_comm_bytes, attention, text)


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    m = Machine(args.bf16_tflops * 1e12, args.fp8_tflops * 1e12, args.vector_tflops * 1e12,
                args.hbm_tbs * 1e12, args.nvlink_gbs * 1e9, args.busbw_gbs * 1e9, args.latency_us * 1e-6,
                args.gemm_fraction, args.attention_fraction, args.memory_fraction)
    if args.kernels:
        print(record44_report(args, m))
        print()
    if args.modded89_step:
        runs = [projection_modded89.parse_step(read_text(path), path) for path in args.modded89_step]
        exposed = projection_modded89.parse_collectives(read_text(args.modded89_collectives),
                                                        args.modded89_collectives)
        ceilings = projection_modded89.Ceilings(m.bf16_flops, m.fp8_flops, m.vector_flops, m.bandwidth)
        print(projection_modded89.report(runs, exposed, ceilings, m.gemm_fraction, m.attention_fraction,
                                         m.memory_fraction))
        print()
    print(gpt2_report(m))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
