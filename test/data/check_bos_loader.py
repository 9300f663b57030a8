#!/usr/bin/env python3
"""Checks the speedrun loaders against an independent Python implementation of their rules, on real text.

The shared King James Bible (one document per chapter, some longer than 2,048 tokens) and
tiny-shakespeare (one document per speech) are written as JSONL documents and tokenized by
./tokenize_gpt2 into several shards each. bos_loader_probe writes what the C++ loaders deal to every
rank; this file deals the same from the shards by the rule of the record (docs/recipes.md) (written here from
that text, not from the C++): every step, sequence 0 takes consecutive documents (BOS to next BOS) until
it holds exactly T+1 tokens, then sequence 1, ...; documents cut to the first max_doc tokens, a
sequence's last document cut to fill it; a step that does not fit the rest of a shard is dealt from the
start of the next shard (cyclically); rank r at micro-step k gets sequence k * world + r; cu_seqlens =
[0, document ends, T] padded with T. Validation: chunk c * world + r of T contiguous tokens (+1 target),
cu_seqlens = [0, BOS positions, T] padded. Several rank counts must give the same sequences.
Exit 0 when all agree, 1 otherwise.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

BOS = 50256


def read_shard(path):
    header = np.fromfile(path, dtype=np.int32, count=256)
    assert header[0] == 20240520 and header[1] == 1, f"{path}: not a token shard"
    tokens = np.fromfile(path, dtype=np.uint16, offset=1024)
    assert len(tokens) == header[2], f"{path}: token count"
    return tokens.astype(np.int64)


def kjv_chapters(text):
    """Documents = chapters: a chapter starts at an unindented line 'Book N'."""
    documents, current = [], []
    for line in text.splitlines(keepends=True):
        if re.match(r"^\S.* \d+\s*$", line) and current:
            documents.append("".join(current))
            current = []
        current.append(line)
    documents.append("".join(current))
    return [d for d in documents if d.strip()]


def shakespeare_speeches(text):
    return [d + "\n" for d in text.split("\n\n") if d.strip()]


def tokenize(tokenizer, shared, documents, directory, name, shard_tokens, val_tokens):
    jsonl = os.path.join(directory, name + ".jsonl")
    with open(jsonl, "w") as f:
        for d in documents:
            f.write(json.dumps({"text": d}) + "\n")
    run = subprocess.run([tokenizer, "--vocab", os.path.join(shared, "data", "gpt2"), "--output-dir", directory,
                          "--name", name, "--jsonl", "text", "--shard-tokens", str(shard_tokens),
                          "--val-tokens", str(val_tokens), "--threads", "2", jsonl], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"tokenize_gpt2 failed: {run.stderr}")


def deal(shards, T, max_doc, sequences, steps):
    """The expected sequences, step-major, as (tokens[T+1], document lengths) pairs."""
    out, shard, document = [], 0, 0
    starts = [np.flatnonzero(s == BOS) for s in shards]
    fresh = True
    while len(out) < steps * sequences:
        tokens, bos = shards[shard], starts[shard]
        step, d = [], document
        for _ in range(sequences):
            pieces, length = [], 0
            while length < T + 1 and d < len(bos):
                begin = int(bos[d])
                end = int(bos[d + 1]) if d + 1 < len(bos) else len(tokens)
                end = min(end, begin + max_doc, begin + T + 1 - length)
                pieces.append(tokens[begin:end])
                length += end - begin
                d += 1
            if length < T + 1:
                break
            step.append(pieces)
        if len(step) == sequences:
            out.extend(step)
            document, fresh = d, False
        else:
            assert not fresh, f"shard {shard} cannot hold one step"
            shard, document, fresh = (shard + 1) % len(shards), 0, True
    return out


def expected_record(pieces, T, cu_length):
    tokens = np.concatenate(pieces)
    ends = np.cumsum([len(p) for p in pieces])
    ends[-1] -= 1  # the T+1-th token is only a target
    cu = np.full(cu_length, T, dtype=np.int64)
    cu[0] = 0
    cu[1:len(ends) + 1] = ends
    return tokens[:T], tokens[1:], cu, len(pieces)


def read_probe(path, T, cu_length):
    record = 2 * T + cu_length + 1
    data = np.fromfile(path, dtype=np.int32)
    assert data.size % record == 0, f"{path}: {data.size} values is not a whole number of records"
    data = data.reshape(-1, record)
    return [(r[:T], r[T:2 * T], r[2 * T:2 * T + cu_length], int(r[-1])) for r in data]


def run_probe(probe, directory, args):
    out = os.path.join(directory, "probe.bin")
    run = subprocess.run([probe] + args + ["--out", out], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"bos_loader_probe {' '.join(args)} failed: {run.stderr}")
    return out


def compare(label, got, expected):
    if len(got) != len(expected):
        print(f"FAIL {label}: {len(got)} sequences, expected {len(expected)}")
        return False
    for i, (g, e) in enumerate(zip(got, expected)):
        for part, a, b in zip(("inputs", "targets", "cu_seqlens", "documents"), g, e):
            if not np.array_equal(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)):
                print(f"FAIL {label}: sequence {i}: {part} differ")
                return False
    print(f"ok   {label}: {len(got)} sequences")
    return True


def check_training(probe, pattern, T, max_doc, cu_length, steps, layouts):
    shards = [read_shard(p) for p in sorted(glob.glob(pattern))]
    sequences = layouts[0][0] * layouts[0][1]
    expected = [expected_record(p, T, cu_length) for p in deal(shards, T, max_doc, sequences, steps)]
    cut = sum(1 for r in expected for p in np.diff(r[2][:r[3] + 1]) if p >= max_doc - 1)
    ok = True
    with tempfile.TemporaryDirectory() as directory:
        for world, accum in layouts:
            out = run_probe(probe, directory, ["--pattern", pattern, "--seq-len", str(T), "--max-doc", str(max_doc),
                                               "--world", str(world), "--accum", str(accum), "--steps", str(steps),
                                               "--cu-length", str(cu_length)])
            ok &= compare(f"{os.path.basename(pattern)} T={T} cut={max_doc} {world} ranks x {accum}",
                          read_probe(out, T, cu_length), expected)
    print(f"     ({len(shards)} shards, {steps} steps, {cut} documents at the cut length)")
    return ok


def check_validation(probe, pattern, T, val_tokens, cu_length):
    tokens = np.concatenate([read_shard(p) for p in sorted(glob.glob(pattern))])
    expected = []
    for chunk in range(val_tokens // T):
        inputs, targets = tokens[chunk * T:chunk * T + T], tokens[chunk * T + 1:chunk * T + T + 1]
        starts = np.flatnonzero(inputs == BOS)
        cu = np.full(cu_length, T, dtype=np.int64)
        cu[0] = 0
        cu[1:len(starts) + 1] = starts
        expected.append((inputs, targets, cu, len(starts) + 1))
    ok = True
    with tempfile.TemporaryDirectory() as directory:
        for world in (1, 2, 4, 8):
            out = run_probe(probe, directory, ["--pattern", pattern, "--seq-len", str(T), "--world", str(world),
                                               "--val-tokens", str(val_tokens), "--cu-length", str(cu_length)])
            ok &= compare(f"{os.path.basename(pattern)} validation T={T} {world} ranks", read_probe(out, T, cu_length),
                          expected)
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--probe", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--shared", required=True, help="the shared directory (data/text, data/gpt2)")
    args = parser.parse_args()
    text_dir = os.path.join(args.shared, "data", "text")
    with open(os.path.join(text_dir, "kjv.txt"), encoding="utf-8") as f:
        kjv = kjv_chapters(f.read())
    with open(os.path.join(text_dir, "tinyshakespeare.txt"), encoding="utf-8") as f:
        shakespeare = shakespeare_speeches(f.read())
    ok = True
    with tempfile.TemporaryDirectory() as directory:
        tokenize(args.tokenizer, args.shared, kjv, directory, "kjv", 300_000, 100_000)
        tokenize(args.tokenizer, args.shared, shakespeare, directory, "shakespeare", 100_000, 40_000)
        kjv_train = os.path.join(directory, "kjv_train_*.bin")
        shakespeare_train = os.path.join(directory, "shakespeare_train_*.bin")
        ok &= check_training(args.probe, kjv_train, 4096, 2048, 128, 110, [(8, 1), (2, 4), (1, 8)])
        ok &= check_training(args.probe, shakespeare_train, 1000, 300, 128, 120, [(4, 1), (1, 4), (2, 2)])
        ok &= check_validation(args.probe, os.path.join(directory, "kjv_val_*.bin"), 8192, 65536, 64)
        ok &= check_validation(args.probe, os.path.join(directory, "shakespeare_val_*.bin"), 4096, 32768, 256)
    print(f"{len(kjv)} KJV chapters, {len(shakespeare)} tiny-shakespeare speeches")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
