"""Tests of scripts/project_speedrun.py (the 8xH100 projection) against hand computations.

Oracles: the block-matrix and head FLOPs written out here from the shapes of docs/recipes.md (6 x weights x
tokens per linear layer), the record's published ~0.69 GFLOP per token, attention pairs counted by brute
force over every (query, key) pair at tiny shapes, and the benchmark's own per-step total, which the
script's rescaling must reproduce at the benchmark's ceilings. Inputs: the recorded outputs of the two
benchmarks in projection/ (no build needed). The 2026-07-17 recipe's part (projection_modded89.py) on
bench_step outputs written here, each stage and the steps' weighting computed by hand.
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "project_speedrun.py")
KERNELS = os.path.join(HERE, "projection", "bench_speedrun_kernels_dry_run.txt")
KERNELS_WGMMA_GEMMS = os.path.join(HERE, "projection", "bench_speedrun_kernels_dry_run_wgmma_gemms.txt")
MUON = os.path.join(HERE, "projection", "bench_muon_owners_world8.txt")
ATTENTION = os.path.join(HERE, "projection", "bench_window_attention_phases.txt")
sys.path.insert(0, os.path.dirname(SCRIPT))
import project_speedrun as ps  # noqa: E402  (the module under test lives in scripts/)
import projection_modded89 as pm  # noqa: E402

C, T, V = 768, 32768, 50304


def brute_pairs(seq_len, window, doc_len):
    """Visible (query, key) pairs: key before or at the query, at most `window` back, same document."""
    doc = doc_len or seq_len
    return sum(1 for q in range(seq_len) for k in range(q + 1) if q - k <= window and q // doc == k // doc)


def brute_executed(seq_len, window, doc_len, tile_q, tile_k):
    """Pairs of every tile that holds at least one visible pair, each tile counted whole
    (rows clipped to the sequence, keys never)."""
    doc = doc_len or seq_len
    total = 0
    for q0 in range(0, seq_len, tile_q):
        rows = range(q0, min(q0 + tile_q, seq_len))
        for k0 in range(0, seq_len, tile_k):
            if any(k <= q and q - k <= window and q // doc == k // doc
                   for q in rows for k in range(k0, k0 + tile_k)):
                total += len(rows) * tile_k
    return total


class FlopCounts(unittest.TestCase):
    def test_one_attention_block_and_one_mlp_block(self):
        attn = 6 * (3 * C * C + C * C) * T        # qkv [3C, C] + out [C, C], forward 2x, backward 4x
        mlp = 6 * (4 * C * C + 4 * C * C) * T     # fc [4C, C] + proj [C, 4C]
        self.assertEqual(sum(g.flops for g in ps.block_gemms()), 10 * attn + 11 * mlp)

    def test_block_gemms_are_six_times_the_block_parameters(self):
        block_params = 10 * 4 * C * C + 22 * 4 * C * C   # docs/recipes.md: 75.5M in block matrices
        self.assertAlmostEqual(block_params / 1e6, 75.5, delta=0.05)
        self.assertEqual(sum(g.flops for g in ps.block_gemms()), 6 * block_params * T)

    def test_head_matches_the_benchmark_rows(self):
        head = ps.head_gemms()
        self.assertEqual(sum(g.flops for g in head), 6 * V * C * T)
        table = ps.parse_kernel_table(ps.read_text(KERNELS), KERNELS)
        fp8_rows = [r for r in table.rows if r.is_gemm and r.calls > 0]
        self.assertEqual(len(fp8_rows), 3)
        for row, gemm in zip(fp8_rows, head):
            self.assertAlmostEqual(row.gflop_per_call, gemm.flops / 1e9, places=2)

    def test_matmul_work_per_token_is_the_published_figure(self):
        per_token = (sum(g.flops for g in ps.block_gemms()) + sum(g.flops for g in ps.head_gemms())) / T
        self.assertAlmostEqual(per_token / 1e9, 0.69, delta=0.01)   # the record (docs/recipes.md)

    def test_visible_pairs_against_brute_force(self):
        for seq_len, window, doc_len in [(40, 5, 0), (40, 5, 7), (33, 0, 0), (33, 40, 0), (50, 8, 9),
                                         (64, 16, 16)]:
            with self.subTest(seq_len=seq_len, window=window, doc_len=doc_len):
                self.assertEqual(ps.visible_pairs(seq_len, window, doc_len),
                                 brute_pairs(seq_len, window, doc_len))

    def test_executed_pairs_against_brute_force(self):
        for seq_len, window, doc_len, tq, tk in [(40, 5, 0, 4, 8), (40, 5, 7, 4, 8), (37, 12, 0, 8, 4),
                                                 (48, 16, 11, 8, 8), (30, 3, 5, 3, 5)]:
            with self.subTest(seq_len=seq_len, window=window, doc_len=doc_len, tile=(tq, tk)):
                self.assertEqual(ps.executed_pairs(seq_len, window, tq, tk, doc_len),
                                 brute_executed(seq_len, window, doc_len, tq, tk))

    def test_full_causal_attention_is_the_triangle(self):
        self.assertEqual(ps.visible_pairs(1024, 1024), 1024 * 1025 // 2)

    def test_window_schedule(self):
        # Blocks 4 and 11 long, the other eight attention blocks short = long // 2, in 128-token units.
        self.assertEqual(sorted(ps.speedrun_windows(11)), [640] * 8 + [1408] * 2)
        self.assertEqual(sorted(ps.speedrun_windows(13)), [768] * 8 + [1664] * 2)
        self.assertEqual(sum(s for s, _ in ps.WINDOW_PHASES), 2245)

    def test_attention_flops_per_pair(self):
        fwd, bwd = ps.attention_flops([10], heads=6, head_dim=128)
        self.assertEqual(fwd, 10 * 6 * 2 * 2 * 128)          # Q K^T and P V
        self.assertEqual(bwd, 10 * 6 * 5 * 2 * 128)          # Q K^T again, dV, dP, dQ, dK


class Rescaling(unittest.TestCase):
    def test_memory_rows_reproduce_the_benchmark_at_its_ceilings(self):
        table = ps.parse_kernel_table(ps.read_text(KERNELS), KERNELS)
        h200 = ps.Machine(bandwidth=table.bandwidth, vector_flops=table.bf16_flops)
        gemm_us = sum(r.calls * r.ceiling_us for r in table.rows if r.is_gemm)
        expected = table.total_us - gemm_us
        got = ps.memory_kernels_seconds(table, h200, 1.0) * 1e6
        self.assertAlmostEqual(got, expected, delta=0.001 * expected)   # rows are printed to 0.1 us

    def test_wgmma_gemms_move_epilogue_work_into_the_gemms(self):
        # --wgmma-gemms: the ReLU^2 rows (11 MLPs, forward 2 and backward 3 tensors of T x 4C bf16), the QK-norm +
        # RoPE forward (10 attention layers: q and k read and written, the tables, rstd) and the 10 v mixes (v, ve and
        # the output) leave the memory-bound kernels, their work goes into GEMM rows, and the memory-bound total drops
        # by exactly those bytes.
        plain = ps.parse_kernel_table(ps.read_text(KERNELS), KERNELS)
        fused = ps.parse_kernel_table(ps.read_text(KERNELS_WGMMA_GEMMS), KERNELS_WGMMA_GEMMS)

        def memory_bytes(table):
            return sum(r.calls * r.mb_per_call for r in table.rows if not r.is_gemm) * 1e6

        D, H = 128, 6
        relu_squared = 11 * (2 + 3) * T * 4 * C * 2
        qk_norm_rope = 10 * ((4 * T * C + T * D) * 2 + 8 * T * H)
        v_mixes = 10 * 3 * T * C * 2
        self.assertAlmostEqual(memory_bytes(plain) - memory_bytes(fused), relu_squared + qk_norm_rope + v_mixes,
                               delta=3e6)
        wgmma = [r for r in fused.rows if "(wgmma)" in r.name]
        self.assertEqual([(r.calls, r.is_gemm) for r in wgmma], [(11, True), (11, True), (10, True)])

    def test_memory_rows_scale_with_bandwidth(self):
        table = ps.parse_kernel_table(ps.read_text(KERNELS), KERNELS)
        slow = ps.memory_kernels_seconds(table, ps.Machine(bandwidth=1e12, vector_flops=1e18), 1.0)
        fast = ps.memory_kernels_seconds(table, ps.Machine(bandwidth=2e12, vector_flops=1e18), 1.0)
        self.assertAlmostEqual(slow / fast, 2.0, places=9)
        half = ps.memory_kernels_seconds(table, ps.Machine(bandwidth=2e12, vector_flops=1e18), 0.5)
        self.assertAlmostEqual(half, slow, places=12)

    def test_muon_model_is_close_to_the_benchmark_at_its_ceilings(self):
        # The benchmark takes the max per kernel; this one per Polar Express pass: at most a few % less.
        muon = ps.parse_muon_table(ps.read_text(MUON), MUON)
        self.assertEqual(len(muon.ranks), 8)
        for shape, mat in muon.per_shape.items():
            if mat.ceiling_us == 0:
                continue
            got = ps.muon_matrix_seconds(mat, muon.flops, muon.bandwidth) * 1e6
            self.assertLessEqual(got, mat.ceiling_us * 1.001, shape)
            self.assertGreaterEqual(got, mat.ceiling_us * 0.95, shape)
        for rank in muon.ranks:
            gflop = sum(n * muon.per_shape[s].gflop for s, n in rank.matrices.items())
            self.assertAlmostEqual(gflop, rank.gflop, delta=0.2)

    def test_attention_rows_are_the_pairs_times_the_per_pair_flops(self):
        rows = ps.parse_attention_table(ps.read_text(ATTENTION), ATTENTION)
        self.assertEqual(sorted(rows), [128, 384, 640, 768, 896, 1408, 1664])   # every phase's windows
        for line in ps.read_text(ATTENTION).splitlines():
            cells = [c.strip() for c in line.split("|")[1:3]]
            if len(cells) == 2 and cells[0].isdigit():
                window, pairs = int(cells[0]), int(cells[1])
                useful, executed = rows[window]
                # fwd 4 x 128 and bwd 10 x 128 FLOPs per pair and head, 6 heads; GFLOP printed to 0.1.
                self.assertAlmostEqual(useful, pairs * 6 * 14 * 128, delta=0.1e9)
                self.assertGreaterEqual(executed, useful)
                # Documents only remove pairs: at most the analytic upper bound.
                self.assertLessEqual(pairs, ps.visible_pairs(T, window))

    def test_collective_time(self):
        c = ps.Collective("x", 8e9, "rs", 2)
        self.assertAlmostEqual(ps.collective_seconds(c, 100e9, 1e-3), 2e-3 + 8e9 * 7 / 8 / 100e9)
        c = ps.Collective("x", 8e9, "reduce", 1, every=2)
        self.assertAlmostEqual(ps.collective_seconds(c, 100e9, 0.0), 8e9 / 100e9 / 2)


class CommandLine(unittest.TestCase):
    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, "--kernels", KERNELS, "--muon", MUON, *args],
                              capture_output=True, text=True, timeout=120)

    def test_report_on_the_recorded_inputs(self):
        r = self.run_script()
        self.assertEqual(r.returncode, 0, r.stderr)
        out = r.stdout
        self.assertIn("GEMMs 70%", out)
        self.assertIn("memory-bound 80%", out)
        self.assertIn("| 14.84 TFLOP |", out)        # 6 x 75.5M x 32,768
        self.assertIn("| 7.60 TFLOP |", out)         # 6 x V x C x 32,768
        self.assertIn("| record, measured (PyTorch, 8xH100) | 61.3 | 137.5 s |", out)
        self.assertIn("## llm.c GPT-2 124M", out)
        totals = [line for line in out.splitlines() if line.startswith(("| lower bound", "| achievable"))]
        steps = [float(line.split("|")[2]) for line in totals[:3]]
        self.assertLess(steps[0], steps[1])          # ceilings < achievable with comm hidden
        self.assertLess(steps[1], steps[2])          # < achievable with all comm exposed
        for line in totals[:3]:
            ms, seconds = float(line.split("|")[2]), float(line.split("|")[3].split()[0])
            self.assertAlmostEqual(seconds, ms * 2245 / 1000, delta=0.06)

    def test_attention_rows_as_input(self):
        r = self.run_script("--attention", ATTENTION)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("bench_window_attention's kernel rows with 64 documents", r.stdout)
        self.assertIn("| 0-734 | 3/1 | 1.94 |", r.stdout)   # (8 (18.2 + 63.0) + 2 (34.6 + 119.8)) GFLOP / 494.5 TFLOP/s
        r = self.run_script("--attention", KERNELS)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(KERNELS, r.stderr)

    def test_full_overlap_leaves_only_the_tail(self):
        out = self.run_script().stdout
        exposed = next(line for line in out.splitlines() if line.startswith("| **communication, all"))
        tail = next(line for line in out.splitlines() if line.startswith("| **communication, `full`"))
        exposed_ms = float(exposed.split("|")[4].strip(" *"))
        tail_ms = float(tail.split("|")[4].strip(" *"))
        self.assertLess(tail_ms, exposed_ms / 2)
        # The tail by hand (docs/projection.md): the four embedding tables' reduce-scatter + all-gather
        # (60 us each + 7/8 of the bytes at 370 GB/s), the fp32 scalars' all-reduce (60 us) and the
        # tables' share of the Adam step, on odd steps;
        # block 1's three Muon tensors reduced (all bytes) and gathered (7/8), 6 collectives, and the
        # owner's Polar Express of one attention tensor (4 square matrices at 70% / 80%).
        tables = 4 * V * C * 2
        adam = (5 * V * C / 8 * 14 + 5 * V * C * 2) / (3.35e12 * 0.8)
        embed = (2 * (4 * 60e-6 + tables * 7 / 8 / 370e9) + 60e-6 + adam * 4 / 5) / 2
        block1 = 12 * C * C * 2
        pe = 4 * (max(13.590e9 / (989e12 * 0.7), 44.83e6 / (3.35e12 * 0.8)) + 15.34e6 / (3.35e12 * 0.8))
        by_hand = embed + 6 * 60e-6 + block1 / 370e9 + block1 * 7 / 8 / 370e9 + pe
        self.assertAlmostEqual(tail_ms, by_hand * 1e3, delta=0.006)

    def test_fractions_are_options(self):
        base = self.run_script().stdout
        full = self.run_script("--gemm-fraction", "1", "--attention-fraction", "1",
                               "--memory-fraction", "1").stdout
        self.assertIn("GEMMs 100%", full)
        self.assertNotEqual(base, full)

    def test_bad_options_and_inputs(self):
        r = self.run_script("--gemm-fraction", "1.5")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("--gemm-fraction", r.stderr)
        r = subprocess.run([sys.executable, SCRIPT, "--kernels", MUON, "--muon", MUON],
                           capture_output=True, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(MUON, r.stderr)
        r = subprocess.run([sys.executable, SCRIPT, "--kernels", "/no/such/file", "--muon", MUON],
                           capture_output=True, text=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("/no/such/file", r.stderr)


def step_text(tokens, rows):
    """bench_step's output for a modded89 model at B=1, T=tokens: (kind, name, MB/call, GFLOP/call, ceil us)."""
    lines = [f"bench_step (bf16, emulated, nothing executed): model modded89 (modded89 V=50304 H=6 D=128 C=768 "
             f"T=49152 window_block=128), B=1 T={tokens}, grad_accum 1, optimizer speedrun",
             "kind   name                                                         calls   MB/call GFLOP/call  "
             "ceil us/st       share"]
    lines += [f"{kind:<6} {name:<58} {1:7d} {mb:9.2f} {gflop:10.3f} {us:11.1f} {1.0:10.1f}%"
              for kind, name, mb, gflop, us in rows]
    return "\n".join(lines) + "\n"


# Two runs, T = 1000 and 2000: a per-token norm, a per-step Adam, FLOP-bound attention, an FP8 and a bf16 GEMM
# (the bf16 one with a per-step part), a DC kernel.
STEP_ROWS = {1000: [("kernel", "rmsnorm_forward_kernel<floatX>", 1.0, 0.0, 10.0),
                    ("kernel", "(adam_sharded_kernel<P, S, G>)", 5.0, 0.0, 100.0),
                    ("kernel", "dkdv_kernel<floatX>", 0.01, 1.0, 50.0),
                    ("gemm", "fp8 gemm 1000x96x64 e4m3 x e5m2 -> fp32", 0.0, 2.0, 30.0),
                    ("gemm", "bf16 gemm 1000x768x768", 0.0, 1.0, 200.0),
                    ("kernel", "dc_forward_kernel<floatX>", 1.0, 0.0, 5.0)],
             2000: [("kernel", "rmsnorm_forward_kernel<floatX>", 1.0, 0.0, 20.0),
                    ("kernel", "(adam_sharded_kernel<P, S, G>)", 5.0, 0.0, 100.0),
                    ("kernel", "dkdv_kernel<floatX>", 0.01, 1.0, 100.0),
                    ("gemm", "fp8 gemm 2000x96x64 e4m3 x e5m2 -> fp32", 0.0, 2.0, 60.0),
                    ("gemm", "bf16 gemm 2000x768x768", 0.0, 1.0, 300.0),
                    ("kernel", "dc_forward_kernel<floatX>", 1.0, 0.0, 10.0)]}
COLLECTIVES = """modded89 on 8 ranks (rank 0; ring bytes per rank; 370 GB/s bus, 60 us per call)
run of 1285 steps (642 with Adam): 1742.7 GB on the wire per rank, 8.68 s at the ceilings (6.755 ms per step)
exposed under full overlap, at least (...): 0.377 ms per NorMuon step, 5.491 ms per Adam step; 3.012 ms per step \
over the run, beside the record's 57.4 ms per step
NorMuon and Polar Express per rank (the owner plan's cost model): the busiest rank 0.300 ms of the whole pass's 2.000 ms at the ceilings (share 0.1500)
"""
# Ceilings of the test: 1 TB/s, 1,000 TFLOP/s bf16, 2,000 FP8, 10 vector.
CEIL = pm.Ceilings(1e15, 2e15, 1e13, 1e12)


class Modded89Projection(unittest.TestCase):
    def test_the_window_attention_launchers_kernels_file_as_attention(self):
        # bench_step names a row by the kernel expression its launcher passes to LLMC_LAUNCH_COSTED: every launch in
        # window_attention.cuh (the plan aside) must be filed as attention, not as a memory-bound kernel.
        header = os.path.join(HERE, "..", "..", "llmc", "kernels", "window_attention.cuh")
        with open(header, encoding="utf-8") as handle:
            calls = re.findall(r"LLMC_LAUNCH_COSTED\((.*?)\);", handle.read(), re.S)
        names = [m.group(0) for m in (re.search(r"\w+_kernel<[^>]*>", call) for call in calls) if m]
        self.assertEqual(len(names), len(calls), calls)
        kernels = [n for n in names if n not in ("plan_kernel<>", "value_mix_scalars_kernel<>")]
        self.assertGreaterEqual(len(kernels), 4, names)   # forward, delta, dK/dV, dQ
        rows = [pm.StepRow("kernel", name, 1.0, 1.0, 1.0) for name in kernels]
        self.assertEqual({pm.category(r) for r in rows}, {pm.CATEGORIES[2]}, kernels)

    def runs(self):
        return [pm.parse_step(step_text(t, rows), f"T{t}") for t, rows in STEP_ROWS.items()]

    def test_rows_are_rescaled_from_the_benchs_ceilings(self):
        # Each ratio by hand: a call's time here over bench_step's (4.3 TB/s, 790 TFLOP/s for every non-FP8 row,
        # 1,979 for FP8): bytes-bound 4.3 / 1; the FLOP-bound attention and bf16 GEMM 790 / 1,000; FP8 1,979 / 2,000.
        a = {row.name: pm.row_seconds(row, CEIL) for row in self.runs()[0].rows}
        self.assertAlmostEqual(a["rmsnorm_forward_kernel<floatX>"], 10e-6 * 4.3, delta=1e-12)
        self.assertAlmostEqual(a["dkdv_kernel<floatX>"], 50e-6 * 0.79, delta=1e-12)
        self.assertAlmostEqual(a["fp8 gemm 1000x96x64 e4m3 x e5m2 -> fp32"], 30e-6 * 1979 / 2000, delta=1e-12)
        self.assertAlmostEqual(a["bf16 gemm 1000x768x768"], 200e-6 * 0.79, delta=1e-12)
        self.assertEqual([pm.category(r) for r in self.runs()[0].rows],
                         [pm.CATEGORIES[i] for i in (5, 4, 2, 1, 0, 3)])

    def test_the_optimizers_rows_count_one_ranks_part(self):
        # bench_step's one rank updates every Adam shard and every Muon matrix and norms every gradient: one of 8
        # ranks does an eighth of the shards and the busiest rank's share (here 0.15) of NorMuon and Polar Express.
        for kind, name, share in (("kernel", "(adam_sharded_kernel<P, S, G>)", 1 / 8),
                                  ("kernel", "squared_sum_kernel<floatX>", 1 / 8),
                                  ("kernel", "(normuon_momentum_kernel<S, G>)", 0.15),
                                  ("kernel", "frobenius_partials_kernel<floatX>", 0.15),
                                  ("gemm", "gemm 3072x768x768 NT batch 2", 0.15),
                                  ("gemm", "gemm 16384x768x768 NT", 1.0),
                                  ("kernel", "rmsnorm_forward_kernel<floatX>", 1.0)):
            self.assertEqual(pm.rank_share(pm.StepRow(kind, name, 1.0, 0.0, 1.0), 0.15), share, name)
        self.assertEqual(pm.parse_collectives(COLLECTIVES, "c").muon_share, 0.15)
        with self.assertRaises(SystemExit):
            pm.parse_collectives(COLLECTIVES.rsplit("NorMuon and Polar", 1)[0], "c")

    def test_stages_are_affine_in_tokens_with_attention_at_the_stages_windows(self):
        stages = pm.stage_seconds(self.runs(), CEIL)
        # Keys per query summed over the ten attention layers (8 short, 2 long) over the bench's 1/3 blocks.
        ratios = [(8 * (s * 128 + 1) + 2 * (lw * 128 + 1)) / (8 * 129 + 2 * 385)
                  for s, lw in ((1, 3), (3, 7), (5, 11), (6, 13))]
        for stage, tokens, ratio in zip(stages, (16384, 32768, 49152, 49152), ratios):
            self.assertAlmostEqual(stage[pm.CATEGORIES[5]], 4.3e-8 * tokens, delta=1e-12)       # 10 us per 1000
            self.assertAlmostEqual(stage[pm.CATEGORIES[4]], 100e-6 * 4.3 / 8, delta=1e-12)      # per step, sharded
            self.assertAlmostEqual(stage[pm.CATEGORIES[2]], 0.79 * 5e-8 * tokens * ratio, delta=1e-12)
            self.assertAlmostEqual(stage[pm.CATEGORIES[0]], 0.79 * (100e-6 + 1e-7 * tokens), delta=1e-12)
            self.assertAlmostEqual(stage[pm.CATEGORIES[3]], 4.3 * 5e-9 * tokens, delta=1e-12)  # DC: no window
        self.assertAlmostEqual(ratios[3], (8 * 769 + 2 * 1665) / 1802)

    def test_a_bytes_bound_attention_row_does_not_grow_with_the_window(self):
        # The window multiplies an attention kernel's FLOPs, not its bytes (each tensor read or written once): a row
        # bound by its bytes at every stage (10 MB per call, 10 us per 1000 tokens at bench_step's 4.3 TB/s) is 4.3x
        # its bench time here at each stage's tokens; one bound by its FLOPs scales with the windows (the test above).
        runs = [pm.StepRun(t, [pm.StepRow("kernel", "dkdv_kernel<kGated>", 10.0, 1e-6, 1e-2 * t)])
                for t in (1000, 2000)]
        for stage, tokens in zip(pm.stage_seconds(runs, CEIL), (16384, 32768, 49152, 49152)):
            self.assertAlmostEqual(stage[pm.CATEGORIES[2]], 4.3e-8 * tokens, delta=1e-12)

    def test_report_weights_the_stages_by_their_steps(self):
        stages = pm.stage_seconds(self.runs(), CEIL, 0.15)
        steps = (423, 424, 423, 15)
        mean = sum(n * sum(s.values()) for n, s in zip(steps, stages)) / 1285
        out = pm.report(self.runs(), pm.parse_collectives(COLLECTIVES, "c"), CEIL, 1.0, 1.0, 1.0)
        line = next(x for x in out.splitlines() if x.startswith("| lower bound"))
        self.assertEqual(line, f"| lower bound: ceilings, `full` overlap (exposed tail) | {mean * 1e3 + 3.012:.2f} | "
                               f"{(mean * 1e3 + 3.012) * 1.285:.1f} s |")
        exposed = next(x for x in out.splitlines() if x.startswith("| achievable fractions, all comm"))
        self.assertIn(f"| {mean * 1e3 + 6.755:.2f} |", exposed)
        self.assertIn("| record, measured (PyTorch, 8xH100) | 57.4 | 73.8 s |", out)
        halved = pm.report(self.runs(), pm.parse_collectives(COLLECTIVES, "c"), CEIL, 0.5, 1.0, 1.0)
        gemm = sum(n * (s[pm.CATEGORIES[0]] + s[pm.CATEGORIES[1]]) for n, s in zip(steps, stages)) / 1285
        line = next(x for x in halved.splitlines() if x.startswith("| achievable fractions, `full`"))
        self.assertIn(f"| {(mean + gemm) * 1e3 + 3.012:.2f} |", line)  # GEMMs at half their peak: twice as long

    def test_command_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for t, rows in STEP_ROWS.items():
                paths.append(os.path.join(tmp, f"step{t}.txt"))
                with open(paths[-1], "w") as f:
                    f.write(step_text(t, rows))
            coll = os.path.join(tmp, "coll.txt")
            with open(coll, "w") as f:
                f.write(COLLECTIVES)
            args = ["--modded89-step", paths[0], "--modded89-step", paths[1], "--modded89-collectives", coll]
            r = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("## 2026-07-17 recipe (#89) on 8xH100", r.stdout)
            self.assertNotIn("2025-10-31", r.stdout)
            for bad, needle in ((args[:2] + args[4:], "--modded89-step twice"),
                                (["--modded89-step", paths[0], "--modded89-step", paths[0], *args[4:]],
                                 "two bench_step outputs at different T"),
                                (["--modded89-step", coll, "--modded89-step", paths[1], *args[4:]], coll),
                                (args[:4] + ["--modded89-collectives", paths[0]], paths[0]),
                                (["--kernels", KERNELS], "--kernels and --muon go together"),
                                ([], "nothing to project")):
                r = subprocess.run([sys.executable, SCRIPT, *bad], capture_output=True, text=True, timeout=120)
                self.assertNotEqual(r.returncode, 0, bad)
                self.assertIn(needle, r.stderr, bad)


if __name__ == "__main__":
    unittest.main()
