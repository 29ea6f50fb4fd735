"""`check CONFIG` of this checkout against another one (e.g. a `git worktree` at an earlier commit), and
`llamafactory-cli env`, alternating, median of N: how much a change costs a config that uses none of it.

Usage: python bench/compare_check.py OLD_CHECKOUT [CONFIG] [--n 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old", help="the other checkout (its doctor/ is run from its own directory)")
    ap.add_argument("config", nargs="?", default=str(ROOT / "examples" / "llama3_lora_rocm.yaml"))
    ap.add_argument("--n", type=int, default=5)
    a = ap.parse_args()
    py = sys.executable
    lf = shutil.which("llamafactory-cli") or str(Path(py).with_name("llamafactory-cli"))
    cmds = {"llamafactory-cli env": ([lf, "env"], ROOT),
            "old check": ([py, "-m", "doctor", "check", a.config], Path(a.old)),
            "new check": ([py, "-m", "doctor", "check", a.config], ROOT),
            "old --quick": ([py, "-m", "doctor", "check", "--quick", a.config], Path(a.old)),
            "new --quick": ([py, "-m", "doctor", "check", "--quick", a.config], ROOT)}
    ts: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(a.n):
        for k, (cmd, cwd) in cmds.items():
            t0 = time.perf_counter()
            subprocess.run(cmd, cwd=cwd, capture_output=True)
            ts[k].append(time.perf_counter() - t0)
    env = statistics.median(ts["llamafactory-cli env"])
    for k, v in ts.items():
        m = statistics.median(v)
        print(f"{k:22} median {m:6.2f} s  ({', '.join(f'{x:.2f}' for x in v)})  {m / env:.2f}x env")
    old, new = statistics.median(ts["old check"]), statistics.median(ts["new check"])
    print(f"new check / old check: {new / old:.3f}")


if __name__ == "__main__":
    main()
