#!/usr/bin/env python3
"""Float64 numpy oracle of the speedrun optimizers for test/optim/*.cu: Polar Express, one NorMuon step and
one sharded-Adam step as the record (docs/recipes.md) describes them, and one NorMuon step of the 2026-07-17
record's banks (SPEEDRUN89.md section 5) with its float32 update checked bit for bit, written independently
of the C++ code.

Besides the exact (float64) results it returns the tolerances the tests use, derived from the arithmetic:
  * a first-order running error bound (absolute values throughout) for a single Polar Express step and
    for Adam, where it is tight;
  * for the five-step Polar Express and the whole NorMuon step, where errors are amplified through the
    polynomial and a worst-case bound is useless in bf16, the largest error over NOISE_SAMPLES runs of the
    same float64 computation in which every stored value x becomes x (1 +- u), a random sign each, with u
    the storage unit roundoff the test passes (2^-8 for bf16, 2^-24 for fp32) plus k 2^-24 for a k-term
    fp32 sum: every rounding as large as a rounding can be. Real roundings are at most u and on average
    about 0.4 u (uniform in absolute terms within a binade), so the model errs on the large side.

Usage: optim_reference.py MODE DIR, MODE in polar_express | singular_values | normuon | normuon_bank |
mantissa_update | adam. DIR holds the inputs as .npy files and config.json; the outputs are written to DIR
as .npy files.
"""
import json
import os
import sys

import numpy as np

NOISE_SAMPLES = 16
FP32_ROUNDOFF = 2.0 ** -24


def round_bf16(x):
    """Round to the nearest bfloat16 (ties to even), returned as float64."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def round_fp32(x):
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def exact(x, u):
    return x


class NoisyStores:
    """The rounding model: a stored value x becomes x (1 + s u), s = +-1 at random: every rounding as large
    as a rounding can be (u), in a random direction."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def __call__(self, x, u):
        return x * (1.0 + u * self.rng.choice([-1.0, 1.0], size=np.shape(x)))


def save(directory, name, array):
    np.save(os.path.join(directory, name + ".npy"), np.ascontiguousarray(array, dtype=np.float64))


def swap(x):
    return np.swapaxes(x, -1, -2)


def frobenius(x):
    return np.sqrt(np.sum(x * x, axis=(-2, -1), keepdims=True))


def polar_express(g, steps, ux, store=exact, split=False):
    """Normalise by ||G||_F * 1.02 + 1e-6, then X = a X + (b A + c A A^T) X, A = X X^T (tall: on X^T).
    split: the product (B X) is stored before a X is added (the 2026-07-17 record's large matrices)."""
    tall = g.shape[-2] > g.shape[-1]
    small, large = min(g.shape[-2:]), max(g.shape[-2:])
    x = store(g / (frobenius(g) * 1.02 + 1e-6), ux + g[0].size * FP32_ROUNDOFF)
    if tall:
        x = swap(x)
    for a, b, c in steps:
        gram = store(x @ swap(x), ux + large * FP32_ROUNDOFF)
        poly = store(c * (gram @ swap(gram)) + b * gram, ux + (small + 1) * FP32_ROUNDOFF)
        if split:
            x = store(a * x + store(poly @ x, ux + small * FP32_ROUNDOFF), ux + FP32_ROUNDOFF)
        else:
            x = store(a * x + poly @ x, ux + (small + 1) * FP32_ROUNDOFF)
    return swap(x) if tall else x


def one_step_bound(g, step, ux):
    """First-order running bound (Higham-style, absolute values) on |device - exact| for ONE step."""
    a, b, c = step
    tall = g.shape[-2] > g.shape[-1]
    small, large = min(g.shape[-2:]), max(g.shape[-2:])
    x = g / (frobenius(g) * 1.02 + 1e-6)
    if tall:
        x = swap(x)
    ax = np.abs(x)
    e0 = (ux + 2 * g[0].size * FP32_ROUNDOFF) * ax  # the rounded quotient, the fp32 norm's sum
    gram = x @ swap(x)
    agram = np.abs(gram)
    e_gram = e0 @ swap(ax) + ax @ swap(e0) + large * FP32_ROUNDOFF * (ax @ swap(ax)) + ux * agram
    poly = c * (gram @ swap(gram)) + b * gram
    e_poly = (abs(b) * e_gram + abs(c) * (e_gram @ agram + agram @ e_gram)
              + (small + 1) * FP32_ROUNDOFF * (abs(c) * (agram @ agram) + abs(b) * agram) + ux * np.abs(poly))
    out = a * x + poly @ x
    bound = (abs(a) * e0 + e_poly @ ax + np.abs(poly) @ e0
             + (small + 1) * FP32_ROUNDOFF * (np.abs(poly) @ ax + abs(a) * ax) + ux * np.abs(out))
    return swap(bound) if tall else bound


def relative_errors(got, want):
    """Per matrix ||got - want||_F / ||want||_F."""
    return (frobenius(got - want) / frobenius(want)).reshape(-1)


def noise_tolerance(run, want, metric=relative_errors):
    """The largest metric over NOISE_SAMPLES noisy runs, per matrix."""
    worst = None
    for sample in range(NOISE_SAMPLES):
        errors = metric(run(NoisyStores(1000 + sample)), want)
        worst = errors if worst is None else np.maximum(worst, errors)
    return worst


def composed_polynomial(sigma, steps):
    for a, b, c in steps:
        sigma = a * sigma + b * sigma ** 3 + c * sigma ** 5
    return sigma


def mode_polar_express(d, cfg):
    g = np.load(os.path.join(d, "g.npy"))
    steps = [tuple(s) for s in np.load(os.path.join(d, "steps.npy"))]
    ux = cfg["storage_roundoff"]
    want = polar_express(g, steps, ux)
    save(d, "x", want)
    save(d, "tolerance", noise_tolerance(lambda s: polar_express(g, steps, ux, s), want))
    if len(steps) == 1:
        save(d, "bound", one_step_bound(g, steps[0], ux))
    # Exact singular values of the result: the polynomial applied to the normalised input's.
    sigma = np.linalg.svd(g, compute_uv=False) / (frobenius(g).reshape(-1, 1) * 1.02 + 1e-6)
    mapped = composed_polynomial(sigma, steps)
    save(d, "band", np.stack([mapped.min(axis=1), mapped.max(axis=1)], axis=1))


def mode_singular_values(d, cfg):
    save(d, "sv", np.linalg.svd(np.load(os.path.join(d, "y.npy")), compute_uv=False))


def torch_lerp(start, end, weight):
    return start + weight * (end - start)


def normuon_step(inp, cfg, store=exact):
    """One NorMuon step on a batch [count, rows, cols]; returns (params, momentum, variance).

    The noise of each store: its type's roundoff plus u32 per fp32 operation and per term of the fp32 sums
    feeding it (lerp: 3 operations; the variance: the column sum; the scaled X: the whole-matrix norms)."""
    ux, up, u32 = cfg["storage_roundoff"], cfg["param_roundoff"], FP32_ROUNDOFF
    round_p = round_bf16 if cfg["param_bf16"] else round_fp32
    mu, lr, wd, beta2 = cfg["momentum"], cfg["lr"], cfg["weight_decay"], cfg["beta2"]
    steps = [tuple(s) for s in cfg["steps"]]
    grads, params = inp["grads"], inp["params"]
    rows, cols = grads.shape[-2:]
    momentum = store(torch_lerp(inp["momentum"], grads, 1.0 - mu), up + 3 * u32)
    u = store(store(torch_lerp(grads, momentum, mu), up + 3 * u32), ux)
    x = polar_express(u, steps, ux, store)
    axis = -2 if cfg["per_column"] else -1
    mean = np.mean(x * x, axis=axis, keepdims=True)
    variance = store(torch_lerp(inp["variance"], mean, 1.0 - beta2), up + (x.shape[axis] + 5) * u32)
    step = 1.0 / np.sqrt(np.maximum(variance, 1e-10))
    ratio = frobenius(x) / np.maximum(frobenius(x * step), 1e-10)
    scaled = store(x * step * ratio, ux + (rows * cols + 6) * u32)
    lr_eff = round_p(lr * round_p(cfg["shape_scale"] * inp["lr_mul"])).reshape(-1, 1, 1)
    wd_eff = round_p(lr * wd)
    decayed = np.where(scaled * params >= 0, store(scaled + params * wd_eff, ux + 2 * u32), scaled)
    new_params = store(params - lr_eff * decayed, up + 2 * u32)
    return new_params, momentum, variance.reshape(variance.shape[0], -1)


def load_step_inputs(d, cfg, names):
    inp = {name: np.load(os.path.join(d, name + ".npy")) for name in names}
    inp["variance"] = inp["variance"].reshape(
        inp["variance"].shape[0], *((1, -1) if cfg["per_column"] else (-1, 1)))
    return inp


def save_step(d, step, inp, cfg, weights):
    """One NorMuon step of `step` (normuon_step or normuon_bank_step) on inp: its results (weights_out: the
    parameters or masters, momentum_out, variance_out) and per matrix the largest error of its noisy replicas
    (update_tolerance: of the change of inp[weights], momentum_tolerance, variance_tolerance)."""
    new_weights, momentum, variance = step(inp, cfg)
    save(d, weights + "_out", new_weights)
    save(d, "momentum_out", momentum)
    save(d, "variance_out", variance)
    update = new_weights - inp[weights]
    variance3 = variance.reshape(variance.shape[0], 1, -1)
    momentum_tol, variance_tol, update_tol = 0.0, 0.0, 0.0
    for sample in range(NOISE_SAMPLES):
        noisy = step(inp, cfg, NoisyStores(1000 + sample))
        update_tol = np.maximum(update_tol, relative_errors(noisy[0] - inp[weights], update))
        momentum_tol = np.maximum(momentum_tol, relative_errors(noisy[1], momentum))
        variance_tol = np.maximum(variance_tol, relative_errors(noisy[2].reshape(variance3.shape), variance3))
    save(d, "update_tolerance", update_tol)
    save(d, "momentum_tolerance", momentum_tol)
    save(d, "variance_tolerance", variance_tol)


def mode_normuon(d, cfg):
    inp = load_step_inputs(d, cfg, ("grads", "params", "momentum", "variance", "lr_mul"))
    save_step(d, normuon_step, inp, cfg, "params")


def normuon_bank_step(inp, cfg, store=exact):
    """One step of the 2026-07-17 record's NorMuon on a bank's matrices [count, rows, cols] (SPEEDRUN89.md
    section 5); returns (masters, momentum, variance). Momentum and variance are fp32 whatever the
    parameters; the scale is stored in bf16 before it multiplies X; the update is applied to the fp32
    master (the bf16 parameter's bits and its mantissa state, or the fp32 parameter itself)."""
    ux, u32 = cfg["storage_roundoff"], FP32_ROUNDOFF
    mu, lr, wd, beta2 = cfg["momentum"], cfg["lr"], cfg["weight_decay"], cfg["beta2"]
    steps = [tuple(s) for s in cfg["steps"]]
    grads, master = inp["grads"], inp["master"]
    rows, cols = grads.shape[-2:]
    momentum = store(torch_lerp(inp["momentum"], grads, 1.0 - mu), 3 * u32)
    u = store(store(torch_lerp(grads, momentum, mu), 3 * u32), ux)
    x = polar_express(u, steps, ux, store, split=rows > cfg["split_above_rows"] > 0)
    axis = -2 if cfg["per_column"] else -1
    mean = np.mean(x * x, axis=axis, keepdims=True)
    variance = store(torch_lerp(inp["variance"], mean, 1.0 - beta2), (x.shape[axis] + 5) * u32)
    step = 1.0 / np.sqrt(np.maximum(variance, 1e-10))
    ratio = frobenius(x) / np.maximum(frobenius(x * step), 1e-10)
    scale = store(step * ratio, ux + (rows * cols + 6) * u32)
    scaled = store(x * scale, ux + u32)
    lr_eff = (round_fp32(lr * cfg["shape_scale"]) * inp["lr_mul"]).reshape(-1, 1, 1)
    wd_lr = round_fp32(lr * wd)
    mask = np.where(scaled * master >= 0, 1.0, 0.0)
    new_master = store(master - master * mask * wd_lr * lr_eff - scaled * lr_eff, 6 * u32)
    return new_master, momentum, variance.reshape(variance.shape[0], -1)


def mode_normuon_bank(d, cfg):
    inp = load_step_inputs(d, cfg, ("grads", "master", "momentum", "variance", "lr_mul"))
    save_step(d, normuon_bank_step, inp, cfg, "master")


def bf16_round_f32(x):
    """float32 in, float32 out: rounded to the nearest bfloat16, ties to even."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def mode_mantissa_update(d, cfg):
    """The banks' apply in float32, operation by operation (exact IEEE float32 arithmetic, so the device
    must agree bit for bit): scale = bf16(step ratio), X' = bf16(X scale) (no bf16 in the fp32 build), M = the master, mask = X' M >= 0,
    M - ((M mask) wd_lr) lr_eff - X' lr_eff, each product and difference rounded to float32; then the
    master split in two 16-bit halves (truncation), or kept whole for fp32 parameters."""
    f32 = np.float32
    x = np.load(os.path.join(d, "x.npy")).astype(f32)
    steps = np.load(os.path.join(d, "steps.npy")).astype(f32)
    ratios = np.load(os.path.join(d, "ratios.npy")).astype(f32)
    lr_mul = np.load(os.path.join(d, "lr_mul.npy")).astype(f32)
    count, rows, cols = x.shape
    if cfg["param_bf16"]:
        high = np.load(os.path.join(d, "param_bits.npy")).astype(np.uint32)
        low = np.load(os.path.join(d, "mantissas.npy")).astype(np.uint32)
        master = ((high << 16) | low).view(f32)
    else:
        master = np.load(os.path.join(d, "params.npy")).astype(f32)
    steps = steps.reshape(count, 1, cols) if cfg["per_column"] else steps.reshape(count, rows, 1)
    store = bf16_round_f32 if cfg["param_bf16"] else (lambda v: v)  # X's type is the parameters'
    scale = store(steps * ratios.reshape(-1, 1, 1))
    update = store(x * scale)
    lr_eff = (f32(cfg["lr_times_shape"]) * lr_mul).reshape(-1, 1, 1)
    mask = np.where(update * master >= 0, f32(1), f32(0))
    new_master = (master - (master * mask * f32(cfg["wd_lr"])) * lr_eff) - update * lr_eff
    assert new_master.dtype == f32
    if cfg["param_bf16"]:
        bits = new_master.view(np.uint32)
        save(d, "param_bits_out", (bits >> 16).astype(np.float64))
        save(d, "mantissas_out", (bits & 0xFFFF).astype(np.float64))
    else:
        save(d, "params_out", new_master.astype(np.float64))


def mode_adam(d, cfg):
    """One Adam update; m and v are rounded to their storage type exactly (the device stores them so)."""
    g, p, m, v = (np.load(os.path.join(d, n + ".npy")) for n in ("grad", "param", "m", "v"))
    round_s = round_bf16 if cfg["state_bf16"] else round_fp32
    b1, b2, eps, lr, t = cfg["beta1"], cfg["beta2"], cfg["eps"], cfg["lr"], cfg["t"]
    m_exact = b1 * m + (1 - b1) * g
    v_exact = b2 * v + (1 - b2) * g * g
    m_new, v_new = round_s(m_exact), round_s(v_exact)
    step_size = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    update = step_size * m_new / (np.sqrt(v_new) + eps)
    # Cautious decay (the 2026-07-17 record; 0 in #44): decay p joins the update where update p > 0.
    decay = cfg.get("decay", 0.0)
    decayed = np.where(update * p > 0, decay * p, 0.0)
    p_new = p - (update + decayed)
    save(d, "m_out", m_new)
    save(d, "v_out", v_new)
    save(d, "param_out", p_new)
    # Bounds. A moment: the device rounds an fp32 value (3 roundings from the exact one) to S, so it can
    # land one S ulp (<= 2 us relative) from round_s(exact) when the exact value sits near a boundary.
    us, up = cfg["state_roundoff"], cfg["param_roundoff"]
    fp32_m = 3 * FP32_ROUNDOFF * (np.abs(b1 * m) + np.abs((1 - b1) * g))
    fp32_v = 3 * FP32_ROUNDOFF * (np.abs(b2 * v) + np.abs((1 - b2) * g * g))
    # The update from the device's moments, off by up to those bounds: step (dm / (sqrt(v) + eps) +
    # |m| dsqrt(v) / (sqrt(v) + eps)^2) with dsqrt(v) <= min(dv / (2 sqrt(v)), sqrt(dv)); the fp32 square
    # root, sum, quotient and products by 5 u32; then the fp32 subtraction and p's rounding to P.
    m_bound, v_bound = 2 * us * np.abs(m_exact) + fp32_m, 2 * us * np.abs(v_exact) + fp32_v
    root = np.sqrt(v_new)
    with np.errstate(divide="ignore"):
        root_bound = np.where(root > 0, np.minimum(v_bound / (2 * root), np.sqrt(v_bound)), np.sqrt(v_bound))
    denominator = root + eps
    update_bound = step_size * (m_bound / denominator + np.abs(m_new) * root_bound / denominator ** 2)
    save(d, "m_bound", m_bound)
    save(d, "v_bound", v_bound)
    # The decay: its product and sum (2 u32), and all of it where the update's sign is within its bound
    # of zero (the device's mask may differ there).
    ambiguous = np.abs(update) <= update_bound + 5 * FP32_ROUNDOFF * np.abs(update)
    decay_bound = 2 * FP32_ROUNDOFF * np.abs(decay * p) + np.where(ambiguous, np.abs(decay * p), 0.0)
    save(d, "param_bound",
         update_bound + 5 * FP32_ROUNDOFF * np.abs(update) + decay_bound + (up + FP32_ROUNDOFF) * np.abs(p_new))


def main():
    mode, directory = sys.argv[1], sys.argv[2]
    cfg = {}
    if os.path.exists(os.path.join(directory, "config.json")):
        with open(os.path.join(directory, "config.json")) as f:
            cfg = json.load(f)
    modes = {"polar_express": mode_polar_express, "singular_values": mode_singular_values,
             "normuon": mode_normuon, "normuon_bank": mode_normuon_bank, "mantissa_update": mode_mantissa_update,
             "adam": mode_adam}
    modes[mode](directory, cfg)


if __name__ == "__main__":
    main()
