"""The demo run of ``rocm-doctor demo``: a tiny Llama, a dataset and a config with faults injected.

The model is built by :mod:`doctor.demo_model` in a child process of this Python (it needs torch,
transformers and llamafactory; the doctor itself never imports them). The config injects faults on
purpose (``device_map: auto`` from the widely shared ROCm guide; QLoRA, which fails without a working
bitsandbytes), so ``train`` without preflight meets each as a real LLaMA-Factory failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from doctor.cache import cache_dir
from doctor.config import InputError
from doctor.procs import with_project_path

DEMO_YAML = """\
# rocm-doctor demo: a LoRA SFT run with two faults injected on purpose.
### model
model_name_or_path: tiny-llama
device_map: auto  # fault 1: from a widely shared ROCm guide; LLaMA-Factory rejects the key

### method
stage: sft
do_train: true
finetuning_type: lora
lora_target: all
quantization_bit: 4  # fault 2: QLoRA; fails where bitsandbytes has no working GPU library (e.g. a CPU)

### dataset
dataset: demo
dataset_dir: data
template: llama3
cutoff_len: 64

### output
output_dir: saves/demo
logging_steps: 1
save_steps: 4
report_to: none

### train
per_device_train_batch_size: 2
gradient_accumulation_steps: 1
learning_rate: 1.0e-3
max_steps: 8
"""


@dataclass
class Demo:
    base: Path
    config: Path
    model: str
    tokenizer: str


def prepare(base: Path) -> Demo:
    """Build the model and dataset in ``base`` (new or empty) and write ``demo.yaml``. Raises InputError for
    an unusable directory, RuntimeError when the model cannot be built (no torch/transformers here)."""
    if base.exists() and not base.is_dir():
        raise InputError(f"{base} is not a directory; pass a new or empty --dir")
    if base.exists() and any(base.iterdir()) and not (base / "demo.yaml").exists():
        raise InputError(f"{base} is not empty; pass a new or empty --dir")
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create {base}: {e.strerror or e}") from None
    tok = cache_dir() / "tokenizers" / "llama3"
    p = subprocess.run([sys.executable, "-m", "doctor.demo_model", str(base), str(tok)], capture_output=True,
                       text=True, timeout=600, env=with_project_path(dict(os.environ)))
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["?"])[-1]
        raise RuntimeError(tail)
    info = json.loads(p.stdout.strip().splitlines()[-1])
    cfg = base / "demo.yaml"
    cfg.write_text(DEMO_YAML, encoding="utf-8")
    return Demo(base, cfg, info["model"], info["tokenizer"])
