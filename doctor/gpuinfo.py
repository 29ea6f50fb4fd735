"""GPU inventory without torch: amdsmi → ``amd-smi --json`` → ``rocm-smi --json`` → sysfs; NVML on NVIDIA.

Used by ``check`` (GPU balance, "torch sees fewer GPUs") and by the ``train`` supervisor (sampling
during a run), so it must never import torch. Every parser accepts the real variations seen in
the wild: amd-smi's list and ``{"gpu_data": [...]}`` envelopes, ``{"value","unit"}`` values and
"N/A"; rocm-smi's string values in bytes and its wrong "GFX Version" on ROCm 6.1-6.3.

The KFD topology (``/sys/class/kfd/kfd/topology/nodes/*/properties``) ties the tools' views together:
HIP numbers the GPU nodes in node order (what ``ROCR_VISIBLE_DEVICES`` indexes), each node carries its
PCI location (the BDF the tools report) and its real gfx target. Every file and tool goes through
:mod:`doctor.host`, so a recorded machine tree answers the same way as the live machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from doctor.archs import is_integrated
from doctor.host import Host

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
    smi_index: int | None = None     # the tool's own number (amd-smi/rocm-smi), where it differs from HIP's
    kfd_node: int | None = None      # KFD topology node
    integrated: bool = False         # an iGPU / APU (its "VRAM" is a BIOS carve-out; system memory via GTT)
    gtt_total_mib: float | None = None
    kfd_mem_mib: float | None = None      # the KFD node's memory bank (one partition's share in CPX/NPS4)
    compute_partition: str | None = None  # SPX / DPX / TPX / QPX / CPX (MI300-class), from sysfs
    memory_partition: str | None = None   # NPS1 / NPS2 / NPS4
    sclk_mhz: float | None = None         # graphics clock now (sysfs hwmon / NVML)
    power_w: float | None = None          # board power now
    temp_c: float | None = None           # hottest sensor (junction / hotspot where reported)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return d


# ------------------------------------------------------------------ visibility

PARTITIONS = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4}  # CPX: one partition per XCD (see partition_count)
NPS = {"NPS1": 1, "NPS2": 2, "NPS4": 4, "NPS8": 8}


def partition_count(compute: str | None, memory: str | None, name: str | None = None) -> int:
    """How many logical GPUs share one physical GPU's HBM: CPX gives one per XCD (MI300X/MI325X/MI350-series:
    8, MI300A: 6), NPS4 splits the HBM into four pools. The tools report the whole HBM for each partition."""
    c = (compute or "SPX").upper()
    n = (6 if "MI300A" in (name or "").upper() else 8) if c == "CPX" else PARTITIONS.get(c, 1)
    return max(n, NPS.get((memory or "NPS1").upper(), 1))


def usable_memory(g: dict[str, Any]) -> tuple[float | None, float, str]:
    """(total MiB one process on this GPU can plan with, MiB already in use of it, why): an APU's GTT rather
    than its BIOS carve-out, one partition's share of a partitioned GPU (the tools report the whole HBM for
    each), the KFD node's memory bank where it is smaller."""
    tot, used = g.get("vram_total_mib"), g.get("vram_used_mib") or 0.0
    if g.get("integrated"):
        gtt = g.get("gtt_total_mib")
        if gtt and (tot is None or gtt > tot):
            return gtt, 0.0, f"GTT {gtt / 1024:.1f} GiB (an APU allocates system memory; the carve-out is " \
                             f"{(tot or 0):.0f} MiB)"
        return tot, used, "carve-out (GTT size unknown)"
    if tot is None:
        return None, used, ""
    n = partition_count(g.get("compute_partition"), g.get("memory_partition"), g.get("name"))
    kfd = g.get("kfd_mem_mib")
    if kfd and kfd < 0.9 * tot:
        return kfd, used / max(n, round(tot / kfd)), f"the KFD node's memory bank ({kfd / 1024:.1f} GiB)"
    if n > 1:
        return tot / n, used / n, f"1/{n} of {tot / 1024:.0f} GiB ({g.get('compute_partition')}/" \
                                  f"{g.get('memory_partition')})"
    return tot, used, ""


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


def mask_env(keep: list[int], env: dict[str, str]) -> dict[str, str]:
    """The visible-device variables that leave a run exactly the GPUs ``keep`` (inventory indices, the
    runtime's own KFD order): ROCR_VISIBLE_DEVICES filters first, so HIP_/CUDA_VISIBLE_DEVICES, where set,
    are renumbered to what is left."""
    out = {"ROCR_VISIBLE_DEVICES": ",".join(str(i) for i in sorted(keep))}
    for var in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        if env.get(var) is not None:
            out[var] = ",".join(str(i) for i in range(len(keep)))
    return out


def exclusion(inventory: list[dict[str, Any]], used: list[dict[str, Any]], bad: list[dict[str, Any]],
              env: dict[str, str]) -> dict[str, str] | None:
    """The visible-device variables that run a job without the ``bad`` GPUs: the healthy GPUs it used, topped
    up from unused healthy discrete ones to keep its size; None when no healthy GPU is left (no spare)."""
    bad_idx = {g["index"] for g in bad}
    keep = [g["index"] for g in used if g["index"] not in bad_idx]
    spare = [g["index"] for g in inventory if g.get("vendor") == "amd" and not g.get("integrated")
             and g["index"] not in bad_idx and g["index"] not in keep]
    keep += spare[:max(0, len(used) - len(keep))]
    return mask_env(keep, env) if keep else None


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
        g.smi_index = idx
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
        g = GPU(index=int(m.group(1)), source="rocm-smi", vendor="amd", smi_index=int(m.group(1)))
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
            live = _nvml_live(pynvml, h)
            out.append(GPU(index=i, name=name.decode() if isinstance(name, bytes) else name, **live,
                           arch=f"sm_{major}{minor}", vram_total_mib=round(mem.total / 2**20, 1),
                           vram_used_mib=round(mem.used / 2**20, 1), util_pct=float(util.gpu),
                           vram_reserved_mib=round(reserved / 2**20, 1) if reserved is not None else None,
                           source="nvml", vendor="nvidia", processes=procs,
                           driver=drv.decode() if isinstance(drv, bytes) else drv))
        return out
    finally:
        pynvml.nvmlShutdown()


def _nvml_live(pynvml: Any, h: Any) -> dict[str, float]:
    """Clock, power and temperature of one GPU (each optional: a VM or an old driver may refuse one)."""
    out: dict[str, float] = {}
    for key, call in (("sclk_mhz", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
                      ("power_w", lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0),
                      ("temp_c", lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU))):
        try:
            out[key] = float(call())
        except Exception:  # noqa: S112 - NVMLError_NotSupported and friends
            continue
    return out


# ------------------------------------------------------------------ sysfs

def _pci_name(name: str) -> str:
    """A tool's name field, unless it is only a PCI id (``0x1002``, ``0x74a1``): that is no name."""
    n = (name or "").strip()
    return "" if re.fullmatch(r"0x[0-9a-fA-F]{4}|N/A", n) else n


def parse_sysfs(host: Host) -> list[GPU]:
    """AMD GPUs from /sys/class/drm/card*/device (vendor 0x1002, mem_info_vram_*, gpu_busy_percent)."""
    out = []
    for card in host.glob("/sys/class/drm/card[0-9]*"):
        name = card.rsplit("/", 1)[-1]
        if not re.fullmatch(r"card\d+", name):
            continue
        dev = f"{card}/device"
        vendor = (host.read(f"{dev}/vendor") or "").strip()
        if vendor != "0x1002":
            continue

        def rd(attr: str, dev: str = dev) -> str | None:
            v = host.read(f"{dev}/{attr}")
            return v.strip() if v is not None else None

        tot, used, busy = rd("mem_info_vram_total"), rd("mem_info_vram_used"), rd("gpu_busy_percent")
        gtt = rd("mem_info_gtt_total")
        uevent = rd("uevent") or ""
        m = re.search(r"PCI_SLOT_NAME=(\S+)", uevent)
        out.append(GPU(index=len(out), name=rd("product_name") or "AMD GPU", source="sysfs", vendor="amd",
                       vram_total_mib=to_mib(tot, "B") if tot else None,
                       vram_used_mib=to_mib(used, "B") if used else None,
                       gtt_total_mib=to_mib(gtt, "B") if gtt else None,
                       util_pct=float(busy) if busy and busy.isdigit() else None,
                       bdf=m.group(1).lower() if m else "", smi_index=int(name[4:])))
    return out


@dataclass
class KfdNode:
    node: int
    arch: str
    simd_count: int
    cpu_cores: int
    bdf: str
    device_id: str
    local_mem_mib: float | None

    @property
    def is_gpu(self) -> bool:
        return self.simd_count > 0 or bool(self.arch)


def _bdf(domain: int, location: int) -> str:
    return f"{domain:04x}:{location >> 8 & 0xff:02x}:{location >> 3 & 0x1f:02x}.{location & 7:x}"


def kfd_nodes(host: Host) -> list[KfdNode]:
    """The KFD topology's nodes in node order (the order HIP numbers the GPUs in)."""
    out = []
    for props in host.glob("/sys/class/kfd/kfd/topology/nodes/*/properties"):
        text = host.read(props) or ""
        kv = dict(re.findall(r"^(\w+)\s+(-?\d+)\s*$", text, re.M))
        try:
            node = int(props.split("/")[-2])
        except ValueError:
            continue
        v = int(kv.get("gfx_target_version", 0))
        arch = f"gfx{v // 10000}{(v // 100) % 100}{v % 100:x}" if v else ""
        mem = host.read(props.rsplit("/", 1)[0] + "/mem_banks/0/properties") or ""
        mm = re.search(r"^size_in_bytes\s+(\d+)", mem, re.M)
        out.append(KfdNode(node, arch, int(kv.get("simd_count", 0)), int(kv.get("cpu_cores_count", 0)),
                           _bdf(int(kv.get("domain", 0)), int(kv.get("location_id", 0))) if kv.get("location_id") else "",
                           f"0x{int(kv.get('device_id', 0)):04x}",
                           round(int(mm.group(1)) / 2**20, 1) if mm else None))
    return sorted(out, key=lambda n: n.node)


def kfd_archs(host: Host) -> list[str]:
    """Real gfx arch of each KFD GPU node, from ``gfx_target_version`` (unaffected by HSA overrides)."""
    return [n.arch for n in kfd_nodes(host) if n.is_gpu and n.arch]


def attach_kfd(gpus: list[GPU], nodes: list[KfdNode]) -> list[GPU]:
    """Give each tool-reported GPU its HIP index (position among KFD GPU nodes), KFD node and real arch,
    matched by BDF (amd-smi before ROCm 6.4 has no ``list -e``: the BDF is the one key every view shares).
    The partitions of a CPX GPU share one BDF: they take that BDF's nodes in order. Where the tool gave no
    arch (amd-smi of ROCm <= 6.2, rocm-smi < 6.1) the KFD node's is used."""
    gpu_nodes = [n for n in nodes if n.is_gpu]
    by_bdf: dict[str, list[tuple[int, KfdNode]]] = {}
    for i, n in enumerate(gpu_nodes):
        if n.bdf:
            by_bdf.setdefault(n.bdf.lower(), []).append((i, n))
    for g in gpus:
        queue = by_bdf.get((g.bdf or "").lower())
        if not queue:
            continue
        i, n = queue.pop(0)
        if g.smi_index is None:
            g.smi_index = g.index
        g.index, g.kfd_node = i, n.node
        if not g.arch:
            g.arch = n.arch
        g.kfd_mem_mib = n.local_mem_mib
        g.integrated = g.integrated or is_integrated(g.arch or n.arch, g.name, n.cpu_cores > 0)
    # partitions the tool folded into one entry (sysfs has one card per physical GPU): one entry per KFD node
    seen = {(g.bdf or "").lower(): g for g in gpus if g.kfd_node is not None}
    for bdf, queue in by_bdf.items():
        if bdf in seen:
            for i, n in queue:
                gpus.append(replace(seen[bdf], index=i, kfd_node=n.node, kfd_mem_mib=n.local_mem_mib,
                                    smi_index=None, processes=[]))
    for g in gpus:
        g.name = _pci_name(g.name)
        g.integrated = g.integrated or is_integrated(g.arch, g.name, False)
    return sorted(gpus, key=lambda g: g.index)


def attach_sysfs(host: Host, gpus: list[GPU]) -> list[GPU]:
    """What only sysfs tells, by BDF: GTT size (an APU's usable memory), compute and memory partition mode."""
    cards: dict[str, str] = {}
    for card in host.glob("/sys/class/drm/card[0-9]*"):
        if re.fullmatch(r".*/card\d+", card):
            m = re.search(r"PCI_SLOT_NAME=(\S+)", host.read(f"{card}/device/uevent") or "")
            if m:
                cards.setdefault(m.group(1).lower(), f"{card}/device")
    for g in gpus:
        dev = cards.get((g.bdf or "").lower())
        if g.vendor != "amd" or dev is None:
            continue

        def rd(attr: str, dev: str = dev) -> str | None:
            v = host.read(f"{dev}/{attr}")
            return v.strip() if v and v.strip() else None

        if g.gtt_total_mib is None and (gtt := rd("mem_info_gtt_total")):
            g.gtt_total_mib = to_mib(gtt, "B")
        g.compute_partition = (rd("current_compute_partition") or "").upper() or None
        g.memory_partition = (rd("current_memory_partition") or "").upper() or None
        for k, v in hwmon(host, dev).items():
            if getattr(g, k) is None:
                setattr(g, k, v)
    return gpus


def hwmon(host: Host, dev: str) -> dict[str, float]:
    """An amdgpu device's clock, power and temperature from its hwmon directory: ``freq1_input`` (sclk, Hz),
    ``power1_average`` or ``power1_input`` (µW), the highest of ``temp*_input`` (m°C: edge, junction, mem)."""
    out: dict[str, float] = {}
    mons = host.glob(f"{dev}/hwmon/hwmon*")
    if not mons:
        return out
    mon = mons[0]

    def num(name: str) -> float | None:
        v = (host.read(f"{mon}/{name}") or "").strip()
        return float(v) if re.fullmatch(r"\d+", v) else None

    if (f := num("freq1_input")) is not None:
        out["sclk_mhz"] = round(f / 1e6, 1)
    p = num("power1_average")
    p = num("power1_input") if p is None else p
    if p is not None:
        out["power_w"] = round(p / 1e6, 1)
    temps = [t for t in (num(f"temp{i}_input") for i in (1, 2, 3)) if t is not None]
    if temps:
        out["temp_c"] = round(max(temps) / 1000, 1)
    return out


# ------------------------------------------------------------------ orchestration

def run_json(cmd: list[str], host: Host | None = None) -> Any:
    host = host or Host.from_env()
    res = host.run(cmd, TOOL_TIMEOUT)
    if res.missing:
        raise FileNotFoundError(cmd[0])
    if res.rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {res.rc}: {res.stderr.strip()[-300:]}")
    # stdout only: amd-smi prints SyntaxWarnings etc. on stderr
    text = res.stdout.strip()
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


def inventory(host: Host | None = None, env: dict[str, str] | None = None,
              use_library: bool = True) -> tuple[list[GPU], list[str]]:
    """GPUs of this machine and the notes on which sources failed. Never raises. A recorded machine tree
    (``ROCM_DOCTOR_SYSROOT``) is read from its files and recorded tool outputs only."""
    env = env if env is not None else dict(os.environ)
    host = host or Host.from_env(env)
    notes: list[str] = []
    nodes = kfd_nodes(host)
    gpus = _amd_inventory(host, env, use_library and host.live, notes)
    if gpus:
        return attach_sysfs(host, attach_kfd(gpus, nodes)), notes
    if not host.live:
        return _nvidia_smi(host, notes), notes
    try:
        return query_nvml(), notes
    except ImportError:
        pass
    except Exception as e:
        notes.append(f"nvml: {e}")
    return _nvidia_smi(host, notes), notes


def _amd_inventory(host: Host, env: dict[str, str], use_library: bool, notes: list[str]) -> list[GPU]:
    # 0. the amdsmi library, only where it is installed; guarded in a subprocess (see AMDSMI_SCRIPT)
    if use_library:
        import importlib.util

        if importlib.util.find_spec("amdsmi") is not None:
            try:
                gpus = query_amdsmi_lib(env=env)
                if gpus:
                    return gpus
            except Exception as e:
                notes.append(f"amdsmi: {e}")
    # 1. amd-smi CLI
    try:
        static = run_json(["amd-smi", "static", "--asic", "--vram", "--driver", "--bus", "--json"], host)
        try:
            metric = run_json(["amd-smi", "metric", "--usage", "--mem-usage", "--json"], host)
        except Exception as e:  # metrics can be unsupported in VMs
            metric, _ = None, notes.append(f"amd-smi metric: {e}")
        try:
            enum = run_json(["amd-smi", "list", "-e", "--json"], host)  # ROCm >= 6.4; before it, BDF matching
        except Exception:
            enum = None
        gpus = parse_amd_smi(static, metric, enum)
        if gpus:
            return gpus
    except FileNotFoundError:
        pass
    except Exception as e:
        notes.append(f"amd-smi: {e}")
    # 2. rocm-smi
    try:
        gpus = parse_rocm_smi(run_json(["rocm-smi", "--showproductname", "--showuse", "--showmeminfo", "vram",
                                        "--showbus", "--json"], host))
        if gpus:
            return gpus
    except FileNotFoundError:
        pass
    except Exception as e:
        notes.append(f"rocm-smi: {e}")
    # 3. sysfs
    return parse_sysfs(host)


def _nvidia_smi(host: Host, notes: list[str]) -> list[GPU]:
    if not host.which("nvidia-smi"):
        return []
    res = host.run(["nvidia-smi", "--query-gpu=index,name,memory.total,memory.used,utilization.gpu",
                    "--format=csv,noheader"])
    if res.ok:
        return parse_nvidia_smi_csv(res.stdout)
    notes.append(f"nvidia-smi exited {res.rc}")
    return []
