#!/usr/bin/env python3
"""Downloads the pre-tokenized FineWeb 10B shards (GPT-2 tokens) that llm.c and modded-nanogpt use.

Files: fineweb_val_000000.bin and fineweb_train_000001..N.bin. Each download goes to NAME.part first,
resumes with an HTTP Range request after an interruption (or when run again), and becomes NAME only
once its shard header checks out (magic 20240520, version 1, token count matching the file size).
A file that fails the check is deleted, never kept. Standard library only (numpy is not needed).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import re
import struct
import sys
import time
import urllib.error
import urllib.request
from typing import List, Optional, Sequence, Tuple

DEFAULT_BASE_URL = "https://huggingface.co/datasets/kjj0/fineweb10B-gpt2/resolve/main"
DEFAULT_TRAIN_SHARDS = 103          # the whole 10B-token set
SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
CHUNK_BYTES = 1 << 20


class ShardError(Exception):
    """A file that is not a valid token shard; the message names the file and the problem."""


class TransientError(Exception):
    """A download that stopped early (network trouble): worth a retry that resumes."""


def check_header(header: bytes, path: str, file_size: Optional[int] = None) -> int:
    """The token count of a shard header; ShardError if the header is wrong or the size disagrees."""
    if len(header) < HEADER_BYTES:
        raise ShardError(f"{path}: {len(header)} bytes, shorter than the {HEADER_BYTES}-byte header")
    magic, version, num_tokens = struct.unpack_from("<iii", header, 0)
    if magic != SHARD_MAGIC:
        raise ShardError(f"{path}: magic {magic}, expected {SHARD_MAGIC} (not a token shard)")
    if version != SHARD_VERSION:
        raise ShardError(f"{path}: version {version}, expected {SHARD_VERSION}")
    if num_tokens < 0:
        raise ShardError(f"{path}: negative token count {num_tokens}")
    expected = HEADER_BYTES + 2 * num_tokens
    if file_size is not None and file_size != expected:
        raise ShardError(f"{path}: header says {num_tokens} tokens ({expected} bytes) but the file "
                         f"has {file_size} bytes (truncated or corrupt)")
    return num_tokens


def validate_shard(path: str) -> int:
    """Token count of the shard file at `path`; ShardError if it is not a complete, valid shard."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(HEADER_BYTES)
        size = os.path.getsize(path)
    except OSError as err:
        raise ShardError(f"{path}: cannot read: {err.strerror or err}") from None
    return check_header(header, path, size)


def shard_names(name: str, train_shards: int, include_val: bool = True) -> List[str]:
    names = [f"{name}_val_{0:06d}.bin"] if include_val else []
    names += [f"{name}_train_{index:06d}.bin" for index in range(1, train_shards + 1)]
    return names


def _content_range(value: Optional[str]) -> Tuple[Optional[int], Optional[int]]:
    """(first byte, total size) of a `Content-Range: bytes a-b/total` header."""
    match = re.match(r"bytes\s+(\d+)-\d+/(\d+|\*)", value or "")
    if not match:
        return None, None
    total = None if match.group(2) == "*" else int(match.group(2))
    return int(match.group(1)), total


def _fetch_once(url: str, part_path: str, timeout: float) -> None:
    """One HTTP request that appends to (or restarts) `part_path` until the file is complete."""
    offset = os.path.getsize(part_path) if os.path.exists(part_path) else 0
    request = urllib.request.Request(url, headers={"User-Agent": "llmc-fineweb-download/1"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and offset:
            # The partial file is at least as long as the remote one: start again from scratch
            # (a complete .part is rare; validation after the fresh download decides).
            os.remove(part_path)
            raise TransientError(f"{url}: range {offset}- not satisfiable; restarting") from None
        if 500 <= err.code < 600:
            raise TransientError(f"{url}: HTTP {err.code} {err.reason}") from None
        raise ShardError(f"{url}: HTTP {err.code} {err.reason}") from None
    except (urllib.error.URLError, OSError) as err:
        if isinstance(getattr(err, "reason", None), FileNotFoundError):   # file:// mirror
            raise ShardError(f"{url}: no such file") from None
        raise TransientError(f"{url}: {getattr(err, 'reason', err)}") from None
    with response:
        status = response.status
        if status == 206:
            first, total = _content_range(response.headers.get("Content-Range"))
            if first != offset:
                raise ShardError(f"{url}: asked for bytes {offset}- but the server sent "
                                 f"Content-Range {response.headers.get('Content-Range')!r}")
            mode = "ab"
        elif status in (200, None):   # None: a file:// URL (a local mirror), which has no Range
            offset, mode = 0, "wb"      # the whole file: start over
            total = response.headers.get("Content-Length")
            total = int(total) if total is not None else None
        else:
            raise ShardError(f"{url}: unexpected HTTP status {status}")
        with open(part_path, mode) as out:
            written = offset
            header = b""
            while True:
                try:
                    chunk = response.read(CHUNK_BYTES)
                except (OSError, ValueError) as err:   # IncompleteRead, reset, timeout
                    raise TransientError(f"{url}: connection broke after {written} bytes: "
                                         f"{err}") from None
                if not chunk:
                    break
                if offset == 0 and written < HEADER_BYTES:
                    # Check the header as soon as it is in, so that an HTML error page or a file
                    # whose size disagrees with its header is rejected before megabytes arrive.
                    header += chunk[:HEADER_BYTES - written]
                    if len(header) >= HEADER_BYTES:
                        check_header(header, url, total)
                out.write(chunk)
                written += len(chunk)
        if total is not None and written < total:
            raise TransientError(f"{url}: connection closed after {written} of {total} bytes")


def download_shard(url: str, path: str, retries: int, retry_wait: float, timeout: float,
                   log) -> int:
    """Downloads `url` to `path` (resuming `path`.part); returns the token count.

    ShardError when the file cannot be had or is not a valid shard; nothing invalid is left behind.
    """
    if os.path.exists(path):
        try:
            tokens = validate_shard(path)
            log(f"{os.path.basename(path)}: already present ({tokens} tokens)")
            return tokens
        except ShardError as err:
            log(f"{err}; removing it and downloading again")
            os.remove(path)
    part_path = path + ".part"
    if os.path.exists(part_path):
        try:   # a .part whose size matches its header is complete (e.g. killed before the rename)
            tokens = validate_shard(part_path)
            os.replace(part_path, path)
            log(f"{os.path.basename(path)}: completed earlier download ({tokens} tokens)")
            return tokens
        except ShardError:
            pass
    started = time.monotonic()
    start_bytes = os.path.getsize(part_path) if os.path.exists(part_path) else 0
    if start_bytes:
        log(f"{os.path.basename(path)}: resuming at byte {start_bytes}")
    attempt = 0
    while True:
        try:
            _fetch_once(url, part_path, timeout)
            break
        except TransientError as err:
            attempt += 1
            if attempt > retries:
                raise ShardError(f"{err} (gave up after {retries} retries; run again to resume "
                                 f"from {part_path})") from None
            log(f"{err}; retry {attempt}/{retries}")
            time.sleep(retry_wait)
        except ShardError:
            if os.path.exists(part_path):
                os.remove(part_path)
            raise
    try:
        tokens = validate_shard(part_path)
    except ShardError as err:
        os.remove(part_path)
        raise ShardError(f"{url}: rejected, not kept: {err}") from None
    os.replace(part_path, path)
    seconds = max(time.monotonic() - started, 1e-9)
    size = os.path.getsize(path)
    log(f"{os.path.basename(path)}: {tokens} tokens, {(size - start_bytes) / 1e6:.1f} MB in "
        f"{seconds:.1f} s ({(size - start_bytes) / 1e6 / seconds:.1f} MB/s)")
    return tokens


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Download the GPT-2-tokenized FineWeb 10B shards (fineweb_val_000000.bin, "
                    "fineweb_train_000001..N.bin), resuming partial downloads and validating the "
                    "header of every file it keeps.")
    parser.add_argument("--base-url", default=DEFAULT_BASE_URL,
                        help=f"directory URL holding the shards, http(s):// or file:// for a local "
                             f"mirror (default {DEFAULT_BASE_URL})")
    parser.add_argument("--output-dir", default=os.path.join(os.path.dirname(os.path.abspath(
                        __file__)), "cache", "fineweb10B"),
                        help="where to put them (default data/cache/fineweb10B)")
    parser.add_argument("--train-shards", type=int, default=DEFAULT_TRAIN_SHARDS,
                        help=f"how many train shards of ~100M tokens (default {DEFAULT_TRAIN_SHARDS}, "
                             "all 10B tokens)")
    parser.add_argument("--no-val", action="store_true", help="skip the val shard")
    parser.add_argument("--name", default="fineweb", help="file name prefix (default fineweb)")
    parser.add_argument("--jobs", type=int, default=4, help="parallel downloads (default 4)")
    parser.add_argument("--retries", type=int, default=5,
                        help="retries per file after a broken connection, each resuming (default 5)")
    parser.add_argument("--retry-wait", type=float, default=5.0,
                        help="seconds between retries (default 5)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="socket timeout in seconds (default 60)")
    parser.add_argument("--quiet", action="store_true", help="print errors only")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.train_shards < 0 or args.jobs < 1 or args.retries < 0:
        print("fineweb_download: error: --train-shards and --retries must be >= 0, --jobs >= 1",
              file=sys.stderr)
        return 2
    try:
        os.makedirs(args.output_dir, exist_ok=True)
    except OSError as err:
        print(f"fineweb_download: error: {args.output_dir}: {err.strerror or err}", file=sys.stderr)
        return 2

    def log(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    names = shard_names(args.name, args.train_shards, include_val=not args.no_val)
    base = args.base_url.rstrip("/")
    failures = []
    total_tokens = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(download_shard, f"{base}/{name}", os.path.join(args.output_dir, name),
                               args.retries, args.retry_wait, args.timeout, log): name
                   for name in names}
        for future in concurrent.futures.as_completed(futures):
            try:
                total_tokens += future.result()
            except ShardError as err:
                failures.append(str(err))
                print(f"fineweb_download: error: {err}", file=sys.stderr, flush=True)
    if failures:
        print(f"fineweb_download: {len(failures)} of {len(names)} files failed (see above); "
              f"run again to retry", file=sys.stderr)
        return 1
    log(f"fineweb_download: {len(names)} shards, {total_tokens} tokens in {args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
