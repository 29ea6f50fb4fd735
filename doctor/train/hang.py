"""Evidence of a hung attempt, gathered before the process group is stopped, and what it points at.

What a support engineer asks for first: the process tree with each process's state and kernel wait channel
(``/proc/PID/wchan``: ``futex_wait_queue`` for a Python thread blocked on a lock, ``ep_poll`` for RCCL's
proxy or a socket wait, ``pipe_read`` for a DataLoader), a ``py-spy dump`` of every Python rank when py-spy
is installed (where each thread sits: an ``all_reduce``/``barrier`` is a collective that never completed),
the GPUs' last sample, the last log lines and the amdgpu lines of the kernel log. Written to
``attempt-N.hang.txt`` (and ``hang`` in run.json); nothing here decides anything.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from doctor.host import Host

COLLECTIVE = re.compile(r"all_reduce|allreduce|all_gather|allgather|reduce_scatter|broadcast|barrier|"
                        r"ProcessGroupNCCL|c10d|nccl|rccl|_wait\b|wait_stream|synchronize", re.I)
DATALOADER = re.compile(r"_MultiProcessingDataLoaderIter|_try_get_data|multiprocessing/queues|dataloader", re.I)
PYSPY_TIMEOUT = 20.0


def process_tree(pid: int) -> list[dict[str, Any]]:
    """The training command and its descendants: pid, ppid, name, state, wchan, CPU seconds, command line."""
    try:
        import psutil

        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except Exception:
        return []
    out = []
    for p in procs:
        try:
            with p.oneshot():
                t = p.cpu_times()
                d = {"pid": p.pid, "ppid": p.ppid(), "name": p.name(), "state": p.status(),
                     "cpu_s": round(t.user + t.system, 2), "threads": p.num_threads(),
                     "cmdline": " ".join(p.cmdline())[:300]}
        except Exception:  # noqa: S112 - exited meanwhile
            continue
        try:
            d["wchan"] = Path(f"/proc/{p.pid}/wchan").read_text().strip() or "-"
        except OSError:
            d["wchan"] = "?"
        out.append(d)
    return out


def py_spy(tree: list[dict[str, Any]], env: dict[str, str] | None = None) -> dict[int, str]:
    """``py-spy dump --pid`` of every Python process of the tree (nothing without py-spy; never fatal)."""
    exe = shutil.which("py-spy", path=(env or {}).get("PATH"))
    if exe is None:
        return {}
    out = {}
    for p in tree:
        if "python" not in p["name"].lower() and "python" not in p["cmdline"].split(" ")[0].lower():
            continue
        try:
            r = subprocess.run([exe, "dump", "--pid", str(p["pid"])], capture_output=True, text=True,
                               timeout=PYSPY_TIMEOUT, stdin=subprocess.DEVNULL)
            out[p["pid"]] = (r.stdout or r.stderr)[-20000:]
        except (OSError, subprocess.TimeoutExpired) as e:
            out[p["pid"]] = f"py-spy failed: {e}"
    return out


def amdgpu_dmesg_tail(env: dict[str, str] | None = None, n: int = 40) -> list[str] | str:
    """The amdgpu/kfd lines of the kernel log (through the host layer), or why they are unavailable."""
    host = Host.from_env(env)
    if not host.which("dmesg"):
        return "dmesg not installed"
    r = host.run(["dmesg"])
    if not r.ok or r.denied:
        return "dmesg not readable without privileges"
    return [ln for ln in r.stdout.splitlines() if "amdgpu" in ln.lower() or "kfd" in ln.lower()][-n:]


def suspect(tree: list[dict[str, Any]], dumps: dict[int, str]) -> str:
    """Where the ranks sit: ``collective`` (RCCL/NCCL first), ``dataloader``, or ``unknown``."""
    text = "\n".join(dumps.values())
    if COLLECTIVE.search(text):
        return "collective"
    if DATALOADER.search(text):
        return "dataloader"
    return "unknown"


def gather(pid: int, *, log_tail: list[str], gpus: list[dict[str, Any]], env: dict[str, str] | None,
           reason: str) -> dict[str, Any]:
    tree = process_tree(pid)
    dumps = py_spy(tree, env)
    return {"reason": reason, "processes": tree, "py_spy": {str(k): v for k, v in dumps.items()},
            "py_spy_available": bool(dumps) or shutil.which("py-spy") is not None, "gpus": gpus,
            "log_tail": log_tail[-50:], "dmesg": amdgpu_dmesg_tail(env), "suspect": suspect(tree, dumps)}


def write(path: Path, ev: dict[str, Any]) -> None:
    lines = [f"# hang: {ev['reason']}", f"suspect: {ev['suspect']}", "", "## processes",
             "pid     ppid    state      wchan                    cpu_s  thr  command"]
    for p in ev["processes"]:
        lines.append(f"{p['pid']:<7} {p['ppid']:<7} {p['state']:<10} {p['wchan'][:24]:<24} {p['cpu_s']:>6} "
                     f"{p['threads']:>4}  {p['cmdline'][:160]}")
    lines += ["", "## py-spy dump"]
    if ev["py_spy"]:
        for pid, dump in ev["py_spy"].items():
            lines += [f"### pid {pid}", dump]
    else:
        lines.append("(py-spy is not installed: `pip install py-spy` to see where every rank sits)")
    lines += ["", "## GPUs (last sample)"] + ([str(g) for g in ev["gpus"]] or ["(no GPU sample)"])
    lines += ["", "## last log lines"] + ev["log_tail"]
    dm = ev["dmesg"] if isinstance(ev["dmesg"], list) else [ev["dmesg"]]
    lines += ["", "## amdgpu kernel messages"] + (dm or ["(none)"])
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
