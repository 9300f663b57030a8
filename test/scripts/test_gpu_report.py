"""Tests of scripts/gpu/report.py, the one-page report of the GPU check, without a GPU.

The trainer's, the kernel benchmark's and the generation benchmark's output come from the real programs
(their emulated builds, paths in LLMC_TRAIN_GPT2_EMU, LLMC_BENCH_KERNELS_EMU and LLMC_BENCH_GENERATE_EMU),
so a change of their printed format breaks
this test rather than the report of the one GPU run. Outputs only a GPU machine makes (GoogleTest and
unittest summaries of failures, compute-sanitizer's summaries, ncu's CSV, the PyTorch peer's JSON) are
written here in their documented forms. Each stage log is laid out as scripts/gpu/check.sh writes it.
"""
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
REPORT = os.path.join(REPO, "scripts", "gpu", "report.py")
MPI_SINGLETON_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
STAGES = [("a", "tests", "tests.log"), ("b", "sanitizer", "sanitizer.log"), ("c", "kernels", "kernels.log"),
          ("d", "train", "train.log"), ("e", "speedrun", "train.log"), ("f", "torch", "train.log"),
          ("g", "ncu", "ncu.log"), ("h", "generate", "kernels.log")]


def write_shard(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as out:
        out.write(header.tobytes())
        out.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def command_block(label, output, result="ok", rc=0, seconds=1.0, peak=None):
    """A command as check.sh's run_cmd logs it (and its memory line, as stop_memory_sampler does)."""
    lines = [f"### {label} $ some command", output.rstrip("\n"), f"### {label} result={result} rc={rc} seconds={seconds}"]
    if peak is not None:
        lines.append(f"### {label} peak_gpu_memory_mib={peak} baseline_mib=0")
    return "\n".join(lines) + "\n"


class Check:
    """A work folder and an output folder as check.sh leaves them."""

    def __init__(self, root):
        self.work, self.out = os.path.join(root, "work"), os.path.join(root, "out")
        os.makedirs(self.work)
        os.makedirs(self.out)
        self.status = []
        with open(os.path.join(self.work, "device.txt"), "w") as handle:
            handle.write("mode: gpu\ndate: 2026-12-01T10:00Z\ngpu: NVIDIA H200, 143771 MiB\nbudget: 530\nelapsed: 100\n")

    def stage(self, letter, key, log, blocks, status="passed", seconds=10, limit=60):
        with open(os.path.join(self.out, log), "a") as handle:
            handle.write(f"#### stage {letter} ({key}): title (limit {limit}s)\n" + "".join(blocks))
        self.status.append(f"{letter}\t{key}\t{status}\t{seconds}\t{limit}\t{log}\t{key} title")

    def report(self):
        with open(os.path.join(self.work, "status.tsv"), "w") as handle:
            handle.write("".join(row + "\n" for row in self.status))
        subprocess.run([sys.executable, REPORT, "--work", self.work, "--out", self.out], check=True)
        with open(os.path.join(self.out, "report.md")) as handle:
            return handle.read()


def bench_rows_of(text):
    """bench_kernels' timed lines (name, ms, rate): the kernel stage's count must not take generation's lines."""
    return re.findall(r"^\S.*?\s+\d+\.\d+ ms\s+\d+\.\d+ (?:TFLOP/s|GB/s)$", text, re.M)


def table_row(report, first_cell):
    """The cells of the markdown table row whose first cell is first_cell."""
    for line in report.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells and cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row '{first_cell}' in:\n{report}")


class RealOutputs(unittest.TestCase):
    """The training and kernel tables, read from what the programs really print."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="test_gpu_report_")
        shard = os.path.join(cls.tmp.name, "toy_train_000001.bin")
        write_shard(shard, np.random.default_rng(0).integers(0, 96, size=4000))  # tiny: V=100, speedrun-tiny: V=96
        trainer = os.environ["LLMC_TRAIN_GPT2_EMU"]
        run = subprocess.run([trainer, "--model", "tiny", "-b", "4", "-t", "16", "--steps", "14", "--train-data", shard],
                             capture_output=True, text=True, timeout=120, env=dict(os.environ, **MPI_SINGLETON_ENV))
        assert run.returncode == 0, run.stdout + run.stderr
        cls.train_log = run.stdout
        speedrun = subprocess.run([trainer, "--model", "speedrun-tiny", "-b", "1", "-t", "64", "--steps", "14",
                                   "--train-loader", "window", "--train-data", shard],  # speedrun-tiny: V=96
                                  capture_output=True, text=True, timeout=120, env=dict(os.environ, **MPI_SINGLETON_ENV))
        assert speedrun.returncode == 0, speedrun.stdout + speedrun.stderr
        cls.speedrun_log = speedrun.stdout
        modded89 = subprocess.run([trainer, "--model", "modded89-tiny", "-b", "1", "-t", "48", "--steps", "14",
                                   "--train-loader", "window", "--train-data", shard],  # modded89-tiny: V=96
                                  capture_output=True, text=True, timeout=120, env=dict(os.environ, **MPI_SINGLETON_ENV))
        assert modded89.returncode == 0, modded89.stdout + modded89.stderr
        cls.modded89_log = modded89.stdout
        bench = subprocess.run([os.environ["LLMC_BENCH_KERNELS_EMU"], "--batch", "1", "--seq", "64", "--channels", "128",
                                "--heads", "2", "--vocab", "200", "--params", "5000", "--repeats", "1"],
                               capture_output=True, text=True, timeout=120)
        assert bench.returncode == 0, bench.stdout + bench.stderr
        cls.bench_log = bench.stdout
        generation = subprocess.run([os.environ["LLMC_BENCH_GENERATE_EMU"], "--model", "d1", "--prompt-tokens", "5",
                                     "--new-tokens", "3", "--contexts", "8", "--run"],
                                    capture_output=True, text=True, timeout=120)
        assert generation.returncode == 0, generation.stdout + generation.stderr
        cls.generate_log = generation.stdout
        generation = subprocess.run([os.environ["LLMC_BENCH_GENERATE_EMU"], "--model", "modded89-tiny",
                                     "--prompt-tokens", "5", "--new-tokens", "3", "--contexts", "8", "--run"],
                                    capture_output=True, text=True, timeout=120)
        assert generation.returncode == 0, generation.stdout + generation.stderr
        cls.generate_modded89_log = generation.stdout

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def make_report(self, ceilings_line=None, torch_ms=None):
        check = Check(tempfile.mkdtemp(dir=self.tmp.name))
        kernel_blocks = [command_block("bench_kernels", self.bench_log)]
        if ceilings_line:
            kernel_blocks.insert(0, command_block("ceilings", ceilings_line))
        check.stage("c", "kernels", "kernels.log", kernel_blocks)
        check.stage("d", "train", "train.log", [command_block("train_gpt2_b4_clip1.0", self.train_log, peak=1234)])
        if torch_ms is not None:
            # 989.4e6 FLOPs per token at 5e5 tokens/s: half the H200's 989.4 TFLOP/s spec peak.
            peer = ('{"ms_per_step": %r, "tokens_per_s": 5e5, "flops_per_token": 989.4e6, "loss": 4.5, '
                    '"device": "NVIDIA H200", "torch": "2.11.0"}' % torch_ms)
            check.stage("e", "torch", "train.log", [command_block("torch_b4_clip1.0", "compiling...\n" + peer)])
        return check.report()

    def test_train_gpt2_ms_per_step_is_read_from_the_timed_steps(self):
        times = {int(m.group(1)): int(m.group(2))
                 for m in re.finditer(r"^step:(\d+)/14 train_loss:\S+ train_time:(\d+)ms", self.train_log, re.M)}
        expected_ms = (times[14] - times[10]) / 4  # check.sh: 10 untimed steps, then the timed ones
        row = table_row(self.make_report(), "train_gpt2_b4_clip1.0")
        self.assertAlmostEqual(float(row[1]), expected_ms, delta=0.006)
        self.assertAlmostEqual(float(row[2]), 4 * 16 / (expected_ms / 1000), delta=max(1.0, 4 * 16 / expected_ms))
        self.assertEqual(row[3], "n/a")  # the emulated device has no bf16 peak: the log's MFU is n/a
        self.assertEqual(row[5], "1234")  # peak memory from check.sh's sampler line
        last_loss = re.findall(r"^step:14/14 train_loss:(\S+)", self.train_log, re.M)[0]
        self.assertEqual(row[6], last_loss)

    def test_speedrun_stage_is_read_from_the_timed_steps(self):
        # Both records' runs (check.sh's stage e: the 2026-07-17 recipe's, then the 2025-10-31 one's), each row
        # from its own log's timed steps.
        check = Check(tempfile.mkdtemp(dir=self.tmp.name))
        check.stage("e", "speedrun", "train.log", [command_block("modded89_record_step", self.modded89_log, peak=8765),
                                                    command_block("modded89_bf16_mlp_step", self.modded89_log, peak=8766),
                                                    command_block("speedrun_record_step", self.speedrun_log, peak=4321)])
        report = check.report()
        for label, log, T, peak, recipe, short in (
                ("modded89_record_step", self.modded89_log, 48, "8765", "modded-2026-07-17", "modded89"),
                ("modded89_bf16_mlp_step", self.modded89_log, 48, "8766", "modded-2026-07-17 --fp8-mlp off",
                 "modded89-bf16mlp"),
                ("speedrun_record_step", self.speedrun_log, 64, "4321", "modded-2025-10-31", "speedrun")):
            with self.subTest(label):
                times = {int(m.group(1)): int(m.group(2))
                         for m in re.finditer(r"^step:(\d+)/14 train_loss:\S+ train_time:(\d+)ms", log, re.M)}
                expected_ms = (times[14] - times[10]) / 4
                row = table_row(report, label)
                self.assertEqual(row[1:3], [recipe, str(T)])
                self.assertAlmostEqual(float(row[3]), expected_ms, delta=0.006)
                self.assertAlmostEqual(float(row[4]), T / (expected_ms / 1000), delta=max(1.0, T / expected_ms))
                self.assertEqual(row[5], peak)
                self.assertEqual(row[6], re.findall(r"^step:14/14 train_loss:(\S+)", log, re.M)[0])
                self.assertIn(f"{short} {expected_ms:.1f} ms/step", table_row(report, "e. speedrun title")[4])

    def test_speed_against_pytorch_is_their_ms_over_ours(self):
        report = self.make_report(torch_ms=1e9)
        ours = float(table_row(report, "train_gpt2_b4_clip1.0")[1])
        self.assertAlmostEqual(float(table_row(report, "train_gpt2_b4_clip1.0")[7].rstrip("x")), 1e9 / ours,
                               delta=1e9 / ours * 0.01)
        peer = table_row(report, "torch_b4_clip1.0")
        self.assertEqual(peer[1], "1000000000.00")
        self.assertEqual(peer[3], "50.0%")  # the report's gpu line names an H200

    def test_every_benchmarked_kernel_is_in_the_table(self):
        report = self.make_report()
        names = [line[:34].strip() for line in self.bench_log.splitlines()[1:]
                 if line.strip() and not line.startswith("#")]  # "# ..." lines are notes, not rows
        self.assertGreater(len(names), 10)
        for name in names:
            self.assertEqual(len(table_row(report, name)), 4)
        self.assertIn("documented", report)  # no ceilings were measured in this run

    def test_generation_figures_are_read_from_bench_generate(self):
        check = Check(tempfile.mkdtemp(dir=self.tmp.name))
        check.stage("c", "kernels", "kernels.log", [command_block("bench_kernels", self.bench_log)])
        program = "Ran 9 tests in 20.0s\n\nOK\n"
        check.stage("g", "generate", "kernels.log", [command_block("bench_generate", self.generate_log),
                                                      command_block("bench_generate_modded89",
                                                                    self.generate_modded89_log),
                                                      command_block("generate_program", program)])
        report = check.report()
        line = re.search(r"^generate .*ms_per_token=(\S+) decode_tokens_per_s=(\S+) ceiling_tokens_per_s=(\S+)",
                         self.generate_log, re.M)
        row = table_row(report, "L=1 NH=1 C=64 T=1024 V=50257 Vp=50304")
        self.assertEqual(row[1:3], ["5", "3"])
        self.assertAlmostEqual(float(row[4]), float(line.group(1)), delta=0.001)
        self.assertEqual(row[5], f"{float(line.group(2)):.0f}")
        self.assertEqual(row[6], f"{float(line.group(3)):.0f}")
        modded89 = re.search(r"^generate .*ms_per_token=(\S+) decode_tokens_per_s=(\S+) ceiling_tokens_per_s=(\S+)",
                             self.generate_modded89_log, re.M)
        row = table_row(report, "modded89-tiny")
        self.assertEqual(row[1:3], ["5", "3"])
        self.assertEqual(row[5], f"{float(modded89.group(2)):.0f}")
        self.assertEqual(row[6], f"{float(modded89.group(3)):.0f}")
        summary = table_row(report, "g. generate title")[4]
        self.assertIn(f"{float(line.group(2)):.0f} tokens/s at batch 1", summary)
        self.assertIn("9 tests passed, 0 failed, 0 skipped", summary)
        self.assertIn(f"{len(bench_rows_of(self.bench_log))} kernels timed", table_row(report, "c. kernels title")[4])

    def test_percent_of_ceiling_uses_the_measured_ceilings(self):
        check = Check(tempfile.mkdtemp(dir=self.tmp.name))
        bench = ("bench_kernels (bf16): B=16 T=1024\n"
                 "matmul_forward qkv (C->3C)              0.100 ms      400.0 TFLOP/s\n"
                 "gelu_forward (4C)                       0.050 ms     2000.0 GB/s\n")
        ceilings = '{"gemm_bf16_tflops": 800.0, "copy_gbps": 4000.0, "device": "NVIDIA H200"}'
        check.stage("c", "kernels", "kernels.log", [command_block("ceilings", ceilings), command_block("bench_kernels", bench)])
        report = check.report()
        self.assertEqual(table_row(report, "matmul_forward qkv (C->3C)")[3], "50%")
        self.assertEqual(table_row(report, "gelu_forward (4C)")[3], "50%")
        self.assertIn("measured in this run", report)


class Outcomes(unittest.TestCase):
    """Failures, timeouts, skipped stages and missing libraries reach the report."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="test_gpu_report_")
        self.check = Check(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def test_test_counts_and_failed_tests_are_listed(self):
        gtest = ("[==========] 5 tests from 2 test suites ran. (10 ms total)\n[  PASSED  ] 3 tests.\n"
                 "[  SKIPPED ] 1 test, listed below:\n[  SKIPPED ] Suite.Skipped\n"
                 "[  FAILED  ] 1 test, listed below:\n[  FAILED  ] MatmulKernel.LargerForwardMatchesReference\n")
        unittest_text = "Ran 12 tests in 3.0s\n\nFAILED (failures=1, errors=1, skipped=2)\nFAIL: test_x (TrainProgram)\n"
        no_gpu = ("[  SKIPPED ] every test of this binary: skipped: no GPU\n"
                  "[==========] 6 tests from 1 test suite ran. (5 ms total)\n[  PASSED  ] 6 tests.\n")
        self.check.stage("a", "tests", "tests.log", [
            command_block("kernels_bf16_cuda", gtest, result="failed", rc=1),
            command_block("train_program", unittest_text, result="failed", rc=1),
            command_block("gpt2_bf16_cuda", no_gpu, result="failed", rc=0),
            command_block("reference_check", "hanging...", result="out of time", rc=124)], status="out of time")
        report = self.check.report()
        row = table_row(report, "a. tests title")
        self.assertEqual(row[1], "out of time")
        # 3 + (12 - 2 - 2) passed; 1 + 2 failed; 1 + 2 + 6 skipped (a binary without a GPU skips them all)
        self.assertIn("11 tests passed, 3 failed, 9 skipped", row[4])
        self.assertIn("0/4 commands ok", row[4])
        self.assertIn("failed: kernels_bf16_cuda: MatmulKernel.LargerForwardMatchesReference", report)
        self.assertIn("failed: train_program: test_x", report)
        self.assertIn("reference_check: out of time (rc 124)", report)

    def test_sanitizer_summaries(self):
        self.check.stage("b", "sanitizer", "sanitizer.log", [
            command_block("memcheck_kernels", "[  PASSED  ] 30 tests.\n========= ERROR SUMMARY: 0 errors\n"),
            command_block("racecheck_kernels", "========= RACECHECK SUMMARY: 3 hazards displayed (1 error, 2 warnings)\n",
                          result="failed", rc=99)], status="failed")
        row = table_row(self.check.report(), "b. sanitizer title")
        self.assertIn("memcheck_kernels: 0 errors", row[4])
        self.assertIn("racecheck_kernels: 3 hazards (1 errors, 2 warnings)", row[4])

    def test_skipped_stage_and_notes(self):
        self.check.stage("e", "torch", "train.log", [], status="skipped", seconds=0)
        self.check.stage("f", "ncu", "ncu.log", ["### note: ncu not found\n"], status="failed", seconds=0)
        report = self.check.report()
        self.assertEqual(table_row(report, "e. torch title")[1], "skipped")
        self.assertIn("ncu not found", table_row(report, "f. ncu title")[4])
        self.assertIn("- f. ncu not found", report)

    def test_unresolved_libraries_are_shown(self):
        with open(os.path.join(self.check.work, "unresolved.txt"), "w") as handle:
            handle.write("  libmpi.so.40 (needed by bin/train_gpt2)\n")
        report = self.check.report()
        self.assertIn("unresolved libraries", report)
        self.assertIn("libmpi.so.40 (needed by bin/train_gpt2)", report)

    def test_ncu_csv_becomes_a_table(self):
        header = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Section Name",' \
                 '"Metric Name","Metric Unit","Metric Value"'
        rows = [header]
        for kernel, occupancy in (("llmc::flash::forward_kernel", "41.5"), ("causal_softmax_kernel", "88.0")):
            for metric, unit, value in (("sm__warps_active.avg.pct_of_peak_sustained_active", "%", occupancy),
                                        ("launch__registers_per_thread", "register/thread", "128")):
                rows.append(f'"0","1","bench_kernels","vm","{kernel}","1","7","Command line profiler metrics",'
                            f'"{metric}","{unit}","{value}"')
        self.check.stage("f", "ncu", "ncu.log", [command_block("ncu_attention", "bench output\n" + "\n".join(rows))])
        report = self.check.report()
        self.assertEqual(table_row(report, "llmc::flash::forward_kernel")[1:3], ["41.5 %", "128 register/thread"])
        self.assertEqual(table_row(report, "causal_softmax_kernel")[1], "88.0 %")

    def test_speedrun_kernels_and_the_step_by_launch_become_tables(self):
        # The two programs' measured lines as their printf formats write them on a GPU
        # (test/kernels/bench_speedrun_kernels.cu print_rows, test/train/bench_step.cu print_table).
        kernels = "\n".join([
            "bench_speedrun_kernels (bf16): T=32768 C=768 H=6 D=128 V=50304; ceilings 4.3 TB/s, ...",
            f"{'kernel':<38} {'calls':>7} {'MB/call':>10} {'GFLOP/call':>10} {'ceiling us':>12} {'us/step':>11} "
            f"{'measured us':>12}",
            f"{'residual_norm_forward (mix + norm)':<38} {12:7.0f} {201.5:10.1f} {0.151:10.3f} {46.9:12.1f} "
            f"{562.2:11.1f} {62.5:12.1f}",
            f"{'fp8 head: loss, dz as e5m2 codes g8':<38} {1:7.0f} {4945.3:10.1f} {41.209:10.3f} {1150.1:12.1f} "
            f"{1150.1:11.1f} {1533.4:12.1f}",
            f"{'total per training step':<38} {'':>7} {'':>10} {'':>10} {'':>12} {14536.6:11.1f} "
            f"{20000.0:12.1f} (per step)"])
        step = "\n".join([
            f"{'kernel':<6} {'residual_norm_backward_kernel<floatX>':<58} {10:7.0f} {335.0:9.2f} {0.249:10.3f} "
            f"{779.1:11.1f} {3.4:10.1f}% {901.0:11.1f}",
            f"{'memset':<6} {'cudaMemsetAsync':<58} {44:7.0f} {'n/a':>9} {'n/a':>10} {'n/a':>11} {'':>11} {12.0:11.1f}",
            f"{'total':<6} {'(sum of rows, no overlap)':<58} {'':>7} {'':>9} {'':>10} {22653.1:11.1f} {'':>11} "
            f"{30100.0:11.1f}",
            "measured step time 31.20 ms (2 steps, no observer)"])
        graphs = "\n".join(["cuda graphs: 4 captured; graph launches per observed step 1.0 (the counts above: outside "
                            "them)", "measured step time 29.64 ms (2 steps, no observer)"])
        self.check.stage("e", "fused", "kernels.log", [command_block("bench_speedrun_kernels", kernels),
                                                       command_block("bench_step_modded89", step),
                                                       command_block("bench_step_modded89_graphs", graphs)])
        report = self.check.report()
        self.assertEqual(table_row(report, "residual_norm_forward (mix + norm)")[1:], ["12", "46.9", "62.5", "75%"])
        self.assertEqual(table_row(report, "fp8 head: loss, dz as e5m2 codes g8")[4], "75%")
        self.assertIn("| kernel | residual_norm_backward_kernel<floatX> | 10 | 779.1 | 901.0 |", report)
        self.assertIn("| memset | cudaMemsetAsync | 44 | - | 12.0 |", report)
        self.assertIn("2 speedrun kernels timed; modded89 step rows 30.10 ms measured (22.65 ms at the ceilings); "
                      "modded89 step 31.20 ms eager, 29.64 ms as CUDA graphs (0.950x)", table_row(report, "e. fused title")[4])


if __name__ == "__main__":
    unittest.main()
