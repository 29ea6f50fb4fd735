"""Child processes: the environment our own helpers run with, and stopping a whole process group.

The probe worker, the demo's model builder, the torchrun launcher of ``check --distributed`` and the
training run of ``train`` are all started in their own session (process group), so one signal reaches
every descendant (torchrun's ranks, DataLoader workers) and nothing is orphaned.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)


def with_project_path(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this checkout first on PYTHONPATH, so ``python -m doctor...`` works in the examined
    Python whether or not rocm-doctor is installed there."""
    e = dict(env)
    e["PYTHONPATH"] = PROJECT_ROOT + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    return e


def kill_group(proc: subprocess.Popen, first: int = signal.SIGKILL, grace: float = 0.0,
               descendants: bool = True) -> None:
    """Signal ``proc``'s process group with ``first``; escalate to SIGTERM (after ``grace``) and SIGKILL
    (after half of it); then kill any descendant that left the group (a daemonised child)."""
    if proc.poll() is not None:
        return
    desc = []
    if descendants:
        try:
            import psutil

            desc = psutil.Process(proc.pid).children(recursive=True)
        except Exception:  # psutil.Error, or the process just ended
            desc = []
    steps = [(first, grace)]
    if first != signal.SIGKILL:
        steps += [(signal.SIGTERM, grace / 2), (signal.SIGKILL, 5.0)]
    else:
        steps = [(signal.SIGKILL, 5.0)]
    for sig, wait in steps:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            proc.wait(timeout=max(wait, 0.05))
            break
        except subprocess.TimeoutExpired:
            continue
    for p in desc:
        try:
            p.kill()
        except Exception:
            pass
