#!/usr/bin/env python3
"""Soak benchmark: a long run with frequent checkpoints, stopped by signals and resumed, against the
same run uninterrupted (docs/robustness.md#soak).

Trains a small model for --steps steps twice on the same synthetic shards: once in one go, once stopped
by SIGTERM at about a third of the steps and by SIGUSR1 at about two thirds, each time resumed with
--resume latest. Checkpoints every --checkpoint-every steps, pruned to the newest --keep. Prints a table:
the final model file and optimizer state byte-identical or not (the state's train-time word and the
checksum over it excluded: wall-clock time), and each segment's resident memory (VmRSS of every rank,
sampled every --sample seconds): after warm-up, at the end, and the least-squares growth per 1000 steps.
Exits non-zero when the files differ.

  python3 scripts/bench_soak.py [--trainer ./train_gpt2_emu] [--steps 2000] [--ranks 1]
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

SHARD_MAGIC, SHARD_VERSION = 20240520, 1
STATE_TIME_WORD, STATE_CHECKSUM_WORD = 14, 31  # llmc/checkpoint/state_file.cpp: train time (us), checksum
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
STEP_LINE = re.compile(r"^step:(\d+)/")


def write_shard(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (SHARD_MAGIC, SHARD_VERSION, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def rank_pids(launcher, ranks):
    """The trainer processes: the launcher itself for one rank, mpirun's children otherwise."""
    if ranks == 1:
        return [launcher]
    children = []
    for task in os.listdir(f"/proc/{launcher}/task"):
        with open(f"/proc/{launcher}/task/{task}/children") as f:
            children += [int(c) for c in f.read().split()]
    return children


class Segment:
    """One process run of the trainer: its exit status and (step, total VmRSS of its ranks in KiB) samples."""

    def __init__(self, name):
        self.name, self.samples, self.status, self.first_step, self.last_step = name, [], None, None, None
        self.output = ""


def run_segment(name, command, ranks, sample_seconds, stop_at=None, stop_signal=None):
    """Runs the command, sampling memory; sends stop_signal to the launcher once step stop_at is logged."""
    segment = Segment(name)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=dict(os.environ, **ROOT_ENV))
    output, sent = [], []

    def read_steps():  # a thread, so that sampling never waits for a line
        for line in process.stdout:
            output.append(line)
            match = STEP_LINE.match(line)
            if match:
                segment.last_step = int(match.group(1))
                segment.first_step = segment.first_step or segment.last_step
                if stop_at is not None and segment.last_step >= stop_at and not sent:
                    process.send_signal(stop_signal)
                    sent.append(stop_signal)

    reader = threading.Thread(target=read_steps)
    reader.start()
    while process.poll() is None:
        step = segment.last_step
        if step is not None:
            try:
                values = [rss_kib(pid) for pid in rank_pids(process.pid, ranks)]
            except OSError:
                values = []
            if len(values) == ranks and None not in values:  # not while ranks start or end
                segment.samples.append((step, sum(values)))
        time.sleep(sample_seconds)
    reader.join()
    segment.status = process.returncode
    segment.output = "".join(output)
    return segment


def state_without_clock(path):
    data = bytearray(open(path, "rb").read())
    for word in (STATE_TIME_WORD, STATE_CHECKSUM_WORD):
        data[word * 8:word * 8 + 8] = bytes(8)
    return bytes(data)


def growth_per_1000_steps(samples, warmup_steps):
    """Least-squares slope of RSS (KiB) against step after warm-up, per 1000 steps."""
    points = [(s, r) for s, r in samples if s > warmup_steps]
    if len(points) < 3:
        return float("nan")
    steps, rss = np.array(points, dtype=np.float64).T
    return float(np.polyfit(steps, rss, 1)[0] * 1000.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trainer", default="./train_gpt2_emu")
    parser.add_argument("--mpiexec", default=shutil.which("mpiexec") or "mpiexec")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--checkpoint-every", type=int, default=25)
    parser.add_argument("--keep", type=int, default=3)
    parser.add_argument("--sample", type=float, default=0.5, help="seconds between memory samples")
    parser.add_argument("--warmup", type=int, default=100, help="steps before memory counts")
    parser.add_argument("--keep-dir", action="store_true", help="keep the runs' directory")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="llmc_soak_")
    rng = np.random.default_rng(7)
    pattern = rng.integers(0, 100, size=97)  # learnable, period 97, shuffled windows across two shards
    for index in (1, 2):
        write_shard(f"{work}/soak_train_{index:06d}.bin", np.tile(pattern, 40)[index * 7:])
    train_args = ["--train-data", f"{work}/soak_train_*.bin", "--model", "tiny", "-b", str(8 // args.ranks),
                  "-t", "16", "--steps", str(args.steps), "--lr", "3e-3",
                  "--warmup-steps", str(min(20, args.steps // 4)),
                  "--weight-decay", "0.1", "--shuffle", "--checkpoint-every", str(args.checkpoint_every),
                  "--keep-checkpoints", str(args.keep)]

    def command(output_dir, extra=()):
        trainer = [os.path.abspath(args.trainer)] + train_args + list(extra) + ["-o", output_dir]
        if args.ranks == 1:
            return trainer
        return [args.mpiexec, "-np", str(args.ranks), "--oversubscribe", "--bind-to", "none"] + trainer

    # SIGUSR1 reaches the ranks at once through Open MPI's mpirun (SIGTERM only after a delay: README).
    first_signal = signal.SIGTERM if args.ranks == 1 else signal.SIGUSR1
    started = time.monotonic()
    segments = [run_segment("uninterrupted", command(f"{work}/whole"), args.ranks, args.sample)]
    stopped = f"{work}/stopped"
    segments.append(run_segment("part 1", command(stopped), args.ranks, args.sample,
                                stop_at=args.steps // 3, stop_signal=first_signal))
    segments.append(run_segment("part 2", command(stopped, ["--resume", "latest"]), args.ranks, args.sample,
                                stop_at=2 * args.steps // 3, stop_signal=signal.SIGUSR1))
    segments.append(run_segment("part 3", command(stopped, ["--resume", "latest"]), args.ranks, args.sample))
    elapsed = time.monotonic() - started
    expected = [0, 75, 75, 0]
    if [segment.status for segment in segments] != expected:
        for segment in segments:
            print(f"--- {segment.name}: exit {segment.status}\n{segment.output[-3000:]}")
        print(f"unexpected exit statuses {[s.status for s in segments]} (expected {expected}); runs in {work}")
        return 1

    final = f"ckpt_{args.steps:06d}"
    with open(f"{work}/whole/{final}_model.bin", "rb") as a, open(f"{stopped}/{final}_model.bin", "rb") as b:
        same_model = a.read() == b.read()
    same_state = all(state_without_clock(f"{work}/whole/{final}_state_rank{r}.bin") ==
                     state_without_clock(f"{stopped}/{final}_state_rank{r}.bin") for r in range(args.ranks))
    left = sorted(f for f in os.listdir(stopped) if f.startswith("ckpt_") and f.endswith("_manifest.json"))

    print(f"soak: {args.steps} steps of the tiny model on {args.ranks} rank(s), a checkpoint every "
          f"{args.checkpoint_every} steps (newest {args.keep} kept), {elapsed:.0f} s in all")
    print(f"{'segment':<14} {'exit':>4} {'steps':>11} {'samples':>7} {'RSS after warm-up':>18} "
          f"{'RSS at end':>11} {'growth/1000 steps':>18}")
    for segment in segments:
        warm = [r for s, r in segment.samples if s > args.warmup] or [r for _, r in segment.samples] or [0]
        steps = f"{segment.first_step}-{segment.last_step}"
        growth = growth_per_1000_steps(segment.samples, args.warmup)
        print(f"{segment.name:<14} {segment.status:>4} {steps:>11} {len(segment.samples):>7} "
              f"{warm[0] / 1024:>14.1f} MiB {warm[-1] / 1024:>7.1f} MiB {growth:>13.1f} KiB")
    print(f"final model file byte-identical to the uninterrupted run's: {'yes' if same_model else 'NO'}")
    print(f"final optimizer state identical (train-time word and its checksum aside): {'yes' if same_state else 'NO'}")
    print(f"complete checkpoints left in the stopped run's directory: {len(left)} ({', '.join(left)})")
    if not args.keep_dir:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"runs kept in {work}")
    return 0 if same_model and same_state else 1


if __name__ == "__main__":
    sys.exit(main())
