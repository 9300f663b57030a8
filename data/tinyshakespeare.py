#!/usr/bin/env python3
"""Token shards of tiny-shakespeare (or any small text file) for quick runs and tests.

Like llm.c's tinyshakespeare.py, the text is cut at blank lines and every piece is a document that
starts with <|endoftext|> (each piece keeps its trailing blank line, as llm.c does), and the first
32,768 tokens are the val split. --whole-file makes the file one document instead. Tokenization is
done by ./tokenize_gpt2; output: NAME_val_000000.bin, NAME_train_000001.bin.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import urllib.request
from typing import List, Optional, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fineweb_tokenize import (DEFAULT_TOKENIZER, REPO_ROOT, PrepareError,  # noqa: E402
                              error_line, run_tokenizer)

DEFAULT_INPUT = os.path.join(REPO_ROOT, "..", "shared", "data", "text", "tinyshakespeare.txt")
DEFAULT_URL = ("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/"
               "input.txt")
DEFAULT_VAL_TOKENS = 32_768


def split_documents(text: str) -> List[str]:
    """llm.c's split: pieces between blank lines, each but the last keeping the "\\n\\n" after it."""
    pieces = text.split("\n\n")
    return [piece + "\n\n" if index < len(pieces) - 1 else piece for index, piece in enumerate(pieces)]


def read_text(path: str) -> str:
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return handle.read()
    except UnicodeDecodeError as err:
        raise PrepareError(f"{path}: not valid UTF-8 at byte {err.start}") from None
    except OSError as err:
        raise PrepareError(f"{path}: cannot read: {err.strerror or err}") from None


def fetch_text(url: str, path: str) -> None:
    """Downloads the text once to `path` (through a temp name, so a failure leaves nothing)."""
    partial = path + ".part"
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as out:
            out.write(response.read())
        os.replace(partial, path)
    except OSError as err:
        if os.path.exists(partial):
            os.remove(partial)
        raise PrepareError(f"{url}: download failed: {getattr(err, 'reason', err)}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="GPT-2 token shards of tiny-shakespeare or another small text file.")
    parser.add_argument("--input", help="text file (default: ../shared/data/text/tinyshakespeare.txt, "
                                        "else downloaded from --url)")
    parser.add_argument("--url", default=DEFAULT_URL, help="where to download tiny-shakespeare "
                                                           "from when no local file is given or found")
    parser.add_argument("--name", default="tinyshakespeare", help="shard name prefix")
    parser.add_argument("--output-dir", help="where the shards go (default data/cache/NAME)")
    parser.add_argument("--val-tokens", type=int, default=DEFAULT_VAL_TOKENS,
                        help=f"tokens of the val split, taken first (default {DEFAULT_VAL_TOKENS})")
    parser.add_argument("--whole-file", action="store_true",
                        help="one document for the whole file instead of one per blank-line piece")
    parser.add_argument("--tokenizer", default=DEFAULT_TOKENIZER, help="path of tokenize_gpt2")
    parser.add_argument("--vocab", help="GPT-2 vocab directory (default: tokenize_gpt2's)")
    parser.add_argument("--threads", type=int, help="tokenizer threads (default: all cores)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    output_dir = args.output_dir or os.path.join(REPO_ROOT, "data", "cache", args.name)
    try:
        if args.val_tokens < 0:
            raise PrepareError("--val-tokens must be >= 0")
        os.makedirs(output_dir, exist_ok=True)
        source = args.input
        if source is None:
            source = DEFAULT_INPUT
            if not os.path.exists(source):
                source = os.path.join(output_dir, f"{args.name}.txt")
                if not os.path.exists(source):
                    print(f"tinyshakespeare: downloading {args.url}", file=sys.stderr)
                    fetch_text(args.url, source)
        text = read_text(source)
        if not text:
            raise PrepareError(f"{source}: empty file")
        documents = [text] if args.whole_file else split_documents(text)
        with tempfile.TemporaryDirectory(prefix=".documents_", dir=output_dir) as scratch:
            jsonl = os.path.join(scratch, "documents.jsonl")
            with open(jsonl, "w", encoding="utf-8") as out:
                for document in documents:
                    out.write(json.dumps({"text": document}, ensure_ascii=False) + "\n")
            shards = run_tokenizer(args.tokenizer, [jsonl], output_dir, args.name, "text",
                                   args.val_tokens, None, args.vocab, args.threads)
    except (OSError, PrepareError) as err:
        print(error_line("tinyshakespeare", err), file=sys.stderr)
        return 1
    print(f"tinyshakespeare: {len(documents)} documents -> {', '.join(shards)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
