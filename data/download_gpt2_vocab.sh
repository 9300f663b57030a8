#!/usr/bin/env bash
# Downloads GPT-2's BPE vocabulary (encoder.json, vocab.bpe, r50k_base.tiktoken) into DIR
# (default: ../shared/data/gpt2 next to this repository) and checks each file's sha256.
# A file already present with the right checksum is kept; a wrong one is never left in place.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$repo_root/../shared/data/gpt2}"
mkdir -p "$dir"

# name | url | sha256 (the published files; the same hashes tiktoken pins)
files=(
  "encoder.json|https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json|196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"
  "vocab.bpe|https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe|1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
  "r50k_base.tiktoken|https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken|306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
)

fetch() {  # fetch URL OUTPUT
  if command -v curl >/dev/null 2>&1; then
    curl --fail --location --silent --show-error --retry 3 -o "$2" "$1"
  elif command -v wget >/dev/null 2>&1; then
    wget --quiet --tries=3 -O "$2" "$1"
  else
    echo "download_gpt2_vocab.sh: need curl or wget" >&2
    return 1
  fi
}

for entry in "${files[@]}"; do
  IFS='|' read -r name url sha <<<"$entry"
  target="$dir/$name"
  if [[ -f "$target" ]] && echo "$sha  $target" | sha256sum --check --status; then
    echo "$target: present, sha256 ok"
    continue
  fi
  tmp="$target.tmp.$$"
  trap 'rm -f "$tmp"' EXIT
  if ! fetch "$url" "$tmp"; then
    echo "download_gpt2_vocab.sh: $url: download failed (offline?)" >&2
    exit 1
  fi
  if ! echo "$sha  $tmp" | sha256sum --check --status; then
    echo "download_gpt2_vocab.sh: $url: sha256 mismatch (want $sha, got $(sha256sum "$tmp" | cut -d' ' -f1))" >&2
    exit 1
  fi
  mv "$tmp" "$target"
  trap - EXIT
  echo "$target: downloaded, sha256 ok"
done
