#!/usr/bin/env python3
"""Tests of scripts/export_hf.py and scripts/import_hf.py that need no transformers (numpy and safetensors
only): export then import gives back the very same model file (fp32 and bf16), the exported folder's
names, shapes and config, checkpoint prefixes and run directories as MODEL, bfloat16 and sharded weights,
and a clear one-line error with a non-zero exit -- and nothing half-written -- for every folder we cannot
import and every bad argument. transformers itself judges the folders in check_hf_transformers.py.

Usage: test_hf_scripts.py [unittest args]   (exit 77, skipped, without safetensors)
"""
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
sys.path.insert(0, os.path.join(REPO, "scripts"))
import llmc_model_file  # noqa: E402


def random_model(cfg, seed=0):
    rng = np.random.default_rng(seed)
    tensors = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in
               llmc_model_file.shapes(cfg).items()}
    tensors["wte"][cfg["V"]:] = 0.0  # padded vocabulary rows are 0 in our files
    return tensors


def script(name, *args):
    return subprocess.run([sys.executable, os.path.join(REPO, "scripts", name)] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=120)


def read_bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


class HfScripts(unittest.TestCase):
    SMALL = {"maxT": 32, "V": 300, "L": 2, "NH": 4, "C": 64, "Vp": 384}

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="test_hf_scripts_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def expect_error(self, result, *needles):
        self.assertNotEqual(result.returncode, 0, result.stdout)
        message = result.stderr.strip().splitlines()[-1]
        for needle in needles:
            self.assertIn(needle, message)
        return message

    def exported(self, cfg=None, dtype="fp32", name="hf"):
        cfg = cfg or self.SMALL
        llmc_model_file.write(self.path("model.bin"), cfg, random_model(cfg), dtype)
        result = script("export_hf.py", self.path("model.bin"), self.path(name), "--vocab", f"{SHARED}/data/gpt2")
        self.assertEqual(result.returncode, 0, result.stderr)
        return self.path(name)

    # ---- round trips and the folder ----------------------------------------------------------------
    def test_export_then_import_gives_back_the_same_file(self):
        for dtype in ("fp32", "bf16"):
            folder = self.exported(dtype=dtype, name=f"hf_{dtype}")
            result = script("import_hf.py", folder, self.path(f"back_{dtype}.bin"), "--dtype", dtype)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(read_bytes(self.path(f"back_{dtype}.bin")), read_bytes(self.path("model.bin")), dtype)

    def test_the_folder_has_gpt2s_names_shapes_and_config(self):
        from safetensors.numpy import load_file
        folder = self.exported()
        weights = load_file(os.path.join(folder, "model.safetensors"))
        _, ours, _ = llmc_model_file.read(self.path("model.bin"))
        C, V = self.SMALL["C"], self.SMALL["V"]
        self.assertEqual(len(weights), 4 + 12 * self.SMALL["L"])
        np.testing.assert_array_equal(weights["transformer.wte.weight"], ours["wte"][:V])
        np.testing.assert_array_equal(weights["transformer.h.1.attn.c_attn.weight"], ours["qkvw"][1].T)
        self.assertEqual(weights["transformer.h.0.mlp.c_proj.weight"].shape, (4 * C, C))
        np.testing.assert_array_equal(weights["transformer.h.0.mlp.c_fc.bias"], ours["fcb"][0])
        with open(os.path.join(folder, "config.json")) as handle:
            config = json.load(handle)
        self.assertEqual((config["model_type"], config["n_layer"], config["n_head"], config["n_embd"],
                          config["n_positions"], config["vocab_size"], config["activation_function"]),
                         ("gpt2", 2, 4, 64, 32, 300, "gelu_new"))
        self.assertFalse(os.path.exists(os.path.join(folder, "vocab.json")))  # V=300 is not GPT-2's vocabulary

    def test_gpt2_vocabulary_gets_the_tokenizer_files(self):
        cfg = {"maxT": 16, "V": 50257, "L": 1, "NH": 1, "C": 8, "Vp": 50304}
        folder = self.exported(cfg)
        self.assertEqual(read_bytes(os.path.join(folder, "vocab.json")), read_bytes(f"{SHARED}/data/gpt2/encoder.json"))
        self.assertEqual(read_bytes(os.path.join(folder, "merges.txt")), read_bytes(f"{SHARED}/data/gpt2/vocab.bpe"))
        with open(os.path.join(folder, "config.json")) as handle:
            self.assertEqual(json.load(handle)["eos_token_id"], 50256)

    def test_model_may_be_a_checkpoint_prefix_or_a_run_directory(self):
        run = self.path("run")
        os.makedirs(run)
        for step, seed in ((100, 1), (200, 2)):
            llmc_model_file.write(f"{run}/ckpt_{step:06d}_model.bin", self.SMALL, random_model(self.SMALL, seed))
            open(f"{run}/ckpt_{step:06d}_manifest.json", "wb").close()
        # Written but not complete (no manifest): a run directory's newest complete checkpoint is 200.
        llmc_model_file.write(f"{run}/ckpt_000300_model.bin", self.SMALL, random_model(self.SMALL, 3))
        for model, expected in ((f"{run}/ckpt_000100", "ckpt_000100"), (run, "ckpt_000200")):
            out = self.path("hf_" + expected)
            self.assertEqual(script("export_hf.py", model, out).returncode, 0)
            self.assertEqual(script("import_hf.py", out, out + ".bin").returncode, 0)
            self.assertEqual(read_bytes(out + ".bin"), read_bytes(f"{run}/{expected}_model.bin"))

    def test_bfloat16_and_sharded_weights_import(self):
        from safetensors.numpy import load_file, save_file
        folder = self.exported()
        weights = load_file(os.path.join(folder, "model.safetensors"))
        names = sorted(weights)
        try:
            import ml_dtypes
        except ImportError:
            self.skipTest("ml_dtypes is not installed")
        halves = [{n: weights[n].astype(ml_dtypes.bfloat16) for n in names[:10]}, {n: weights[n] for n in names[10:]}]
        os.remove(os.path.join(folder, "model.safetensors"))
        index = {"metadata": {}, "weight_map": {}}
        for i, half in enumerate(halves):
            shard = f"model-0000{i + 1}-of-00002.safetensors"
            save_file(half, os.path.join(folder, shard), metadata={"format": "pt"})
            index["weight_map"].update({n: shard for n in half})
        with open(os.path.join(folder, "model.safetensors.index.json"), "w") as handle:
            json.dump(index, handle)
        result = script("import_hf.py", folder, self.path("sharded.bin"))
        self.assertEqual(result.returncode, 0, result.stderr)
        _, back, _ = llmc_model_file.read(self.path("sharded.bin"))
        _, original, _ = llmc_model_file.read(self.path("model.bin"))
        np.testing.assert_array_equal(back["lnfw"], original["lnfw"])  # kept in float32
        rounded = np.asarray(original["qkvw"], np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)
        self.assertIn("transformer.h.0.attn.c_attn.weight", names[:10])
        np.testing.assert_array_equal(back["qkvw"][0], rounded[0])  # bfloat16 read exactly

    # ---- refusals ------------------------------------------------------------------------------------
    def import_with(self, change_config=None, change_weights=None):
        from safetensors.numpy import load_file, save_file
        folder = self.exported(name=f"hf_{len(os.listdir(self.tmp))}")
        if change_config:
            with open(os.path.join(folder, "config.json")) as handle:
                config = json.load(handle)
            change_config(config)
            with open(os.path.join(folder, "config.json"), "w") as handle:
                json.dump(config, handle)
        if change_weights:
            weights = load_file(os.path.join(folder, "model.safetensors"))
            change_weights(weights)
            save_file(weights, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        out = self.path("imported.bin")
        result = script("import_hf.py", folder, out)
        if result.returncode != 0:
            self.assertFalse(os.path.exists(out) or os.path.exists(out + ".tmp"), "a refused import wrote a file")
        return result

    def test_import_refuses_what_is_not_gpt2_or_not_computed_here(self):
        self.expect_error(self.import_with(lambda c: c.update(model_type="llama")), "config.json",
                          "model_type is 'llama'")
        self.expect_error(self.import_with(lambda c: c.update(activation_function="gelu")), "unsupported GPT-2 variant",
                          "activation_function 'gelu'")
        self.expect_error(self.import_with(lambda c: c.update(n_inner=100, layer_norm_epsilon=1e-6)), "n_inner 100",
                          "layer_norm_epsilon 1e-06")
        self.expect_error(self.import_with(lambda c: c.update(scale_attn_by_inverse_layer_idx=True)),
                          "scale_attn_by_inverse_layer_idx")
        self.expect_error(self.import_with(lambda c: c.update(n_positions=64)), "wpe.weight",
                          "has shape (32, 64), config.json implies (64, 64)")
        self.expect_error(self.import_with(change_weights=lambda w: w.pop("transformer.h.1.ln_2.bias")), "missing",
                          "h.1.ln_2.bias")
        self.expect_error(self.import_with(change_weights=lambda w: w.update(extra=np.zeros(3, np.float32))),
                          "unexpected ['extra']")
        untie = lambda w: w.update({"lm_head.weight": w["transformer.wte.weight"] + 1})  # noqa: E731
        self.expect_error(self.import_with(change_weights=untie), "lm_head.weight differs")
        tied = lambda w: w.update({"lm_head.weight": w["transformer.wte.weight"].copy(),  # noqa: E731
                                   "transformer.h.0.attn.bias": np.ones((1, 1, 32, 32), np.float32)})
        self.assertEqual(self.import_with(change_weights=tied).returncode, 0)  # a tied head and mask buffers: fine

    def test_import_names_the_missing_files(self):
        os.makedirs(self.path("empty"))
        self.expect_error(script("import_hf.py", self.path("empty"), self.path("x.bin")), "config.json", "cannot read")
        folder = self.exported()
        os.rename(os.path.join(folder, "model.safetensors"), os.path.join(folder, "pytorch_model.bin"))
        self.expect_error(script("import_hf.py", folder, self.path("x.bin")), "no model.safetensors",
                          "it has pytorch_model.bin")

    def test_export_refuses_bad_input_and_leaves_nothing_behind(self):
        folder = self.exported()
        self.expect_error(script("export_hf.py", self.path("model.bin"), folder), "exists already")
        with open(self.path("model.bin"), "r+b") as handle:
            handle.truncate(5000)
        self.expect_error(script("export_hf.py", self.path("model.bin"), self.path("t")), "model.bin", "truncated")
        self.expect_error(script("export_hf.py", self.path("nothing"), self.path("t")), "nothing",
                          "no such model file")
        cfg = {"maxT": 16, "V": 50257, "L": 1, "NH": 1, "C": 8, "Vp": 50304}
        llmc_model_file.write(self.path("gpt2.bin"), cfg, random_model(cfg))
        os.makedirs(self.path("novocab"))
        self.expect_error(script("export_hf.py", self.path("gpt2.bin"), self.path("t"), "--vocab",
                                 self.path("novocab")), "no encoder.json")
        self.assertEqual(sorted(os.listdir(self.tmp)), ["gpt2.bin", "hf", "model.bin", "novocab"])


def main():
    try:
        import safetensors  # noqa: F401
    except ImportError:
        print("skipped: safetensors is not installed (scripts/install_deps.sh)")
        return 77
    program = unittest.main(argv=sys.argv, exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
