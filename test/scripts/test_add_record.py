"""Tests of scripts/add_record.py on generated logs in a temporary records directory (never records/).

The numbers come from the published 2025-10-31 modded-nanogpt record (see test_compare_runs.py); the
point here is the layout, the refusal of non-records, all-or-nothing writes, and the table.
"""
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SCRIPT = os.path.join(REPO, "scripts", "add_record.py")
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, HERE)
import add_record  # noqa: E402
from test_compare_runs import (BASELINE_LOSSES, BASELINE_TIMES, RECORD_LOSSES,  # noqa: E402
                               RECORD_TIMES, our_log, write_set)


def add(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = add_record.main(list(args))
    return code, out.getvalue(), err.getvalue()


def tree(directory):
    return sorted(os.path.relpath(os.path.join(root, name), directory)
                  for root, dirs, files in os.walk(directory) for name in files + dirs)


class AddRecord(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.records = os.path.join(self.tmp.name, "records")
        shutil.copytree(os.path.join(REPO, "records"), self.records)   # the real README template
        self.old_logs = write_set(os.path.join(self.tmp.name, "old"), BASELINE_LOSSES,
                                  BASELINE_TIMES, our_log)
        self.new_logs = write_set(os.path.join(self.tmp.name, "new"), RECORD_LOSSES, RECORD_TIMES,
                                  our_log)
        self.trace = os.path.join(self.tmp.name, "trace_rank0.json")
        with open(self.trace, "w") as handle:
            handle.write('{"traceEvents": []}\n')

    def tearDown(self):
        self.tmp.cleanup()

    def common(self, name, date):
        return ["--records-dir", self.records, "--track", "test_track", "--name", name, "--date",
                date, "--hardware", "generated logs (test), no hardware",
                "--command", "NAME=x scripts/run_speedrun.sh", "--description", f"{name} change"]

    def add_first(self):
        code, out, err = add(self.old_logs, *self.common("first", "2026-01-01"), "--no-baseline")
        self.assertEqual(code, 0, err)
        return os.path.join(self.records, "test_track", "2026-01-01_first")

    def test_first_record_layout(self):
        first = self.add_first()
        self.assertEqual(tree(first), ["README.md", "record.json"] +
                         [f"run{i:02d}.txt" for i in range(4)])
        with open(os.path.join(first, "record.json")) as handle:
            record = json.load(handle)
        self.assertEqual(record["n"], 4)
        self.assertEqual(f"{record['train_time_s']['mean']:.4f}", "141.5125")
        self.assertIsNone(record["time_comparison"])
        with open(os.path.join(first, "run00.txt")) as a, \
                open(os.path.join(self.old_logs, "run00.txt")) as b:
            self.assertEqual(a.read(), b.read())
        with open(os.path.join(first, "README.md")) as handle:
            readme = handle.read()
        for fragment in ("## What changed", "first change", "generated logs (test), no hardware",
                         "NAME=x scripts/run_speedrun.sh", "| new | 4 | 1000 |", "141.5125"):
            self.assertIn(fragment, readme)
        with open(os.path.join(self.records, "README.md")) as handle:
            table = handle.read()
        self.assertIn("| 2026-01-01 | [first](test_track/2026-01-01_first/README.md) "
                      "| 141.5125 ± 0.1033 |", table)
        self.assertIn("first record", table)
        self.assertNotIn("No records yet.", table)

    def test_second_record_against_previous(self):
        self.add_first()
        code, out, err = add(self.new_logs, *self.common("faster", "2026-02-01"), "--traces",
                             self.trace)
        self.assertEqual(code, 0, err)
        second = os.path.join(self.records, "test_track", "2026-02-01_faster")
        self.assertIn("traces/trace_rank0.json", tree(second))
        with open(os.path.join(second, "README.md")) as handle:
            readme = handle.read()
        self.assertIn("| new | 10 | 1000 | 3.2771 | 0.0015 | 0.0001 | 140.8131 | 0.0760 |", readme)
        self.assertIn("time new - baseline: -0.6994 s", readme)
        self.assertIn("2026-01-01_first", readme)
        with open(os.path.join(self.records, "README.md")) as handle:
            table = handle.read()
        first_row = table.index("[first]")
        second_row = table.index("[faster]")
        self.assertLess(first_row, second_row)
        self.assertIn("| -0.6994 s (p=0.0001) |", table)

    def test_not_a_record_writes_nothing(self):
        self.add_first()
        slower = write_set(os.path.join(self.tmp.name, "slower"), RECORD_LOSSES,
                           [t + 1.0 for t in RECORD_TIMES], our_log)
        before = tree(self.records)
        with open(os.path.join(self.records, "README.md")) as handle:
            readme_before = handle.read()
        code, out, err = add(slower, *self.common("slower", "2026-02-02"))
        self.assertEqual(code, 2)
        self.assertIn("not a record: not significant", err)
        self.assertEqual(tree(self.records), before)
        with open(os.path.join(self.records, "README.md")) as handle:
            self.assertEqual(handle.read(), readme_before)

    def test_refusals(self):
        code, out, err = add(self.new_logs, *self.common("x", "2026-02-01"))
        self.assertEqual(code, 2)
        self.assertIn("no record yet", err)
        first = self.add_first()
        code, out, err = add(self.old_logs, *self.common("first", "2026-01-01"), "--no-baseline")
        self.assertEqual(code, 2)
        self.assertIn("never overwritten", err)
        args = self.common("nohw", "2026-03-01")
        args[args.index("--hardware") + 1] = " "
        code, out, err = add(self.new_logs, *args)
        self.assertEqual(code, 2)
        self.assertIn("--hardware is required", err)
        code, out, err = add(self.new_logs, *self.common("bad/name", "2026-03-01"))
        self.assertEqual(code, 2)
        self.assertIn("--name", err)
        self.assertTrue(os.path.isdir(first))
        self.assertEqual(sorted(os.listdir(os.path.join(self.records, "test_track"))),
                         ["2026-01-01_first"])

    def test_cli_rebuild_table(self):
        self.add_first()
        readme = os.path.join(self.records, "README.md")
        with open(readme) as handle:
            original = handle.read()
        with open(readme, "w") as handle:
            handle.write(original.replace("141.5125", "999"))
        result = subprocess.run([sys.executable, SCRIPT, "--rebuild-table", "--records-dir",
                                 self.records], capture_output=True, text=True, timeout=60)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(readme) as handle:
            self.assertEqual(handle.read(), original)


if __name__ == "__main__":
    unittest.main()
