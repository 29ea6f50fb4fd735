#!/usr/bin/env bash
# Build (or reuse) the test environment: the real LLaMA-Factory stack on CPU, plus rocm-doctor
# installed editable. The venv lives OUTSIDE the clone, keyed by a hash of the pins, so CI and
# later sessions reuse it (it is ~8 GB and takes minutes to build).
# Prints the venv path on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
pins="$here/tests/requirements-stack.txt"
key=$( (cat "$pins"; python3 --version) | sha256sum | cut -c1-12)
root=${ROCM_DOCTOR_VENV_ROOT:-$HOME/.cache/rocm-doctor}
venv="$root/venv-$key"
if [[ ! -f "$venv/.complete" ]]; then
  echo "building test env $venv (first time only, a few minutes)" >&2
  rm -rf "$venv"; mkdir -p "$root"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip >&2
  # torch 2.9.1 is the newest torch with a torchaudio that llamafactory 0.9.5 can import here.
  PIP_CONSTRAINT= "$venv/bin/python" -m pip install -q -r "$pins" >&2
  touch "$venv/.complete"
fi
# the project itself, editable, without dependencies resolution touching torch
"$venv/bin/python" -m pip install -q --no-deps -e "$here" >&2
"$venv/bin/python" -m pip install -q rich psutil 'ruamel.yaml>=0.18' >&2
echo "$venv"
