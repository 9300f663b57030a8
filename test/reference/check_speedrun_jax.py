#!/usr/bin/env python3
"""Cross-checks the C++ double-precision reference speedrun model against an independent model written
here in JAX float64 from the record (docs/recipes.md) (autodiff for the gradients).

Runs speedrun_dump, which writes two cases ("random": perturbed parameters so every path carries
gradient; "fresh": the record's initialisation) with the batch, the windows, the YaRN step and our loss
and gradients. Here the 12-block structure is spelled out as lists from the spec, the RoPE frequencies
and attention scale are recomputed from the spec's YaRN formula, and the published facts are checked on
the JAX side too (fresh model: loss = T ln V, every gradient but the head's zero).
Exit 0 when all agree, 1 on a mismatch, 77 (CTest skip) without JAX.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

from check_reference_jax import import_jax_float64_cpu  # the same JAX set-up (float64, CPU)

FLT_EPSILON = float(np.finfo(np.float32).eps)  # rms_norm's eps=None for bf16/fp32 inputs (the record (docs/recipes.md))

# The record's 12 blocks (the record (docs/recipes.md)).
ATTENTION_BLOCKS = [1, 2, 3, 4, 5, 6, 8, 9, 10, 11]
MLP_BLOCKS = list(range(1, 12))
VALUE_EMBED_OF_BLOCK = {1: 1, 2: 2, 9: 0, 10: 1, 11: 2}
LONG_WINDOW_BLOCKS = {4, 11}
SKIP_PUSH_BLOCKS = [1, 2, 3, 4, 5]
SKIP_POP_BLOCKS = [6, 7, 8, 9, 10]  # before block i: x += sigmoid(skip_w[i - 6]) * pop()
BACKOUT_BLOCK = 8


def spec_rope(D, window_block, old_blocks, new_blocks):
    """Frequencies (fp32, D/2) and attention scale after reset and one YaRN step, from the spec."""
    n = D // 4
    w = np.concatenate([(1.0 / 1024.0) ** np.linspace(0.0, 1.0, n), np.zeros(n)]).astype(np.float32)
    rotations = np.float32(window_block * old_blocks) * w / np.float32(2 * math.pi)
    g = np.clip((rotations - np.float32(1)) / np.float32(31), 0, 1).astype(np.float32)
    ratio = old_blocks / new_blocks
    w = (w * (np.float32(ratio) + g * np.float32(1 - ratio))).astype(np.float32)
    return w, 0.1 * (1 + 0.2 * math.log(new_blocks / old_blocks))


def make_loss(jax, jnp, cfg, T):
    """loss(params, tokens, targets, masks, cos, sin, attn_scale) for sequences of T tokens; masks
    (2, T, T): the short and the long window's visibility."""
    H, D = cfg["H"], cfg["D"]
    C = H * D
    sigmoid = jax.nn.sigmoid

    def norm(x):
        return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + FLT_EPSILON)

    def rotary(x, cos, sin):  # x (T, H, D): halves x1, x2 rotated by (T, D/2) tables
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        c, s = cos[:, None, :], sin[:, None, :]
        return jnp.concatenate([x1 * c + x2 * s, -x1 * s + x2 * c], axis=-1)

    def attention(p, i, x, ve, sa, rope):
        w = p[f"blocks.{i}.qkvo"].reshape(4, C, C)
        q, k, v = (x @ w[n].T for n in range(3))
        q, k, v = (a.reshape(T, H, D) for a in (q, k, v))
        masks, cos, sin, attn_scale = rope
        q, k = rotary(norm(q), cos, sin), rotary(norm(k), cos, sin)
        v = sa[0] * v + (sa[1] * ve.reshape(T, H, D) if ve is not None else 0.0)
        scores = jnp.einsum("ihd,jhd->hij", q, k) * attn_scale
        scores = jnp.where(masks[int(i in LONG_WINDOW_BLOCKS)][None], scores, -jnp.inf)
        y = jnp.einsum("hij,jhd->ihd", jax.nn.softmax(scores, axis=-1), v)
        gate = sigmoid(x[:, :12] @ p[f"blocks.{i}.attn_gate"].T)  # (T, H)
        y = (y * gate[:, :, None]).reshape(T, C)
        return y @ w[3].T

    def mlp(p, i, x):
        h = jnp.maximum(x @ p[f"blocks.{i}.fc"], 0.0) ** 2
        return h @ p[f"blocks.{i}.proj"].T

    def loss(p, tokens, targets, masks, cos, sin, attn_scale):
        s = p["scalars"]
        rope = (masks, cos, sin, attn_scale)
        L = cfg["L"]
        e = p["embed"][tokens]
        ve = [p[f"ve{n}"][tokens] for n in range(3)]
        gate = sigmoid(e[1:, :12] @ p["smear_gate"].reshape(12))
        x = jnp.concatenate([e[:1], e[1:] + s[5 * L] * gate[:, None] * e[:-1]])
        x = x0 = norm(x)
        stack, x_backout = [], None
        for i in range(1, L):
            if i in SKIP_POP_BLOCKS:
                x = x + sigmoid(s[i - 6]) * stack.pop()
            x = s[L + 2 * i] * x + s[L + 2 * i + 1] * x0
            if i in ATTENTION_BLOCKS:
                ve_i = ve[VALUE_EMBED_OF_BLOCK[i]] if i in VALUE_EMBED_OF_BLOCK else None
                x = x + attention(p, i, norm(x), ve_i, (s[3 * L + 2 * i], s[3 * L + 2 * i + 1]), rope)
            if i in MLP_BLOCKS:
                x = x + mlp(p, i, norm(x))
            if i in SKIP_PUSH_BLOCKS:
                stack.append(x)
            if i == BACKOUT_BLOCK:
                x_backout = x
        x = norm(x - s[5 * L + 1] * x_backout)
        logits = 30.0 * sigmoid((x @ p["head"].T) / 7.5)
        logp = jax.nn.log_softmax(logits, axis=-1)  # over every column, padding included
        return -jnp.sum(jnp.take_along_axis(logp, targets[:, None], axis=-1))

    return loss


def window_masks(T, cu_seqlens, window_short, window_long):
    """(2, T, T) booleans: key j visible to query i (same document, j <= i, i - j <= window)."""
    positions = np.arange(T)
    doc = np.searchsorted(np.asarray(cu_seqlens), positions, side="right") - 1
    i, j = positions[:, None], positions[None, :]
    base = (doc[:, None] == doc[None, :]) & (j <= i)
    return np.stack([base & (i - j <= window_short), base & (i - j <= window_long)])


def compare(name, ours, theirs, rel):
    scale = max(float(np.abs(theirs).max()), 1e-30)
    err = float(np.abs(ours - theirs).max())
    ok = err <= rel * scale
    print(f"{'ok  ' if ok else 'FAIL'} {name:22s} max|diff| {err:.3e}  scale {scale:.3e}")
    return ok


def load_case(directory):
    with open(os.path.join(directory, "meta.json")) as f:
        meta = json.load(f)
    flat = {}
    for kind in ("params", "grads"):
        data = np.fromfile(os.path.join(directory, f"{kind}.bin"), dtype=np.float64)
        tensors, pos = {}, 0
        for t in meta["tensors"]:
            n = int(np.prod(t["shape"]))
            tensors[t["name"]] = data[pos:pos + n].reshape(t["shape"])
            pos += n
        assert pos == data.size, f"{kind}.bin: {data.size} values, the tensor list has {pos}"
        flat[kind] = tensors
    return meta, flat["params"], flat["grads"]


def check_case(jax, jnp, loss_and_grad, directory, fresh):
    meta, params, ref_grads = load_case(directory)
    cfg, T = meta["config"], meta["T"]
    assert cfg["L"] == 12, "the JAX model spells out the record's 12-block structure"
    ok = True
    # Our C++ YaRN state against the spec's formula in fp32 (a few fp32 roundings apart at most).
    freq, attn_scale = spec_rope(cfg["D"], cfg["window_block"], meta["yarn"]["old_long_blocks"],
                                 meta["yarn"]["new_long_blocks"])
    ok &= compare("rope frequencies", np.asarray(meta["frequencies"]), freq.astype(np.float64), 1e-6)
    ok &= compare("attn_scale", np.array([meta["attn_scale"]]), np.array([attn_scale]), 1e-15)
    # The model then runs on the dumped fp32 frequencies, so that both sides use the very same tables.
    theta = np.arange(cfg["max_seq_len"])[:, None] * np.asarray(meta["frequencies"])[None, :]
    cos, sin = jnp.asarray(np.cos(theta[:T])), jnp.asarray(np.sin(theta[:T]))
    masks = jnp.asarray(window_masks(T, meta["cu_seqlens"], meta["window_short"], meta["window_long"]))
    tokens, targets = jnp.asarray(meta["tokens"]), jnp.asarray(meta["targets"])
    jparams = {k: jnp.asarray(v) for k, v in params.items()}
    loss, grads = loss_and_grad(jparams, tokens, targets, masks, cos, sin, meta["attn_scale"])
    grads = {k: np.asarray(v) for k, v in grads.items()}
    # Same arithmetic in another summation order: agreement to ~1e-13 relative is expected, 1e-9 allowed.
    ok &= compare("loss", np.array([meta["loss"]]), np.array([float(loss)]), 1e-11)
    for name in params:
        ok &= compare("d" + name, ref_grads[name], grads[name], 1e-9)
    if fresh:  # the published facts, on the JAX side
        expected = T * math.log(cfg["V"])
        fact = abs(float(loss) - expected) <= 1e-12 * expected
        others = max(float(np.abs(g).max()) for n, g in grads.items() if n != "head")
        fact &= others == 0.0 and float(np.abs(grads["head"]).max()) > 0.0
        print(f"{'ok  ' if fact else 'FAIL'} fresh model: loss {float(loss):.12f} = T ln V {expected:.12f}, "
              f"max |grad| outside the head {others}")
        ok &= fact
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dump", required=True, help="path of the speedrun_dump executable")
    args = parser.parse_args()
    modules = import_jax_float64_cpu()
    if modules is None:
        return 77  # CTest's skip code
    jax, jnp = modules
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.dump, tmp], check=True)
        meta, _, _ = load_case(os.path.join(tmp, "random"))
        # One compiled function for both cases (same shapes): JIT compilation is most of the run time.
        loss_and_grad = jax.jit(jax.value_and_grad(make_loss(jax, jnp, meta["config"], meta["T"])))
        for case in ("random", "fresh"):
            print(f"--- {case}")
            ok &= check_case(jax, jnp, loss_and_grad, os.path.join(tmp, case), fresh=case == "fresh")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
