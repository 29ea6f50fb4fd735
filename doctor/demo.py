"""``rocm-doctor demo``: watch fail -> fix -> retry -> success on a CPU in about a minute.

Builds a tiny Llama and dataset in a temporary directory (``doctor.demo_build`` in a child process:
it needs torch, transformers and llamafactory in this Python), writes a training YAML with faults
injected on purpose (``device_map: auto`` from the widely shared ROCm guide; QLoRA, which fails
without a working bitsandbytes), and runs ``train`` on it without preflight, so every fault shows
up as a real LLaMA-Factory failure that the supervisor classifies and fixes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from doctor.config import InputError

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


def cmd_demo(args: Any) -> int:
    from doctor.cli import _console
    from doctor.supervise import Supervisor

    con = _console()
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="rocm-doctor-demo-"))
    if base.exists() and not base.is_dir():
        raise InputError(f"{base} is not a directory; pass a new or empty --dir")
    if base.exists() and any(base.iterdir()) and not (base / "demo.yaml").exists():
        raise InputError(f"{base} is not empty; pass a new or empty --dir")
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create {base}: {e.strerror or e}") from None
    con.print(f"[bold]rocm-doctor demo[/] in {base}: building a tiny Llama and a dataset ...")
    root = str(Path(__file__).resolve().parent.parent)
    p = subprocess.run([sys.executable, "-m", "doctor.demo_build", str(base)], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "PYTHONPATH": root})
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["?"])[-1]
        con.print(f"[red]Could not build the demo model[/] (the demo needs torch, transformers and llamafactory "
                  f"in {sys.executable}): {tail}")
        return 1
    info = json.loads(p.stdout.strip().splitlines()[-1])
    con.print(f"  model: {info['model']} (tokenizer: {info['tokenizer']})")
    cfg = base / "demo.yaml"
    cfg.write_text(DEMO_YAML, encoding="utf-8")
    con.print(f"  config with injected faults: {cfg}\n")
    sup = Supervisor(cfg, run_dir=base / "run", max_attempts=args.max_attempts, preflight=False, quiet=not args.verbose,
                     console=con, cwd=base)
    code = sup.run()
    con.print(f"\nYour demo.yaml is unchanged; every attempt's config, log and run.json are in {base / 'run'}.")
    return code


def register(sub: Any) -> None:
    d = sub.add_parser("demo", help="fail -> fix -> retry -> success on a tiny model (CPU, about a minute)")
    d.add_argument("--dir", help="where to build the demo (default: a new temporary directory)")
    d.add_argument("--max-attempts", type=int, default=4, help="launches at most (default 4)")
    d.add_argument("--verbose", "-v", action="store_true", help="echo LLaMA-Factory's output")
    d.set_defaults(func=cmd_demo)
