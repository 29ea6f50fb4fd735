"""GPUs and balance: inventory from the system tools (no torch), compared with what torch sees."""

from __future__ import annotations

import statistics
from typing import Any

from doctor import gpuinfo, system
from doctor.context import Context
from doctor.findings import Finding, Severity, make
from doctor.runner import check

A = "gpus"
BUSY_MIB = 1024


def _visible_count(env: dict[str, str]) -> int | None:
    for var in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        vals = gpuinfo.parse_visible(env.get(var))
        if vals is not None:
            return len([x for x in vals if x != "-1"])
    return None


def judge(gpus: list[dict[str, Any]], torch_count: int | None, env: dict[str, str],
          amdsmi: tuple[bool, str] | None = None) -> list[Finding]:
    out: list[Finding] = []
    if amdsmi is not None and not amdsmi[0]:
        out.append(make("GPU004", A, "The amdsmi Python package is installed but does not work", amdsmi[1],
                        error=amdsmi[1]))
    if not gpus:
        out.append(make("GPU005", A, "No AMD or NVIDIA GPU found", ""))
        return out
    expected = _visible_count(env)
    expected = len(gpus) if expected is None else min(expected, len(gpus))
    if torch_count is not None and torch_count < expected:
        out.append(make("GPU001", A, f"torch sees {torch_count} GPU(s), the machine has {len(gpus)}"
                        + (f" ({expected} visible)" if expected != len(gpus) else ""),
                        f"sources: {', '.join(sorted({g.get('source', '?') for g in gpus}))}",
                        torch_count=torch_count, system_count=len(gpus)))
    # only the GPUs this run will use: a colleague's job on a GPU excluded with HIP_VISIBLE_DEVICES (the
    # fix GPU002 suggests) is none of its business; under `check --distributed` each rank sees its own
    mine = gpuinfo.visible_gpus(env, gpus)
    for g in mine:
        used, procs = g.get("vram_used_mib"), g.get("processes") or []
        if (used is not None and used > BUSY_MIB) or procs:
            out.append(make("GPU002", A, f"GPU {g['index']} ({g.get('name')}) already uses "
                            f"{used or 0:.0f} MiB" + (f", {len(procs)} process(es)" if procs else ""),
                            f"of {g.get('vram_total_mib') or '?'} MiB", gpu=g))
    used = [g.get("vram_used_mib") for g in mine if g.get("vram_used_mib") is not None]
    if len(used) >= 2:
        med = statistics.median(used)
        tot = max((g.get("vram_total_mib") or 0) for g in mine) or 1
        top = max(mine, key=lambda g: g.get("vram_used_mib") or 0)
        if top["vram_used_mib"] - med > 0.2 * tot and top["vram_used_mib"] > 2 * med + BUSY_MIB:
            out.append(make("GPU003", A, f"GPU {top['index']} holds {top['vram_used_mib']:.0f} MiB, the median "
                            f"GPU {med:.0f} MiB", "One GPU far above the others.", used_mib=used))
    if not [f for f in out if f.severity in (Severity.ERROR, Severity.WARNING)]:
        out.append(make("GPU000", A, f"{len(gpus)} GPU(s): " + ", ".join(
            f"{g.get('name') or '?'} {g.get('arch') or ''}".strip() for g in gpus), "", gpus=gpus))
    return out


@check(A, order=15)
def gpus(ctx: Context) -> list[Finding]:
    sysf = system.facts(ctx)
    t = ctx.probes.get("torch")
    count = len(t.data.get("devices") or []) if t is not None and t.ok else None
    libs = ctx.probes.get("libs")
    amdsmi = None
    if libs is not None and libs.ok and libs.data.get("amdsmi"):
        amdsmi = gpuinfo.amdsmi_library_status(ctx.python)
    return judge(sysf.get("gpus") or [], count, ctx.env, amdsmi)
