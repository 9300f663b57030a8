#!/usr/bin/env python3
"""Export one of our GPT-2 model files to a Hugging Face folder that transformers' GPT2LMHeadModel loads.

    scripts/export_hf.py MODEL OUT_DIR [--vocab DIR]

MODEL is a model file, a checkpoint prefix (runs/x/ckpt_000300) or a run directory (its newest
checkpoint). OUT_DIR (which must not exist yet) gets model.safetensors (float32; a bf16 model is widened
exactly; the padded vocabulary rows are dropped; the LM head is tied to wte, as GPT-2's), config.json,
generation_config.json and, for GPT-2's 50257-token vocabulary, the tokenizer files made from the shared
BPE files (vocab.json = encoder.json, merges.txt = vocab.bpe). The folder is written beside OUT_DIR
under a temporary name and renamed at the end, so a failure leaves nothing half-written.
Needs numpy and safetensors; not torch.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

import llmc_model_file

GPT2_VOCAB = 50257
END_OF_TEXT = "<|endoftext|>"


def default_vocab_dir():
    return os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data",
                                         "gpt2"))


def hf_tensors(cfg, tensors):
    """Our tensors under GPT2LMHeadModel's names; Conv1D weights are (in, out), the transpose of ours."""
    out = {"transformer.wte.weight": tensors["wte"][:cfg["V"]], "transformer.wpe.weight": tensors["wpe"],
           "transformer.ln_f.weight": tensors["lnfw"], "transformer.ln_f.bias": tensors["lnfb"]}
    per_layer = {"ln_1.weight": ("ln1w", False), "ln_1.bias": ("ln1b", False),
                 "attn.c_attn.weight": ("qkvw", True), "attn.c_attn.bias": ("qkvb", False),
                 "attn.c_proj.weight": ("attprojw", True), "attn.c_proj.bias": ("attprojb", False),
                 "ln_2.weight": ("ln2w", False), "ln_2.bias": ("ln2b", False),
                 "mlp.c_fc.weight": ("fcw", True), "mlp.c_fc.bias": ("fcb", False),
                 "mlp.c_proj.weight": ("fcprojw", True), "mlp.c_proj.bias": ("fcprojb", False)}
    for layer in range(cfg["L"]):
        for hf_name, (ours, transpose) in per_layer.items():
            value = tensors[ours][layer]
            out[f"transformer.h.{layer}.{hf_name}"] = value.T if transpose else value
    return {name: np.ascontiguousarray(value, dtype=np.float32) for name, value in out.items()}


def hf_config(cfg):
    """GPT-2's config with our shape; no dropout (our trainer has none); the tanh GELU ("gelu_new")."""
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
              "vocab_size": cfg["V"], "n_positions": cfg["maxT"], "n_ctx": cfg["maxT"], "n_embd": cfg["C"],
              "n_layer": cfg["L"], "n_head": cfg["NH"], "n_inner": None, "activation_function": "gelu_new",
              "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "layer_norm_epsilon": 1e-5,
              "initializer_range": 0.02, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
              "reorder_and_upcast_attn": False, "tie_word_embeddings": True, "use_cache": True,
              "torch_dtype": "float32"}
    if cfg["V"] == GPT2_VOCAB:
        config.update(bos_token_id=GPT2_VOCAB - 1, eos_token_id=GPT2_VOCAB - 1)
    return config


def write_json(path, value):
    with open(path, "w", encoding="utf-8") as out:
        json.dump(value, out, indent=2)
        out.write("\n")


def write_tokenizer(folder, vocab_dir, max_length):
    for source, target in (("encoder.json", "vocab.json"), ("vocab.bpe", "merges.txt")):
        path = os.path.join(vocab_dir, source)
        if not os.path.isfile(path):
            raise SystemExit(f"export_hf: --vocab {vocab_dir}: no {source} (the tokenizer files are made from "
                             "encoder.json and vocab.bpe; data/download_gpt2_vocab.sh fetches them)")
        shutil.copyfile(path, os.path.join(folder, target))
    write_json(os.path.join(folder, "tokenizer_config.json"),
               {"tokenizer_class": "GPT2Tokenizer", "model_max_length": max_length, "add_prefix_space": False,
                "bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT, "unk_token": END_OF_TEXT})
    write_json(os.path.join(folder, "special_tokens_map.json"),
               {"bos_token": END_OF_TEXT, "eos_token": END_OF_TEXT, "unk_token": END_OF_TEXT})


def export(model_path, out_dir, vocab_dir):
    from safetensors.numpy import save_file
    cfg, tensors, dtype = llmc_model_file.read(model_path)
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir):
        raise SystemExit(f"export_hf: {out_dir}: exists already (give a new folder)")
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=os.path.basename(out_dir) + ".tmp-", dir=parent)
    try:
        save_file(hf_tensors(cfg, tensors), os.path.join(staging, "model.safetensors"), metadata={"format": "pt"})
        config = hf_config(cfg)
        write_json(os.path.join(staging, "config.json"), config)
        generation = {key: config[key] for key in ("bos_token_id", "eos_token_id") if key in config}
        write_json(os.path.join(staging, "generation_config.json"), generation)
        if cfg["V"] == GPT2_VOCAB:
            write_tokenizer(staging, vocab_dir, cfg["maxT"])
        os.rename(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    tokenizer = "with" if cfg["V"] == GPT2_VOCAB else f"without (V={cfg['V']} is not GPT-2's)"
    print(f"export_hf: {model_path} ({dtype}, L={cfg['L']} NH={cfg['NH']} C={cfg['C']} T={cfg['maxT']} "
          f"V={cfg['V']}) -> {out_dir} (float32 safetensors, {tokenizer} tokenizer files)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="model file, checkpoint prefix or run directory")
    parser.add_argument("out_dir", help="the Hugging Face folder to create (must not exist)")
    parser.add_argument("--vocab", default=default_vocab_dir(), help="folder with encoder.json and vocab.bpe")
    args = parser.parse_args()
    try:
        export(llmc_model_file.resolve(args.model), args.out_dir, args.vocab)
    except llmc_model_file.ModelFileError as error:
        raise SystemExit(f"export_hf: {error}") from None
    except ImportError as error:
        raise SystemExit(f"export_hf: {error.name} is missing (scripts/install_deps.sh installs it)") from None


if __name__ == "__main__":
    sys.exit(main())
