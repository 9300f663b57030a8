#!/usr/bin/env python3
"""Tests of the generate_gpt2 program as a user runs it: the same seed gives the same text and another
seed another; greedy equals top-k 1; standard input equals --prompt; an empty prompt starts from
<|endoftext|>; generation stops at <|endoftext|> and when the context is full; the streamed text is the
tokens' bytes decoded as Python decodes UTF-8 with replacement (partial characters held back, invalid
bytes replaced); checkpoint prefixes and run directories work as --model; bad input gives one clear line
and a non-zero exit; --help matches the README.

Models are small files written here (L1 C32 T64 with GPT-2's 50257-token vocabulary), some with weights
chosen so that the next token is known: with the final LayerNorm's weight 0 its output is its bias b for
every position, so the logits are wte @ b and wte's rows decide.

Usage: test_generate_program.py --generator PATH [--require-gpu] [unittest args]
(with --require-gpu it exits 77, "skipped: no GPU", on a machine without one).
"""
import argparse
import base64
import json
import os
import re
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

SETTINGS = {"generator": None}
CONFIG = {"maxT": 64, "V": 50257, "L": 1, "NH": 2, "C": 32, "Vp": 50304}
END_OF_TEXT = 50256


def token_bytes():
    """id -> bytes from r50k_base.tiktoken (base64 token, rank per line): an independent decoder."""
    table = {}
    with open(f"{SHARED}/data/gpt2/r50k_base.tiktoken", "rb") as handle:
        for line in handle:
            token, rank = line.split()
            table[int(rank)] = base64.b64decode(token)
    table[END_OF_TEXT] = b"<|endoftext|>"
    return table


def write_model(path, seed, favoured=None, strength=5.0):
    """A random model; with `favoured` token ids, the final LayerNorm outputs b and only those rows of
    wte are non-zero (strength * b), so those tokens have logit strength * |b|^2 and all others 0."""
    rng = np.random.default_rng(seed)
    tensors = {name: 0.02 * rng.standard_normal(shape).astype(np.float32)
               for name, shape in llmc_model_file.shapes(CONFIG).items()}
    for name in ("ln1w", "ln2w", "lnfw"):
        tensors[name] = np.ones_like(tensors[name])
    tensors["wte"][CONFIG["V"]:] = 0.0
    if favoured is not None:
        b = rng.standard_normal(CONFIG["C"]).astype(np.float32)
        tensors["lnfw"][:] = 0.0
        tensors["lnfb"] = b
        tensors["wte"][:] = 0.0
        tensors["wte"][favoured] = strength * b
    llmc_model_file.write(path, CONFIG, tensors)


def generate(*args, stdin=None, json_path=None):
    command = [SETTINGS["generator"]] + [str(a) for a in args]
    if "--vocab" not in args and "--help" not in args:
        command += ["--vocab", f"{SHARED}/data/gpt2"]
    if json_path:
        command += ["--json", json_path]
    result = subprocess.run(command, input=stdin, capture_output=True, timeout=300)
    summary = None
    if json_path and result.returncode == 0:
        with open(json_path, encoding="utf-8") as handle:
            summary = json.load(handle)
    return result, summary


class GenerateProgram(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="test_generate_program_")
        cls.random_model = f"{cls.tmp}/random.bin"
        write_model(cls.random_model, seed=1)
        cls.bytes_of = token_bytes()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def run_ok(self, *args, stdin=None):
        json_path = f"{self.tmp}/out.json"
        result, summary = generate(*args, stdin=stdin, json_path=json_path)
        self.assertEqual(result.returncode, 0, result.stderr.decode(errors="replace"))
        self.assertEqual(result.stdout.decode("utf-8"), summary["text"])
        return result, summary

    def expect_failure(self, *args, needle, stdin=None):
        result, _ = generate(*args, stdin=stdin)
        self.assertNotEqual(result.returncode, 0)
        stderr = result.stderr.decode(errors="replace")
        self.assertRegex(stderr, re.compile(needle, re.M))  # within one line: '.' never crosses a newline
        return stderr

    # ---- sampling ----------------------------------------------------------------------------------
    def test_the_same_seed_gives_the_same_text(self):
        args = ["--model", self.random_model, "--prompt", "Once upon a time", "--max-new-tokens", 12]
        _, first = self.run_ok(*args, "--seed", 5)
        _, second = self.run_ok(*args, "--seed", 5)
        _, other = self.run_ok(*args, "--seed", 6)
        self.assertEqual(len(first["tokens"]), 12)
        self.assertEqual((first["tokens"], first["text"]), (second["tokens"], second["text"]))
        self.assertNotEqual(first["tokens"], other["tokens"])
        _, filtered = self.run_ok(*args, "--seed", 5, "--top-k", 40, "--top-p", 0.9, "--temperature", 0.8)
        _, filtered_again = self.run_ok(*args, "--seed", 5, "--top-k", 40, "--top-p", 0.9, "--temperature", 0.8)
        self.assertEqual(filtered["tokens"], filtered_again["tokens"])

    def test_greedy_equals_top_k_one_whatever_the_seed(self):
        args = ["--model", self.random_model, "--prompt", "Hello", "--max-new-tokens", 8]
        _, greedy = self.run_ok(*args, "--temperature", 0)
        _, top1 = self.run_ok(*args, "--top-k", 1, "--seed", 99)
        self.assertEqual(greedy["tokens"], top1["tokens"])

    def test_standard_input_is_the_prompt_and_empty_starts_from_end_of_text(self):
        _, from_option = self.run_ok("--model", self.random_model, "--prompt", "caf\u00e9 au lait",
                                     "--max-new-tokens", 3)
        _, from_stdin = self.run_ok("--model", self.random_model, "--max-new-tokens", 3,
                                    stdin="caf\u00e9 au lait".encode())
        self.assertEqual(from_option["prompt_tokens"], from_stdin["prompt_tokens"])
        self.assertEqual(from_option["tokens"], from_stdin["tokens"])
        _, empty = self.run_ok("--model", self.random_model, "--prompt", "", "--max-new-tokens", 2)
        self.assertEqual(empty["prompt_tokens"], [END_OF_TEXT])

    # ---- stopping ----------------------------------------------------------------------------------
    def test_stops_at_end_of_text(self):
        model = f"{self.tmp}/eot.bin"
        write_model(model, seed=2, favoured=[END_OF_TEXT])
        result, summary = self.run_ok("--model", model, "--prompt", "The end", "--max-new-tokens", 20)
        self.assertTrue(summary["stopped_at_end_of_text"])
        self.assertEqual((summary["tokens"], result.stdout), ([], b""))
        self.assertIn("stopped at <|endoftext|>", result.stderr.decode())

    def test_stops_when_the_context_is_full(self):
        prompt = " ".join(["word"] * 60)  # 60 tokens of a 64-position context: 4 more fit
        _, summary = self.run_ok("--model", self.random_model, "--prompt", prompt, "--max-new-tokens", 50)
        self.assertEqual(len(summary["prompt_tokens"]), 60)
        self.assertEqual((len(summary["tokens"]), summary["context_full"]), (4, True))
        self.expect_failure("--model", self.random_model, "--prompt", " ".join(["word"] * 64),
                            needle=r"^generate_gpt2: --prompt: 64 tokens; the model's context is 64")

    # ---- streaming text ----------------------------------------------------------------------------
    def test_streamed_text_is_the_bytes_decoded_with_replacement(self):
        single_bytes = [rank for rank, raw in self.bytes_of.items() if len(raw) == 1]
        self.assertEqual(len(single_bytes), 256)
        model = f"{self.tmp}/bytes.bin"
        write_model(model, seed=3, favoured=single_bytes)  # every token is one random byte
        assembled = []
        for seed in range(3):
            result, summary = self.run_ok("--model", model, "--prompt", "x", "--max-new-tokens", 40, "--seed", seed)
            raw = b"".join(self.bytes_of[t] for t in summary["tokens"])
            self.assertEqual(len(raw), 40)
            text = result.stdout.decode("utf-8")
            self.assertEqual(text, raw.decode("utf-8", errors="replace"))
            assembled += [c for c in text if ord(c) > 127 and c != "\ufffd"]
        # Characters of two or more bytes, each byte a token of its own: held back until complete.
        self.assertTrue(assembled, "no multi-byte character was drawn")

    # ---- models ------------------------------------------------------------------------------------
    def test_model_may_be_a_checkpoint_prefix_or_a_run_directory(self):
        run = f"{self.tmp}/run"
        os.makedirs(run, exist_ok=True)
        shutil.copyfile(self.random_model, f"{run}/ckpt_000010_model.bin")
        open(f"{run}/ckpt_000010_manifest.json", "wb").close()  # complete (llmc/checkpoint/checkpoint_dir.h)
        args = ["--prompt", "Hi", "--max-new-tokens", 4, "--seed", 3]
        _, by_file = self.run_ok("--model", self.random_model, *args)
        _, by_prefix = self.run_ok("--model", f"{run}/ckpt_000010", *args)
        _, by_dir = self.run_ok("--model", run, *args)
        self.assertEqual(by_file["tokens"], by_prefix["tokens"])
        self.assertEqual(by_file["tokens"], by_dir["tokens"])
        self.assertTrue(by_dir["model"].endswith("ckpt_000010_model.bin"))

    # ---- errors and help ---------------------------------------------------------------------------
    def test_bad_input_gives_one_clear_line(self):
        model = ["--model", self.random_model]
        self.expect_failure("--model", f"{self.tmp}/none",
                            needle=r"--model .*/none: not a model file, checkpoint prefix")
        self.expect_failure(*model, "--top-p", 1.5, needle=r"--top-p 1\.5.*: must be in \(0, 1\]")
        self.expect_failure(*model, "--temperature", -1, needle=r"--temperature .*must be a finite number >= 0")
        self.expect_failure(*model, "--max-new-tokens", -2, needle=r"--max-new-tokens -2: must be >= 0")
        self.expect_failure("--model", "tiny", needle=r"--model tiny: a vocabulary of 100 tokens; the GPT-2 tokenizer")
        self.expect_failure(*model, stdin=b"ok \xff", needle=r"standard input: invalid UTF-8 at byte offset 3")
        self.expect_failure(*model, "--prompt", "x", "--vocab", f"{self.tmp}/novocab",
                            needle=r"novocab: vocabulary directory does not exist")
        truncated = f"{self.tmp}/truncated.bin"
        with open(self.random_model, "rb") as source, open(truncated, "wb") as out:
            out.write(source.read(4096))
        self.expect_failure("--model", truncated, "--prompt", "x", needle=r"truncated\.bin: .*")
        self.expect_failure("--prompt", "x", needle=r"--model is required")

    def test_help_lists_every_documented_option(self):
        result, _ = generate("--help")
        self.assertEqual(result.returncode, 0)
        in_help = set(re.findall(r"(--[a-z][a-z0-9-]*)", result.stdout.decode()))
        with open(f"{REPO}/README.md", encoding="utf-8") as handle:
            readme = handle.read()
        section = re.search(r"^## Generating text: `\./generate_gpt2`\n(.*?)(?=^## )", readme, re.S | re.M)
        self.assertIsNotNone(section, "README has no '## Generating text: `./generate_gpt2`' section")
        documented = set(re.findall(r"^\| `(--[a-z][a-z0-9-]*)", section.group(1), re.M))
        self.assertFalse(documented - in_help, "documented in README but not in --help")
        self.assertFalse(in_help - documented - {"--help"}, "in --help but not documented in README")


def gpu_available(generator):
    """Whether the GPU build runs (a d1 preset, one token). Without a GPU it stops at its first CUDA call;
    any other failure (a library missing, say) is an error, not a skip."""
    result = subprocess.run([generator, "--model", "d1", "--prompt", "", "--max-new-tokens", "1", "--vocab",
                             f"{SHARED}/data/gpt2"], capture_output=True, text=True, timeout=120)
    if result.returncode == 0:
        return True
    if re.search(r"cudaErrorNoDevice|cudaErrorInsufficientDriver|no CUDA-capable device", result.stderr):
        return False
    raise SystemExit(f"{generator} failed before any test ({result.returncode}): {result.stderr.strip()}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generator", required=True, help="the generate_gpt2 binary to test")
    parser.add_argument("--require-gpu", action="store_true", help="skip (exit 77) when no GPU is present")
    args, rest = parser.parse_known_args()
    SETTINGS["generator"] = args.generator
    if args.require_gpu and not gpu_available(args.generator):
        print("skipped: no GPU")
        return 77
    program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
