"""Benchmark for issue #2: `check CONFIG` wall time vs `llamafactory-cli env` (median of 5), and
`check --quick`. Figures go in the closing note; they are not tests.

Usage: python bench/bench_check.py [CONFIG]   (run inside the test env: scripts/testenv.sh)
"""

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "examples" / "llama3_lora_rocm.yaml")


def wall(cmd, n=5):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, capture_output=True)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    py = sys.executable
    lf = shutil.which("llamafactory-cli") or str(Path(py).parent / "llamafactory-cli")
    env_t = wall([lf, "env"])
    check_t = wall([py, "-m", "doctor", "check", CONFIG])
    quick_t = wall([py, "-m", "doctor", "check", "--quick", CONFIG])
    # in-process quick (without interpreter start-up), to show what the check itself costs
    sys.path.insert(0, str(ROOT))
    from doctor.preflight import run_check

    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        run_check(CONFIG, quick=True)
        ts.append(time.perf_counter() - t0)
    print(f"llamafactory-cli env        median {env_t:6.2f} s")
    print(f"rocm-doctor check CONFIG    median {check_t:6.2f} s   ratio {check_t / env_t:.2f}x (goal <= 1.0x)")
    print(f"rocm-doctor check --quick   median {quick_t:6.2f} s   (process incl. interpreter start; goal <= 0.5 s)")
    print(f"  in-process quick check    median {statistics.median(ts) * 1000:6.1f} ms")


if __name__ == "__main__":
    main()
