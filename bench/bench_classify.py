"""Classifier accuracy on the real failure-log corpus (tests/data/failure-corpus.jsonl), per category, and the
time per log. Figures go in the closing note; the tests assert correctness, never timings.

    python bench/bench_classify.py              # summary, per-category table, misses
    python bench/bench_classify.py --misses 0   # summary and table only

A corpus entry labelled ``other:<slug>`` is a failure outside the taxonomy: `unknown` is the right answer
for it (a confident known category is wrong). The auto-fix check compares the playbook `train` would apply
with the one the thread's fix corresponds to (``playbook_expected``), where the entry names one.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from doctor.classify import classify_text  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "failure-corpus.jsonl"


def expected(row: dict) -> str:
    return "unknown" if row["category"].startswith("other:") else row["category"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--misses", type=int, default=40, help="misses to print (default 40)")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    args = ap.parse_args()
    rows = [json.loads(x) for x in args.corpus.read_text(encoding="utf-8").splitlines() if x.strip()]
    classify_text("warm-up")  # the catalog is loaded once per process
    per: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    misses, times, wrong_known, pb_ok, pb_n = [], [], 0, 0, 0
    for r in rows:
        t0 = time.perf_counter()
        c = classify_text(r["log"])
        times.append(time.perf_counter() - t0)
        want = expected(r)
        ok = c.category == want
        per[want][0] += ok
        per[want][1] += 1
        if not ok:
            misses.append((r, c))
            if c.category != "unknown":
                wrong_known += 1
        pe = r.get("playbook_expected")
        if ok and pe and pe != "none":
            pb_n += 1
            pb_ok += (c.playbook == pe) and c.auto_fix
    n = len(rows)
    good = sum(v[0] for v in per.values())
    print(f"corpus: {n} real logs, {len(per)} categories (from {args.corpus})")
    print(f"top-1 accuracy: {good}/{n} = {good / n:.1%}; wrong known category: {wrong_known}; "
          f"unknown where a category was expected: {len(misses) - wrong_known}")
    if pb_n:
        print(f"auto-fix agrees with the thread's fix: {pb_ok}/{pb_n}")
    print(f"time per log (in-process): median {statistics.median(times) * 1000:.1f} ms, "
          f"max {max(times) * 1000:.1f} ms")
    print("\n| category | correct | logs |\n|---|---|---|")
    for cat, (ok, tot) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"| {cat} | {ok} | {tot} |")
    for r, c in misses[:args.misses]:
        print(f"\nMISS {r['id']} want {expected(r)} got {c.category} ({c.confidence}, {c.signature}) {r['url']}")
        for ev in c.evidence[:2]:
            print(f"    {ev[:160]}")
    # the CLI as a user runs it: interpreter start included
    log = ROOT / "tests" / "fixtures" / "llamafactory" / "fail-qlora-no-bitsandbytes-cpu-0.9.5.log"
    # with its bytecode compiled, as `pip install` leaves it (a PYTHONDONTWRITEBYTECODE=1 would recompile the
    # checkout's modules on every run); the first, untimed run writes it
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    walls = []
    for i in range(6):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "doctor", "explain", str(log)], cwd=ROOT, capture_output=True, env=env)
        if i:
            walls.append(time.perf_counter() - t0)
    print(f"\n`rocm-doctor explain LOG` as a process: median {statistics.median(walls):.3f} s (goal <= 0.3 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
