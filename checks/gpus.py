"""GPUs and balance: inventory from the system tools (no torch), compared with what torch sees."""

from __future__ import annotations

import re
import statistics
from collections import Counter
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

GPU006 = Code(
    AREA, "GPU006", Severity.WARNING, 'An integrated GPU is visible beside the discrete one(s)',
    why="The APU's iGPU (Raphael gfx1036, Phoenix gfx1103, Strix gfx1150/1151, Vega APUs gfx90c/902, ...) is "
        "enumerated with the discrete GPUs. torch counts it as a device: `shared object initialization failed`, "
        "`hipErrorInvalidImage` or `invalid device function` when a kernel lands on it (no wheel ships its "
        "arch), RCCL hangs when a rank takes it, and a 512 MiB carve-out as \"GPU 0\".",
    fix='Hide it: `export ROCR_VISIBLE_DEVICES=<discrete indices>` (rocm-doctor fix prints the value), or '
        'disable the iGPU in the BIOS.',
    playbook='hide-igpu', autofix=True,
)

GPU007 = Code(
    AREA, "GPU007", Severity.INFO, 'GPU index map',
    why='HIP/torch, ROCR_VISIBLE_DEVICES, amd-smi/rocm-smi and the kernel number the same GPUs differently '
        '(amd-smi indices are not HIP indices); the map joins them by PCI address.',
    fix='Nothing to do; use the HIP index in HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES '
        '(before any other filter).',
)

CODES = (GPU000, GPU001, GPU002, GPU003, GPU004, GPU005, GPU006, GPU007)

BUSY_MIB = 1024
DISPLAY_MIB = 2048  # a desktop holds 0.3-2 GiB of a Radeon/GeForce for the screen


def display_only(g: dict[str, Any]) -> bool:
    """A desktop GPU whose memory is the display's: no compute process, 0 % busy, at most 2 GiB, not a
    datacenter part (those have no display engine in use)."""
    name = str(g.get("name") or "")
    datacenter = bool(re.search(r"Instinct|\bMI\d{2,3}|\b[AHBL]\d{2,3}\b|\bH200|Tesla|\bA100|\bV100", name))
    return (not datacenter and not g.get("processes") and (g.get("util_pct") or 0) == 0
            and (g.get("vram_used_mib") or 0) <= DISPLAY_MIB)


def index_map(gpus: list[dict[str, Any]]) -> str:
    rows = ["HIP  SMI  KFD  BDF           arch      name"]
    for g in gpus:
        smi = g.get("smi_index")
        rows.append(f"{g.get('index')!s:<4} {'-' if smi is None else smi!s:<4} {g.get('kfd_node') or '-'!s:<4} "
                    f"{g.get('bdf') or '-':<13} {g.get('arch') or '?':<9} {g.get('name') or '?'}"
                    + ("  (integrated)" if g.get("integrated") else ""))
    return "\n".join(rows)


def _visible_count(env: dict[str, str]) -> int | None:
    for var in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        vals = gpuinfo.parse_visible(env.get(var))
        if vals is not None:
            return len([x for x in vals if x != "-1"])
    return None


def judge(gpus: list[dict[str, Any]], torch_count: int | None, env: dict[str, str],
          amdsmi: tuple[bool, str] | None = None, verbose: bool = False) -> list[Finding]:
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
    igpus = [g for g in mine if g.get("integrated") and g.get("vendor") == "amd"]
    dgpus = [g for g in mine if not g.get("integrated")]
    if igpus and dgpus:
        # ROCR_VISIBLE_DEVICES takes the runtime's own numbering (the KFD order, the inventory's index) and
        # filters first; HIP_/CUDA_VISIBLE_DEVICES then index into what is left, so they are renumbered
        patch = gpuinfo.mask_env([g["index"] for g in mine if not g.get("integrated") and g.get("vendor") == "amd"],
                                 env)
        names = ", ".join(f"{g['index']} ({g.get('name') or g.get('arch')})" for g in igpus)
        out.append(GPU006.finding(
            f"Integrated GPU {names} visible beside {len(dgpus)} discrete GPU(s)",
            " ".join(f"{k}={v}" for k, v in patch.items()) + " keeps only the discrete GPU(s)",
            igpus=[g["index"] for g in igpus], env=patch))
    if verbose and any(g.get("vendor") == "amd" for g in gpus):
        out.append(GPU007.finding(f"{len(gpus)} GPU(s): HIP index, SMI index, KFD node, PCI address, arch",
                                  index_map(gpus)))
    for g in mine:
        used, procs = g.get("vram_used_mib"), g.get("processes") or []
        if g.get("integrated") and dgpus:
            continue  # GPU006 covers it; its carve-out in use is the desktop's
        if ((used is not None and used > BUSY_MIB) or procs) and not display_only(g):
            out.append(GPU002.finding(f"GPU {g['index']} ({g.get('name')}) already uses "
                            f"{used or 0:.0f} MiB" + (f", {len(procs)} process(es)" if procs else ""),
                            f"of {g.get('vram_total_mib') or '?'} MiB", gpu=g))
    used = [g.get("vram_used_mib") for g in dgpus if g.get("vram_used_mib") is not None]
    if len(used) >= 2:
        med = statistics.median(used)
        tot = max((g.get("vram_total_mib") or 0) for g in dgpus) or 1
        top = max(dgpus, key=lambda g: g.get("vram_used_mib") or 0)
        if top["vram_used_mib"] - med > 0.2 * tot and top["vram_used_mib"] > 2 * med + BUSY_MIB:
            out.append(GPU003.finding(f"GPU {top['index']} holds {top['vram_used_mib']:.0f} MiB, the median "
                            f"GPU {med:.0f} MiB", "One GPU far above the others.", used_mib=used))
    kinds = Counter(f"{g.get('name') or '?'} {g.get('arch') or ''}".strip() for g in gpus)
    return with_all_good(out, GPU000, f"{len(gpus)} GPU(s): " + ", ".join(
        f"{n}× {k}" if n > 1 else k for k, n in kinds.items()), gpus=gpus)


@check(AREA, needs=("torch",), order=15)
def gpus(ctx: Context) -> list[Finding]:
    sysf = ctx.system()
    t = ctx.probes.get("torch")
    # a recorded machine (ROCM_DOCTOR_SYSROOT, --replay) is not the one this torch runs on
    count = len(t.data.get("devices") or []) if t is not None and t.ok and not ctx.host().rooted else None
    libs = ctx.probes.get("libs")
    amdsmi = None
    if libs is not None and libs.ok and libs.data.get("amdsmi"):
        amdsmi = gpuinfo.amdsmi_library_status(ctx.python)
    return judge(sysf.get("gpus") or [], count, ctx.env, amdsmi, verbose=ctx.options.verbose)
