"""What every command calls to examine an environment: build the context, run the selected checks,
and summarise the environment for ``check --json`` / ``report`` / the ``--distributed`` fingerprint."""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from doctor import runner
from doctor.config import InputError
from doctor.context import Context, Options
from doctor.findings import Finding


@dataclass
class Checked:
    ctx: Context
    findings: list[Finding]


def validate_python(python: str | None) -> None:
    """``--python`` must name an interpreter that exists: a typo is a usage error (exit 2), not a broken
    torch (TORCH001 would send the user off reinstalling torch)."""
    if python is None:
        return
    p = Path(python)
    if not p.exists():
        raise InputError(f"--python {python}: no such file")
    if p.is_dir():
        raise InputError(f"--python {python} is a directory, not an interpreter")
    import os

    if not os.access(p, os.X_OK):
        raise InputError(f"--python {python} is not executable")


def run_check(config: str | None, *, quick: bool = False, only: set[str] | None = None, python: str | None = None,
              timeout: float = 120.0, env: dict[str, str] | None = None,
              progress: Callable[[str], None] | None = None, verbose: bool = False, record: bool = False,
              replay: bool = False, no_cache: bool = False, warm_start: bool = True) -> Checked:
    """Build the context and run the selected checks. Raises InputError for bad input. ``record`` keeps every
    host read for ``report``; ``replay`` runs on a recorded machine (``ROCM_DOCTOR_SYSROOT`` in ``env``)
    without probing this Python; ``no_cache`` runs every probe afresh (:mod:`doctor.cache`); ``warm_start``
    may leave a warm stack worker for the next run (:mod:`doctor.warm`)."""
    validate_python(python)
    ctx = Context.build(Options(config=config, quick=quick, only=only, python=python, timeout=timeout,
                                verbose=verbose, record=record, replay=replay, no_cache=no_cache,
                                warm_start=warm_start), env=env)
    return Checked(ctx, runner.run(ctx, progress=progress))


def environment_summary(ctx: Context) -> dict[str, Any]:
    """The ``environment`` object of ``check --json``."""
    env: dict[str, Any] = {"python": ctx.python, "platform": platform.platform(),
                           "config": str(ctx.config_path) if ctx.config_path else None}
    t = ctx.probes.get("torch")
    if t is not None and t.ok:
        env["torch"] = {k: t.data.get(k) for k in ("version", "hip", "cuda", "arch_list", "available", "blas")}
    libs = ctx.probes.get("libs")
    if libs is not None and libs.ok:
        env["packages"] = libs.data
    sysf = ctx.facts.get("system")
    if sysf:
        env["rocm_version"] = sysf.get("rocm_version")
        env["gpus"] = sysf.get("gpus", [])
    schema = ctx.facts.get("lf_schema")
    if schema:
        env["llamafactory_schema"] = schema[1]
    if ctx.facts.get("cache_hits") or ctx.facts.get("warm"):
        # what was not measured afresh by this run: probe results reused from the cache, and whether the stack
        # worker was a fork of the warm server (doctor.warm)
        env["reused"] = {"probes": sorted(ctx.facts.get("cache_hits") or []),
                         "stack_worker": ctx.facts.get("warm", "none needed")}
    return env


def skipped_areas(ctx: Context) -> list[str]:
    """Areas that did not run (``--quick``, ``--only``, no config), so a summary can say so instead of
    reading like a clean bill of health."""
    ran = {c.area for c in runner.select(ctx)}
    return [a for a in runner.areas() if a not in ran and a not in ("doctor", "distributed")]
