"""GPUs and balance: inventory from the system tools (no torch), compared with what torch sees."""

from __future__ import annotations

import statistics
from typing import Any

from doctor import gpuinfo
from doctor.context import Context
from doctor.findings import Code, Finding, Severity, with_all_good
from doctor.registry import check

AREA = "gpus"

GPU000 = Code(
    AREA, "GPU000", Severity.OK, 'GPUs present, idle and visible to torch',
    why="The system tools list the GPUs, torch sees every GPU the run will use, and none of them is busy or far "
        "out of balance with the others.",
    fix='Nothing to do.',
)

GPU001 = Code(
    AREA, "GPU001", Severity.ERROR, 'torch sees fewer GPUs than the machine has',
    why='The system tools list more GPUs than torch.cuda.device_count() (after visible-device filters): a '
        'CPU/CUDA torch on AMD GPUs, missing permissions, or a filter you forgot.',
    fix='See TORCH002/TORCH007; check *_VISIBLE_DEVICES.',
)

GPU002 = Code(
    AREA, "GPU002", Severity.WARNING, 'A GPU is already busy',
    why='Memory in use or processes on a GPU before the run leave less memory than planned and slow it.',
    fix='Stop the other processes, or exclude the GPU with HIP_VISIBLE_DEVICES.',
)

GPU003 = Code(
    AREA, "GPU003", Severity.WARNING, 'GPUs imbalanced',
    why='One GPU holds far more memory or work than the others: a device_map pile-up on GPU 0, or a stray '
        'process.',
    fix='Find the process on the heavy GPU; do not use device_map with LLaMA-Factory training.',
)

GPU004 = Code(
    AREA, "GPU004", Severity.WARNING, 'amdsmi Python package unusable',
    why="PyPI's amdsmi is a thin wrapper that needs the system libamd_smi.so of the same version; a "
        'mismatched one fails at import and can break `import torch` on ROCm.',
    fix='`pip uninstall amdsmi`, or `pip install /opt/rocm/share/amd_smi` (the matching one).',
)

GPU005 = Code(
    AREA, "GPU005", Severity.INFO, 'No GPU found',
    why='No AMD or NVIDIA GPU found by any source.',
    fix='Nothing to do on a CPU machine.',
)

CODES = (GPU000, GPU001, GPU002, GPU003, GPU004, GPU005)

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
        out.append(GPU004.finding("The amdsmi Python package is installed but does not work", amdsmi[1],
                        error=amdsmi[1]))
    if not gpus:
        out.append(GPU005.finding("No AMD or NVIDIA GPU found", ""))
        return out
    expected = _visible_count(env)
    expected = len(gpus) if expected is None else min(expected, len(gpus))
    if torch_count is not None and torch_count < expected:
        out.append(GPU001.finding(f"torch sees {torch_count} GPU(s), the machine has {len(gpus)}"
                        + (f" ({expected} visible)" if expected != len(gpus) else ""),
                        f"sources: {', '.join(sorted({g.get('source', '?') for g in gpus}))}",
                        torch_count=torch_count, system_count=len(gpus)))
    # only the GPUs this run will use: a colleague's job on a GPU excluded with HIP_VISIBLE_DEVICES (the
    # fix GPU002 suggests) is none of its business; under `check --distributed` each rank sees its own
    mine = gpuinfo.visible_gpus(env, gpus)
    for g in mine:
        used, procs = g.get("vram_used_mib"), g.get("processes") or []
        if (used is not None and used > BUSY_MIB) or procs:
            out.append(GPU002.finding(f"GPU {g['index']} ({g.get('name')}) already uses "
                            f"{used or 0:.0f} MiB" + (f", {len(procs)} process(es)" if procs else ""),
                            f"of {g.get('vram_total_mib') or '?'} MiB", gpu=g))
    used = [g.get("vram_used_mib") for g in mine if g.get("vram_used_mib") is not None]
    if len(used) >= 2:
        med = statistics.median(used)
        tot = max((g.get("vram_total_mib") or 0) for g in mine) or 1
        top = max(mine, key=lambda g: g.get("vram_used_mib") or 0)
        if top["vram_used_mib"] - med > 0.2 * tot and top["vram_used_mib"] > 2 * med + BUSY_MIB:
            out.append(GPU003.finding(f"GPU {top['index']} holds {top['vram_used_mib']:.0f} MiB, the median "
                            f"GPU {med:.0f} MiB", "One GPU far above the others.", used_mib=used))
    return with_all_good(out, GPU000, f"{len(gpus)} GPU(s): " + ", ".join(
        f"{g.get('name') or '?'} {g.get('arch') or ''}".strip() for g in gpus), gpus=gpus)


@check(AREA, needs=("torch",), order=15)
def gpus(ctx: Context) -> list[Finding]:
    sysf = ctx.system()
    t = ctx.probes.get("torch")
    count = len(t.data.get("devices") or []) if t is not None and t.ok else None
    libs = ctx.probes.get("libs")
    amdsmi = None
    if libs is not None and libs.ok and libs.data.get("amdsmi"):
        amdsmi = gpuinfo.amdsmi_library_status(ctx.python)
    return judge(sysf.get("gpus") or [], count, ctx.env, amdsmi)
