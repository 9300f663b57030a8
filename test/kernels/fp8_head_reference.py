#!/usr/bin/env python3
"""Float64 oracle of the FP8 head for test/kernels/test_fp8_head.cu, written from the record (docs/recipes.md):
scales x_s = sqrt(C)/448 (sqrt(768)/448 in the record), w_s = 2^-9, g_s = 1/448, as float32;
x8 = e4m3(x / x_s), w8 = e4m3(W / w_s), g8 = e5m2(dz / g_s) with the division in float32 and the
conversion by ml_dtypes (round to nearest even) saturated to the largest finite value as the GPU's
cvt.rn.satfinite does; then in float64
    z  = x_s w_s  x8 w8^T,    dx = g_s w_s  g8 w8,    dw = x_s g_s  g8^T x8.

Usage: fp8_head_reference.py head DIR; DIR holds x (T,C), w (V,C), dz (T,V) as float64 .npy (float32 or
bf16 values) and config.json {"channels": C}. Writes scales (3), x8, w8, g8 (the fp8 values, unscaled),
z, dx, dw.
"""
import json
import math
import os
import sys

import ml_dtypes
import numpy as np


def quantize(values, scale, dtype, max_finite):
    scaled = values.astype(np.float32) / np.float32(scale)
    rounded = scaled.astype(dtype).astype(np.float64)
    overflow = ~np.isfinite(rounded) & ~np.isnan(scaled)
    rounded[overflow] = np.copysign(max_finite, scaled[overflow])
    return rounded


def main():
    mode, directory = sys.argv[1], sys.argv[2]
    if mode != "head":
        raise SystemExit(f"unknown mode {mode}")
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    load = lambda name: np.load(os.path.join(directory, name + ".npy"))
    x, w, dz = load("x"), load("w"), load("dz")
    x_s = float(np.float32(math.sqrt(config["channels"]) / 448.0))
    w_s = float(np.float32(2.0 ** -9))
    g_s = float(np.float32(1.0 / 448.0))
    x8 = quantize(x, x_s, ml_dtypes.float8_e4m3fn, 448.0)
    w8 = quantize(w, w_s, ml_dtypes.float8_e4m3fn, 448.0)
    g8 = quantize(dz, g_s, ml_dtypes.float8_e5m2, 57344.0)
    outputs = {
        "scales": np.array([x_s, w_s, g_s]),
        "x8": x8, "w8": w8, "g8": g8,
        "z": (x_s * w_s) * (x8 @ w8.T),
        "dx": (g_s * w_s) * (g8 @ w8),
        "dw": (x_s * g_s) * (g8.T @ x8),
    }
    for name, array in outputs.items():
        np.save(os.path.join(directory, name + ".npy"), np.ascontiguousarray(array, dtype=np.float64))


if __name__ == "__main__":
    main()
