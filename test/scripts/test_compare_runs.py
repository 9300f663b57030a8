"""Tests of scripts/compare_runs.py on generated log files.

The oracle is the published 2025-10-31 modded-nanogpt record (p=0.0001, mean/std of losses and times,
as printed there with 4 decimals) and the textbook t-test formulas evaluated here through the Student
t distribution functions (scipy.special.stdtr/stdtrit), a code path independent of scipy.stats.ttest_*.
"""
import contextlib
import io
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "compare_runs.py")
sys.path.insert(0, os.path.dirname(SCRIPT))
import compare_runs  # noqa: E402  (the module under test lives in scripts/)

# Published with the 2025-10-31 record (reduce-scatter of DistAdam moved into backward hooks).
RECORD_LOSSES = [3.2775, 3.2776, 3.2777, 3.2780, 3.2781, 3.2775, 3.2786, 3.2774, 3.2751, 3.2739]
RECORD_TIMES = [140.909, 140.872, 140.743, 140.743, 140.747, 140.809, 140.728, 140.784, 140.862,
                140.934]
BASELINE_TIMES = [141.654, 141.413, 141.467, 141.516]
# Not published: the baseline's losses only need some spread for the (informational) loss test.
BASELINE_LOSSES = [3.2779, 3.2771, 3.2783, 3.2768]

# What the top of a modded-nanogpt log looks like: the training script's own source, whose print
# statements must not be mistaken for result lines.
MODDED_PREAMBLE = (
    "import os\n"
    "print0(f'step:{step}/{train_steps} val_loss:{val_loss:.4f} train_time:{training_time_ms:.0f}ms "
    "step_avg:{training_time_ms/max(step, 1):.2f}ms')\n"
    "====================================================================================\n")


def modded_log(loss, time_s, steps=1750):
    """A log in modded-nanogpt's format: val lines every 125 steps, train lines without loss."""
    lines = [MODDED_PREAMBLE]
    for step in range(0, steps + 1, 125):
        val = loss if step == steps else 4.0 + (steps - step) / steps * 6.0
        ms = time_s * 1000.0 * step / steps
        lines.append(f"step:{step}/{steps} val_loss:{val:.4f} train_time:{ms:.0f}ms "
                     f"step_avg:{ms / max(step, 1):.2f}ms\n")
        if step < steps:
            lines.append(f"step:{step + 1}/{steps} train_time:{ms + 80:.0f}ms step_avg:80.00ms\n")
    return "".join(lines)


def our_log(loss, time_s, steps=1000, final_step=None):
    """A log in our trainer's format (llmc/train/log.h): extra fields after the modded ones."""
    final_step = steps if final_step is None else final_step
    lines = ["# config: model=d12 batch=64 seq=1024\n"]
    for step in range(1, final_step + 1):
        ms = time_s * 1000.0 * step / steps
        lines.append(f"step:{step}/{steps} train_loss:{5.0 - step / steps:.4f} train_time:{ms:.0f}ms "
                     f"step_avg:{ms / step:.2f}ms tok/s:4123456 mfu:41.2% lr:6.0000e-04 "
                     f"norm:1.2345\n")
        if step % 250 == 0 or step == final_step:
            val = loss if step == steps else 3.6 - 0.1 * step / steps
            lines.append(f"step:{step}/{steps} val_loss:{val:.4f} train_time:{ms:.0f}ms "
                         f"step_avg:{ms / step:.2f}ms\n")
    return "".join(lines)


def write_set(directory, losses, times, make_log=modded_log):
    os.makedirs(directory, exist_ok=True)
    for index, (loss, time_s) in enumerate(zip(losses, times)):
        with open(os.path.join(directory, f"run{index:02d}.txt"), "w") as handle:
            handle.write(make_log(loss, time_s))
    return directory


def run_script(*args):
    """compare_runs.main in this process (importing scipy once keeps the suite fast)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = compare_runs.main(list(args))
        except SystemExit as exit_request:   # argparse's own usage errors
            code = exit_request.code
    return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())


def run_cli(*args):
    """The script as a user runs it, to see exit codes and stderr of a real process."""
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                          timeout=120)


def sample_mean_std(values):
    mean = math.fsum(values) / len(values)
    return mean, math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


class PublishedRecord(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.new_dir = write_set(os.path.join(cls.tmp.name, "new"), RECORD_LOSSES, RECORD_TIMES)
        cls.old_dir = write_set(os.path.join(cls.tmp.name, "old"), BASELINE_LOSSES, BASELINE_TIMES)
        cls.json_result = run_script(cls.new_dir, "--baseline", cls.old_dir, "--json")
        cls.text_result = run_cli(cls.new_dir, "--baseline", cls.old_dir)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def report(self):
        self.assertEqual(self.json_result.returncode, 0, self.json_result.stderr)
        return json.loads(self.json_result.stdout)

    def test_published_loss_statistics(self):
        new = self.report()["sets"][0]
        self.assertEqual(new["n"], 10)
        self.assertEqual(f"{new['val_loss']['mean']:.4f}", "3.2771")
        self.assertEqual(f"{new['val_loss']['std']:.4f}", "0.0015")
        self.assertEqual(f"{new['loss_test']['p']:.4f}", "0.0001")

    def test_published_time_statistics(self):
        new, old = self.report()["sets"]
        self.assertEqual(f"{new['train_time_s']['mean']:.4f}", "140.8131")
        self.assertEqual(f"{new['train_time_s']['std']:.4f}", "0.0760")
        self.assertEqual(old["n"], 4)
        self.assertEqual(f"{old['train_time_s']['mean']:.4f}", "141.5125")
        self.assertEqual(f"{old['train_time_s']['std']:.4f}", "0.1033")

    def test_p_value_matches_textbook_formula(self):
        from scipy.special import stdtr
        new = self.report()["sets"][0]
        mean, std = sample_mean_std(RECORD_LOSSES)
        n = len(RECORD_LOSSES)
        t = (mean - 3.28) / (std / math.sqrt(n))
        self.assertAlmostEqual(new["loss_test"]["t"], t, delta=1e-9 * abs(t))
        self.assertAlmostEqual(new["loss_test"]["p"], stdtr(n - 1, t), delta=1e-9)

    def test_welch_matches_textbook_formula(self):
        from scipy.special import stdtr, stdtrit
        comparison = self.report()["time_comparison"]
        mean_new, std_new = sample_mean_std(RECORD_TIMES)
        mean_old, std_old = sample_mean_std(BASELINE_TIMES)
        var_new = std_new ** 2 / len(RECORD_TIMES)
        var_old = std_old ** 2 / len(BASELINE_TIMES)
        diff = mean_new - mean_old
        t = diff / math.sqrt(var_new + var_old)
        df = (var_new + var_old) ** 2 / (var_new ** 2 / (len(RECORD_TIMES) - 1)
                                         + var_old ** 2 / (len(BASELINE_TIMES) - 1))
        half_width = stdtrit(df, 0.975) * math.sqrt(var_new + var_old)
        self.assertAlmostEqual(comparison["mean_difference_s"], diff, delta=1e-9)
        self.assertAlmostEqual(comparison["t"], t, delta=1e-9 * abs(t))
        self.assertAlmostEqual(comparison["df"], df, delta=1e-9 * df)
        self.assertAlmostEqual(comparison["p"], stdtr(df, t), delta=1e-12)
        low, high = comparison["ci_two_sided_s"]
        self.assertAlmostEqual(low, diff - half_width, delta=1e-9)
        self.assertAlmostEqual(high, diff + half_width, delta=1e-9)
        upper = diff + stdtrit(df, 0.95) * math.sqrt(var_new + var_old)
        self.assertAlmostEqual(comparison["ci_one_sided_upper_s"], upper, delta=1e-9)

    def test_verdict_is_record(self):
        self.assertEqual(self.report()["verdict"], "record")

    def test_text_table(self):
        self.assertEqual(self.text_result.returncode, 0, self.text_result.stderr)
        out = self.text_result.stdout
        self.assertIn("| new | 10 | 1750 | 3.2771 | 0.0015 | 0.0001 | 140.8131 | 0.0760 |", out)
        self.assertIn("| baseline | 4 | 1750 |", out)
        self.assertIn("| 141.5125 | 0.1033 |", out)
        self.assertIn("verdict: record", out)

    def test_file_list_equals_directory(self):
        files = sorted(os.path.join(self.new_dir, f) for f in os.listdir(self.new_dir))
        result = run_script(*files, "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        new = json.loads(result.stdout)["sets"][0]
        self.assertEqual(new["val_loss"]["values"], RECORD_LOSSES)
        self.assertEqual(json.loads(result.stdout)["verdict"], "loss target met")

    def test_plot_writes_png(self):
        path = os.path.join(self.tmp.name, "plot.png")
        result = run_script(self.new_dir, "--baseline", self.old_dir, "--plot", path)
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(path, "rb") as handle:
            self.assertEqual(handle.read(8), b"\x89PNG\r\n\x1a\n")


class Verdicts(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def verdict_of(self, new_losses, new_times, old_times):
        new = write_set(os.path.join(self.tmp.name, "new"), new_losses, new_times, our_log)
        old = write_set(os.path.join(self.tmp.name, "old"), BASELINE_LOSSES[:len(old_times)],
                        old_times, our_log)
        result = run_script(new, "--baseline", old, "--json")
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout)

    def test_our_format_uses_last_val_line(self):
        report = self.verdict_of(RECORD_LOSSES, RECORD_TIMES, BASELINE_TIMES)
        self.assertEqual(report["sets"][0]["val_loss"]["values"], RECORD_LOSSES)
        self.assertEqual(report["sets"][0]["steps"], 1000)
        self.assertEqual(report["verdict"], "record")

    def test_not_significant(self):
        # Same spread as the baseline, mean only 0.05 s lower: far from significant at n=4.
        report = self.verdict_of(RECORD_LOSSES[:4], [t - 0.05 for t in BASELINE_TIMES],
                                 BASELINE_TIMES)
        self.assertEqual(report["verdict"], "not significant")
        self.assertGreater(report["time_comparison"]["p"], 0.01)

    def test_loss_target_missed(self):
        report = self.verdict_of([3.2801, 3.2790, 3.2812, 3.2795], RECORD_TIMES[:4], BASELINE_TIMES)
        self.assertEqual(report["verdict"], "loss target missed")

    def test_tiny_p_values_print_in_scientific_notation(self):
        # Losses far below the target with little spread: the one-sided t-test gives p ~ 1e-9, which four
        # decimals would print as "0.0000". The number printed must be the p-value, to two digits.
        losses = [3.2001, 3.2003, 3.1998, 3.2002]
        new = write_set(os.path.join(self.tmp.name, "tiny_p"), losses, RECORD_TIMES[:4], our_log)
        report = json.loads(run_script(new, "--json").stdout)
        p_value = report["sets"][0]["loss_test"]["p"]
        self.assertLess(p_value, 1e-6)
        result = run_script(new)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("0.0000 |", result.stdout)
        self.assertNotIn("p=0.0000", result.stdout)
        shown = f"{p_value:.1e}"
        self.assertIn(f"| {shown} |", result.stdout)
        self.assertIn(f"(p={shown})", result.stdout)
        self.assertEqual(compare_runs.format_p(0.01234), "0.0123")
        self.assertEqual(compare_runs.format_p(0.00008), "0.0001")
        self.assertEqual(compare_runs.format_p(0.00004), "4.0e-05")
        self.assertEqual(compare_runs.format_p(3.21e-7), "3.2e-07")

    def test_target_option(self):
        report = self.verdict_of([3.2801, 3.2790, 3.2812, 3.2795], RECORD_TIMES[:4], BASELINE_TIMES)
        result = run_script(*report["sets"][0]["files"], "--target", "3.29", "--json")
        self.assertEqual(json.loads(result.stdout)["verdict"], "loss target met")


class BadInput(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, text):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as handle:
            handle.write(text)
        return path

    def assert_clear_error(self, result, *fragments):
        self.assertEqual(result.returncode, 2, result.stdout)
        self.assertNotIn("Traceback", result.stderr)
        self.assertIn("compare_runs: error:", result.stderr)
        for fragment in fragments:
            self.assertIn(fragment, result.stderr)

    def test_empty_directory(self):
        empty = os.path.join(self.tmp.name, "empty")
        os.mkdir(empty)
        self.assert_clear_error(run_script(empty), empty, "no *.txt or *.log")

    def test_missing_path(self):
        missing = os.path.join(self.tmp.name, "nope")
        self.assert_clear_error(run_script(missing), missing, "no such file")

    def test_no_set_given(self):
        result = run_cli()
        self.assertNotEqual(result.returncode, 0)
        self.assertNotIn("Traceback", result.stderr)
        self.assertIn("required", result.stderr)

    def test_log_without_val_loss(self):
        good = self.write("good.txt", our_log(3.27, 100.0))
        text = "".join(line + "\n" for line in our_log(3.27, 100.0).splitlines()
                       if "val_loss" not in line)
        bad = self.write("bad.txt", text)
        self.assert_clear_error(run_cli(good, bad), bad, "val_loss")

    def test_different_step_counts(self):
        first = self.write("a.txt", modded_log(3.277, 140.0, steps=1750))
        second = self.write("b.txt", modded_log(3.276, 141.0, steps=1625))
        self.assert_clear_error(run_script(first, second), "different step counts", "1625", "1750")

    def test_fewer_than_two_runs(self):
        only = self.write("only.txt", modded_log(3.277, 140.0))
        self.assert_clear_error(run_script(only), "at least two runs")
        second = self.write("two.txt", modded_log(3.276, 140.0))
        self.assert_clear_error(run_script(only, second, "--baseline", only),
                                "baseline set", "at least two runs")

    def test_same_log_twice(self):
        first = self.write("a.txt", our_log(3.27, 100.0))
        second = self.write("b.txt", our_log(3.26, 101.0))
        self.assert_clear_error(run_script(first, second, first), "same log twice")

    def test_unfinished_run(self):
        done = self.write("done.txt", our_log(3.27, 100.0))
        crashed = self.write("crashed.txt", our_log(3.27, 100.0, final_step=500))
        self.assert_clear_error(run_script(done, crashed), crashed, "step 500 of 1000")

    def test_diverged_run(self):
        done = self.write("done.txt", our_log(3.27, 100.0))
        nan_run = self.write("nan.txt", "step:1000/1000 val_loss:nan train_time:1000ms step_avg:1ms\n")
        self.assert_clear_error(run_script(done, nan_run), nan_run, "diverged")

    def test_identical_losses(self):
        first = self.write("a.txt", our_log(3.27, 100.0))
        second = self.write("b.txt", our_log(3.27, 101.0))
        self.assert_clear_error(run_script(first, second), "same final val_loss")


if __name__ == "__main__":
    unittest.main()
