"""Tests of data/fineweb_download.py against a local HTTP server on 127.0.0.1 (started and stopped here).

The server supports Range requests (python's SimpleHTTPRequestHandler does not), can cut a response
short once, or ignore Range, and logs every request so the tests can see that a download resumed.
Shards come from ./tokenize_gpt2 when the build gives its path (LLMC_TOKENIZE_GPT2), else from numpy.
"""
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SCRIPT = os.path.join(REPO, "data", "fineweb_download.py")
SHARED = os.environ.get("LLMC_SHARED_DIR", os.path.join(REPO, "..", "shared"))
TOKENIZER = os.environ.get("LLMC_TOKENIZE_GPT2", "")


class ShardServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root):
        super().__init__(("127.0.0.1", 0), RangeHandler)
        self.root = root
        self.requests = []          # (path, Range header or None)
        self.cut_after = {}         # path -> bytes to send before dropping the connection, once
        self.ignore_range = False
        self.lock = threading.Lock()


class RangeHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        server = self.server
        name = self.path.lstrip("/")
        range_header = self.headers.get("Range")
        with server.lock:
            server.requests.append((name, range_header))
            cut = server.cut_after.pop(name, None)
        path = os.path.join(server.root, name)
        if "/" in name or not os.path.isfile(path):
            self.send_error(404, "not found")
            return
        with open(path, "rb") as handle:
            data = handle.read()
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", range_header or "")
        if match and not server.ignore_range:
            start = int(match.group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if cut is not None:
            self.wfile.write(body[:cut])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


def write_numpy_shard(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as handle:
        handle.write(header.tobytes())
        handle.write(np.asarray(tokens, dtype="<u2").tobytes())


def make_shards(directory):
    """fineweb_val_000000.bin and fineweb_train_000001..3.bin of a few thousand tokens each."""
    text_path = os.path.join(SHARED, "data", "text", "tinyshakespeare.txt")
    if TOKENIZER and os.path.exists(TOKENIZER):
        with open(text_path, encoding="utf-8") as handle:
            text = handle.read()[:60000]   # ~18k tokens: val + 3 full train shards + a rest
        sample = os.path.join(directory, "sample.txt")
        with open(sample, "w", encoding="utf-8") as handle:
            handle.write(text)
        subprocess.run([TOKENIZER, "--vocab", os.path.join(SHARED, "data", "gpt2"),
                        "--output-dir", directory, "--name", "fineweb", "--val-tokens", "3000",
                        "--shard-tokens", "4000", sample], check=True, capture_output=True)
        os.remove(sample)
        source = "tokenize_gpt2"
    else:
        rng = np.random.default_rng(1234)
        write_numpy_shard(os.path.join(directory, "fineweb_val_000000.bin"),
                          rng.integers(0, 50257, 3000))
        for index in range(1, 4):
            write_numpy_shard(os.path.join(directory, f"fineweb_train_{index:06d}.bin"),
                              rng.integers(0, 50257, 4000))
        source = "numpy (tokenize_gpt2 not given)"
    for name in os.listdir(directory):   # serve exactly val + train 1..3
        if name.startswith("fineweb_train_") and int(name[-10:-4]) > 3:
            os.remove(os.path.join(directory, name))
    names = sorted(n for n in os.listdir(directory) if n.endswith(".bin"))
    assert names == ["fineweb_train_000001.bin", "fineweb_train_000002.bin",
                     "fineweb_train_000003.bin", "fineweb_val_000000.bin"], names
    return source


def read_numpy_shard(path):
    header = np.fromfile(path, dtype="<i4", count=256)
    tokens = np.fromfile(path, dtype="<u2", offset=1024)
    return header, tokens


class DownloadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.served = os.path.join(cls.tmp.name, "served")
        os.mkdir(cls.served)
        cls.source = make_shards(cls.served)
        print(f"\n[shards made with {cls.source}]", file=sys.stderr)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def setUp(self):
        self.server = ShardServer(self.served)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.out = tempfile.mkdtemp(dir=self.tmp.name)

    def tearDown(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def download(self, *extra, train_shards=3):
        return subprocess.run(
            [sys.executable, SCRIPT, "--base-url", self.url, "--output-dir", self.out,
             "--train-shards", str(train_shards), "--retry-wait", "0", "--timeout", "10", *extra],
            capture_output=True, text=True, timeout=120)

    def assert_same_file(self, name):
        with open(os.path.join(self.served, name), "rb") as a, \
                open(os.path.join(self.out, name), "rb") as b:
            self.assertEqual(a.read(), b.read(), name)

    def assert_all_downloaded(self):
        for name in ["fineweb_val_000000.bin"] + [f"fineweb_train_{i:06d}.bin" for i in (1, 2, 3)]:
            self.assert_same_file(name)
            header, tokens = read_numpy_shard(os.path.join(self.out, name))
            self.assertEqual(list(header[:3]), [20240520, 1, len(tokens)])
        self.assertEqual([n for n in os.listdir(self.out) if n.endswith(".part")], [])

    def test_full_download_then_nothing_to_do(self):
        result = self.download()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_all_downloaded()
        requests_before = len(self.server.requests)
        again = self.download()
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(len(self.server.requests), requests_before)   # all valid: none fetched
        self.assertIn("already present", again.stderr)

    def test_local_mirror_file_url(self):
        self.url = "file://" + self.served
        result = self.download()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_all_downloaded()

    def test_resume_from_partial_file(self):
        name = "fineweb_train_000002.bin"
        with open(os.path.join(self.served, name), "rb") as handle:
            head = handle.read(3000)
        with open(os.path.join(self.out, name + ".part"), "wb") as handle:
            handle.write(head)
        result = self.download()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn((name, "bytes=3000-"), self.server.requests)
        self.assert_all_downloaded()

    def test_broken_connection_is_resumed(self):
        name = "fineweb_train_000001.bin"
        self.server.cut_after[name] = 2500
        result = self.download("--jobs", "1")
        self.assertEqual(result.returncode, 0, result.stderr)
        ranges = [rng for path, rng in self.server.requests if path == name]
        self.assertEqual(ranges, [None, "bytes=2500-"])
        self.assert_all_downloaded()

    def test_server_ignoring_range_restarts_cleanly(self):
        name = "fineweb_val_000000.bin"
        with open(os.path.join(self.served, name), "rb") as handle:
            head = handle.read(2000)
        with open(os.path.join(self.out, name + ".part"), "wb") as handle:
            handle.write(head)
        self.server.ignore_range = True
        result = self.download()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assert_all_downloaded()

    def test_truncated_file_is_rejected_and_not_kept(self):
        truncated = os.path.join(self.tmp.name, "truncated")
        shutil.copytree(self.served, truncated)
        name = "fineweb_train_000003.bin"
        path = os.path.join(truncated, name)
        size = os.path.getsize(path)
        with open(path, "r+b") as handle:
            handle.truncate(size - 100)
        self.server.root = truncated
        result = self.download()
        self.assertEqual(result.returncode, 1)
        self.assertIn(name, result.stderr)
        self.assertIn("truncated", result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, name)))
        self.assertFalse(os.path.exists(os.path.join(self.out, name + ".part")))
        for good in ("fineweb_val_000000.bin", "fineweb_train_000001.bin"):
            self.assert_same_file(good)

    def test_truncated_partial_download_is_rejected(self):
        # Resumed downloads skip the early header check: the final validation must catch it.
        truncated = os.path.join(self.tmp.name, "truncated_resume")
        shutil.copytree(self.served, truncated)
        name = "fineweb_train_000001.bin"
        path = os.path.join(truncated, name)
        with open(path, "r+b") as handle:
            handle.truncate(os.path.getsize(path) - 2)
        with open(path, "rb") as handle:
            head = handle.read(1500)
        with open(os.path.join(self.out, name + ".part"), "wb") as handle:
            handle.write(head)
        self.server.root = truncated
        result = self.download()
        self.assertEqual(result.returncode, 1)
        self.assertIn(name, result.stderr)
        self.assertIn("not kept", result.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, name)))
        self.assertFalse(os.path.exists(os.path.join(self.out, name + ".part")))

    def test_complete_part_file_is_kept_without_download(self):
        name = "fineweb_train_000003.bin"
        shutil.copy(os.path.join(self.served, name), os.path.join(self.out, name + ".part"))
        result = self.download()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn(name, [path for path, _ in self.server.requests])
        self.assert_all_downloaded()

    def test_corrupt_existing_file_is_replaced(self):
        name = "fineweb_val_000000.bin"
        with open(os.path.join(self.out, name), "wb") as handle:
            handle.write(b"<html>not a shard</html>" * 100)   # longer than a header
        result = self.download()
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("magic", result.stderr)
        self.assert_all_downloaded()

    def test_missing_remote_file(self):
        result = self.download(train_shards=4)
        self.assertEqual(result.returncode, 1)
        self.assertIn("fineweb_train_000004.bin", result.stderr)
        self.assertIn("404", result.stderr)
        self.assertNotIn("Traceback", result.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.out, "fineweb_train_000004.bin")))


if __name__ == "__main__":
    unittest.main()
