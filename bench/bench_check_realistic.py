"""`check CONFIG` cold and warm against `llamafactory-cli env` (issue #17), on a realistic config and on the
seed config, with the breakdown of where the time goes.

The realistic config: a local tiny Llama with the real Llama-3.1 tokenizer (built here), a dataset that
exists, bf16: every check runs (tokenizer and template work included). "cold" clears rocm-doctor's probe cache
first; "warm" re-checks the unchanged config; "edited" changes one training key (the parser's verdict is
recomputed, the rest comes from the cache); `--no-cache` never reads it. Alternating, median of N.

Usage: python bench/bench_check_realistic.py [--n 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import build_tiny_model, write_dataset  # noqa: E402


def wall(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if p.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-500:]}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-check-"))
    model = build_tiny_model(work / "model", tokenizer="llama3_1")
    write_dataset(work / "data")
    real = work / "real.yaml"
    base = {"model_name_or_path": str(model), "stage": "sft", "do_train": True, "finetuning_type": "lora",
            "lora_target": "all", "dataset": "tiny", "dataset_dir": "data", "template": "llama3", "cutoff_len": 1024,
            "output_dir": "out", "per_device_train_batch_size": 1, "bf16": True, "report_to": "none"}
    real.write_text(json.dumps(base))
    edited = work / "edited.yaml"
    seed = ROOT / "examples" / "llama3_lora_rocm.yaml"
    cache = work / "cache"
    env = dict(os.environ, PYTHONPATH=str(ROOT), ROCM_DOCTOR_CACHE=str(cache))
    py = sys.executable
    lf = shutil.which("llamafactory-cli") or str(Path(py).with_name("llamafactory-cli"))
    doctor = [py, "-m", "doctor", "check"]
    ts: dict[str, list[float]] = {}

    def add(k: str, v: float) -> None:
        ts.setdefault(k, []).append(v)

    for i in range(a.n):
        add("llamafactory-cli env", wall([lf, "env"], work, env))
        for name, cfg in (("realistic", real), ("seed", seed)):
            shutil.rmtree(cache / "probes", ignore_errors=True)
            add(f"{name} cold", wall([*doctor, str(cfg)], work, env))
            add(f"{name} warm", wall([*doctor, str(cfg)], work, env))
            add(f"{name} --no-cache", wall([*doctor, str(cfg), "--no-cache"], work, env))
            if name == "realistic":  # one training key changed, the rest of the cache warm
                edited.write_text(json.dumps({**base, "learning_rate": 1e-4 * (i + 2)}))
                add("realistic edited (warm)", wall([*doctor, str(edited)], work, env))
    e = statistics.median(ts["llamafactory-cli env"])
    for k, v in ts.items():
        m = statistics.median(v)
        print(f"{k:26} median {m:6.2f} s  {m / e:5.2f}x env   ({', '.join(f'{x:.2f}' for x in v)})")
    # the breakdown: each worker group's wall time in one cold and one warm in-process run
    from doctor.preflight import run_check

    shutil.rmtree(cache / "probes", ignore_errors=True)
    os.environ["ROCM_DOCTOR_CACHE"] = str(cache)
    os.chdir(work)
    for label, cfg in (("cold", real), ("warm", real), ("edited", edited)):
        if label == "edited":
            edited.write_text(json.dumps({**base, "learning_rate": 9e-4}))
        t0 = time.perf_counter()
        c = run_check(str(cfg), env=dict(os.environ))
        total = time.perf_counter() - t0
        tm = c.ctx.facts.get("timings") or {}
        hits = c.ctx.facts.get("cache_hits") or []
        print(f"breakdown {label}: total {total:.2f} s; worker groups " + ", ".join(f"{g} {s:.2f} s" for g, s in tm.items())
              + (f"; from the cache: {', '.join(hits)}" if hits else ""))
        if label != "warm":
            print("  probes run (s): " + ", ".join(f"{n} {r.duration_s:.2f}" for n, r in c.ctx.probes.items() if n not in hits))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
