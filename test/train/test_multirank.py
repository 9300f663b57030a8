"""Data-parallel training with ZeRO-1 AdamW, tested end to end: train_gpt2 (fp32 emulated build) under
mpirun with 1, 2 and 4 emulated ranks on the same global batch, the three overlap modes, clipping,
gradient accumulation, the BOS-aligned loader with B > 1, the per-rank Chrome traces, a mutant run
missing one cross-stream wait (the emulation's fault injection), a failing rank, resume from a
multi-rank checkpoint on the same and on another number of ranks, stop signals sent to mpirun and to
one rank, and the watchdog ending a job whose rank is stopped (SIGSTOP).

Binaries come from the environment (set by cmake/multirank.cmake): LLMC_MPIEXEC, LLMC_TRAIN_FP32_EMU.
Run: ctest --test-dir build -L multirank
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import multirank_runs as mr  # noqa: E402

MPIEXEC = os.environ.get("LLMC_MPIEXEC", "mpiexec")
TRAINER = os.environ.get("LLMC_TRAIN_FP32_EMU", "")
# The emulation drops every cross-stream wait of a lower-priority stream for the comm stream: the
# forward no longer waits for a bucket's all-gather (llmc/emu/emulated_device.h).
DROP_PARAM_WAIT = {"LLMC_EMU_DROP_WAITS_ON_PRIORITY_STREAMS": "1"}

# The `tiny` preset (L=2, C=32, T=16, V=100); 4 windows of T tokens per optimizer step in total:
# 1 rank B=4, 2 ranks B=2, 4 ranks B=1 read exactly the same windows (rank r takes windows r*B..).
STEPS, LR, GLOBAL_WINDOWS = 4, 3e-3, 4


def common_args(steps=STEPS):
    return ["--model", "tiny", "-t", "16", "--steps", str(steps), "--lr", str(LR), "--lr-schedule", "constant",
            "--weight-decay", "0.1", "--seed", "1337"]


COMMON = common_args()

# Tolerances, from the arithmetic.
# Parameters: N ranks sum each gradient over the same 64 token positions as 1 rank, but in another
# order (per-rank partial sums, then the reduce-scatter's sum), so a gradient element differs by a
# few fp32 roundings, relative error ~ 64 * 2^-24 ~ 4e-6 at worst. AdamW divides m by sqrt(v), so a
# relative error d in the gradients moves each update (size <= ~LR) by ~d*LR; only gradients that
# cancel to near zero can flip sign, and their updates are small because eps keeps the ratio below 1.
# Over STEPS steps (plus the drift it feeds back through the forward) we allow 1% of one step's
# update, LR/100, per step: 30x the differences seen (~4e-6 after 4 steps), yet 100x smaller than the
# effect of dropping or misplacing one update (~LR), which the test checks is what a bug looks like.
PARAM_TOL = 0.01 * LR * STEPS
# Losses and norms are printed with 4 decimals; values within ~1e-6 can still print one unit apart.
PRINTED_TOL = 1.01e-4


class MultiRankCase(unittest.TestCase):
    """Shards in a temporary directory; runs of the trainer into subdirectories of it."""

    @classmethod
    def setUpClass(cls):
        if not TRAINER or not os.path.exists(TRAINER):
            raise RuntimeError(f"trainer binary not found: '{TRAINER}' (run through ctest, which sets "
                               "LLMC_TRAIN_FP32_EMU)")
        cls.directory = tempfile.mkdtemp(prefix="llmc_multirank_")
        rng = np.random.default_rng(2024)
        data = os.path.join(cls.directory, "data")
        os.makedirs(data)
        # Tokens with some structure (a noisy counter), so that gradients are not pure noise.
        tokens = (np.arange(8192) * 7 + rng.integers(0, 5, 8192)) % 100
        mr.write_shard(os.path.join(data, "train_000001.bin"), tokens)
        mr.write_shard(os.path.join(data, "val_000000.bin"), tokens[:2048][::-1])
        cls.train_data = os.path.join(data, "train_*.bin")
        cls.val_data = os.path.join(data, "val_*.bin")
        cls.runs = {}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.directory, ignore_errors=True)

    @classmethod
    def train(cls, name, ranks, args, extra_env=None, timeout=120):
        output_dir = os.path.join(cls.directory, name)
        args = ["--train-data", cls.train_data] + list(args)
        run = mr.run_trainer(MPIEXEC, ranks, TRAINER, args, output_dir, timeout=timeout,
                             extra_env=extra_env)
        cls.runs[name] = run
        return run

    def assert_ok(self, run):
        self.assertEqual(run.returncode, 0, run.describe())
        self.assertEqual(sorted(run.steps), list(range(1, STEPS + 1)), run.describe())

    def assert_close_runs(self, run, reference, what):
        """Losses, norms and final parameters agree within the fp32 reduction-order tolerance."""
        self.assert_ok(run)
        for step in range(1, STEPS + 1):
            (loss, norm, line), (ref_loss, ref_norm, ref_line) = run.steps[step], reference.steps[step]
            self.assertLessEqual(abs(float(loss) - float(ref_loss)), PRINTED_TOL, f"{what}: {line} vs {ref_line}")
            self.assertLessEqual(abs(float(norm) - float(ref_norm)), PRINTED_TOL, f"{what}: {line} vs {ref_line}")
        params, ref_params = run.final_params(STEPS), reference.final_params(STEPS)
        self.assertEqual(params.shape, ref_params.shape)
        worst = float(np.max(np.abs(params - ref_params)))
        self.assertLessEqual(worst, PARAM_TOL, f"{what}: final parameters differ by up to {worst:.3g}")

    def assert_identical_runs(self, run, reference, what):
        """Bitwise the same: log lines' loss and norm, the model file, every rank's optimizer shard."""
        self.assert_ok(run)
        for step in range(1, STEPS + 1):
            self.assertEqual(run.steps[step][:2], reference.steps[step][:2], f"{what}, step {step}")
        with open(run.checkpoint(STEPS) + "_model.bin", "rb") as a, \
                open(reference.checkpoint(STEPS) + "_model.bin", "rb") as b:
            self.assertTrue(a.read() == b.read(), f"{what}: model files differ")
        states = sorted(glob.glob(run.checkpoint(STEPS) + "_state_rank*.bin"))
        self.assertGreater(len(states), 0)
        for path in states:
            other = path.replace(run.output_dir, reference.output_dir)
            for array, ref_array in zip(mr.read_state(path)[1:], mr.read_state(other)[1:]):
                self.assertTrue(np.array_equal(array, ref_array), f"{what}: {os.path.basename(path)} differs")

    def assert_same_checkpoints(self, prefix, reference):
        with open(prefix + "_model.bin", "rb") as a, open(reference + "_model.bin", "rb") as b:
            self.assertTrue(a.read() == b.read(), f"{prefix}: model files differ")
        states = sorted(glob.glob(reference + "_state_rank*.bin"))
        self.assertEqual(len(states), len(glob.glob(prefix + "_state_rank*.bin")))
        for path in states:
            ours = mr.read_state(prefix + path[len(reference):])
            for array, other in zip(ours[1:], mr.read_state(path)[1:]):
                self.assertTrue(np.array_equal(array, other), f"{os.path.basename(path)}: optimizer state differs")


class Equivalence(MultiRankCase):
    """N ranks = 1 rank on the same global batch; the overlap modes agree bitwise."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        no_clip = COMMON + ["--grad-clip", "0"]
        clip = COMMON + ["--grad-clip", "1.0"]  # the tiny model's gradient norm is above 1: clipping acts
        # The trainer's test hook (llmc/train/debug_hooks.h) keeps the initial parameters in dump/model.bin.
        cls.train("np1", 1, no_clip + ["-b", "4"],
                  extra_env={"LLMC_DEBUG_DUMP_DIR": os.path.join(cls.directory, "dump")})
        for ranks in (2, 4):
            batch = str(GLOBAL_WINDOWS // ranks)
            for mode in ("none", "rs", "full"):
                cls.train(f"np{ranks}_{mode}", ranks, no_clip + ["-b", batch, "--overlap", mode])
        cls.train("np1_clip", 1, clip + ["-b", "4"])
        cls.train("np2_clip_none", 2, clip + ["-b", "2", "--overlap", "none"])
        cls.train("np2_clip_full", 2, clip + ["-b", "2", "--overlap", "full"])
        cls.train("np4_clip_rs", 4, clip + ["-b", "1", "--overlap", "rs"])
        # Gradient accumulation: 2 micro-steps per optimizer step, same 4 windows per step.
        accum = no_clip + ["--total-batch-tokens", str(GLOBAL_WINDOWS * 16)]
        cls.train("np1_accum", 1, accum + ["-b", "2"])
        cls.train("np2_accum", 2, accum + ["-b", "1", "--overlap", "full"])

    def test_parameters_move_far_more_than_the_tolerance(self):
        # Otherwise agreement within PARAM_TOL would say nothing.
        initial = mr.read_model_params(os.path.join(self.directory, "dump", "model.bin"))
        final = self.runs["np1"].final_params(STEPS)
        self.assertGreater(float(np.max(np.abs(final - initial))), 10 * PARAM_TOL)
        self.assertGreater(float(np.median(np.abs(final - initial))), PARAM_TOL)

    def test_n_ranks_match_one_rank_in_every_mode(self):
        for ranks in (2, 4):
            for mode in ("none", "rs", "full"):
                with self.subTest(ranks=ranks, mode=mode):
                    self.assert_close_runs(self.runs[f"np{ranks}_{mode}"], self.runs["np1"], f"{ranks} ranks {mode}")

    def test_modes_agree_bitwise(self):
        for ranks in (2, 4):
            for mode in ("none", "rs"):
                with self.subTest(ranks=ranks, mode=mode):
                    self.assert_identical_runs(self.runs[f"np{ranks}_{mode}"], self.runs[f"np{ranks}_full"],
                                               f"{ranks} ranks: {mode} vs full")

    def test_clipping(self):
        reference = self.runs["np1_clip"]
        self.assert_ok(reference)
        self.assertTrue(any(float(norm) > 1.0 for _, norm, _ in reference.steps.values()),
                        "the gradient norm never exceeds the clip threshold: clipping is not exercised")
        clipped_vs_not = float(np.max(np.abs(reference.final_params(STEPS) - self.runs["np1"].final_params(STEPS))))
        self.assertGreater(clipped_vs_not, 10 * PARAM_TOL, "clipping did not change the parameters")
        for name in ("np2_clip_none", "np2_clip_full", "np4_clip_rs"):
            with self.subTest(run=name):
                self.assert_close_runs(self.runs[name], reference, name)
        self.assert_identical_runs(self.runs["np2_clip_none"], self.runs["np2_clip_full"], "clipping: none vs full")

    def test_gradient_accumulation(self):
        for name in ("np1_accum", "np2_accum"):
            with self.subTest(run=name):
                self.assertIn("grad_accum=2", self.runs[name].stdout)
                self.assert_close_runs(self.runs[name], self.runs["np1"], name)

    def test_optimizer_state_is_sharded_and_reported(self):
        # The header reports this rank's master + m + v bytes; each rank's state file holds the same arrays.
        for name, ranks in (("np1", 1), ("np2_full", 2), ("np4_full", 4)):
            run = self.runs[name]
            self.assert_ok(run)
            reported = [int(line.split("optimizer_state/rank:")[1].split("B")[0])
                        for line in run.stdout.splitlines() if "optimizer_state/rank:" in line]
            self.assertEqual(len(reported), 1, run.stdout[:2000])
            states = sorted(glob.glob(run.checkpoint(STEPS) + "_state_rank*.bin"))
            self.assertEqual(len(states), ranks)
            for path in states:
                self.assertEqual(sum(array.nbytes for array in mr.read_state(path)[1:]), reported[0], path)
                self.assertEqual(os.path.getsize(path) - mr.STATE_HEADER_BYTES - 3 * mr.STATE_RECORD_BYTES,
                                 reported[0], path)
            run.state_bytes = reported[0]
        total = self.runs["np1"].state_bytes
        num_params = self.runs["np1"].final_params(STEPS).size
        # fp32 master, m, v of every parameter (1 rank: padding only up to 32-element alignment).
        self.assertGreaterEqual(total, 3 * 4 * num_params)
        self.assertLess(total, 3 * 4 * (num_params + 32 * (2 + 2 + 16 * 2)))
        for name, ranks in (("np2_full", 2), ("np4_full", 4)):
            # 1/N of it, up to the padding: llmc/family/param_layout.h rounds each of the L + 2 buckets up to a
            # multiple of N * 32 elements so that the N shards are equal and aligned.
            padding_bytes = 3 * 4 * (2 + 2) * ranks * 32
            self.assertGreaterEqual(self.runs[name].state_bytes * ranks, total, name)
            self.assertLess(self.runs[name].state_bytes * ranks, total + padding_bytes, name)


def speedrun_tiny_shard(directory, name, seed, stride):
    """A shard of 4,096 tokens of a noisy counter below speedrun-tiny's V = 96 in directory/name; its glob."""
    data = os.path.join(directory, name)
    os.makedirs(data)
    rng = np.random.default_rng(seed)
    tokens = (np.arange(4096) * stride + rng.integers(0, 3, 4096)) % 96
    mr.write_shard(os.path.join(data, "train_000001.bin"), tokens)
    return os.path.join(data, "train_*.bin")


def slices_by_step(trace):
    steps = {}
    for event in trace:
        steps.setdefault(event["args"]["step"], []).append(event)
    return steps


def end(event):
    return event["ts"] + event["dur"]


class TraceOrder(MultiRankCase):
    """What the Chrome traces show about the overlap (2 ranks, a 12-layer model so that the backward
    after the last layer lasts much longer than one bucket's reduce-scatter and update)."""
    LAYERS = 12

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        model = os.path.join(cls.directory, "l12.bin")
        mr.write_model(model, cls.LAYERS, 4, 32, 32, 100, seed=7)
        args = ["--model", model, "-t", "32", "-b", "2", "--steps", str(STEPS), "--lr", str(LR), "--grad-clip", "0"]
        for mode in ("none", "rs", "full"):
            cls.train(f"trace_{mode}", 2, args + ["--overlap", mode, "--trace", os.path.join(cls.directory, f"trace_{mode}")])

    def traces(self, mode):
        self.assert_ok(self.runs[f"trace_{mode}"])
        files = mr.trace_files(os.path.join(self.directory, f"trace_{mode}"))
        self.assertEqual([os.path.basename(f) for f in files], ["trace_rank0.json", "trace_rank1.json"])
        return [slices_by_step(mr.load_trace(path)) for path in files]

    def backward(self, slices, label):
        found = [s for s in slices if s["tid"] == 1 and s["name"] == "backward " + label]
        self.assertEqual(len(found), 1, label)
        return found[0]

    def test_full_mode_streams_under_the_backward(self):
        # Every step: the first reduce-scatter starts (on this rank's comm stream, right after the
        # first bucket is final) before layer 0's backward ends -- a local ordering, ~100 ms of margin.
        # The last layer's update also needs the other rank to reach its reduce-scatter; emulated ranks
        # share two busy cores, so a descheduled rank can delay it in any one step. It must finish
        # before the backward ends in at least one step per rank: impossible unless updates stream
        # (rs mode, below, never does it), and robust to a starved step.
        last_layer_bucket = self.LAYERS  # bucket of layer L-1 (bucket 0 = embeddings)
        for rank, steps in enumerate(self.traces("full")):
            self.assertEqual(sorted(steps), list(range(STEPS)))
            streamed_steps = []
            for step, slices in steps.items():
                with self.subTest(rank=rank, step=step):
                    backward_end = end(self.backward(slices, "embeddings"))
                    layer0_end = end(self.backward(slices, "layer 0"))
                    reduce_scatters = [s for s in slices if s["name"] == "reduce_scatter"]
                    self.assertEqual(len(reduce_scatters), self.LAYERS + 2)
                    self.assertTrue(all(s["tid"] == 2 and s["args"]["bytes"] > 0 for s in reduce_scatters))
                    first_rs = min(reduce_scatters, key=lambda s: s["ts"])
                    self.assertLess(first_rs["ts"], layer0_end, "first reduce-scatter starts after layer 0's backward")
                    update = [s for s in slices if s["name"] == "adamw_shard" and s["args"]["bucket"] == last_layer_bucket]
                    self.assertEqual(len(update), 1)
                    if end(update[0]) < backward_end:
                        streamed_steps.append(step)
            self.assertGreater(len(streamed_steps), 0,
                               f"rank {rank}: the last layer's update never finished before the backward ended")

    def test_rs_mode_updates_after_the_backward(self):
        # The negative control of the test above: same trace, updates held back.
        for steps in self.traces("rs"):
            for slices in steps.values():
                backward_end = end(self.backward(slices, "embeddings"))
                first_rs = min((s for s in slices if s["name"] == "reduce_scatter"), key=lambda s: s["ts"])
                self.assertLess(first_rs["ts"], end(self.backward(slices, "layer 0")))
                for update in (s for s in slices if s["name"] == "adamw_shard"):
                    self.assertGreaterEqual(update["ts"], backward_end)

    def test_none_mode_communicates_only_after_the_backward(self):
        for steps in self.traces("none"):
            for slices in steps.values():
                backward_end = end(self.backward(slices, "embeddings"))
                collectives = [s for s in slices if s["name"] in ("reduce_scatter", "all_gather")]
                self.assertEqual(len(collectives), 2 * (self.LAYERS + 2))
                for collective in collectives:
                    self.assertGreaterEqual(collective["ts"], backward_end, collective)

    def test_log_reports_comm_figures_per_step(self):
        for mode in ("none", "full"):
            lines = [line for _, _, line in self.runs[f"trace_{mode}"].steps.values()]
            self.assertEqual(len(lines), STEPS)
            for line in lines:
                match = mr.OVERLAP_FIELDS.search(line)
                self.assertIsNotNone(match, line)
                comm, exposed, overlapped = map(float, match.groups())
                self.assertGreater(comm, 0.0, line)
                self.assertLessEqual(exposed, comm + 0.01, line)
                if mode == "none":  # nothing overlaps the collectives there, but the next step's
                    self.assertLess(overlapped, 100.0, line)  # forward may cover late all-gathers


class MissingWait(MultiRankCase):
    """A mutant run whose forward does not wait for the all-gather of a bucket must give different
    results; the emulated NCCL delays each collective (LLMC_EMU_NCCL_DELAY_MS) so the race is certain."""

    def test_dropped_param_wait_is_caught(self):
        args = common_args(steps=2) + ["--grad-clip", "0", "-b", "2", "--overlap", "full"]
        delay = {"LLMC_EMU_NCCL_DELAY_MS": "150"}
        plain = self.train("plain", 2, args)
        delayed = self.train("delayed", 2, args, extra_env=delay)
        mutant = self.train("mutant", 2, args, extra_env=dict(delay, **DROP_PARAM_WAIT))
        for run in (plain, delayed, mutant):
            self.assertEqual(run.returncode, 0, run.describe())
        reference = plain.final_params(2)
        # The correct build is immune to the delay: bitwise the same parameters.
        self.assertTrue(np.array_equal(delayed.final_params(2), reference), "the delay changed a correct run")
        # The mutant reads parameters before their all-gather lands: it must not match.
        difference = float(np.max(np.abs(mutant.final_params(2) - reference)))
        print(f"mutant vs correct: max parameter difference {difference:.3g}", file=sys.stderr)
        self.assertGreater(difference, PARAM_TOL,
                           f"the build without the param_ready wait matched the correct one (max diff {difference:.3g})")


class RankFailure(MultiRankCase):
    """Rank 1 cannot read its shard: every rank stops non-zero within seconds, with the cause."""

    def test_unreadable_shard_on_rank_1_stops_every_rank(self):
        missing = os.path.join(self.directory, "data", "missing_000001.bin")
        good = ["--train-data", self.train_data] + COMMON + ["-b", "2"]
        bad = ["--train-data", missing] + COMMON + ["-b", "2"]
        output_dir = os.path.join(self.directory, "failing")
        common = ["--oversubscribe", "--bind-to", "none"]
        command = ([MPIEXEC, "-np", "1"] + common + [TRAINER] + good + ["-o", output_dir] +
                   [":", "-np", "1"] + common + [TRAINER] + bad + ["-o", output_dir])
        start = time.monotonic()
        run = mr.run_trainer(MPIEXEC, 2, TRAINER, [], output_dir, timeout=60, command=command)
        elapsed = time.monotonic() - start
        self.assertNotEqual(run.returncode, 0, run.describe())
        self.assertLess(elapsed, 30.0, run.describe())
        output = run.stdout + run.stderr
        self.assertIn("rank 1:", output, run.describe())
        self.assertIn("missing_000001.bin", output, run.describe())
        self.assertNotIn("step:1/", run.stdout, "rank 0 trained although rank 1 failed")


class SpeedrunModel(MultiRankCase):
    """The speedrun model's buckets (head, blocks 11..1, embeddings) through the same ZeRO-1 machinery:
    2 ranks, one packed sequence each, match 1 rank accumulating the same two sequences, and the
    overlap modes agree bitwise."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.train_data = speedrun_tiny_shard(cls.directory, "speedrun_data", seed=96, stride=5)
        args = ["--model", "speedrun-tiny", "-b", "1", "-t", "64", "--steps", str(STEPS), "--lr", str(LR),
                "--lr-schedule", "constant", "--weight-decay", "0.1", "--grad-clip", "0", "--seed", "7",
                "--optimizer", "zero-adamw"]
        cls.train("np1_accum", 1, args + ["--total-batch-tokens", "128"],
                  extra_env={"LLMC_DEBUG_DUMP_DIR": os.path.join(cls.directory, "speedrun_dump")})
        cls.train("np2_full", 2, args + ["--overlap", "full"])
        cls.train("np2_none", 2, args + ["--overlap", "none"])

    def test_two_ranks_match_one_rank_accumulating(self):
        self.assertIn("model: speedrun V=96", self.runs["np1_accum"].stdout)
        self.assertIn("grad_accum=2", self.runs["np1_accum"].stdout)
        # The same fp32 reduction-order argument as for GPT-2 (PARAM_TOL above), over T = 64 positions.
        self.assert_close_runs(self.runs["np2_full"], self.runs["np1_accum"], "speedrun: 2 ranks vs 1")
        # ... which says something only if the parameters move far more than that.
        initial = mr.read_speedrun_params(os.path.join(self.directory, "speedrun_dump", "model.bin"))
        moved = np.abs(self.runs["np1_accum"].final_params(STEPS) - initial)
        self.assertGreater(float(np.max(moved)), 10 * PARAM_TOL)
        self.assertGreater(float(np.median(moved)), PARAM_TOL)

    def test_overlap_modes_agree_bitwise(self):
        self.assert_identical_runs(self.runs["np2_none"], self.runs["np2_full"], "speedrun: none vs full")


class BosLoader(MultiRankCase):
    """--train-loader bos with B > 1, on GPT-2 d1 (whose vocabulary holds the BOS token): each step deals
    4 sequences of T+1 tokens from whole documents, rank r's micro-step k, row b taking sequence
    (k*B + b) * ranks + r. 2 ranks of B=2 and 1 rank of B=2 accumulating 2 micro-steps therefore train on
    exactly the batches of 1 rank of B=4, and match it within the reduction-order tolerance; step 1's
    batch is the shard's documents packed in order, as an independent dealing in numpy has them."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        rng = np.random.default_rng(50256)
        data = os.path.join(cls.directory, "bos_data")
        os.makedirs(data)
        # Documents of 3..40 tokens (a noisy counter, as the other classes' data) after a BOS each, behind
        # the tail of a document cut by the shard's start (skipped).
        cls.documents, tokens = [], [7, 8, 9]
        while len(tokens) < 4096:
            start = int(rng.integers(0, 100))
            body = [(start + 7 * i + int(rng.integers(0, 3))) % 100 for i in range(int(rng.integers(3, 41)))]
            cls.documents.append([50256] + body)
            tokens += cls.documents[-1]
        mr.write_shard(os.path.join(data, "train_000001.bin"), tokens)
        cls.train_data = os.path.join(data, "train_*.bin")
        args = ["--model", "d1", "-t", "16", "--steps", str(STEPS), "--lr", str(LR), "--lr-schedule", "constant",
                "--weight-decay", "0.1", "--seed", "1337", "--train-loader", "bos"]
        cls.train("np1_b4", 1, args + ["-b", "4"],
                  extra_env={"LLMC_DEBUG_DUMP_DIR": os.path.join(cls.directory, "bos_dump")})
        cls.train("np2_b2", 2, args + ["-b", "2"])
        cls.train("np1_accum", 1, args + ["-b", "2", "--total-batch-tokens", "64"])

    def test_step_one_is_the_documents_packed_in_order(self):
        T, rows = 16, []
        document = 0
        for _ in range(4):  # sequence s takes whole documents until it holds T+1 tokens; the last one is cut
            row = []
            while len(row) < T + 1:
                row += self.documents[document][:T + 1 - len(row)]
                document += 1
            rows.append(row)
        with open(os.path.join(self.directory, "bos_dump", "inputs.bin"), "rb") as f:
            inputs = np.frombuffer(f.read(), dtype=np.int32).reshape(4, T)
        with open(os.path.join(self.directory, "bos_dump", "targets.bin"), "rb") as f:
            targets = np.frombuffer(f.read(), dtype=np.int32).reshape(4, T)
        self.assertEqual(inputs.tolist(), [row[:T] for row in rows])
        self.assertEqual(targets.tolist(), [row[1:] for row in rows])

    def test_ranks_and_accumulation_match_one_big_batch(self):
        for name in ("np1_b4", "np2_b2", "np1_accum"):
            self.assertIn("# train loader: bos (documents cut to 2048 tokens, sequences/step=4)",
                          self.runs[name].stdout)
        self.assert_close_runs(self.runs["np2_b2"], self.runs["np1_b4"], "bos: 2 ranks x B=2 vs 1 rank x B=4")
        self.assert_close_runs(self.runs["np1_accum"], self.runs["np1_b4"], "bos: 2 micro-steps x B=2 vs B=4")
        # ... which says something only if the parameters move far more than the tolerance.
        initial = mr.read_model_params(os.path.join(self.directory, "bos_dump", "model.bin"))
        moved = np.abs(self.runs["np1_b4"].final_params(STEPS) - initial)
        self.assertGreater(float(np.max(moved)), 10 * PARAM_TOL)


class SpeedrunOptimizer(MultiRankCase):
    """The speedrun optimizer (NorMuon + sharded Adam, --optimizer speedrun) in the trainer: 2 ranks, one
    packed sequence each, match 1 rank accumulating the same two sequences in losses and gradient norms,
    and the overlap modes agree bitwise (full writing a checkpoint after every step, none and rs only the
    last: checkpoints change nothing); a 2-rank checkpoint resumes bit for bit on 2 ranks, and checkpoints
    re-shard 2 -> 1 and 1 -> 2. The optimizer's parameters themselves are compared bitwise across 1, 2 and 4 ranks by
    test/optim/test_speedrun_optimizer.cu."""

    ARGS = ["--model", "speedrun-tiny", "-b", "1", "-t", "64", "--steps", str(STEPS), "--lr", "1.0",
            "--lr-schedule", "constant", "--grad-clip", "0", "--seed", "7", "--optimizer", "speedrun"]

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.train_data = speedrun_tiny_shard(cls.directory, "speedrun_optimizer_data", seed=97, stride=7)
        args = cls.ARGS
        cls.train("np1_accum", 1, args + ["--total-batch-tokens", "128", "--checkpoint-every", "1"])
        for mode in ("none", "rs", "full"):
            every_step = ["--checkpoint-every", "1"] if mode == "full" else []
            cls.train(f"np2_{mode}", 2, args + ["--overlap", mode] + every_step)
            cls.train(f"trace_{mode}", 2, args + ["--overlap", mode, "--trace", os.path.join(cls.directory,
                                                                                               f"trace_{mode}")])

    def traces(self, mode):
        self.assert_ok(self.runs[f"trace_{mode}"])
        files = mr.trace_files(os.path.join(self.directory, f"trace_{mode}"))
        self.assertEqual(len(files), 2)
        return [slices_by_step(mr.load_trace(path)) for path in files]

    def test_resume_with_two_ranks_is_bitwise(self):
        # After step 1 (odd 1-based: no Adam yet, its local gradients saved for step 2) on 2 ranks: steps 2..4
        # and the last checkpoint's files byte for byte those of the uninterrupted run (the state files but
        # for the train-time word and the checksum over it).
        whole = self.runs["np2_full"]
        self.assert_ok(whole)
        args = self.ARGS
        resumed = self.train("np2_resumed", 2, args + ["--resume", whole.checkpoint(1)])
        self.assertEqual(resumed.returncode, 0, resumed.describe())
        self.assertEqual(sorted(resumed.steps), list(range(2, STEPS + 1)), resumed.describe())
        for step in range(2, STEPS + 1):
            self.assertEqual(resumed.steps[step][:2], whole.steps[step][:2], f"step {step}")
        with open(resumed.checkpoint(STEPS) + "_model.bin", "rb") as a, \
                open(whole.checkpoint(STEPS) + "_model.bin", "rb") as b:
            self.assertTrue(a.read() == b.read(), "model files differ")
        for rank in range(2):
            states = []
            for run in (resumed, whole):
                with open(run.checkpoint(STEPS) + f"_state_rank{rank}.bin", "rb") as f:
                    state = bytearray(f.read())
                for word in (14, 31):  # the train time and the checksum over it
                    state[word * 8:word * 8 + 8] = bytes(8)
                states.append(state)
            self.assertTrue(states[0] == states[1], f"rank {rank}: state files differ")

    def test_resume_on_another_number_of_ranks_is_resharded(self):
        # 2 ranks -> 1 after step 1 (the saved local Adam gradients become their mean over the old ranks) and
        # 1 -> 2 after step 2 (Adam's moments and the Muon state move to their new owners): the resumed steps
        # agree with the uninterrupted run on the new ranks as 2 ranks agree with 1 (the fp32 reduction order).
        args = self.ARGS
        moves = (("np1_from_np2", 1, self.runs["np2_full"], 1, self.runs["np1_accum"], ["--total-batch-tokens", "128"]),
                 ("np2_from_np1", 2, self.runs["np1_accum"], 2, self.runs["np2_full"], []))
        for name, ranks, writer, after, reference, extra in moves:
            with self.subTest(name):
                self.assert_ok(writer)
                resumed = self.train(name, ranks, args + extra + ["--resume", writer.checkpoint(after)])
                self.assertEqual(resumed.returncode, 0, resumed.describe())
                self.assertIn(f"(written by {3 - ranks} ranks, optimizer state re-sharded)", resumed.stdout)
                self.assertEqual(sorted(resumed.steps), list(range(after + 1, STEPS + 1)), resumed.describe())
                for step in range(after + 1, STEPS + 1):
                    (loss, norm, line), (ref_loss, ref_norm, ref_line) = resumed.steps[step], reference.steps[step]
                    self.assertLessEqual(abs(float(loss) - float(ref_loss)), PRINTED_TOL, f"{line} vs {ref_line}")
                    self.assertLessEqual(abs(float(norm) - float(ref_norm)), PRINTED_TOL * float(ref_norm),
                                         f"{line} vs {ref_line}")

    def test_full_mode_starts_both_optimizers_under_the_backward(self):
        # In full mode the first Muon reduce (block 11's gradients to their owner, on the comm stream), on Adam steps
        # (odd 0-based, the trace's step numbers) the head's reduce-scatter, and block 11's NorMuon (the
        # update track, tid 3) all start after block 11's backward, ~100 ms before the embeddings' backward
        # ends. Emulated ranks share two busy cores, so a descheduled stream worker or a late partner can
        # push any one of them past the end in one step (as in TraceOrder): each must start under the
        # backward in at least one step per rank. Only the start is asked of the update: in rs mode (below)
        # no update starts before the backward's end, so the start tells the modes apart, while its end
        # also depends on how long the emulated Polar Express takes beside a loaded core's other ranks
        # (a CI run on 2 busy cores once saw rank 1 finish none of its 4 under the backward).
        for rank, steps in enumerate(self.traces("full")):
            self.assertEqual(sorted(steps), list(range(STEPS)))
            under = {"muon_reduce": [], "reduce_scatter": [], "muon_update": []}
            for step, slices in steps.items():
                with self.subTest(rank=rank, step=step):
                    backward_end = max(end(s) for s in slices if s["tid"] == 1 and s["name"].startswith("backward"))
                    muon_reduces = [s for s in slices if s["name"] == "muon_reduce"]
                    self.assertEqual(len(muon_reduces), 11 + 1)  # blocks 11..1 and the smear gate's
                    reduce_scatters = [s for s in slices if s["name"] == "reduce_scatter"]
                    self.assertEqual(len(reduce_scatters), 2 if step % 2 == 1 else 0)  # head, embeddings
                    updates = [s for s in slices if s["name"] == "muon_update"]
                    self.assertTrue(updates and all(s["tid"] == 3 for s in updates))
                    if min(s["ts"] for s in muon_reduces) < backward_end:
                        under["muon_reduce"].append(step)
                    if reduce_scatters and min(s["ts"] for s in reduce_scatters) < backward_end:
                        under["reduce_scatter"].append(step)
                    if min(s["ts"] for s in updates) < backward_end:
                        under["muon_update"].append(step)
            for what, found in under.items():
                self.assertGreater(len(found), 0, f"rank {rank}: no {what} under the backward in any step")

    def test_rs_mode_updates_after_the_backward(self):
        for steps in self.traces("rs"):
            for slices in steps.values():
                backward_end = max(end(s) for s in slices if s["tid"] == 1 and s["name"].startswith("backward"))
                for update in (s for s in slices if s["name"] in ("muon_update", "adam_update")):
                    self.assertGreaterEqual(update["ts"], backward_end)

    def test_two_ranks_match_one_rank_accumulating(self):
        reference = self.runs["np1_accum"]
        self.assert_ok(reference)
        self.assertIn("optimizer: speedrun", reference.stdout)
        run = self.runs["np2_full"]
        self.assert_ok(run)
        # The fp32 reduction-order differences of SpeedrunModel above, through NorMuon and Adam: the printed
        # losses and norms agree (the losses move by ~0.1 a step, so a lost update would show).
        for step in range(1, STEPS + 1):
            (loss, norm, line), (ref_loss, ref_norm, ref_line) = run.steps[step], reference.steps[step]
            self.assertLessEqual(abs(float(loss) - float(ref_loss)), PRINTED_TOL, f"{line} vs {ref_line}")
            self.assertLessEqual(abs(float(norm) - float(ref_norm)), PRINTED_TOL * float(ref_norm),
                                 f"{line} vs {ref_line}")
        self.assertLess(float(run.steps[STEPS][0]), float(run.steps[1][0]) - 0.05)

    def test_overlap_modes_agree_bitwise(self):
        for mode in ("none", "rs"):
            run = self.runs[f"np2_{mode}"]
            self.assert_ok(run)
            for step in range(1, STEPS + 1):
                self.assertEqual(run.steps[step][:2], self.runs["np2_full"].steps[step][:2], f"{mode}, step {step}")


class Modded89Optimizer(MultiRankCase):
    """The 2026-07-17 record's optimizer (NorMuon banks + Adam with the tied head, --optimizer auto with
    modded89-tiny) in the trainer, on its lr, loss and batch schedules over 6 steps (stages from 0/2/3/5 with
    sequences of 16, 32 and 48 tokens, Adam on the odd 0-based steps, tied through the untie at step 3, untied at
    5): 2 and 4 ranks, one sequence each, match 1 rank accumulating as many in losses and gradient norms; the
    overlap modes agree bitwise; the step-3 checkpoint of 2 ranks resumes across the stage boundary and the untie
    bit for bit on 2 ranks and re-sharded on 1; and the traces show which collectives start before the backward
    ends. The optimizer's parameters themselves are compared bitwise across 1, 2 and 4 ranks by
    test/optim/test_modded89_optimizer.cu. These runs use the bf16 MLP: the FP8 MLP's delayed activation scale is
    each rank's own, as the record's, so 1 rank accumulating two sequences updates it between them where 2 ranks do
    not (docs/fp8.md); its state's own resume on 2 ranks is test_fp8_mlp_resumes_bit_for_bit_on_two_ranks."""
    STEPS = 6
    ARGS = ["--model", "modded89-tiny", "-b", "1", "-t", "48", "--steps", str(STEPS), "--lr", "1.0",
            "--lr-schedule", "modded89", "--loss-schedule", "modded89", "--batch-schedule", "modded89",
            "--seed", "7", "--fp8-mlp", "off"]

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.train_data = speedrun_tiny_shard(cls.directory, "modded89_optimizer_data", seed=89, stride=5)
        for ranks in (2, 4):
            tokens = ["--total-batch-tokens", str(48 * ranks)]
            every = ["--checkpoint-every", "3"] if ranks == 2 else []
            cls.train(f"np1_accum{ranks}", 1, cls.ARGS + tokens)
            cls.train(f"np{ranks}_full", ranks, cls.ARGS + tokens + every + [
                "--overlap", "full", "--trace", os.path.join(cls.directory, f"trace_np{ranks}")])
        for mode in ("none", "rs"):
            cls.train(f"np2_{mode}", 2, cls.ARGS + ["--total-batch-tokens", "96", "--overlap", mode])
        cls.train("np2_dense", 2, cls.ARGS + ["--total-batch-tokens", "96", "--bigram-exchange", "dense"])
        middle = cls.runs["np2_full"].checkpoint(3)
        for ranks in (2, 1):
            cls.train(f"np{ranks}_from_np2", ranks, cls.ARGS + ["--total-batch-tokens", "96", "--resume", middle])
        fp8 = cls.ARGS[:-1] + ["on", "--total-batch-tokens", "96"]
        cls.train("np2_fp8", 2, fp8 + ["--checkpoint-every", "3"])
        cls.train("np2_fp8_from_np2", 2, fp8 + ["--resume", cls.runs["np2_fp8"].checkpoint(3)])

    def assert_ok(self, run):
        self.assertEqual(run.returncode, 0, run.describe())
        self.assertEqual(sorted(run.steps), list(range(1, self.STEPS + 1)), run.describe())

    def test_ranks_match_one_rank_accumulating(self):
        for ranks in (2, 4):
            reference, run = self.runs[f"np1_accum{ranks}"], self.runs[f"np{ranks}_full"]
            self.assert_ok(reference)
            self.assert_ok(run)
            self.assertIn("optimizer: speedrun, the 2026-07-17 recipe", run.stdout)
            # The fp32 reduction-order differences (per-rank partial sums, then the collectives' sums) through
            # NorMuon and Adam stay below the printed digits; the loss falls by far more, so a lost update shows.
            for step in range(1, self.STEPS + 1):
                (loss, norm, line), (ref_loss, ref_norm, ref_line) = run.steps[step], reference.steps[step]
                self.assertLessEqual(abs(float(loss) - float(ref_loss)), PRINTED_TOL, f"{line} vs {ref_line}")
                self.assertLessEqual(abs(float(norm) - float(ref_norm)), PRINTED_TOL * float(ref_norm),
                                     f"{line} vs {ref_line}")
            self.assertLess(float(run.steps[self.STEPS][0]), float(run.steps[1][0]) - 0.05)

    def test_overlap_modes_agree_bitwise(self):
        for mode in ("none", "rs"):
            run = self.runs[f"np2_{mode}"]
            self.assert_ok(run)
            for step in range(1, self.STEPS + 1):
                self.assertEqual(run.steps[step][:2], self.runs["np2_full"].steps[step][:2], f"{mode}, step {step}")

    def test_sparse_bigram_exchange_is_the_dense_reduce_scatter(self):
        # The bigram table's gradient as the touched rows sent to their owners (the default) or as its bucket's
        # reduce-scatter: on 2 ranks the emulated reduce-scatter's mean is the same fp32 sum of two values divided
        # by 2 and rounded once, so the runs agree bit for bit, their final model files included. The resumed run
        # of test_resumes_across_the_stage_boundary_and_the_untie exchanges every row at step 4 (the checkpoint
        # does not say which rows its saved gradients touched) and agrees bit for bit too.
        dense, sparse = self.runs["np2_dense"], self.runs["np2_full"]
        self.assert_ok(dense)
        for step in range(1, self.STEPS + 1):
            self.assertEqual(dense.steps[step][:2], sparse.steps[step][:2], f"step {step}")
        with open(dense.checkpoint(6) + "_model.bin", "rb") as a, open(sparse.checkpoint(6) + "_model.bin", "rb") as b:
            self.assertTrue(a.read() == b.read(), "model files differ")

    def test_resumes_across_the_stage_boundary_and_the_untie(self):
        # Steps 4-6 are stage 3 (T 48) and the extension, step 4 the untie's update: on 2 ranks bit for bit (the
        # final checkpoints too), re-sharded on 1 rank as close to the 2-rank run as 1 rank accumulating is.
        whole, same, fewer = self.runs["np2_full"], self.runs["np2_from_np2"], self.runs["np1_from_np2"]
        for run in (same, fewer):
            self.assertEqual(run.returncode, 0, run.describe())
            self.assertEqual(sorted(run.steps), [4, 5, 6], run.describe())
        self.assertIn("(written by 2 ranks, optimizer state re-sharded)", fewer.stdout)
        self.assertIn("# batch: step 4 (schedule step 3) T=48", same.stdout)
        for step in (4, 5, 6):
            self.assertEqual(same.steps[step][:2], whole.steps[step][:2], f"step {step}")
            (loss, norm, line), (ref_loss, ref_norm, ref_line) = fewer.steps[step], whole.steps[step]
            self.assertLessEqual(abs(float(loss) - float(ref_loss)), PRINTED_TOL, f"{line} vs {ref_line}")
            self.assertLessEqual(abs(float(norm) - float(ref_norm)), PRINTED_TOL * float(ref_norm),
                                 f"{line} vs {ref_line}")
        # The final checkpoints: the same model file and, after each header (its timings), the same state arrays.
        with open(same.checkpoint(6) + "_model.bin", "rb") as a, open(whole.checkpoint(6) + "_model.bin", "rb") as b:
            self.assertTrue(a.read() == b.read(), "model files differ")
        for rank in range(2):
            with open(same.checkpoint(6) + f"_state_rank{rank}.bin", "rb") as a, \
                    open(whole.checkpoint(6) + f"_state_rank{rank}.bin", "rb") as b:
                self.assertTrue(a.read()[mr.STATE_HEADER_BYTES:] == b.read()[mr.STATE_HEADER_BYTES:],
                                f"rank {rank}'s optimizer state differs")

    def test_fp8_mlp_resumes_bit_for_bit_on_two_ranks(self):
        # Each rank's delayed FP8 scales travel in its own state file: the resumed run continues the whole one.
        whole, resumed = self.runs["np2_fp8"], self.runs["np2_fp8_from_np2"]
        self.assert_ok(whole)
        self.assertIn("# mlp: fp8 training forward (--fp8-mlp on)", whole.stdout)
        self.assertEqual(resumed.returncode, 0, resumed.describe())
        for step in (4, 5, 6):
            self.assertEqual(resumed.steps[step][:2], whole.steps[step][:2], f"step {step}")
        self.assertNotEqual(whole.steps[6][:2], self.runs["np2_full"].steps[6][:2], "the FP8 MLP changes the run")

    def traces(self, ranks):
        self.assert_ok(self.runs[f"np{ranks}_full"])
        files = mr.trace_files(os.path.join(self.directory, f"trace_np{ranks}"))
        self.assertEqual(len(files), ranks)
        return [slices_by_step(mr.load_trace(path)) for path in files]

    def test_full_mode_streams_the_banks_and_defers_only_the_tied_head(self):
        # Every step the layers' bank reduces follow their backward; on Adam steps the tables' reduce-scatters
        # too. On a tied Adam step (1, 3) the head's reduce-scatter waits for the embeddings' backward (the head
        # absorbs the embedding's gradient first: tie_head_grad), the one collective that waits for the backward's
        # end; untied (step 5) it follows the head's own backward. What the emulated ranks' scheduling decides
        # (a reduce starting before the backward's last slice ends) must happen in at least one step per rank.
        for ranks in (2, 4):
            for rank, steps in enumerate(self.traces(ranks)):
                self.assertEqual(sorted(steps), list(range(self.STEPS)))
                under = {"muon_reduce": 0, "adam reduce_scatter": 0, "untied head reduce_scatter": 0}
                for step, slices in steps.items():
                    with self.subTest(ranks=ranks, rank=rank, step=step):
                        backward = [s for s in slices if s["tid"] == 1 and s["name"].startswith("backward")]
                        backward_end = max(end(s) for s in backward)
                        head = next(s["args"]["bucket"] for s in backward if s["name"] == "backward head")
                        embeddings = next(s for s in backward if s["name"] == "backward embeddings")
                        reduces = [s for s in slices if s["name"] == "muon_reduce"]
                        self.assertTrue(reduces)
                        under["muon_reduce"] += min(s["ts"] for s in reduces) < backward_end
                        scatters = [s for s in slices if s["name"] == "reduce_scatter"]
                        ties = [s for s in slices if s["name"] == "tie_head_grad"]
                        if step % 2 == 0:
                            self.assertEqual((scatters, ties), ([], []))
                            continue
                        self.assertTrue(scatters)
                        under["adam reduce_scatter"] += min(s["ts"] for s in scatters) < backward_end
                        head_scatter = [s for s in scatters if s["args"]["bucket"] == head]
                        self.assertEqual(len(head_scatter), 1)
                        if step <= 3:  # tied
                            self.assertEqual(len(ties), 1)
                            self.assertGreaterEqual(ties[0]["ts"], end(embeddings))
                            self.assertGreaterEqual(head_scatter[0]["ts"], end(ties[0]))
                        else:
                            self.assertEqual(ties, [])
                            under["untied head reduce_scatter"] += head_scatter[0]["ts"] < backward_end
                for what, found in under.items():
                    self.assertGreater(found, 0, f"{ranks} ranks, rank {rank}: no {what} under the backward")

    def test_traced_collectives_are_the_benchmarks(self):
        # Each step's traced collectives on every rank (name, bucket, bytes) are exactly those the plan lists for
        # its kind of step (bench_speedrun_collectives --json: NorMuon only on even 0-based steps, Adam on odd ones,
        # the untie's moment gathers at step 3): the benchmark's calls and bytes at the full model are the trainer's.
        # (This trainer is the fp32 build: 4-byte parameters.)
        bench = os.environ.get("LLMC_BENCH_SPEEDRUN_COLLECTIVES", "")
        self.assertTrue(os.path.exists(bench), f"bench_speedrun_collectives not found: '{bench}' (run through ctest)")
        listed = subprocess.run([bench, "--model", "modded89-tiny", "--world", "2,4", "--element-bytes", "4", "--json"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(listed.returncode, 0, listed.stderr)
        plans = json.loads(listed.stdout)
        # The bigram table's sparse exchange (bucket 0, Adam steps) sends what the tokens touched: the benchmark
        # estimates its bytes, so here its name and bucket are compared, and its bytes bounded by the rows touched.
        names = {"muon_reduce", "reduce_scatter", "broadcast", "all_gather", "all_reduce", "sparse_rows"}
        row_bytes = 4 * 32  # modded89-tiny: C = 32, fp32 build
        for ranks in (2, 4):
            for rank, steps in enumerate(self.traces(ranks)):
                for step, slices in steps.items():
                    kind = "untie" if step == 3 else "adam" if step % 2 == 1 else "muon"
                    key = lambda name, bucket, size: (name, bucket, -1 if name == "sparse_rows" else size)
                    expected = sorted(key(c["name"], c["bucket"], c["bytes"]) for c in plans[str(ranks)][kind]
                                      if c["traced"])
                    seen = sorted(key(s["name"], s["args"].get("bucket", -1), s["args"]["bytes"]) for s in slices
                                  if s["name"] in names)
                    self.assertEqual(seen, expected, f"{ranks} ranks, rank {rank}, step {step} ({kind})")
                    for exchange in (s for s in slices if s["name"] == "sparse_rows"):
                        self.assertEqual(exchange["args"]["bucket"], 0)
                        self.assertGreater(exchange["args"]["rows"], 0)
                        # A row that straddles two shards goes to both owners: at most ranks - 1 such rows.
                        self.assertLessEqual(exchange["args"]["bytes"],
                                             (exchange["args"]["rows"] + ranks - 1) * row_bytes)


class Resume(MultiRankCase):
    """Checkpoints hold the model once, each rank's optimizer shard and a manifest; a 2-rank resume
    continues bitwise."""

    def test_resume_with_two_ranks_is_bitwise(self):
        args = COMMON + ["--grad-clip", "1.0", "-b", "2", "--overlap", "full"]
        whole = self.train("whole", 2, args + ["--checkpoint-every", "2"])
        self.assert_ok(whole)
        middle = whole.checkpoint(2)
        self.assertEqual(sorted(os.path.basename(p) for p in glob.glob(middle + "_*")),
                         ["ckpt_000002_manifest.json", "ckpt_000002_model.bin", "ckpt_000002_state_rank0.bin",
                          "ckpt_000002_state_rank1.bin"])
        manifest = mr.read_manifest(middle)
        self.assertEqual((manifest["step"], manifest["world_size"]), (2, 2))
        self.assertEqual({f["name"]: f["bytes"] for f in manifest["files"]},
                         {os.path.basename(p): os.path.getsize(p) for p in glob.glob(middle + "_*.bin")})
        # The model once: the whole parameter vector in one llm.c file, not one per rank.
        num_params = mr.read_model_params(middle + "_model.bin").size
        self.assertEqual(os.path.getsize(middle + "_model.bin"), 1024 + 4 * num_params)
        resumed = self.train("resumed", 2, args + ["--resume", middle])
        self.assertEqual(resumed.returncode, 0, resumed.describe())
        self.assertIn("resumed from", resumed.stdout)
        self.assertEqual(sorted(resumed.steps), [3, 4], resumed.describe())
        for step in (3, 4):
            self.assertEqual(resumed.steps[step][:2], whole.steps[step][:2], f"step {step}")
        self.assert_same_checkpoints(resumed.checkpoint(4), whole.checkpoint(4))


class Reshard(MultiRankCase):
    """A checkpoint written by N ranks resumes on M (2->1, 1->4, 4->2): the optimizer state is
    re-sharded, and the resumed run agrees with an uninterrupted run on M ranks with the same global
    batch within the tolerances of Equivalence (the two differ only in the fp32 reduction order of
    steps 1..2)."""
    MOVES = ((2, 1), (1, 4), (4, 2))

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        args = COMMON + ["--grad-clip", "0"]
        for ranks in (1, 2, 4):
            cls.train(f"whole_np{ranks}", ranks, args + ["-b", str(GLOBAL_WINDOWS // ranks), "--checkpoint-every", "2"])
        for old, new in cls.MOVES:
            cls.train(f"np{old}_to_np{new}", new, args + ["-b", str(GLOBAL_WINDOWS // new),
                                                          "--resume", cls.runs[f"whole_np{old}"].checkpoint(2)])

    def test_resumed_runs_match_an_uninterrupted_run_on_the_new_ranks(self):
        for old, new in self.MOVES:
            with self.subTest(old=old, new=new):
                run, reference = self.runs[f"np{old}_to_np{new}"], self.runs[f"whole_np{new}"]
                self.assertEqual(run.returncode, 0, run.describe())
                self.assertIn(f"(written by {old} ranks, optimizer state re-sharded)", run.stdout)
                self.assertEqual(sorted(run.steps), [3, 4], run.describe())
                for step in (3, 4):
                    (loss, norm, line), (ref_loss, ref_norm, ref_line) = run.steps[step], reference.steps[step]
                    self.assertLessEqual(abs(float(loss) - float(ref_loss)), PRINTED_TOL, f"{line} vs {ref_line}")
                    self.assertLessEqual(abs(float(norm) - float(ref_norm)), PRINTED_TOL, f"{line} vs {ref_line}")
                worst = float(np.max(np.abs(run.final_params(STEPS) - reference.final_params(STEPS))))
                self.assertLessEqual(worst, PARAM_TOL, f"final parameters differ by up to {worst:.3g}")
                # The re-sharded moments are those of the new layout: each rank's file as large as the
                # uninterrupted run's, and Adam's second moments agree as the parameters do.
                for rank in range(new):
                    ours = mr.read_state(run.checkpoint(STEPS) + f"_state_rank{rank}.bin")
                    theirs = mr.read_state(reference.checkpoint(STEPS) + f"_state_rank{rank}.bin")
                    self.assertEqual(ours[1].shape, theirs[1].shape)
                    self.assertLessEqual(float(np.max(np.abs(ours[1] - theirs[1]))), PARAM_TOL)

    def test_losing_the_optimizer_state_would_be_caught(self):
        # The negative control: two steps from the step-2 model without its optimizer state and data
        # position (what a resume that lost them would do) end far more than the tolerance away.
        args = [a if a != "tiny" else self.runs["whole_np1"].checkpoint(2) + "_model.bin" for a in common_args(2)]
        fresh = self.train("fresh_np1", 1, args + ["--grad-clip", "0", "-b", "4"])
        self.assertEqual(fresh.returncode, 0, fresh.describe())
        worst = float(np.max(np.abs(fresh.final_params(2) - self.runs["whole_np1"].final_params(STEPS))))
        self.assertGreater(worst, 10 * PARAM_TOL)


class StopSignals(MultiRankCase):
    """A stop signal sent to mpirun or to one rank stops every rank after the same step with a complete
    checkpoint, from which the run continues bit for bit."""
    # Never reached: the run must end by the signal, whenever it arrives (mpirun may hold SIGTERM back for
    # odls_base_sigkill_timeout, 3 s below, some 60 steps on a quiet machine).
    LONG = 100000
    AFTER = 4  # steps run after the stop, by the resumed run and by the uninterrupted one

    def long_args(self):
        return ["--train-data", self.train_data] + common_args(self.LONG) + ["-b", "2"]

    def stop(self, name, signal_number, target, mpi_options=()):
        """Starts a 2-rank run, sends the signal to `target` ('mpirun' or a rank) once step 2 is logged;
        returns the run, its exit status and the step it stopped after."""
        run = mr.start_trainer(MPIEXEC, 2, TRAINER, self.long_args(), os.path.join(self.directory, name),
                               mpi_options=mpi_options)
        run.read_until("step:2/")
        pid = run.process.pid if target == "mpirun" else run.rank_pid(target)
        os.kill(pid, signal_number)
        status = run.finish(timeout=120)
        # Read rank 0's log.txt, not the merged stdout+stderr: another rank's stderr line about the signal
        # can land inside rank 0's stdout line there.
        with open(os.path.join(run.output_dir, "log.txt")) as log:
            log_text = log.read()
        match = re.search(r"(?m)^# stopped by signal (SIG\w+) at step (\d+); resume with --resume (\S+)$",
                          log_text)
        self.assertIsNotNone(match, run.describe())
        self.assertEqual(match.group(1), signal.Signals(signal_number).name)
        step = int(match.group(2))
        self.assertLess(step, self.LONG, run.describe())
        prefix = os.path.join(run.output_dir, f"ckpt_{step:06d}")
        self.assertEqual(match.group(3), prefix)
        manifest = mr.read_manifest(prefix)  # complete: both ranks' state files of the same step
        self.assertEqual((manifest["step"], manifest["world_size"]), (step, 2))
        self.assertEqual(sorted(f["name"] for f in manifest["files"]),
                         [f"ckpt_{step:06d}_{kind}.bin" for kind in ("model", "state_rank0", "state_rank1")])
        for entry in manifest["files"]:
            self.assertEqual(os.path.getsize(os.path.join(run.output_dir, entry["name"])), entry["bytes"])
        return run, status, step

    def test_sigterm_to_mpirun_then_resume_is_bitwise(self):
        # Open MPI's mpirun passes SIGTERM on after odls_base_sigkill_timeout seconds and SIGKILLs the
        # ranks as long after (README); 3 s leaves the ranks ample time for a step and the checkpoint.
        # The lr is constant, so --steps does not change the trajectory: the resumed run and the
        # uninterrupted one both end AFTER steps past the stop.
        run, status, step = self.stop("sigterm_mpirun", signal.SIGTERM, "mpirun",
                                      mpi_options=["--mca", "odls_base_sigkill_timeout", "3"])
        self.assertNotEqual(status, 0, run.describe())
        end = step + self.AFTER
        resumed = self.train("sigterm_mpirun", 2, common_args(end) + ["-b", "2", "--resume", "latest"])
        self.assertEqual(resumed.returncode, 0, resumed.describe())
        whole = self.train("whole", 2, common_args(end) + ["-b", "2"])
        self.assertEqual(whole.returncode, 0, whole.describe())
        self.assert_same_checkpoints(resumed.checkpoint(end), whole.checkpoint(end))

    def test_sigusr1_to_mpirun_exits_75(self):
        run, status, _ = self.stop("sigusr1_mpirun", signal.SIGUSR1, "mpirun")
        self.assertEqual(status, 75, run.describe())

    def test_sigterm_to_one_rank_stops_both(self):
        run, status, _ = self.stop("sigterm_rank1", signal.SIGTERM, 1)
        self.assertEqual(status, 75, run.describe())


class CudaGraphs(MultiRankCase):
    """train_gpt2 --cuda-graphs on 2 ranks: each micro-step one graph launch with its collectives inside (the Muon
    reduces and broadcasts, the Adam buckets' reduce-scatters and all-gathers, the scalars' and the norm's
    all-reduces, the untie's), watched again at each replay. It trains the same bits as --cuda-graphs off: the
    2026-07-17 model with the dense bigram exchange over its lr, loss and batch schedules, and the 2025-10-31 model
    over its lr and window schedules; every loss and norm, and the final model files.
    The sparse exchange, whose counts are the host's per step, is refused."""
    STEPS = 16
    MODELS = {
        "modded89": ["--model", "modded89-tiny", "-t", "48", "--total-batch-tokens", "96", "--lr", "1.0",
                     "--lr-schedule", "modded89", "--loss-schedule", "modded89", "--batch-schedule", "modded89"],
        "speedrun": ["--model", "speedrun-tiny", "-t", "64", "--total-batch-tokens", "128", "--lr-schedule",
                     "speedrun", "--window-schedule", "speedrun"],
    }

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.train_data = speedrun_tiny_shard(cls.directory, "graphs_data", seed=27, stride=5)
        for name, model in cls.MODELS.items():
            args = model + ["-b", "1", "--steps", str(cls.STEPS), "--checkpoint-every", str(cls.STEPS), "--seed", "3",
                            "--bigram-exchange", "dense"]
            for graphs in ("off", "on"):
                cls.train(f"{name}_{graphs}", 2, args + ["--cuda-graphs", graphs])

    def test_graphs_train_the_same_bits_on_two_ranks(self):
        for name in self.MODELS:
            eager, graphs = self.runs[f"{name}_off"], self.runs[f"{name}_on"]
            for run in (eager, graphs):
                self.assertEqual(run.returncode, 0, run.describe())
                self.assertEqual(sorted(run.steps), list(range(1, self.STEPS + 1)), run.describe())
            for step in range(1, self.STEPS + 1):
                self.assertEqual(graphs.steps[step][:2], eager.steps[step][:2], f"{name}, step {step}")
            captured, launches = map(int, re.search(r"(?m)^# cuda graphs: (\d+) captured, (\d+) launches$",
                                                     graphs.stdout).groups())
            self.assertGreater(launches, captured, f"{name}: graphs replayed")
            with open(graphs.checkpoint(self.STEPS) + "_model.bin", "rb") as a, \
                    open(eager.checkpoint(self.STEPS) + "_model.bin", "rb") as b:
                self.assertTrue(a.read() == b.read(), f"{name}: model files differ")

    def test_sparse_bigram_exchange_is_refused(self):
        run = self.train("sparse_refused", 2, self.MODELS["modded89"] + ["-b", "1", "--steps", "4", "--cuda-graphs",
                                                                          "on"])
        self.assertNotEqual(run.returncode, 0, run.describe())
        self.assertIn("--cuda-graphs: the sparse bigram exchange's row counts are the host's", run.stdout + run.stderr)


class Watchdog(MultiRankCase):
    """Rank 1 stopped with SIGSTOP: rank 0 waits for it, its watchdog names the step and what it waits
    for and ends the job within seconds, and the last complete checkpoint resumes."""
    TIMEOUT = 5  # s; a tiny emulated step takes ~0.1 s

    def test_stopped_rank_ends_the_job_and_the_last_checkpoint_resumes(self):
        args = (["--train-data", self.train_data] + common_args(100000) +
                ["-b", "2", "--checkpoint-every", "5", "--timeout", str(self.TIMEOUT)])
        run = mr.start_trainer(MPIEXEC, 2, TRAINER, args, os.path.join(self.directory, "stalled"))
        run.read_until("step:12/")
        stopped = time.monotonic()
        os.kill(run.rank_pid(1), signal.SIGSTOP)
        status = run.finish(timeout=120)
        elapsed = time.monotonic() - stopped
        self.assertEqual(status, 124, run.describe())
        self.assertLess(elapsed, self.TIMEOUT + 15, run.describe())
        self.assertRegex(run.output(),
                         r"(?m)^rank 0: watchdog: (step|checkpoint after step) (\d+) has not finished after [\d.]+s "
                         r"\(limit 5s, --timeout 5s\); "
                         r"(waiting for (reduce_scatter|all_gather) of bucket \d+ \([\w +]+\)|"
                         r"waiting for all_reduce of the gradient norm|no collective is unfinished on this rank's "
                         r"device \(the host waits\)).*; ending all ranks$")
        resumed = self.train("stalled", 2, common_args(20) + ["-b", "2", "--resume", "latest"])
        self.assertEqual(resumed.returncode, 0, resumed.describe())
        self.assertRegex(resumed.stdout, r"# resumed from .*ckpt_0000(10|15) at step (10|15)")


if __name__ == "__main__":
    unittest.main()
