"""Tests of scripts/project_speedrun.py (the 8xH100 projection) against hand computations.

Oracles: the block-matrix and head FLOPs written out here from the shapes of docs/recipes.md (6 x weights x
tokens per linear layer), the record's published ~0.69 GFLOP per token, attention pairs counted by brute
force over every (query, key) pair at tiny shapes, and the benchmark's own per-step total, which the
script's rescaling must reproduce at the benchmark's ceilings. Inputs: the recorded outputs of the two
benchmarks in projection/ (no build needed).
"""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "project_speedrun.py")
KERNELS = os.path.join(HERE, "projection", "bench_speedrun_kernels_dry_run.txt")
MUON = os.path.join(HERE, "projection", "bench_muon_owners_world8.txt")
ATTENTION = os.path.join(HERE, "projection", "bench_window_attention_phases.txt")
sys.path.insert(0, os.path.dirname(SCRIPT))
import project_speedrun as ps  # noqa: E402  (the module under test lives in scripts/)

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


if __name__ == "__main__":
    unittest.main()
