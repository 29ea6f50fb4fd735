"""`check CONFIG` cold and warm against `llamafactory-cli env` (issue #17), on a realistic config and on the
seed config, with the breakdown of where the time goes.

The realistic config: a local tiny Llama with the real Llama-3.1 tokenizer (built here), a dataset that
exists, bf16: every check runs (tokenizer and template work included). "cold" clears rocm-doctor's probe cache
and stops any warm server first (the first check in an environment); "warm" re-checks the unchanged config (the
probe cache answers); "edited" changes one training key, so LLaMA-Factory's parser runs again: "edited (warm
worker)" in a fork of the warm server the cold run left (doctor.warm), "edited (cache only)" with
ROCM_DOCTOR_WARM=0 in a fresh stack worker; `--no-cache` never reads the cache, and `--only config,template` with
it runs the stack worker's checks alone (no device worker beside it). Alternating, median of N.

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


def stop_servers() -> None:
    from doctor import warm

    warm.stop_others()
    deadline = time.monotonic() + 20
    while warm.servers() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2)  # let the stopped server's teardown (800 MiB freed) finish outside the next timing


def wait_server() -> tuple[float, float]:
    """Seconds until the warm server the cold run started listens, and its resident memory (MiB)."""
    from doctor import warm

    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        live = [(s, p) for s, p in warm.servers() if s.exists()]
        if live:
            for line in Path(f"/proc/{live[0][1]}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return time.monotonic() - t0, int(line.split()[1]) / 1024
            return time.monotonic() - t0, 0.0
        time.sleep(0.1)
    sys.exit("the warm server never listened")


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
    # both sides with their bytecode compiled, as installed: pip compiled llamafactory's in site-packages, and
    # `pip install rocm-doctor` compiles doctor's; a PYTHONDONTWRITEBYTECODE=1 here would recompile this
    # checkout's sources on every run (0.1 s in the parent alone). The untimed first run below writes them.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    py = sys.executable
    lf = shutil.which("llamafactory-cli") or str(Path(py).with_name("llamafactory-cli"))
    doctor = [py, "-m", "doctor", "check"]
    ts: dict[str, list[float]] = {}

    def add(k: str, v: float) -> None:
        ts.setdefault(k, []).append(v)

    rss: list[float] = []
    wall([*doctor, str(real), "--no-cache"], work, {**env, "ROCM_DOCTOR_WARM": "0"})  # untimed: bytecode, page cache
    for i in range(a.n):
        add("llamafactory-cli env", wall([lf, "env"], work, env))
        for name, cfg in (("realistic", real), ("seed", seed)):
            stop_servers()
            shutil.rmtree(cache / "probes", ignore_errors=True)
            add(f"{name} cold", wall([*doctor, str(cfg)], work, env))
            ready = wait_server()  # the user reads the report meanwhile; the server imports in the background
            if name == "realistic":
                rss.extend(ready)
            add(f"{name} warm", wall([*doctor, str(cfg)], work, env))
            if name == "realistic":  # one training key changed, the rest of the cache warm
                edited.write_text(json.dumps({**base, "learning_rate": 1e-4 * (i + 2)}))
                add("realistic edited (warm worker)", wall([*doctor, str(edited)], work, env))
                edited.write_text(json.dumps({**base, "learning_rate": 1e-5 * (i + 2)}))
                add("realistic edited (cache only)", wall([*doctor, str(edited)], work, {**env, "ROCM_DOCTOR_WARM": "0"}))
            stop_servers()
            add(f"{name} --no-cache", wall([*doctor, str(cfg), "--no-cache"], work, env))
            if name == "realistic":  # the stack worker's checks alone: what the device worker's contention costs
                add("realistic --no-cache, config+template only",
                    wall([*doctor, str(cfg), "--no-cache", "--only", "config,template"], work, env))
    stop_servers()
    e = statistics.median(ts["llamafactory-cli env"])
    for k, v in ts.items():
        m = statistics.median(v)
        print(f"{k:32} median {m:6.2f} s  {m / e:5.2f}x env   ({', '.join(f'{x:.2f}' for x in v)})")
    print(f"warm server: ready {statistics.median(rss[0::2]):.1f} s after the cold run; resident memory "
          f"{statistics.median(rss[1::2]):.0f} MiB")
    # the breakdown: each worker group's wall time in one cold and one warm in-process run
    from doctor.preflight import run_check

    stop_servers()
    shutil.rmtree(cache / "probes", ignore_errors=True)
    os.environ["ROCM_DOCTOR_CACHE"] = str(cache)
    os.chdir(work)
    for label, cfg in (("cold", real), ("warm", real), ("edited", edited)):
        if label == "edited":
            wait_server()
            edited.write_text(json.dumps({**base, "learning_rate": 9e-4}))
        t0 = time.perf_counter()
        c = run_check(str(cfg), env=dict(os.environ))
        total = time.perf_counter() - t0
        tm = c.ctx.facts.get("timings") or {}
        hits = c.ctx.facts.get("cache_hits") or []
        print(f"breakdown {label}: total {total:.2f} s (stack worker: {c.ctx.facts.get('warm', 'none needed')}); "
              "worker groups " + ", ".join(f"{g} {s:.2f} s" for g, s in tm.items())
              + (f"; from the cache: {', '.join(hits)}" if hits else ""))
        if label != "warm":
            print("  probes run (s): " + ", ".join(f"{n} {r.duration_s:.2f}" for n, r in c.ctx.probes.items() if n not in hits))
    stop_servers()
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
