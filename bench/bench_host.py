"""What the `platform` and `health` areas add to `check` (issue #13 goal: <= 0.5 s on this machine).

Two measurements, median of 7: (1) in-process, the two areas' checks on a context whose GPU inventory is
already read (the inventory is the `gpus` area's, which `check` always had), on this machine and on the
recorded trees of tests/fixtures/hosts; (2) as processes, `check --only gpus` against
`check --only gpus,platform,health` (interpreter start-up cancels out). Figures go in the closing note.

Usage: python bench/bench_host.py
"""

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from doctor import runner  # noqa: E402
from doctor.context import Context, Options  # noqa: E402

N = 7


def in_process(env: dict[str, str]) -> float:
    ts = []
    for _ in range(N):
        ctx = Context.build(Options(only={"platform", "health"}), env=env)
        ctx.system()  # the inventory, shared with the gpus area
        checks = [c for c in runner.load_all()[0] if c.area in ("platform", "health")]
        t0 = time.perf_counter()
        runner.run(ctx, checks=checks)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def process(only: str, env: dict[str, str]) -> float:
    ts = []
    for _ in range(N):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "doctor", "check", "--only", only], cwd=ROOT, env=env,
                       capture_output=True)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main() -> None:
    live = dict(os.environ)
    print(f"in-process platform+health, this machine:        {in_process(live) * 1000:7.1f} ms")
    for tree in sorted((ROOT / "tests" / "fixtures" / "hosts").iterdir()):
        if tree.is_dir():
            ms = in_process({**live, "ROCM_DOCTOR_SYSROOT": str(tree)}) * 1000
            print(f"in-process platform+health, {tree.name:<22}{ms:7.1f} ms")
    base = process("gpus", live)
    both = process("gpus,platform,health", live)
    print(f"process: check --only gpus {base:.3f} s, --only gpus,platform,health {both:.3f} s: "
          f"+{(both - base) * 1000:.0f} ms (goal <= 500 ms)")


if __name__ == "__main__":
    main()
