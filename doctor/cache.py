"""Where rocm-doctor keeps what it may reuse between runs (``ROCM_DOCTOR_CACHE``, else
``~/.cache/rocm-doctor``): LLaMA-Factory schemas by version, the tokenizer files the demo may use, and the
results of probes that are pure functions of files and versions (the warm ``check``)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from doctor.procs import with_project_path


def cache_dir(env: dict[str, str] | None = None) -> Path:
    e = os.environ if env is None else env
    return Path(e.get("ROCM_DOCTOR_CACHE") or Path(e.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rocm-doctor")


# ------------------------------------------------------------------ probe results
#
# A probe whose answer is a pure function of files and versions (LLaMA-Factory's schema, its parser's verdict on
# a config, a template against a tokenizer, the torch build on a machine without a GPU) is kept under
# ``cache_dir()/probes``, keyed by everything it can depend on: the examined Python (interpreter, sys.path, the
# installed distributions and their mtimes, read without importing anything), rocm-doctor's probe code, the
# probe's parameters, the environment the worker gets, the working directory and the files it reads. Any change
# is a different key; a corrupt or unreadable entry is a miss, never an error.

CACHE_VERSION = 1
CACHEABLE_STATUS = ("ok", "error", "import_error")  # deterministic answers; a crash or timeout is not kept
MAX_ENTRIES = 2000
SMALL_FILE = 4 << 20  # files up to this size enter a key by content, bigger ones by size and mtime
# variables that change from shell to shell or job to job without changing what a probe answers
VOLATILE_ENV = ("PWD", "OLDPWD", "SHLVL", "_", "COLUMNS", "LINES", "TERM", "TERM_PROGRAM", "TERM_PROGRAM_VERSION",
                "COLORTERM", "DISPLAY", "HOSTNAME", "LS_COLORS", "PS1", "PROMPT_COMMAND", "WINDOWID", "STY", "WINDOW",
                "SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "SSH_AUTH_SOCK", "MAIL", "LOGNAME", "TMPDIR")
VOLATILE_PREFIXES = ("PYTEST_", "SLURM_", "PMI_", "PMIX_", "OMPI_", "TMUX", "XDG_SESSION", "XDG_RUNTIME", "ROCM_DOCTOR_",
                     "GPG_", "DBUS_", "KITTY_", "VSCODE_", "ITERM")
_PROBE_CODE = Path(__file__).resolve().parent / "probes"


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _stat(p: Path) -> list[Any] | None:
    try:
        st = p.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def path_signature(path: str | Path, depth: int = 2, limit: int = 2000) -> Any:
    """What a probe can see of ``path``: a small file's content hash, a big file's size and mtime, a directory's
    entries (name, kind, size, mtime) ``depth`` levels down (checkpoint-N/ inside an output_dir), or None."""
    p = Path(path)
    try:
        if p.is_file():
            st = p.stat()
            if st.st_size <= SMALL_FILE:
                return ["file", hashlib.sha256(p.read_bytes()).hexdigest()]
            return ["file", st.st_size, st.st_mtime_ns]
        if not p.is_dir():
            return None
        out: list[Any] = []
        todo = [(p, 0)]
        while todo and len(out) < limit:
            d, level = todo.pop(0)
            for e in sorted(os.scandir(d), key=lambda e: e.name):
                rel = str(Path(e.path).relative_to(p))
                is_dir = e.is_dir(follow_symlinks=True)
                st = _stat(Path(e.path))
                out.append([rel, "d" if is_dir else "f", st])
                if is_dir and level + 1 < depth:
                    todo.append((Path(e.path), level + 1))
        return ["dir", out]
    except OSError:
        return ["unreadable"]


def _python_paths(python: str, env: dict[str, str]) -> list[str]:
    """The examined interpreter's version and prefix, then the sys.path a worker started here with this
    environment gets (its first entry, ``-c``'s, is the working directory for the worker's ``-m``). Asked of
    the interpreter itself (50 ms, nothing imported): this process's own sys.path carries its launcher's
    additions (pytest's, a script directory) that a worker never sees."""
    try:
        p = subprocess.run([python, "-c", "import sys, json; print(json.dumps([sys.version, sys.prefix] + sys.path))"],
                           capture_output=True, text=True, timeout=30, env=with_project_path(env),
                           stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            return [f"unusable:{p.returncode}"]
        got = json.loads(p.stdout)
        head, paths = got[:2], got[3:]
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        return [f"unusable:{type(e).__name__}"]
    seen: dict[str, None] = {os.getcwd(): None}
    for x in paths:
        seen.setdefault(os.path.realpath(x) if x else os.getcwd(), None)
    return [*head, *seen]


def python_fingerprint(python: str, env: dict[str, str]) -> str:
    """A hash of what the examined Python would import: its version and sys.path, and in each sys.path
    directory the installed distributions (``*.dist-info``, ``*.egg-info``, ``*.pth``, ``*.egg-link``) with their
    mtimes: an upgrade, a reinstall of the same version or a new editable install each change it. A directory
    that is not a site-packages (PYTHONPATH, a source checkout) enters with every top-level module and package
    ``__init__`` mtime, so code dropped there counts too. Edits deep inside an editable install's sources do
    not (``check --no-cache``)."""
    parts: list[Any] = [os.path.abspath(python), _stat(Path(os.path.realpath(python)))]
    for entry in _python_paths(python, env):
        parts.append(entry)
        site = Path(entry).name in ("site-packages", "dist-packages")
        try:
            with os.scandir(entry or ".") as it:
                for n, e in enumerate(sorted(it, key=lambda e: e.name)):
                    if e.name.endswith((".dist-info", ".egg-info", ".pth", ".egg-link")):
                        parts.append([e.name, e.stat().st_mtime_ns])
                    elif not site and n < 5000 and (e.name.endswith((".py", ".so")) or e.is_dir()):
                        # a module or a regular package; a directory without __init__.py (out/, wandb/, the
                        # run's own directories in the working directory) changes nothing a probe imports
                        st = _stat(Path(e.path, "__init__.py") if e.is_dir() else Path(e.path))
                        if st is not None:
                            parts.append([e.name, st])
        except (OSError, TypeError, ValueError):
            continue
    return _digest(parts)


def probe_code_hash() -> str:
    """rocm-doctor's own probe code: a new release never reuses an old answer."""
    h = hashlib.sha256()
    for f in sorted([*_PROBE_CODE.glob("*.py"), _PROBE_CODE.parent / "_worker_main.py",
                     _PROBE_CODE.parent / "_warm_main.py"]):
        try:
            h.update(f.name.encode() + f.read_bytes())
        except OSError:
            continue
    return h.hexdigest()


def stable_env(env: dict[str, str]) -> dict[str, str]:
    """The environment a worker gets (this checkout on PYTHONPATH, its entries resolved and deduplicated) without
    the variables that change per shell or job. Only its hash is kept, so a token in it never reaches the cache."""
    e = with_project_path(env)
    e["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(os.path.realpath(x) for x in e["PYTHONPATH"].split(os.pathsep)
                                                    if x))
    return {k: v for k, v in e.items() if k not in VOLATILE_ENV and not k.startswith(VOLATILE_PREFIXES)}


class ProbeCache:
    """Probe results kept between runs (``<cache_dir>/probes/<key>.json``)."""

    def __init__(self, root: Path, python: str, env: dict[str, str]) -> None:
        self.root = root
        self.python = python
        self.env = env
        self._fp: str | None = None
        self._lock = threading.Lock()

    def fingerprint(self) -> str:
        with self._lock:
            if self._fp is None:
                self._fp = _digest([python_fingerprint(self.python, self.env), probe_code_hash()])
            return self._fp

    def key(self, name: str, module: str, func: str, params: dict[str, Any], env: dict[str, str], cwd: str,
            inputs: list[str]) -> str:
        return _digest([CACHE_VERSION, self.fingerprint(), name, module, func, params, stable_env(env), cwd,
                        [[i, path_signature(i)] for i in inputs]])

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            rec = json.loads((self.root / f"{key}.json").read_text(encoding="utf-8"))
            if rec.get("v") != CACHE_VERSION or rec.get("key") != key or rec["result"]["status"] not in CACHEABLE_STATUS:
                return None
            return rec["result"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None  # absent, torn, edited by hand: recompute

    def put(self, key: str, name: str, result: dict[str, Any]) -> None:
        if result.get("status") not in CACHEABLE_STATUS:
            return
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self.root / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
            tmp.write_text(json.dumps({"v": CACHE_VERSION, "key": key, "name": name, "saved": time.time(),
                                       "result": result}, default=str), encoding="utf-8")
            os.replace(tmp, self.root / f"{key}.json")  # atomic: ranks sharing a home directory never tear it
            self._prune()
        except (OSError, TypeError, ValueError):
            return  # a read-only or full cache directory costs the warm path, nothing else

    def _prune(self) -> None:
        files = list(self.root.glob("*.json"))
        if len(files) <= MAX_ENTRIES:
            return
        for f in sorted(files, key=lambda f: (_stat(f) or [0, 0])[1])[: len(files) - MAX_ENTRIES]:
            try:
                f.unlink()
            except OSError:
                continue
