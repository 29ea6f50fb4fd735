"""One read layer for the host: every read of /proc, /sys, /dev, /etc, /boot and /opt, and every tool run.

``ROCM_DOCTOR_SYSROOT=DIR`` makes the checks read ``DIR/proc/...`` instead of ``/proc/...`` (a recorded
machine tree; symlinks such as ``/sys/class/drm/card0/device`` are resolved inside DIR), and ``check --replay
BUNDLE`` serves the tool outputs a ``report`` bundle recorded as well. A :class:`Recorder` keeps what a live
run read, so ``report`` can store it. Tools (``amd-smi``, ``rocm-smi``, ``rocminfo``, ``dmesg``, ``lspci``) are
found on PATH when live. A read that needs privileges it lacks is an answer (``denied``), never an error.
"""

from __future__ import annotations

import glob as _glob
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

ROOTED = ("/proc", "/sys", "/dev", "/etc", "/boot", "/opt", "/run", "/.dockerenv", "/var/run")
TOOL_TIMEOUT = 10.0
MAX_READ = 1 << 20
KEEP = ".keep"  # placed in a recorded tree's empty directories so version control and archives keep them


@dataclass
class ToolResult:
    rc: int | None               # None: the tool is not installed (or not recorded in a replay)
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0

    @property
    def missing(self) -> bool:
        return self.rc is None

    @property
    def denied(self) -> bool:
        """The tool ran but lacked privileges (dmesg without CAP_SYSLOG, lspci -vvv without root)."""
        text = (self.stderr + self.stdout).lower()
        return bool(re.search(r"operation not permitted|permission denied|access denied|must be root|"
                              r"not permitted|read kernel buffer failed", text))


def tool_key(cmd: list[str]) -> str:
    """The file name a tool's output is recorded under (``amd-smi static --json`` -> ``amd-smi_static_--json``)."""
    return re.sub(r"[^\w.=+-]+", "_", "_".join(cmd))[:180]


@dataclass
class Recorder:
    """What a run read from the host and which tools it ran, for ``report`` to store."""

    files: dict[str, str | None] = field(default_factory=dict)   # host path -> content (None: absent)
    links: dict[str, str] = field(default_factory=dict)          # host path -> the path it resolved to
    dirs: dict[str, list[str]] = field(default_factory=dict)     # host path -> the names listed in it
    present: dict[str, bool] = field(default_factory=dict)       # host path found to exist -> is a directory
    tools: dict[str, dict] = field(default_factory=dict)         # tool_key -> {cmd, rc, stdout, stderr}


class Host:
    """The machine under examination: the live one (root ``/``), a recorded tree, or a replayed bundle."""

    def __init__(self, root: str | Path = "/", tools: dict[str, dict] | None = None,
                 recorder: Recorder | None = None, env: dict[str, str] | None = None) -> None:
        self.root = Path(root)
        self.replay_tools = tools          # None: run tools live; a dict: only what was recorded
        self.recorder = recorder
        self.env = dict(os.environ if env is None else env)
        self.links: dict[str, str] = {}
        if str(self.root) != "/":
            try:
                self.links = json.loads(Path(self.root, "links.json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                self.links = {}

    @property
    def live(self) -> bool:
        """Tools and libraries run for real (not replayed from a recording)."""
        return self.replay_tools is None

    @property
    def rooted(self) -> bool:
        """Files come from a recorded tree, not from this machine's /."""
        return str(self.root) != "/"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, recorder: Recorder | None = None) -> Host:
        e = dict(os.environ if env is None else env)
        root = e.get("ROCM_DOCTOR_SYSROOT") or "/"
        tools = None
        tools_file = Path(root, "tools.json")
        if root != "/" and tools_file.is_file():
            try:
                tools = json.loads(tools_file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                tools = {}
        elif root != "/":
            tools = {}  # a bare recorded tree: no tool output was recorded, so no tool "runs"
        return cls(root, tools, recorder, e)

    # ---------------------------------------------------------- paths
    def _map(self, path: str) -> Path:
        p = str(path)
        if str(self.root) == "/" or not p.startswith("/"):
            return Path(p)
        return Path(str(self.root) + p)

    def resolve(self, path: str) -> str:
        """``path`` with its symlinks followed, as a host path (inside the root for a recorded tree, or as the
        recording run resolved it: ``links.json``)."""
        if str(self.root) == "/":
            out = os.path.realpath(path)
        elif path in self.links:
            out = self.links[path]
        else:
            out = self._walk(path)
        if self.recorder is not None:
            self.recorder.links[path] = out
        return out

    def _walk(self, path: str) -> str:
        parts = [x for x in str(path).split("/") if x]
        out: list[str] = []
        hops = 0
        while parts and hops < 64:
            part = parts.pop(0)
            if part == "..":
                if out:
                    out.pop()
                continue
            if part == ".":
                continue
            real = self._map("/" + "/".join(out + [part]))
            if real.is_symlink():
                hops += 1
                target = os.readlink(real)
                parts = [x for x in target.split("/") if x] + parts
                if target.startswith("/"):
                    out = []
                continue
            out.append(part)
        return "/" + "/".join(out)

    # ---------------------------------------------------------- reads
    def read(self, path: str, limit: int = MAX_READ) -> str | None:
        """The file's text, or None when it is absent or unreadable (EACCES, EINVAL from a sysfs attribute)."""
        try:
            with open(self._map(path), "rb") as f:
                data = f.read(limit)
            text = data.decode("utf-8", "replace")
        except OSError:
            text = None
        if self.recorder is not None:
            self.recorder.files[path] = text
        return text

    def exists(self, path: str) -> bool:
        real = self._map(path)
        ok = real.exists()
        if self.recorder is not None:
            if ok:
                self.recorder.present[path] = real.is_dir()
            else:
                self.recorder.files.setdefault(path, None)
        return ok

    def is_dir(self, path: str) -> bool:
        ok = self._map(path).is_dir()
        if self.recorder is not None and ok:
            self.recorder.present[path] = True
        return ok

    def listdir(self, path: str) -> list[str]:
        try:
            names = sorted(os.listdir(self._map(path)))
        except OSError:
            names = []
        if self.rooted:
            names = [n for n in names if n != KEEP]
        if self.recorder is not None:
            self.recorder.dirs[path] = names
        return names

    def glob(self, pattern: str) -> list[str]:
        """Host paths matching ``pattern`` (sorted)."""
        base = str(self.root) if str(self.root) != "/" else ""
        found = sorted(_glob.glob(base + pattern))
        out = [f[len(base):] if base else f for f in found]
        if base:
            out = [f for f in out if os.path.basename(f) != KEEP]
        if self.recorder is not None:
            for f in out:
                self.recorder.present.setdefault(f, self._map(f).is_dir())
        return out

    def access(self, path: str, mode: int) -> bool:
        """Read/write access as this user (only this machine's own /dev can answer it)."""
        return not self.rooted and os.access(path, mode)

    # ---------------------------------------------------------- tools
    def which(self, name: str) -> bool:
        if self.replay_tools is not None:
            return any(v.get("cmd", [None])[0] == name for v in self.replay_tools.values())
        return shutil.which(name, path=self.env.get("PATH")) is not None

    def run(self, cmd: list[str], timeout: float = TOOL_TIMEOUT) -> ToolResult:
        key = tool_key(cmd)
        if self.replay_tools is not None:
            rec = self.replay_tools.get(key)
            res = ToolResult(rec.get("rc"), rec.get("stdout", ""), rec.get("stderr", "")) if rec else ToolResult(None)
            if self.recorder is not None and rec:
                self.recorder.tools[key] = dict(rec)
            return res
        exe = shutil.which(cmd[0], path=self.env.get("PATH"))
        if exe is None:
            res = ToolResult(None)
        else:
            try:
                p = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, timeout=timeout, env=self.env,
                                   stdin=subprocess.DEVNULL)
                res = ToolResult(p.returncode, p.stdout[:MAX_READ], p.stderr[-20000:])
            except subprocess.TimeoutExpired:
                res = ToolResult(124, "", f"{cmd[0]} timed out after {timeout:.0f} s")
            except OSError as e:
                res = ToolResult(126, "", str(e))
        if self.recorder is not None:
            self.recorder.tools[key] = {"cmd": cmd, "rc": res.rc, "stdout": res.stdout, "stderr": res.stderr}
        return res


def keep_empty_dirs(root: Path) -> int:
    """Put a ``.keep`` file in every empty directory under ``root``: git (and some archivers) drop empty
    directories, and in a machine tree an empty ``/sys/kernel/iommu_groups/0`` or ``/opt/rocm`` is a fact."""
    n = 0
    for d, subdirs, files in os.walk(root):
        if not subdirs and not files:
            Path(d, KEEP).touch()
            n += 1
    return n


def write_tree(dest: Path, rec: Recorder) -> int:
    """A recorded run as a replayable tree: the files under ``dest``, the directories it listed (as empty
    directories where no file was read), how paths resolved (links.json) and the tool outputs (tools.json)."""
    n = 0
    for path, text in rec.files.items():
        if text is None or not path.startswith("/"):
            continue
        p = dest / path.lstrip("/")
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
            n += 1
        except OSError:
            continue
    for path, is_dir in rec.present.items():
        p = dest / path.lstrip("/")
        try:
            if is_dir:
                p.mkdir(parents=True, exist_ok=True)
            elif not p.exists():
                p.parent.mkdir(parents=True, exist_ok=True)
                p.touch()
        except OSError:
            continue
    for path, names in rec.dirs.items():
        for name in names:
            try:
                (dest / path.lstrip("/") / name).mkdir(parents=True, exist_ok=True)
            except OSError:  # a file of that name was written: fine
                continue
    keep_empty_dirs(dest)
    (dest / "links.json").write_text(json.dumps(rec.links, indent=1), encoding="utf-8")
    (dest / "tools.json").write_text(json.dumps(rec.tools, indent=1), encoding="utf-8")
    return n
