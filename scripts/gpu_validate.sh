#!/bin/bash
# One prepared run on a lent GPU machine (see ../shared/device/README.md), writing its evidence under $OUT
# (at most 8 files): the GPU test suite, the GPU-probe benchmarks, `check` on a bf16 LoRA config, `train`
# on a config with injected faults (device_map; flash_attn: fa2; QLoRA with bitsandbytes present), and
# `check --distributed` (NCCL world size 1; gloo with 2 processes on the one GPU).
#
# On the device:   bash scripts/gpu_validate.sh   (carry .whl, made by scripts/fetch_device_wheels.sh)
# Smoke test here: PY=$(which python) OUT=/tmp/gv-out bash scripts/gpu_validate.sh
set -u
OUT=${OUT:-/tmp/gpu-validate-out}
PY=${PY:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
cd "$ROOT"
if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$ROOT
else
  export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
fi
export DISABLE_VERSION_CHECK=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
W=$(mktemp -d /tmp/gv-XXXX)
LOG=$OUT/gpu-validation.log

section() { echo; echo "=== $* ($(date +%T))"; }

{
  section "machine"
  date -u; uname -a; nvidia-smi 2>/dev/null | head -20 || true
  "$PY" - <<'EOF'
import importlib.metadata as m, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "hip", getattr(torch.version, "hip", None))
print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
for p in ("transformers", "peft", "trl", "accelerate", "datasets", "llamafactory", "bitsandbytes", "flash_attn"):
    try: print(p, m.version(p))
    except Exception: print(p, None)
EOF

  section "GPU tests (pytest -m gpu)"
  if "$PY" -c "import pytest" 2>/dev/null; then
    "$PY" -m pytest -q -m gpu -p no:cacheprovider tests/ 2>&1 | tail -15
  else
    echo "pytest not installed here; GPU tests skipped"
  fi

  section "GPU probe benchmarks"
  "$PY" bench/bench_gpu.py

  section "tiny model"
  "$PY" -m doctor.demo_build "$W" && cd "$W" || exit 1
  cat > lora-bf16.yaml <<'EOF'
model_name_or_path: tiny-llama
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
dataset: demo
dataset_dir: data
template: llama3
cutoff_len: 64
output_dir: out-bf16
logging_steps: 1
max_steps: 6
per_device_train_batch_size: 2
learning_rate: 1.0e-3
bf16: true
report_to: none
EOF
  sed -e 's/out-bf16/out-faults/' lora-bf16.yaml > faults.yaml
  printf 'device_map: auto\nflash_attn: fa2\nquantization_bit: 4\nquantization_method: bnb\n' >> faults.yaml

  section "check lora-bf16.yaml"
  "$PY" -m doctor check lora-bf16.yaml --json > "$OUT/check-bf16-lora.json"; echo "exit $?"
  "$PY" -m doctor check lora-bf16.yaml --verbose | tail -40

  section "train faults.yaml (device_map, fa2, QLoRA with bitsandbytes present)"
  "$PY" -m doctor train faults.yaml --run-dir "$W/run-faults" --max-attempts 3 -q; echo "exit $?"
  cp "$W/run-faults/run.json" "$OUT/train-faults-run.json" 2>/dev/null
  cat "$W/run-faults/summary.md" 2>/dev/null

  section "check --distributed (NCCL, world size 1)"
  NPROC_PER_NODE=1 "$PY" -m doctor check lora-bf16.yaml --distributed --json > "$OUT/distributed-nccl-1.json"
  echo "exit $?"
  section "check --distributed (gloo, 2 processes)"
  NPROC_PER_NODE=2 "$PY" -m doctor check --distributed --dist-backend gloo --json \
    > "$OUT/distributed-gloo-2.json"
  echo "exit $?"
  "$PY" - "$OUT" <<'EOF'
import json, sys
for name in ("distributed-nccl-1.json", "distributed-gloo-2.json"):
    try:
        d = json.load(open(f"{sys.argv[1]}/{name}"))
    except Exception as e:
        print(name, "unreadable:", e); continue
    print(name, d["distributed"], [(c["size_bytes"], c["busbw_gbps"]) for c in d["collectives"]],
          [f["id"] for f in d["findings"] if f["id"].startswith("DIST")])
EOF
  section "done"
} 2>&1 | tee "$LOG"
