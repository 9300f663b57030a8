#!/usr/bin/env python3
"""Hugging Face transformers as the external oracle of our GPT-2 forward, generation and HF scripts.

1. A random GPT-2 made by transformers (every weight and bias perturbed, so a mixed-up tensor shows) is
   saved as a Hugging Face folder, imported with scripts/import_hf.py, and our two forwards (the training
   model and the KV-cache decoder, fp32 emulated build, through forward_probe) give transformers' logits
   (within 1e-5 of their largest magnitude) and loss; 20 greedy tokens of generate_gpt2 (fp32 emulated)
   from a text prompt equal transformers' generate().
2. One of our checkpoints (d1 trained 4 steps by train_gpt2_fp32_emu) is exported with
   scripts/export_hf.py, loaded by transformers' from_pretrained, and gives our logits, loss and greedy
   tokens; its tokenizer files encode the prompt and decode the text as ours do.

The oracle is transformers' PyTorch GPT2LMHeadModel when torch is installed, else its Flax
FlaxGPT2LMHeadModel on JAX (transformers < 5; what CI installs, since PyTorch from PyPI costs ~6 minutes
and 5.6 GB). Without the Flax backend there is no torch to write a PyTorch-format folder, so the test
writes the transformers-made Flax model under GPT-2's PyTorch names itself and first proves the folder
right: transformers' own PyTorch-to-Flax loader must read it back into the same logits.

Usage: check_hf_transformers.py --generator G --probe P --trainer T [--backend auto|torch|flax]
Exit 77 ("skipped") when transformers (with torch or flax) is not installed.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("LLMC_SHARED_DIR", os.path.join(REPO, "..", "shared"))
SETTINGS = {}
PROMPT = "The meaning of life is"
GREEDY_TOKENS = 20
END_OF_TEXT = 50256
# Both sides compute in fp32: every dot product sums at most 4C = 256 terms (relative error ~ sqrt(256) *
# 6e-8 = 1e-6 typical, 1.5e-5 in the worst case) and LayerNorm re-normalises after every block, so two
# correct implementations differ by ~1e-6 of the logits' scale; a wrong tensor or transpose by O(1).
LOGIT_TOLERANCE = 1e-5


def run(command, **kwargs):
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=600, **kwargs)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, command))} failed ({result.returncode}):\n{result.stdout}\n"
                             f"{result.stderr}")
    return result


def cross_entropy(logits, tokens):
    """Mean over t of -log softmax(logits[t])[tokens[t + 1]] in float64: the next-token loss, given the
    logits (n - 1, V) that follow tokens[0 .. n - 1)."""
    logits = logits.astype(np.float64)
    peak = logits.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(logits - peak).sum(axis=1)) + peak[:, 0]
    return float(np.mean(log_z - logits[np.arange(len(tokens) - 1), tokens[1:]]))


class TorchBackend:
    name = "PyTorch GPT2LMHeadModel"

    def __init__(self):
        import torch
        import transformers
        self.torch, self.transformers = torch, transformers

    def make_random_folder(self, config_args, folder, seed):
        self.torch.manual_seed(seed)
        model = self.transformers.GPT2LMHeadModel(self.transformers.GPT2Config(**config_args))
        with self.torch.no_grad():
            for name, parameter in model.named_parameters():
                scale = 0.1 if "ln" not in name or name.endswith("bias") else 0.2
                parameter.copy_(parameter + scale * self.torch.randn_like(parameter))
        model.save_pretrained(folder, safe_serialization=True)

    def load(self, folder):
        model = self.transformers.GPT2LMHeadModel.from_pretrained(folder, torch_dtype=self.torch.float32)
        return model.eval()

    def logits_and_loss(self, model, tokens):
        with self.torch.no_grad():
            ids = self.torch.tensor([tokens])
            out = model(ids, labels=ids)
        return out.logits[0, :-1].double().numpy(), float(out.loss)

    def greedy(self, model, prompt, count):
        with self.torch.no_grad():
            out = model.generate(self.torch.tensor([prompt]), max_new_tokens=count, do_sample=False,
                                 pad_token_id=END_OF_TEXT)
        return out[0, len(prompt):].tolist()


class FlaxBackend:
    name = "Flax FlaxGPT2LMHeadModel (JAX)"

    def __init__(self):
        import jax
        import transformers
        if not hasattr(transformers, "FlaxGPT2LMHeadModel"):
            raise ImportError("this transformers has no Flax models (>= 5): install torch, or transformers<5")
        self.jax, self.transformers = jax, transformers

    def make_random_folder(self, config_args, folder, seed):
        from safetensors.numpy import save_file
        config = self.transformers.GPT2Config(**config_args)
        model = self.transformers.FlaxGPT2LMHeadModel(config, seed=seed)
        rng = np.random.default_rng(seed)
        path_name = lambda path: ".".join(str(getattr(key, "key", key)) for key in path)  # noqa: E731

        def perturb(path, value):
            scale = 0.2 if path_name(path).endswith("scale") else 0.1
            return np.asarray(value, np.float32) + scale * rng.standard_normal(value.shape).astype(np.float32)
        model.params = self.jax.tree_util.tree_map_with_path(perturb, model.params)
        leaves = {path_name(path): np.asarray(value) for path, value in
                  self.jax.tree_util.tree_flatten_with_path(model.params)[0]}
        torch_named = {}
        for name, value in leaves.items():  # Flax names -> GPT2LMHeadModel's (PyTorch) names
            pt = name.replace(".embedding", ".weight").replace(".scale", ".weight")
            if name.endswith(".kernel"):  # Flax's Conv1D kernel is (out, in), PyTorch's Conv1D weight (in, out)
                pt, value = pt.replace(".kernel", ".weight"), value.T
            torch_named[pt] = np.ascontiguousarray(value)
        os.makedirs(folder)
        save_file(torch_named, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        config.save_pretrained(folder)
        # The folder must be what transformers itself reads as this model: its PyTorch-to-Flax loader.
        tokens = np.array([[1, 5, 9, 2, 7]])
        reread = self.load(folder)
        expected, got = np.asarray(model(tokens).logits), np.asarray(reread(tokens).logits)
        if not np.array_equal(expected, got):
            raise AssertionError(f"the PyTorch-format folder reads back differently: {np.abs(expected - got).max()}")

    def load(self, folder):
        return self.transformers.FlaxGPT2LMHeadModel.from_pretrained(folder)

    def logits_and_loss(self, model, tokens):
        logits = np.asarray(model(np.array([tokens])).logits[0], dtype=np.float64)
        # Flax GPT-2 returns no loss: transformers' logits, cross-entropy in float64 here.
        return logits[:-1], cross_entropy(logits[:-1], np.asarray(tokens))

    def greedy(self, model, prompt, count):
        out = model.generate(np.array([prompt]), max_new_tokens=count, do_sample=False, pad_token_id=END_OF_TEXT)
        return np.asarray(out.sequences[0, len(prompt):]).tolist()


def pick_backend(choice):
    """The backend object, or None after saying why none is available."""
    errors = []
    for backend in {"auto": (TorchBackend, FlaxBackend), "torch": (TorchBackend,), "flax": (FlaxBackend,)}[choice]:
        try:
            return backend()
        except ImportError as error:
            errors.append(f"{backend.name}: {error}")
    print("skipped: no transformers oracle (" + "; ".join(errors) + ")")
    return None


class HuggingFaceOracle(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.backend = SETTINGS["backend"]
        cls.tmp = tempfile.mkdtemp(prefix="check_hf_")
        print(f"oracle: {cls.backend.name}", flush=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def our_forwards(self, model_file, tokens):
        out = tempfile.mkdtemp(dir=self.tmp)
        run([SETTINGS["probe"], "--model", model_file, "--tokens", ",".join(map(str, tokens)), "--out", out])
        with open(os.path.join(out, "meta.json")) as handle:
            meta = json.load(handle)
        shape = (meta["T"], meta["V"])
        read = lambda name: np.fromfile(os.path.join(out, name), dtype=np.float32).reshape(shape)  # noqa: E731
        return read("train_logits.bin"), read("decoder_logits.bin"), meta["loss"]

    def our_greedy(self, model_file):
        json_path = os.path.join(self.tmp, "greedy.json")
        result = run([SETTINGS["generator"], "--model", model_file, "--prompt", PROMPT, "--temperature", "0",
                      "--max-new-tokens", GREEDY_TOKENS, "--json", json_path, "--vocab", f"{SHARED}/data/gpt2"])
        with open(json_path, encoding="utf-8") as handle:
            summary = json.load(handle)
        self.assertEqual(result.stdout, summary["text"])
        return summary

    def compare(self, model_file, hf_model, tokens):
        theirs, their_loss = self.backend.logits_and_loss(hf_model, tokens)
        train, decoder, loss = self.our_forwards(model_file, tokens)
        scale = max(1.0, float(np.abs(theirs).max()))
        for name, ours in (("training forward", train), ("KV-cache decoder", decoder)):
            error = float(np.abs(ours - theirs).max())
            print(f"  {name}: max |logit - transformers'| = {error:.3g} (tolerance {LOGIT_TOLERANCE * scale:.3g})")
            self.assertLessEqual(error, LOGIT_TOLERANCE * scale, name)
        print(f"  loss {loss:.7f}, transformers' {their_loss:.7f}")
        self.assertLessEqual(abs(loss - their_loss), LOGIT_TOLERANCE * max(1.0, abs(their_loss)))

    def compare_greedy(self, model_file, hf_model):
        ours = self.our_greedy(model_file)
        theirs = self.backend.greedy(hf_model, ours["prompt_tokens"], GREEDY_TOKENS)
        expected = theirs[:theirs.index(END_OF_TEXT)] if END_OF_TEXT in theirs else theirs
        self.assertEqual(ours["tokens"], expected)
        self.assertEqual(ours["stopped_at_end_of_text"], END_OF_TEXT in theirs)
        print(f"  greedy: {len(ours['tokens'])} tokens equal ({ours['text']!r})")
        return ours

    def test_imported_random_model_matches_transformers(self):
        folder, model_file = os.path.join(self.tmp, "random_hf"), os.path.join(self.tmp, "imported.bin")
        config = dict(vocab_size=50257, n_positions=64, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.0,
                      embd_pdrop=0.0, attn_pdrop=0.0)
        self.backend.make_random_folder(config, folder, seed=3)
        run([sys.executable, f"{REPO}/scripts/import_hf.py", folder, model_file])
        hf_model = self.backend.load(folder)
        tokens = np.random.default_rng(4).integers(0, 50257, size=16).tolist()
        self.compare(model_file, hf_model, tokens)
        self.compare_greedy(model_file, hf_model)

    def test_exported_checkpoint_matches_transformers(self):
        rng = np.random.default_rng(0)
        stream = np.tile(rng.integers(0, END_OF_TEXT, size=37), 40)  # learnable: a period-37 sequence
        header = np.zeros(256, dtype=np.int32)
        header[:3] = [20240520, 1, len(stream)]
        with open(os.path.join(self.tmp, "toy_train_000001.bin"), "wb") as out:
            out.write(header.tobytes() + stream.astype(np.uint16).tobytes())
        run_dir, folder = os.path.join(self.tmp, "run"), os.path.join(self.tmp, "exported_hf")
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        run([SETTINGS["trainer"], "--model", "d1", "-b", 2, "-t", 32, "--steps", 4, "--lr", "1e-2",
             "--train-data", os.path.join(self.tmp, "toy_train_*.bin"), "-o", run_dir], env=env)
        run([sys.executable, f"{REPO}/scripts/export_hf.py", run_dir, folder, "--vocab", f"{SHARED}/data/gpt2"])
        model_file = os.path.join(run_dir, "ckpt_000004_model.bin")
        hf_model = self.backend.load(folder)
        self.compare(model_file, hf_model, stream[5:21].tolist())
        ours = self.compare_greedy(model_file, hf_model)
        tokenizer = self.backend.transformers.AutoTokenizer.from_pretrained(folder)
        self.assertEqual(tokenizer.encode(PROMPT), ours["prompt_tokens"])
        self.assertEqual(tokenizer.decode(ours["tokens"]), ours["text"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generator", required=True, help="generate_gpt2_fp32_emu")
    parser.add_argument("--probe", required=True, help="forward_probe_fp32_emu")
    parser.add_argument("--trainer", required=True, help="train_gpt2_fp32_emu")
    parser.add_argument("--backend", choices=("auto", "torch", "flax"), default="auto")
    args, rest = parser.parse_known_args()
    SETTINGS.update(generator=args.generator, probe=args.probe, trainer=args.trainer)
    SETTINGS["backend"] = pick_backend(args.backend)
    if SETTINGS["backend"] is None:
        return 77
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
