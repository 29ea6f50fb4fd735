"""The warm worker: the stack probes of a re-check without re-importing the stack.

A cold ``check`` spends most of its time importing torch, transformers and LLaMA-Factory in the stack worker.
The probe cache (:mod:`doctor.cache`) answers an unchanged config, but an edited one needs LLaMA-Factory's
parser again, and that import. So after a cold stack worker, ``check`` leaves one process behind
(:mod:`doctor._warm_main`) that has imported the stack in the examined Python, with the stack worker's environment,
and serves the next run's stack probes from a fork of that state: the same code on the same imported modules
as a fresh worker, in its own process with the same timeouts, but without the import.

It is keyed like the cache (the examined Python, its installed distributions and their mtimes, the probe code,
the environment, the working directory): a server asked with another key exits, and the run falls back to a
cold worker. One server per user (a new one stops the old), under ``/tmp/rocm-doctor-<uid>/`` (mode 0700, the
peer's uid checked), gone after ``ROCM_DOCTOR_WARM_IDLE`` seconds without a request (default 600). Off with
``--no-cache``, ``ROCM_DOCTOR_WARM=0`` or ``ROCM_DOCTOR_NO_CACHE=1``; ``train`` uses a server it finds but starts
none (training wants the memory). Not on platforms without ``fork``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from doctor.cache import _digest, stable_env

IDLE_DEFAULT = 600.0
CONNECT_TIMEOUT = 5.0


def idle_seconds(env: dict[str, str]) -> float:
    try:
        return max(0.0, float(env.get("ROCM_DOCTOR_WARM_IDLE", IDLE_DEFAULT)))
    except ValueError:
        return IDLE_DEFAULT


def enabled(env: dict[str, str]) -> bool:
    return (hasattr(os, "fork") and hasattr(socket, "AF_UNIX") and env.get("ROCM_DOCTOR_WARM", "1") != "0"
            and env.get("ROCM_DOCTOR_NO_CACHE") != "1" and idle_seconds(env) > 0)


def run_dir() -> Path | None:
    """``/tmp/rocm-doctor-<uid>``, ours and private, or None (then no warm worker)."""
    d = Path("/tmp") / f"rocm-doctor-{os.getuid()}"
    try:
        d.mkdir(mode=0o700, exist_ok=True)
        st = d.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None  # somebody else's, or readable by others: never serve through it
    except OSError:
        return None
    return d


def server_key(fingerprint: str, python: str, child_env: dict[str, str], modules: list[str]) -> str:
    return _digest(["warm-1", fingerprint, os.path.abspath(python), stable_env(child_env), sorted(modules),
                    os.getcwd()])


class WarmProc:
    """A worker forked by the warm server, seen like the ``subprocess.Popen`` of a cold worker: ``pid`` (a session
    leader, so ``os.killpg`` reaches it), ``poll()``, ``wait()``, ``returncode``."""

    def __init__(self, conn: socket.socket, pid: int, rest: bytes) -> None:
        self.conn, self.pid, self._buf, self.returncode = conn, pid, rest, None

    def _read(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        self.conn.settimeout(timeout)
        try:
            while b"\n" not in self._buf:
                chunk = self.conn.recv(4096)
                if not chunk:  # the handler died without a word: the worker is as good as killed
                    self.returncode = -signal.SIGKILL
                    break
                self._buf += chunk
        except (TimeoutError, BlockingIOError):
            return
        except OSError:
            self.returncode = -signal.SIGKILL
        if self.returncode is None and b"\n" in self._buf:
            line = self._buf.split(b"\n", 1)[0]
            try:
                self.returncode = int(json.loads(line)["rc"])
            except (ValueError, KeyError, TypeError):
                self.returncode = -signal.SIGKILL
        if self.returncode is not None:
            with contextlib.suppress(OSError):
                self.conn.close()

    def poll(self) -> int | None:
        self._read(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired("warm worker", timeout or 0)
            self._read(left if left is None else min(left, 0.5))
        return self.returncode


class Warm:
    """One run's handle on the warm server for the stack group."""

    def __init__(self, python: str, fingerprint: str, child_env: dict[str, str], modules: list[str],
                 start: bool = True) -> None:
        self.python, self.env, self.modules, self.may_start = python, child_env, sorted(set(modules)), start
        self.key = server_key(fingerprint, python, child_env, self.modules)
        d = run_dir()
        self.path = d / f"{self.key[:24]}.sock" if d is not None else None
        self.served = 0

    def spawn(self, spec: Path, stderr: Path) -> WarmProc | None:
        """A worker for ``spec`` forked by a live server with our key, or None (no server: start a cold one)."""
        if self.path is None or not self.path.exists():
            return None
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(CONNECT_TIMEOUT)
            conn.connect(str(self.path))
            req = {"key": self.key, "spec": str(spec), "stderr": str(stderr), "cwd": os.getcwd(), "env": self.env}
            conn.sendall(json.dumps(req).encode() + b"\n")
            buf = b""
            while b"\n" not in buf:
                chunk = conn.recv(4096)
                if not chunk:
                    raise OSError("closed")
                buf += chunk
            line, rest = buf.split(b"\n", 1)
            pid = json.loads(line).get("pid")
            if not isinstance(pid, int):
                raise OSError("stale")
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                conn.close()
            return None
        self.served += 1
        return WarmProc(conn, pid, rest)

    def start(self) -> bool:
        """Leave a server behind for the next run (after a cold stack worker): one per user, detached, silent."""
        if self.path is None or not self.may_start:
            return False
        if self.path.with_name(self.path.name + ".failed").exists():
            return False  # this stack failed to import in a server: cold workers report it (and others live on)
        stop_others(self.path.parent, keep=self.path)
        if any(sock == self.path for sock, _ in servers(self.path.parent)):
            return False  # ours is still importing (started by a run a moment ago)
        try:
            proc = subprocess.Popen([self.python, "-m", "doctor._warm_main", str(self.path), self.key,
                                     str(idle_seconds(self.env)), *self.modules],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    env=self.env, cwd=os.getcwd(), start_new_session=True, close_fds=True)
            # its pid file at once (the server writes the same when it starts): a run that stops servers a moment
            # later must see this one too
            tmp = self.path.with_name(f"{self.path.name}.pid.{os.getpid()}")
            tmp.write_text(str(proc.pid))
            os.replace(tmp, self.path.with_name(self.path.name + ".pid"))
        except OSError:
            return False
        return True


def _is_server(pid: int) -> bool:
    try:
        return b"doctor._warm_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def servers(d: Path | None = None) -> list[tuple[Path, int]]:
    """The live warm servers of this user: (socket, pid)."""
    d = d or run_dir()
    out = []
    for pidfile in d.glob("*.sock.pid") if d is not None else []:
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            continue
        if _is_server(pid):
            out.append((pidfile.with_suffix(""), pid))
        else:  # a server that was killed outright leaves its names behind
            for stale in (pidfile, pidfile.with_suffix("")):
                with contextlib.suppress(OSError):
                    stale.unlink()
    return out


def stop_others(d: Path | None = None, keep: Path | None = None) -> int:
    """Stop every warm server of this user but the one at ``keep``; how many were stopped."""
    n = 0
    for sock, pid in servers(d):
        if keep is not None and sock == keep:
            continue
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
            n += 1
    return n
