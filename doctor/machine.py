"""Parent-side facts about the machine (no torch): ROCm version, device files, groups, GPUs.

Gathered once per run by :meth:`doctor.context.Context.system`, through :mod:`doctor.host` (so a recorded
machine tree answers too); tests pass recorded dicts instead.
"""

from __future__ import annotations

import grp
import os
import re
from typing import Any

from doctor import gpuinfo
from doctor.host import Host


def rocm_version(host: Host, env: dict[str, str]) -> tuple[str | None, str]:
    """System ROCm version and where it came from: /opt/rocm/.info/version, amd-smi, hipconfig."""
    root = env.get("ROCM_PATH") or env.get("ROCM_HOME") or "/opt/rocm"
    v = (host.read(f"{root}/.info/version") or "").strip()
    if v:
        return v.split("-")[0], f"{root}/.info/version"
    if host.which("amd-smi"):
        try:
            data = gpuinfo.run_json(["amd-smi", "version", "--json"], host)
            rec = data[0] if isinstance(data, list) and data else data
            if isinstance(rec, dict) and rec.get("rocm_version") and rec["rocm_version"] != "N/A":
                return str(rec["rocm_version"]), "amd-smi version"
        except Exception:
            pass
    if host.which("hipconfig"):
        res = host.run(["hipconfig", "--version"])
        m = re.search(r"(\d+\.\d+)", res.stdout) if res.ok else None
        if m:
            return m.group(1), "hipconfig --version (HIP version)"
    return None, ""


def device_access(host: Host) -> dict[str, Any]:
    renders = host.glob("/dev/dri/renderD*")
    if not host.rooted:
        try:
            groups = sorted({grp.getgrgid(g).gr_name for g in os.getgroups()})
        except KeyError:
            groups = []
        uid = os.getuid()
    else:
        groups, uid = [], None  # a recorded tree: who may open the devices is not in it
    return {
        "kfd_exists": host.exists("/dev/kfd"),
        "kfd_rw": host.access("/dev/kfd", os.R_OK | os.W_OK) if not host.rooted else None,
        "render_nodes": renders,
        "render_rw": [r for r in renders if host.access(r, os.R_OK | os.W_OK)] if not host.rooted else None,
        "groups": groups,
        "uid": uid,
    }


def gather(env: dict[str, str], use_library: bool = True, host: Host | None = None) -> dict[str, Any]:
    host = host or Host.from_env(env)
    gpus, notes = gpuinfo.inventory(host=host, env=env, use_library=use_library)
    ver, src = rocm_version(host, env)
    return {
        "rocm_version": ver,
        "rocm_version_source": src,
        "devices": device_access(host),
        "gpus": [g.to_dict() for g in gpus],
        "gpu_notes": notes,
        "kfd_archs": gpuinfo.kfd_archs(host),
        "amdgpu_module": host.is_dir("/sys/module/amdgpu"),
        "sysroot": str(host.root) if host.rooted else None,
    }
