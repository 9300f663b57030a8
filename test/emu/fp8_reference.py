#!/usr/bin/env python3
"""Independent model of the two FP8 formats for test/emu/test_fp8_format.cu: ml_dtypes' float8_e4m3fn and
float8_e5m2 (OCP FP8, round to nearest even), plus the saturation of the GPU's conversion instruction
(cvt.rn.satfinite: a magnitude past the largest finite value, infinity included, becomes the largest finite
value of the same sign; ml_dtypes itself gives NaN (e4m3fn) or infinity (e5m2) there).

Usage: fp8_reference.py MODE DIR, MODE in decode | encode; DIR holds config.json ({"format": "e4m3" or
"e5m2"}) and, for encode, values.npy (float64 holding float32 values). Writes values.npy (decode: the 256
codes' values) or codes.npy (encode: one code per input, as float64; NaN inputs give 0x7f).
"""
import json
import os
import sys

import ml_dtypes
import numpy as np

FORMATS = {
    "e4m3": (ml_dtypes.float8_e4m3fn, 0x7E),
    "e5m2": (ml_dtypes.float8_e5m2, 0x7B),
}


def save(directory, name, array):
    np.save(os.path.join(directory, name + ".npy"), np.ascontiguousarray(array, dtype=np.float64))


def decode(dtype):
    return np.arange(256, dtype=np.uint8).view(dtype).astype(np.float64)


def encode(values, dtype, max_finite_code):
    x = values.astype(np.float32)
    if not np.array_equal(x.astype(np.float64), values, equal_nan=True):
        raise ValueError("inputs must be float32 values")
    codes = x.astype(dtype).view(np.uint8).copy()
    rounded = codes.view(dtype).astype(np.float64)
    overflow = ~np.isnan(x) & ~np.isfinite(rounded)
    sign = np.where(np.signbit(x), 0x80, 0).astype(np.uint8)
    codes[overflow] = (sign | max_finite_code)[overflow]
    codes[np.isnan(x)] = 0x7F
    return codes


def main():
    mode, directory = sys.argv[1], sys.argv[2]
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    dtype, max_finite_code = FORMATS[config["format"]]
    if mode == "decode":
        save(directory, "values", decode(dtype))
    elif mode == "encode":
        values = np.load(os.path.join(directory, "values.npy"))
        save(directory, "codes", encode(values, dtype, max_finite_code))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
