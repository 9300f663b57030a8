#!/usr/bin/env python3
"""Speedrun statistics: is a set of runs below the loss target, and is it faster than a baseline?

Reads the final validation loss and training time of each run (the last `step:N/T val_loss:L
train_time:Xms` line of each log: ours or modded-nanogpt's), prints n / mean / sample std per set,
a one-sided one-sample t-test of the losses against the target and, with a baseline set, a one-sided
Welch t-test that the new training times are lower. See `--help` and docs/speedrun.md.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

DEFAULT_TARGET = 3.28
DEFAULT_ALPHA = 0.01
DEFAULT_CONFIDENCE = 0.95
LOG_SUFFIXES = (".txt", ".log")

# A number as the trainers print it, including the non-finite spellings a diverged run produces.
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)"
# Anchored on the field names so that the f-string source that modded-nanogpt copies into the top of
# its logs (`step:{step}/{train_steps} val_loss:{val_loss:.4f} ...`) never matches: it has no digits.
_VAL_LINE = re.compile(
    r"(?:^|\s)step:(\d+)/(\d+)\s+val_loss:(" + _NUMBER + r")\s+train_time:(" + _NUMBER + r")ms",
    re.IGNORECASE)
_TRAIN_LINE = re.compile(
    r"(?:^|\s)step:(\d+)/(\d+)\s+train_loss:(" + _NUMBER + r")", re.IGNORECASE)


class RunsError(Exception):
    """Bad input: reported as one clear line, never as a traceback."""


@dataclass
class RunLog:
    path: str
    step: int               # step of the last val_loss line
    total_steps: int        # T of that line
    val_loss: float         # final validation loss
    train_time_s: float     # training time at that line, seconds
    val_curve: List[Tuple[int, float]] = field(default_factory=list)
    train_curve: List[Tuple[int, float]] = field(default_factory=list)


def parse_log(path: str) -> RunLog:
    """The final val loss and time of one run; RunsError names the file and the problem."""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError as err:
        raise RunsError(f"{path}: cannot read: {err.strerror or err}") from None
    val_curve: List[Tuple[int, float]] = []
    train_curve: List[Tuple[int, float]] = []
    last_val = None
    for line in text.splitlines():
        match = _VAL_LINE.search(line)
        if match:
            last_val = match
            val_curve.append((int(match.group(1)), float(match.group(3))))
            continue
        match = _TRAIN_LINE.search(line)
        if match:
            train_curve.append((int(match.group(1)), float(match.group(3))))
    if last_val is None:
        raise RunsError(f"{path}: no 'step:N/T val_loss:L train_time:Xms' line (did the run finish "
                        "its final validation?)")
    step, total = int(last_val.group(1)), int(last_val.group(2))
    loss, time_ms = float(last_val.group(3)), float(last_val.group(4))
    if step != total:
        raise RunsError(f"{path}: the last val_loss line is at step {step} of {total}: "
                        "the run did not finish")
    if not math.isfinite(loss):
        raise RunsError(f"{path}: final val_loss is {loss} (diverged run)")
    if not math.isfinite(time_ms) or time_ms < 0:
        raise RunsError(f"{path}: final train_time is {time_ms}ms, not a valid time")
    return RunLog(path, step, total, loss, time_ms / 1000.0, val_curve, train_curve)


def expand_inputs(inputs: Sequence[str]) -> List[str]:
    """Directories give their *.txt and *.log files (not recursively, sorted); files stay as given."""
    paths: List[str] = []
    for item in inputs:
        if os.path.isdir(item):
            found = sorted(os.path.join(item, name) for name in os.listdir(item)
                           if name.endswith(LOG_SUFFIXES) and os.path.isfile(os.path.join(item, name)))
            if not found:
                raise RunsError(f"{item}: directory holds no *.txt or *.log files")
            paths.extend(found)
        elif os.path.exists(item):
            paths.append(item)
        else:
            raise RunsError(f"{item}: no such file or directory")
    return paths


def load_set(inputs: Sequence[str], label: str) -> List[RunLog]:
    """All runs of one set, checked to be comparable: at least two, all of the same step count."""
    if not inputs:
        raise RunsError(f"{label} set is empty: give a directory or log files")
    paths = expand_inputs(inputs)
    seen = {}
    for path in paths:
        real = os.path.realpath(path)
        if real in seen:
            raise RunsError(f"{label} set lists the same log twice ({seen[real]} and {path}): "
                            "each run must count once")
        seen[real] = path
    runs = [parse_log(path) for path in paths]
    if len(runs) < 2:
        raise RunsError(f"{label} set has {len(runs)} run ({runs[0].path}): a standard deviation and "
                        "a t-test need at least two runs")
    step_counts = sorted({run.total_steps for run in runs})
    if len(step_counts) > 1:
        detail = ", ".join(f"{os.path.basename(run.path)}={run.total_steps}" for run in runs)
        raise RunsError(f"{label} set mixes runs of different step counts {step_counts}: {detail}")
    return runs


def _mean_std(values: Sequence[float]) -> Tuple[float, float]:
    n = len(values)
    mean = math.fsum(values) / n
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)   # sample variance (ddof=1)
    return mean, math.sqrt(variance)


def summarize_set(runs: Sequence[RunLog], label: str, target: float) -> Dict:
    """n, mean, sample std of loss and time, and the one-sided test mean(loss) < target."""
    from scipy import stats
    losses = [run.val_loss for run in runs]
    times = [run.train_time_s for run in runs]
    loss_mean, loss_std = _mean_std(losses)
    time_mean, time_std = _mean_std(times)
    loss_test = {"target": target, "alternative": "less", "t": None, "df": len(runs) - 1, "p": None}
    if loss_std > 0.0:
        test = stats.ttest_1samp(losses, target, alternative="less")
        loss_test.update(t=float(test.statistic), df=float(test.df), p=float(test.pvalue))
    else:  # identical losses (e.g. a deterministic trainer and one seed): the t-test is undefined
        loss_test["note"] = (f"all {len(runs)} runs have the same final val_loss {losses[0]}: "
                             "the t-test needs variation between runs (use different seeds)")
    return {
        "label": label,
        "n": len(runs),
        "steps": runs[0].total_steps,
        "files": [run.path for run in runs],
        "val_loss": {"values": losses, "mean": loss_mean, "std": loss_std},
        "train_time_s": {"values": times, "mean": time_mean, "std": time_std},
        "loss_test": loss_test,
    }


def compare_times(new: Dict, baseline: Dict, confidence: float) -> Dict:
    """Welch t-test that the new times are lower, and the CI of mean(new) - mean(baseline)."""
    from scipy import stats
    new_times = new["train_time_s"]["values"]
    old_times = baseline["train_time_s"]["values"]
    if new["train_time_s"]["std"] == 0.0 and baseline["train_time_s"]["std"] == 0.0:
        raise RunsError("both sets have zero spread in train_time: the Welch t-test is undefined")
    one_sided = stats.ttest_ind(new_times, old_times, equal_var=False, alternative="less")
    two_sided = stats.ttest_ind(new_times, old_times, equal_var=False, alternative="two-sided")
    interval = two_sided.confidence_interval(confidence)
    upper = one_sided.confidence_interval(confidence).high
    return {
        "test": "welch", "alternative": "less",
        "mean_difference_s": new["train_time_s"]["mean"] - baseline["train_time_s"]["mean"],
        "t": float(one_sided.statistic), "df": float(one_sided.df), "p": float(one_sided.pvalue),
        "confidence": confidence,
        "ci_two_sided_s": [float(interval.low), float(interval.high)],
        "ci_one_sided_upper_s": float(upper),
    }


def format_p(p: float) -> str:
    """A p-value for people: four decimals while they show a digit, below that (p < 0.00005, which would
    print as "0.0000") scientific notation with two digits."""
    return f"{p:.4f}" if p >= 5e-5 else f"{p:.1e}"


def verdict(new: Dict, comparison: Optional[Dict], alpha: float) -> Tuple[str, str]:
    """(keyword, sentence): 'loss target missed', 'loss target met', 'record' or 'not significant'."""
    loss_p = new["loss_test"]["p"]
    if loss_p is None:
        raise RunsError(f"new set: {new['loss_test']['note']}")
    target = new["loss_test"]["target"]
    if not loss_p < alpha:
        return ("loss target missed",
                f"mean val_loss {new['val_loss']['mean']:.4f} is not below {target} with p < {alpha} "
                f"(p={format_p(loss_p)})")
    if comparison is None:
        return ("loss target met",
                f"mean val_loss below {target} (p={format_p(loss_p)}); give --baseline to test the time")
    if comparison["p"] < alpha:
        return ("record",
                f"loss below {target} (p={format_p(loss_p)}) and faster by "
                f"{-comparison['mean_difference_s']:.4f} s (p={format_p(comparison['p'])})")
    return ("not significant",
            f"loss below {target} (p={format_p(loss_p)}) but the time difference "
            f"{comparison['mean_difference_s']:+.4f} s is not significant at {alpha} "
            f"(p={format_p(comparison['p'])})")


def analyze(new_inputs: Sequence[str], baseline_inputs: Optional[Sequence[str]],
            target: float = DEFAULT_TARGET, alpha: float = DEFAULT_ALPHA,
            confidence: float = DEFAULT_CONFIDENCE) -> Dict:
    """The whole report as a dict (what --json prints); RunsError on bad input."""
    new_runs = load_set(new_inputs, "new")
    sets = [summarize_set(new_runs, "new", target)]
    runs = {"new": new_runs}
    comparison = None
    if baseline_inputs is not None:
        baseline_runs = load_set(baseline_inputs, "baseline")
        sets.append(summarize_set(baseline_runs, "baseline", target))
        runs["baseline"] = baseline_runs
        comparison = compare_times(sets[0], sets[1], confidence)
    keyword, sentence = verdict(sets[0], comparison, alpha)
    return {"target": target, "alpha": alpha, "sets": sets, "time_comparison": comparison,
            "verdict": keyword, "verdict_detail": sentence, "_runs": runs}


def format_report(report: Dict) -> str:
    """The human-readable table (markdown, so that records/ READMEs can embed it as is)."""
    target = report["target"]
    lines = [f"| set | n | steps | val_loss mean | val_loss std | p(loss < {target}) "
             "| time mean (s) | time std (s) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for entry in report["sets"]:
        loss, time = entry["val_loss"], entry["train_time_s"]
        p_value = entry["loss_test"]["p"]
        p_text = "n/a" if p_value is None else format_p(p_value)
        lines.append(f"| {entry['label']} | {entry['n']} | {entry['steps']} | {loss['mean']:.4f} "
                     f"| {loss['std']:.4f} | {p_text} | {time['mean']:.4f} "
                     f"| {time['std']:.4f} |")
    comparison = report["time_comparison"]
    if comparison is not None:
        low, high = comparison["ci_two_sided_s"]
        lines.append("")
        lines.append(f"time new - baseline: {comparison['mean_difference_s']:+.4f} s, "
                     f"{comparison['confidence'] * 100:g}% CI [{low:+.4f}, {high:+.4f}] s; "
                     f"Welch t={comparison['t']:.3f}, df={comparison['df']:.2f}, "
                     f"one-sided p={format_p(comparison['p'])}")
    lines.append("")
    lines.append(f"verdict: {report['verdict']}: {report['verdict_detail']}")
    return "\n".join(lines)


def plot_report(report: Dict, path: str) -> None:
    """Validation (and training) loss curves of every run, and the time of every run per set."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"new": "tab:blue", "baseline": "tab:orange"}
    figure, (loss_axes, time_axes) = plt.subplots(1, 2, figsize=(12, 4.5))
    for label, runs in report["_runs"].items():
        for index, run in enumerate(runs):
            if run.train_curve:
                steps, losses = zip(*run.train_curve)
                loss_axes.plot(steps, losses, color=colors[label], alpha=0.15, linewidth=0.6)
            steps, losses = zip(*run.val_curve)
            loss_axes.plot(steps, losses, color=colors[label], marker=".", linewidth=1,
                           label=f"{label} val" if index == 0 else None)
    loss_axes.axhline(report["target"], color="black", linestyle="--", linewidth=0.8,
                      label=f"target {report['target']}")
    loss_axes.set_yscale("log")
    loss_axes.set_xlabel("step")
    loss_axes.set_ylabel("loss")
    loss_axes.legend()
    loss_axes.set_title("loss curves (faint: train)")
    for position, entry in enumerate(report["sets"]):
        times = entry["train_time_s"]["values"]
        jitter = [position + 0.08 * ((i % 5) - 2) for i in range(len(times))]
        time_axes.scatter(jitter, times, color=colors[entry["label"]], zorder=3)
        time_axes.errorbar([position], [entry["train_time_s"]["mean"]],
                           yerr=[entry["train_time_s"]["std"]], fmt="_", color="black",
                           capsize=8, markersize=20, zorder=4)
    time_axes.set_xticks(range(len(report["sets"])))
    time_axes.set_xticklabels([f"{e['label']} (n={e['n']})" for e in report["sets"]])
    time_axes.set_xlim(-0.6, len(report["sets"]) - 0.4)
    time_axes.set_ylabel("train time (s)")
    time_axes.set_title("time per run (bar: mean +- sample std)")
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=100)
    except OSError as err:
        raise RunsError(f"{path}: cannot write plot: {err.strerror or err}") from None
    finally:
        plt.close(figure)


def public_report(report: Dict) -> Dict:
    return {key: value for key, value in report.items() if not key.startswith("_")}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Final val loss and training time of a set of runs: mean, sample std, a "
                    "one-sided t-test of the losses against the target and, with --baseline, a "
                    "one-sided Welch t-test that the new times are lower.",
        epilog="A set is a directory (its *.txt and *.log files, not recursive) or a list of log "
               "files. Each log's last 'step:N/T val_loss:L train_time:Xms' line gives the run's "
               "final loss and time; N must equal T.")
    parser.add_argument("new", nargs="+", help="the new runs: a directory or log files")
    parser.add_argument("--baseline", nargs="+", metavar="PATH",
                        help="the runs to beat (e.g. the previous record): a directory or log files")
    parser.add_argument("--target", type=float, default=DEFAULT_TARGET,
                        help=f"val loss target (default {DEFAULT_TARGET})")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                        help=f"significance level of both tests (default {DEFAULT_ALPHA})")
    parser.add_argument("--confidence", type=float, default=DEFAULT_CONFIDENCE,
                        help=f"level of the time-difference interval (default {DEFAULT_CONFIDENCE})")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--plot", metavar="FILE.png", help="draw loss curves and time distributions")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if not 0.0 < args.alpha < 1.0 or not 0.0 < args.confidence < 1.0:
            raise RunsError("--alpha and --confidence must lie strictly between 0 and 1")
        report = analyze(args.new, args.baseline, args.target, args.alpha, args.confidence)
        if args.plot:
            plot_report(report, args.plot)
    except RunsError as err:
        print(f"compare_runs: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(public_report(report), indent=2))
    else:
        print(format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
