"""Parent side of the isolated probe worker.

Everything that imports torch, transformers, llamafactory, bitsandbytes, flash_attn or amdsmi, or
runs a GPU kernel, runs here in a child process of the *examined* Python, with a timeout per
probe. A segfault, a hang or a broken import becomes a :class:`ProbeResult` with a status, never a
crash of the doctor; the probes after the failed one run in a fresh worker.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor.procs import kill_group, with_project_path
from doctor.warm import Warm, WarmProc


@dataclass
class ProbeSpec:
    """A function ``module.func(**params)`` to run in a worker; its return value must be JSON-able."""

    name: str
    module: str
    func: str
    params: dict[str, Any] = field(default_factory=dict)
    timeout: float = 60.0
    group: str = "device"  # probes of one group share a worker (one torch import)
    # "pure": the answer is a function of the examined Python, the params, the env and ``inputs`` (kept between
    # runs); "nogpu": pure only on a machine without a GPU (torch build facts, CPU kernels); "": never kept
    # (GPU numerics, collectives, anything that reads a device)
    cache: str = ""
    inputs: list[str] = field(default_factory=list)  # files and directories the probe reads


@dataclass
class ProbeResult:
    name: str
    status: str  # ok | error | import_error | crashed | timeout | not_run
    data: Any = None
    error: str = ""
    traceback: str = ""
    duration_s: float = 0.0
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def evidence(self) -> dict[str, Any]:
        ev: dict[str, Any] = {"probe": self.name, "status": self.status}
        if self.error:
            ev["error"] = self.error
        if self.traceback:
            ev["traceback"] = self.traceback[-2000:]
        if self.stderr_tail:
            ev["stderr_tail"] = self.stderr_tail
        return ev


def _read_records(path: Path) -> list[dict[str, Any]]:
    recs = []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return recs
    for line in text.splitlines():
        try:
            recs.append(json.loads(line))
        except ValueError:
            continue  # a torn last line from a killed worker
    return recs


def _tail(path: Path, n: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _kill_group(proc: subprocess.Popen | WarmProc) -> None:
    kill_group(proc, signal.SIGKILL, descendants=False)


def worker_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a worker runs with: ``env`` (default ours), this checkout importable, the Hub offline."""
    child_env = with_project_path(env if env is not None else dict(os.environ))
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    child_env["HF_HUB_OFFLINE"] = "1"  # a probe must never reach for the Hub
    child_env["TRANSFORMERS_OFFLINE"] = "1"
    return child_env


def run_probes(specs: list[ProbeSpec], python: str | None = None,
               env: dict[str, str] | None = None, warm: Warm | None = None) -> dict[str, ProbeResult]:
    """Run probes of one group in as few worker processes as possible.

    One worker runs the probes in order. If it dies (signal, non-zero exit) or a probe exceeds its
    timeout, the in-flight probe gets ``crashed``/``timeout`` and a fresh worker continues with the rest.
    With ``warm`` (:mod:`doctor.warm`), each worker is a fork of a live warm server when one answers, the
    same worker without the imports; otherwise a fresh process.
    """
    python = python or sys.executable
    results: dict[str, ProbeResult] = {}
    pending = list(specs)
    child_env = worker_env(env)
    with tempfile.TemporaryDirectory(prefix="rocm-doctor-") as tmp:
        attempt = 0
        while pending:
            attempt += 1
            res_path = Path(tmp, f"results-{attempt}.jsonl")
            spec_path = Path(tmp, f"spec-{attempt}.json")
            err_path = Path(tmp, f"stderr-{attempt}.txt")
            spec_path.write_text(json.dumps({
                "results": str(res_path),
                "probes": [{"name": s.name, "module": s.module, "func": s.func, "params": s.params}
                           for s in pending],
            }))
            res_path.touch()
            by_name = {s.name: s for s in pending}
            with open(err_path, "wb") as err:
                try:
                    proc: subprocess.Popen | WarmProc | None = warm.spawn(spec_path, err_path) if warm else None
                    if proc is None:
                        proc = subprocess.Popen(
                            [python, "-m", "doctor._worker_main", str(spec_path)],
                            stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=child_env,
                            cwd=os.getcwd(), start_new_session=True)
                except OSError as e:
                    for s in pending:
                        results[s.name] = ProbeResult(s.name, "not_run", error=f"cannot start {python}: {e}")
                    return results
                current: str | None = None
                started = time.monotonic()
                done: set[str] = set()
                failed_name: str | None = None
                while True:
                    rc = proc.poll()
                    for rec in _read_records(res_path):
                        n = rec.get("name")
                        if rec.get("event") == "start" and n not in done and n != current:
                            current, started = n, time.monotonic()
                        elif rec.get("event") == "result" and n not in done:
                            done.add(n)
                            results[n] = ProbeResult(n, rec["status"], data=rec.get("data"),
                                                     error=rec.get("error", ""),
                                                     traceback=rec.get("traceback", ""),
                                                     duration_s=rec.get("duration_s", 0.0))
                            if n == current:
                                current = None
                    if rc is None and len(done) == len(by_name):
                        # all results are in: do not wait for the interpreter's teardown
                        try:
                            proc.wait(timeout=2)
                        except subprocess.TimeoutExpired:
                            _kill_group(proc)
                        break
                    if rc is not None:
                        if current is not None and current not in done:
                            failed_name = current
                            sig = -rc if rc < 0 else None
                            what = f"killed by signal {signal.Signals(sig).name}" if sig else f"exit code {rc}"
                            results[current] = ProbeResult(
                                current, "crashed", error=f"worker {what} while running this probe",
                                duration_s=round(time.monotonic() - started, 3),
                                stderr_tail=_tail(err_path))
                        break
                    if current is not None and time.monotonic() - started > by_name[current].timeout:
                        _kill_group(proc)
                        failed_name = current
                        results[current] = ProbeResult(
                            current, "timeout",
                            error=f"no result after {by_name[current].timeout:.0f} s; worker killed",
                            duration_s=round(time.monotonic() - started, 3), stderr_tail=_tail(err_path))
                        break
                    if current is None and rc is None and time.monotonic() - started > 30 and not done:
                        # the interpreter itself does not start a probe (stuck site import?)
                        _kill_group(proc)
                        for s in pending:
                            results[s.name] = ProbeResult(s.name, "not_run", error="worker did not start",
                                                          stderr_tail=_tail(err_path))
                        return results
                    time.sleep(0.02)
            remaining = [s for s in pending if s.name not in results]
            if isinstance(proc, WarmProc) and failed_name is None and not done:
                warm = None  # the fork never reached a probe (its directory gone?): the same probes, cold
                continue
            if failed_name is None and remaining:
                # the worker exited cleanly without running them: the interpreter is unusable
                for s in remaining:
                    results[s.name] = ProbeResult(s.name, "not_run", error="worker exited early",
                                                  stderr_tail=_tail(err_path))
                remaining = []
            pending = remaining
    return results
