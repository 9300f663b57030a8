#!/usr/bin/env python3
"""Cross-checks the C++ double-precision reference GPT-2 against an independent GPT-2 written here in
JAX (float64, autodiff for the gradients, jax.nn's tanh GELU and log-softmax).

Runs reference_dump, which writes the parameters as an llm.c fp32 checkpoint (parsed here by our own
reader, so the checkpoint's tensor order is checked too), the tokens, and the C++ loss, gradients and
parameters after one AdamW step. Exit 0 when all agree, 1 on a mismatch, 77 (CTest skip) without JAX.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

LLMC_ORDER = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b",
              "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}  # llm.c decays the 2-D tensors


def shapes(maxT, Vp, L, C):
    return {"wte": (Vp, C), "wpe": (maxT, C), "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C),
            "qkvb": (L, 3 * C), "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
            "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
            "lnfw": (C,), "lnfb": (C,)}


def split(flat, shape_of):
    out, pos = {}, 0
    for name in LLMC_ORDER:
        n = int(np.prod(shape_of[name]))
        out[name] = flat[pos:pos + n].reshape(shape_of[name])
        pos += n
    assert pos == flat.size, f"{pos} parameters in the order, {flat.size} in the file"
    return out


def read_llmc_checkpoint(path):
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[0] == 20240326 and header[1] == 3, f"{path}: not an llm.c fp32 checkpoint"
    maxT, V, L, NH, C, Vp = (int(x) for x in header[2:8])
    flat = np.fromfile(path, dtype=np.float32, offset=1024).astype(np.float64)
    return dict(maxT=maxT, V=V, L=L, NH=NH, C=C, Vp=Vp), split(flat, shapes(maxT, Vp, L, C))


def import_jax_float64_cpu():
    """(jax, jax.numpy) set to float64 on the CPU; None, after saying so, when JAX is not installed."""
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_platforms", "cpu")
        import jax.numpy as jnp
    except ImportError:
        print("skipped: jax is not installed")
        return None
    return jax, jnp


def make_loss(jax, jnp, cfg):
    L, NH, C, V = cfg["L"], cfg["NH"], cfg["C"], cfg["V"]

    def layernorm(x, w, b):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + 1e-5) * w + b

    def loss(p, tokens, targets):
        B, T = tokens.shape
        hs = C // NH
        x = p["wte"][tokens] + p["wpe"][:T]
        causal = jnp.tril(jnp.ones((T, T), dtype=bool))
        for l in range(L):
            h = layernorm(x, p["ln1w"][l], p["ln1b"][l])
            qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
            q, k, v = (a.reshape(B, T, NH, hs).transpose(0, 2, 1, 3) for a in jnp.split(qkv, 3, axis=-1))
            scores = jnp.where(causal, q @ k.transpose(0, 1, 3, 2) / np.sqrt(hs), -jnp.inf)
            y = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
            x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
            h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
            h = jax.nn.gelu(h @ p["fcw"][l].T + p["fcb"][l], approximate=True)
            x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
        x = layernorm(x, p["lnfw"], p["lnfb"])
        logits = x @ p["wte"][:V].T  # tied LM head over the real vocabulary only
        logp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.take_along_axis(logp, targets[..., None], axis=-1).mean()

    return loss


def compare(name, ours, theirs, rel):
    scale = max(np.abs(theirs).max(), 1e-30)
    err = np.abs(ours - theirs).max()
    ok = err <= rel * scale
    print(f"{'ok  ' if ok else 'FAIL'} {name:10s} max|diff| {err:.3e}  scale {scale:.3e}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dump", required=True, help="path of the reference_dump executable")
    args = parser.parse_args()
    modules = import_jax_float64_cpu()
    if modules is None:
        return 77  # CTest's skip code
    jax, jnp = modules

    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.dump, tmp], check=True)
        cfg, params = read_llmc_checkpoint(os.path.join(tmp, "model.bin"))
        tok = np.fromfile(os.path.join(tmp, "tokens.bin"), dtype=np.int32)
        B, T = int(tok[0]), int(tok[1])
        tokens, targets = tok[2:2 + B * T].reshape(B, T), tok[2 + B * T:].reshape(B, T)
        ref = np.fromfile(os.path.join(tmp, "reference.bin"), dtype=np.float64)

    n = sum(v.size for v in params.values())
    shape_of = {k: v.shape for k, v in params.items()}
    ref_loss, ref_grads, ref_updated = ref[0], split(ref[1:1 + n], shape_of), split(ref[1 + n:], shape_of)

    loss_fn = make_loss(jax, jnp, cfg)
    jparams = {k: jnp.asarray(v) for k, v in params.items()}
    loss, grads = jax.jit(jax.value_and_grad(loss_fn))(jparams, jnp.asarray(tokens), jnp.asarray(targets))
    grads = {k: np.asarray(v) for k, v in grads.items()}

    # Same arithmetic in another summation order: agreement to ~1e-13 relative is expected, 1e-9 allowed.
    ok = compare("loss", np.array([ref_loss]), np.array([float(loss)]), 1e-11)
    for name in LLMC_ORDER:
        ok &= compare("d" + name, ref_grads[name], grads[name], 1e-9)
    # AdamW step 1 from zero moments (betas 0.9/0.95, eps 1e-8, lr 1e-3, weight decay 0.1 on matrices).
    lr, b1, b2, eps, wd = 1e-3, 0.9, 0.95, 1e-8, 0.1
    for name in LLMC_ORDER:
        g, p = grads[name], params[name]
        mhat, vhat = (1 - b1) * g / (1 - b1), (1 - b2) * g * g / (1 - b2)
        expected = p - lr * (mhat / (np.sqrt(vhat) + eps) + (wd if name in DECAYED else 0.0) * p)
        # Where |g| ~ eps the step depends on g to first order, so tolerate the gradient error there.
        ok &= compare("adamw " + name, ref_updated[name], expected, 1e-9)
    print(f"loss {float(loss):.12f} (C++ {ref_loss:.12f}), B={B} T={T} {cfg}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
