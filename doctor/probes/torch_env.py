"""Probes of the torch build, run in the examined Python (standard library + torch only).

``probe_torch`` imports torch once and describes the build and the visible devices; the companions
(torchvision / torchaudio) are imported in the stack worker, where llamafactory imports them anyway.
"""

from __future__ import annotations

from typing import Any

# what the stack worker's probes here import (a warm server imports it once); probe_torch runs in the device
# worker, which is never warm
PRELOAD = ("torch", "torchvision", "torchaudio")


def probe_torch() -> dict[str, Any]:
    """Import torch once and describe the build and the visible devices."""
    import time

    t0 = time.perf_counter()
    import torch

    info: dict[str, Any] = {"import_s": round(time.perf_counter() - t0, 3), "version": torch.__version__,
                            "hip": getattr(torch.version, "hip", None), "cuda": torch.version.cuda,
                            "devices": [], "arch_list": []}
    try:
        info["available"] = bool(torch.cuda.is_available())
        info["count"] = torch.cuda.device_count() if info["available"] else 0
    except Exception as e:  # e.g. "HIP_VISIBLE_DEVICES contains more devices than ROCR_VISIBLE_DEVICES"
        info["available"], info["count"], info["init_error"] = False, 0, f"{type(e).__name__}: {e}"
    try:
        info["arch_list"] = list(torch.cuda.get_arch_list())
    except Exception:
        info["arch_list"] = []
    for i in range(info["count"]):
        p = torch.cuda.get_device_properties(i)
        raw = getattr(p, "gcnArchName", "") or ""
        arch = raw.split(":")[0] if info["hip"] else f"sm_{p.major}{p.minor}"
        info["devices"].append({"index": i, "name": p.name, "arch": arch, "gcnArchName": raw,
                                "total_mib": round(p.total_memory / 2**20), "cus": p.multi_processor_count})
    try:
        info["blas"] = str(torch.backends.cuda.preferred_blas_library()) if info["count"] else None
    except Exception:
        info["blas"] = None
    return info


def probe_companions() -> dict[str, Any]:
    """torchvision / torchaudio: versions and whether they import beside this torch."""
    import importlib
    import importlib.metadata as md

    out: dict[str, Any] = {}
    for name in ("torchvision", "torchaudio"):
        try:
            ver = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
            continue
        entry: dict[str, Any] = {"version": ver}
        try:
            importlib.import_module(name)
            entry["import_ok"] = True
        except Exception as e:
            entry["import_ok"], entry["error"] = False, f"{type(e).__name__}: {str(e)[:300]}"
        out[name] = entry
    return out


def probe_libs(names: list[str]) -> dict[str, Any]:
    """Versions of the training stack (``names``: distribution names), from metadata only (nothing imported)."""
    import importlib.metadata as md

    out: dict[str, Any] = {}
    for name in names:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out
