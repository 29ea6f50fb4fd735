"""Benchmarks of `rocm-doctor train` (issue #4's closing-note figures), on the tiny CPU model.

1. Supervisor overhead per attempt: wall of `rocm-doctor train --no-preflight` minus the child's wall
   (the attempt's duration_s), and vs. `llamafactory-cli train` run directly on the same config.
2. Divergence detection delay, in logging steps (detected_at - diverged_at), and how many steps the
   child ran past the detection before it stopped.
3. Steps lost by a SIGKILL after the first checkpoint (attempt 1's last logged step minus the step
   the retry resumed from).
4. The hang watchdog's detection delay: a stand-in launcher that logs three steps and blocks, under
   `--stall-timeout 5`: seconds from its last step to the stop, minus the timeout.

Usage (inside the test venv): python bench/bench_train.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import build_tiny_model, write_dataset  # noqa: E402


def cfg(model: Path, **over) -> dict:
    c = {"model_name_or_path": str(model), "stage": "sft", "do_train": True, "finetuning_type": "lora",
         "lora_target": "all", "dataset": "tiny", "dataset_dir": "data", "template": "llama3", "cutoff_len": 64,
         "output_dir": "out", "logging_steps": 1, "save_steps": 2, "per_device_train_batch_size": 2,
         "learning_rate": 1e-3, "max_steps": 6, "report_to": "none"}
    c.update(over)
    return c


def fresh(work: Path) -> None:
    for d in ("out", "run"):
        shutil.rmtree(work / d, ignore_errors=True)


def doctor(work: Path, config: Path, *args: str, popen: bool = False):
    cmd = [sys.executable, "-m", "doctor", "train", str(config), "--run-dir", str(work / "run"), "-q", *args]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if popen:
        return subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-train-"))
    model = build_tiny_model(work / "model")
    write_dataset(work / "data")
    base = work / "base.yaml"
    base.write_text(json.dumps(cfg(model)))
    lf = str(Path(sys.executable).with_name("llamafactory-cli"))

    direct, wrapped, child = [], [], []
    for _ in range(a.repeat):
        fresh(work)
        t = time.monotonic()
        subprocess.run([lf, "train", str(base)], cwd=work, capture_output=True, check=True)
        direct.append(time.monotonic() - t)
        fresh(work)
        t = time.monotonic()
        r = doctor(work, base, "--no-preflight")
        wrapped.append(time.monotonic() - t)
        assert r.returncode == 0, r.stdout[-2000:]
        child.append(json.loads((work / "run" / "run.json").read_text())["attempts"][0]["duration_s"])
    over = [w - c for w, c in zip(wrapped, child, strict=True)]
    print(f"llamafactory-cli train direct      median {statistics.median(direct):6.2f} s  {[round(x, 2) for x in direct]}")
    print(f"rocm-doctor train --no-preflight   median {statistics.median(wrapped):6.2f} s  {[round(x, 2) for x in wrapped]}")
    print(f"  child's wall (duration_s)        median {statistics.median(child):6.2f} s")
    print(f"  supervisor overhead per attempt  median {statistics.median(over):6.2f} s  "
          f"(vs direct: {statistics.median(wrapped) - statistics.median(direct):+.2f} s)")

    fresh(work)
    div = work / "div.yaml"
    div.write_text(json.dumps(cfg(model, learning_rate=1000.0, max_steps=40)))
    r = doctor(work, div, "--no-preflight", "--max-attempts", "1")
    att = json.loads((work / "run" / "run.json").read_text())["attempts"][0]
    st = att["steps"]
    print(f"divergence: {att['early_stop']}; diverged_at {st['diverged_at']}, detected_at {st['detected_at']} "
          f"-> delay {st['detected_at'] - st['diverged_at']} logging step(s); child's last logged step {st['end']} "
          f"of {st['total']}")

    lost = []
    for _ in range(a.repeat):
        fresh(work)
        kc = work / "kill.yaml"
        kc.write_text(json.dumps(cfg(model, max_steps=60, save_steps=5)))
        p = doctor(work, kc, "--no-preflight", popen=True)
        ck = work / "out" / "checkpoint-5" / "trainer_state.json"
        while not ck.is_file():
            time.sleep(0.02)
        import psutil

        psutil.Process(p.pid).children()[0].send_signal(signal.SIGKILL)
        p.wait(timeout=300)
        run = json.loads((work / "run" / "run.json").read_text())
        a1, a2 = run["attempts"][:2]
        resumed = int(a2["resumed_from"].rsplit("-", 1)[1])
        lost.append(a1["steps"]["end"] - resumed)
        assert run["final_step"] == 60
    print(f"steps lost by SIGKILL after checkpoint-5: {lost} (attempt 1's last logged step - resumed checkpoint; "
          f"the tiny model runs ~6 steps/s, so this is the kill latency in steps)")
    delays = []
    hang = work / "hang.py"
    hang.write_text("import json, sys, time, pathlib\nout = pathlib.Path('out'); out.mkdir(exist_ok=True)\n"
                    "for n in (1, 2, 3):\n"
                    "    open(out / 'trainer_log.jsonl', 'a').write(json.dumps({'current_steps': n, 'total_steps': 9,"
                    " 'loss': 1.0}) + '\\n')\n    time.sleep(0.2)\ntime.sleep(600)\n")
    for _ in range(a.repeat):
        fresh(work)
        r = doctor(work, base, "--no-preflight", "--max-attempts", "1", "--stall-timeout", "5",
                   "--launcher", f"{sys.executable} {hang}")
        h = json.loads((work / "run" / "run.json").read_text())["attempts"][0]["hang"]
        delays.append(h["quiet_s"] - 5)
    print(f"hang watchdog, --stall-timeout 5: detected {[round(d, 2) for d in delays]} s after the timeout "
          f"(median {statistics.median(delays):.2f} s; the watchdog reads CPU once a second)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
