"""The runner: which checks exist, which run, their probes, and the run itself.

The built-in checks are an explicit list of modules (:data:`CHECK_MODULES`, Flutter's provider list):
importing them has no side effect, the runner collects the functions marked with
:func:`doctor.registry.check`. Plugins are more modules of the same kind, named in
``ROCM_DOCTOR_PLUGINS``. The runner plans the probes of the selected checks and of the areas they
``need``, runs each probe group once in its own isolated worker (one torch import per group, groups in
parallel), then runs the checks. A check that raises becomes a ``DOC001`` finding.
"""

from __future__ import annotations

import importlib
import os
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from functools import lru_cache
from types import ModuleType

from doctor import warm
from doctor.cache import ProbeCache, cache_dir
from doctor.context import Context
from doctor.findings import Finding
from doctor.registry import DOC001, CheckDef, crash
from doctor.registry import check as check  # re-exported: plugins register with ``doctor.runner.check``
from doctor.stack import DIST_VARS
from doctor.warm import Warm
from doctor.worker import ProbeResult, ProbeSpec, run_probes, worker_env

# in the order areas are shown; a module declares its area's Code objects in CODES and may hold no check
# (``checks.distributed`` is rank 0's verdict, run by ``check --distributed``)
CHECK_MODULES: tuple[str, ...] = (
    "doctor.registry",
    "checks.torch",
    "checks.config",
    "checks.template",
    "checks.bf16",
    "checks.attention",
    "checks.bitsandbytes",
    "checks.gpus",
    "checks.features",
    "checks.memory",
    "checks.platform",
    "checks.health",
    "checks.distributed",
)

Progress = Callable[[str], None]


@lru_cache(maxsize=1)
def check_modules() -> tuple[ModuleType, ...]:
    return tuple(importlib.import_module(m) for m in CHECK_MODULES)


def _plugin_modules() -> tuple[list[ModuleType], dict[str, str]]:
    mods, errors = [], {}
    for name in filter(None, (m.strip() for m in os.environ.get("ROCM_DOCTOR_PLUGINS", "").split(","))):
        try:
            mods.append(importlib.import_module(name))
        except Exception as e:  # a broken plugin is a finding, not a crash
            errors[name] = f"{type(e).__name__}: {e}"
    return mods, errors


def checks_of(module: ModuleType) -> list[CheckDef]:
    return [obj.__check__ for obj in vars(module).values() if callable(obj) and hasattr(obj, "__check__")]


def areas() -> tuple[str, ...]:
    """Every area, in display order (what ``--only`` accepts)."""
    return tuple(dict.fromkeys(mod.AREA for mod in check_modules() if hasattr(mod, "AREA")))


def load_all() -> tuple[list[CheckDef], dict[str, str]]:
    """Every check, built-in and plugin, in run order; and the plugins that failed to load."""
    plugins, errors = _plugin_modules()
    defs = [d for mod in (*check_modules(), *plugins) for d in checks_of(mod)]
    return sorted(defs, key=lambda c: (c.order, c.area, c.name)), errors


def select(ctx: Context, defs: list[CheckDef] | None = None) -> list[CheckDef]:
    out = []
    for c in load_all()[0] if defs is None else defs:
        if c.needs_config and ctx.config is None:
            continue
        if ctx.options.quick and not c.quick:
            continue
        if ctx.options.only and c.area not in ctx.options.only:
            continue
        out.append(c)
    return out


def plan(ctx: Context, selected: list[CheckDef], every: list[CheckDef]) -> tuple[list[ProbeSpec], list[Finding]]:
    """The probes of the selected checks and of every area they need (transitively): ``--only bf16`` still
    imports torch through the torch check's probe, whose result the bf16 verdict reads."""
    by_area: dict[str, list[CheckDef]] = {}
    for c in every:
        by_area.setdefault(c.area, []).append(c)
    todo, seen = list(selected), set()
    specs: list[ProbeSpec] = []
    failures: list[Finding] = []
    while todo:
        c = todo.pop(0)
        if c.name in seen:
            continue
        seen.add(c.name)
        for a in c.needs:
            todo += by_area.get(a, [])
        if c.probes is None or ctx.options.quick or ctx.options.replay:  # no worker, no torch import
            continue
        try:
            specs.extend(c.probes(ctx))
        except Exception as e:
            failures.append(crash(c.area, c.name, e, traceback.format_exc(limit=6), planning=True))
    return specs, failures


def _prefetch_facts(ctx: Context) -> None:
    try:
        ctx.system()
    except Exception:  # noqa: S110 - the checks call it again and report the crash as DOC001
        pass


def gpu_here(ctx: Context) -> bool:
    """Any sign of a GPU on the machine under examination (inventory, a KFD or NVIDIA device node): with one,
    only the stack probes are reused; device probes would answer for hardware that may have changed."""
    try:
        system = ctx.system()  # read once per run; the device workers waited for it
    except Exception:
        return True  # unsure: do not reuse
    host = ctx.host()
    return bool(system.get("gpus") or (system.get("devices") or {}).get("kfd_exists")
                or host.exists("/dev/nvidiactl") or host.glob("/dev/nvidia[0-9]*"))


def probe_cache(ctx: Context) -> ProbeCache | None:
    if ctx.options.no_cache or ctx.options.record or ctx.env.get("ROCM_DOCTOR_NO_CACHE") == "1":
        return None  # report bundles record fresh answers
    if "probe_cache" not in ctx.facts:
        ctx.facts["probe_cache"] = ProbeCache(cache_dir(ctx.env) / "probes", ctx.python, ctx.env)
    return ctx.facts["probe_cache"]


def warm_worker(ctx: Context, cache: ProbeCache | None, genv: dict[str, str], specs: list[ProbeSpec]) -> Warm | None:
    """The run's handle on the warm server of the stack group (:mod:`doctor.warm`), or None where it is off: with
    the probe cache (same switches), never for a recorded report."""
    if cache is None or not warm.enabled(ctx.env):
        return None
    return Warm(ctx.python, cache.fingerprint(), worker_env(genv), [s.module for s in specs],
                start=ctx.options.warm_start)


def _reuse(cache: ProbeCache | None, ctx: Context, specs: list[ProbeSpec],
           env: dict[str, str]) -> tuple[dict[str, ProbeResult], dict[str, str]]:
    """(results kept from an earlier run, the keys of the cacheable probes still to run)."""
    hits: dict[str, ProbeResult] = {}
    keys: dict[str, str] = {}
    if cache is None:
        return hits, keys
    for s in specs:
        if s.cache not in ("pure", "nogpu") or (s.cache == "nogpu" and gpu_here(ctx)):
            continue
        key = cache.key(s.name, s.module, s.func, s.params, env, str(ctx.cwd), s.inputs)
        rec = cache.get(key)
        if rec is None:
            keys[s.name] = key
            continue
        try:
            hits[s.name] = ProbeResult(**{**rec, "name": s.name})
        except TypeError:  # a field this version does not know, or one missing
            keys[s.name] = key
    return hits, keys


def run_probe_specs(ctx: Context, specs: list[ProbeSpec]) -> None:
    """Run all probes, one worker per group, groups concurrently; results land in ctx.probes. Results kept
    from an earlier run with the same inputs (:mod:`doctor.cache`) are reused; a group with nothing left to
    run starts no worker."""
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

    timings = ctx.facts.setdefault("timings", {})
    cache = probe_cache(ctx)
    hits_seen: list[str] = ctx.facts.setdefault("cache_hits", [])

    def _run(item: tuple[str, list[ProbeSpec]]) -> dict[str, ProbeResult]:
        group, gspecs = item
        t0 = time.monotonic()
        try:
            return _run_group(group, gspecs)
        finally:
            timings[group] = round(time.monotonic() - t0, 3)

    def _run_group(group: str, gspecs: list[ProbeSpec]) -> dict[str, ProbeResult]:
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
        hits, keys = _reuse(cache, ctx, gspecs, genv)
        hits_seen.extend(hits)
        todo = [s for s in gspecs if s.name not in hits]
        w = warm_worker(ctx, cache, genv, gspecs) if group == "stack" and todo else None
        res = run_probes(todo, python=ctx.python, env=genv, warm=w) if todo else {}
        if w is not None:
            ctx.facts["warm"] = "served" if w.served else ("started" if w.start() else "cold")
        if cache is not None:
            for name, key in keys.items():
                r = res.get(name)
                if r is not None:
                    cache.put(key, name, asdict(r))
        return {**hits, **res}

    with ThreadPoolExecutor(max_workers=len(groups)) as pool:
        for res in pool.map(_run, groups.items()):
            ctx.probes.update(res)


def run(ctx: Context, checks: list[CheckDef] | None = None, progress: Progress | None = None) -> list[Finding]:
    """Plan, probe, judge: the findings of the selected checks (``checks`` overrides the selection)."""
    every, plugin_errors = load_all()
    selected = select(ctx, every) if checks is None else checks
    specs, findings = plan(ctx, selected, every)
    for mod, err in plugin_errors.items():
        findings.append(DOC001.finding(f"Plugin `{mod}` failed to load", err, check="doctor"))
    if specs and progress is not None:
        names = ", ".join(dict.fromkeys(s.name for s in specs))
        progress(f"probing in the examined Python ({names})")
    run_probe_specs(ctx, specs)
    for c in selected:
        if progress is not None:
            progress(f"judging {c.area}")
        try:
            findings.extend(c.func(ctx))
        except Exception as e:
            findings.append(crash(c.area, c.name, e, traceback.format_exc(limit=6)))
    return findings
