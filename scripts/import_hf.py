#!/usr/bin/env python3
"""Import a Hugging Face GPT-2 folder (e.g. the released GPT-2 124M) as one of our model files.

    scripts/import_hf.py HF_DIR OUT_FILE [--dtype fp32|bf16]

HF_DIR holds config.json and the weights as model.safetensors (or shards listed in
model.safetensors.index.json), with or without the "transformer." prefix, in float32, float16 or
bfloat16. OUT_FILE is an llm.c-format model file (fp32 by default; bf16 rounds to nearest even) that
train_gpt2 --model and generate_gpt2 --model take; the vocabulary is padded to a multiple of 128 with
zero rows. Folders that are not GPT-2, or GPT-2 variants we do not compute (another activation or
LayerNorm epsilon, untied LM head, scaled or cross attention, ...), are refused with the reason.
Needs numpy and safetensors (and ml_dtypes for bfloat16 weights); not torch.
"""
import argparse
import json
import os
import sys

import numpy as np

import llmc_model_file

# Per-layer tensors: Hugging Face name -> (our name, transposed: Conv1D weights are (in, out)).
LAYER_TENSORS = {"ln_1.weight": ("ln1w", False), "ln_1.bias": ("ln1b", False),
                 "attn.c_attn.weight": ("qkvw", True), "attn.c_attn.bias": ("qkvb", False),
                 "attn.c_proj.weight": ("attprojw", True), "attn.c_proj.bias": ("attprojb", False),
                 "ln_2.weight": ("ln2w", False), "ln_2.bias": ("ln2b", False),
                 "mlp.c_fc.weight": ("fcw", True), "mlp.c_fc.bias": ("fcb", False),
                 "mlp.c_proj.weight": ("fcprojw", True), "mlp.c_proj.bias": ("fcprojb", False)}
# Buffers some checkpoints carry (the causal mask); not parameters.
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh")
MAX_HEAD_SIZE = 256  # llmc/kernels/kv_cache.cuh


class UnsupportedFolder(Exception):
    """The folder cannot be imported; the message says which file and why."""


def shape_config(folder):
    """{maxT, V, L, NH, C, Vp} from config.json, after refusing everything we do not compute."""
    path = os.path.join(folder, "config.json")
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except OSError as error:
        raise UnsupportedFolder(f"{path}: cannot read ({error.strerror}); is {folder} a Hugging Face model folder?")
    except json.JSONDecodeError as error:
        raise UnsupportedFolder(f"{path}: not JSON ({error})")
    if config.get("model_type") != "gpt2":
        raise UnsupportedFolder(f"{path}: model_type is {config.get('model_type')!r}; only GPT-2 ('gpt2') is supported")
    problems = []
    C, NH = config.get("n_embd"), config.get("n_head")
    if config.get("activation_function", "gelu_new") not in TANH_GELUS:
        problems.append(f"activation_function {config['activation_function']!r} (we compute the tanh GELU)")
    if config.get("layer_norm_epsilon", 1e-5) != 1e-5:
        problems.append(f"layer_norm_epsilon {config['layer_norm_epsilon']} (we use 1e-5)")
    if config.get("n_inner") not in (None, 4 * (C or 0)):
        problems.append(f"n_inner {config['n_inner']} (we use 4 * n_embd)")
    if config.get("scale_attn_by_inverse_layer_idx", False):
        problems.append("scale_attn_by_inverse_layer_idx")
    if not config.get("scale_attn_weights", True):
        problems.append("scale_attn_weights false")
    if config.get("add_cross_attention", False):
        problems.append("add_cross_attention")
    if not config.get("tie_word_embeddings", True):
        problems.append("tie_word_embeddings false (our LM head is wte)")
    if not isinstance(C, int) or not isinstance(NH, int) or NH <= 0 or C % NH:
        problems.append(f"n_embd {C} not a multiple of n_head {NH}")
    elif C // NH > MAX_HEAD_SIZE:
        problems.append(f"head size {C // NH} (at most {MAX_HEAD_SIZE})")
    if problems:
        raise UnsupportedFolder(f"{path}: unsupported GPT-2 variant: " + "; ".join(problems))
    shape = {}
    for ours, key in (("maxT", "n_positions"), ("V", "vocab_size"), ("L", "n_layer")):
        if not isinstance(config.get(key), int) or config[key] <= 0:
            raise UnsupportedFolder(f"{path}: {key} is {config.get(key)!r}, not a positive integer")
        shape[ours] = config[key]
    return dict(shape, NH=NH, C=C, Vp=llmc_model_file.padded_vocab(shape["V"]))


def weight_files(folder):
    single = os.path.join(folder, "model.safetensors")
    if os.path.isfile(single):
        return [single]
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index, encoding="utf-8") as handle:
            shards = sorted(set(json.load(handle)["weight_map"].values()))
        return [os.path.join(folder, shard) for shard in shards]
    others = [name for name in ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")
              if os.path.isfile(os.path.join(folder, name))]
    found = f" (it has {', '.join(others)}: save it with safe_serialization=True)" if others else ""
    raise UnsupportedFolder(f"{folder}: no model.safetensors or model.safetensors.index.json{found}")


def load_weights(folder):
    """{name without the 'transformer.' prefix: float32 array} from every safetensors file."""
    try:
        import ml_dtypes  # noqa: F401  (registers numpy's bfloat16, which bf16 safetensors need)
    except ImportError:
        pass
    from safetensors import safe_open
    weights = {}
    for path in weight_files(folder):
        with safe_open(path, framework="numpy") as handle:
            for name in handle.keys():
                try:
                    value = handle.get_tensor(name)
                except TypeError as error:
                    raise UnsupportedFolder(f"{path}: {name}: {error} (bfloat16 weights need the ml_dtypes package)")
                short = name[len("transformer."):] if name.startswith("transformer.") else name
                weights[short] = value.astype(np.float32)
    return weights


def our_tensors(cfg, weights, folder):
    """Maps and checks every tensor; refuses missing, surplus or misshaped ones."""
    expected = llmc_model_file.shapes(cfg)
    L, V = cfg["L"], cfg["V"]
    hf_shape = {"wte.weight": (V, cfg["C"]), "wpe.weight": expected["wpe"], "ln_f.weight": expected["lnfw"],
                "ln_f.bias": expected["lnfb"]}
    for layer in range(L):
        for hf_name, (ours, transpose) in LAYER_TENSORS.items():
            shape = expected[ours][1:]
            hf_shape[f"h.{layer}.{hf_name}"] = shape[::-1] if transpose else shape
    missing = [name for name in hf_shape if name not in weights]
    surplus = [name for name in weights if name not in hf_shape and not name.endswith(IGNORED_SUFFIXES)
               and name != "lm_head.weight"]
    if missing or surplus:
        raise UnsupportedFolder(f"{folder}: not a GPT-2 checkpoint of this config: missing {missing[:4]}, "
                                f"unexpected {surplus[:4]}")
    for name, shape in hf_shape.items():
        if weights[name].shape != tuple(shape):
            raise UnsupportedFolder(f"{folder}: {name} has shape {weights[name].shape}, "
                                    f"config.json implies {tuple(shape)}")
    if "lm_head.weight" in weights and not np.array_equal(weights["lm_head.weight"], weights["wte.weight"]):
        raise UnsupportedFolder(f"{folder}: lm_head.weight differs from wte.weight (an untied head is not supported)")
    wte = np.zeros(expected["wte"], dtype=np.float32)
    wte[:V] = weights["wte.weight"]
    tensors = {"wte": wte, "wpe": weights["wpe.weight"], "lnfw": weights["ln_f.weight"],
               "lnfb": weights["ln_f.bias"]}
    for hf_name, (ours, transpose) in LAYER_TENSORS.items():
        stack = [weights[f"h.{layer}.{hf_name}"] for layer in range(L)]
        tensors[ours] = np.stack([value.T if transpose else value for value in stack])
    return tensors


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("hf_dir", help="Hugging Face GPT-2 folder (config.json + safetensors)")
    parser.add_argument("out_file", help="our model file to write")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="precision of the model file")
    args = parser.parse_args()
    try:
        cfg = shape_config(args.hf_dir)
        tensors = our_tensors(cfg, load_weights(args.hf_dir), args.hf_dir)
        llmc_model_file.write(args.out_file, cfg, tensors, args.dtype)
    except UnsupportedFolder as error:
        raise SystemExit(f"import_hf: {error}") from None
    except ImportError as error:
        raise SystemExit(f"import_hf: {error.name} is missing (scripts/install_deps.sh installs it)") from None
    except OSError as error:
        raise SystemExit(f"import_hf: {error.filename}: {error.strerror}") from None
    print(f"import_hf: {args.hf_dir} (L={cfg['L']} NH={cfg['NH']} C={cfg['C']} T={cfg['maxT']} V={cfg['V']}) "
          f"-> {args.out_file} ({args.dtype}, Vp={cfg['Vp']})")


if __name__ == "__main__":
    sys.exit(main())
