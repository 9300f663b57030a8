"""Our GPT-2 model files (llm.c's format) in numpy, for scripts/export_hf.py and scripts/import_hf.py.

A file is a 256 x int32 header (magic 20240326, version 3 = fp32 / 5 = bf16, maxT, V, L, NH, C, Vp) and
then the parameters in llm.c's order: wte (Vp, C), wpe (maxT, C), each per-layer tensor stacked over the
L layers (ln1w, ln1b, qkvw (3C, C), qkvb, attprojw (C, C), attprojb, ln2w, ln2b, fcw (4C, C), fcb,
fcprojw (C, 4C), fcprojb), lnfw, lnfb. Linear weights are (out, in): y = x @ W^T + b. The C++ side of
the same format is llmc/model/gpt2/gpt2_model_file.h.
"""
import glob
import os
import re

import numpy as np

MAGIC = 20240326
VERSIONS = {3: "fp32", 5: "bf16"}
HEADER_INTS = 256
ORDER = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
         "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
CONFIG_KEYS = ["maxT", "V", "L", "NH", "C", "Vp"]


class ModelFileError(Exception):
    """A model file that is missing, not ours or inconsistent; the message names the file."""


def shapes(cfg):
    """{name: shape} of every tensor, the per-layer ones with a leading L."""
    L, C = cfg["L"], cfg["C"]
    return {"wte": (cfg["Vp"], C), "wpe": (cfg["maxT"], C),
            "ln1w": (L, C), "ln1b": (L, C), "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
            "attprojw": (L, C, C), "attprojb": (L, C), "ln2w": (L, C), "ln2b": (L, C),
            "fcw": (L, 4 * C, C), "fcb": (L, 4 * C), "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
            "lnfw": (C,), "lnfb": (C,)}


def padded_vocab(vocab_size, multiple=128):
    """Vp as llmc/model/gpt2/gpt2_config.h pads it (50257 -> 50304)."""
    return (vocab_size + multiple - 1) // multiple * multiple


def bf16_bits_to_float32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16_bits(values):
    """Round to nearest even, as llmc/base/bf16_bits.h does (NaN stays a quiet NaN)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    rounded[nan] = ((bits[nan] >> 16) | 0x0040).astype(np.uint16)
    return rounded


def resolve(argument):
    """A model file, a checkpoint prefix (PREFIX_model.bin) or a run directory (its newest checkpoint)."""
    if os.path.isfile(argument):
        return argument
    if os.path.isfile(argument + "_model.bin"):
        return argument + "_model.bin"
    if os.path.isdir(argument):
        steps = []
        for path in glob.glob(os.path.join(argument, "ckpt_*_model.bin")):
            match = re.fullmatch(r"ckpt_(\d+)_model\.bin", os.path.basename(path))
            # Complete once its manifest, written last, exists (llmc/checkpoint/checkpoint_dir.h).
            if match and os.path.isfile(path[:-len("_model.bin")] + "_manifest.json"):
                steps.append((int(match.group(1)), path))
        if steps:
            return max(steps)[1]
        raise ModelFileError(f"{argument}: directory without a complete checkpoint (ckpt_*_manifest.json)")
    raise ModelFileError(f"{argument}: no such model file, checkpoint prefix ({argument}_model.bin) or run directory")


def read(path):
    """(cfg, {name: float32 array}, dtype name) of a model file; ModelFileError for anything wrong."""
    try:
        size = os.path.getsize(path)
        header = np.fromfile(path, dtype=np.int32, count=HEADER_INTS)
    except OSError as error:
        raise ModelFileError(f"{path}: cannot read: {error.strerror}") from None
    if header.size < HEADER_INTS:
        raise ModelFileError(f"{path}: shorter than the {HEADER_INTS * 4}-byte header")
    if header[0] != MAGIC:
        raise ModelFileError(f"{path}: not a GPT-2 model file (magic {header[0]}, expected {MAGIC})")
    if int(header[1]) not in VERSIONS:
        raise ModelFileError(f"{path}: unsupported version {header[1]} (supported: 3 = fp32, 5 = bf16)")
    dtype = VERSIONS[int(header[1])]
    cfg = dict(zip(CONFIG_KEYS, (int(x) for x in header[2:8])))
    if min(cfg.values()) <= 0 or cfg["C"] % cfg["NH"] or cfg["Vp"] < cfg["V"]:
        raise ModelFileError(f"{path}: inconsistent header {cfg}")
    shape_of = shapes(cfg)
    count = sum(int(np.prod(shape)) for shape in shape_of.values())
    element = 4 if dtype == "fp32" else 2
    if size != HEADER_INTS * 4 + count * element:
        raise ModelFileError(f"{path}: {size} bytes, the header's shape needs {HEADER_INTS * 4 + count * element} "
                             "(truncated or trailing bytes)")
    raw = np.fromfile(path, dtype=np.float32 if dtype == "fp32" else np.uint16, offset=HEADER_INTS * 4)
    flat = raw if dtype == "fp32" else bf16_bits_to_float32(raw)
    tensors, start = {}, 0
    for name in ORDER:
        n = int(np.prod(shape_of[name]))
        tensors[name] = flat[start:start + n].reshape(shape_of[name])
        start += n
    return cfg, tensors, dtype


def write(path, cfg, tensors, dtype="fp32"):
    """Writes PATH.tmp and renames it over PATH, so a failure leaves no half-written file."""
    if dtype not in ("fp32", "bf16"):
        raise ValueError(f"dtype {dtype}: fp32 or bf16")
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[0] = MAGIC
    header[1] = 3 if dtype == "fp32" else 5
    header[2:8] = [cfg[key] for key in CONFIG_KEYS]
    shape_of = shapes(cfg)
    temp = path + ".tmp"
    try:
        with open(temp, "wb") as out:
            out.write(header.tobytes())
            for name in ORDER:
                values = np.asarray(tensors[name], dtype=np.float32)
                if values.shape != shape_of[name]:
                    raise ValueError(f"{name}: shape {values.shape}, expected {shape_of[name]}")
                out.write(values.tobytes() if dtype == "fp32" else float32_to_bf16_bits(values).tobytes())
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp, path)
    finally:
        if os.path.exists(temp):
            os.remove(temp)
