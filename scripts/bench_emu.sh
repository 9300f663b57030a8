#!/usr/bin/env bash
# Builds and runs the emulation benchmark (bench_emu_emu): barrier, shuffle and launch costs and a
# LayerNorm forward on 256 x 768, printed as a Markdown table. Usage: scripts/bench_emu.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build_dir" --target bench_emu_emu -j "$(nproc)" >/dev/null
"$build_dir/bench_emu_emu"
