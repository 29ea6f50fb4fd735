"""The check kit: how a check is declared, and the DOC00x findings for what goes wrong around it.

A check is a small function ``(ctx) -> list[Finding]`` marked with :func:`check`. The decorator only
attaches a :class:`CheckDef` to the function (no global list, no import side effect); the runner
collects the marked functions of the modules it is told about (``runner.CHECK_MODULES``, plugins).
A check may declare the probes it needs (functions run in the isolated worker) and the areas whose
probes it reads (``needs``): the runner plans those probes even when only this area is selected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from doctor.context import Context
from doctor.findings import Code, Finding, Severity
from doctor.worker import ProbeResult, ProbeSpec

CheckFunc = Callable[[Context], list[Finding]]
ProbeFunc = Callable[[Context], list[ProbeSpec]]

AREA = "doctor"


@dataclass(frozen=True)
class CheckDef:
    name: str
    area: str
    func: CheckFunc
    probes: ProbeFunc | None = None
    needs_config: bool = False
    quick: bool = False          # runs under --quick (no worker, no torch import)
    needs: tuple[str, ...] = ()  # areas whose probe results this check reads
    order: int = 50


def check(area: str, *, needs_config: bool = False, quick: bool = False, probes: ProbeFunc | None = None,
          needs: tuple[str, ...] = (), order: int = 50) -> Callable[[CheckFunc], CheckFunc]:
    """Mark a function as the check of ``area`` (decorator)."""

    def deco(func: CheckFunc) -> CheckFunc:
        func.__check__ = CheckDef(func.__name__, area, func, probes, needs_config, quick, tuple(needs), order)  # type: ignore[attr-defined]
        return func

    return deco


DOC001 = Code(
    AREA, "DOC001", Severity.ERROR, "A check crashed",
    why="A bug in rocm-doctor or an unexpected environment made a check raise. The other checks still ran.",
    fix="Report it with `rocm-doctor report`; the evidence holds the traceback.",
)
DOC002 = Code(
    AREA, "DOC002", Severity.ERROR, "A probe crashed the isolated worker (signal)",
    why="Probes that import torch or run GPU kernels run in a separate process. A segfault there (a broken HIP "
        "kernel, a bad extension) would have killed a training run the same way.",
    fix="Read the evidence (signal, last stderr lines); rerun with `--only` on that area and `AMD_LOG_LEVEL=3` "
        "to see the failing HIP call.",
)
DOC003 = Code(
    AREA, "DOC003", Severity.ERROR, "A probe hung past its timeout",
    why="A hang at import or at the first kernel (a wedged GPU, a driver waiting on a lock) would hang training "
        "too.",
    fix="Check `dmesg` for amdgpu errors and that no other process holds the GPU; raise `--timeout` only if the "
        "machine is merely slow.",
)
DOC004 = Code(
    AREA, "DOC004", Severity.ERROR, "A probe could not import what it examines",
    why="The module the probe needs (torch, transformers, llamafactory, ...) fails to import in the examined "
        "Python.",
    fix="Read the exception in the evidence; reinstall the failing package for this Python.",
)
DOC005 = Code(
    AREA, "DOC005", Severity.WARNING, "Examined Python could not be started",
    why="`--python` names an interpreter that does not run.",
    fix="Pass the Python of the environment that runs `llamafactory-cli`.",
)
CODES = (DOC001, DOC002, DOC003, DOC004, DOC005)


def probe_failure(res: ProbeResult | None, area: str) -> list[Finding]:
    """The generic finding for a probe that did not return data (crash, hang, import error)."""
    if res is None or res.status == "not_run":
        err = res.error if res else "probe did not run"
        return [DOC005.finding("Examined Python could not run the probe", err, check=area,
                               **(res.evidence() if res else {}))]
    if res.status == "crashed":
        return [DOC002.finding(f"Probe `{res.name}` crashed the worker", res.error, check=area, **res.evidence())]
    if res.status == "timeout":
        return [DOC003.finding(f"Probe `{res.name}` hung", res.error, check=area, **res.evidence())]
    if res.status == "import_error":
        return [DOC004.finding(f"Probe `{res.name}` could not import", res.error, check=area, **res.evidence())]
    if res.status == "error":
        return [DOC001.finding(f"Probe `{res.name}` raised", res.error, check=area, **res.evidence())]
    return []


def probe_data(ctx: Context, name: str, area: str) -> tuple[Any, list[Finding]]:
    """(data of probe ``name``, failure findings). Without a working torch there is nothing to add: the
    torch check explains why (and runs its probe for any area that ``needs`` it), so both are empty."""
    t = ctx.probes.get("torch")
    if t is None or not t.ok:
        return None, []
    res = ctx.probes.get(name)
    if res is None or not res.ok:
        return None, probe_failure(res, area)
    return res.data, []


def crash(area: str, name: str, exc: BaseException, tb: str, planning: bool = False) -> Finding:
    what = "crashed while planning probes" if planning else "crashed"
    return DOC001.finding(f"Check `{name}` {what}", f"{type(exc).__name__}: {exc}", check=area, traceback=tb)
