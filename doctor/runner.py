"""One registry of checks, and the runner that executes them.

A check is a small function ``(ctx) -> list[Finding]`` registered with :func:`check`. It may
declare the probes it needs (functions run in the isolated worker); the runner collects the probes
of all selected checks, runs each probe group once (one torch import per group, groups in
parallel), then runs the checks. A check that raises becomes a ``DOC001`` finding.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from doctor.context import Context
from doctor.findings import Finding, make
from doctor.worker import ProbeResult, ProbeSpec, run_probes

CheckFunc = Callable[[Context], list[Finding]]
ProbeFunc = Callable[[Context], list[ProbeSpec]]


@dataclass
class CheckDef:
    name: str
    area: str
    func: CheckFunc
    probes: ProbeFunc | None = None
    needs_config: bool = False
    quick: bool = False  # runs under --quick (no torch import)
    order: int = 0


REGISTRY: list[CheckDef] = []
_PLUGIN_ERRORS: dict[str, str] = {}


def check(area: str, *, needs_config: bool = False, quick: bool = False,
          probes: ProbeFunc | None = None, order: int = 50) -> Callable[[CheckFunc], CheckFunc]:
    """Register a check function for an area (decorator)."""

    def deco(func: CheckFunc) -> CheckFunc:
        REGISTRY.append(CheckDef(func.__name__, area, func, probes, needs_config, quick, order))
        return func

    return deco


def load_all() -> list[CheckDef]:
    """Every registered check: the built-in ones, plus plugin modules named in ROCM_DOCTOR_PLUGINS
    (comma-separated importable modules that register checks with :func:`check`)."""
    import importlib
    import os

    import checks  # noqa: F401  (importing the package registers every check)

    for mod in filter(None, (m.strip() for m in os.environ.get("ROCM_DOCTOR_PLUGINS", "").split(","))):
        try:
            importlib.import_module(mod)
        except Exception as e:  # a broken plugin is a finding, not a crash
            _PLUGIN_ERRORS[mod] = f"{type(e).__name__}: {e}"

    return sorted(REGISTRY, key=lambda c: (c.order, c.area, c.name))


def select(ctx: Context) -> list[CheckDef]:
    out = []
    for c in load_all():
        if c.needs_config and ctx.config is None:
            continue
        if ctx.options.quick and not c.quick:
            continue
        if ctx.options.only and c.area not in ctx.options.only:
            continue
        out.append(c)
    return out


def probe_failure(res: ProbeResult | None, check: str) -> list[Finding]:
    """The generic finding for a probe that did not return data (crash, hang, import error)."""
    if res is None or res.status == "not_run":
        err = res.error if res else "probe did not run"
        return [make("DOC005", check, "Examined Python could not run the probe", err,
                     **(res.evidence() if res else {}))]
    if res.status == "crashed":
        return [make("DOC002", check, f"Probe `{res.name}` crashed the worker", res.error, **res.evidence())]
    if res.status == "timeout":
        return [make("DOC003", check, f"Probe `{res.name}` hung", res.error, **res.evidence())]
    if res.status == "import_error":
        return [make("DOC004", check, f"Probe `{res.name}` could not import", res.error, **res.evidence())]
    if res.status == "error":
        return [make("DOC001", check, f"Probe `{res.name}` raised", res.error, **res.evidence())]
    return []


DIST_VARS = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
             "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT"}


def _prefetch_facts(ctx: Context) -> None:
    from doctor import system

    try:
        system.facts(ctx)
    except Exception:  # noqa: S110 - the checks call it again and report the crash as DOC001
        pass


def run_probe_specs(ctx: Context, specs: list[ProbeSpec]) -> None:
    """Run all probes, one worker per group, groups concurrently; results land in ctx.probes."""
    groups: dict[str, list[ProbeSpec]] = {}
    seen = set(ctx.probes)
    for s in specs:
        if s.name in seen:
            continue
        seen.add(s.name)
        groups.setdefault(s.group, []).append(s)
    if not groups:
        return
    inventory = None
    if set(groups) - {"stack"}:
        # Read the GPU inventory before our own device worker touches a GPU: its context (0.6 GiB on
        # the H200, seen in the GPU validation run) and its process would count as "already busy"
        # (GPU002/GPU003). The stack worker (GPUs hidden) starts meanwhile; the workers that may touch
        # a GPU wait for it (ms with NVML, well under a second with amdsmi/amd-smi).
        inventory = threading.Thread(target=_prefetch_facts, args=(ctx,), daemon=True)
        inventory.start()
    # Under torchrun (check --distributed) the local probes must not see the rendezvous: transformers'
    # TrainingArguments (LLaMA-Factory's parser probe) would join the process group itself.
    env = {k: v for k, v in ctx.env.items() if k not in DIST_VARS and not k.startswith("TORCHELASTIC_")}

    def _run(item: tuple[str, list[ProbeSpec]]) -> dict[str, ProbeResult]:
        group, gspecs = item
        if group != "stack" and inventory is not None:
            inventory.join()
        genv = dict(env)
        if group == "stack":
            # config parsing and tokenizers need no GPU; hiding GPUs keeps LLaMA-Factory's
            # "launch distributed training" guard and any device init out of the lint
            genv["CUDA_VISIBLE_DEVICES"] = "-1"
            genv["HIP_VISIBLE_DEVICES"] = "-1"
            genv.pop("ROCR_VISIBLE_DEVICES", None)
            # import llamafactory even when versions are off: the torch check reports them (TORCH009)
            genv["DISABLE_VERSION_CHECK"] = "1"
        return run_probes(gspecs, python=ctx.python, env=genv)

    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        for res in pool.map(_run, groups.items()):
            ctx.probes.update(res)


def run(ctx: Context, checks: list[CheckDef] | None = None) -> list[Finding]:
    checks = select(ctx) if checks is None else checks
    specs: list[ProbeSpec] = []
    findings: list[Finding] = []
    for c in checks:
        if c.probes is None or ctx.options.quick:  # --quick: no worker, no torch import
            continue
        try:
            specs.extend(c.probes(ctx))
        except Exception as e:
            findings.append(make("DOC001", c.name, f"Check `{c.name}` crashed while planning probes",
                                 f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=6)))
    for mod, err in _PLUGIN_ERRORS.items():
        findings.append(make("DOC001", "doctor", f"Plugin `{mod}` failed to load", err))
    run_probe_specs(ctx, specs)
    for c in checks:
        try:
            findings.extend(c.func(ctx))
        except Exception as e:
            findings.append(make("DOC001", c.area, f"Check `{c.name}` crashed",
                                 f"{type(e).__name__}: {e}", traceback=traceback.format_exc(limit=6)))
    return findings
