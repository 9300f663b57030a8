"""Tests of data/fineweb_tokenize.py and data/tinyshakespeare.py, end to end through ./tokenize_gpt2.

Oracles: tiktoken's GPT-2 encoding (loaded offline from the shared r50k_base.tiktoken) applied to the
same documents, and llm.c's published tiny-shakespeare split (32,768 val + 305,260 train tokens).
The path of tokenize_gpt2 comes from the build (LLMC_TOKENIZE_GPT2); without it the tests fail.
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SHARED = os.environ.get("LLMC_SHARED_DIR", os.path.join(REPO, "..", "shared"))
VOCAB = os.path.join(SHARED, "data", "gpt2")
TEXTS = os.path.join(SHARED, "data", "text")
TOKENIZER = os.environ.get("LLMC_TOKENIZE_GPT2", os.path.join(REPO, "tokenize_gpt2"))
EOT = 50256
GPT2_PATTERN = (r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def tiktoken_gpt2():
    import tiktoken
    import tiktoken.load
    ranks = tiktoken.load.load_tiktoken_bpe(os.path.join(VOCAB, "r50k_base.tiktoken"))
    return tiktoken.Encoding(name="gpt2", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": EOT})


def read_shard(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    tokens = np.fromfile(path, dtype="<u2", offset=1024)
    assert header[0] == 20240520 and header[1] == 1, (path, header[:3])
    assert header[2] == len(tokens), (path, header[2], len(tokens))
    return tokens


def shards_in(directory, name):
    names = sorted(n for n in os.listdir(directory) if n.startswith(name) and n.endswith(".bin"))
    return [os.path.join(directory, n) for n in names]


def run(script, *args):
    return subprocess.run([sys.executable, os.path.join(REPO, "data", script), "--tokenizer",
                           TOKENIZER, "--vocab", VOCAB, *args],
                          capture_output=True, text=True, timeout=300)


class DataScripts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(TOKENIZER, os.X_OK):
            raise AssertionError(f"tokenize_gpt2 not built at {TOKENIZER}: these tests need it")
        cls.encoding = tiktoken_gpt2()

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = os.path.join(self.tmp.name, "out")

    def tearDown(self):
        self.tmp.cleanup()

    def test_tinyshakespeare_matches_llmc_split(self):
        result = run("tinyshakespeare.py", "--input", os.path.join(TEXTS, "tinyshakespeare.txt"),
                     "--output-dir", self.out)
        self.assertEqual(result.returncode, 0, result.stderr)
        train_path, val_path = shards_in(self.out, "tinyshakespeare")   # "train" sorts first
        self.assertTrue(val_path.endswith("tinyshakespeare_val_000000.bin"))
        self.assertTrue(train_path.endswith("tinyshakespeare_train_000001.bin"))
        val, train = read_shard(val_path), read_shard(train_path)
        self.assertEqual((len(val), len(train)), (32768, 305260))   # llm.c's published counts
        with open(os.path.join(TEXTS, "tinyshakespeare.txt"), encoding="utf-8") as handle:
            pieces = handle.read().split("\n\n")
        expected = []
        for index, piece in enumerate(pieces):
            expected.append(EOT)
            expected += self.encoding.encode_ordinary(piece + "\n\n" if index < len(pieces) - 1
                                                      else piece)
        self.assertEqual(np.concatenate([val, train]).tolist(), expected)
        self.assertEqual(sorted(os.listdir(self.out)), ["tinyshakespeare_train_000001.bin",
                                                        "tinyshakespeare_val_000000.bin"])

    def test_whole_file_of_another_text(self):
        result = run("tinyshakespeare.py", "--input", os.path.join(TEXTS, "kjv.txt"), "--name",
                     "kjv", "--whole-file", "--val-tokens", "100000", "--output-dir", self.out)
        self.assertEqual(result.returncode, 0, result.stderr)
        tokens = np.concatenate([read_shard(p) for p in shards_in(self.out, "kjv")])
        self.assertEqual(len(tokens), 1 + 1141844)   # EOT + the published whole-file count
        self.assertEqual(len(read_shard(shards_in(self.out, "kjv")[-1])), 100000)  # val sorts last

    def documents(self):
        with open(os.path.join(TEXTS, "kjv.txt"), encoding="utf-8") as handle:
            paragraphs = [p for p in handle.read().split("\n\n") if p.strip()][:300]
        paragraphs += ["Ünïcödé wörds, 数字 ١٢٣ and emoji 👩‍👩‍👧 in one document.\n",
                       "  leading spaces,\ttabs\r\nand CRLF  "]
        return paragraphs

    def write_jsonl(self, path, docs, opener=open):
        with opener(path, "wt", encoding="utf-8") as handle:
            for doc in docs:
                handle.write(json.dumps({"id": len(doc), "text": doc}) + "\n")

    def test_fineweb_jsonl_and_gzip(self):
        docs = self.documents()
        first = os.path.join(self.tmp.name, "part_000.jsonl")
        second = os.path.join(self.tmp.name, "part_001.jsonl.gz")
        self.write_jsonl(first, docs[:150])
        self.write_jsonl(second, docs[150:], opener=gzip.open)
        result = run("fineweb_tokenize.py", first, second, "--output-dir", self.out,
                     "--val-tokens", "5000", "--shard-tokens", "8000", "--threads", "2")
        self.assertEqual(result.returncode, 0, result.stderr)
        paths = shards_in(self.out, "fineweb")
        val = read_shard(paths[-1])
        self.assertTrue(paths[-1].endswith("fineweb_val_000000.bin"))
        trains = [read_shard(p) for p in paths[:-1]]
        self.assertEqual(len(val), 5000)
        self.assertTrue(all(len(t) == 8000 for t in trains[:-1]))
        self.assertTrue(0 < len(trains[-1]) <= 8000)
        expected = []
        for doc in docs:
            expected.append(EOT)
            expected += self.encoding.encode_ordinary(doc)
        self.assertEqual(np.concatenate([val] + trains).tolist(), expected)
        self.assertEqual([n for n in os.listdir(self.out) if not n.endswith(".bin")], [])

    def test_directory_input_and_clash(self):
        source = os.path.join(self.tmp.name, "raw")
        os.mkdir(source)
        self.write_jsonl(os.path.join(source, "a.jsonl"), self.documents()[:20])
        result = run("fineweb_tokenize.py", source, "--output-dir", self.out, "--val-tokens", "100")
        self.assertEqual(result.returncode, 0, result.stderr)
        before = {n: os.path.getmtime(os.path.join(self.out, n)) for n in os.listdir(self.out)}
        again = run("fineweb_tokenize.py", source, "--output-dir", self.out, "--val-tokens", "100")
        self.assertEqual(again.returncode, 1)
        self.assertIn("would overwrite", again.stderr)
        after = {n: os.path.getmtime(os.path.join(self.out, n)) for n in os.listdir(self.out)}
        self.assertEqual(before, after)

    def test_bad_jsonl_leaves_nothing(self):
        bad = os.path.join(self.tmp.name, "bad.jsonl")
        with open(bad, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({"text": "fine"}) + "\n{not json\n")
        result = run("fineweb_tokenize.py", bad, "--output-dir", self.out, "--val-tokens", "1")
        self.assertEqual(result.returncode, 1)
        self.assertIn("tokenize_gpt2 failed", result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        self.assertEqual(os.listdir(self.out), [])

    def test_parquet(self):
        path = os.path.join(self.tmp.name, "part.parquet")
        try:
            import pyarrow
            import pyarrow.parquet
        except ImportError:
            with open(path, "wb") as handle:
                handle.write(b"PAR1 not really")
            result = run("fineweb_tokenize.py", path, "--output-dir", self.out)
            self.assertEqual(result.returncode, 1)
            self.assertIn("needs pyarrow", result.stderr)
            self.assertIn(path, result.stderr)
            self.assertEqual(os.listdir(self.out), [])
            return
        docs = self.documents()[:50]
        pyarrow.parquet.write_table(pyarrow.table({"text": docs}), path)
        result = run("fineweb_tokenize.py", path, "--output-dir", self.out, "--val-tokens", "10")
        self.assertEqual(result.returncode, 0, result.stderr)
        tokens = np.concatenate([read_shard(p) for p in reversed(shards_in(self.out, "fineweb"))])
        expected = []
        for doc in docs:
            expected += [EOT] + self.encoding.encode_ordinary(doc)
        self.assertEqual(tokens.tolist(), expected)

    def test_missing_input(self):
        result = run("fineweb_tokenize.py", os.path.join(self.tmp.name, "nope.jsonl"),
                     "--output-dir", self.out)
        self.assertEqual(result.returncode, 1)
        self.assertIn("nope.jsonl: no such file", result.stderr)


if __name__ == "__main__":
    unittest.main()
