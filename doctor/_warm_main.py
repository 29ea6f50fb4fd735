"""Child side of the warm worker (:mod:`doctor.warm`). Standard library only.

Run as ``python -m doctor._warm_main SOCKET KEY IDLE MODULE...`` in the *examined* Python, with the environment
of the stack worker (GPUs hidden). It imports the probe modules and the libraries they name in ``PRELOAD``
(torch, transformers, LLaMA-Factory: the seconds a cold worker spends), then waits on a Unix socket. Each request
is served by a fork of this pristine, imported state: the fork becomes a session leader, takes the request's
working directory, environment and stderr file, and runs :func:`doctor._worker_main.main` on the request's spec,
exactly as a freshly started worker would. So a probe that crashes or hangs takes its fork down, never the server,
and no probe sees what an earlier one changed.

It serves only requests whose key (examined Python, its installed packages, the probe code, the environment)
equals its own: any other key makes it exit (the environment it imported has changed). It exits when idle for
IDLE seconds, when an import fails (a broken stack is examined by a cold worker, which reports it), and on
SIGTERM.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import struct
import sys


def _preload(modules: list[str]) -> bool:
    for name in modules:
        mod = importlib.import_module(name)  # our probe modules: standard library at import time
        for lib in getattr(mod, "PRELOAD", ()):
            try:
                importlib.import_module(lib)
            except ModuleNotFoundError as e:
                if e.name != lib.split(".")[0]:
                    return False  # the library is there and one of its imports is not: a cold worker says so
            except Exception:  # any failure: do not serve, let a cold worker report it (SIGTERM's exit passes)
                return False
    return True


def _peer_uid(conn: socket.socket) -> int | None:
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", creds)[1]
    except (OSError, AttributeError):
        return None


def _recv_line(conn: socket.socket, limit: int = 1 << 20) -> bytes:
    buf = b""
    while not buf.endswith(b"\n") and len(buf) < limit:
        chunk = conn.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


def _serve_one(conn: socket.socket, listener: socket.socket, req: dict) -> None:
    """In the handler fork: start the worker fork, tell the client its pid, then its exit status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # this process waits for its child
    pid = os.fork()
    if pid == 0:  # the worker
        try:
            listener.close()
            conn.close()
            os.setsid()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as in a freshly started worker
            os.chdir(req["cwd"])
            os.environ.clear()
            os.environ.update(req["env"])
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            err = os.open(req["stderr"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            os.dup2(err, 1)
            os.dup2(err, 2)
            from doctor._worker_main import main

            code = main(req["spec"])
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:  # noqa: BLE001 - the client sees a non-zero status and the stderr file
            code = 70
        os._exit(code)
    try:
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    except OSError:
        pass
    _, status = os.waitpid(pid, 0)
    rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    try:
        conn.sendall(json.dumps({"rc": rc}).encode() + b"\n")
    except OSError:
        pass


def main(argv: list[str]) -> int:
    path, key, idle, modules = argv[0], argv[1], float(argv[2]), argv[3:]
    pidfile = f"{path}.pid"
    try:  # written first: a client that finds it while we import does not start a second server
        with open(f"{pidfile}.{os.getpid()}", "w") as f:
            f.write(str(os.getpid()))
        os.replace(f"{pidfile}.{os.getpid()}", pidfile)
    except OSError:
        return 4
    signal.signal(signal.SIGTERM, _stop)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if not _preload(modules):
            with open(f"{path}.failed", "w") as f:  # this key's stack does not import: no new server for it
                f.write(str(os.getpid()))
            return 3
        tmp = f"{path}.{os.getpid()}.tmp"
        listener.bind(tmp)
        os.chmod(tmp, 0o600)
        listener.listen(16)
        os.replace(tmp, path)  # a client never sees a socket nobody listens on
        listener.settimeout(idle)
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handler forks are reaped by the kernel
        return _loop(listener, key)
    except OSError:
        return 4
    finally:
        try:  # the names are ours only while the pid file says so (a newer server may have replaced them)
            with open(pidfile) as f:
                if f.read().strip() == str(os.getpid()):
                    os.unlink(pidfile)
                    if os.path.exists(path):
                        os.unlink(path)
        except OSError:
            pass


def _loop(listener: socket.socket, key: str) -> int:
    me = os.getuid()
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            return 0  # idle: the memory goes back
        with conn:
            conn.settimeout(10)
            try:
                if _peer_uid(conn) not in (me, None):
                    continue
                req = json.loads(_recv_line(conn) or b"{}")
            except (OSError, ValueError):
                continue
            if req.get("key") != key:
                try:
                    conn.sendall(b'{"stale": true}\n')
                except OSError:
                    pass
                return 0  # what we imported is not what the client examines any more
            if os.fork() == 0:
                try:
                    conn.settimeout(None)
                    _serve_one(conn, listener, req)
                finally:
                    os._exit(0)


def _stop(*_: object) -> None:
    raise SystemExit(0)


if __name__ == "__main__":
    code = main(sys.argv[1:])
    os._exit(code)
