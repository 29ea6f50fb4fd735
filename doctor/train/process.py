"""Launching one training attempt and stopping it: the command, the process group, the output tee,
and the signals a user sends to ``train`` itself.

The training command runs in its own session (process group), so SIGINT/SIGTERM/SIGKILL reach torchrun
and every rank and DataLoader worker at once, and nothing is orphaned when ``train`` stops it.
"""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from doctor.config import InputError
from doctor.procs import kill_group


def command_for(cfg_path: Path, launcher: str | None = None, extra: list[str] | None = None) -> list[str]:
    """``llamafactory-cli train CFG`` (or ``--launcher``, which gets the path appended or substituted for
    ``{config}``), plus the ``-- key=value`` overrides. Raises InputError when there is nothing to run."""
    extra = list(extra or [])
    if launcher:
        parts = shlex.split(launcher)
        if any("{config}" in p for p in parts):
            return [p.replace("{config}", str(cfg_path)) for p in parts] + extra
        return parts + [str(cfg_path)] + extra
    exe = Path(sys.executable).with_name("llamafactory-cli")
    cli = str(exe) if exe.exists() else shutil.which("llamafactory-cli")
    if cli:
        return [cli, "train", str(cfg_path)] + extra
    if importlib.util.find_spec("llamafactory") is not None:  # installed without its console script
        return [sys.executable, "-c", "import sys; from llamafactory.cli import main; sys.exit(main())",
                "train", str(cfg_path)] + extra
    raise InputError("llamafactory-cli not found (install llamafactory, or pass --launcher)")


class Child:
    """One running training command: its output is teed to the attempt's log (and echoed unless quiet),
    each line handed to ``on_line`` from a reader thread."""

    def __init__(self, cmd: list[str], *, env: dict[str, str], cwd: Path, log_path: Path, echo: bool,
                 on_line: Callable[[bytes], None]) -> None:
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True, cwd=cwd)
        self._echo = sys.stdout.buffer if echo else None
        self._on_line = on_line
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        out = self._echo
        for raw in iter(self.proc.stdout.readline, b""):
            self._log.write(raw)
            self._log.flush()
            if out is not None:
                try:
                    sys.stdout.flush()
                    out.write(raw)
                    out.flush()
                except (BrokenPipeError, ValueError):
                    out = None
            self._on_line(raw)

    def poll(self) -> int | None:
        return self.proc.poll()

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def stop(self, first: int = signal.SIGTERM, grace: float = 15.0) -> None:
        """Signal the whole group with ``first``; escalate to SIGTERM and SIGKILL; sweep stray descendants."""
        kill_group(self.proc, first, grace)

    def close(self, reader_timeout: float = 10.0) -> None:
        """After the process ended: let the reader drain the pipe, then close the log."""
        self._reader.join(timeout=reader_timeout)
        self._log.close()


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum


class SignalTrap:
    """While active, SIGINT/SIGTERM sent to ``train`` are recorded (``signum``) instead of raising, so the
    supervisor can stop the training group itself and write its record; restored on exit."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> SignalTrap:
        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._old[s] = signal.signal(s, self._handler)
        return self

    def _handler(self, signum: int, frame: Any) -> None:
        self.signum = signum

    def check(self) -> None:
        if self.signum is not None:
            raise Interrupted(self.signum)

    def __exit__(self, *exc: Any) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
