"""What gathering every rank's result costs as the job grows (issue #16): N local gloo ranks, each with a
payload the size a real rank sends (its findings without evidence and its fingerprint, ~1.3 KB measured
on this machine), meet in the TCPStore rank 0 hosts, as under `srun` one task per GPU.

Reported per N (2, 8, 32 by default): the time rank 0 waited for the last rank to arrive (process start and
torch import dominate it on a 2-core machine), the time to read every payload once all arrived, and that per
rank. Usage: python bench/bench_gather.py [N ...]
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RANK = r'''
import json, os, sys
sys.path.insert(0, sys.argv[1])
from doctor.probes.collectives import probe_collectives
payload = {"rank": int(os.environ["RANK"]), "node": f"node{int(os.environ['RANK']) // 8:03d}", "host": "x",
           "fingerprint": {"torch": "2.9.1", "python": "3.11.9", "rocm": "6.4.1", "env": {"NCCL_DEBUG": "WARN"}},
           "findings": [{"id": f"T{i:03d}", "check": "torch", "severity": "ok", "title": "x" * 60, "playbook": None}
                        for i in range(12)]}
out = probe_collectives(payload, sizes=[], iters=1, timeout=300, backend="gloo")
if os.environ["RANK"] == "0":
    json.dump(out, open(sys.argv[2], "w"))
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(n: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        script, res = Path(d) / "rank.py", Path(d) / "out.json"
        script.write_text(RANK)
        port = str(free_port())
        procs = [subprocess.Popen([sys.executable, str(script), str(ROOT), str(res)],
                                  env=dict(os.environ, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r),
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(n)]
        for p in procs:
            p.wait(timeout=900)
        return json.loads(res.read_text())


def main() -> None:
    sizes = [int(x) for x in sys.argv[1:]] or [2, 8, 32]
    print("ranks  wait_for_last_s  fetch_all_s  fetch_per_rank_ms  payload_bytes  init_pg_s")
    for n in sizes:
        o = run(n)
        print(f"{n:5}  {o['wait_s']:15.2f}  {o['fetch_s']:11.4f}  {o['fetch_s'] / n * 1000:17.3f}  "
              f"{o['payload_bytes']:13}  {o.get('init_s', 0) - o.get('gather_s', 0):9.3f}")


if __name__ == "__main__":
    main()
