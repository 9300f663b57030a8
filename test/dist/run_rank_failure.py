#!/usr/bin/env python3
"""Fatal-error test driver: runs rank_failure_probe under mpirun, where rank 1 fails while the
other ranks wait in a collective. Passes when mpirun exits non-zero within the time limit, the
cause is printed as "rank 1: cannot open shard ...", and no rank process is left running.
Without the abort path the other ranks would wait forever and the time limit would fail the test.

usage: run_rank_failure.py MPIEXEC NP PROBE [--limit SECONDS]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie has exited; only a process that can still run counts.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mpiexec")
    parser.add_argument("np", type=int)
    parser.add_argument("probe")
    parser.add_argument("--limit", type=float, default=30.0)
    args = parser.parse_args()

    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with tempfile.TemporaryDirectory(prefix="llmc_rank_failure_") as directory:
        command = [args.mpiexec, "-n", str(args.np), "--oversubscribe", "--bind-to", "none",
                   args.probe, directory]
        start = time.monotonic()
        try:
            result = subprocess.run(command, env=env, capture_output=True, text=True,
                                    timeout=args.limit)
        except subprocess.TimeoutExpired as expired:
            print(f"FAIL: mpirun still running after {args.limit} s (a rank hangs)", file=sys.stderr)
            print(expired.stderr or "", file=sys.stderr)
            return 1
        elapsed = time.monotonic() - start
        output = result.stdout + result.stderr
        print(output)
        print(f"mpirun exit status {result.returncode} after {elapsed:.1f} s")

        failures = []
        if result.returncode == 0:
            failures.append("mpirun exited 0 although rank 1 failed")
        if "rank 1: cannot open shard" not in output or "missing_shard_000001.bin" not in output:
            failures.append("the cause ('rank 1: cannot open shard .../missing_shard_000001.bin') was not printed")
        pids = {}
        for rank in range(args.np):
            path = os.path.join(directory, f"pid_{rank}")
            if not os.path.exists(path):
                failures.append(f"rank {rank} never started (no {path})")
                continue
            with open(path) as pid_file:
                pids[rank] = int(pid_file.read())
        deadline = time.monotonic() + 5.0
        while any(alive(pid) for pid in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        for rank, pid in pids.items():
            if alive(pid):
                failures.append(f"rank {rank} (pid {pid}) is still running after mpirun returned")
        for failure in failures:
            print("FAIL: " + failure, file=sys.stderr)
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
