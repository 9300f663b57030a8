#!/usr/bin/env bash
# Packs everything the bare GPU machine lacks for scripts/gpu/check.sh into one ignored folder (default
# gpukit/, carried to the device as the ignored path `gpukit`): the GPU programs and GPU test binaries
# (built for sm_90a by the build tree), the shared libraries they load that are not on that machine's
# image (resolved with ldd, OpenMPI's plugins and help files with them), tiny-shakespeare token shards,
# the GPT-2 vocabulary files, and MANIFEST.txt (git commit, build settings, every file with its size).
#
#   scripts/gpu/pack.sh [--build-dir DIR] [--no-build] [--output DIR] [--shared DIR]
#
# --build-dir  the CMake build tree (default build/, configured here if it is not yet)
# --no-build   use the binaries already built there (the CI test: nothing is compiled a second time)
# --output     the pack folder (default gpukit/ in the repository; emptied first)
# --shared     the shared data folder with data/text/tinyshakespeare.txt and data/gpt2/ (default ../shared)
set -euo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)

# The programs and GPU test binaries check.sh runs; train_gpt2 and generate_gpt2 are user binaries in the
# repository root.
PROGRAMS=(train_gpt2 bench_kernels bench_window_attention generate_gpt2 bench_generate bench_speedrun_kernels
          bench_step)
TEST_BINARIES=(kernels_bf16_cuda gpt2_bf16_cuda train_steps_bf16_cuda emu_tests_cuda comm_collectives_cuda
  comm_trace_cuda gpt2_decoder_bf16_cuda speedrun_model_bf16_cuda modded89_model_bf16_cuda fp8_cuda
  optim_math_bf16_cuda)
# On the GPU machine's image (glibc and libstdc++ newer than Debian 12's), or found there by check.sh
# (the CUDA toolkit; NCCL in the nvidia-nccl-cu13 Python wheel; the driver): never packed.
BASE_LIBRARIES=(linux-vdso.so.1 ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1
  libresolv.so.2 libutil.so.1 libstdc++.so.6 libgcc_s.so.1 libcuda.so.1 libcudart.so.13 libcublas.so.13
  libcublasLt.so.13 libnccl.so.2)
# OpenMPI plugins that need a network stack, OpenSHMEM or PMIx are left out: one rank on one node
# (an MPI singleton) uses none of them, and their libraries are not on the GPU machine.
UNNEEDED_PLUGIN_LIBRARIES='^(libuc[mpst]|libfabric|libpsm|libinfinipath|libibverbs|librdmacm|libnl-|libefa|liboshmem|libpmix|libmunge|libnuma|libmca_common_(ucx|ofi|verbs))'
# The device tool carries the working tree (3.9 MB on 2026-12-02) and the pack together, 64 MiB at most.
MAX_PACK_MIB=56

die() {
  echo "pack.sh: $*" >&2
  exit 1
}

BUILD_DIR=$REPO/build
OUTPUT=$REPO/gpukit
SHARED=$REPO/../shared
BUILD=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --build-dir) BUILD_DIR=$(realpath -m "$2"); shift 2 ;;
    --output) OUTPUT=$(realpath -m "$2"); shift 2 ;;
    --shared) SHARED=$(realpath -m "$2"); shift 2 ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done
[[ -d $SHARED/data/gpt2 && -f $SHARED/data/text/tinyshakespeare.txt ]] ||
  die "--shared $SHARED: no data/gpt2/ and data/text/tinyshakespeare.txt there"

cache_value() {  # cache_value NAME: a variable of the build tree's CMakeCache.txt
  sed -n "s/^$1:[A-Z]*=//p" "$BUILD_DIR/CMakeCache.txt"
}

# Builds (unless --no-build) and checks that the build tree has the CUDA targets for the H200.
prepare_build() {
  if ((BUILD)); then
    # A tree configured with -DLLMC_CUDA_TESTS=OFF has no GPU test binaries: request them.
    if [[ ! -f $BUILD_DIR/CMakeCache.txt || $(cache_value LLMC_CUDA_TESTS) != ON ]]; then
      cmake -S "$REPO" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DLLMC_CUDA_TESTS=ON >/dev/null
    fi
    cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${PROGRAMS[@]}" "${TEST_BINARIES[@]}" tokenize_gpt2
  fi
  [[ -f $BUILD_DIR/CMakeCache.txt ]] || die "--build-dir $BUILD_DIR: not a CMake build tree"
  [[ -d $BUILD_DIR/CMakeFiles/kernels_bf16_cuda.dir ]] ||
    die "$BUILD_DIR has no GPU test binaries (nvcc was not found when it was configured, -DLLMC_CUDA=OFF or -DLLMC_CUDA_TESTS=OFF)"
  local architectures
  for architectures in "$(cache_value LLMC_CUDA_ARCHITECTURES)" "$(cache_value LLMC_CUDA_TEST_ARCHITECTURES)"; do
    [[ ";$architectures;" == *";90a;"* ]] ||
      die "$BUILD_DIR builds for '$architectures': the H200 needs 90a (LLMC_CUDA_ARCHITECTURES, LLMC_CUDA_TEST_ARCHITECTURES)"
  done
}

binary_path() {  # where the build puts a binary: user binaries in the repository root, the rest in the tree
  case $1 in
    train_gpt2 | tokenize_gpt2 | generate_gpt2) echo "$REPO/$1" ;;
    *) echo "$BUILD_DIR/$1" ;;
  esac
}

# Prints "soname path" for every library FILE loads (ldd: the whole closure; or LISTING, ldd's output for
# it) that is not a base library; fails naming FILE when ldd cannot resolve one here.
packable_libraries() {
  local file=$1 listing=${2:-}
  [[ -n $listing ]] || listing=$(ldd "$file") || die "ldd $file failed"
  if grep -q 'not found' <<<"$listing"; then
    die "$file: libraries not found on this machine: $(grep 'not found' <<<"$listing" | awk '{print $1}' | xargs)"
  fi
  local -a fields
  while read -r -a fields; do  # "soname => path (address)"
    [[ ${#fields[@]} -ge 3 && ${fields[1]} == '=>' ]] || continue
    [[ " ${BASE_LIBRARIES[*]} " == *" ${fields[0]} "* ]] && continue
    echo "${fields[0]} ${fields[2]}"
  done <<<"$listing"
}

copy_libraries() {  # copy_libraries FILE [LDD_OUTPUT]: its packable libraries under lib/ by soname (files, not links)
  local listing soname path
  listing=$(packable_libraries "$1" "${2:-}")  # (an assignment, so that a failure stops the script)
  while read -r soname path; do
    [[ -n $soname && ! -e $OUTPUT/lib/$soname ]] || continue
    cp -L "$path" "$OUTPUT/lib/$soname"
  done <<<"$listing"
}

# OpenMPI finds its plugins, help texts and settings through its install directories, which
# OPAL_PKGLIBDIR, OPAL_PKGDATADIR and OPAL_SYSCONFDIR move into the pack (check.sh sets them).
pack_openmpi() {
  local pkglibdir pkgdatadir sysconfdir plugin kept=0 left=0
  pkglibdir=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
  pkgdatadir=$(ompi_info --path pkgdatadir --parsable | sed -n 's/^path:pkgdatadir://p')
  sysconfdir=$(ompi_info --path sysconfdir --parsable | sed -n 's/^path:sysconfdir://p')
  [[ -d $pkglibdir ]] || die "ompi_info names no plugin directory ($pkglibdir)"
  mkdir -p "$OUTPUT/lib/openmpi" "$OUTPUT/share" "$OUTPUT/etc"
  for plugin in "$pkglibdir"/mca_*.so; do
    local libraries
    if ! libraries=$(ldd "$plugin" 2>/dev/null) || grep -q 'not found' <<<"$libraries" ||
       awk '{print $1}' <<<"$libraries" | grep -Eq "$UNNEEDED_PLUGIN_LIBRARIES"; then
      left=$((left + 1))
      continue
    fi
    cp -L "$plugin" "$OUTPUT/lib/openmpi/"
    copy_libraries "$plugin" "$libraries"
    kept=$((kept + 1))
  done
  cp -r "$pkgdatadir" "$OUTPUT/share/openmpi"
  if [[ -f $sysconfdir/openmpi-mca-params.conf ]]; then cp "$sysconfdir/openmpi-mca-params.conf" "$OUTPUT/etc/"; fi
  echo "openmpi_plugins: $kept packed, $left left out (network transports, OpenSHMEM, PMIx)" >>"$OUTPUT/MANIFEST.txt"
}

pack_data() {
  mkdir -p "$OUTPUT/data/gpt2"
  cp "$SHARED"/data/gpt2/{encoder.json,vocab.bpe,r50k_base.tiktoken} "$OUTPUT/data/gpt2/"
  local output
  output=$(python3 "$REPO/data/tinyshakespeare.py" --input "$SHARED/data/text/tinyshakespeare.txt" \
    --output-dir "$OUTPUT/data/tinyshakespeare" --tokenizer "$(binary_path tokenize_gpt2)" \
    --vocab "$SHARED/data/gpt2" 2>&1) || die "data/tinyshakespeare.py failed: $output"
}

write_manifest_head() {
  local commit dirty=""
  commit=$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)
  git -C "$REPO" diff --quiet HEAD 2>/dev/null || dirty=" (uncommitted changes)"
  {
    echo "# GPU kit for scripts/gpu/check.sh, made by scripts/gpu/pack.sh"
    echo "commit: $commit$dirty"
    echo "packed: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
    echo "nvcc: $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' || true)"
    echo "build: $BUILD_DIR; programs for $(cache_value LLMC_CUDA_ARCHITECTURES)," \
         "tests for $(cache_value LLMC_CUDA_TEST_ARCHITECTURES)"
    echo "binaries: ${PROGRAMS[*]} ${TEST_BINARIES[*]}"
  } >"$OUTPUT/MANIFEST.txt"
}

write_manifest_files() {
  local total
  total=$(du -sb "$OUTPUT" | cut -f1)
  {
    echo "total_bytes: $total"
    echo "# bytes path"
    (cd "$OUTPUT" && find . -type f ! -name MANIFEST.txt -printf '%s %P\n' | sort -k2)
  } >>"$OUTPUT/MANIFEST.txt"
  if ((total > MAX_PACK_MIB * 1024 * 1024)); then
    die "the pack is $((total / 1024 / 1024)) MiB, over the $MAX_PACK_MIB MiB limit (see $OUTPUT/MANIFEST.txt)"
  fi
  echo "pack.sh: $OUTPUT: $((total / 1024)) KiB, $(find "$OUTPUT" -type f | wc -l) files (commit $(sed -n 's/^commit: //p' "$OUTPUT/MANIFEST.txt"))"
}

main() {
  prepare_build
  local name path missing=()
  for name in "${PROGRAMS[@]}" "${TEST_BINARIES[@]}" tokenize_gpt2; do
    [[ -x $(binary_path "$name") ]] || missing+=("$(binary_path "$name")")
  done
  ((${#missing[@]} == 0)) || die "not built: ${missing[*]} (build them, or leave out --no-build)"

  # Emptied first, but only when it is a pack (or empty): never a folder that holds anything else.
  if [[ -d $OUTPUT && -n $(ls -A "$OUTPUT") && ! -f $OUTPUT/MANIFEST.txt ]]; then
    die "--output $OUTPUT is a folder that is not a pack (no MANIFEST.txt): not emptying it"
  fi
  rm -rf "$OUTPUT"
  mkdir -p "$OUTPUT/bin" "$OUTPUT/lib"
  write_manifest_head
  for name in "${PROGRAMS[@]}" "${TEST_BINARIES[@]}"; do
    path=$(binary_path "$name")
    cp "$path" "$OUTPUT/bin/$name"
    # The host symbol table only names functions in a backtrace; the device code and the dynamic symbols stay
    # (3.9 MB of the 49 MB of binaries on 2026-12-02, when the pack reached MAX_PACK_MIB; the fatbins are
    # compressed since, CMakeLists.txt: 34 MiB in all).
    strip --strip-unneeded "$OUTPUT/bin/$name" || die "strip $OUTPUT/bin/$name failed"
    copy_libraries "$path"
  done
  if [[ -e $OUTPUT/lib/libmpi.so.40 ]] || compgen -G "$OUTPUT/lib/libmpi.so.*" >/dev/null; then
    pack_openmpi
  fi
  pack_data
  write_manifest_files
}

main
