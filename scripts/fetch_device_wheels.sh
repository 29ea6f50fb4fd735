#!/bin/bash
# Wheels for the lent GPU machine (Python 3.12): LLaMA-Factory's stack from ../shared/device/wheels.txt, plus what
# rocm-doctor itself and its tests need there and the image lacks (ruamel.yaml, pytest). Run from the repo root:
#   echo /.whl/ >> .git/info/exclude; bash scripts/fetch_device_wheels.sh [.whl] [--no-bnb]
# then `run` scripts/gpu_validate.sh with carry: [".whl"] (the whole tree must stay under 64 MiB).
set -euo pipefail
dest=${1:-.whl}
shared=$(cd "$(dirname "$0")/../.." && pwd)/shared/device
bash "$shared/fetch-wheels.sh" "$dest" "${2:-}"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform any -d "$dest" \
  "ruamel.yaml>=0.18" "pytest==8.4.2" pluggy iniconfig pytest-timeout packaging
du -sh "$dest"
