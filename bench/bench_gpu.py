"""Benchmarks of the GPU probes (issue #3's closing-note figures); meant for the lent GPU machine.

1. All GPU probes together (torch, bf16, attention, bitsandbytes, GPUs, memory), wall time of
   `run_check` with those areas: goal <= 15 s.
2. The bf16 probe's TFLOP/s vs a plain torch GEMM loop of the same size in the same run: goal >= 0.9x.
3. The probe's TFLOP/s as % of the SKU's peak (from the BF16 finding's evidence).

On a machine without a GPU it runs the same code on the CPU path and says so.
Usage: python bench/bench_gpu.py [--runs N]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PLAIN = r"""
import json, time, torch
dev = "cuda" if torch.cuda.is_available() else "cpu"
n, iters = (8192, 10) if dev == "cuda" else (512, 3)
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16); b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
for _ in range(3): a @ b
if dev == "cuda": torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(iters): a @ b
if dev == "cuda": torch.cuda.synchronize()
s = time.perf_counter() - t
print(json.dumps({"device": dev, "n": n, "tflops": 2 * n**3 * iters / s / 1e12}))
"""


def main() -> None:
    import argparse
    import statistics

    from doctor.preflight import run_check

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3, help="timed runs of all GPU probes (median reported)")
    runs = ap.parse_args().runs
    walls = []
    for _ in range(max(1, runs)):
        t = time.perf_counter()
        checked = run_check(None, only={"torch", "bf16", "attention", "bitsandbytes", "gpus", "memory"})
        ctx, findings = checked.ctx, checked.findings
        walls.append(time.perf_counter() - t)
    wall = statistics.median(walls)
    print(f"GPU probes together: median {wall:.2f} s wall of {len(walls)} runs "
          f"({', '.join(f'{w:.2f}' for w in walls)}; goal <= 15 s)")
    print("  last run, per probe (probes of one group run one after another in one worker; groups in parallel):")
    for name, r in ctx.probes.items():
        print(f"  probe {name:12} {r.status:8} {r.duration_s:6.2f} s")
    bf = ctx.probes.get("bf16")
    probe_tf = (bf.data or {}).get("tflops") if bf is not None and bf.ok else None
    plain = json.loads(subprocess.run([sys.executable, "-c", PLAIN], capture_output=True, text=True,
                                      check=True).stdout.strip().splitlines()[-1])
    print(f"plain torch bf16 GEMM loop ({plain['device']}, n={plain['n']}): {plain['tflops']:.2f} TFLOP/s")
    if probe_tf:
        print(f"bf16 probe: {probe_tf:.2f} TFLOP/s = {probe_tf / plain['tflops']:.2f}x the plain loop (goal >= 0.9x)"
              + ("" if plain["device"] == "cuda" else "  [CPU: sizes differ, ratio not meaningful]"))
    for f in findings:
        if f.id.startswith(("BF16", "ATTN", "BNB", "GPU", "TORCH")):
            ev = {k: v for k, v in f.evidence.items() if k in ("tflops", "peak_tflops", "fraction", "sku", "blas")}
            print(f"  {f.id} [{f.severity.value}] {f.title}" + (f"  {ev}" if ev else ""))


if __name__ == "__main__":
    main()
