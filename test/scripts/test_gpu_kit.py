"""The GPU kit is complete: scripts/gpu/pack.sh packs the build tree's GPU binaries (nothing is compiled
again), and scripts/gpu/check.sh --dry-run runs every stage with the pack alone, in a mount namespace
where this machine's OpenMPI, GoogleTest, Boost, CLI11, nlohmann-json and NCCL are hidden as they are
absent on the GPU machine (scripts/gpu/bare_env.sh). A library or MPI plugin missing from the pack fails
here, not in the one GPU run; the negative cases below show that each kind of gap is caught.

  test_gpu_kit.py  (env: LLMC_BUILD_DIR = the CMake build tree with the CUDA targets, LLMC_NCCL_LIBRARY =
                   this machine's libnccl.so, standing in for the GPU machine's nvidia-nccl-cu13 wheel,
                   LLMC_SHARED_DIR = the shared data)
Exits 77 (CTest: skipped) where no private mount namespace can be made (unshare -m needs root).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
PACK_SH = os.path.join(REPO, "scripts", "gpu", "pack.sh")
CHECK_SH = os.path.join(REPO, "scripts", "gpu", "check.sh")
BARE_ENV = os.path.join(REPO, "scripts", "gpu", "bare_env.sh")
STAGE_KEYS = ["tests", "kernels", "train", "speedrun", "fused", "torch", "ncu", "generate", "sanitizer"]
PARTS = {"1": ["tests", "kernels", "train", "speedrun"], "2": ["fused", "torch", "ncu", "generate", "sanitizer"]}
MAX_RESULT_FILES = 8  # what the device tool brings back
MAX_PACK_BYTES = 56 << 20
SETTINGS = {}


def run(command, timeout=600, **kwargs):
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)


def clone_pack(source, target):
    """A copy of the pack made of hard links: files can be removed from it without touching the original."""
    subprocess.run(["cp", "-al", source, target], check=True)
    return target


def read(path):
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def stage_statuses(report):
    """{stage key: status} from the report's stage table (rows "| a. title | status | ...")."""
    rows = re.findall(r"^\| ([a-z])\. [^|]+ \| ([^|]+) \|", report, re.M)
    return {STAGE_KEYS[ord(letter) - ord("a")]: status.strip() for letter, status in rows}


class GpuKit(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="test_gpu_kit_")
        cls.pack = os.path.join(cls.tmp, "gpukit")
        result = run([PACK_SH, "--no-build", "--build-dir", SETTINGS["build"], "--shared", SETTINGS["shared"],
                      "--output", cls.pack])
        assert result.returncode == 0, result.stdout + result.stderr
        # Where the GPU machine's nvidia-nccl-cu13 wheel keeps libnccl.so.2, on PYTHONPATH.
        cls.wheel = os.path.join(cls.tmp, "wheel")
        cls.nccl_in_wheel = os.path.join(cls.wheel, "nvidia", "nccl", "lib", "libnccl.so.2")
        # An NCCL wheel on this machine's own Python path (as `pip install torch` leaves one in
        # site-packages), planted on every machine so that the hiding is tested the same everywhere.
        cls.planted_site = os.path.join(cls.tmp, "planted_site")
        planted = os.path.join(cls.planted_site, "nvidia", "nccl", "lib", "libnccl.so.2")
        os.makedirs(os.path.dirname(planted))
        try:
            os.link(os.path.realpath(SETTINGS["nccl"]), planted)
        except OSError:  # another file system: a copy
            shutil.copyfile(os.path.realpath(SETTINGS["nccl"]), planted)
        cls.planted_env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [cls.planted_site, os.environ.get("PYTHONPATH")])))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def dry_run(self, pack, out_name, *check_args, with_nccl_wheel=True):
        """check.sh --dry-run under bare_env.sh, started with an NCCL planted on this machine's Python path
        (which bare_env.sh hides): (exit status, console output, {result file: text})."""
        out = os.path.join(self.tmp, out_name)
        wheel = ["--provide", f"{SETTINGS['nccl']}:{self.nccl_in_wheel}", "--", "env", f"PYTHONPATH={self.wheel}"]
        result = run([BARE_ENV] + (wheel if with_nccl_wheel else ["--"]) + [CHECK_SH, "--dry-run", "--pack", pack] +
                     list(check_args) + [out], env=self.planted_env)
        files = {name: read(os.path.join(out, name)) for name in os.listdir(out)} if os.path.isdir(out) else {}
        return result.returncode, result.stdout + result.stderr, files

    def test_pack_holds_the_binaries_libraries_and_data_and_is_small(self):
        manifest = read(os.path.join(self.pack, "MANIFEST.txt"))
        commit = run(["git", "-C", REPO, "rev-parse", "HEAD"]).stdout.strip()
        if commit:
            self.assertRegex(manifest, rf"(?m)^commit: {commit}")
        listed = dict((path, int(size)) for size, path in re.findall(r"(?m)^(\d+) (\S+)$", manifest))
        for name in ("train_gpt2", "bench_kernels", "bench_window_attention", "kernels_bf16_cuda", "gpt2_bf16_cuda", "train_steps_bf16_cuda",
                     "emu_tests_cuda", "comm_collectives_cuda", "comm_trace_cuda", "generate_gpt2", "bench_generate",
                     "bench_speedrun_kernels", "bench_step",
                     "gpt2_decoder_bf16_cuda", "speedrun_model_bf16_cuda", "fp8_cuda", "optim_math_bf16_cuda"):
            self.assertTrue(os.access(os.path.join(self.pack, "bin", name), os.X_OK), name)
        for path in ("lib/libmpi.so.40", "lib/openmpi/mca_ess_singleton.so", "data/gpt2/encoder.json",
                     "data/gpt2/vocab.bpe", "data/tinyshakespeare/tinyshakespeare_train_000001.bin",
                     "data/tinyshakespeare/tinyshakespeare_val_000000.bin"):
            self.assertIn(path, listed)
        for path, size in listed.items():
            self.assertEqual(os.path.getsize(os.path.join(self.pack, path)), size, path)
        # The GPU machine has these (newer) or finds them itself: packing them would only add risk.
        for base in ("libc.so.6", "libstdc++.so.6", "libcudart.so.13", "libcublasLt.so.13", "libnccl.so.2"):
            self.assertNotIn(f"lib/{base}", listed)
        total = int(re.search(r"(?m)^total_bytes: (\d+)$", manifest).group(1))
        self.assertLess(total, MAX_PACK_BYTES)

    def test_hidden_environment_lacks_mpi_and_nccl(self):
        nccl = os.path.realpath(SETTINGS["nccl"])
        probe = ("test ! -e /usr/lib/x86_64-linux-gnu/libmpi.so.40 && test ! -e /usr/lib/x86_64-linux-gnu/openmpi "
                 f"&& test ! -e {nccl} && ! command -v mpirun && ! command -v orted && test ! -e /usr/include/CLI")
        result = run([BARE_ENV, "--", "sh", "-c", probe])
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertTrue(os.path.exists(nccl), "hidden only inside the namespace")

    def test_hidden_environment_has_no_nccl_anywhere_the_check_looks(self):
        # Every NCCL python3's path (site-packages, the user site, PYTHONPATH with the planted wheel) or
        # ldconfig's cache could give check.sh, listed outside the namespace and then looked for inside it.
        lister = ("import glob, os, subprocess, sys\n"
                  "found = [p for e in sys.path for g in ('nvidia/*/lib/libnccl*', 'nvidia/*/*/lib/libnccl*')"
                  " for p in glob.glob(os.path.join(e, g))]\n"
                  "cache = subprocess.run(['ldconfig', '-p'], capture_output=True, text=True).stdout.split('\\n')\n"
                  "found += [l.split(' => ')[-1] for l in cache if l.strip().startswith('libnccl') and ' => ' in l]\n"
                  "print('\\n'.join(p for p in found if os.path.exists(p)))\n")
        outside = run(["python3", "-c", lister], env=self.planted_env).stdout.split()
        self.assertIn(os.path.join(self.planted_site, "nvidia", "nccl", "lib", "libnccl.so.2"), outside)
        inside = run([BARE_ENV, "--", "python3", "-c", lister], env=self.planted_env)
        self.assertEqual(inside.returncode, 0, inside.stdout + inside.stderr)
        self.assertEqual(inside.stdout.split(), [], inside.stderr)

    def test_dry_run_passes_every_stage_with_the_pack_alone(self):
        status, console, files = self.dry_run(self.pack, "out_ok")
        self.assertEqual(status, 0, console)
        # The one NCCL there is: the wheel's (not the planted one, nor any this machine has).
        self.assertRegex(console, rf"(?m)^check: CUDA runtime .*; NCCL {re.escape(self.nccl_in_wheel)}$")
        self.assertLessEqual(len(files), MAX_RESULT_FILES)
        for name in files:
            self.assertRegex(name, r"^[A-Za-z0-9._-]+$")
        statuses = stage_statuses(files["report.md"])
        self.assertEqual(list(statuses), STAGE_KEYS, files["report.md"])
        for key in STAGE_KEYS:  # (without compute-sanitizer or ncu here, the binaries they run still load)
            self.assertEqual(statuses[key], "passed (dry)", key)
        tests_log = files["tests.log"]
        for binary in os.listdir(os.path.join(self.pack, "bin")):
            if binary.endswith("_cuda"):
                self.assertRegex(tests_log, rf"### {binary} \$ [^\n]*\n(?:(?!### ).*\n)*?.*skipped: no GPU")
        # Each train_gpt2 run started MPI from the pack (singleton, no daemon) and stopped at the GPU, with
        # one clear line: the error names cudaGetDeviceCount, which runs after MPI_Init_thread.
        train_runs = re.findall(r"(?ms)^### (train_gpt2_\S+) \$ .*?^### \1 result=(.*?) rc", files["train.log"])
        self.assertEqual(len(train_runs), 4)
        for label, result in train_runs:
            block = files["train.log"].split(f"### {label} $")[1].split(f"### {label} result=")[0]
            self.assertEqual(result, "ok (dry)", block)
            self.assertRegex(block, r"rank 0: .*cudaGetDeviceCount")
            self.assertNotRegex(block, r"terminate called|orte_init|MPI_INIT|mca_base_component_repository_open")
        # The generation stage: the benchmark prints its accounting and times nothing; the program's tests
        # reach the packed generate_gpt2, which stops at its first CUDA call.
        self.assertRegex(files["kernels.log"], r"(?m)^# no GPU: nothing timed")
        self.assertRegex(files["kernels.log"], r"(?m)^skipped: no GPU")

    def test_the_two_parts_run_every_stage_once_each_within_its_budget(self):
        seen = []
        for part, keys in PARTS.items():
            status, console, files = self.dry_run(self.pack, f"out_part{part}", "--part", part)
            self.assertEqual(status, 0, console)
            budget = {"1": 420, "2": 300}[part]
            self.assertRegex(console, rf"(?m)^check: DRY RUN .*part {part}, budget {budget}s,")
            self.assertRegex(files["report.md"], rf"\| part \| {part} of 2 ")
            statuses = stage_statuses(files["report.md"])
            self.assertEqual(list(statuses), keys, files["report.md"])
            self.assertTrue(all(value == "passed (dry)" for value in statuses.values()), statuses)
            seen += keys
        self.assertEqual(sorted(seen), sorted(STAGE_KEYS))
        status, console, _ = self.dry_run(self.pack, "out_part_and_stages", "--part", "1", "--stages", "train")
        self.assertEqual(status, 2, console)
        self.assertIn("--part and --stages: give one of them", console)

    def test_a_library_missing_from_the_pack_stops_the_check_at_once(self):
        pack = clone_pack(self.pack, os.path.join(self.tmp, "pack_without_libmpi"))
        os.remove(os.path.join(pack, "lib", "libmpi.so.40"))
        status, console, files = self.dry_run(pack, "out_no_libmpi")
        self.assertEqual(status, 2, console)
        self.assertRegex(console, r"libmpi\.so\.40 \(needed by .*bin/train_gpt2")
        self.assertIn("unresolved libraries", files["report.md"])
        self.assertNotIn("tests.log", files)  # no stage ran

    def test_a_library_that_cannot_be_loaded_stops_the_check_too(self):
        pack = clone_pack(self.pack, os.path.join(self.tmp, "pack_with_truncated_hwloc"))
        os.remove(os.path.join(pack, "lib", "libhwloc.so.15"))  # a new, empty file: the original is untouched
        open(os.path.join(pack, "lib", "libhwloc.so.15"), "w").close()
        status, console, _ = self.dry_run(pack, "out_truncated_hwloc")
        self.assertEqual(status, 2, console)
        self.assertRegex(console, r"libhwloc\.so\.15\[unloadable\] \(needed by")

    def test_nccl_only_from_the_python_wheel(self):
        # Without the wheel, no NCCL is found, though this machine has some (the system's, the planted one).
        status, console, _ = self.dry_run(self.pack, "out_no_wheel", with_nccl_wheel=False)
        self.assertEqual(status, 2, console)
        self.assertRegex(console, r"libnccl\.so\.2 \(needed by")

    def test_a_missing_mpi_plugin_fails_the_training_stage(self):
        # ldd cannot see plugins that MPI opens at run time: only running train_gpt2 finds this gap.
        pack = clone_pack(self.pack, os.path.join(self.tmp, "pack_without_plugin"))
        os.remove(os.path.join(pack, "lib", "openmpi", "mca_ess_singleton.so"))
        status, console, files = self.dry_run(pack, "out_no_plugin", "--stages", "train")
        self.assertEqual(status, 1, console)
        self.assertEqual(stage_statuses(files["report.md"]), {"train": "failed (dry)"})
        self.assertNotIn("cudaGetDeviceCount", files["train.log"])


def main():
    if subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True).returncode != 0:
        print("skipped: no private mount namespace here (unshare -m needs root)")
        return 77
    SETTINGS.update(build=os.environ["LLMC_BUILD_DIR"], nccl=os.environ["LLMC_NCCL_LIBRARY"],
                    shared=os.environ.get("LLMC_SHARED_DIR", os.path.join(REPO, "..", "shared")))
    program = unittest.main(argv=[sys.argv[0]] + sys.argv[1:], exit=False, verbosity=2)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
