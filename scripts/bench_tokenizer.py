#!/usr/bin/env python3
"""Benchmark: our C++ GPT-2 tokenizer against tiktoken on the same input in the same run.

Times encoding only (vocabulary loading excluded), best of --repeats, on one thread and on all
threads. Multi-threaded tiktoken gets the text cut at the same safe points our tokenizer uses
(after a newline between two printable ASCII characters, ~1 MB apart) through encode_ordinary_batch.
Both must produce the same number of tokens, or the comparison is void and the script fails.

  python3 scripts/bench_tokenizer.py --probe build/tokenizer_probe [--shared ../shared] [--threads N]
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test"))
from test_tokenizer_tiktoken import load_tiktoken_gpt2  # noqa: E402


def safe_chunks(text, target=1 << 20):
    """Same cut rule as llmc/tokenizer/parallel_encode.cpp (on characters; the cut characters are ASCII)."""
    def printable(c):
        return " " < c < "\x7f"
    chunks, start, search = [], 0, target - 1
    while True:
        nl = text.find("\n", search)
        if nl < 0:
            break
        cut = nl + 1
        if 2 <= cut < len(text) and printable(text[cut - 2]) and printable(text[cut]):
            chunks.append(text[start:cut])
            start, search = cut, cut + target - 1
        else:
            search = nl + 1
    chunks.append(text[start:])
    return chunks


def best_time(fn, repeats):
    best, result = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probe", required=True, help="path of the tokenizer_probe binary (built by CMake)")
    parser.add_argument("--shared", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared"))
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    vocab = os.path.join(args.shared, "data", "gpt2")
    enc = load_tiktoken_gpt2(vocab)
    rows = []
    for name in ("kjv.txt", "tinyshakespeare.txt"):
        path = os.path.join(args.shared, "data", "text", name)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        mb = len(text.encode("utf-8")) / 1e6
        for threads in sorted({1, args.threads}):
            out = subprocess.run([args.probe, "bench", vocab, path, str(threads), str(args.repeats)],
                                 check=True, capture_output=True, text=True).stdout
            ours = json.loads(out)
            if threads == 1:
                t_tik, ids = best_time(lambda: enc.encode_ordinary(text), args.repeats)
                tik_tokens = len(ids)
            else:
                chunks = safe_chunks(text)
                t_tik, batches = best_time(lambda: enc.encode_ordinary_batch(chunks, num_threads=threads), args.repeats)
                tik_tokens = sum(len(b) for b in batches)
            if tik_tokens != ours["tokens"]:
                print(f"{name}: token counts differ (ours {ours['tokens']}, tiktoken {tik_tokens})")
                return 1
            rows.append((name, mb, threads, ours["tokens"], mb / ours["seconds"], mb / t_tik, t_tik / ours["seconds"]))
    print(f"{'input':<20} {'MB':>6} {'threads':>7} {'tokens':>9} {'ours MB/s':>10} {'tiktoken MB/s':>14} {'ours/tiktoken':>14}")
    for name, mb, threads, tokens, ours, tik, ratio in rows:
        print(f"{name:<20} {mb:6.2f} {threads:7d} {tokens:9d} {ours:10.1f} {tik:14.1f} {ratio:13.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
