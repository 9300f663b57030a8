#!/usr/bin/env python3
"""An independent oracle for train_gpt2: JAX builds GPT-2 from the model file the trainer dumped and
differentiates it (float64, CPU), and the loss and every parameter gradient of that one batch are
compared with what train_gpt2 computed.

  reference_check.py DUMP_DIR            check a dump written by `LLMC_DEBUG_DUMP_DIR=DUMP_DIR train_gpt2 ...`
  reference_check.py --run TRAINER       write tiny token shards, run TRAINER (1 step, "tiny" preset)
                                         dumping into a temp dir, then check it (--require-gpu:
                                         exit 77 without a GPU, for the GPU build's CTest entry)

A dump holds model.bin (llm.c fp32 file of the exact parameters used), inputs.bin and targets.bin
(int32, B*T), grads.bin (float32 in the trainer's bucketed layout, see llmc/family/param_layout.h) and
meta.json (loss, B, T, precision). Exit 0 when all agree, 1 on a mismatch or bad dump, 77 (CTest's
skip) when JAX is not installed.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "test", "reference"))
# The llm.c file reader and the JAX GPT-2 written for the reference model's own cross-check.
from check_reference_jax import (LLMC_ORDER, import_jax_float64_cpu, make_loss,  # noqa: E402
                                 read_llmc_checkpoint)

# The trainer's parameter layout (llmc/family/param_layout.cpp): buckets [wte, wpe], one per layer, [lnfw, lnfb];
# each tensor starts at a multiple of 8 elements inside its bucket; a bucket is padded to a multiple of
# world_size * 32 elements.
LAYER_KINDS = ["ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb", "fcprojw",
               "fcprojb"]
TENSOR_ALIGN, BUCKET_ALIGN = 8, 32

# Tolerance on each gradient tensor, relative to its largest reference element, and on the loss.
# fp32: each kernel rounds to ~6e-8 relative and a GEMM sums at most a few hundred terms, so 1e-4 of
# the tensor's largest gradient leaves two orders of headroom while a real bug is O(1).
# bf16: parameters, activations and gradients are stored with 8 mantissa bits (2^-9 = 0.2% per
# rounding) and pass through ~20 roundings per layer; errors of a few percent of the largest gradient
# are the arithmetic, a bug is still O(1).
TOLERANCE = {"fp32": {"grad": 1e-4, "loss": 1e-5}, "bf16": {"grad": 6e-2, "loss": 1e-2}}


class DumpError(Exception):
    """A dump that cannot be checked: reported as one line naming the file."""


def layout_offsets(cfg, world_size=1):
    """{(name, layer): offset} of every tensor in the flat buffer, and the buffer's total size."""
    L, C, maxT, Vp = cfg["L"], cfg["C"], cfg["maxT"], cfg["Vp"]
    numel = {"wte": Vp * C, "wpe": maxT * C, "ln1w": C, "ln1b": C, "qkvw": 3 * C * C, "qkvb": 3 * C,
             "attprojw": C * C, "attprojb": C, "ln2w": C, "ln2b": C, "fcw": 4 * C * C, "fcb": 4 * C,
             "fcprojw": 4 * C * C, "fcprojb": C, "lnfw": C, "lnfb": C}
    buckets = [[("wte", None), ("wpe", None)]] + [[(k, l) for k in LAYER_KINDS] for l in range(L)] + \
              [[("lnfw", None), ("lnfb", None)]]
    offsets, bucket_start = {}, 0
    for bucket in buckets:
        cursor = 0
        for name, layer in bucket:
            cursor = -(-cursor // TENSOR_ALIGN) * TENSOR_ALIGN
            offsets[(name, layer)] = (bucket_start + cursor, numel[name])
            cursor += numel[name]
        multiple = world_size * BUCKET_ALIGN
        bucket_start += -(-cursor // multiple) * multiple
    return offsets, bucket_start


def grads_by_name(flat, cfg, shapes):
    """The layout-ordered gradient buffer as {name: array shaped like the llm.c tensor (layers stacked)}."""
    offsets, total = layout_offsets(cfg)
    if flat.size != total:
        raise DumpError(f"grads.bin has {flat.size} floats, the one-rank layout of this model has {total} "
                        "(dumps of multi-rank runs are not supported)")
    inside = np.zeros(total, dtype=bool)
    out = {}
    for name in LLMC_ORDER:
        layers = [None] if name in ("wte", "wpe", "lnfw", "lnfb") else range(cfg["L"])
        parts = []
        for layer in layers:
            offset, n = offsets[(name, layer)]
            parts.append(flat[offset:offset + n])
            inside[offset:offset + n] = True
        out[name] = np.concatenate(parts).reshape(shapes[name])
    padding = flat[~inside]
    if np.any(padding != 0):
        raise DumpError(f"grads.bin: {np.count_nonzero(padding)} padding elements are not zero")
    return out


def load_dump(directory):
    def path(name):
        full = os.path.join(directory, name)
        if not os.path.isfile(full):
            raise DumpError(f"{full}: missing (is {directory} a train_gpt2 dump directory, LLMC_DEBUG_DUMP_DIR?)")
        return full

    try:
        with open(path("meta.json"), encoding="utf-8") as handle:
            meta = json.load(handle)
        B, T, precision, loss = int(meta["B"]), int(meta["T"]), meta["precision"], float(meta["loss"])
    except (ValueError, KeyError) as err:
        raise DumpError(f"{os.path.join(directory, 'meta.json')}: not the expected JSON: {err}") from None
    if precision not in TOLERANCE:
        raise DumpError(f"{path('meta.json')}: unknown precision {precision!r}")
    try:
        cfg, params = read_llmc_checkpoint(path("model.bin"))
    except AssertionError as err:
        raise DumpError(f"{path('model.bin')}: {err}") from None
    tokens = {}
    for name in ("inputs", "targets"):
        data = np.fromfile(path(f"{name}.bin"), dtype=np.int32)
        if data.size != B * T:
            raise DumpError(f"{path(name + '.bin')}: {data.size} tokens, meta.json says B*T = {B * T}")
        if data.min() < 0 or data.max() >= cfg["V"]:
            raise DumpError(f"{path(name + '.bin')}: token outside [0, {cfg['V']})")
        tokens[name] = data.reshape(B, T)
    shapes = {name: value.shape for name, value in params.items()}
    grads = grads_by_name(np.fromfile(path("grads.bin"), dtype=np.float32).astype(np.float64), cfg, shapes)
    return meta, cfg, params, tokens, grads, loss


def check(directory):
    modules = import_jax_float64_cpu()
    if modules is None:
        return 77  # CTest's skip code
    jax, jnp = modules
    try:
        meta, cfg, params, tokens, our_grads, our_loss = load_dump(directory)
    except DumpError as err:
        print(f"reference_check: {err}", file=sys.stderr)
        return 1
    tolerance = TOLERANCE[meta["precision"]]
    loss_fn = jax.jit(jax.value_and_grad(make_loss(jax, jnp, cfg)))
    loss, grads = loss_fn({k: jnp.asarray(v) for k, v in params.items()}, jnp.asarray(tokens["inputs"]),
                          jnp.asarray(tokens["targets"]))
    loss = float(loss)
    ok = abs(our_loss - loss) <= tolerance["loss"] * abs(loss)
    print(f"{'ok  ' if ok else 'FAIL'} loss       ours {our_loss:.6f}  jax {loss:.6f}  "
          f"(relative tolerance {tolerance['loss']:g})")
    for name in LLMC_ORDER:
        theirs = np.asarray(grads[name])
        scale = max(float(np.abs(theirs).max()), 1e-30)
        err = float(np.abs(our_grads[name] - theirs).max())
        good = err <= tolerance["grad"] * scale
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} d{name:9s} max|diff| {err:.3e}  max|grad| {scale:.3e}  "
              f"relative {err / scale:.2e} (tolerance {tolerance['grad']:g})")
    print(f"{meta['precision']} dump, B={tokens['inputs'].shape[0]} T={tokens['inputs'].shape[1]}, model {cfg}: "
          f"{'all agree' if ok else 'MISMATCH'}")
    return 0 if ok else 1


def write_shard(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as out:
        out.write(header.tobytes())
        out.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def run_and_check(trainer):
    with tempfile.TemporaryDirectory(prefix="reference_check_") as tmp:
        rng = np.random.default_rng(3)
        write_shard(os.path.join(tmp, "rand_train_000001.bin"), rng.integers(0, 100, size=1000))  # tiny: V=100
        dump = os.path.join(tmp, "dump")
        command = [trainer, "--model", "tiny", "-b", "2", "-t", "16", "--steps", "1", "--seed", "5",
                   "--train-data", os.path.join(tmp, "rand_train_*.bin")]
        # The trainer's test hook (llmc/train/debug_hooks.h), not one of its options.
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   LLMC_DEBUG_DUMP_DIR=dump)
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        if result.returncode != 0:
            print(f"reference_check: {' '.join(command)} failed ({result.returncode}):\n{result.stdout}{result.stderr}",
                  file=sys.stderr)
            return 1
        return check(dump)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("dump", nargs="?", help="a directory written by train_gpt2 with LLMC_DEBUG_DUMP_DIR")
    group.add_argument("--run", metavar="TRAINER", help="run this train_gpt2 binary on tiny shards, then check")
    parser.add_argument("--require-gpu", action="store_true", help="exit 77 (skipped) when no GPU is present")
    args = parser.parse_args()
    if args.require_gpu and (not shutil.which("nvidia-smi") or
                             subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode != 0):
        print("skipped: no GPU")
        return 77
    return run_and_check(args.run) if args.run else check(args.dump)


if __name__ == "__main__":
    sys.exit(main())
