#!/usr/bin/env bash
# Runs a command as the bare GPU machine would see this one: in a private mount namespace in which what
# that machine lacks is hidden: OpenMPI (with PMIx, hwloc, libevent and its programs), GoogleTest,
# Boost, the CLI11, nlohmann-json and PCRE2 headers, and every NCCL that check.sh could find (the
# system's library folders, ldconfig's cache, and the NVIDIA wheels on python3's path: site-packages,
# the user site, PYTHONPATH; LD_LIBRARY_PATH is emptied). The GPU kit's CI test runs
# `check.sh --dry-run` under it, so that a library missing from the pack fails here, not on the GPU,
# whatever this machine's Python has installed. (PCRE2's runtime library stays visible: grep needs it.)
#
#   scripts/gpu/bare_env.sh [--provide SRC:DST]... [--] COMMAND [ARGS...]
#
# --provide bind-mounts the file SRC (opened before anything is hidden) onto DST (created) after
# everything is hidden, so that what it provides is the one copy there is: how the CI test stands in
# for the nvidia-nccl-cu13 wheel with this machine's libnccl.so.2. Needs root (unshare -m); exits 77
# with a one-line reason when a private mount namespace cannot be made.
set -euo pipefail

# Basename globs hidden in each kind of directory. A hidden entry is absent from its directory, so the
# loader, its cache (whose paths then fail to open), dlopen and PATH lookups all miss it.
LIB_GLOBS="openmpi,pmix2,hwloc,ucx,libfabric,libmpi*,libopen-rte*,libopen-pal*,libmca_common_*,libompitrace*"
LIB_GLOBS+=",liboshmem*,libpmix*,libhwloc*,libevent*,libfabric*,libuc[mpst].*,libpsm*,libibverbs*,librdmacm*"
LIB_GLOBS+=",libmunge*,libgtest*,libgmock*,libboost_*,libnccl*"
BIN_GLOBS="mpirun*,mpiexec*,orted*,orterun*,ompi*,opal_*,oshrun*,mpic*,mpif*"
INCLUDE_GLOBS="CLI,nlohmann,gtest,gmock,boost,openmpi,mpi.h,pcre2*.h,nccl*.h"
SHARE_GLOBS="openmpi,pmix"
ETC_GLOBS="openmpi,pmix"

die() {
  echo "bare_env: $*" >&2
  exit 1
}

# "DIR=GLOBS" for every directory to filter, by real path (merged /usr: /lib is /usr/lib), each once.
filter_specs() {
  local dir seen=" "
  local -a specs=()
  add() {
    [[ -d $1 ]] || return 0
    local real
    real=$(realpath "$1")
    [[ $seen == *" $real "* ]] && return 0
    seen+="$real "
    specs+=("$real=$2")
  }
  for dir in /usr/lib/x86_64-linux-gnu /usr/local/lib /usr/local/lib/x86_64-linux-gnu /usr/local/cuda/lib \
             /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    add "$dir" "$LIB_GLOBS"
  done
  for dir in /usr/bin /usr/local/bin /usr/sbin; do
    add "$dir" "$BIN_GLOBS"
  done
  add /usr/include "$INCLUDE_GLOBS"
  add /usr/share "$SHARE_GLOBS"
  add /etc "$ETC_GLOBS"
  for dir in $(other_nccl_dirs); do
    add "$dir" "$LIB_GLOBS"
  done
  printf '%s\n' "${specs[@]}"
}

# Every other folder holding an NCCL that the loader or check.sh could find: ldconfig's cache, and the
# NVIDIA wheels' lib folders on python3's path (check.sh's candidate_library_dirs searches the same).
other_nccl_dirs() {
  { ldconfig -p 2>/dev/null | awk '$1 ~ /^libnccl/ && $NF ~ /^\// {print $NF}' | xargs -r -n 1 dirname
    python3 - <<'EOF_PY' 2>/dev/null
import glob, os, sys
for entry in sys.path:
    for pattern in ("nvidia/*/lib/libnccl*", "nvidia/*/*/lib/libnccl*"):
        for library in glob.glob(os.path.join(entry, pattern)):
            print(os.path.dirname(library))
EOF_PY
  } | sort -u
}

# Inside the namespace: each filtered DIR is bound to WORK/orig/N, a view of it is made in WORK/view/N
# holding every entry but the hidden ones (a symbolic link copied as it is, so that relative targets
# still resolve from DIR; anything else a link to WORK/orig/N/entry), and the view is bound over DIR.
# One Python process makes every view: a shell loop would start thousands of `ln` processes.
inside_namespace() {
  local work=$1
  shift
  mount -t tmpfs bare_env "$work"
  # Each provided file is held at WORK/provided/N while its source is still visible (it may sit in a
  # folder about to be filtered) and bound onto its destination once everything is hidden.
  local -a provided_dsts=()
  mkdir -p "$work/provided"
  while [[ ${1:-} == --provide ]]; do
    local src=${2%%:*} dst=${2#*:}
    shift 2
    [[ -f $src ]] || die "--provide: $src is not a file"
    : >"$work/provided/${#provided_dsts[@]}"
    mount --bind "$src" "$work/provided/${#provided_dsts[@]}"
    provided_dsts+=("$dst")
  done
  [[ ${1:-} == -- ]] && shift
  local -a specs
  mapfile -t specs < <(filter_specs)
  local index
  for index in "${!specs[@]}"; do
    mkdir -p "$work/orig/$index" "$work/view/$index"
    mount --bind "${specs[index]%%=*}" "$work/orig/$index"
  done
  python3 - "$work" "${specs[@]}" <<'EOF_PY'
import fnmatch, os, sys
work, specs = sys.argv[1], sys.argv[2:]
for index, spec in enumerate(specs):
    globs = spec.split("=", 1)[1].split(",")
    orig, view = f"{work}/orig/{index}", f"{work}/view/{index}"
    for entry in os.scandir(orig):
        if not any(fnmatch.fnmatchcase(entry.name, glob) for glob in globs):
            os.symlink(os.readlink(entry.path) if entry.is_symlink() else entry.path, f"{view}/{entry.name}")
EOF_PY
  for index in "${!specs[@]}"; do
    mount --bind "$work/view/$index" "${specs[index]%%=*}"
  done
  for index in "${!provided_dsts[@]}"; do
    local dst=${provided_dsts[index]}
    mkdir -p "$(dirname "$dst")"
    : >"$dst"
    mount --bind "$work/provided/$index" "$dst"
  done
  export LD_LIBRARY_PATH=
  "$@"
}

if [[ ${1:-} == --inside ]]; then
  shift
  inside_namespace "$@"
  exit $?
fi

provides=()
while [[ ${1:-} == --provide ]]; do
  [[ $# -ge 2 && $2 == *:* ]] || die "--provide needs SRC:DST"
  provides+=(--provide "$2")
  shift 2
done
[[ ${1:-} == -- ]] && shift
[[ $# -gt 0 ]] || die "usage: bare_env.sh [--provide SRC:DST]... [--] COMMAND [ARGS...]"

if ! unshare --mount --propagation private true 2>/dev/null; then
  echo "bare_env: cannot make a private mount namespace here (unshare -m needs root): skipped" >&2
  exit 77
fi
# The empty files that stand as mount points for --provide stay behind outside the namespace: removed after.
placeholders=()
for ((i = 1; i < ${#provides[@]}; i += 2)); do
  dst=${provides[i]#*:}
  [[ -e $dst ]] || placeholders+=("$dst")
done
work=$(mktemp -d /tmp/bare_env.XXXXXX)
status=0
unshare --mount --propagation private "$(realpath "$0")" --inside "$work" "${provides[@]}" -- "$@" || status=$?
rmdir "$work" 2>/dev/null || true
for dst in "${placeholders[@]}"; do
  [[ -f $dst && ! -s $dst ]] && rm -f "$dst"
done
exit "$status"
