#!/usr/bin/env python3
"""Turns raw FineWeb (or any corpus in the same shape) into GPT-2 token shards with ./tokenize_gpt2.

Input: JSON-lines files with the document text in a field ("text" for FineWeb), gzip-compressed
JSON lines, or parquet (only when pyarrow is installed: it is not a project dependency). Output:
PREFIX_val_000000.bin, PREFIX_train_000001.bin, ... in the shard format llm.c and modded-nanogpt read.
The shards appear in the output directory only when the whole run succeeded.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import List, Optional, Sequence

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DEFAULT_TOKENIZER = os.path.join(REPO_ROOT, "tokenize_gpt2")
INPUT_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".parquet")


class PrepareError(Exception):
    """Bad input or a failed step; the message names the file and the problem."""


def error_line(program: str, err: Exception) -> str:
    """The one-line report of a failed run: an OSError's file and reason, or a PrepareError's message."""
    if isinstance(err, OSError):
        return f"{program}: error: {getattr(err, 'filename', '') or ''}: {err.strerror or err}"
    return f"{program}: error: {err}"


def expand_inputs(inputs: Sequence[str], suffixes: Sequence[str] = INPUT_SUFFIXES) -> List[str]:
    """Files stay as given; a directory gives its files with a known suffix, sorted by name."""
    paths: List[str] = []
    for item in inputs:
        if os.path.isdir(item):
            found = sorted(os.path.join(item, n) for n in os.listdir(item) if n.endswith(tuple(suffixes)))
            if not found:
                raise PrepareError(f"{item}: no {', '.join(suffixes)} files in this directory")
            paths.extend(found)
        elif os.path.isfile(item):
            paths.append(item)
        else:
            raise PrepareError(f"{item}: no such file or directory")
    return paths


def _gunzip_jsonl(source: str, target: str) -> None:
    try:
        with gzip.open(source, "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    except (OSError, EOFError) as err:
        raise PrepareError(f"{source}: cannot decompress: {err}") from None


def _parquet_to_jsonl(source: str, target: str, field: str) -> None:
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise PrepareError(f"{source}: reading parquet needs pyarrow (pip install pyarrow), which is "
                           "not a project dependency; or convert the file to JSON lines") from None
    try:
        reader = parquet.ParquetFile(source)
        if field not in reader.schema_arrow.names:
            raise PrepareError(f"{source}: no column {field!r} (columns: "
                               f"{', '.join(reader.schema_arrow.names)})")
        with open(target, "w", encoding="utf-8") as out:
            for batch in reader.iter_batches(columns=[field], batch_size=4096):
                for text in batch.column(0).to_pylist():
                    out.write(json.dumps({field: text if text is not None else ""},
                                         ensure_ascii=False))
                    out.write("\n")
    except PrepareError:
        raise
    except Exception as err:  # pyarrow raises its own exception family for unreadable files
        raise PrepareError(f"{source}: cannot read parquet: {err}") from None


def as_jsonl(paths: Sequence[str], field: str, scratch: str) -> List[str]:
    """Plain JSON-lines paths for tokenize_gpt2: gzip and parquet inputs are converted into scratch."""
    plain = []
    for index, path in enumerate(paths):
        converted = os.path.join(scratch, f"input_{index:06d}.jsonl")
        if path.endswith(".gz"):
            _gunzip_jsonl(path, converted)
            plain.append(converted)
        elif path.endswith(".parquet"):
            _parquet_to_jsonl(path, converted, field)
            plain.append(converted)
        else:
            plain.append(path)
    return plain


def run_tokenizer(tokenizer: str, files: Sequence[str], output_dir: str, name: str,
                  jsonl_field: Optional[str], val_tokens: Optional[int], shard_tokens: Optional[int],
                  vocab: Optional[str], threads: Optional[int]) -> List[str]:
    """Runs tokenize_gpt2 into a temporary directory and moves its shards into output_dir only if it
    succeeded, so that a failed run leaves nothing half-written. Returns the shard paths."""
    if not os.path.isfile(tokenizer) or not os.access(tokenizer, os.X_OK):
        raise PrepareError(f"{tokenizer}: tokenize_gpt2 not found or not executable (build it with "
                           "`make`, or pass --tokenizer PATH)")
    os.makedirs(output_dir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".tokenize_", dir=output_dir)
    try:
        command = [tokenizer, "--output-dir", staging, "--name", name]
        if vocab:
            command += ["--vocab", vocab]
        if jsonl_field:
            command += ["--jsonl", jsonl_field]
        if val_tokens is not None:
            command += ["--val-tokens", str(val_tokens)]
        if shard_tokens is not None:
            command += ["--shard-tokens", str(shard_tokens)]
        if threads is not None:
            command += ["--threads", str(threads)]
        command += list(files)
        result = subprocess.run(command)
        if result.returncode != 0:
            raise PrepareError(f"tokenize_gpt2 failed (exit {result.returncode}); no shards written "
                               f"to {output_dir}")
        shards = sorted(n for n in os.listdir(staging) if n.endswith(".bin"))
        if not shards:
            raise PrepareError("tokenize_gpt2 wrote no shards")
        clashes = [n for n in shards if os.path.exists(os.path.join(output_dir, n))]
        if clashes:
            raise PrepareError(f"{output_dir}: would overwrite {', '.join(clashes)}; remove them or "
                               "choose another --output-dir or --name")
        moved = []
        for shard in shards:
            target = os.path.join(output_dir, shard)
            os.replace(os.path.join(staging, shard), target)
            moved.append(target)
        return moved
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Tokenize raw FineWeb-style documents (JSON lines, .jsonl.gz, or parquet with "
                    "pyarrow) into GPT-2 token shards with tokenize_gpt2.")
    parser.add_argument("inputs", nargs="+", help="input files or directories of them")
    parser.add_argument("--output-dir", default=os.path.join(REPO_ROOT, "data", "cache", "fineweb_custom"),
                        help="where the shards go (default data/cache/fineweb_custom)")
    parser.add_argument("--name", default="fineweb", help="shard name prefix (default fineweb)")
    parser.add_argument("--field", default="text", help="JSON field / parquet column with the text "
                                                         "(default text)")
    parser.add_argument("--val-tokens", type=int, default=100_000_000,
                        help="tokens of the val shard, taken first (default 100000000, as the "
                             "published FineWeb 10B shards)")
    parser.add_argument("--shard-tokens", type=int, default=100_000_000,
                        help="tokens per train shard (default 100000000)")
    parser.add_argument("--tokenizer", default=DEFAULT_TOKENIZER,
                        help="path of tokenize_gpt2 (default: the one in the repository root)")
    parser.add_argument("--vocab", help="GPT-2 vocab directory (default: tokenize_gpt2's)")
    parser.add_argument("--threads", type=int, help="tokenizer threads (default: all cores)")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.val_tokens < 0 or args.shard_tokens <= 0:
            raise PrepareError("--val-tokens must be >= 0 and --shard-tokens > 0")
        paths = expand_inputs(args.inputs)
        os.makedirs(args.output_dir, exist_ok=True)
        # Converted inputs can be large: keep them next to the output, not in a small /tmp.
        with tempfile.TemporaryDirectory(prefix=".convert_", dir=args.output_dir) as scratch:
            files = as_jsonl(paths, args.field, scratch)
            shards = run_tokenizer(args.tokenizer, files, args.output_dir, args.name, args.field,
                                   args.val_tokens, args.shard_tokens, args.vocab, args.threads)
    except (OSError, PrepareError) as err:
        print(error_line("fineweb_tokenize", err), file=sys.stderr)
        return 1
    print(f"fineweb_tokenize: {len(shards)} shards in {args.output_dir}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
