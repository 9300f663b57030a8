#!/usr/bin/env python3
"""Tests of the train_gpt2 program as a user runs it: the loss falls, two runs are bitwise identical,
a resumed run continues bit for bit, a NaN stops the run keeping the last good checkpoint, bad input
gives a clear error and a non-zero exit, the log reads as modded-nanogpt's, --help matches README, and
--sample-every logs samples without changing the training.
Robustness (docs/robustness.md): a stop signal ends the run with a checkpoint from which it resumes bit
for bit, a second SIGINT stops at once, damaged checkpoints are refused naming the file, old checkpoints
are pruned, and a full disk (a real one: a small tmpfs in a private mount namespace) stops the run with
the previous checkpoint intact and no temporary file left.

Usage: test_train_program.py --trainer PATH [--mpiexec PATH] [--require-gpu] [--part NAME] [unittest args]
(CTest passes the emulated build, one test per --part so that CTest runs them side by side; with --require-gpu it
exits 77, "skipped: no GPU", without one).
Tiny token shards are written with numpy into a temp dir; every run is the "tiny" preset (30k params),
but the samples' runs: d1, which has GPT-2's vocabulary.
"""
import argparse
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from bench_recipes import write_speedrun_model  # noqa: E402  (a speedrun model file with GPT-2's vocabulary)
SETTINGS = {"trainer": None, "mpiexec": None, "gpus": None}  # gpus: None for the emulated build

SHARD_MAGIC, SHARD_VERSION = 20240520, 1
# llmc/checkpoint/state_file.cpp: the state file's int64 header word 14 = train time (us), 31 = the checksum (which
# covers the time).
STATE_TIME_WORD, STATE_CHECKSUM_WORD = 14, 31
EXIT_STOPPED_BY_SIGNAL, EXIT_INTERRUPTED = 75, 130
B, T, VOCAB = 4, 16, 100  # the "tiny" preset has T=16, V=100

# The line forms that modded-nanogpt prints and its log readers match (integer train_time in ms,
# step_avg with two decimals); ours may add fields after them.
TRAIN_LINE = re.compile(r"^step:(\d+)/(\d+) train_loss:(\d+\.\d+) train_time:(\d+)ms step_avg:(\d+\.\d+)ms")
VAL_LINE = re.compile(r"^step:(\d+)/(\d+) val_loss:(\d+\.\d+) train_time:(\d+)ms step_avg:(\d+\.\d+)ms")
MPI_ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
VOCAB_DIR = os.path.join(os.environ.get("LLMC_SHARED_DIR", os.path.join(REPO, "..", "shared")), "data", "gpt2")


def write_shard(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [SHARD_MAGIC, SHARD_VERSION, len(tokens)]
    with open(path, "wb") as out:
        out.write(header.tobytes())
        out.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def run(args, timeout=120, mpi_ranks=0, extra_env=None):
    command = [SETTINGS["trainer"]] + [str(a) for a in args]
    if mpi_ranks:
        command = [SETTINGS["mpiexec"], "-np", str(mpi_ranks), "--oversubscribe", "--bind-to", "none"] + command
    env = dict(os.environ, **MPI_ROOT_ENV, **(extra_env or {}))
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def losses(log_text, pattern=TRAIN_LINE):
    """{step: loss string} of the train (or val) lines: strings, so equality is bitwise as printed."""
    return {int(m.group(1)): m.group(3) for m in map(pattern.match, log_text.splitlines()) if m}


def read(path):
    with open(path, "rb") as handle:
        return handle.read()


def state_without_time(path):
    """A rank's state file with the train-time word (the only field that depends on the clock) and the
    checksum, which covers it, zeroed."""
    data = bytearray(read(path))
    for word in (STATE_TIME_WORD, STATE_CHECKSUM_WORD):
        data[word * 8:word * 8 + 8] = bytes(8)
    return bytes(data)


def flip_bit(path, offset):
    data = bytearray(read(path))
    data[offset] ^= 0x08
    with open(path, "wb") as out:
        out.write(data)


def start(args, extra_env=None):
    """The trainer as a running process whose stdout the test reads line by line."""
    env = dict(os.environ, **MPI_ROOT_ENV, **(extra_env or {}))
    return subprocess.Popen([SETTINGS["trainer"]] + [str(a) for a in args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def read_until(process, prefix, stream=None):
    """Lines of stdout (or `stream`) up to and including the first that starts with `prefix`."""
    lines = []
    for line in stream or process.stdout:
        lines.append(line)
        if line.startswith(prefix):
            return lines
    raise AssertionError(f"the trainer ended before printing '{prefix}':\n{''.join(lines)}")


def can_mount_tmpfs():
    """A private mount namespace with a tmpfs (root, and a kernel that allows unshare -m)."""
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                            "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True)
    return probe.returncode == 0



def expected_window_lines(change_steps):
    """The log's window lines of a run whose long window goes 3 -> 7 -> 11 -> 13 blocks (short 3, 5, 6) at these
    train steps, then 20 for the final validation: YaRN multiplies the attention scale by 1 + 0.2 ln(new / old)
    at each change (docs/recipes.md: 0.116946, 0.127518, 0.131778)."""
    scale, old, lines = 0.1, 3, []
    for step, short, new in zip(change_steps, (3, 5, 6), (7, 11, 13)):
        scale *= 1 + 0.2 * np.log(new / old)
        old = new
        lines.append(f"# windows: step {step} (schedule step {step - 1}) short {short} long {new} blocks, "
                     f"attn_scale {scale:.6f} (YaRN)")
    lines.append(f"# windows: final validation short 6 long 20 blocks, attn_scale {scale:.6f}")
    return lines

class TrainProgram(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="test_train_program_")
        rng = np.random.default_rng(0)
        # A period-37 token sequence: learnable (each token predicts the next) but not trivially so.
        pattern = rng.integers(0, VOCAB, size=37)
        stream = np.tile(pattern, 20)
        # Two train shards of three batches each: ten steps cross an epoch (and, with --shuffle, reorder).
        per_shard = 3 * B * T + 1
        write_shard(f"{cls.tmp}/toy_train_000001.bin", stream[:per_shard])
        write_shard(f"{cls.tmp}/toy_train_000002.bin", stream[per_shard:2 * per_shard])
        write_shard(f"{cls.tmp}/toy_val_000000.bin", stream[100:100 + 4 * B * T + 1])
        cls.data_args = ["--train-data", f"{cls.tmp}/toy_train_*.bin", "--val-data", f"{cls.tmp}/toy_val_*.bin",
                         "-b", B, "-t", T]
        cls.tiny_args = cls.data_args + ["--model", "tiny"]
        cls.run_args = cls.tiny_args + ["--steps", 10, "--lr", "1e-2", "--warmup-steps", 2, "--weight-decay", "0.1",
                                        "--shuffle", "--val-tokens", 2 * B * T, "--val-every", 5,
                                        "--checkpoint-every", 5]
        cls.first = cls.train_run("first", cls.run_args)
        cls.second = cls.train_run("second", cls.run_args)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def train_run(cls, name, args):
        out_dir = f"{cls.tmp}/{name}"
        result = run(args + ["-o", out_dir])
        if result.returncode != 0:
            raise AssertionError(f"run {name} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
        with open(f"{out_dir}/log.txt", encoding="utf-8") as handle:
            return out_dir, handle.read()

    def expect_failure(self, args, *needles, mpi_ranks=0, extra_env=None):
        result = run(args, mpi_ranks=mpi_ranks, extra_env=extra_env)
        output = result.stdout + result.stderr
        self.assertNotEqual(result.returncode, 0, f"expected a failure:\n{output}")
        for needle in needles:
            self.assertRegex(output, needle)
        return output

    def expect_resumes_and_starts_from_its_file(self, name, args, data, out_dir, train):
        """A 6-step run's step-3 checkpoint resumed repeats steps 4-6 bit for bit; its final model file starts a
        run; a truncated copy fails naming the file. Returns the final model file's path."""
        resumed = f"{self.tmp}/{name}_resumed"
        os.makedirs(resumed)
        for file in ("ckpt_000003_model.bin", "ckpt_000003_state_rank0.bin", "ckpt_000003_manifest.json"):
            shutil.copy(f"{out_dir}/{file}", resumed)
        _, resumed_log = self.train_run(f"{name}_resumed", args + ["--resume", "latest"])
        self.assertEqual(losses(resumed_log), {s: l for s, l in train.items() if s > 3})
        self.assertEqual(read(f"{resumed}/ckpt_000006_model.bin"), read(f"{out_dir}/ckpt_000006_model.bin"))
        model_file = f"{out_dir}/ckpt_000006_model.bin"
        started = run(data + ["--steps", 1, "--model", model_file])
        self.assertEqual(started.returncode, 0, started.stdout + started.stderr)
        self.assertIn(f"from {model_file}", started.stdout)
        truncated = f"{self.tmp}/{name}_truncated.bin"
        with open(truncated, "wb") as handle:
            handle.write(read(model_file)[:-10])
        self.expect_failure(data + ["--steps", 1, "--model", truncated], re.escape(truncated), r"truncated model file")
        return model_file

    # ---- training ----------------------------------------------------------------------------------
    def test_loss_falls(self):
        train = losses(self.first[1])
        self.assertEqual(sorted(train), list(range(1, 11)))
        # Uniform guessing over 100 tokens scores ln(100) = 4.61 at init; a period-37 sequence is learnable.
        self.assertAlmostEqual(float(train[1]), np.log(VOCAB), delta=0.2)
        self.assertLess(float(train[10]), 0.8 * float(train[1]))
        val = losses(self.first[1], VAL_LINE)
        self.assertEqual(sorted(val), [5, 10])
        self.assertLess(float(val[10]), float(val[5]))

    def test_speedrun_model_trains_resumes_and_starts_from_its_file(self):
        # speedrun-tiny: V=96, T<=64, one packed sequence per micro-step (-b 1), trained here by the AdamW ZeRO
        # path (--optimizer zero-adamw; auto would pick the speedrun optimizer: its checkpoints are tested in
        # test_speedrun_optimizer_resumes_bit_for_bit).
        rng = np.random.default_rng(1)
        write_shard(f"{self.tmp}/sr_train_000001.bin", np.tile(rng.integers(0, 96, size=29), 40))
        data = ["--train-data", f"{self.tmp}/sr_train_*.bin", "-b", 1, "-t", 64, "--lr", "3e-3",
                "--optimizer", "zero-adamw"]
        args = data + ["--model", "speedrun-tiny", "--steps", 6, "--checkpoint-every", 3]
        out_dir, log = self.train_run("speedrun", args)
        self.assertIn("# model: speedrun V=96 L=12 H=2 D=16", log)
        train = losses(log)
        self.assertEqual(sorted(train), list(range(1, 7)))
        # The zero-initialised head gives uniform logits: ln(96) at the first step (the record (docs/recipes.md)).
        self.assertAlmostEqual(float(train[1]), np.log(96), delta=1e-3)
        self.assertLess(float(train[6]), float(train[1]))
        model_file = self.expect_resumes_and_starts_from_its_file("speedrun", args, data, out_dir, train)
        self.expect_failure(data[:2] + ["--model", "speedrun-tiny", "-b", 2, "-t", 64, "--steps", 1], r"--batch-size 2")

    def test_modded89_model_trains_accumulates_resumes_and_starts_from_its_file(self):
        # modded89-tiny: the 2026-07-17 record's model (V=96, T<=64, one packed sequence per micro-step), trained
        # by its record's optimizer (--optimizer auto) on its lr schedule; 128 tokens per step at -t 64 are two
        # micro-steps. 6 steps: stages from 0/2/3/5, the untie at 3 (0-based): the resume from step 3 crosses it.
        rng = np.random.default_rng(3)
        write_shard(f"{self.tmp}/m89_train_000001.bin", np.tile(rng.integers(0, 96, size=29), 40))
        data = ["--train-data", f"{self.tmp}/m89_train_*.bin", "-b", 1, "-t", 64, "--lr", "1.0",
                "--total-batch-tokens", 128]
        args = data + ["--model", "modded89-tiny", "--steps", 6, "--checkpoint-every", 3, "--lr-schedule", "modded89",
                       "--loss-schedule", "modded89"]
        out_dir, log = self.train_run("modded89", args)
        self.assertIn("# model: modded89 V=96 H=2 D=16", log)
        self.assertIn("# optimizer: speedrun, the 2026-07-17 recipe", log)
        self.assertIn("# modded89 schedule: 5 scheduled + 1 extension steps, stages from 0/2/3/5, untie at 3", log)
        self.assertIn("prefix_loss=off", log)  # V = 96 holds no GPT-2 tokens (test_modded89_model: the table)
        self.assertRegex(log, r"(?m)^# head: fp8 \(--fp8-head auto\)")  # the record's head, where it fits
        # and its FP8 MLP: the resume below continues its delayed scales from the checkpoint
        self.assertRegex(log, r"(?m)^# mlp: fp8 training forward \(--fp8-mlp auto\)$")
        train = losses(log)
        self.assertEqual(sorted(train), list(range(1, 7)))
        # The N(0, 0.005) head gives near-uniform logits: each row scores its next-token weights (1, 0.5, 0.25;
        # the last two rows lose the terms past the sequence) times ln 96; no prefix table, no prefix term.
        T = 64
        self.assertAlmostEqual(float(train[1]), ((T - 2) * 1.75 + 1.5 + 1.0) / T * np.log(96), delta=0.02)
        self.assertLess(float(train[6]), float(train[1]))
        model_file = self.expect_resumes_and_starts_from_its_file("modded89", args, data, out_dir, train)
        self.assertEqual(struct.unpack("<i", read(model_file)[:4])[0], 20260717)
        self.expect_failure(data[:2] + ["--model", "modded89-tiny", "-b", 2, "-t", 64, "--steps", 1], r"--batch-size 2")
        self.expect_failure(data[:2] + ["--model", "modded89-tiny", "-b", 1, "-t", 40, "--steps", 1,
                                        "--fp8-head", "on"], r"--fp8-head on: the FP8 head needs --seq-len \(40\)")
        # The family has a decoder (test_modded89_model: its logits); samples then need GPT-2's vocabulary.
        self.expect_failure(data[:2] + ["--model", "modded89-tiny", "-b", 1, "-t", 64, "--steps", 1, "--sample-every",
                                        1, "--vocab", VOCAB_DIR],
                            r"rank 0: --sample-every: the model's vocabulary has 96 tokens; samples need GPT-2's")

    def test_modded89_fp8_mlp_trains_and_refuses_what_it_cannot_do(self):
        # --fp8-mlp on: the 2026-07-17 model's training forward runs its MLPs in FP8 (test_modded89_fp8_mlp: the
        # arithmetic); its buffers are planned, and the steps after the first move away from the bf16 MLP's
        # (c_proj starts at zero, so step 1 is the same in both). Resuming with it: the modded89 test above.
        rng = np.random.default_rng(5)
        write_shard(f"{self.tmp}/m89f_train_000001.bin", np.tile(rng.integers(0, 96, size=31), 40))
        data = ["--train-data", f"{self.tmp}/m89f_train_*.bin", "-b", 1, "-t", 64, "--lr", "1.0",
                "--total-batch-tokens", 128, "--model", "modded89-tiny", "--steps", 3]
        runs = {}
        for mode in ("on", "off"):
            _, log = self.train_run(f"modded89_fp8_mlp_{mode}", data + ["--fp8-mlp", mode])
            self.assertRegex(log, rf"(?m)^# mlp: {'fp8' if mode == 'on' else 'bf16'} training forward "
                                  rf"\(--fp8-mlp {mode}\)$")
            active = int(re.search(r"(?m)^# head: .*, activations (\d+) bytes$", log).group(1))
            runs[mode] = (losses(log), active)
        self.assertEqual(sorted(runs["on"][0]), [1, 2, 3])
        self.assertEqual(runs["on"][0][1], runs["off"][0][1])
        self.assertNotEqual(runs["on"][0][3], runs["off"][0][3])
        self.assertGreater(runs["on"][1], runs["off"][1])
        self.expect_failure(self.tiny_args + ["--steps", 1, "--fp8-mlp", "on"],
                            r"--fp8-mlp on: only the 2026-07-17 model")
        self.expect_failure(data[:4] + ["-t", 40, "--model", "modded89-tiny", "--steps", 1, "--fp8-head", "off",
                                        "--fp8-mlp", "on"], r"--fp8-mlp on: the FP8 MLP needs --seq-len \(40\)")

    def test_wgmma_gemms_train_as_cublas_and_refuse_what_they_cannot_do(self):
        # --wgmma-gemms on: the speedrun models' MLP GEMMs with ReLU^2 in their epilogues (test_wgmma_gemm and the two
        # model tests: the arithmetic; the 2026-07-17 model's forward stays FP8 here, --fp8-mlp auto, its backward
        # takes the epilogue). Its GEMMs sum in another order than cuBLASLt's, so the runs agree to the bf16
        # build's loss tolerance of the model tests (1e-2), not bitwise; step 1 is equal (c_proj starts at zero,
        # so the MLP adds nothing yet).
        rng = np.random.default_rng(6)
        write_shard(f"{self.tmp}/wm_train_000001.bin", np.tile(rng.integers(0, 96, size=29), 40))
        data = ["--train-data", f"{self.tmp}/wm_train_*.bin", "-b", 1, "-t", 64, "--lr", "1.0"]
        models = {"speedrun-tiny": ["--steps", 8, "--lr-schedule", "constant"],
                  "modded89-tiny": ["--steps", 6, "--total-batch-tokens", 128, "--lr-schedule", "modded89",
                                    "--loss-schedule", "modded89"]}
        for model, args in models.items():
            runs = {}
            for mode in ("on", "off"):
                _, log = self.train_run(f"wgmma_gemms_{model}_{mode}", data + ["--model", model] + args +
                                        ["--wgmma-gemms", mode])
                note = "wgmma, the elementwise work in the epilogues" if mode == "on" else \
                    "cuBLASLt, the elementwise work in passes apart"
                self.assertRegex(log, rf"(?m)^# epilogue GEMMs: {note} \(--wgmma-gemms {mode}\)$")
                runs[mode] = losses(log)
            steps = args[1]
            self.assertEqual(sorted(runs["on"]), list(range(1, steps + 1)), model)
            self.assertEqual(runs["on"][1], runs["off"][1], model)
            for step in range(1, steps + 1):
                self.assertAlmostEqual(float(runs["on"][step]), float(runs["off"][step]),
                                       delta=1e-2 * float(runs["off"][step]), msg=f"{model} step {step}")
            self.assertLess(float(runs["on"][steps]), float(runs["on"][1]), model)
        self.expect_failure(self.tiny_args + ["--steps", 1, "--wgmma-gemms", "on"],
                            r"--wgmma-gemms on: only the speedrun models")

    def test_speedrun_optimizer_trains_and_refuses_what_it_cannot_do(self):
        # --optimizer auto picks NorMuon + sharded Adam for a speedrun model (llmc/optim/speedrun_optimizer.h).
        rng = np.random.default_rng(2)
        write_shard(f"{self.tmp}/so_train_000001.bin", np.tile(rng.integers(0, 96, size=29), 40))
        data = ["--train-data", f"{self.tmp}/so_train_*.bin", "-b", 1, "-t", 64, "--model", "speedrun-tiny"]
        args = data + ["--steps", 8, "--lr", "1.0", "--lr-schedule", "constant"]  # --grad-clip: off by default
        out_dir, log = self.train_run("speedrun_optimizer", args)
        self.assertIn("# optimizer: speedrun (NorMuon + sharded Adam)\n", log)
        train = losses(log)
        self.assertEqual(sorted(train), list(range(1, 9)))
        # The head starts at zero and is an Adam tensor, which waits for step 2's gradients: uniform logits twice.
        self.assertAlmostEqual(float(train[1]), np.log(96), delta=1e-3)
        self.assertEqual(train[2], train[1])
        self.assertLess(float(train[8]), float(train[1]) - 0.1)
        # With -o the last step's checkpoint, and only it (no --checkpoint-every).
        self.assertEqual(sorted(name for name in os.listdir(out_dir) if name.startswith("ckpt_")),
                         ["ckpt_000008_manifest.json", "ckpt_000008_model.bin", "ckpt_000008_state_rank0.bin"])
        # --overlap none enqueues everything after the backward: the same bits.
        _, none_log = self.train_run("speedrun_optimizer_none", args + ["--overlap", "none"])
        self.assertEqual(losses(none_log), train)
        self.expect_failure(data + ["--steps", 1, "--grad-clip", 1],
                            r"--optimizer speedrun has no gradient clipping: drop --grad-clip or pass 0")
        self.expect_failure(self.tiny_args + ["--steps", 1, "--optimizer", "speedrun", "--grad-clip", 0],
                            r"--optimizer speedrun needs a speedrun model")

    def test_speedrun_optimizer_resumes_bit_for_bit(self):
        # The speedrun optimizer's state (NorMuon masters, momentum and variance; Adam's moments; after an odd
        # step, the local Adam gradients it saved for the next step) in every checkpoint, with the speedrun lr
        # and window schedules (YaRN): resumed after step 3 (gradients saved) and after step 4 (none saved),
        # the losses, the last model file and the last state file are those of the uninterrupted run.
        rng = np.random.default_rng(4)
        write_shard(f"{self.tmp}/sr_ckpt_train_000001.bin", np.tile(rng.integers(0, 96, size=29), 40))
        args = ["--train-data", f"{self.tmp}/sr_ckpt_train_*.bin", "-b", 1, "-t", 64, "--model", "speedrun-tiny",
                "--steps", 6, "--lr", "1.0", "--lr-schedule", "speedrun", "--window-schedule", "speedrun"]
        out_dir, log = self.train_run("so_every_step", args + ["--checkpoint-every", 1])
        train = losses(log)
        self.assertEqual(sorted(train), list(range(1, 7)))
        # Writing checkpoints changes nothing: the run that writes only the last one has the same bits.
        final_dir, final_log = self.train_run("so_final_only", args)
        self.assertEqual(losses(final_log), train)
        self.assertEqual(read(f"{final_dir}/ckpt_000006_model.bin"), read(f"{out_dir}/ckpt_000006_model.bin"))
        for step in (3, 4):
            with self.subTest(resumed_after=step):
                resumed = f"{self.tmp}/so_resumed_{step}"
                os.makedirs(resumed)
                for suffix in ("model.bin", "state_rank0.bin", "manifest.json"):
                    shutil.copy(f"{out_dir}/ckpt_{step:06d}_{suffix}", resumed)
                _, resumed_log = self.train_run(f"so_resumed_{step}", args + ["--resume", "latest"])
                self.assertIn(f"# resumed from {resumed}/ckpt_{step:06d} at step {step}", resumed_log)
                self.assertEqual(losses(resumed_log), {s: l for s, l in train.items() if s > step})
                self.assertEqual(read(f"{resumed}/ckpt_000006_model.bin"), read(f"{out_dir}/ckpt_000006_model.bin"))
                self.assertEqual(state_without_time(f"{resumed}/ckpt_000006_state_rank0.bin"),
                                 state_without_time(f"{out_dir}/ckpt_000006_state_rank0.bin"))
        # Only odd steps' states hold the saved Adam gradients.
        self.assertTrue(b"adam.saved_grads" in read(f"{out_dir}/ckpt_000003_state_rank0.bin"))
        self.assertFalse(b"adam.saved_grads" in read(f"{out_dir}/ckpt_000004_state_rank0.bin"))
        # Another optimizer than the checkpoint's: one line naming the state file and both optimizers.
        state = f"{out_dir}/ckpt_000004_state_rank0.bin"
        output = self.expect_failure(args + ["--optimizer", "zero-adamw", "--resume", f"{out_dir}/ckpt_000004"],
                                     re.escape(state) + r": holds the state of --optimizer speedrun, this run uses "
                                     r"--optimizer zero-adamw")
        self.assertEqual(len([line for line in output.splitlines() if "holds the state" in line]), 1)

    def test_speedrun_fp8_head(self):
        # --fp8-head on: the training forward and backward of the head on (emulated) FP8 GEMMs; the header says
        # which head trains and the activation bytes (the FP8 workspace and fp32 dW_head included).
        rng = np.random.default_rng(3)
        write_shard(f"{self.tmp}/fp8_train_000001.bin", np.tile(rng.integers(0, 96, size=29), 40))
        # --optimizer auto: the speedrun optimizer, whose base lrs --lr multiplies.
        data = ["--train-data", f"{self.tmp}/fp8_train_*.bin", "-b", 1, "-t", 64, "--lr", "1.0", "--steps", 6]
        _, log = self.train_run("fp8_head", data + ["--model", "speedrun-tiny", "--fp8-head", "on"])
        fp8_bytes = int(re.search(r"(?m)^# head: fp8 \(--fp8-head on\), activations (\d+) bytes$", log).group(1))
        train = losses(log)
        self.assertEqual(sorted(train), list(range(1, 7)))
        self.assertTrue(all(np.isfinite(float(loss)) for loss in train.values()))
        self.assertAlmostEqual(float(train[1]), np.log(96), delta=1e-3)  # the zero head: uniform logits
        self.assertLess(float(train[6]), float(train[1]))
        _, bf16_log = self.train_run("bf16_head", data + ["--model", "speedrun-tiny", "--fp8-head", "off"])
        bf16_bytes = int(re.search(r"(?m)^# head: bf16 \(--fp8-head off\), activations (\d+) bytes$",
                                   bf16_log).group(1))
        self.assertGreater(fp8_bytes, bf16_bytes)
        self.assertNotEqual(losses(bf16_log)[6], train[6])
        self.expect_failure(self.tiny_args + ["--steps", 1, "--fp8-head", "on"],
                            r"--fp8-head on: GPT-2 models have no FP8 head")
        self.expect_failure(data[:4] + ["-t", 40, "--model", "speedrun-tiny", "--fp8-head", "on"],
                            r"--fp8-head on: the FP8 head needs --seq-len \(40\)")

    def test_modded89_window_schedule_applies_yarn_at_its_stages(self):
        # --window-schedule modded89 stretched to 8 steps: 7 scheduled (round(1270 x 8 / 1285) = 8, at most 7) and
        # 1 extension, stages from schedule steps 0/2/5/7 (round(7/3), round(14/3)): windows (1,3) (3,7) (5,11)
        # (6,13) with YaRN at train steps 3, 6, 8, then (6,20) for the final validation (docs/optimizers.md).
        rng = np.random.default_rng(6)
        write_shard(f"{self.tmp}/m89w_train_000001.bin", np.tile(rng.integers(0, 96, size=29), 40))
        write_shard(f"{self.tmp}/m89w_val_000000.bin", np.tile(rng.integers(0, 96, size=29), 5))
        args = ["--train-data", f"{self.tmp}/m89w_train_*.bin", "--val-data", f"{self.tmp}/m89w_val_*.bin",
                "-b", 1, "-t", 64, "--val-tokens", 64, "--model", "modded89-tiny", "--steps", 8,
                "--window-schedule", "modded89"]
        out_dir, log = self.train_run("m89_windows", args)
        self.assertIn("# modded89 schedule: 7 scheduled + 1 extension steps, stages from 0/2/5/7, untie at 5", log)
        self.assertNotIn("# speedrun schedule", log)
        expected = expected_window_lines((3, 6, 8))
        self.assertEqual(re.findall(r"(?m)^# windows: .*$", log), expected)
        # The final model file keeps what the model attended with last (header words 13..: short and long window in
        # tokens of 8-token blocks, the YaRN changes' count, then each change's old and new long window in blocks).
        header = np.fromfile(f"{out_dir}/ckpt_000008_model.bin", dtype=np.int32, count=24)
        self.assertEqual(header[1], 2)
        self.assertEqual(header[13:22].tolist(), [6 * 8, 20 * 8, 3, 3, 7, 7, 11, 11, 13])
        self.expect_failure(args[:-4] + ["--steps", 3, "--window-schedule", "modded89"],
                            r"--window-schedule modded89 needs --steps >= 4")

    def test_modded89_loss_schedule_sets_each_stages_weights(self):
        # --loss-schedule modded89 stretched to 6 steps: stages from schedule steps 0/2/3/5. With --lr 0 the
        # N(0, 0.005) head keeps near-uniform logits, so each step's loss is its weights' sum times ln 96, a row's
        # terms past the sequence dropped: step 1 next tokens (1, 0.5, 0.25), step 2 halfway down stage 1's ramp
        # (1, 0.5, 0.125), step 3 stage 2 (1, 0.5), then the next token alone; no prefix table at V = 96.
        rng = np.random.default_rng(8)
        write_shard(f"{self.tmp}/m89l_train_000001.bin", np.tile(rng.integers(0, 96, size=29), 40))
        args = ["--train-data", f"{self.tmp}/m89l_train_*.bin", "-b", 1, "-t", 64, "--model", "modded89-tiny",
                "--steps", 6, "--lr", 0, "--loss-schedule", "modded89"]
        _, log = self.train_run("m89_loss", args)
        self.assertEqual(re.findall(r"(?m)^# loss weights: .*$", log), [
            "# loss weights: step 1 (schedule step 0) stage 1: next tokens 1 0.5 0.25 -> 1 0.5 0, prefix 0.25 -> 0.25",
            "# loss weights: step 3 (schedule step 2) stage 2: next tokens 1 0.5 -> 1 0, prefix 0.25 -> 0",
            "# loss weights: step 4 (schedule step 3) stage 3: next tokens 1 -> 1, prefix 0 -> 0",
            "# loss weights: step 6 (schedule step 5) extension: next tokens 1 -> 1, prefix 0 -> 0"])
        T = 64

        def uniform_loss(next_weights):  # the mean over rows of the weights of the targets inside the sequence
            return sum(w * (T - k) for k, w in enumerate(next_weights)) / T * np.log(96)
        expected = {1: uniform_loss([1, 0.5, 0.25]), 2: uniform_loss([1, 0.5, 0.125]), 3: uniform_loss([1, 0.5]),
                    4: uniform_loss([1]), 5: uniform_loss([1]), 6: uniform_loss([1])}
        train = losses(log)
        self.assertEqual(sorted(train), list(range(1, 7)))
        for step, loss in expected.items():
            self.assertAlmostEqual(float(train[step]), loss, delta=0.02, msg=f"step {step}")
        # The negative control: the model's own weights (fixed) keep step 6 at step 1's.
        _, fixed_log = self.train_run("m89_loss_fixed", args[:-2])
        self.assertNotIn("# loss weights", fixed_log)
        self.assertAlmostEqual(float(losses(fixed_log)[6]), expected[1], delta=0.02)
        steps_at = args.index("--steps") + 1
        self.expect_failure(args[:steps_at] + [3] + args[steps_at + 1:], r"--loss-schedule modded89 needs --steps >= 4")
        self.expect_failure(["--train-data", f"{self.tmp}/m89l_train_*.bin", "-b", 1, "-t", 64, "--model",
                             "speedrun-tiny", "--steps", 4, "--loss-schedule", "modded89"],
                            r"--loss-schedule modded89: the 2025-10-31 speedrun model trains on the next token's loss")

    def test_modded89_batch_schedule_trains_each_stages_sequences(self):
        # --batch-schedule modded89 at -t 48 over 6 steps (stages from 0/2/3/5): sequences of 16, 16, 32, 48, 48, 48
        # tokens. At --lr 0 the near-uniform head scores each row's next-token weights (1, 0.5, 0.25, the terms
        # past the sequence dropped) times ln 96, a mean that depends on T: the steps train on their stage's T.
        rng = np.random.default_rng(9)
        write_shard(f"{self.tmp}/m89b_train_000001.bin", np.tile(rng.integers(0, 96, size=29), 40))
        data = ["--train-data", f"{self.tmp}/m89b_train_*.bin", "-b", 1, "-t", 48, "--total-batch-tokens", 96]
        args = data + ["--model", "modded89-tiny", "--steps", 6, "--batch-schedule", "modded89"]
        _, log = self.train_run("m89_batches", args + ["--lr", 0])
        self.assertIn("# batch schedule: T 16/32/48/48 tokens per sequence, documents cut to 896/2048/2048/2048 by "
                      "stage (--batch-schedule modded89)", log)
        self.assertEqual(re.findall(r"(?m)^# batch: step .*$", log), [
            f"# batch: step {step} (schedule step {step - 1}) T={T} tokens per sequence, documents cut to {cut} tokens"
            for step, T, cut in ((1, 16, 896), (3, 32, 2048), (4, 48, 2048))])
        train = losses(log)
        for step, T in {1: 16, 2: 16, 3: 32, 4: 48, 5: 48, 6: 48}.items():
            uniform = (T + 0.5 * (T - 1) + 0.25 * (T - 2)) / T * np.log(96)
            self.assertAlmostEqual(float(train[step]), uniform, delta=0.02, msg=f"step {step}, T {T}")
        # Trained, with checkpoints: the step-3 checkpoint resumes across the stage boundary bit for bit.
        trained = args + ["--lr", "1.0", "--checkpoint-every", 3, "--lr-schedule", "modded89"]
        out_dir, log = self.train_run("m89_batches_trained", trained)
        self.expect_resumes_and_starts_from_its_file("m89_batches_trained", trained, data, out_dir, losses(log))
        self.expect_failure([{48: 64, 96: 128}.get(a, a) for a in args], r"--seq-len 64 is the last stage's sequence")
        self.expect_failure([("speedrun-tiny" if a == "modded89-tiny" else a) for a in args],
                            r"--batch-schedule modded89 or --val-seq-len: the 2025-10-31 speedrun model trains and")

    def test_cuda_graphs_train_the_same_bits_and_refuse_what_they_cannot(self):
        # --cuda-graphs on: each micro-step one graph launch (a shape's first micro-step eager, its second captured,
        # the later ones replayed). Both speedrun families over their records' schedules (windows with YaRN, stages
        # of T, per-step loss weights and rates, Adam on odd steps, the untie), the warm-up's captures replayed after
        # its restore in one: the model files and every logged loss and norm bit for bit those of --cuda-graphs off.
        # (Several ranks: test_multirank.CudaGraphs.)
        rng = np.random.default_rng(5)
        write_shard(f"{self.tmp}/graphs_train_000001.bin", np.tile(rng.integers(0, 96, size=29), 40))
        write_shard(f"{self.tmp}/graphs_val_000000.bin", np.tile(rng.integers(0, 96, size=31), 20))
        data = ["--train-data", f"{self.tmp}/graphs_train_*.bin", "--val-data", f"{self.tmp}/graphs_val_*.bin", "-b", 1]
        modded89 = data + ["-t", 48, "--total-batch-tokens", 96, "--lr", "1.0", "--model", "modded89-tiny", "--steps",
                           12, "--lr-schedule", "modded89", "--loss-schedule", "modded89", "--window-schedule",
                           "modded89", "--batch-schedule", "modded89", "--val-tokens", 96, "--val-every", 6,
                           "--untimed-warmup", "on"]
        speedrun = data + ["-t", 64, "--total-batch-tokens", 128, "--model", "speedrun-tiny", "--steps", 12,
                           "--lr-schedule", "speedrun", "--window-schedule", "speedrun", "--val-tokens", 128,
                           "--val-every", 6]
        for name, args in (("graphs89", modded89), ("graphs44", speedrun)):
            eager_dir, eager_log = self.train_run(f"{name}_off", args + ["--cuda-graphs", "off"])
            graph_dir, graph_log = self.train_run(f"{name}_on", args + ["--cuda-graphs", "on"])
            self.assertEqual(read(f"{graph_dir}/ckpt_000012_model.bin"), read(f"{eager_dir}/ckpt_000012_model.bin"),
                             name)
            self.assertEqual(losses(graph_log), losses(eager_log), name)
            self.assertEqual(losses(graph_log, VAL_LINE), losses(eager_log, VAL_LINE), name)
            self.assertEqual(re.findall(r"norm:\S+", graph_log), re.findall(r"norm:\S+", eager_log), name)
            captured, launches = map(int, re.search(r"(?m)^# cuda graphs: (\d+) captured, (\d+) launches$",
                                                     graph_log).groups())
            self.assertGreater(launches, captured, f"{name}: graphs replayed")
        self.expect_failure(self.tiny_args + ["--steps", 1, "--cuda-graphs", "on"],
                            r"--cuda-graphs: the model's passes cannot be captured")
        self.expect_failure(speedrun + ["--cuda-graphs", "on", "--trace", f"{self.tmp}/graph_trace"],
                            r"--cuda-graphs cannot be used with --trace")

    def test_untimed_warmup_restores_the_starting_state(self):
        # --untimed-warmup on trains the warm-up's steps first (here every step: 0, 1 and two either side of each
        # stage start of a 6-step modded89 schedule, so every stage shape, YaRN and the untie; of an 8-step
        # 2025-10-31 schedule, each window change; GPT-2 with ZeRO AdamW steps 0 and 1), then restores the starting
        # state: the run is the one without it, to the bit (losses, model and state files), and leaves no files of
        # its own. A resumed run restores the resumed state. Without --output-dir it is refused.
        rng = np.random.default_rng(12)
        write_shard(f"{self.tmp}/warm_train_000001.bin", np.tile(rng.integers(0, 96, size=29), 40))
        data = ["--train-data", f"{self.tmp}/warm_train_*.bin", "-b", 1]
        m89 = data + ["-t", 48, "--total-batch-tokens", 96, "--model", "modded89-tiny", "--steps", 6, "--lr", "1.0",
                      "--lr-schedule", "modded89", "--window-schedule", "modded89", "--loss-schedule", "modded89",
                      "--batch-schedule", "modded89", "--checkpoint-every", 3]
        m44 = data + ["-t", 64, "--model", "speedrun-tiny", "--steps", 8, "--lr", "3e-3", "--lr-schedule", "speedrun",
                      "--window-schedule", "speedrun", "--checkpoint-every", 8]
        runs = {}
        gpt2 = self.tiny_args + ["--steps", 4, "--lr", "1e-2"]  # ZeRO AdamW, no schedule: steps 0 and 1
        for name, args, steps, warm_steps in (("m89", m89, 6, "0 1 2 3 4 5"), ("m44", m44, 8, "0 1 2 3 4 5 6 7"),
                                              ("gpt2", gpt2, 4, "0 1")):
            with self.subTest(name):
                plain_dir, plain = self.train_run(f"warm_{name}_plain", args)
                warm_dir, warm = self.train_run(f"warm_{name}_on", args + ["--untimed-warmup", "on"])
                runs[name] = plain_dir
                self.assertRegex(warm, rf"(?m)^# untimed warm-up: {len(warm_steps.split())} steps \(schedule steps "
                                       rf"{warm_steps}\) in [0-9.]+ s, then the state of step 0 restored$")
                self.assertEqual(losses(warm), losses(plain))
                self.assertEqual(sorted(losses(warm)), list(range(1, steps + 1)))
                last = f"ckpt_{steps:06d}"
                self.assertEqual(read(f"{warm_dir}/{last}_model.bin"), read(f"{plain_dir}/{last}_model.bin"))
                self.assertEqual(state_without_time(f"{warm_dir}/{last}_state_rank0.bin"),
                                 state_without_time(f"{plain_dir}/{last}_state_rank0.bin"))
                self.assertFalse(os.path.exists(f"{warm_dir}/untimed_warmup"), os.listdir(warm_dir))
        resumed = f"{self.tmp}/warm_m89_resumed"
        os.makedirs(resumed)
        for file in ("ckpt_000003_model.bin", "ckpt_000003_state_rank0.bin", "ckpt_000003_manifest.json"):
            shutil.copy(f"{runs['m89']}/{file}", resumed)
        _, resumed_log = self.train_run("warm_m89_resumed", m89 + ["--untimed-warmup", "on", "--resume", "latest"])
        self.assertIn("then the state of step 3 restored", resumed_log)
        with open(f"{runs['m89']}/log.txt", encoding="utf-8") as handle:
            self.assertEqual(losses(resumed_log), {s: l for s, l in losses(handle.read()).items() if s > 3})
        self.assertEqual(read(f"{resumed}/ckpt_000006_model.bin"), read(f"{runs['m89']}/ckpt_000006_model.bin"))
        without_checkpoints = m89[:m89.index("--checkpoint-every")]
        self.expect_failure(without_checkpoints + ["--untimed-warmup", "on"], r"--untimed-warmup needs --output-dir")

    def test_val_seq_len_validates_in_shorter_sequences(self):
        # --val-seq-len 16 with -t 48: the val loss is bitwise that of a model allocated for 16 tokens (the same
        # init, --lr 0: the same parameters at every validation); GPT-2 is refused.
        data = self.m89_val_data("m89v")
        _, short = self.train_run("m89_val_short", data + ["-t", 48, "--val-seq-len", 16])
        _, allocated = self.train_run("m89_val_allocated", data + ["-t", 16])
        short_val, allocated_val = losses(short, VAL_LINE), losses(allocated, VAL_LINE)
        self.assertEqual(sorted(short_val), [1, 2])
        self.assertEqual(short_val, allocated_val)
        self.assertNotEqual(losses(short)[1], losses(allocated)[1])  # training ran 48-token sequences
        self.expect_failure(self.tiny_args + ["--steps", 1, "--val-tokens", 64, "--val-seq-len", 8],
                            r"--batch-schedule modded89 or --val-seq-len: GPT-2 models train and validate")

    def test_val_seq_len_past_the_buffers_validates_one_long_sequence(self):
        # --val-seq-len 64 with -t 48 (the record's 262,144 tokens per rank through 49,152-token buffers): each
        # 64-token sequence in a forward of 48 rows and one of 24 carried rows (the widest window) and the 16 after
        # them; the val loss is bitwise that of a model allocated for 64 tokens (emulated: every kernel a
        # continuation reads earlier rows through gives the whole forward's bits).
        data = self.m89_val_data("m89l", val_tokens=128)
        _, long = self.train_run("m89_val_long", data + ["-t", 48, "--val-seq-len", 64])
        _, allocated = self.train_run("m89_val_long_allocated", data + ["-t", 64])
        long_val = losses(long, VAL_LINE)
        self.assertEqual(sorted(long_val), [1, 2])
        self.assertEqual(long_val, losses(allocated, VAL_LINE))
        # Buffers shorter than twice the widest context are refused before the first step: 32 < 2 x 24, and the
        # modded89 window schedule's final validation window, 20 blocks of 8, needs 320.
        self.expect_failure(data + ["-t", 32, "--val-seq-len", 64],
                            r"carry up to 24 rows of context \(the widest window\), and --seq-len must hold twice")
        six_steps = [6 if a == 2 and data[i - 1] == "--steps" else a for i, a in enumerate(data)]
        self.expect_failure(six_steps + ["-t", 48, "--val-seq-len", 64, "--window-schedule", "modded89"],
                            r"carry up to 160 rows of context")
        speedrun = [("speedrun-tiny" if a == "modded89-tiny" else a) for a in data]
        self.expect_failure(speedrun + ["-t", 48, "--val-seq-len", 64],
                            r"--val-seq-len 64 exceeds --seq-len 48: this model evaluates only sequences that fit")

    def m89_val_data(self, name, val_tokens=64):
        """Shards and options of a modded89-tiny run of 2 steps at --lr 0 validating after each."""
        rng = np.random.default_rng(10)
        write_shard(f"{self.tmp}/{name}_train_000001.bin", np.tile(rng.integers(0, 96, size=29), 40))
        write_shard(f"{self.tmp}/{name}_val_000000.bin", np.tile(rng.integers(0, 96, size=31), 10))
        return ["--train-data", f"{self.tmp}/{name}_train_*.bin", "--val-data", f"{self.tmp}/{name}_val_*.bin", "-b", 1,
                "--model", "modded89-tiny", "--steps", 2, "--lr", 0, "--val-every", 1, "--val-tokens", val_tokens]

    def test_speedrun_schedules_and_the_recipe(self):
        # --lr-schedule and --window-schedule speedrun stretched to 8 steps: 7 scheduled (the lr is --lr while
        # s / 7 < 0.5, then falls linearly towards 0.1 --lr) and 1 extension; the long window 3 -> 7 -> 11 -> 13
        # blocks at schedule steps 3, 5, 7 (train steps 4, 6, 8) with YaRN, 20 for the final validation.
        rng = np.random.default_rng(2)
        write_shard(f"{self.tmp}/sched_train_000001.bin", np.tile(rng.integers(0, 96, size=29), 40))
        write_shard(f"{self.tmp}/sched_val_000000.bin", np.tile(rng.integers(0, 96, size=29), 5))
        data = ["--train-data", f"{self.tmp}/sched_train_*.bin", "--val-data", f"{self.tmp}/sched_val_*.bin",
                "-b", 1, "-t", 64, "--val-tokens", 64]
        args = data + ["--model", "speedrun-tiny", "--steps", 8, "--lr", "3e-3", "--lr-schedule", "speedrun",
                       "--window-schedule", "speedrun", "--val-every", 4, "--checkpoint-every", 5,
                       "--optimizer", "zero-adamw"]
        out_dir, log = self.train_run("schedules", args)
        self.assertIn("# speedrun schedule: 7 scheduled + 1 extension steps, long window 3/7/11/13 blocks from "
                      "schedule steps 0/3/5/7", log)
        lr_line = r"(?m)^step:(\d+)/8 train_loss:\S+ .* lr:(\S+)"
        lr = {int(m.group(1)): float(m.group(2)) for m in re.finditer(lr_line, log)}
        for step in range(1, 9):
            x = min(0.9999, (step - 1) / 7)
            multiplier = 1.0 if x < 0.5 else 1.0 - 0.9 * (x - 0.5) / 0.5
            self.assertAlmostEqual(lr[step], 3e-3 * multiplier, delta=1e-4 * 3e-3, msg=f"step {step}")
        expected = expected_window_lines((4, 6, 8))
        self.assertEqual(re.findall(r"(?m)^# windows: .*$", log), expected)
        lines = log.splitlines()
        for step, line in zip((4, 6, 8), expected):  # set before the step's own forward
            step_line = next(l for l in lines if l.startswith(f"step:{step}/8 train"))
            self.assertLess(lines.index(line), lines.index(step_line))
        self.assertEqual(sorted(losses(log, VAL_LINE)), [4, 8])
        # A run resumed at step 5 walks the window changes before it (with YaRN) and continues bit for bit.
        resumed = f"{self.tmp}/schedules_resumed"
        os.makedirs(resumed)
        for name in ("ckpt_000005_model.bin", "ckpt_000005_state_rank0.bin", "ckpt_000005_manifest.json"):
            shutil.copy(f"{out_dir}/{name}", resumed)
        _, resumed_log = self.train_run("schedules_resumed", args + ["--resume", "latest"])
        self.assertEqual(losses(resumed_log), {s: l for s, l in losses(log).items() if s > 5})
        self.assertEqual(losses(resumed_log, VAL_LINE), {8: losses(log, VAL_LINE)[8]})
        self.assertEqual(read(f"{resumed}/ckpt_000008_model.bin"), read(f"{out_dir}/ckpt_000008_model.bin"))
        # The recipe sets every option not given; the ones given win (here: the model, its shape and the steps).
        # Its lr is 1.0: the speedrun optimizer (auto) multiplies its base lrs (0.03, 0.008) by it.
        # (speedrun-tiny's V=96 has no BOS token: the recipe's BOS loader gives way to the window loader.)
        result = run(data + ["--recipe", "modded-2025-10-31", "--model", "speedrun-tiny", "--steps", 8,
                             "--total-batch-tokens", 64, "--train-loader", "window"])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        for option in ("recipe=\"modded-2025-10-31\"", "model=\"speedrun-tiny\"", "steps=8", "seq-len=64",
                       "lr-schedule=\"speedrun\"", "window-schedule=\"speedrun\"", "grad-clip=0", "lr=1.0"):
            self.assertRegex(result.stdout, r"(?m)^# option " + re.escape(option) + "$")
        self.assertEqual(re.findall(r"(?m)^# windows: .*$", result.stdout), expected)
        self.assertIn("lr:1.0000e+00", result.stdout)
        self.assertIn("# optimizer: speedrun (NorMuon + sharded Adam)", result.stdout)
        self.expect_failure(self.tiny_args + ["--steps", 4, "--window-schedule", "speedrun"],
                            r"--window-schedule speedrun: GPT-2 models have no attention windows")

    def test_bos_loader_trains_resumes_on_any_split_and_refuses_what_it_cannot_do(self):
        # --train-loader auto picks the BOS loader (docs/bos_loader.md) for a speedrun model whose vocabulary
        # holds <|endoftext|>: here a small one (L=8, C=32, V=50304; the presets are the record's size and the
        # V=96 speedrun-tiny, which has no BOS token) on documents that each start with BOS, two sequences per
        # step (one rank, two micro-steps), over two shards of about two steps each: step 3 comes from the second
        # shard. AdamW (zero-adamw) keeps the steps cheap and the checkpoints re-shardable.
        rng = np.random.default_rng(14)
        pattern = rng.integers(0, 200, size=37)
        for shard in (1, 2):
            tokens = []
            while len(tokens) < 300:
                start = int(rng.integers(0, 37))
                tokens += [50256] + [int(pattern[(start + i) % 37]) for i in range(int(rng.integers(4, 60)))]
            write_shard(f"{self.tmp}/docs_train_{shard:06d}.bin", tokens)
        model = f"{self.tmp}/speedrun_gpt2_vocab.bin"
        write_speedrun_model(model, 8, 2, 16, 64, 8, 1)
        data = ["--train-data", f"{self.tmp}/docs_train_*.bin", "--model", model, "-b", 1, "-t", 64, "--lr", "1e-2",
                "--optimizer", "zero-adamw", "--fp8-head", "off"]
        args = data + ["--total-batch-tokens", 128, "--steps", 3, "--checkpoint-every", 2]
        out_dir, log = self.train_run("bos", args)
        self.assertIn("# train loader: bos (documents cut to 2048 tokens, sequences/step=2) (--train-loader auto)\n",
                      log)
        train = losses(log)
        self.assertEqual(sorted(train), [1, 2, 3])
        self.assertLess(float(train[3]), float(train[1]))
        # Resumed after step 2 on one rank: bit for bit.
        resumed = f"{self.tmp}/bos_resumed"
        os.makedirs(resumed)
        for suffix in ("model.bin", "state_rank0.bin", "manifest.json"):
            shutil.copy(f"{out_dir}/ckpt_000002_{suffix}", resumed)
        _, resumed_log = self.train_run("bos_resumed", args + ["--resume", "latest"])
        self.assertEqual(losses(resumed_log), {s: l for s, l in train.items() if s > 2})
        self.assertEqual(read(f"{resumed}/ckpt_000003_model.bin"), read(f"{out_dir}/ckpt_000003_model.bin"))
        self.assertEqual(state_without_time(f"{resumed}/ckpt_000003_state_rank0.bin"),
                         state_without_time(f"{out_dir}/ckpt_000003_state_rank0.bin"))
        # On two ranks without accumulation a step holds the same two sequences: step 3's loss, from the same
        # parameters, is the mean of the same two per-sequence losses, up to the rounding of that mean (float
        # on the device on one rank, double across ranks): one printed unit. Other sequences would differ by
        # far more (the model has learnt part of the pattern: the loss fell by ~0.7).
        checkpoint = f"{out_dir}/ckpt_000002"
        if SETTINGS["mpiexec"] and (SETTINGS["gpus"] is None or SETTINGS["gpus"] >= 2):
            two = run(data + ["--steps", 3, "--resume", checkpoint, "-o", f"{self.tmp}/bos_two_ranks"], mpi_ranks=2)
            self.assertEqual(two.returncode, 0, two.stdout + two.stderr)
            self.assertIn("sequences/step=2", two.stdout)
            self.assertAlmostEqual(float(losses(two.stdout)[3]), float(train[3]), delta=1.01e-4)
        # Another step size, another loader, --shuffle, a model without BOS, a shard without documents: one line.
        state = f"{checkpoint}_state_rank0.bin"
        self.expect_failure(data + ["--steps", 3, "--resume", checkpoint], re.escape(state) +
                            r": its BOS loader position counts steps of 2 \(1 ranks x 2 micro-steps x B=1\) "
                            r"sequences of T=64, this run deals 1 \(1 ranks x 1 micro-steps x B=1\) of T=64")
        output = self.expect_failure(data + ["--total-batch-tokens", 128, "--steps", 3, "--resume", checkpoint,
                                             "--train-loader", "window"],
                                     re.escape(state) + r": was written with --train-loader bos, this run uses "
                                     r"--train-loader window")
        self.assertEqual(len([line for line in output.splitlines() if "was written with" in line]), 1)
        self.expect_failure(data + ["--steps", 1, "--shuffle"],
                            r"--shuffle cannot be used with --train-loader bos \(auto's choice for a speedrun model\)")
        self.expect_failure(["--train-data", f"{self.tmp}/docs_train_*.bin", "--model", "speedrun-tiny", "-b", 1,
                             "-t", 64, "--steps", 1, "--train-loader", "bos"],
                            r"--train-loader bos: the model's vocabulary \(96 tokens\) has no BOS token 50256")
        output = self.expect_failure(["--train-data", f"{self.tmp}/toy_train_*.bin"] + data[2:] + ["--steps", 1],
                                     re.escape(f"{self.tmp}/toy_train_000001.bin") +
                                     r": no document start \(token 50256\)")
        self.assertEqual(len([line for line in output.splitlines() if "no document start" in line]), 1)

    def test_output_directory_and_its_parents_are_created(self):
        out_dir = f"{self.tmp}/not/there/yet"
        result = run(self.tiny_args + ["--steps", 1, "-o", out_dir])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertTrue(os.path.isfile(f"{out_dir}/log.txt"))
        self.assertTrue(os.path.isfile(f"{out_dir}/ckpt_000001_model.bin"))

    def test_two_runs_are_bitwise_identical(self):
        self.assertEqual(losses(self.first[1]), losses(self.second[1]))
        self.assertEqual(losses(self.first[1], VAL_LINE), losses(self.second[1], VAL_LINE))
        for step in (5, 10):
            prefix = f"ckpt_{step:06d}"
            self.assertEqual(read(f"{self.first[0]}/{prefix}_model.bin"), read(f"{self.second[0]}/{prefix}_model.bin"))
            self.assertEqual(state_without_time(f"{self.first[0]}/{prefix}_state_rank0.bin"),
                             state_without_time(f"{self.second[0]}/{prefix}_state_rank0.bin"))

    def test_resume_continues_bit_for_bit(self):
        resumed = f"{self.tmp}/resumed"
        os.makedirs(resumed)
        for name in ("ckpt_000005_model.bin", "ckpt_000005_state_rank0.bin", "ckpt_000005_manifest.json"):
            shutil.copy(f"{self.first[0]}/{name}", resumed)
        _, log = self.train_run("resumed", self.run_args + ["--resume", "latest"])
        self.assertIn("# resumed from", log)
        later = losses(log)
        self.assertEqual(sorted(later), [6, 7, 8, 9, 10])
        self.assertEqual(later, {s: l for s, l in losses(self.first[1]).items() if s > 5})
        self.assertEqual(losses(log, VAL_LINE), {10: losses(self.first[1], VAL_LINE)[10]})
        self.assertEqual(read(f"{resumed}/ckpt_000010_model.bin"), read(f"{self.first[0]}/ckpt_000010_model.bin"))
        self.assertEqual(state_without_time(f"{resumed}/ckpt_000010_state_rank0.bin"),
                         state_without_time(f"{self.first[0]}/ckpt_000010_state_rank0.bin"))

    def test_nan_loss_stops_and_keeps_last_good_checkpoint(self):
        out_dir = f"{self.tmp}/nan"
        # The NaN comes from the trainer's test hook (llmc/train/debug_hooks.h), not from an option.
        output = self.expect_failure(self.tiny_args + ["--steps", 10, "--checkpoint-every", 3, "-o", out_dir],
                                     r"step 5\b", r"ckpt_000003", extra_env={"LLMC_DEBUG_NAN_AT_STEP": "5"})
        files = sorted(os.listdir(out_dir))
        self.assertIn("ckpt_000003_model.bin", files, output)
        self.assertFalse([f for f in files if f.startswith("ckpt_") and not f.startswith("ckpt_000003")], files)
        self.assertFalse([f for f in files if f.endswith(".tmp")], files)
        # The last good checkpoint is complete: a run resumes from it.
        result = run(self.tiny_args + ["--steps", 4, "--resume", f"{out_dir}/ckpt_000003", "-o", f"{out_dir}/again"])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_gradient_accumulation_matches_one_big_batch(self):
        # B=2 with two micro-steps sees the same 64 tokens per step as B=4 with one: the same losses up to
        # rounding. Printed with 4 decimals (5e-5 absolute); the fp32 build sums in another order (~1e-6),
        # the bf16 build also rounds the accumulated gradients to bf16 once more per step: 2^-9 = 2e-3.
        common = self.data_args[:4] + ["--model", "tiny", "-t", T, "--steps", 4, "--lr", "1e-2"]
        _, big = self.train_run("accum_big", common + ["-b", B])
        _, accumulated = self.train_run("accum_two", common + ["-b", B // 2, "--total-batch-tokens", B * T])
        self.assertIn(f"B={B // 2} T={T} grad_accum=2", accumulated)
        tolerance = 1e-4 if "precision:fp32" in big else 2e-3
        big_losses, accumulated_losses = losses(big), losses(accumulated)
        self.assertEqual(sorted(big_losses), [1, 2, 3, 4])
        for step, loss in big_losses.items():
            self.assertAlmostEqual(float(accumulated_losses[step]), float(loss), delta=tolerance * float(loss),
                                   msg=f"step {step}")

    # ---- the log -------------------------------------------------------------------------------------
    def test_log_header_and_line_format(self):
        lines = self.first[1].splitlines()
        self.assertRegex(lines[0], r"^# train_gpt2 ([0-9a-f]{7,40}(-dirty)?|unknown) precision:(bf16|fp32) ranks:1$")
        self.assertRegex(self.first[1], r"(?m)^# device: .+ driver:\S+ runtime:\S+$")
        self.assertRegex(self.first[1], r"(?m)^# model: L=2 NH=4 C=32 T=16 V=100 ")
        for option in ("lr=1e-2", "steps=10", "weight-decay=0.1", "batch-size=4", "seq-len=16", "shuffle=true"):
            self.assertRegex(self.first[1], r"(?m)^# option " + re.escape(option) + "$")
        for line in lines:
            if line.startswith("step:"):
                self.assertTrue(TRAIN_LINE.match(line) or VAL_LINE.match(line), line)
            else:
                self.assertTrue(line.startswith("#"), f"neither a comment nor a step line: {line}")

    def test_compare_runs_reads_our_logs(self):
        # Its t-test needs runs that differ (and have the same step count): the first one with another seed.
        other_dir, other_log = self.train_run("other_seed", self.tiny_args + [
            "--steps", 10, "--lr", "1e-2", "--seed", 7, "--val-tokens", 2 * B * T])
        result = subprocess.run([sys.executable, f"{REPO}/scripts/compare_runs.py", "--json", "--target", "10",
                                 f"{self.first[0]}/log.txt", f"{other_dir}/log.txt"],
                                capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        report = json.loads(result.stdout)
        ours = sorted([float(losses(self.first[1], VAL_LINE)[10]), float(losses(other_log, VAL_LINE)[10])])
        found = sorted(v for v in self.numbers_in(report) if any(abs(v - o) < 1e-9 for o in ours))
        self.assertEqual(sorted(set(found)), ours, f"compare_runs did not report our final val losses: {report}")

    @classmethod
    def numbers_in(cls, value):
        if isinstance(value, dict):
            return [n for v in value.values() for n in cls.numbers_in(v)]
        if isinstance(value, list):
            return [n for v in value for n in cls.numbers_in(v)]
        return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []

    def test_help_lists_every_documented_option(self):
        result = run(["--help"])
        self.assertEqual(result.returncode, 0)
        in_help = set(re.findall(r"(--[a-z][a-z0-9-]*)", result.stdout))
        with open(f"{REPO}/README.md", encoding="utf-8") as handle:
            readme = handle.read()
        section = re.search(r"^## Training: `?\./train_gpt2`?\n(.*?)(?=^## )", readme, re.S | re.M)
        self.assertIsNotNone(section, "README has no '## Training: ./train_gpt2' section")
        table_rows = [line for line in section.group(1).splitlines() if line.startswith("| `-")]
        documented = {m for row in table_rows for m in re.findall(r"`(--[a-z][a-z0-9-]*)", row)}
        self.assertGreater(len(documented), 15)
        self.assertFalse(documented - in_help, "documented in README but not in --help")
        self.assertFalse(in_help - documented - {"--help"}, "in --help but not documented in README")

    # ---- bad input -----------------------------------------------------------------------------------
    def broken_model_file(self, name, edit):
        data = bytearray(read(f"{self.first[0]}/ckpt_000010_model.bin"))
        data = edit(data)
        path = f"{self.tmp}/{name}.bin"
        with open(path, "wb") as out:
            out.write(data)
        return path

    def test_checkpoint_with_wrong_magic(self):
        path = self.broken_model_file("wrong_magic", lambda d: np.int32(12345).tobytes() + d[4:])
        self.expect_failure(self.data_args + ["--steps", 1, "--model", path], re.escape(path), r"magic")

    def test_checkpoint_with_wrong_version(self):
        path = self.broken_model_file("wrong_version", lambda d: d[:4] + np.int32(4).tobytes() + d[8:])
        self.expect_failure(self.data_args + ["--steps", 1, "--model", path], re.escape(path), r"version 4")

    def test_truncated_checkpoint(self):
        path = self.broken_model_file("truncated", lambda d: d[:-100])
        self.expect_failure(self.data_args + ["--steps", 1, "--model", path], re.escape(path), r"truncated")

    def test_shard_too_small_for_one_batch(self):
        write_shard(f"{self.tmp}/short_train_000001.bin", np.zeros(B * T, dtype=np.uint16))  # needs B*T+1
        self.expect_failure(["--train-data", f"{self.tmp}/short_train_*.bin", "--model", "tiny", "-b", B, "-t", T,
                             "--steps", 1], r"short_train_000001\.bin", r"too small")

    def test_contradicting_options(self):
        self.expect_failure(self.tiny_args + ["--steps", 1, "--total-batch-tokens", B * T + 1],
                            r"--total-batch-tokens \d+ is not a multiple")
        self.expect_failure(self.tiny_args + ["--steps", 1, "--checkpoint-every", 1], r"--checkpoint-every needs")

    def test_missing_train_shards(self):
        pattern = f"{self.tmp}/nothing_here_*.bin"
        self.expect_failure(["--train-data", pattern, "--model", "tiny", "-b", B, "-t", T, "--steps", 1], re.escape(pattern), r"no files")

    def test_bad_option_names_the_option_and_the_range(self):
        for args, words in (([ "--steps", 0], r"--steps: must be at least 1, got 0"),
                            (["--final-lr-frac", 2], r"--final-lr-frac: must be between 0 and 1, got 2"),
                            (["--lr-schedule", "step"], r"--lr-schedule: must be one of cosine, linear, constant")):
            with self.subTest(args=args):
                output = self.expect_failure(self.tiny_args + args, words)
                self.assertNotIn("179769313", output)  # CLI11's own range message printed DBL_MAX
                self.assertLessEqual(len(output.strip().splitlines()), 2, output)  # the cause and "--help"

    def test_startup_error_of_one_process_is_one_line(self):
        # Without mpirun: the cause only, no MPI_ABORT banner and no ORTE error line.
        result = run(["--train-data", f"{self.tmp}/nothing_here_*.bin", "--model", "tiny", "-b", B, "-t", T,
                      "--steps", 1])
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertRegex(lines[0], r"^rank 0: .*nothing_here_\*\.bin: no files match")
        self.assertNotIn("MPI_ABORT", result.stdout + result.stderr)
        self.assertNotIn("ORTE", result.stdout + result.stderr)

    def test_run_that_cannot_start_leaves_no_log(self):
        out_dir = f"{self.tmp}/never_started"
        path = self.broken_model_file("never_started_model", lambda d: d[:-100])
        self.expect_failure(self.data_args + ["--steps", 1, "--model", path, "-o", out_dir], r"truncated")
        self.assertFalse(os.path.exists(f"{out_dir}/log.txt"), os.listdir(out_dir))

    def test_run_stopped_by_an_error_says_why_in_its_log(self):
        # The second shard holds a token outside the vocabulary: steps 1-3 (the first shard) train, then
        # the loader refuses the shard, and the log's last line gives that reason.
        write_shard(f"{self.tmp}/bad_train_000001.bin", np.arange(3 * B * T + 1) % VOCAB)
        write_shard(f"{self.tmp}/bad_train_000002.bin", np.full(3 * B * T + 1, VOCAB + 5))
        out_dir = f"{self.tmp}/stopped"
        self.expect_failure(["--train-data", f"{self.tmp}/bad_train_*.bin", "--model", "tiny", "-b", B, "-t", T,
                             "--steps", 6, "-o", out_dir], r"bad_train_000002\.bin")
        with open(f"{out_dir}/log.txt", encoding="utf-8") as handle:
            log = handle.read()
        self.assertEqual(sorted(losses(log)), [1, 2, 3])
        last = log.strip().splitlines()[-1]
        self.assertRegex(last, r"^# stopped by an error: .*bad_train_000002\.bin.*not below vocab_size")

    # ---- samples ---------------------------------------------------------------------------------------
    def test_samples_are_logged_and_change_nothing(self):
        # d1 has GPT-2's vocabulary (the toy shards' ids, below 100, are GPT-2 tokens too).
        args = self.data_args + ["--model", "d1", "--steps", 4, "--lr", "1e-3"]
        plain = run(args)
        sampled = run(args + ["--sample-every", 2, "--sample-tokens", 6, "--sample-prompt", "Hello,\nworld",
                              "--vocab", VOCAB_DIR])
        self.assertEqual(plain.returncode, 0, plain.stdout + plain.stderr)
        self.assertEqual(sampled.returncode, 0, sampled.stdout + sampled.stderr)
        self.assertEqual(losses(sampled.stdout), losses(plain.stdout))  # bitwise: sampling touches nothing
        heads = re.findall(r'(?m)^# sample step:(\d+): (\d+) tokens.* continuing "Hello,\\nworld"\n# \| ',
                           sampled.stdout)
        self.assertEqual([int(step) for step, _ in heads], [2, 4], sampled.stdout)
        self.assertTrue(all(0 <= int(count) <= 6 for _, count in heads))
        lines = sampled.stdout.splitlines()
        self.assertLess(lines.index(next(l for l in lines if l.startswith("step:2/4"))),
                        lines.index(next(l for l in lines if l.startswith("# sample step:2"))))

    def test_samples_need_gpt2_vocabulary_and_a_prompt_that_fits(self):
        self.expect_failure(self.tiny_args + ["--steps", 1, "--sample-every", 1, "--vocab", VOCAB_DIR],
                            r"rank 0: --sample-every: the model's vocabulary has 100 tokens; samples need GPT-2's")
        self.expect_failure(self.data_args + ["--model", "d1", "--steps", 1, "--sample-every", 1, "--vocab",
                                              f"{self.tmp}/novocab"], r"novocab: vocabulary directory does not exist")
        self.expect_failure(self.data_args + ["--model", "d1", "--steps", 1, "--sample-every", 1, "--vocab", VOCAB_DIR,
                                              "--sample-prompt", " word" * 1024],
                            r"--sample-prompt: 1024 tokens leave no room in the model's context of 1024")

    def test_resume_on_another_number_of_ranks(self):
        # A 1-rank checkpoint continues on 2 ranks (B=2: the same global batch); the numbers against an
        # uninterrupted run at 2 ranks: test_multirank.Reshard.
        if not SETTINGS["mpiexec"]:
            self.skipTest("skipped: no mpiexec")
        if SETTINGS["gpus"] is not None and SETTINGS["gpus"] < 2:
            self.skipTest("skipped: 2 ranks need 2 GPUs (NCCL refuses two ranks on one GPU)")
        args = [a if a != B else B // 2 for a in self.run_args]
        result = run(args + ["--resume", f"{self.first[0]}/ckpt_000005", "-o", f"{self.tmp}/two_ranks"], mpi_ranks=2)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("written by 1 ranks, optimizer state re-sharded", result.stdout)
        self.assertEqual(sorted(losses(result.stdout)), [6, 7, 8, 9, 10])

    # ---- robustness ----------------------------------------------------------------------------------
    def test_stop_signal_checkpoints_and_resumes_bit_for_bit(self):
        # 20 steps, stopped by SIGTERM once step 2 is logged, then resumed: the same final model and state
        # as 20 steps in one go.
        args = self.tiny_args + ["--steps", 20, "--lr", "1e-2", "--shuffle", "--checkpoint-every", 7]
        _, whole = self.train_run("whole20", args)
        out_dir = f"{self.tmp}/stopped20"
        process = start(args + ["-o", out_dir])
        read_until(process, "step:2/")
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=120)
        self.assertEqual(process.returncode, EXIT_STOPPED_BY_SIGNAL, stdout + stderr)
        match = re.search(r"(?m)^# stopped by signal SIGTERM at step (\d+); resume with --resume (\S+)$", stdout)
        self.assertIsNotNone(match, stdout)
        stop_step, prefix = int(match.group(1)), match.group(2)
        self.assertLess(stop_step, 20)
        self.assertEqual(prefix, f"{out_dir}/ckpt_{stop_step:06d}")
        self.assertTrue(os.path.isfile(prefix + "_manifest.json"))
        self.assertEqual(max(losses(stdout)), stop_step)
        _, log = self.train_run("stopped20", args + ["--resume", "latest"])
        self.assertEqual(losses(log), losses(whole))  # the log holds both parts
        self.assertEqual(read(f"{out_dir}/ckpt_000020_model.bin"), read(f"{self.tmp}/whole20/ckpt_000020_model.bin"))
        self.assertEqual(state_without_time(f"{out_dir}/ckpt_000020_state_rank0.bin"),
                         state_without_time(f"{self.tmp}/whole20/ckpt_000020_state_rank0.bin"))

    def test_second_sigint_stops_at_once(self):
        # d1 (vocabulary 50257) takes about a second per emulated step, so the second SIGINT, sent once the
        # first is acknowledged, arrives long before the step ends (two signals sent back to back could
        # merge into one pending signal).
        out_dir = f"{self.tmp}/interrupted"
        process = start(self.data_args + ["--model", "d1", "--steps", 1000, "-o", out_dir])
        read_until(process, "step:1/")
        process.send_signal(signal.SIGINT)
        read_until(process, "train_gpt2: SIGINT received: stopping after this step", stream=process.stderr)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=120)
        self.assertEqual(process.returncode, EXIT_INTERRUPTED, stdout + stderr)
        self.assertIn("second SIGINT: stopping at once", stderr)
        self.assertNotIn("# stopped by signal", stdout)
        self.assertFalse([f for f in os.listdir(out_dir) if f.startswith("ckpt_")])

    def copy_checkpoint(self, name, step=5):
        target = f"{self.tmp}/{name}"
        os.makedirs(target)
        for suffix in ("model.bin", "state_rank0.bin", "manifest.json"):
            shutil.copy(f"{self.first[0]}/ckpt_{step:06d}_{suffix}", target)
        return f"{target}/ckpt_{step:06d}"

    def test_damaged_checkpoints_are_refused_naming_the_file(self):
        prefix = self.copy_checkpoint("damaged_state")
        flip_bit(prefix + "_state_rank0.bin", os.path.getsize(prefix + "_state_rank0.bin") - 100)
        self.expect_failure(self.run_args + ["--resume", prefix, "-o", f"{self.tmp}/damaged_state_out"],
                            re.escape(prefix + "_state_rank0.bin") + r": checksum mismatch")
        prefix = self.copy_checkpoint("damaged_model")
        flip_bit(prefix + "_model.bin", 5000)
        self.expect_failure(self.run_args + ["--resume", prefix, "-o", f"{self.tmp}/damaged_model_out"],
                            re.escape(prefix + "_model.bin") + r": checksum mismatch")
        self.expect_failure(self.data_args + ["--steps", 1, "--model", prefix + "_model.bin"],
                            re.escape(prefix + "_model.bin") + r": checksum mismatch")
        prefix = self.copy_checkpoint("incomplete")
        os.remove(prefix + "_manifest.json")
        self.expect_failure(self.run_args + ["--resume", prefix, "-o", f"{self.tmp}/incomplete_out"],
                            re.escape(prefix + "_manifest.json") + r": missing: .* is not a complete checkpoint")
        # --resume latest passes over it: nothing complete there, so the run starts fresh.
        result = run(self.tiny_args + ["--steps", 1, "--resume", "latest", "-o", f"{self.tmp}/incomplete"])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("no checkpoint in", result.stdout)

    def test_keep_checkpoints_keeps_the_newest_complete_ones(self):
        out_dir = f"{self.tmp}/keep"
        result = run(self.tiny_args + ["--steps", 6, "--checkpoint-every", 1, "--keep-checkpoints", 2, "-o", out_dir])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(sorted(f for f in os.listdir(out_dir) if f.startswith("ckpt_")),
                         [f"ckpt_00000{s}_{kind}" for s in (5, 6)
                          for kind in ("manifest.json", "model.bin", "state_rank0.bin")])

    def test_full_disk_stops_with_the_previous_checkpoint_intact(self):
        # A 640 KiB tmpfs holds the first checkpoint (~430 KB: bf16 model, fp32 master + AdamW moments) and
        # the log, not a second one. The files are copied out before the mount namespace ends.
        if not can_mount_tmpfs():
            self.skipTest("skipped: cannot mount a tmpfs in a private mount namespace here (needs root)")
        mount, copy = f"{self.tmp}/small_disk", f"{self.tmp}/small_disk_copy"
        os.makedirs(mount)
        os.makedirs(copy)
        trainer = " ".join([SETTINGS["trainer"]] + [f"'{a}'" for a in self.tiny_args] +
                           ["--steps", "6", "--checkpoint-every", "2", "-o", mount])
        script = (f"mount -t tmpfs -o size=640k tmpfs {mount} && {{ {trainer}; echo exit=$?; cp -a {mount}/. {copy}/; }}")
        result = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script],
                                capture_output=True, text=True, timeout=120, env=dict(os.environ, **MPI_ROOT_ENV))
        output = result.stdout + result.stderr
        self.assertIn("exit=1", result.stdout, output)
        self.assertRegex(result.stderr, r"(?m)^rank 0: " + re.escape(mount) +
                         r"/ckpt_000004_\w+\.bin: write failed.*: No space left on device$")
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        files = sorted(os.listdir(copy))
        self.assertEqual([f for f in files if f.startswith("ckpt_")],
                         ["ckpt_000002_manifest.json", "ckpt_000002_model.bin", "ckpt_000002_state_rank0.bin"])
        # The previous checkpoint is intact: a run resumes from it (every checksum verified).
        resumed = run(self.tiny_args + ["--steps", 3, "--resume", f"{copy}/ckpt_000002", "-o", f"{copy}/again"])
        self.assertEqual(resumed.returncode, 0, resumed.stdout + resumed.stderr)

    def test_one_process_starts_mpi_without_its_daemon(self):
        # Without mpirun the trainer is an MPI singleton that starts no orted (llmc/dist/comm.cpp; the GPU machines
        # have none): with orted made unrunnable in a private mount namespace, a run still trains. OpenMPI's
        # default singleton fails in MPI_Init there.
        daemon = shutil.which("orted")
        if daemon is None or not can_mount_tmpfs():
            self.skipTest("skipped: needs OpenMPI's orted and a private mount namespace (root) to hide it in")
        trainer = " ".join([SETTINGS["trainer"]] + [f"'{a}'" for a in self.tiny_args] + ["--steps", "1"])
        env = {k: v for k, v in os.environ.items() if k != "OMPI_MCA_ess_singleton_isolated"}
        result = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                                 f"mount --bind /dev/null {daemon} && {trainer}"],
                                capture_output=True, text=True, timeout=120, env=dict(env, **MPI_ROOT_ENV))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(sorted(losses(result.stdout)), [1])

# --part NAME runs the tests whose names contain one of its words (the first part that matches takes a test);
# "program" runs every test no other part takes, so a new test always runs somewhere. Alone on the 2-core VM
# (2026-12-06): replay ~105 s, speedrun ~145 s, program ~60 s; all in one process they were CI's longest test.
PARTS = {"replay": ("cuda_graphs", "untimed_warmup"),
         "speedrun": ("modded89", "speedrun", "wgmma", "fp8", "bos_loader")}


def part_of(test_name):
    for part, words in PARTS.items():
        if any(word in test_name for word in words):
            return part
    return "program"


def select_part(part):
    """The TrainProgram tests that `part` runs."""
    tests = unittest.defaultTestLoader.loadTestsFromTestCase(TrainProgram)
    return unittest.TestSuite(test for test in tests if part_of(test.id().rsplit(".", 1)[-1]) == part)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trainer", required=True, help="the train_gpt2 binary to test")
    parser.add_argument("--mpiexec", default=shutil.which("mpiexec"), help="for the 2-rank resume test")
    parser.add_argument("--require-gpu", action="store_true", help="skip (exit 77) when no GPU is present")
    parser.add_argument("--part", choices=list(PARTS) + ["program"], help="run only this part's tests (PARTS)")
    args, rest = parser.parse_known_args()
    if args.require_gpu:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True) \
            if shutil.which("nvidia-smi") else None
        if listing is None or listing.returncode != 0:
            print("skipped: no GPU")
            return 77
        SETTINGS["gpus"] = listing.stdout.count("GPU ")
    SETTINGS["trainer"] = os.path.abspath(args.trainer)
    SETTINGS["mpiexec"] = args.mpiexec
    if args.part is None:
        program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
        return 0 if program.result.wasSuccessful() else 1
    suite = select_part(args.part)
    if suite.countTestCases() == 0:
        print(f"--part {args.part}: no test of this part", file=sys.stderr)
        return 1
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
