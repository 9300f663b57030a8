#!/usr/bin/env python3
"""Cross-checks the C++ double-precision 2026-07-17 model (test/reference/reference_modded89.cpp) against an
independent model written here in JAX float64 from the recipe (../shared/design/SPEEDRUN89.md sections 1-3),
with JAX's autodiff for the gradients.

Runs modded89_dump, which writes one perturbed case of the tiny shape (batch, weights, prefix table, sign
table, RoPE, windows, our loss, objective and gradients). Here the layer structure is spelled out as lists
from the recipe, masks are full matrices, the paired layers use a reshape, and the loss is written out term
by term. The objective is the loss plus, per row, the weights of the next-token terms that fall past the
last row times that row's lse (what the record's fused kernel differentiates).
Exit 0 when all agree, 1 on a mismatch, 77 (CTest skip) without JAX.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from check_reference_jax import import_jax_float64_cpu  # the same JAX set-up (float64, CPU)

FLT_EPSILON = float(np.finfo(np.float32).eps)
LAYERS = 11
ATTENTION = [i for i in range(LAYERS) if i != 6]
PAIRED = [0, 2, 5, 9]
LONG_AND_KEY_OFFSET = [3, 10]
VALUE_EMBED = {1: 0, 2: 1, 8: 2, 9: 3}
XSA = {1: ("pre", 0), 3: ("pre", 6), 4: ("post", 0), 7: ("post", 6)}
OUTPUT_GATE = {3: ("pre", 12), 10: ("post", 12)}
X0_BIGRAM = {0: ("pre", 18), 1: ("pre", 20), 2: ("pre", 22), 3: ("pre", 24),
             4: ("post", 18), 5: ("post", 20), 7: ("post", 22), 8: ("post", 24), 9: ("post", 26)}


def make_objective(jax, jnp, meta):
    cfg = meta["config"]
    V, H, D, T = cfg["V"], cfg["H"], cfg["D"], cfg["T"]
    C = H * D
    sig = jax.nn.sigmoid
    tokens = np.array(meta["tokens"])
    targets = np.array(meta["targets"])
    positions = np.arange(T)
    doc = np.searchsorted(np.array(meta["cu_seqlens"]), positions, side="right") - 1
    prev = np.concatenate([[0], tokens[:-1]])
    sign_rows = np.where(positions == 0, 0, (prev ^ tokens) % meta["sign_rows"])
    signs = np.array(meta["sign_table"]).reshape(meta["sign_rows"], C)[sign_rows]
    freq = np.array(meta["frequencies"])
    scale = meta["attn_scale"]

    def rms(x, eps=FLT_EPSILON):
        return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)

    def mask(doc_rows, window, inclusive):
        i, j = np.arange(len(doc_rows))[:, None], np.arange(len(doc_rows))[None, :]
        near = (i - j <= window) if inclusive else (i - j < window)
        return (doc_rows[:, None] == doc_rows[None, :]) & (j <= i) & near

    def rope(x, pos):  # x (T, H, D); pos (T, H): adjacent pairs (2m, 2m+1) for m < D/4
        theta = pos[..., None] * freq[None, None, :]
        c, s = jnp.cos(theta), jnp.sin(theta)
        a, b = x[..., 0:D // 2:2], x[..., 1:D // 2:2]
        turned = jnp.stack([a * c + b * s, b * c - a * s], axis=-1).reshape(T, H, D // 2)
        return jnp.concatenate([turned, x[..., D // 2:]], axis=-1)

    def softmax_attention(q, k, v, visible):  # (R, h, D); visible (R, R)
        s = jnp.einsum("rhd,shd->hrs", q, k) * scale
        p = jax.nn.softmax(jnp.where(visible[None], s, -jnp.inf), axis=-1)
        return jnp.einsum("hrs,shd->rhd", p, v), p

    def small_mlp(x, w1, w2, b2, factor):
        h = jax.nn.gelu(x @ w1.T, approximate=False)
        return (h @ w2.T + b2) * factor

    def bf16_copy(x):  # the record's `.bfloat16()` / `type_as(x)` of an fp32 parameter; the cast passes the gradient
        return x + jax.lax.stop_gradient(x.astype(jnp.bfloat16).astype(x.dtype) - x)

    def objective(p):
        s = p["scalars"]
        lam_r, lam_p = bf16_copy(p["resid_lambdas"]), bf16_copy(p["post_lambdas"])
        gate_scale = bf16_copy(p["mudd_gate_scale"][0])
        e = p["embed"][tokens]
        ve = p["value_embeds"].reshape(5, V, C)[:, tokens]  # (5, T, C)
        g_smear = sig(e[1:, :12] @ p["smear_gate"][0])
        x0 = rms(jnp.concatenate([e[:1], e[1:] + s[22] * g_smear[:, None] * e[:-1]]))
        b = p["bigram_embed"][np.array(meta["bigram_hashes"])] * signs
        gates = {"pre": small_mlp(x0, p["gate0.w1"], p["gate0.w2"], p["gate0.b2"], gate_scale)}

        def col(which, c):
            return gates[which][:, c:c + 1]

        def attn(i, xn, aux_v):
            qk = p[f"layers.{i}.qk"].reshape(2 * C, C)
            vo = p[f"layers.{i}.vo"]
            q = (xn @ qk[:C].T * s[2 * i]).reshape(T, H, D)
            k = (xn @ qk[C:].T * s[2 * i]).reshape(T, H, D)
            v = (xn @ vo[0].T * s[2 * i]).reshape(T, H, D)
            pos = np.arange(T)[:, None] * (2 if i in PAIRED else 1) + (np.arange(H)[None, :] % 2 if i in PAIRED else 0)
            q, k = rope(rms(q), pos), rope(rms(k), pos)
            if i in LONG_AND_KEY_OFFSET:
                k = k.at[1:, :, D // 2:].set(k[:-1, :, D // 2:])
            if i in VALUE_EMBED:
                vej = ve[VALUE_EMBED[i]]
                g = 2 * sig(jnp.concatenate([xn[:, :6], vej[:, :6]], axis=1) @ p[f"layers.{i}.ve_gate"].T)  # (T, H)
                v = v + g[:, :, None] * vej.reshape(T, H, D)
            if aux_v is not None:
                v = v + aux_v.reshape(T, H, D)
            window = meta["window_long"] if i in LONG_AND_KEY_OFFSET else meta["window_short"]
            if i in PAIRED:  # [T, H, D] seen as [2T, H/2, D]
                y2, _ = softmax_attention(q.reshape(2 * T, H // 2, D), k.reshape(2 * T, H // 2, D),
                                          v.reshape(2 * T, H // 2, D), mask(np.repeat(doc, 2), window, True))
                y = y2.reshape(T, H, D)
            else:
                y, _ = softmax_attention(q, k, v, mask(doc, window, True))
            if i == 10:  # DC
                w1 = gates["post"][:, 29:29 + H]
                w1 = w1 / jnp.sqrt(jnp.mean(w1 * w1, axis=-1, keepdims=True) + 1e-6)
                w2 = gates["post"][:, 35:35 + H]
                _, probs = softmax_attention(q, k, v, mask(doc, cfg["dc_window"], False))  # (H, T, T)
                A = jnp.einsum("th,hts->ts", w1, probs)
                y = y + jnp.einsum("th,ts,shd->thd", w2, A, v)
            if i in XSA:
                which, c0 = XSA[i]
                alpha = jnp.tanh(gates[which][:, c0:c0 + H])
                coef = jnp.sum(y * v, -1) / jnp.maximum(jnp.sum(v * v, -1), 1e-8)
                y = y - (alpha * coef)[..., None] * v
            if i in OUTPUT_GATE:
                which, c0 = OUTPUT_GATE[i]
                y = y * gates[which][:, c0:c0 + H][..., None]
            return (y.reshape(T, C) @ vo[1].T) * s[2 * i + 1]

        def mlp(i, xn):
            bank = p[f"layers.{i}.mlp"]
            return jnp.square(jnp.maximum(xn @ bank[0].T, 0.0)) @ bank[1]

        x = x0 + col("pre", 19) * b
        cache = {0: x}
        for i in range(LAYERS):
            if i == 4:
                gates["post"] = small_mlp(x, p["gate1.w1"], p["gate1.w2"], p["gate1.b2"], gate_scale)
            if i == 6:
                x = x + sig(s[23]) * col("post", 28) * cache[3]
            if i == 10:
                cache[9] = x
                mu = small_mlp(x, p["mudd0.w1"], p["mudd0.w2"], p["mudd0.b2"], 0.1)
                m = [mu[:, j:j + 1] for j in range(14)]
                v_mudd = m[0] * cache[0] + m[1] * cache[7] + m[2] * x
                x = (1 + m[5]) * x + m[3] * cache[0] + m[4] * cache[7]
                head_gate = jnp.concatenate([jnp.repeat(m[6], C // 2, 1), jnp.repeat(m[7], C // 2, 1)], axis=1)
                a = attn(10, rms(cache[7]), head_gate * ve[4] + v_mudd)
                x = m[8] * x + m[9] * a + m[10] * cache[0] + m[11] * b
                x = m[12] * x + m[13] * mlp(10, rms(x))
            else:
                if i in ATTENTION:
                    a = attn(i, rms(cache[7] if i >= 8 else x), None)
                    which, c0 = X0_BIGRAM[i]
                    x = lam_r[i, 0] * x + lam_p[i, 0] * a + gates[which][:, c0:c0 + 1] * x0
                    if i != 0:
                        x = x + gates[which][:, c0 + 1:c0 + 2] * b
                x = lam_r[i, 1] * x + lam_p[i, 1] * mlp(i, rms(x))
            if i in (3, 7):
                cache[i] = x
        mu1 = small_mlp(x, p["mudd1.w1"], p["mudd1.w2"], p["mudd1.b2"], 0.1)
        x = x + mu1[:, 0:1] * cache[0] + mu1[:, 1:2] * cache[7] + mu1[:, 2:3] * cache[9] + mu1[:, 3:4] * ve[0] \
            + mu1[:, 4:5] * cache[3]
        zc = 23.0 * sig((rms(x) @ p["head"] + 5.0) / 7.5)
        lse = jax.scipy.special.logsumexp(zc, axis=-1)
        loss, extra = 0.0, 0.0
        for kk, w in enumerate(meta["next_weights"]):
            rows = T - kk
            loss += w * jnp.sum(lse[:rows] - zc[np.arange(rows), targets[kk:]])
            extra += w * jnp.sum(lse[rows:])  # terms past the last row: in the gradient, not the loss
        prefix = np.array(meta["prefix_of"])[targets]
        has = prefix >= 0
        loss += meta["prefix_weight"] * jnp.sum(jnp.where(has, lse - zc[np.arange(T), np.maximum(prefix, 0)], 0.0))
        return loss + extra, loss

    return objective


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dump", required=True, help="path of the modded89_dump executable")
    args = parser.parse_args()
    modules = import_jax_float64_cpu()
    if modules is None:
        return 77
    jax, jnp = modules
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.dump, tmp], check=True)
        with open(os.path.join(tmp, "meta.json")) as f:
            meta = json.load(f)
        flat = {k: np.fromfile(os.path.join(tmp, f"{k}.bin"), dtype=np.float64) for k in ("params", "grads")}
    def tensors(buffer):
        return {t["name"]: buffer[t["offset"]:t["offset"] + int(np.prod(t["shape"]))].reshape(t["shape"])
                for t in meta["tensors"]}
    params, ours = tensors(flat["params"]), tensors(flat["grads"])
    objective = make_objective(jax, jnp, meta)
    (value, loss), grads = jax.value_and_grad(objective, has_aux=True)({k: jnp.asarray(v) for k, v in params.items()})
    ok = True

    def compare(name, got, want, rel):
        nonlocal ok
        scale = max(float(np.abs(want).max()), 1e-30)
        err = float(np.abs(np.asarray(got) - np.asarray(want)).max())
        good = err <= rel * scale
        ok &= good
        print(f"{'ok  ' if good else 'FAIL'} {name:22s} max|diff| {err:.3e}  scale {scale:.3e}")

    # The same arithmetic in another order: ~1e-13 relative expected, 1e-10 allowed.
    compare("loss", np.array([meta["loss"]]), np.array([float(loss)]), 1e-10)
    compare("objective", np.array([meta["objective"]]), np.array([float(value)]), 1e-10)
    for name in params:
        compare("d" + name, ours[name], grads[name], 1e-8)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
