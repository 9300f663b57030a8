#!/usr/bin/env python3
"""The token prefix table (llmc/tokenizer/token_prefixes.h) against tiktoken's reading of the GPT-2
vocabulary (r50k_base.tiktoken, offline): for every token, its longest proper byte-prefix that is a token,
found here by trying every length from the longest down in tiktoken's bytes -> id map (no sorting, no
stack). Exit 0 when the whole padded table agrees."""
import argparse
import os
import subprocess
import sys

import tiktoken.load

PADDED_VOCAB = 50304  # the speedrun models' vocabulary
END_OF_TEXT = 50256


def expected_table(vocab_dir):
    ids = tiktoken.load.load_tiktoken_bpe(os.path.join(vocab_dir, "r50k_base.tiktoken"))  # bytes -> id
    assert sorted(ids.values()) == list(range(END_OF_TEXT)), "r50k_base: ids 0..50255 expected"
    table = [-1] * PADDED_VOCAB
    for b, i in ids.items():
        for length in range(len(b) - 1, 0, -1):
            if b[:length] in ids:
                table[i] = ids[b[:length]]
                break
    return table


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--probe", required=True, help="path of the tokenizer_probe binary")
    parser.add_argument("--shared", required=True, help="the shared folder (data/gpt2 inside)")
    args = parser.parse_args()
    vocab_dir = os.path.join(args.shared, "data", "gpt2")
    ours = subprocess.run([args.probe, "prefixes", vocab_dir, str(PADDED_VOCAB)], check=True,
                          capture_output=True, text=True).stdout.split()
    ours = [int(v) for v in ours]
    want = expected_table(vocab_dir)
    mismatches = [i for i in range(PADDED_VOCAB) if i >= len(ours) or ours[i] != want[i]]
    with_prefix = sum(1 for v in want if v >= 0)
    print(f"{len(ours)} entries, {with_prefix} tokens with a prefix, {len(mismatches)} mismatches")
    for i in mismatches[:10]:
        print(f"token {i}: ours {ours[i] if i < len(ours) else 'missing'}, tiktoken's vocabulary {want[i]}")
    return 0 if len(ours) == PADDED_VOCAB and not mismatches else 1


if __name__ == "__main__":
    sys.exit(main())
