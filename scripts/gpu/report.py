#!/usr/bin/env python3
"""Writes the one-page markdown report of scripts/gpu/check.sh (OUT/report.md) from what the check left:
WORK/status.tsv (one row per stage), WORK/device.txt ("key: value" lines), WORK/unresolved.txt (when
libraries are missing) and the raw stage logs in OUT, whose commands sit between "### LABEL $ COMMAND"
and "### LABEL result=R rc=N seconds=S" lines. check.sh runs it after every stage, so a check cut short
still leaves a report. Standard library only (it runs on the bare GPU machine).

  report.py --work WORK --out OUT
"""
import argparse
import csv
import io
import json
import os
import re
import shutil
import statistics
import sys

# The H200's ceilings when this run measured none (docs/gpu_check.md): bf16 dense GEMM and device copy,
# as measured through PyTorch on this workplace's H200s.
DOCUMENTED_CEILINGS = {"gemm_bf16_tflops": 790.0, "copy_gbps": 4300.0}
TIMED_AFTER_STEP = 10  # check.sh runs 10 untimed steps, then the timed ones
# docs/projection.md: one rank's compute per step at the assumed fractions of the H100's ceilings, and the
# record's measured step (137.5 s / 2,245 steps), for the speedrun stage's row.
PROJECTED_SPEEDRUN_COMPUTE_MS = 51.05
RECORD_MS_PER_STEP = 61.3
# The 2026-07-17 record's measured step (73.8 s / 1,285 steps; its stage-3 steps are longer); no projection yet.
RECORD89_MS_PER_STEP = 57.4
# Dense bf16 peaks of the spec sheets, as llmc/train/mfu.cpp (the PyTorch peer's MFU is computed here).
SPEC_BF16_PEAKS = (("H200", 989.4e12), ("H100", 989.4e12), ("A100", 312.0e12))

START = re.compile(r"^### (\S+) \$ (.*)$")
END = re.compile(r"^### (\S+) result=(.+?) rc=(-?\d+) seconds=([\d.]+)$")
MEMORY = re.compile(r"^### (\S+) peak_gpu_memory_mib=(\S+) baseline_mib=(\S+)$")
NOTE = re.compile(r"^### note: (.*)$")
STAGE = re.compile(r"^#### stage \w+ \((\w+)\)")
BENCH_LINE = re.compile(r"^(?P<name>\S.*?)\s+(?P<ms>\d+\.\d+) ms\s+(?P<rate>\d+\.\d+) (?P<unit>TFLOP/s|GB/s)$")
STEP_LINE = re.compile(r"^step:(\d+)/(\d+) train_loss:(\S+) train_time:(\d+)ms .*?tok/s:(\S+) mfu:(\S+)")
MODEL_LINE = re.compile(r"^# model: L=(\d+) NH=\d+ C=(\d+) T=\d+ .*parameters:(\d+)")
BATCH_LINE = re.compile(r"^# batch: B=(\d+) T=(\d+)")
# bench_generate's measured line (test/generate/bench_generate.cu).
GENERATE_LINE = re.compile(r"^generate (?P<model>.+?) batch:1 prompt:(?P<prompt>\d+) new:(?P<new>\d+) "
                           r"prefill_ms=(?P<prefill_ms>\S+) .*?ms_per_token=(?P<ms_per_token>\S+) "
                           r"decode_tokens_per_s=(?P<tokens_per_s>\S+) ceiling_tokens_per_s=(?P<ceiling>\S+)")


class Command:
    """One command of a stage log: its label, command line, output lines, outcome and stage."""

    def __init__(self, label, command, stage):
        self.label, self.command, self.stage, self.lines = label, command, stage, []
        self.result, self.rc, self.seconds = "did not finish", None, None
        self.peak_mib = self.baseline_mib = None

    def text(self):
        return "\n".join(self.lines)


def read_log(path):
    """({label: Command} in order, {stage key: [notes]}) of a stage log (several stages may share one log;
    "#### stage LETTER (KEY)" lines start each one's part); a missing log reads as empty."""
    commands, notes, current, stage = {}, {}, None, None
    if not os.path.exists(path):
        return commands, notes
    with open(path, encoding="utf-8", errors="replace") as handle:
        for line in handle.read().splitlines():
            start, end, memory, note = START.match(line), END.match(line), MEMORY.match(line), NOTE.match(line)
            if STAGE.match(line):
                stage, current = STAGE.match(line).group(1), None
            elif start:
                current = commands[start.group(1)] = Command(start.group(1), start.group(2), stage)
            elif end:
                command = commands.setdefault(end.group(1), Command(end.group(1), "", stage))
                command.result, command.rc, command.seconds = end.group(2), int(end.group(3)), float(end.group(4))
                current = None
            elif memory and memory.group(1) in commands:
                command = commands[memory.group(1)]
                command.peak_mib, command.baseline_mib = memory.group(2), memory.group(3)
            elif note:
                notes.setdefault(stage, []).append(note.group(1))
            elif current is not None:
                current.lines.append(line)
    return commands, notes


def read_status(work):
    rows = []
    path = os.path.join(work, "status.tsv")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            for line in handle.read().splitlines():
                letter, key, status, seconds, limit, log, title = line.split("\t")
                rows.append(dict(letter=letter, key=key, status=status, seconds=int(seconds), limit=int(limit),
                                 log=log, title=title))
    return rows


def read_facts(work):
    facts = {}
    path = os.path.join(work, "device.txt")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            for line in handle.read().splitlines():
                key, _, value = line.partition(": ")
                facts[key] = value
    return facts


# ---- readers of each kind of output --------------------------------------------------------------------
def gtest_counts(text):
    """(passed, failed, skipped, [failed test names]) of a GoogleTest run, or None if it printed no summary."""
    passed = re.search(r"^\[  PASSED  \] (\d+) tests?", text, re.M)
    if not passed and not re.search(r"^\[==========\] \d+ tests? from .* ran", text, re.M):
        return None
    failed = re.search(r"^\[  FAILED  \] (\d+) tests?, listed below", text, re.M)
    skipped = re.search(r"^\[  SKIPPED \] (\d+) tests?, listed below", text, re.M)
    names = sorted(set(re.findall(r"^\[  FAILED  \] (\S+\.\S+)", text, re.M)))
    passed, failed, skipped = (int(m.group(1)) if m else 0 for m in (passed, failed, skipped))
    if "skipped: no GPU" in text:  # test/support: GoogleTest counts the tests of a binary without a GPU as passed
        passed, skipped = 0, skipped + passed
    return passed, failed, skipped, names


def unittest_counts(text):
    """(passed, failed, skipped, []) of a Python unittest run, or None."""
    ran = re.search(r"^Ran (\d+) tests? in", text, re.M)
    verdict = re.search(r"^(OK|FAILED)(?: \((.*)\))?$", text, re.M)
    if not ran or not verdict:
        return None
    counts = dict((k, int(v)) for k, v in re.findall(r"(\w+)=(\d+)", verdict.group(2) or ""))
    failed = counts.get("failures", 0) + counts.get("errors", 0)
    skipped = counts.get("skipped", 0)
    names = sorted(set(re.findall(r"^(?:FAIL|ERROR): (\S+)", text, re.M)))
    return int(ran.group(1)) - failed - skipped, failed, skipped, names


def sanitizer_summary(text):
    errors = re.search(r"ERROR SUMMARY: (\d+) errors?", text)
    hazards = re.search(r"RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, (\d+) warnings?\)", text)
    parts = []
    if hazards:
        parts.append(f"{hazards.group(1)} hazards ({hazards.group(2)} errors, {hazards.group(3)} warnings)")
    elif errors:
        parts.append(f"{errors.group(1)} errors")
    return ", ".join(parts)


def bench_rows(text):
    return [(m["name"], float(m["ms"]), float(m["rate"]), m["unit"]) for m in map(BENCH_LINE.match, text.splitlines())
            if m]


# bench_speedrun_kernels' measured rows: name (38 columns), calls, MB/call, GFLOP/call, ceiling us, us/step,
# measured us per call.
SPEEDRUN_KERNEL_LINE = re.compile(r"^(?P<name>.{38}) +(?P<calls>\d+) +[\d.]+ +[\d.]+ +(?P<ceiling>[\d.]+) +[\d.]+ "
                                  r"+(?P<measured>[\d.]+)$")
# bench_step's measured rows: kind, name, calls, MB/call, GFLOP/call, ceiling us/step, share, measured us/step
# (n/a and no share where a launch stated no cost).
BENCH_STEP_LINE = re.compile(r"^(?P<kind>kernel|gemm|memset|copy) +(?P<name>.+?) +(?P<calls>\d+) +\S+ +\S+ "
                       r"+(?P<ceiling>[\d.]+|n/a)(?: +[\d.]+%)? +(?P<measured>[\d.]+)$")
BENCH_STEP_TOTAL = re.compile(r"^total +\(sum of rows, no overlap\) +(?P<ceiling>[\d.]+) +(?P<measured>[\d.]+)$")


def speedrun_kernel_rows(text):
    """[(name, calls per step, ceiling us, measured us)] per call, of bench_speedrun_kernels' measured rows."""
    return [(m["name"].strip(), int(m["calls"]), float(m["ceiling"]), float(m["measured"]))
            for m in map(SPEEDRUN_KERNEL_LINE.match, text.splitlines()) if m]


def step_rows(text):
    """bench_step's measured table: {'rows': [(kind, name, calls, ceiling us or None, measured us)] per step,
    'total': (ceiling us, measured us) or None}."""
    rows, total = [], None
    for line in text.splitlines():
        m = BENCH_STEP_LINE.match(line)
        if m:
            ceiling = None if m["ceiling"] == "n/a" else float(m["ceiling"])
            rows.append((m["kind"], m["name"], int(m["calls"]), ceiling, float(m["measured"])))
        t = BENCH_STEP_TOTAL.match(line)
        if t:
            total = (float(t["ceiling"]), float(t["measured"]))
    return {"rows": rows, "total": total}


STEP_TIME_LINE = re.compile(r"(?m)^measured step time ([\d.]+) ms")


def measured_step_ms(text):
    """bench_step's step time without an observer (ms), or None."""
    m = STEP_TIME_LINE.search(text)
    return float(m.group(1)) if m else None


def json_line(text):
    """The last line of the text that parses as a JSON object, or None."""
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def timed_steps(text):
    """ms/step over the steps after TIMED_AFTER_STEP, the log's MFUs of those steps, the last loss and B, T of
    a train_gpt2 log, or None."""
    steps = {}
    batch = None
    for line in text.splitlines():
        step, batch_match = STEP_LINE.match(line), BATCH_LINE.match(line)
        if step:
            steps[int(step.group(1))] = (float(step.group(4)), step.group(3), step.group(6))
        batch = batch or batch_match
    first = TIMED_AFTER_STEP
    if not steps or not batch or max(steps) <= first or first not in steps:
        return None
    last = max(steps)
    ms_per_step = (steps[last][0] - steps[first][0]) / (last - first)
    B, T = int(batch.group(1)), int(batch.group(2))
    return {
        "ms_per_step": ms_per_step,
        "tokens_per_s": B * T / (ms_per_step / 1000) if ms_per_step > 0 else float("nan"),
        "mfus": [float(steps[s][2].rstrip("%")) for s in range(first + 1, last + 1) if s in steps and steps[s][2] != "n/a"],
        "loss": steps[last][1],
        "B": B,
        "T": T,
        "steps": last - first,
    }


def train_figures(text):
    """ms/step, tok/s, MFU (the log's), loss, B, T and FLOPs per token of a GPT-2 train_gpt2 log, or None."""
    figures = timed_steps(text)
    model = next((m for m in map(MODEL_LINE.match, text.splitlines()) if m), None)
    if not figures or not model:
        return None
    layers, channels, params = int(model.group(1)), int(model.group(2)), int(model.group(3))
    figures["mfu_log"] = statistics.mean(figures["mfus"]) if figures["mfus"] else None
    figures["flops_per_token"] = 6 * params + 6 * layers * channels * figures["T"]  # as llmc/train/mfu.cpp
    return figures


def generate_rows(text):
    """[{model, prompt, new, prefill_ms, ms_per_token, tokens_per_s, ceiling}] of bench_generate's output."""
    rows = []
    for match in map(GENERATE_LINE.match, text.splitlines()):
        if match:
            row = match.groupdict()
            rows.append(dict(row, **{k: float(row[k]) for k in row if k != "model"}))
    return rows


def ncu_rows(text):
    """{kernel: {metric: (value, unit)}} from ncu's --csv output (the last launch of each kernel wins)."""
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if line.startswith('"ID","Process ID"')), None)
    if header is None:
        return {}
    body = [lines[header]] + [line for line in lines[header + 1:] if line.startswith('"')]
    kernels = {}
    for row in csv.DictReader(io.StringIO("\n".join(body))):
        name = row.get("Kernel Name", "?")
        kernels.setdefault(name, {})[row.get("Metric Name", "?")] = (row.get("Metric Value", ""),
                                                                    row.get("Metric Unit", ""))
    return kernels


# ---- the report ----------------------------------------------------------------------------------------
def first_problem_line(command):
    for line in command.lines:
        if re.search(r"error|fail|abort|terminate|not found|Traceback|exception", line, re.I):
            return line.strip()[:160]
    return (command.lines[-1].strip()[:160] if command.lines else "(no output)")


def counts_text(commands):
    totals, names = [0, 0, 0], []
    for command in commands:
        counts = gtest_counts(command.text()) or unittest_counts(command.text())
        if counts:
            totals = [a + b for a, b in zip(totals, counts[:3])]
            names += [f"{command.label}: {n}" for n in counts[3]]
    return f"{totals[0]} tests passed, {totals[1]} failed, {totals[2]} skipped", names


def stage_summary(row, commands, notes, context):
    """The 'result' cell of a stage's row, and problem lines for the Problems section."""
    own = [c for c in commands.values() if c.stage == row["key"]]
    bad = [c for c in own if not c.result.startswith("ok")]
    problems = [f"{row['letter']}. {c.label}: {c.result} (rc {c.rc}): {first_problem_line(c)}" for c in bad]
    problems += [f"{row['letter']}. {n}" for n in notes]
    parts = [f"{len(own) - len(bad)}/{len(own)} commands ok"] if own else []
    key = row["key"]
    if key in ("tests", "sanitizer") and own:
        text, failed_names = counts_text(own)
        parts.append(text)
        problems += [f"{row['letter']}. failed: {n}" for n in failed_names]
        if key == "sanitizer":
            parts += [f"{c.label}: {sanitizer_summary(c.text())}" for c in own if sanitizer_summary(c.text())]
    elif key == "kernels":
        parts.append(f"{len(context['bench'])} kernels timed")
    elif key in ("train", "torch"):
        parts.append(f"{sum(1 for c in own if context['runs'].get(c.label))} runs measured")
    elif key == "speedrun" and context["speedrun"]:
        parts += [f"{SPEEDRUN_SHORT_NAMES.get(label, label)} {figures['ms_per_step']:.1f} ms/step"
                  for label, figures in context["speedrun"].items()]
    elif key == "fused":
        parts.append(f"{len(context['speedrun_kernels'])} speedrun kernels timed")
        total = context["step"]["total"]
        if total:
            parts.append(f"modded89 step rows {total[1] / 1e3:.2f} ms measured ({total[0] / 1e3:.2f} ms at the "
                         "ceilings)")
        eager, graphs = context["step"]["eager_ms"], context["step"]["graphs_ms"]
        if eager and graphs:
            parts.append(f"modded89 step {eager:.2f} ms eager, {graphs:.2f} ms as CUDA graphs ({graphs / eager:.3f}x)")
    elif key == "ncu":
        parts.append(f"{len(context['ncu'])} kernels profiled")
    elif key == "generate" and own:
        parts += [f"{row['tokens_per_s']:.0f} tokens/s at batch 1" for row in context["generate"]]
        text, failed_names = counts_text(own)
        parts.append(text)
        problems += [f"{row['letter']}. failed: {n}" for n in failed_names]
    parts += notes
    return "; ".join(parts), problems


def ceilings_of(commands):
    measured = json_line(commands["ceilings"].text()) if "ceilings" in commands else None
    if measured and "gemm_bf16_tflops" in measured:
        return measured, "measured in this run"
    return DOCUMENTED_CEILINGS, "documented (790 TFLOP/s, 4.3 TB/s): not measured in this run"


def kernel_table(bench, ceilings, source):
    out = [f"**Kernels** (`bench_kernels --batch 16 --seq 1024`, bf16; ceilings {source}: bf16 GEMM "
           f"{ceilings['gemm_bf16_tflops']:.0f} TFLOP/s, copy {ceilings['copy_gbps']:.0f} GB/s)", "",
           "| kernel | ms | rate | % of ceiling |", "|---|---:|---:|---:|"]
    for name, ms, rate, unit in bench:
        ceiling = ceilings["gemm_bf16_tflops"] if unit == "TFLOP/s" else ceilings["copy_gbps"]
        out.append(f"| {name} | {ms:.3f} | {rate:.1f} {unit} | {100 * rate / ceiling:.0f}% |")
    return out + [""]


def speedrun_kernels_table(rows, step):
    out = []
    if rows:
        out += ["**Speedrun kernels** (`bench_speedrun_kernels`, the 2025-10-31 model at T = 32,768, fused passes "
                "included; ceilings: the benchmark's H200 figures, 4.3 TB/s and 790 / 1,979 TFLOP/s)", "",
                "| kernel | calls/step | ceiling us | measured us | ceiling / measured |", "|---|---:|---:|---:|---:|"]
        for name, calls, ceiling, measured in rows:
            share = f"{100 * ceiling / measured:.0f}%" if measured > 0 else "-"
            out.append(f"| {name} | {calls} | {ceiling:.1f} | {measured:.1f} | {share} |")
        out.append("")
    if step["rows"]:
        total = step["total"]
        head = f"{total[1] / 1e3:.2f} ms measured, {total[0] / 1e3:.2f} ms at the ceilings" if total else "no total"
        out += [f"**The 2026-07-17 step by launch** (`bench_step --model modded89 -b 1 -t 16384`; per step, {head}; "
                "the 25 rows that took longest)", "",
                "| kind | row | calls | ceiling us | measured us |", "|---|---|---:|---:|---:|"]
        for kind, name, calls, ceiling, measured in sorted(step["rows"], key=lambda r: -r[4])[:25]:
            out.append(f"| {kind} | {name} | {calls} | {'-' if ceiling is None else f'{ceiling:.1f}'} | "
                       f"{measured:.1f} |")
        out.append("")
    return out


# The speedrun stage's runs as the stage summary names them.
SPEEDRUN_SHORT_NAMES = {"modded89_record_step": "modded89", "modded89_bf16_mlp_step": "modded89-bf16mlp",
                        "speedrun_record_step": "speedrun"}


def speedrun_table(speedrun):
    """speedrun: {label: figures} of the records' runs that were measured."""
    out = ["**Speedrun** (each record's recipe, one sequence of T tokens per step: what each of the record's 8 GPUs "
           "computes per step, without the communication)", "",
           "| run | recipe | T | ms/step | tok/s | peak GPU MiB | last loss | projected ms/step (docs/projection.md) | "
           "record ms/step |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    rows = {"modded89_record_step": ("modded-2026-07-17", "none yet", f"{RECORD89_MS_PER_STEP} (8xH100, mean of "
                                     "all stages, with communication)"),
            "modded89_bf16_mlp_step": ("modded-2026-07-17 --fp8-mlp off", "none yet",
                                       f"{RECORD89_MS_PER_STEP} (the record runs its MLPs in FP8)"),
            "speedrun_record_step": ("modded-2025-10-31", f"{PROJECTED_SPEEDRUN_COMPUTE_MS} (H100, compute at the "
                                     "assumed fractions)", f"{RECORD_MS_PER_STEP} (8xH100, with communication)")}
    for label, (recipe, projected, record) in rows.items():
        figures = speedrun.get(label)
        if figures:
            out.append(f"| {label} | {recipe} | {figures['T']} | {figures['ms_per_step']:.2f} | "
                       f"{figures['tokens_per_s']:.0f} | {figures.get('peak_mib', 'n/a')} | {figures['loss']} | "
                       f"{projected} | {record} |")
    return out + [""]


def spec_peak(gpu_name):
    return next((peak for name, peak in SPEC_BF16_PEAKS if name in gpu_name), None)


def training_table(runs, ceilings, peak):
    out = ["**Training** GPT-2 d12, T=1024, 30 timed steps after 10 (ours: `--overlap full`; speed = PyTorch "
           "ms/step / ours at the same B and clip)", "",
           "| run | ms/step | tok/s | MFU (spec) | MFU (measured GEMM) | peak GPU MiB | last loss | speed vs PyTorch |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for label, figures in runs.items():
        if not figures:
            continue
        mfu_ceiling = 100 * figures["flops_per_token"] * figures["tokens_per_s"] / (ceilings["gemm_bf16_tflops"] * 1e12)
        peer = runs.get(re.sub(r"^train_gpt2_", "torch_", label))
        ratio = f"{peer['ms_per_step'] / figures['ms_per_step']:.2f}x" if peer and label.startswith("train") else ""
        if figures.get("mfu_log") is not None:  # train_gpt2's own figure
            mfu_spec = f"{figures['mfu_log']:.1f}%"
        elif peak and label.startswith("torch_"):
            mfu_spec = f"{100 * figures['flops_per_token'] * figures['tokens_per_s'] / peak:.1f}%"
        else:
            mfu_spec = "n/a"
        out.append(f"| {label} | {figures['ms_per_step']:.2f} | {figures['tokens_per_s']:.0f} | {mfu_spec} | "
                   f"{mfu_ceiling:.1f}% | {figures.get('peak_mib', 'n/a')} | {figures.get('loss', '')} | {ratio} |")
    return out + [""]


NCU_COLUMNS = [("gpu__time_duration.sum", "time"), ("sm__warps_active.avg.pct_of_peak_sustained_active", "occupancy"),
               ("sm__maximum_warps_per_active_cycle_pct", "theoretical occ."),
               ("l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed", "smem pipe %"),
               ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", "bank conflicts"),
               ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "SM %"),
               ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM %"),
               ("launch__registers_per_thread", "regs")]


def generation_table(rows):
    out = ["**Generation** (`bench_generate`: random weights, batch 1, bf16, host sampling included; ceiling = "
           "every weight and the KV cache read once per token at 4.3 TB/s)", "",
           "| model | prompt | new tokens | prefill ms | ms/token | tokens/s | ceiling tokens/s | % of ceiling |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        out.append(f"| {row['model']} | {row['prompt']:.0f} | {row['new']:.0f} | {row['prefill_ms']:.2f} | "
                   f"{row['ms_per_token']:.3f} | {row['tokens_per_s']:.0f} | {row['ceiling']:.0f} | "
                   f"{100 * row['tokens_per_s'] / row['ceiling']:.1f}% |")
    return out + [""]


def ncu_table(kernels):
    metrics = [(m, title) for m, title in NCU_COLUMNS if any(m in v for v in kernels.values())]
    if not metrics:  # the fallback run (sections): whatever metrics it printed
        names = sorted({m for v in kernels.values() for m in v})[:8]
        metrics = [(m, m) for m in names]
    out = ["**ncu** (attention kernels, `--clock-control none`)", "",
           "| kernel | " + " | ".join(t for _, t in metrics) + " |", "|---|" + "---:|" * len(metrics)]
    for name, values in kernels.items():
        cells = [" ".join(x for x in values.get(m, ("", ""))).strip() for m, _ in metrics]
        out.append(f"| {name[:60]} | " + " | ".join(cells) + " |")
    return out + [""]


def build_report(work, out_dir):
    facts, rows = read_facts(work), read_status(work)
    commands, notes_by_stage = {}, {}
    for log in dict.fromkeys(row["log"] for row in rows):
        log_commands, log_notes = read_log(os.path.join(out_dir, log))
        commands.update(log_commands)
        notes_by_stage.update(log_notes)
    ceilings, source = ceilings_of(commands)
    bench = bench_rows(commands["bench_kernels"].text()) if "bench_kernels" in commands else []
    runs, speedrun = {}, {}
    for label, command in commands.items():
        if label.startswith("train_gpt2_"):
            runs[label] = train_figures(command.text())
        elif label in ("modded89_record_step", "modded89_bf16_mlp_step", "speedrun_record_step"):
            figures = timed_steps(command.text())
            if figures and command.peak_mib not in (None, "n/a"):
                figures["peak_mib"] = command.peak_mib
            if figures:
                speedrun[label] = figures
        elif label.startswith("torch_"):
            peer = json_line(command.text())
            runs[label] = peer and {"ms_per_step": peer["ms_per_step"], "tokens_per_s": peer["tokens_per_s"],
                                    "flops_per_token": peer["flops_per_token"], "loss": f"{peer['loss']:.4f}",
                                    "mfu_log": None}
        if runs.get(label) and command.peak_mib not in (None, "n/a"):
            runs[label]["peak_mib"] = command.peak_mib
    ncu = {}
    for label in ("ncu_attention", "ncu_attention_sections"):
        if label in commands:
            ncu.update(ncu_rows(commands[label].text()))
    generation = [row for label in ("bench_generate", "bench_generate_modded89") if label in commands
                  for row in generate_rows(commands[label].text())]
    speedrun_kernels = (speedrun_kernel_rows(commands["bench_speedrun_kernels"].text())
                        if "bench_speedrun_kernels" in commands else [])
    step = step_rows(commands["bench_step_modded89"].text()) if "bench_step_modded89" in commands else step_rows("")
    step["eager_ms"], step["graphs_ms"] = (
        measured_step_ms(commands[label].text()) if label in commands else None
        for label in ("bench_step_modded89", "bench_step_modded89_graphs"))
    context = {"bench": bench, "runs": runs, "ncu": ncu, "generate": generation, "speedrun": speedrun,
               "speedrun_kernels": speedrun_kernels, "step": step}

    dry = facts.get("mode") == "dry"
    out = ["# GPU check report" + (" (DRY RUN: no GPU, nothing measured)" if dry else ""), "",
           "| | |", "|---|---|"]
    for key in ("date", "gpu", "driver", "cuda_runtime", "nccl", "nvcc", "pack", "host", "part"):
        if key in facts:
            out.append(f"| {key} | {facts[key]} |")
    used = sum(row["seconds"] for row in rows)
    out += [f"| time | {used} s in stages, {facts.get('elapsed', '?')} s in all, budget {facts.get('budget', '?')} s |",
            ""]
    problems = []
    unresolved = os.path.join(work, "unresolved.txt")
    if os.path.exists(unresolved):
        with open(unresolved, encoding="utf-8") as handle:
            out += ["**Stopped before any stage: unresolved libraries**", "", "```", handle.read().rstrip(), "```", ""]
    out += ["## Stages", "", "| stage | status | time | limit | result |", "|---|---|---:|---:|---|"]
    for row in rows:
        summary, stage_problems = stage_summary(row, commands, notes_by_stage.get(row["key"], []), context)
        problems += stage_problems
        out.append(f"| {row['letter']}. {row['title']} | {row['status']} | {row['seconds']} s | {row['limit']} s | "
                   f"{summary} |")
    out.append("")
    if bench:
        out += kernel_table(bench, ceilings, source)
    if any(runs.values()):
        out += training_table(runs, ceilings, spec_peak(facts.get("gpu", "")))
    if speedrun:
        out += speedrun_table(speedrun)
    out += speedrun_kernels_table(speedrun_kernels, step)
    if ncu:
        out += ncu_table(ncu)
    if generation:
        out += generation_table(generation)
    if problems:
        out += ["**Problems** (first line of each; the logs have the rest)", ""] + [f"- {p}" for p in problems[:20]]
        out.append("")
    out.append("Raw logs: " + ", ".join(sorted({row["log"] for row in rows} | {"console.log"})) + ".")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="check.sh's work folder (status.tsv, device.txt)")
    parser.add_argument("--out", required=True, help="the output folder with the stage logs")
    args = parser.parse_args()
    report = build_report(args.work, args.out)
    # Written whole, then copied: a temporary file in OUT could come back as a ninth file.
    draft = os.path.join(args.work, "report.md")
    with open(draft, "w", encoding="utf-8") as handle:
        handle.write(report)
    shutil.copyfile(draft, os.path.join(args.out, "report.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
