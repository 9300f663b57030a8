#!/usr/bin/env python3
"""End-to-end test of ./tokenize_gpt2: runs it on the shared texts and on JSONL, then checks the
shards against tiktoken (the oracle): header valid, exact val/train split, shard size limit,
token stream = [50256] + tiktoken(document) per document, decode equals the input, identical
output for --threads 1 and 4; and that bad input fails with a clear message and leaves no shard.
"""
import argparse
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile
from array import array

from test_tokenizer_tiktoken import load_tiktoken_gpt2

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256
EOT = 50256
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what)


def read_shard(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, count = struct.unpack_from("<3i", data)
    check(magic == MAGIC and version == VERSION, f"{path}: header magic/version {magic}/{version}")
    check(len(data) == HEADER_INTS * 4 + 2 * count, f"{path}: token count {count} vs file size {len(data)}")
    tokens = array("H")
    tokens.frombytes(data[HEADER_INTS * 4:])
    return tokens.tolist()


def run_tool(tool, args):
    return subprocess.run([tool] + args, capture_output=True, text=True)


def check_output(out_dir, name, expected, val_tokens, shard_tokens, enc, label):
    val = sorted(glob.glob(os.path.join(out_dir, f"{name}_val_*.bin")))
    train = sorted(glob.glob(os.path.join(out_dir, f"{name}_train_*.bin")))
    check([os.path.basename(p) for p in val] == [f"{name}_val_000000.bin"], f"{label}: val shards {val}")
    want_train = -(-(len(expected) - val_tokens) // shard_tokens)
    check([os.path.basename(p) for p in train] == [f"{name}_train_{i:06d}.bin" for i in range(1, want_train + 1)],
          f"{label}: train shard names {[os.path.basename(p) for p in train]}, want {want_train}")
    val_ids = read_shard(val[0]) if val else []
    check(len(val_ids) == val_tokens, f"{label}: val shard has {len(val_ids)} tokens, want {val_tokens}")
    stream = list(val_ids)
    for i, path in enumerate(train):
        ids = read_shard(path)
        if i + 1 < len(train):
            check(len(ids) == shard_tokens, f"{label}: {path} has {len(ids)} tokens, want {shard_tokens}")
        else:
            check(0 < len(ids) <= shard_tokens, f"{label}: last shard {path} has {len(ids)} tokens")
        stream += ids
    check(stream == expected, f"{label}: token stream differs from tiktoken's ({len(stream)} vs {len(expected)})")
    return stream


class Context:
    """What every check uses: the tool, the vocabulary, a temp dir, tiktoken, the input texts."""

    def __init__(self, tool, vocab, tmp, enc, texts, inputs, docs):
        self.tool, self.vocab, self.tmp, self.enc = tool, vocab, tmp, enc
        self.texts, self.inputs, self.docs = texts, inputs, docs


def check_text_with_threads(c, expected):
    """Plain text, 1 and 4 threads: exact split, shard limit, tiktoken stream, identical bytes."""
    val_tokens, shard_tokens = 50_000, 400_000
    outputs = {}
    for threads in (1, 4):
        out_dir = os.path.join(c.tmp, f"out{threads}")
        r = run_tool(c.tool, ["--vocab", c.vocab, "--output-dir", out_dir, "--name", "txt", "--val-tokens",
                              str(val_tokens), "--shard-tokens", str(shard_tokens), "--threads",
                              str(threads)] + c.inputs)
        check(r.returncode == 0, f"threads {threads}: exit {r.returncode}: {r.stderr}")
        stream = check_output(out_dir, "txt", expected, val_tokens, shard_tokens, c.enc, f"text threads={threads}")
        check(c.enc.decode_bytes(stream) == "".join("<|endoftext|>" + d for d in c.docs).encode("utf-8"),
              f"threads {threads}: decoded shards differ from the input")
        outputs[threads] = {os.path.basename(p): open(p, "rb").read()
                            for p in glob.glob(os.path.join(out_dir, "*.bin"))}
    check(outputs[1] == outputs[4], "shards differ between --threads 1 and --threads 4")


def check_jsonl(c):
    """JSONL: one document per line's field; blank lines skipped."""
    jsonl = os.path.join(c.tmp, "docs.jsonl")
    json_docs = ["first document", "Ünïcödé 😀 and   spaces\n\n", "", "it's the third's"] + [d[:5000] for d in c.docs[:2]]
    with open(jsonl, "w", encoding="utf-8") as f:
        for i, d in enumerate(json_docs):
            f.write(json.dumps({"id": i, "text": d}, ensure_ascii=(i % 2 == 0)) + "\n")
            if i == 1:
                f.write("\n")
    expected_jsonl = []
    for d in json_docs:
        expected_jsonl += [EOT] + c.enc.encode_ordinary(d)
    out_dir = os.path.join(c.tmp, "jsonl")
    r = run_tool(c.tool, ["--vocab", c.vocab, "--output-dir", out_dir, "--name", "fw", "--val-tokens", "10",
                          "--shard-tokens", "1000", "--jsonl", "text", jsonl])
    check(r.returncode == 0, f"jsonl: exit {r.returncode}: {r.stderr}")
    check_output(out_dir, "fw", expected_jsonl, 10, 1000, c.enc, "jsonl")


def check_no_val_shard_and_rerun(c):
    """--val-tokens 0: no val shard, train shards from 000001; a second run into the same place
    refuses to mix its shards with the existing ones."""
    out_dir = os.path.join(c.tmp, "noval")
    cmd = ["--vocab", c.vocab, "--output-dir", out_dir, "--name", "nv", "--val-tokens", "0",
           "--shard-tokens", "300000", c.texts[0]]
    r = run_tool(c.tool, cmd)
    got = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []
    check(r.returncode == 0 and got == ["nv_train_000001.bin", "nv_train_000002.bin"], f"--val-tokens 0: {got} {r.stderr}")
    stream = [t for g in got for t in read_shard(os.path.join(out_dir, g))]
    check(stream == [EOT] + c.enc.encode_ordinary(c.docs[0]), "--val-tokens 0: stream differs from tiktoken's")
    r = run_tool(c.tool, cmd)
    check(r.returncode != 0 and "already has shards" in r.stderr and sorted(os.listdir(out_dir)) == got,
          f"rerun into a directory with shards: {r.returncode} {r.stderr}")


def check_print_ids(c, small):
    """--print-ids prints tiktoken's ids for the whole file."""
    r = run_tool(c.tool, ["--vocab", c.vocab, "--print-ids", small])
    check(r.returncode == 0 and [int(t) for t in r.stdout.split()] == c.enc.encode_ordinary(c.docs[2]),
          f"--print-ids: {r.returncode} {r.stderr}")


def check_errors(c):
    """Errors: clear message, non-zero exit, no shard left (even those written before the error)."""
    bad_utf8 = os.path.join(c.tmp, "bad.txt")
    with open(bad_utf8, "wb") as f:
        f.write("good text é\n".encode() + b"bad \xc3\x28 here")
    bad_offset = len("good text é\n".encode()) + 4
    bad_json = os.path.join(c.tmp, "bad.jsonl")
    with open(bad_json, "w") as f:
        f.write('{"text": "ok"}\n{"text": "unterminated\n')
    no_field = os.path.join(c.tmp, "nofield.jsonl")
    with open(no_field, "w") as f:
        f.write('{"text": "ok"}\n{"text": "ok"}\n{"body": "wrong field"}\n')
    bad_utf8_jsonl = os.path.join(c.tmp, "badutf8.jsonl")
    with open(bad_utf8_jsonl, "wb") as f:
        f.write(b'{"text": "ok"}\n{"text": "\xff"}\n')
    missing = os.path.join(c.tmp, "does_not_exist.txt")
    # Over one input batch (8 MB at --threads 1), so shards are written before the error.
    big = os.path.join(c.tmp, "big.txt")
    with open(big, "w", encoding="utf-8") as f:
        f.write(c.docs[1] * 3)
    cases = [
        ("missing input", [c.texts[0], missing], [missing, "does not exist"]),
        ("invalid UTF-8", c.texts + [bad_utf8], [bad_utf8, f"byte offset {bad_offset}"]),
        ("invalid UTF-8 after shards were written", ["--threads", "1", big, bad_utf8],
         [bad_utf8, f"byte offset {bad_offset}"]),
        ("JSONL not JSON", ["--jsonl", "text", bad_json], [bad_json + ":2", "not valid JSON"]),
        ("JSONL missing field", ["--jsonl", "text", no_field], [no_field + ":3", "no field \"text\""]),
        ("JSONL invalid UTF-8", ["--jsonl", "text", bad_utf8_jsonl], [bad_utf8_jsonl + ":2", "invalid UTF-8"]),
        ("bad vocab dir", ["--vocab", os.path.join(c.tmp, "novocab"), c.texts[0]], [os.path.join(c.tmp, "novocab")]),
    ]
    for label, extra, must_say in cases:
        out_dir = os.path.join(c.tmp, "err_" + label.replace(" ", "_"))
        base = [] if extra[0] == "--vocab" else ["--vocab", c.vocab]
        r = run_tool(c.tool, base + ["--output-dir", out_dir, "--val-tokens", "1000", "--shard-tokens",
                                     "100000"] + extra)
        check(r.returncode != 0, f"{label}: exit status 0")
        for phrase in must_say:
            check(phrase in r.stderr, f"{label}: message lacks {phrase!r}: {r.stderr.strip()}")
        left = glob.glob(os.path.join(out_dir, "*"))
        check(not left, f"{label}: files left behind: {left}")
        print(f"{label}: {r.stderr.strip()}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tool", required=True, help="path of tokenize_gpt2")
    parser.add_argument("--shared", required=True, help="the shared data directory")
    args = parser.parse_args()
    vocab = os.path.join(args.shared, "data", "gpt2")
    enc = load_tiktoken_gpt2(vocab)
    texts = [os.path.join(args.shared, "data", "text", n) for n in ("tinyshakespeare.txt", "kjv.txt")]

    with tempfile.TemporaryDirectory() as tmp:
        small = os.path.join(tmp, "unicode.txt")
        empty = os.path.join(tmp, "empty.txt")
        with open(small, "w", encoding="utf-8") as f:
            f.write("naïve café 日本語 😀👍🏽 ٣٤٥\n  it's IT'S  \n\n\u00a0\u3000 end  ")
        open(empty, "w").close()
        inputs = texts + [small, empty]
        docs = []
        for p in inputs:
            with open(p, encoding="utf-8") as f:
                docs.append(f.read())
        expected = []
        for d in docs:
            expected += [EOT] + enc.encode_ordinary(d)
        c = Context(args.tool, vocab, tmp, enc, texts, inputs, docs)
        check_text_with_threads(c, expected)
        check_jsonl(c)
        check_no_val_shard_and_rerun(c)
        check_print_ids(c, small)
        check_errors(c)

    print("PASS" if not failures else f"FAIL: {len(failures)} checks failed")
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
