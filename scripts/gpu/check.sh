#!/usr/bin/env bash
# The one command run on the lent GPU machine (docs/gpu_check.md). It prints the device, checks that every
# packed binary's libraries resolve (and stops at once, listing what is missing, if not), then runs the
# stages of STAGES in order, each within its own time limit and all within the budget (530 s: under 9
# minutes), writing OUT/report.md (one page, rewritten after every stage) and the raw logs: at most 8
# files. A stage that fails or runs out of time is reported as such and the next one runs.
#
#   scripts/gpu/check.sh [--dry-run] [--pack DIR] [--part 1|2] [--budget SECONDS] [--stages KEY,...] [OUT_DIR]
#
# OUT_DIR defaults to $OUT (the device tool's result folder); --pack to gpukit/ (scripts/gpu/pack.sh);
# --stages runs only the stages named (keys of STAGES below: tests,kernels,train,speedrun,torch,ncu,generate,
# sanitizer). --part splits the check into two calls, so that what the first brings back is kept whatever
# happens to the machine in the second: part 1 the stages of PART1 within 420 s, part 2 the others within
# 300 s (each its own budget unless --budget says otherwise).
# --dry-run is for a machine without a GPU (CI runs it under scripts/gpu/bare_env.sh): every command runs
# as far as it goes without a GPU; one that stops at the missing GPU counts as passed, anything else
# (a library or MPI plugin missing, a script error) as failed, and the GPU-only tools are not run.
# Exit status: 0 every stage passed, 1 a stage failed or ran out of time, 2 the pack is unusable.
# shellcheck disable=SC2317  # the stage functions are called indirectly ("stage_$key")
set -uo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)

# The stages, in order of value: key|limit_s|min_s|log|title. Each runs as stage_KEY within
# min(limit_s, budget left) and is skipped when less than min_s is left; scripts/gpu/report.py reads each
# key's log. A new benchmark joins as a row placed by its value, a stage_KEY function and a reader in
# report.py; stages share log files so that report.md, console.log and the logs stay within 8 files.
# compute-sanitizer comes last: it was never seen on a program this heavy on these machines, and the first
# lent GPU (2026-12-05, records/gpu/) stopped answering somewhere in the stages then placed before the kernels'.
STAGES=(
  "tests|150|60|tests.log|CUDA test suite: every kernel and the whole model against the reference"
  "kernels|50|20|kernels.log|kernel benchmark against the ceilings measured here"
  "train|90|40|train.log|train_gpt2 d12, T=1024: B=16 and 32, --grad-clip 1.0 and 0"
  "speedrun|150|40|train.log|train_gpt2, both records' recipes: one GPU's share of a record step (T=49152, 32768)"
  "fused|90|20|kernels.log|the speedrun kernels one by one: bench_speedrun_kernels, a modded89 step by launch and as CUDA graphs"
  "torch|150|60|train.log|PyTorch peer (torch.compile, SDPA flash attention) on the same runs"
  "ncu|70|30|ncu.log|ncu on the attention kernels: occupancy, shared-memory throughput"
  "generate|80|20|kernels.log|generation: d12 and modded89 tokens/s at batch 1 (KV cache), generate_gpt2's program tests"
  "sanitizer|75|30|sanitizer.log|compute-sanitizer memcheck and racecheck on the kernel tests"
)
# The two calls of --part: our own code's correctness and speed first; our kernels one by one, the peers and the
# tools after.
PART1=tests,kernels,train,speedrun
PART2=fused,torch,ncu,generate,sanitizer
PART1_BUDGET=420
PART2_BUDGET=300
MAX_RESULT_FILES=8
KILL_GRACE=10          # seconds between a time limit's TERM and its KILL
TRAIN_STEPS=40         # 10 untimed + 30 timed steps (report.py times steps 11..40)
SPEEDRUN_STEPS=25      # 10 untimed + 15 timed
RACECHECK_FILTER='LayerNorm*:Attention*:FlashAttention*:SequenceLengths/FlashAttention*:Classifier*:GlobalNorm*:Encoder*'
RACECHECK_FILTER+=':*KvCache*'
NCU_METRICS=gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,sm__maximum_warps_per_active_cycle_pct
NCU_METRICS+=,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed
NCU_METRICS+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed
NCU_METRICS+=,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread
# What a command prints when it stops only because there is no GPU (a dry run expects this).
NO_GPU_PATTERN='skipped: no GPU|CUDA driver version is insufficient|no CUDA-capable device|cudaErrorNoDevice|cudaErrorInsufficientDriver'

say() { echo "check: $*"; }
die_unusable() {
  say "$*" >&2
  exit 2
}

DRY=0
ONLY_STAGES=
PACK=$REPO/gpukit
BUDGET=
PART=
OUT_DIR=${OUT:-}
while [[ $# -gt 0 ]]; do
  case $1 in
    --dry-run) DRY=1; shift ;;
    --pack) PACK=$(realpath -m "$2"); shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --stages) ONLY_STAGES=,$2,; shift 2 ;;
    --part) PART=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    -*) die_unusable "unknown option $1 (see --help)" ;;
    *) OUT_DIR=$1; shift ;;
  esac
done
[[ -n $OUT_DIR ]] || die_unusable "no output folder: give OUT_DIR or set OUT"
case $PART in
  '') BUDGET=${BUDGET:-530} ;;
  1) [[ -z $ONLY_STAGES ]] || die_unusable "--part and --stages: give one of them"
     ONLY_STAGES=,$PART1, BUDGET=${BUDGET:-$PART1_BUDGET} ;;
  2) [[ -z $ONLY_STAGES ]] || die_unusable "--part and --stages: give one of them"
     ONLY_STAGES=,$PART2, BUDGET=${BUDGET:-$PART2_BUDGET} ;;
  *) die_unusable "--part $PART: 1 or 2" ;;
esac
[[ $BUDGET =~ ^[0-9]+$ ]] || die_unusable "--budget $BUDGET: not a number of seconds"
[[ -f $PACK/MANIFEST.txt ]] || die_unusable "no pack at $PACK (run scripts/gpu/pack.sh, and carry gpukit)"
if [[ -n $ONLY_STAGES ]]; then
  for key in ${ONLY_STAGES//,/ }; do
    printf '%s\n' "${STAGES[@]}" | grep -q "^$key|" ||
      die_unusable "--stages: no stage '$key' (the stages: $(printf '%s\n' "${STAGES[@]}" | cut -d'|' -f1 | xargs | tr ' ' ,))"
  done
fi

START=$(date +%s)
DEADLINE=$((START + BUDGET))
mkdir -p "$OUT_DIR" || die_unusable "cannot create $OUT_DIR"
OUT_DIR=$(realpath "$OUT_DIR")
WORK=$(mktemp -d /tmp/gpu_check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
WRAP=$WORK/bin          # one wrapper per packed binary, with the environment it needs
mkdir -p "$WRAP"

result_files() {  # report.md, console.log and the distinct stage logs
  local row
  { echo report.md; echo console.log; for row in "${STAGES[@]}"; do cut -d'|' -f4 <<<"$row"; done; } | sort -u
}
(($(result_files | wc -l) <= MAX_RESULT_FILES)) ||
  die_unusable "the stage table writes $(result_files | wc -l) files; at most $MAX_RESULT_FILES come back"
for name in $(result_files); do rm -f "$OUT_DIR/$name"; done
exec > >(tee -a "$OUT_DIR/console.log") 2>&1
TEE_PID=$!

device_fact() { echo "$1: $2" >>"$WORK/device.txt"; }

# ---- the device ---------------------------------------------------------------------------------
print_device() {
  say "$( ((DRY)) && echo 'DRY RUN (no GPU: nothing is measured); ')${PART:+part $PART, }budget ${BUDGET}s, pack $PACK"
  sed -n '2,6p' "$PACK/MANIFEST.txt"
  device_fact mode "$( ((DRY)) && echo dry || echo gpu)"
  device_fact date "$(date -u +%Y-%m-%dT%H:%MZ)"
  device_fact host "$(hostname) ($(uname -r))"
  device_fact pack "$(sed -n 's/^commit: //p' "$PACK/MANIFEST.txt"), packed $(sed -n 's/^packed: //p' "$PACK/MANIFEST.txt")"
  device_fact budget "$BUDGET"
  [[ -z $PART ]] || device_fact part "$PART of 2 (the stages $( ((PART == 1)) && echo "$PART1" || echo "$PART2"))"
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    nvidia-smi
    nvidia-smi --query-gpu=name,driver_version,memory.total,pstate,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw \
      --format=csv
    device_fact gpu "$(nvidia-smi -i 0 --query-gpu=name,memory.total --format=csv,noheader)"
    device_fact driver "$(nvidia-smi -i 0 --query-gpu=driver_version --format=csv,noheader) (CUDA $(nvidia-smi |
      sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p'))"
  else
    say "nvidia-smi: no GPU visible here"
    device_fact gpu "none visible (nvidia-smi)"
  fi
  local nvcc_version
  nvcc_version=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
  device_fact nvcc "${nvcc_version:-not found}"
  say "nvcc ${nvcc_version:-not found}; $(python3 --version 2>&1)"
}

# ---- libraries ----------------------------------------------------------------------------------
# Directories that may hold what the pack does not: the CUDA toolkit's, then the NVIDIA Python wheels'
# (NCCL is only there on the GPU machine).
candidate_library_dirs() {
  local root sub nvcc_path
  nvcc_path=$(command -v nvcc || true)
  for root in "${CUDA_HOME:-}" "${nvcc_path:+$(dirname "$(dirname "$(realpath "$nvcc_path")")")}" /usr/local/cuda; do
    [[ -n $root ]] || continue
    for sub in lib64 lib targets/x86_64-linux/lib; do [[ -d $root/$sub ]] && echo "$root/$sub"; done
  done
  python3 - <<'EOF_PY' 2>/dev/null
import glob, os, sys
for entry in sys.path:
    for pattern in ("nvidia/*/lib", "nvidia/*/*/lib"):
        for folder in sorted(glob.glob(os.path.join(entry, pattern))):
            print(os.path.realpath(folder))
EOF_PY
}

# "soname file" for every library some packed file cannot load with LD_LIBRARY_PATH=$1 (the programs
# only, with $2 = programs; the MPI plugins too otherwise). ldd runs on all cores: a hundred plugins.
unresolved_libraries() {
  local -a files=("$PACK"/bin/*)
  [[ ${2:-} == programs ]] || files+=("$PACK"/lib/openmpi/*.so)
  # shellcheck disable=SC2016  # the script below is bash's, with its own variables
  printf '%s\0' "${files[@]}" | xargs -0 -r -n 8 -P "$(nproc)" bash -c '
    pack=$0 library_path=$1
    shift
    for file; do
      [[ -f $file ]] || continue
      if listing=$(LD_LIBRARY_PATH=$library_path ldd "$file" 2>&1); then
        awk -v file="${file#"$pack"/}" "/not found/ {print \$1, file}" <<<"$listing"
      else  # found but not loadable ("file too short", wrong class, ...)
        soname=$(sed -n "s/.*error while loading shared libraries: \([^:]*\):.*/\1/p" <<<"$listing" | head -1)
        echo "$(basename "${soname:-?}")[unloadable] ${file#"$pack"/}"
      fi
    done' "$PACK" "$1"
}

# Sets LIBRARY_PATH_DIRS to the pack's lib/ plus each candidate directory that provides a missing library;
# stops the check (exit 2) listing what is still missing.
resolve_libraries() {
  LIBRARY_PATH_DIRS=$PACK/lib
  local -a candidates
  mapfile -t candidates < <(candidate_library_dirs)
  local soname dir missing added
  for _ in 1 2 3; do
    missing=$(unresolved_libraries "$LIBRARY_PATH_DIRS" programs)
    [[ -n $missing ]] || break
    added=0
    while read -r soname _; do
      for dir in "${candidates[@]}"; do
        if [[ -e $dir/$soname && :$LIBRARY_PATH_DIRS: != *":$dir:"* ]]; then
          LIBRARY_PATH_DIRS+=:$dir
          added=1
          break
        fi
      done
    done <<<"$missing"
    ((added)) || break
  done
  missing=$(unresolved_libraries "$LIBRARY_PATH_DIRS" | sort -u)  # (ldd ran in parallel: any order)
  if [[ -n $missing ]]; then
    say "unresolved libraries (stopping; searched the pack, the CUDA toolkit and the NVIDIA Python wheels):"
    awk '{count[$1]++; if (count[$1] <= 3) needed[$1] = needed[$1] " " $2}
         END {for (s in needed) print "  " s " (needed by" needed[s] (count[s] > 3 ? " and " count[s] - 3 " more" : "") ")"}' \
      <<<"$missing" | sort | tee "$WORK/unresolved.txt"
    write_report
    exit 2
  fi
  say "libraries: every packed binary and MPI plugin resolves with LD_LIBRARY_PATH=$LIBRARY_PATH_DIRS"
  device_fact libraries "$LIBRARY_PATH_DIRS"
  local cudart nccl
  cudart=$(LD_LIBRARY_PATH=$LIBRARY_PATH_DIRS ldd "$PACK/bin/train_gpt2" | awk '/libcudart/ {print $3}')
  nccl=$(LD_LIBRARY_PATH=$LIBRARY_PATH_DIRS ldd "$PACK/bin/train_gpt2" | awk '/libnccl/ {print $3}')
  device_fact cuda_runtime "$(realpath "$cudart" 2>/dev/null || echo "$cudart")"
  device_fact nccl "$(realpath "$nccl" 2>/dev/null || echo "$nccl")"
  say "CUDA runtime $(sed -n 's/^cuda_runtime: //p' "$WORK/device.txt"); NCCL $(sed -n 's/^nccl: //p' "$WORK/device.txt")"
}

# The environment of every packed binary: the libraries found above, OpenMPI's install directories moved
# into the pack, and an MPI singleton that starts no daemon (the GPU machine has no orted).
make_wrappers() {
  PACK_ENV=("LD_LIBRARY_PATH=$LIBRARY_PATH_DIRS" "OPAL_PKGLIBDIR=$PACK/lib/openmpi"
    "OPAL_PKGDATADIR=$PACK/share/openmpi" "OPAL_SYSCONFDIR=$PACK/etc" OMPI_MCA_ess_singleton_isolated=1
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
  # compute-sanitizer and ncu run binaries that need no packed library (kernel tests, bench_kernels): the
  # tools themselves then load nothing from the pack (whose libz, say, is Debian's, not the image's).
  local cuda_dirs=${LIBRARY_PATH_DIRS#"$PACK/lib"}
  TOOL_ENV=("LD_LIBRARY_PATH=${cuda_dirs#:}")
  local binary
  for binary in "$PACK"/bin/*; do
    {
      echo '#!/usr/bin/env bash'
      printf 'exec env'
      printf ' %q' "${PACK_ENV[@]}" "$binary"
      printf ' "$@"\n'
    } >"$WRAP/${binary##*/}"
    chmod +x "$WRAP/${binary##*/}"
  done
}

find_tool() {  # the path of an NVIDIA tool, or nothing
  local name=$1 nvcc_path candidate
  command -v "$name" && return
  nvcc_path=$(command -v nvcc || true)
  for candidate in "${CUDA_HOME:-/nonexistent}/bin/$name" "${nvcc_path:+$(dirname "$(realpath "$nvcc_path")")/$name}" \
                   "/usr/local/cuda/bin/$name" "/usr/local/cuda/compute-sanitizer/$name" /opt/nvidia/nsight-compute/*/"$name"; do
    [[ -x $candidate ]] && { echo "$candidate"; return; }
  done
}

# ---- running commands ---------------------------------------------------------------------------
# run_cmd LABEL [--cap SECONDS] -- COMMAND...: runs COMMAND within the stage's time left (or CAP if
# less), its output appended to the stage log between "### LABEL $ ..." and "### LABEL result=..." lines,
# and counts its outcome into the stage's. Returns the command's exit status (124: out of time).
run_cmd() {
  local label=$1 cap=0
  shift
  if [[ $1 == --cap ]]; then cap=$2; shift 2; fi
  [[ $1 == -- ]] && shift
  local left=$((STAGE_DEADLINE - $(date +%s) - KILL_GRACE))
  ((cap > 0 && cap < left)) && left=$cap
  if ((left < 5)); then
    echo "### $label result=out of time rc=124 seconds=0" >>"$STAGE_LOG"
    STAGE_TIMED_OUT=1
    return 124
  fi
  echo "### $label \$ $*" >>"$STAGE_LOG"
  local started rc result took_ms
  started=$(date +%s%N)
  PYTHONUNBUFFERED=1 timeout -k "$KILL_GRACE" "$left" "$@" 2>&1 </dev/null | tee -a "$STAGE_LOG" >"$WORK/last.out"
  rc=${PIPESTATUS[0]}
  if ((rc == 124 || rc == 137)); then
    result="out of time"
    STAGE_TIMED_OUT=1
  elif ((DRY)); then
    if ((rc == 0 || rc == 77)) || grep -Eq "$NO_GPU_PATTERN" "$WORK/last.out"; then
      result="ok (dry)"
    else
      result=failed
    fi
  elif ((rc == 0)) && ! grep -q 'skipped: no GPU' "$WORK/last.out"; then
    result=ok
  else
    result=failed
  fi
  [[ $result == failed ]] && STAGE_FAILED=1
  STAGE_COMMANDS=$((STAGE_COMMANDS + 1))
  took_ms=$((($(date +%s%N) - started) / 1000000))
  printf '### %s result=%s rc=%d seconds=%d.%d\n' "$label" "$result" "$rc" $((took_ms / 1000)) $((took_ms % 1000 / 100)) \
    >>"$STAGE_LOG"
  return "$rc"
}

note() {  # a line of the stage log that report.py shows under the stage
  echo "### note: $*" >>"$STAGE_LOG"
}

# A dry run's stand-in for a script that needs a GPU: it must at least be valid Python.
PYTHON_PARSES=(python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])')

# Samples the GPU's used memory (nvidia-smi, every 200 ms) while a command runs.
start_memory_sampler() {
  SAMPLER_PID=
  ((DRY)) && return
  command -v nvidia-smi >/dev/null || return
  SAMPLER_BASELINE=$(nvidia-smi -i 0 --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
  nvidia-smi -i 0 --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 >"$WORK/memory.txt" 2>/dev/null &
  SAMPLER_PID=$!
}
stop_memory_sampler() {
  local label=$1 peak=n/a
  if [[ -n $SAMPLER_PID ]]; then
    kill "$SAMPLER_PID" 2>/dev/null
    wait "$SAMPLER_PID" 2>/dev/null
    peak=$(grep -E '^[0-9]+$' "$WORK/memory.txt" | sort -n | tail -1)
  fi
  echo "### $label peak_gpu_memory_mib=${peak:-n/a} baseline_mib=${SAMPLER_BASELINE:-n/a}" >>"$STAGE_LOG"
}

# ---- the stages ---------------------------------------------------------------------------------
stage_tests() {
  local binary
  for binary in "$PACK"/bin/*_cuda; do
    run_cmd "${binary##*/}" --cap 60 -- env LLMC_SHARED_DIR="$PACK" "$WRAP/${binary##*/}"  # the GPT-2 BPE files
  done
  run_cmd train_program --cap 90 -- python3 "$REPO/test/train/test_train_program.py" --trainer "$WRAP/train_gpt2" \
    --require-gpu
  run_cmd reference_check --cap 60 -- python3 "$REPO/scripts/reference_check.py" --run "$WRAP/train_gpt2" --require-gpu
}

stage_sanitizer() {
  local tool
  tool=$(find_tool compute-sanitizer)
  if [[ -z $tool ]]; then
    note "compute-sanitizer not found"
    ((DRY)) || STAGE_FAILED=1
    # A dry run still shows that the binaries it would run load with the tools' environment.
    ((DRY)) && run_cmd kernels_without_sanitizer -- env "${TOOL_ENV[@]}" "$PACK/bin/kernels_bf16_cuda" --gtest_list_tests
    ((DRY)) && run_cmd model_without_sanitizer -- env "${TOOL_ENV[@]}" "$PACK/bin/gpt2_bf16_cuda" --gtest_list_tests
    return
  fi
  local -a common=(--error-exitcode 99 --print-limit 20)
  run_cmd memcheck_kernels --cap 30 -- env "${TOOL_ENV[@]}" "$tool" --tool memcheck "${common[@]}" \
    "$PACK/bin/kernels_bf16_cuda"
  run_cmd racecheck_kernels --cap 30 -- env "${TOOL_ENV[@]}" "$tool" --tool racecheck "${common[@]}" \
    "$PACK/bin/kernels_bf16_cuda" --gtest_filter="$RACECHECK_FILTER"
  run_cmd memcheck_model --cap 25 -- env "${TOOL_ENV[@]}" "$tool" --tool memcheck "${common[@]}" \
    "$PACK/bin/gpt2_bf16_cuda"
}

stage_kernels() {
  if ((DRY)); then
    run_cmd ceilings -- "${PYTHON_PARSES[@]}" "$REPO/scripts/gpu/ceilings.py"
  else
    run_cmd ceilings --cap 40 -- python3 "$REPO/scripts/gpu/ceilings.py"
  fi
  run_cmd bench_kernels -- "$WRAP/bench_kernels" --batch 16 --seq 1024 --repeats 20
  run_cmd bench_window_attention -- "$WRAP/bench_window_attention" --repeats 10  # docs/attention.md's rows
  # the same with the 2025-10-31 model's QK-norm and RoPE backward in the dq and dk stores
  run_cmd bench_window_attention_norm_rope -- "$WRAP/bench_window_attention" --repeats 10 --windows 384,1664 --norm-rope
}

stage_train() {
  local batch clip
  for batch in 16 32; do
    for clip in 1.0 0; do
      start_memory_sampler
      run_cmd "train_gpt2_b${batch}_clip${clip}" --cap 45 -- "$WRAP/train_gpt2" --model d12 -b "$batch" -t 1024 \
        --steps "$TRAIN_STEPS" --lr 6e-4 --warmup-steps 10 --weight-decay 0.1 --grad-clip "$clip" --overlap full \
        --train-data "$PACK/data/tinyshakespeare/tinyshakespeare_train_*.bin"
      stop_memory_sampler "train_gpt2_b${batch}_clip${clip}"
    done
  done
}

# Each record's model, optimizer and schedules on one GPU with one sequence per step: what each of the record's 8
# GPUs computes per step, without the communication -- the current record's (2026-07-17) at its last stages'
# 49,152 tokens (every step that long: --batch-schedule fixed; the kit times steps itself: no warm-up), then the
# 2025-10-31 one's 32,768 (docs/projection.md projects it). No validation (the recipes' --val-every needs
# --val-tokens). Fixed windows of the data (the BOS loader needs shards of many whole documents; the speed is the
# same).
stage_speedrun() {
  start_memory_sampler
  run_cmd modded89_record_step --cap 70 -- "$WRAP/train_gpt2" --recipe modded-2026-07-17 -b 1 -t 49152 \
    --total-batch-tokens 49152 --batch-schedule fixed --untimed-warmup off --steps "$SPEEDRUN_STEPS" --val-every 0 \
    --val-tokens 0 --train-loader window --vocab "$PACK/data/gpt2" \
    --train-data "$PACK/data/tinyshakespeare/tinyshakespeare_train_*.bin"
  stop_memory_sampler modded89_record_step
  start_memory_sampler  # the same with the bf16 MLP: what the record's FP8 MLP forward saves (docs/fp8.md)
  run_cmd modded89_bf16_mlp_step --cap 70 -- "$WRAP/train_gpt2" --recipe modded-2026-07-17 -b 1 -t 49152 \
    --total-batch-tokens 49152 --batch-schedule fixed --untimed-warmup off --steps "$SPEEDRUN_STEPS" --val-every 0 \
    --val-tokens 0 --train-loader window --vocab "$PACK/data/gpt2" --fp8-mlp off \
    --train-data "$PACK/data/tinyshakespeare/tinyshakespeare_train_*.bin"
  stop_memory_sampler modded89_bf16_mlp_step
  start_memory_sampler
  run_cmd speedrun_record_step --cap 70 -- "$WRAP/train_gpt2" --recipe modded-2025-10-31 --model speedrun -b 1 \
    -t 32768 --total-batch-tokens 32768 --steps "$SPEEDRUN_STEPS" --val-every 0 --val-tokens 0 --train-loader window \
    --train-data "$PACK/data/tinyshakespeare/tinyshakespeare_train_*.bin"
  stop_memory_sampler speedrun_record_step
}

# Every kernel of the speedrun models timed by itself against its bytes and FLOPs at the ceilings: the 2025-10-31
# model's rows (bench_speedrun_kernels; docs/projection.md takes its measured column) and each launch of a
# 2026-07-17 step at T = 16,384 (bench_step brackets every launch with events; docs/benchmarks.md). The fusions of
# issue 27 (docs/kernels.md#fused-passes) are rows of both; bench_speedrun_kernels also times the wgmma GEMMs
# with their ReLU^2 epilogues beside cuBLASLt's, the FP8 MLP's up projection among them (--wgmma-gemms's
# decision). The same step as train_gpt2 --cuda-graphs launches it
# (one graph per step, captured in the warm-up) gives the step time without launch gaps beside the eager one.
stage_fused() {
  run_cmd bench_speedrun_kernels --cap 25 -- "$WRAP/bench_speedrun_kernels" --repeats 10
  run_cmd bench_step_modded89 --cap 40 -- "$WRAP/bench_step" --model modded89 -b 1 -t 16384 --steps 2 \
    --vocab "$PACK/data/gpt2"
  run_cmd bench_step_modded89_graphs --cap 30 -- "$WRAP/bench_step" --model modded89 -b 1 -t 16384 --steps 2 \
    --warmup 4 --cuda-graphs --vocab "$PACK/data/gpt2"
}

stage_torch() {
  if ((DRY)); then
    run_cmd torch_peer -- "${PYTHON_PARSES[@]}" "$REPO/scripts/bench_train_torch.py"
    return
  fi
  local batch
  for batch in 16 32; do
    start_memory_sampler
    run_cmd "torch_b${batch}_clip1.0" --cap 90 -- python3 "$REPO/scripts/bench_train_torch.py" --layers 12 \
      -b "$batch" -t 1024 --steps $((TRAIN_STEPS - 10)) --warmup 10
    stop_memory_sampler "torch_b${batch}_clip1.0"
  done
}

stage_ncu() {
  local tool
  tool=$(find_tool ncu)
  if [[ -z $tool ]]; then
    note "ncu not found"
    ((DRY)) || STAGE_FAILED=1
    ((DRY)) && run_cmd bench_kernels_without_ncu -- env "${TOOL_ENV[@]}" "$PACK/bin/bench_kernels" --repeats 1
    return
  fi
  local -a common=(--clock-control none --target-processes all --kernel-name-base demangled
    --kernel-name "regex:flash|attention|softmax" --csv --page details)
  if ! run_cmd ncu_attention -- env "${TOOL_ENV[@]}" "$tool" "${common[@]}" --metrics "$NCU_METRICS" \
       "$PACK/bin/bench_kernels" --batch 16 --seq 1024 --repeats 1 && grep -qi 'metric' "$WORK/last.out"; then
    # A metric this ncu does not know: the standard sections instead.
    run_cmd ncu_attention_sections -- env "${TOOL_ENV[@]}" "$tool" "${common[@]}" --section Occupancy \
      --section SpeedOfLight "$PACK/bin/bench_kernels" --batch 16 --seq 1024 --repeats 1
  fi
}

stage_generate() {
  # d12 with random weights: 64 prompt tokens, then 256 decode steps through the real generation loop.
  run_cmd bench_generate --cap 40 -- "$WRAP/bench_generate" --model d12 --prompt-tokens 64 --new-tokens 256
  # The 2026-07-17 model's decoder (its activations as the cache), the same prompt and steps.
  run_cmd bench_generate_modded89 --cap 30 -- "$WRAP/bench_generate" --model modded89 --contexts 64,2048 \
    --prompt-tokens 64 --new-tokens 256
  run_cmd generate_program --cap 60 -- env LLMC_SHARED_DIR="$PACK" python3 \
    "$REPO/test/generate/test_generate_program.py" --generator "$WRAP/generate_gpt2" --require-gpu
}

# ---- the run ------------------------------------------------------------------------------------
write_report() {
  sed -i '/^elapsed: /d' "$WORK/device.txt"
  device_fact elapsed $(($(date +%s) - START))
  python3 "$REPO/scripts/gpu/report.py" --work "$WORK" --out "$OUT_DIR" ||
    say "report.py failed: the raw logs are in $OUT_DIR"
}

run_stage() {  # run_stage LETTER ROW
  local letter=$1 key limit min log title
  IFS='|' read -r key limit min log title <<<"$2"
  local now left status
  now=$(date +%s)
  left=$((DEADLINE - now))
  STAGE_LOG=$OUT_DIR/$log
  if ((left < min)); then
    status=skipped
    say "stage $letter ($key) skipped: ${left}s of the budget left, it needs ${min}s"
    printf '%s\t%s\t%s\t0\t%s\t%s\t%s\n' "$letter" "$key" "$status" "$limit" "$log" "$title" >>"$WORK/status.tsv"
    return
  fi
  ((left < limit)) && limit=$left
  STAGE_DEADLINE=$((now + limit))
  STAGE_FAILED=0 STAGE_TIMED_OUT=0 STAGE_COMMANDS=0
  say "stage $letter ($key): $title (limit ${limit}s)"
  echo "#### stage $letter ($key): $title (limit ${limit}s)" >>"$STAGE_LOG"
  "stage_$key"
  if ((STAGE_TIMED_OUT)); then status="out of time"
  elif ((STAGE_FAILED)); then status=failed
  elif ((STAGE_COMMANDS == 0)); then status="not run"
  else status=passed
  fi
  ((DRY)) && status+=" (dry)"
  local took=$(($(date +%s) - now))
  say "stage $letter ($key): $status in ${took}s"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$letter" "$key" "$status" "$took" "$limit" "$log" "$title" >>"$WORK/status.tsv"
  write_report
}

main() {
  : >"$WORK/status.tsv"
  print_device
  resolve_libraries
  make_wrappers
  local index=0 letters=abcdefghijklmnopqrstuvwxyz row
  for row in "${STAGES[@]}"; do
    if [[ -z $ONLY_STAGES || $ONLY_STAGES == *",${row%%|*},"* ]]; then
      run_stage "${letters:index:1}" "$row"
    fi
    index=$((index + 1))
  done
  say "done in $(($(date +%s) - START))s; report: $OUT_DIR/report.md"
  awk '/^## Stages/ {table = 1; next} table && /^\|/ {print; printed = 1} printed && /^$/ {exit}' \
    "$OUT_DIR/report.md" 2>/dev/null
  if grep -Eq $'\t(failed|out of time)' "$WORK/status.tsv"; then return 1; fi
  return 0
}

main
status=$?
exec >/dev/null 2>&1
wait "$TEE_PID" 2>/dev/null
exit "$status"
