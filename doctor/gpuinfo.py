"""GPU inventory without torch: amdsmi → ``amd-smi --json`` → ``rocm-smi --json`` → sysfs; NVML on NVIDIA.

Used by ``check`` (GPU balance, "torch sees fewer GPUs") and by the ``train`` supervisor (sampling
during a run), so it must never import torch. Every parser accepts the real variations seen in
the wild: amd-smi's list and ``{"gpu_data": [...]}`` envelopes, ``{"value","unit"}`` values and
"N/A"; rocm-smi's string values in bytes and its wrong "GFX Version" on ROCm 6.1-6.3.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TOOL_TIMEOUT = 10.0


@dataclass
class GPU:
    index: int                 # HIP/CUDA index where known, else the tool's index
    name: str = ""
    arch: str = ""             # gfx942, gfx90a, sm_90 ...
    vram_total_mib: float | None = None
    vram_used_mib: float | None = None
    vram_reserved_mib: float | None = None  # held by the driver, usable by no one (NVML v2); not "used"
    util_pct: float | None = None
    source: str = ""
    vendor: str = ""           # amd | nvidia
    processes: list[dict[str, Any]] = field(default_factory=list)
    driver: str = ""
    bdf: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return d


# ------------------------------------------------------------------ visibility

def parse_visible(v: str | None) -> list[str] | None:
    """A *_VISIBLE_DEVICES value as a list (None: unset; []: set but empty)."""
    if v is None:
        return None
    v = v.strip()
    return [x.strip() for x in v.split(",") if x.strip()] if v else []


def visible_indices(env: dict[str, str], gpus: list[dict[str, Any]]) -> set[int] | None:
    """Indices (as the inventory numbers them) of the GPUs a training run started with this environment will
    use: ROCR_VISIBLE_DEVICES filters first, then HIP_VISIBLE_DEVICES (or CUDA_VISIBLE_DEVICES) indexes into
    what is left; on NVIDIA only CUDA_VISIBLE_DEVICES counts. None when unrestricted or not decidable (UUIDs)."""
    order = sorted(int(g["index"]) for g in gpus)
    if any(g.get("vendor") == "amd" for g in gpus):
        chain = ["ROCR_VISIBLE_DEVICES",
                 "HIP_VISIBLE_DEVICES" if env.get("HIP_VISIBLE_DEVICES") is not None else "CUDA_VISIBLE_DEVICES"]
    else:
        chain = ["CUDA_VISIBLE_DEVICES"]
    restricted = False
    for var in chain:
        vals = parse_visible(env.get(var))
        if vals is None:
            continue
        if not all(v.lstrip("-").isdigit() for v in vals):
            return None
        order = [order[int(v)] for v in vals if 0 <= int(v) < len(order)]
        restricted = True
    return set(order) if restricted else None


def visible_gpus(env: dict[str, str], gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The inventory entries of the GPUs a run started with this environment will use (all when undecidable)."""
    vis = visible_indices(env, gpus)
    return [g for g in gpus if vis is None or int(g["index"]) in vis]


# ------------------------------------------------------------------ value helpers

def na(v: Any) -> Any:
    """amd-smi value: ``{"value", "unit"}`` → value; "N/A" → None."""
    if isinstance(v, dict) and "value" in v:
        v = v["value"]
    if isinstance(v, str) and v.strip().upper() in ("N/A", "NA", ""):
        return None
    return v


_UNIT_MIB = {"b": 1 / 2**20, "kb": 1000 / 2**20, "kib": 1 / 1024, "mb": 1e6 / 2**20, "mib": 1.0,
             "gb": 1e9 / 2**20, "gib": 1024.0}


def to_mib(v: Any, default_unit: str = "MiB") -> float | None:
    """Convert an amd-smi/rocm-smi/nvidia-smi memory value to MiB.

    amd-smi labels MiB-sized numbers "MB" (the CLI divides bytes by 1024*1024), so its "MB" is
    taken as MiB; that is what ``amd_smi_unit_mb_is_mib`` documents.
    """
    unit = default_unit
    if isinstance(v, dict):
        unit = v.get("unit") or unit
        v = v.get("value")
    v = na(v)
    if v is None:
        return None
    if isinstance(v, str):
        m = re.match(r"^\s*([0-9.]+)\s*([A-Za-z]*)\s*$", v)
        if not m:
            return None
        v, unit = float(m.group(1)), (m.group(2) or unit)
    u = unit.lower()
    if u == "mb" and default_unit == "amd-smi":
        u = "mib"
    try:
        return round(float(v) * _UNIT_MIB.get(u, 1.0), 1)
    except (TypeError, ValueError):
        return None


def normalize_gfx(s: str | None) -> str:
    """Fix rocm-smi's "GFX Version" on ROCm 6.1-6.3 (gfx90a shown as gfx9010, gfx1100 as gfx11000).

    The bug rendered the stepping in decimal and multiplied by 10 when minor==0. A real target is
    major + minor + one stepping character: 3 characters for major <= 9 (gfx90a, gfx942), 4 for
    major 10-12 (gfx1100); a longer all-digit string is the bug.
    """
    if not s:
        return ""
    s = s.strip().split(":")[0].lower()
    m = re.fullmatch(r"gfx(\d+)", s)
    if not m:
        return s
    digits = m.group(1)
    expected = 4 if digits.startswith("1") else 3  # major 10-12 has two digits, major <= 9 one
    if len(digits) <= expected:
        return s
    # digits = major + minor + stepping(decimal, 2 digits); e.g. 9|0|10 -> gfx90a, 11|0|00 -> gfx1100
    body, step = digits[:-2], int(digits[-2:])
    return f"gfx{body}{step:x}"


# ------------------------------------------------------------------ amd-smi

def amd_smi_records(payload: Any) -> list[dict[str, Any]]:
    """Both envelopes: a list of per-GPU dicts, or ``{"gpu_data": [...]}`` (amd-smi >= 26)."""
    if isinstance(payload, dict):
        payload = payload.get("gpu_data", [payload])
    if not isinstance(payload, list):
        return []
    return [r for r in payload if isinstance(r, dict)]


def parse_amd_smi(static: Any = None, metric: Any = None, enum: Any = None) -> list[GPU]:
    """Merge ``amd-smi static --asic --vram --json``, ``metric --usage --mem-usage --json`` and
    ``list -e --json`` (hip_id mapping) into GPUs indexed by HIP id where known."""
    gpus: dict[int, GPU] = {}

    def get(idx: int) -> GPU:
        return gpus.setdefault(idx, GPU(index=idx, source="amd-smi", vendor="amd"))

    for r in amd_smi_records(static):
        g = get(int(r.get("gpu", len(gpus))))
        asic = r.get("asic") if isinstance(r.get("asic"), dict) else {}
        g.name = str(na(asic.get("market_name")) or g.name)
        g.arch = normalize_gfx(na(asic.get("target_graphics_version")) or "")
        vram = r.get("vram") if isinstance(r.get("vram"), dict) else {}
        if vram.get("size") is not None:
            g.vram_total_mib = to_mib(vram.get("size"), "amd-smi")
        drv = r.get("driver") if isinstance(r.get("driver"), dict) else {}
        g.driver = str(na(drv.get("version")) or g.driver)
        bus = r.get("bus") if isinstance(r.get("bus"), dict) else {}
        g.bdf = str(na(bus.get("bdf")) or g.bdf)
    for r in amd_smi_records(metric):
        g = get(int(r.get("gpu", len(gpus))))
        usage = r.get("usage") if isinstance(r.get("usage"), dict) else {}
        u = na(usage.get("gfx_activity"))
        g.util_pct = float(u) if isinstance(u, (int, float)) else g.util_pct
        mem = r.get("mem_usage") if isinstance(r.get("mem_usage"), dict) else {}
        if mem:
            tot = to_mib(mem.get("total_vram"), "amd-smi")
            used = to_mib(mem.get("used_vram"), "amd-smi")
            g.vram_total_mib = tot if tot is not None else g.vram_total_mib
            g.vram_used_mib = used if used is not None else g.vram_used_mib
        procs = r.get("process") or r.get("processes")
        if isinstance(procs, list):
            g.processes = [p for p in procs if isinstance(p, dict)]
    # remap tool index -> HIP index
    mapping: dict[int, int] = {}
    for r in amd_smi_records(enum):
        hip = na(r.get("hip_id"))
        if hip is not None and r.get("gpu") is not None:
            try:
                mapping[int(r["gpu"])] = int(hip)
            except (TypeError, ValueError):
                pass
    out = []
    for idx, g in sorted(gpus.items()):
        g.index = mapping.get(idx, idx)
        out.append(g)
    return sorted(out, key=lambda g: g.index)


# ------------------------------------------------------------------ rocm-smi

def parse_rocm_smi(payload: Any) -> list[GPU]:
    """``rocm-smi --showproductname --showuse --showmeminfo vram --json`` (keys are human labels)."""
    if not isinstance(payload, dict):
        return []
    out = []
    for key, rec in payload.items():
        m = re.fullmatch(r"card(\d+)", str(key))
        if not m or not isinstance(rec, dict):
            continue
        low = {k.lower(): v for k, v in rec.items()}
        g = GPU(index=int(m.group(1)), source="rocm-smi", vendor="amd")
        g.name = str(na(low.get("card series")) or na(low.get("device name")) or "")
        g.arch = normalize_gfx(na(low.get("gfx version")))
        tot = na(low.get("vram total memory (b)"))
        used = na(low.get("vram total used memory (b)"))
        g.vram_total_mib = to_mib(tot, "B") if tot is not None else None
        g.vram_used_mib = to_mib(used, "B") if used is not None else None
        u = na(low.get("gpu use (%)"))
        try:
            g.util_pct = float(u) if u is not None else None
        except ValueError:
            g.util_pct = None
        g.bdf = str(na(low.get("pci bus")) or "")
        out.append(g)
    return out


# ------------------------------------------------------------------ NVIDIA

def parse_nvidia_smi_csv(text: str) -> list[GPU]:
    """``nvidia-smi --query-gpu=index,name,memory.total,memory.used,utilization.gpu --format=csv``."""
    out = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5 or not parts[0].isdigit():
            continue
        out.append(GPU(index=int(parts[0]), name=parts[1], vram_total_mib=to_mib(parts[2], "MiB"),
                       vram_used_mib=to_mib(parts[3], "MiB"),
                       util_pct=float(re.sub(r"[^0-9.]", "", parts[4]) or 0),
                       source="nvidia-smi", vendor="nvidia"))
    return out


def _nvml_memory(pynvml: Any, handle: Any) -> tuple[Any, int | None]:
    """(memory info, reserved bytes). NVML's v1 ``used`` is total − free, which counts the driver's
    reserved memory: 615 MiB on an idle H200 (the GPU validation run), where nvidia-smi says 0 MiB.
    The v2 call reports ``reserved`` apart and ``used`` as nvidia-smi does; old drivers lack it."""
    v2 = getattr(pynvml, "nvmlMemory_v2", None)
    if v2 is not None:
        try:
            mem = pynvml.nvmlDeviceGetMemoryInfo(handle, version=v2)
            return mem, int(mem.reserved)
        except Exception:  # NVMLError_FunctionNotFound / NotSupported on old drivers, TypeError on old pynvml
            pass
    return pynvml.nvmlDeviceGetMemoryInfo(handle), None


def query_nvml() -> list[GPU]:
    import pynvml  # the doctor's supervisor may use it: no torch involved

    pynvml.nvmlInit()
    try:
        out = []
        drv = pynvml.nvmlSystemGetDriverVersion()
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem, reserved = _nvml_memory(pynvml, h)
            util = pynvml.nvmlDeviceGetUtilizationRates(h)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            procs = []
            try:
                for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                    procs.append({"pid": p.pid, "vram_mib": round((p.usedGpuMemory or 0) / 2**20, 1)})
            except pynvml.NVMLError:
                pass
            name = pynvml.nvmlDeviceGetName(h)
            out.append(GPU(index=i, name=name.decode() if isinstance(name, bytes) else name,
                           arch=f"sm_{major}{minor}", vram_total_mib=round(mem.total / 2**20, 1),
                           vram_used_mib=round(mem.used / 2**20, 1), util_pct=float(util.gpu),
                           vram_reserved_mib=round(reserved / 2**20, 1) if reserved is not None else None,
                           source="nvml", vendor="nvidia", processes=procs,
                           driver=drv.decode() if isinstance(drv, bytes) else drv))
        return out
    finally:
        pynvml.nvmlShutdown()


# ------------------------------------------------------------------ sysfs

def parse_sysfs(root: str | Path = "/") -> list[GPU]:
    """AMD GPUs from /sys/class/drm/card*/device (vendor 0x1002, mem_info_vram_*, gpu_busy_percent)."""
    base = Path(root, "sys/class/drm")
    out = []
    if not base.is_dir():
        return out
    for card in sorted(base.glob("card[0-9]*")):
        if not re.fullmatch(r"card\d+", card.name):
            continue
        dev = card / "device"
        try:
            vendor = (dev / "vendor").read_text().strip()
        except OSError:
            continue
        if vendor != "0x1002":
            continue

        def rd(name: str, dev: Path = dev) -> str | None:
            try:
                return (dev / name).read_text().strip()
            except OSError:
                return None

        tot, used, busy = rd("mem_info_vram_total"), rd("mem_info_vram_used"), rd("gpu_busy_percent")
        out.append(GPU(index=len(out), name=rd("product_name") or "AMD GPU", source="sysfs", vendor="amd",
                       vram_total_mib=to_mib(tot, "B") if tot else None,
                       vram_used_mib=to_mib(used, "B") if used else None,
                       util_pct=float(busy) if busy and busy.isdigit() else None))
    return out


def kfd_archs(root: str | Path = "/") -> list[str]:
    """Real gfx arch of each KFD GPU node, from ``gfx_target_version`` (unaffected by HSA overrides)."""
    out = []
    for props in sorted(Path(root, "sys/class/kfd/kfd/topology/nodes").glob("*/properties")):
        try:
            text = props.read_text()
        except OSError:
            continue
        m = re.search(r"gfx_target_version\s+(\d+)", text)
        if not m or m.group(1) == "0":
            continue  # CPU node
        v = int(m.group(1))
        major, minor, step = v // 10000, (v // 100) % 100, v % 100
        out.append(f"gfx{major}{minor}{step:x}")
    return out


# ------------------------------------------------------------------ orchestration

def run_json(cmd: list[str]) -> Any:
    exe = shutil.which(cmd[0])
    if not exe:
        raise FileNotFoundError(cmd[0])
    p = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, timeout=TOOL_TIMEOUT)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-300:]}")
    # stdout only: amd-smi prints SyntaxWarnings etc. on stderr
    text = p.stdout.strip()
    start = min([i for i in (text.find("["), text.find("{")) if i >= 0], default=-1)
    if start < 0:
        raise ValueError(f"{cmd[0]} printed no JSON")
    return json.loads(text[start:])


# ------------------------------------------------------------------ amdsmi library (guarded subprocess)

# Runs in a separate interpreter: the PyPI amdsmi is a thin wrapper over the system's libamd_smi.so and a
# mismatched one raises KeyError/AttributeError, prints junk or even crashes; the doctor must survive all.
AMDSMI_SCRIPT = r"""
import json
import amdsmi as a
a.amdsmi_init()
out = []
try:
    for i, h in enumerate(a.amdsmi_get_processor_handles()):
        r = {"gpu": i}
        for key, fn in (("asic", "amdsmi_get_gpu_asic_info"), ("vram", "amdsmi_get_gpu_vram_usage"),
                        ("activity", "amdsmi_get_gpu_activity"), ("driver", "amdsmi_get_gpu_driver_info"),
                        ("bdf", "amdsmi_get_gpu_device_bdf"), ("enum", "amdsmi_get_gpu_enumeration_info"),
                        ("procs", "amdsmi_get_gpu_process_list")):
            try:
                r[key] = getattr(a, fn)(h)
            except Exception as e:
                r[key] = "N/A"
        out.append(r)
finally:
    a.amdsmi_shut_down()
print("AMDSMI_JSON " + json.dumps(out, default=str))
"""


def parse_amdsmi_lib(records: Any) -> list[GPU]:
    """Records printed by :data:`AMDSMI_SCRIPT` (the amdsmi library's dicts: VRAM in MiB)."""
    out = []
    for r in records if isinstance(records, list) else []:
        if not isinstance(r, dict):
            continue
        g = GPU(index=int(r.get("gpu", len(out))), source="amdsmi", vendor="amd")
        asic = r.get("asic") if isinstance(r.get("asic"), dict) else {}
        g.name = str(na(asic.get("market_name")) or "")
        g.arch = normalize_gfx(na(asic.get("target_graphics_version")) or "")
        vram = r.get("vram") if isinstance(r.get("vram"), dict) else {}
        g.vram_total_mib = to_mib(vram.get("vram_total"), "MiB")
        g.vram_used_mib = to_mib(vram.get("vram_used"), "MiB")
        act = r.get("activity") if isinstance(r.get("activity"), dict) else {}
        u = na(act.get("gfx_activity"))
        g.util_pct = float(u) if isinstance(u, (int, float)) else None
        drv = r.get("driver") if isinstance(r.get("driver"), dict) else {}
        g.driver = str(na(drv.get("driver_version")) or "")
        g.bdf = str(na(r.get("bdf")) or "")
        procs = r.get("procs")
        g.processes = [p if isinstance(p, dict) else {"handle": str(p)} for p in procs] if isinstance(procs, list) else []
        enum = r.get("enum") if isinstance(r.get("enum"), dict) else {}
        hip = na(enum.get("hip_id"))
        if isinstance(hip, int):
            g.index = hip
        out.append(g)
    return sorted(out, key=lambda g: g.index)


def query_amdsmi_lib(python: str | None = None, env: dict[str, str] | None = None) -> list[GPU]:
    """The amdsmi library in a subprocess; raises on any failure (the caller falls back)."""
    import sys

    p = subprocess.run([python or sys.executable, "-c", AMDSMI_SCRIPT], capture_output=True, text=True,
                       timeout=TOOL_TIMEOUT, env=env)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("AMDSMI_JSON ")), None)
    if p.returncode != 0 or line is None:
        tail = (p.stderr or p.stdout).strip().splitlines()
        raise RuntimeError(f"amdsmi library: {tail[-1] if tail else f'exit {p.returncode}'}")
    return parse_amdsmi_lib(json.loads(line[len("AMDSMI_JSON "):]))


def amdsmi_library_status(python: str | None = None) -> tuple[bool, str]:
    """Whether ``import amdsmi`` works in the examined Python, in a subprocess (a broken one can crash,
    print junk, or raise KeyError: 'libamd_smi.so' instead of ImportError)."""
    import sys

    code = "import amdsmi; amdsmi.amdsmi_init(); amdsmi.amdsmi_shut_down(); print('ok')"
    try:
        p = subprocess.run([python or sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=TOOL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    if p.returncode == 0 and "ok" in p.stdout:
        return True, ""
    lines = (p.stderr or p.stdout).strip().splitlines()
    return False, lines[-1] if lines else f"exit {p.returncode}"


def inventory(root: str | Path = "/", env: dict[str, str] | None = None,
              use_library: bool = True) -> tuple[list[GPU], list[str]]:
    """GPUs of this machine and the notes on which sources failed. Never raises."""
    env = env if env is not None else dict(os.environ)
    notes: list[str] = []
    # 0. the amdsmi library, only where it is installed; guarded in a subprocess (see AMDSMI_SCRIPT)
    if use_library:
        import importlib.util

        if importlib.util.find_spec("amdsmi") is not None:
            try:
                gpus = query_amdsmi_lib(env=env)
                if gpus:
                    return gpus, notes
            except Exception as e:
                notes.append(f"amdsmi: {e}")
    # 1. amd-smi CLI
    try:
        static = run_json(["amd-smi", "static", "--asic", "--vram", "--driver", "--bus", "--json"])
        try:
            metric = run_json(["amd-smi", "metric", "--usage", "--mem-usage", "--json"])
        except Exception as e:  # metrics can be unsupported in VMs
            metric, _ = None, notes.append(f"amd-smi metric: {e}")
        try:
            enum = run_json(["amd-smi", "list", "-e", "--json"])
        except Exception:
            enum = None
        gpus = parse_amd_smi(static, metric, enum)
        if gpus:
            return gpus, notes
    except FileNotFoundError:
        pass
    except Exception as e:
        notes.append(f"amd-smi: {e}")
    # 2. rocm-smi
    try:
        gpus = parse_rocm_smi(run_json(["rocm-smi", "--showproductname", "--showuse",
                                         "--showmeminfo", "vram", "--json"]))
        if gpus:
            return gpus, notes
    except FileNotFoundError:
        pass
    except Exception as e:
        notes.append(f"rocm-smi: {e}")
    # 3. sysfs
    gpus = parse_sysfs(root)
    if gpus:
        archs = kfd_archs(root)
        for g, a in zip(gpus, archs, strict=False):
            g.arch = g.arch or a
        return gpus, notes
    # 4. NVIDIA
    try:
        return query_nvml(), notes
    except ImportError:
        pass
    except Exception as e:
        notes.append(f"nvml: {e}")
    if shutil.which("nvidia-smi"):
        try:
            p = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total,memory.used,utilization.gpu",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=TOOL_TIMEOUT)
            if p.returncode == 0:
                return parse_nvidia_smi_csv(p.stdout), notes
            notes.append(f"nvidia-smi exited {p.returncode}")
        except Exception as e:
            notes.append(f"nvidia-smi: {e}")
    return [], notes
