#!/usr/bin/env bash
# Installs what the project needs on a fresh Debian machine of this kind (apt + pip).
# Idempotent and silent when everything is already present; `make` and `make test` call it first.
set -euo pipefail

APT_PACKAGES=(cmake g++ make pkg-config libopenmpi-dev openmpi-bin libcli11-dev nlohmann-json3-dev
              libpcre2-dev libgtest-dev libboost-context-dev libxxhash-dev clang libclang-rt-14-dev)
# transformers 4.x (the last series with the Flax models) + flax on the JAX above are the Hugging Face
# oracle of the generation tests: ~1 minute and ~300 MB, where torch from PyPI (with its CUDA wheels)
# takes ~6 minutes and 5.6 GB (docs/generation.md). Requirements may carry a version; the module is the name.
PIP_PACKAGES=(numpy scipy tiktoken matplotlib jax jaxlib safetensors ml_dtypes flax "transformers<5")

missing_apt=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing_apt+=("$pkg")
done
if [ ${#missing_apt[@]} -gt 0 ]; then
  echo "install_deps: installing apt packages: ${missing_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing_apt[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
missing_pip=()
for pkg in "${PIP_PACKAGES[@]}"; do
  module=${pkg%%[<>=]*}
  "$PYTHON" -c "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('$module') else 1)" 2>/dev/null \
    || missing_pip+=("$pkg")
done
if [ ${#missing_pip[@]} -gt 0 ]; then
  echo "install_deps: installing pip packages: ${missing_pip[*]}"
  "$PYTHON" -m pip install -q "${missing_pip[@]}"
fi
