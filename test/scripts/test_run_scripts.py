"""Tests of scripts/run_speedrun.sh, run_gpt2_124m.sh and scripts/multinode/* without GPUs.

A stand-in trainer (written here) accepts exactly the trainer options documented at the top of
run_speedrun.sh, so a misspelt or undocumented option fails the test; it prints log lines in the
trainer's format, so the runs -> logs -> compare_runs path is exercised end to end. The recipes'
values are the trainer's (test/train/test_recipe.cpp); here: which options the scripts pass.
"""
import os
import shlex
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
SPEEDRUN = os.path.join(REPO, "scripts", "run_speedrun.sh")
GPT2_124M = os.path.join(REPO, "scripts", "run_gpt2_124m.sh")
HOSTFILE_RUN = os.path.join(REPO, "scripts", "multinode", "run_hostfile.sh")
SLURM = os.path.join(REPO, "scripts", "multinode", "slurm_speedrun.sbatch")

FAKE_TRAINER = r'''#!{python}
import argparse, sys
parser = argparse.ArgumentParser()
for name in ("recipe", "train-data", "val-data", "output-dir", "overlap"):
    parser.add_argument("--" + name, required=True)
for name in ("checkpoint-every", "seed"):
    parser.add_argument("--" + name, type=int, required=True)
# The recipe settings: passed only when set (the end-to-end test sets these four).
for name in ("steps", "val-every", "total-batch-tokens", "val-tokens"):
    parser.add_argument("--" + name, type=int, required=True)
for name in ("batch-size", "seq-len", "warmup-steps", "val-seq-len"):
    parser.add_argument("--" + name, type=int)
for name in ("model", "lr-schedule", "window-schedule", "loss-schedule", "batch-schedule"):
    parser.add_argument("--" + name)
for name in ("lr", "final-lr-frac", "weight-decay", "grad-clip"):
    parser.add_argument("--" + name, type=float)
args = parser.parse_args()
assert args.recipe in ("modded-2026-07-17", "modded-2025-10-31", "llmc-gpt2-124m")
for step in range(1, args.steps + 1):
    ms = 100.0 * step + args.seed
    print(f"step:{{step}}/{{args.steps}} train_loss:{{5 - step / args.steps:.4f}} "
          f"train_time:{{ms:.0f}}ms step_avg:100.00ms tok/s:1 mfu:n/a lr:6e-04 norm:1.0")
    if step % args.val_every == 0 or step == args.steps:
        loss = 3.2700 + 0.0003 * args.seed
        print(f"step:{{step}}/{{args.steps}} val_loss:{{loss:.4f}} train_time:{{ms:.0f}}ms "
              f"step_avg:100.00ms")
print("a warning on stderr", file=sys.stderr)
'''


def run(script, env_overrides, timeout=120):
    env = dict(os.environ)
    env.update(env_overrides)
    return subprocess.run(["bash", script], capture_output=True, text=True, env=env, timeout=timeout)


def dry_commands(result):
    """The trainer commands a DRY_RUN prints, split into words (the '> log' tail dropped)."""
    commands = []
    for line in result.stdout.splitlines():
        words = shlex.split(line)
        commands.append((words[:words.index(">")], words[words.index(">") + 1]))
    return commands


def option(words, name):
    return words[words.index(name) + 1]


class RunScripts(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def test_syntax(self):
        for path in (SPEEDRUN, GPT2_124M, HOSTFILE_RUN, SLURM):
            result = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
            self.assertEqual(result.returncode, 0, f"{path}: {result.stderr}")

    def test_speedrun_dry_run(self):
        result = run(SPEEDRUN, {"DRY_RUN": "1", "RUNS": "3", "NAME": "dry", "SEED": "7"})
        self.assertEqual(result.returncode, 0, result.stderr)
        commands = dry_commands(result)
        self.assertEqual(len(commands), 3)
        for index, (words, log) in enumerate(commands):
            self.assertEqual(words[:3], ["mpirun", "-np", "8"])
            self.assertEqual(option(words, "--recipe"), "modded-2026-07-17")  # the current record's, by default
            self.assertEqual(option(words, "--seed"), str(7 + index))
            self.assertEqual(log, f"runs/dry/run{index + 1}.log")
            self.assertEqual(option(words, "--output-dir"), f"runs/dry/run{index + 1}")
            self.assertEqual(option(words, "--train-data"), "data/cache/fineweb10B/fineweb_train_*.bin")
            self.assertEqual(option(words, "--checkpoint-every"), "0")
            self.assertNotIn("--steps", words)  # nothing overrides the recipe unless asked for
        self.assertFalse(os.path.exists(os.path.join(REPO, "runs", "dry")))
        # A setting from the environment is passed after the recipe, so it wins; the old recipe is one away.
        result = run(SPEEDRUN, {"DRY_RUN": "1", "NAME": "dry", "STEPS": "500", "LR_SCHEDULE": "cosine",
                                "RECIPE": "llmc-gpt2-124m"})
        self.assertEqual(result.returncode, 0, result.stderr)
        (words, _), = dry_commands(result)
        self.assertEqual((option(words, "--recipe"), option(words, "--steps"), option(words, "--lr-schedule")),
                         ("llmc-gpt2-124m", "500", "cosine"))

    def test_gpt2_124m_dry_run(self):
        result = run(GPT2_124M, {"DRY_RUN": "1", "NAME": "classic"})
        self.assertEqual(result.returncode, 0, result.stderr)
        (words, log), = dry_commands(result)
        # llm.c's 124M run is the trainer's llmc-gpt2-124m recipe, with a checkpoint every 5,000 steps.
        self.assertEqual((option(words, "--recipe"), option(words, "--checkpoint-every")), ("llmc-gpt2-124m", "5000"))
        self.assertNotIn("--steps", words)

    def test_multinode_dry_runs(self):
        hostfile = os.path.join(self.tmp.name, "hostfile")
        with open(hostfile, "w") as handle:
            handle.write("a slots=8\nb slots=8\n")
        result = run(HOSTFILE_RUN, {"DRY_RUN": "1", "HOSTFILE": hostfile, "NODES": "2",
                                    "NAME": "mn"})
        self.assertEqual(result.returncode, 0, result.stderr)
        (words, _), = dry_commands(result)
        self.assertEqual(words[:5], ["mpirun", "-np", "16", "--hostfile", hostfile])
        self.assertEqual(option(words, "--recipe"), "llmc-gpt2-124m")  # 1024-token sequences, 524,288 per step
        self.assertEqual(int(option(words, "--batch-size")) * 1024 * 16, 524288)
        result = run(SLURM, {"DRY_RUN": "1", "SLURM_NTASKS": "32", "SLURM_SUBMIT_DIR": REPO,
                             "NAME": "sl"})
        self.assertEqual(result.returncode, 0, result.stderr)
        (words, _), = dry_commands(result)
        self.assertEqual(words[0], "srun")
        self.assertEqual(option(words, "--recipe"), "llmc-gpt2-124m")
        self.assertEqual(int(option(words, "--batch-size")) * 1024 * 32, 524288)

    def test_bad_configuration(self):
        result = run(SPEEDRUN, {"DRY_RUN": "1", "BATCH_SIZE": "48", "SEQ_LEN": "1024", "TOTAL_BATCH_TOKENS": "524288"})
        self.assertEqual(result.returncode, 2)
        self.assertIn("not a multiple", result.stderr)
        result = run(SPEEDRUN, {"DRY_RUN": "1", "RECIPE": "modded"})
        self.assertEqual(result.returncode, 2)
        self.assertIn("RECIPE=modded", result.stderr)
        result = run(SPEEDRUN, {"DRY_RUN": "1", "RUNS": "two"})
        self.assertEqual(result.returncode, 2)
        self.assertIn("RUNS=two", result.stderr)
        result = run(SPEEDRUN, {"DRY_RUN": "1", "NAME": "../escape"})
        self.assertEqual(result.returncode, 2)
        missing = run(SPEEDRUN, {"TRAINER": os.path.join(self.tmp.name, "none"), "NAME": "m",
                                 "RUNS_DIR": self.tmp.name})
        self.assertEqual(missing.returncode, 2)
        self.assertIn("not found", missing.stderr)

    def test_runs_end_to_end_with_stand_in_trainer(self):
        trainer = os.path.join(self.tmp.name, "fake_train")
        with open(trainer, "w") as handle:
            handle.write(FAKE_TRAINER.format(python=sys.executable))
        os.chmod(trainer, 0o755)
        data = os.path.join(self.tmp.name, "data")
        os.mkdir(data)
        for name in ("fineweb_val_000000.bin", "fineweb_train_000001.bin"):
            open(os.path.join(data, name), "wb").close()
        runs_dir = os.path.join(self.tmp.name, "runs")
        env = {"TRAINER": trainer, "LAUNCHER": "", "NPROC": "1", "TOTAL_BATCH_TOKENS": "65536",
               "VAL_TOKENS": "655360", "DATA_DIR": data, "RUNS_DIR": runs_dir, "NAME": "e2e",
               "RUNS": "3", "STEPS": "40", "VAL_EVERY": "10"}
        result = run(SPEEDRUN, env)
        self.assertEqual(result.returncode, 0, result.stderr)
        run_dir = os.path.join(runs_dir, "e2e")
        self.assertEqual(sorted(os.listdir(run_dir)),
                         ["compare_runs.md", "run1.log", "run2.log", "run3.log"])
        with open(os.path.join(run_dir, "run2.log")) as handle:
            log = handle.read()
        self.assertIn("# run_speedrun.sh e2e run 2/3 seed 2", log)
        self.assertIn("step:40/40 val_loss:3.2706 train_time:4002ms", log)
        self.assertIn("a warning on stderr", log)
        # The table at the end is compare_runs' (losses 3.2703, 3.2706, 3.2709: mean 3.2706).
        self.assertIn("| new | 3 | 40 | 3.2706 | 0.0003 |", result.stdout)
        with open(os.path.join(run_dir, "compare_runs.md")) as handle:
            self.assertIn("verdict: loss target met", handle.read())
        again = run(SPEEDRUN, env)
        self.assertEqual(again.returncode, 2)
        self.assertIn("already holds run logs", again.stderr)


if __name__ == "__main__":
    unittest.main()
