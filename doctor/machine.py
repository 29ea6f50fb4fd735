"""Parent-side facts about the machine (no torch): ROCm version, device files, groups, GPUs.

Gathered once per run by :meth:`doctor.context.Context.system`; tests pass recorded dicts instead.
"""

from __future__ import annotations

import glob
import grp
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from doctor import gpuinfo


def rocm_version(env: dict[str, str]) -> tuple[str | None, str]:
    """System ROCm version and where it came from: /opt/rocm/.info/version, amd-smi, hipconfig."""
    root = env.get("ROCM_PATH") or env.get("ROCM_HOME") or "/opt/rocm"
    try:
        v = Path(root, ".info", "version").read_text().strip()
        if v:
            return v.split("-")[0], f"{root}/.info/version"
    except OSError:
        pass
    if shutil.which("amd-smi"):
        try:
            data = gpuinfo.run_json(["amd-smi", "version", "--json"])
            rec = data[0] if isinstance(data, list) and data else data
            if isinstance(rec, dict) and rec.get("rocm_version"):
                return str(rec["rocm_version"]), "amd-smi version"
        except Exception:
            pass
    if shutil.which("hipconfig"):
        try:
            p = subprocess.run(["hipconfig", "--version"], capture_output=True, text=True, timeout=10)
            m = re.search(r"(\d+\.\d+)", p.stdout)
            if m:
                return m.group(1), "hipconfig --version (HIP version)"
        except Exception:
            pass
    return None, ""


def device_access() -> dict[str, Any]:
    kfd = "/dev/kfd"
    renders = sorted(glob.glob("/dev/dri/renderD*"))
    try:
        groups = sorted({grp.getgrgid(g).gr_name for g in os.getgroups()})
    except KeyError:
        groups = []
    return {
        "kfd_exists": os.path.exists(kfd),
        "kfd_rw": os.access(kfd, os.R_OK | os.W_OK),
        "render_nodes": renders,
        "render_rw": [r for r in renders if os.access(r, os.R_OK | os.W_OK)],
        "groups": groups,
        "uid": os.getuid(),
    }


def gather(env: dict[str, str], use_library: bool = True) -> dict[str, Any]:
    gpus, notes = gpuinfo.inventory(env=env, use_library=use_library)
    ver, src = rocm_version(env)
    return {
        "rocm_version": ver,
        "rocm_version_source": src,
        "devices": device_access(),
        "gpus": [g.to_dict() for g in gpus],
        "gpu_notes": notes,
        "kfd_archs": gpuinfo.kfd_archs(),
        "amdgpu_module": os.path.isdir("/sys/module/amdgpu"),
    }
