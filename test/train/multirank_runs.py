"""Helpers for the data-parallel tests (test_multirank.py) and scripts/bench_overlap.sh: tiny token
shards and llm.c model files written with numpy, train_gpt2 runs under mpirun with emulated ranks,
and readers for what a run leaves behind (log lines, llm.c model files, per-rank optimizer state,
Chrome traces).
"""
import glob
import json
import os
import re
import subprocess
import time

import numpy as np

SHARD_MAGIC, SHARD_VERSION = 20240520, 1
MODEL_MAGIC, MODEL_VERSION_FP32 = 20240326, 3
STATE_HEADER_BYTES = 32 * 8  # llmc/checkpoint/state_file.cpp: 32 int64 header words, then the named arrays
STATE_RECORD_BYTES = 8 * 8   # each array's record: its name (48 bytes), element size, count
STATE_NAMED_ARRAYS_WORD = 26

ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def write_shard(path, tokens):
    """An llm.c token shard: 256 int32 header (magic, version, count), then uint16 tokens."""
    header = np.zeros(256, dtype=np.int32)
    header[:3] = (SHARD_MAGIC, SHARD_VERSION, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def write_model(path, num_layers, num_heads, channels, max_seq_len, vocab, seed):
    """An llm.c fp32 model file (version 3) of GPT-2 with the given shape and random weights in
    llm.c's tensor order (wte, wpe, then each per-layer kind for all layers, then lnf)."""
    padded_vocab = (vocab + 63) // 64 * 64
    C, L = channels, num_layers
    rng = np.random.default_rng(seed)

    def normal(*shape, std=0.02):
        return (rng.standard_normal(shape) * std).astype(np.float32)

    wte = normal(padded_vocab, C)
    wte[vocab:] = 0.0
    tensors = [wte, normal(max_seq_len, C),
               np.ones((L, C), np.float32), np.zeros((L, C), np.float32),        # ln1 w, b
               normal(L, 3 * C, C), np.zeros((L, 3 * C), np.float32),            # qkv w, b
               normal(L, C, C), np.zeros((L, C), np.float32),                    # attproj w, b
               np.ones((L, C), np.float32), np.zeros((L, C), np.float32),        # ln2 w, b
               normal(L, 4 * C, C), np.zeros((L, 4 * C), np.float32),            # fc w, b
               normal(L, C, 4 * C), np.zeros((L, C), np.float32),                # fcproj w, b
               np.ones(C, np.float32), np.zeros(C, np.float32)]                  # lnf w, b
    header = np.zeros(256, dtype=np.int32)
    header[:8] = (MODEL_MAGIC, MODEL_VERSION_FP32, max_seq_len, vocab, L, num_heads, C, padded_vocab)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for tensor in tensors:
            f.write(tensor.tobytes())


def read_model_params(path):
    """The fp32 parameters of an llm.c model file (version 3), as one flat array."""
    with open(path, "rb") as f:
        raw = f.read()
    header = np.frombuffer(raw[:1024], dtype=np.int32)
    if header[0] != MODEL_MAGIC or header[1] != MODEL_VERSION_FP32:
        raise ValueError(f"{path}: not an fp32 llm.c model file (header {header[:2]})")
    return np.frombuffer(raw[1024:], dtype=np.float32)


def read_speedrun_params(path):
    """The parameters of an fp32 speedrun model file (llmc/model/modded44/speedrun_model_file.h, dtype 0), flat."""
    with open(path, "rb") as f:
        raw = f.read()
    header = np.frombuffer(raw[:1024], dtype=np.int32)
    if header[0] != 20251031 or header[3] != 0:
        raise ValueError(f"{path}: not an fp32 speedrun model file (header {header[:4]})")
    return np.frombuffer(raw[1024:], dtype=np.float32)


def read_state(path):
    """(header int64 words, master, m, v) of one rank's zero-adamw optimizer-state file
    (llmc/checkpoint/state_file.h): version 5's named arrays master, adam_m and adam_v, each after its
    record of 8 words (name, element size, count); version 2-4's three unnamed fp32 arrays."""
    with open(path, "rb") as f:
        raw = f.read()
    header = np.frombuffer(raw[:STATE_HEADER_BYTES], dtype=np.int64)
    if header[1] < 5:
        payload = np.frombuffer(raw[STATE_HEADER_BYTES:], dtype=np.float32)
        n = len(payload) // 3
        return header, payload[:n], payload[n:2 * n], payload[2 * n:]
    arrays, at = {}, STATE_HEADER_BYTES
    for _ in range(int(header[STATE_NAMED_ARRAYS_WORD])):
        name = raw[at:at + 48].split(b"\0")[0].decode()
        element_bytes, count = np.frombuffer(raw[at + 48:at + STATE_RECORD_BYTES], dtype=np.int64)
        at += STATE_RECORD_BYTES
        arrays[name] = np.frombuffer(raw[at:at + element_bytes * count], dtype=np.float32 if element_bytes == 4
                                     else np.uint16)
        at += int(element_bytes * count)
    return header, arrays["master"], arrays["adam_m"], arrays["adam_v"]


STEP_LINE = re.compile(r"^step:(\d+)/(\d+) train_loss:(\S+) .* norm:(\S+)")
OVERLAP_FIELDS = re.compile(r"comm:([\d.]+)ms exposed_comm:([\d.]+)ms overlapped:([\d.]+)%")


def step_lines(log_text):
    """{step: (loss text, norm text, whole line)} of the training lines of a log."""
    result = {}
    for line in log_text.splitlines():
        match = STEP_LINE.match(line)
        if match:
            result[int(match.group(1))] = (match.group(3), match.group(4), line)
    return result


class Run:
    """What one train_gpt2 run left: exit status, output, log lines, output directory."""

    def __init__(self, command, completed, output_dir):
        self.command = command
        self.returncode = completed.returncode
        self.stdout = completed.stdout
        self.stderr = completed.stderr
        self.output_dir = output_dir
        self.steps = step_lines(completed.stdout)

    def describe(self):
        return (f"command: {' '.join(self.command)}\nexit status {self.returncode}\n"
                f"stdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}")

    def checkpoint(self, step):
        return os.path.join(self.output_dir, f"ckpt_{step:06d}")

    def final_params(self, step):
        path = self.checkpoint(step) + "_model.bin"
        with open(path, "rb") as f:
            speedrun = np.frombuffer(f.read(4), dtype=np.int32)[0] == 20251031
        return read_speedrun_params(path) if speedrun else read_model_params(path)

    def losses(self):
        return [float(self.steps[s][0]) for s in sorted(self.steps)]


def mpi_command(mpiexec, ranks, binary, args):
    """The command that starts `ranks` ranks (1 rank: the binary alone, an MPI singleton)."""
    if ranks == 1:
        return [binary] + list(args)
    return [mpiexec, "-np", str(ranks), "--oversubscribe", "--bind-to", "none", binary] + list(args)


def run_trainer(mpiexec, ranks, binary, args, output_dir, timeout=120, extra_env=None, command=None):
    """Runs train_gpt2 (writing into output_dir) and returns a Run; raises on a timeout."""
    env = dict(os.environ, **ROOT_ENV)
    env.update(extra_env or {})
    command = command or mpi_command(mpiexec, ranks, binary, list(args) + ["-o", output_dir])
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    return Run(command, completed, output_dir)


class RunningTrainer:
    """A train_gpt2 job still running: its launcher process (mpirun, or the trainer itself for one rank),
    stdout and stderr merged, read line by line."""

    def __init__(self, command, output_dir, extra_env=None):
        env = dict(os.environ, **ROOT_ENV)
        env.update(extra_env or {})
        self.command = command
        self.output_dir = output_dir
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines = []

    def read_until(self, prefix):
        """Reads output up to and including the first line that starts with `prefix`."""
        for line in self.process.stdout:
            self.lines.append(line)
            if line.startswith(prefix):
                return line
        raise AssertionError(f"the run ended before printing '{prefix}':\n{self.output()}")

    def finish(self, timeout):
        """Waits for the end (raises subprocess.TimeoutExpired after `timeout` s); returns the exit status."""
        rest, _ = self.process.communicate(timeout=timeout)
        self.lines.append(rest)
        return self.process.returncode

    def output(self):
        return "".join(self.lines)

    def describe(self):
        return f"command: {' '.join(self.command)}\nexit status {self.process.returncode}\n{self.output()[-4000:]}"

    def rank_pid(self, rank, timeout=30.0):
        """The process id of rank `rank` (a child of mpirun whose environment says so)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for child in _children(self.process.pid):
                try:
                    with open(f"/proc/{child}/environ", "rb") as f:
                        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in f.read().split(b"\0"):
                            return child
                except OSError:
                    continue
            time.sleep(0.1)
        raise AssertionError(f"no process of rank {rank} under {self.process.pid}")


def _children(pid):
    children = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as f:
            children += [int(child) for child in f.read().split()]
    return children


def start_trainer(mpiexec, ranks, binary, args, output_dir, extra_env=None, mpi_options=()):
    """Starts train_gpt2 under mpirun (writing into output_dir) without waiting for it."""
    command = ([mpiexec, "-np", str(ranks), "--oversubscribe", "--bind-to", "none"] + list(mpi_options) +
               [binary] + list(args) + ["-o", output_dir])
    return RunningTrainer(command, output_dir, extra_env)


def read_manifest(prefix):
    with open(prefix + "_manifest.json") as f:
        return json.load(f)


def load_trace(path):
    """The complete ("X") slices of one rank's Chrome trace."""
    with open(path) as f:
        document = json.load(f)
    return [event for event in document["traceEvents"] if event.get("ph") == "X"]


def trace_files(directory):
    return sorted(glob.glob(os.path.join(directory, "trace_rank*.json")))
