#!/usr/bin/env python3
"""Cross-checks the head-128 window attention kernels against an independent float64 JAX attention.

Runs the kernel test binary's JAX-oracle case with LLMC_ATTENTION_DUMP_DIR set, which writes q, k, v,
dout, cu_seqlens, the window, the scale and the kernels' out, lse, dq, dk, dv. Here the attention is
written from its definition: an explicit boolean [T, T] mask (same document, causal, q - k <= window),
masked scores, softmax, and the three gradients by jax.vjp. Tolerances are those of the C++ test
(window_attention_case.h), recomputed here from the same roundoff constants.
Exit 0 when everything agrees, 1 on a mismatch, 77 (CTest skip) without JAX.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

BF16_ROUNDOFF = 2.0 ** -8
FP32_ROUNDOFF = 2.0 ** -24


def tolerance(roundings, sum_length):
    return 2.0 * (roundings * BF16_ROUNDOFF + sum_length * FP32_ROUNDOFF)


def rms(x):
    return float(np.sqrt(np.mean(np.square(x))))


def compare(name, got, expected, tol, absolute=0.0):
    """The C++ all_close: |got - expected| <= tol * (|expected| + rms(expected)) + absolute."""
    scale = rms(expected) or np.finfo(np.float64).tiny
    error = np.maximum(np.abs(got - expected) - absolute, 0.0) / (np.abs(expected) + scale)
    worst = float(np.max(error)) if np.all(np.isfinite(got)) else float("inf")
    ok = worst <= tol
    print(f"{name:4s}: max scaled error {worst:.3g} (tolerance {tol:.3g}, absolute {absolute:.3g})"
          f" {'ok' if ok else 'MISMATCH'}")
    return ok


def read_dump(directory):
    with open(os.path.join(directory, "meta.txt")) as meta:
        T, heads, window, scale = meta.readline().split()
        cu_seqlens = [int(x) for x in meta.readline().split()]
    shape = (int(T), int(heads), 128)
    arrays = {}
    for name in ("q", "k", "v", "dout", "out", "dq", "dk", "dv"):
        arrays[name] = np.fromfile(os.path.join(directory, name + ".f64"), dtype=np.float64).reshape(shape)
    arrays["lse"] = np.fromfile(os.path.join(directory, "lse.f64"), dtype=np.float64).reshape(shape[1], shape[0])
    return int(T), int(window), float(scale), np.array(cu_seqlens), arrays


def boolean_mask(T, window, cu_seqlens):
    """mask[q, k]: q attends k (same document, k <= q, q - k <= window)."""
    document = np.searchsorted(cu_seqlens, np.arange(T), side="right") - 1
    query, key = np.meshgrid(np.arange(T), np.arange(T), indexing="ij")
    return (document[query] == document[key]) & (key <= query) & (query - key <= window)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", required=True, help="the kernels_bf16 test binary (emulated or CUDA)")
    args = parser.parse_args()
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_platforms", "cpu")
        import jax.numpy as jnp
    except ImportError:
        print("skipped: jax is not installed")
        return 77

    with tempfile.TemporaryDirectory() as directory:
        environment = dict(os.environ, LLMC_ATTENTION_DUMP_DIR=directory)
        run = subprocess.run([args.binary, "--gtest_filter=WindowAttentionOracle.JaxCase"], env=environment,
                             capture_output=True, text=True)
        if run.returncode != 0 or not os.path.exists(os.path.join(directory, "meta.txt")):
            print(run.stdout[-4000:], run.stderr[-4000:])
            print(f"{args.binary}: the JAX-oracle case failed or wrote nothing")
            return 1
        T, window, scale, cu_seqlens, a = read_dump(directory)

    mask = jnp.asarray(boolean_mask(T, window, cu_seqlens))

    def attention(q, k, v):
        scores = jnp.einsum("qhd,khd->hqk", q, k) * scale
        scores = jnp.where(mask[None], scores, -jnp.inf)
        lse = jax.scipy.special.logsumexp(scores, axis=-1)
        probs = jnp.exp(scores - lse[..., None])
        return jnp.einsum("hqk,khd->qhd", probs, v), lse

    (out, lse), backward = jax.vjp(attention, *(jnp.asarray(a[n]) for n in ("q", "k", "v")))
    dq, dk, dv = backward((jnp.asarray(a["dout"]), jnp.zeros_like(lse)))
    max_keys = int(np.max(np.sum(np.asarray(mask), axis=1)))
    # The tolerances of window_attention_case.h (see the derivation there).
    allowance = 2 * BF16_ROUNDOFF * scale * rms(a["dout"]) * rms(np.asarray(out)) * np.sqrt(128)
    checks = [
        compare("out", a["out"], np.asarray(out), tolerance(2, 128 + max_keys)),
        compare("lse", a["lse"], np.asarray(lse), 2 * tolerance(0, 128 + max_keys)),
        compare("dq", a["dq"], np.asarray(dq), tolerance(6, 128 + 2 * max_keys), allowance * rms(a["k"])),
        compare("dk", a["dk"], np.asarray(dk), tolerance(6, 128 + 2 * max_keys), allowance * rms(a["q"])),
        compare("dv", a["dv"], np.asarray(dv), tolerance(6, 128 + 2 * max_keys)),
    ]
    print(f"T {T}, {len(set(cu_seqlens.tolist())) - 1} documents, window {window}, scale {scale}, "
          f"at most {max_keys} keys per query")
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
