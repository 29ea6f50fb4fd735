"""GPU health without torch: ECC/RAS error counts and retired pages, recent amdgpu kernel events (resets, ring
timeouts, hangs, RAS/ACA, XGMI, page faults), throttling, compute/memory partition modes, firmware versions.

Read through :mod:`doctor.host` from sysfs (``/sys/class/drm/cardN/device/ras/*_err_count``,
``gpu_vram_bad_pages``, ``current_compute_partition``, ``fw_version/``), ``dmesg`` and ``amd-smi``. The
parsers are pure and shared: ``check``'s health area uses them, and ``train`` reads the same data of the
GPUs a failed attempt used before it decides whether to retry.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from doctor.gpuinfo import amd_smi_records, na, partition_count
from doctor.host import Host, ToolResult

__all__ = ["partition_count"]  # re-exported: the health area names partitions too

RECENT_S = 3600.0  # "recent": within the last hour

# amdgpu kernel messages, by kind (the driver's own wording across kernel releases; recorded outputs in
# tests/fixtures/hosts/ and tests/fixtures/dmesg/)
EVENTS: list[tuple[str, re.Pattern[str]]] = [
    ("reset", re.compile(r"GPU reset begin|GPU reset\(\d+\) succeeded|GPU reset end|GPU recovery|"
                         r"(?:MODE[12]|BACO) reset|ring \S+ reset failed|ring reset failed|device lost from bus", re.I)),
    ("ring_timeout", re.compile(r"ring \S+ timeout|amdgpu_job_timedout", re.I)),
    ("hang", re.compile(r"GPU Hang|MES failed to respond|MES might be in unrecoverable state|"
                        r"qcm fence wait loop timeout|cp might be in an unrecoverable state|"
                        r"(?:IB|ring) (?:ring )?test failed", re.I)),
    ("ras", re.compile(r"uncorrectable hardware error|ERREVENT_\w+|\bACA\b.*(?:error|event)|\baca entry\b|\[Hardware Error\]:\s+aca\b|Accelerator Check "
                       r"Architecture|RAS.*(?:error|poison)|poison(?:ed)? (?:consumption|creation)|"
                       r"(?:uncorrectable|UE) ECC|ECC error|bad page|retired page", re.I)),
    ("xgmi", re.compile(r"xgmi.*(?:error|fail|timeout)|WAFL.*error", re.I)),
    ("page_fault", re.compile(r"\[(?:gfx|mm)hub\d*\]\s+(?:no-)?(?:retry )?page fault|VM_L2_PROTECTION_FAULT", re.I)),
    ("mce", re.compile(r"\[Hardware Error\]|Machine check|mce: \[", re.I)),
]
SEVERE = {"reset", "ring_timeout", "hang", "ras", "xgmi"}
_BDF = re.compile(r"\b([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f])\b", re.I)
_TS_BOOT = re.compile(r"^\s*\[\s*(\d+\.\d+)\]")
_TS_HUMAN = re.compile(r"^\s*\[(\w{3} \w{3}\s+\d+ \d\d:\d\d:\d\d \d{4})\]")
_TS_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)")


@dataclass
class Event:
    kind: str
    line: str
    bdf: str = ""
    age_s: float | None = None   # seconds before "now" (None: the log gave no usable time)


def _age(line: str, uptime: float | None, now: float | None) -> float | None:
    m = _TS_BOOT.match(line)
    if m and uptime is not None:
        return max(0.0, uptime - float(m.group(1)))
    if now is None:
        return None
    m = _TS_HUMAN.match(line)
    if m:
        try:
            return max(0.0, now - time.mktime(time.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")))
        except ValueError:
            return None
    m = _TS_ISO.match(line)
    if m:
        try:
            return max(0.0, now - time.mktime(time.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")))
        except ValueError:
            return None
    return None


def parse_dmesg(text: str | None, uptime: float | None = None, now: float | None = None) -> list[Event]:
    """amdgpu (and machine-check) events of a kernel log, with the GPU's BDF where the line names one."""
    out: list[Event] = []
    for line in (text or "").splitlines():
        low = line.lower()
        if "amdgpu" not in low and "hardware error" not in low and "mce" not in low and "kfd" not in low \
                and "gpu hang" not in low:
            continue
        for kind, rx in EVENTS:
            if rx.search(line):
                m = _BDF.search(line)
                out.append(Event(kind, line.strip()[:400], m.group(1).lower() if m else "", _age(line, uptime, now)))
                break
    return out[-200:]


def parse_ras_count(text: str | None) -> tuple[int, int]:
    """A sysfs ``ras/<block>_err_count`` file (``ue: N`` / ``ce: M``) -> (uncorrectable, correctable)."""
    ue = re.search(r"ue:\s*(\d+)", text or "")
    ce = re.search(r"ce:\s*(\d+)", text or "")
    return (int(ue.group(1)) if ue else 0), (int(ce.group(1)) if ce else 0)


def parse_bad_pages(text: str | None) -> int:
    """``gpu_vram_bad_pages`` lines (``0x00000001 : 0x00001000 : R``): retired or pending pages."""
    return sum(1 for line in (text or "").splitlines() if re.search(r":\s*[RPF]\s*$", line))


def parse_amd_smi_ecc(payload: Any) -> dict[int, dict[str, int]]:
    """``amd-smi metric --ecc --json`` -> {amd-smi gpu index: {uncorrectable, correctable, deferred}}."""
    out = {}
    for r in amd_smi_records(payload):
        ecc = r.get("ecc") if isinstance(r.get("ecc"), dict) else {}
        if not ecc:
            continue

        def val(k: str, ecc: dict = ecc) -> int:
            v = na(ecc.get(k))
            try:
                return int(v)
            except (TypeError, ValueError):
                return 0

        out[int(r.get("gpu", len(out)))] = {"uncorrectable": val("total_uncorrectable_count"),
                                            "correctable": val("total_correctable_count"),
                                            "deferred": val("total_deferred_count")}
    return out


def parse_amd_smi_throttle(payload: Any) -> dict[int, str]:
    """``power.throttle_status`` of ``amd-smi metric --power --json`` (UNTHROTTLED / THROTTLED / N/A)."""
    out = {}
    for r in amd_smi_records(payload):
        p = r.get("power") if isinstance(r.get("power"), dict) else {}
        v = na(p.get("throttle_status"))
        if isinstance(v, str):
            out[int(r.get("gpu", len(out)))] = v.upper()
    return out


def parse_amd_smi_bad_pages(payload: Any) -> dict[int, int]:
    """``amd-smi bad-pages --json`` -> {gpu index: retired + pending pages} ("No bad pages found." = 0)."""
    out = {}
    for r in amd_smi_records(payload):
        n = 0
        for key in ("retired", "pending", "un_res"):
            v = r.get(key)
            if isinstance(v, list):
                n += len(v)
        out[int(r.get("gpu", len(out)))] = n
    return out


@dataclass
class GpuHealth:
    index: int
    bdf: str
    uncorrectable: int = 0
    correctable: int = 0
    bad_pages: int = 0
    ras_blocks: dict[str, list[int]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    throttle: str | None = None
    compute_partition: str | None = None
    memory_partition: str | None = None
    firmware: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def card_of(host: Host, bdf: str) -> str | None:
    """The /sys/class/drm/cardN/device directory of the GPU at ``bdf``."""
    for card in host.glob("/sys/class/drm/card[0-9]*"):
        if not re.fullmatch(r".*/card\d+", card):
            continue
        ue = host.read(f"{card}/device/uevent") or ""
        if f"PCI_SLOT_NAME={bdf}".lower() in ue.lower():
            return f"{card}/device"
    return None


def sysfs_health(host: Host, index: int, bdf: str) -> GpuHealth:
    h = GpuHealth(index, bdf)
    dev = card_of(host, bdf) if bdf else None
    if dev is None:
        return h
    for f in host.glob(f"{dev}/ras/*_err_count"):
        ue, ce = parse_ras_count(host.read(f))
        block = f.rsplit("/", 1)[-1].removesuffix("_err_count")
        h.ras_blocks[block] = [ue, ce]
        h.uncorrectable += ue
        h.correctable += ce
    h.bad_pages = parse_bad_pages(host.read(f"{dev}/ras/gpu_vram_bad_pages"))
    for attr, name in (("current_compute_partition", "compute_partition"),
                       ("current_memory_partition", "memory_partition")):
        v = (host.read(f"{dev}/{attr}") or "").strip()
        if v:
            setattr(h, name, v.upper())
    for f in host.glob(f"{dev}/fw_version/*_fw_version"):
        v = (host.read(f) or "").strip()
        if v and v not in ("0x00000000", "0"):
            h.firmware[f.rsplit("/", 1)[-1].removesuffix("_fw_version")] = v
    vbios = (host.read(f"{dev}/vbios_version") or "").strip()
    if vbios:
        h.firmware["vbios"] = vbios
    return h


@dataclass
class Health:
    gpus: list[GpuHealth]
    events: list[dict[str, Any]]
    dmesg: str                     # ok | denied | missing
    uptime_s: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"gpus": [g.to_dict() for g in self.gpus], "events": self.events, "dmesg": self.dmesg,
                "uptime_s": self.uptime_s}


def _now(host: Host) -> float | None:
    res = host.run(["date", "+%s"])
    try:
        return float(res.stdout.strip()) if res.ok else (time.time() if not host.rooted else None)
    except ValueError:
        return None


def gather(host: Host, gpus: list[dict[str, Any]], use_amd_smi: bool = True, dmesg: ToolResult | None = None) -> Health:
    """Health of the AMD GPUs in the inventory ``gpus`` (their ``index``/``bdf``/``smi_index``). ``dmesg``: the
    kernel log a caller has already read (train's snapshots read it once for this and the OOM killer's lines)."""
    up = (host.read("/proc/uptime") or "").split()
    uptime = float(up[0]) if up else None
    now = _now(host)
    res = dmesg if dmesg is not None else host.run(["dmesg"]) if host.which("dmesg") else None
    if res is None or res.missing:
        state, events = "missing", []
    elif not res.ok or res.denied:
        state, events = "denied", []
    else:
        state, events = "ok", parse_dmesg(res.stdout, uptime, now)
    amd = [g for g in gpus if g.get("vendor") == "amd"]
    out = [sysfs_health(host, int(g["index"]), str(g.get("bdf") or "").lower()) for g in amd]
    # amd-smi costs 0.3-1 s a call: only for GPUs whose driver exposes no RAS counters in sysfs
    lacking = [(g, h) for g, h in zip(amd, out, strict=True) if not h.ras_blocks]
    if lacking and use_amd_smi and host.which("amd-smi"):
        _add_amd_smi(host, [h for _, h in lacking], [g for g, _ in lacking])
    if len(out) == 1:  # one AMD GPU: the driver's lines without a PCI address (`[drm:amdgpu_job_timedout`) are its
        for e in events:
            if not e.bdf and e.kind != "mce" and "amdgpu" in e.line.lower():
                e.bdf = out[0].bdf
    for h in out:
        h.events = [asdict(e) for e in events if e.bdf == h.bdf]
    return Health(out, [asdict(e) for e in events], state, uptime)


def _add_amd_smi(host: Host, out: list[GpuHealth], amd: list[dict[str, Any]]) -> None:
    """ECC counts, throttle status and bad pages from amd-smi where sysfs had none (one call each, never
    fatal)."""
    by_smi = {int(g.get("smi_index") if g.get("smi_index") is not None else g["index"]): h
              for g, h in zip(amd, out, strict=False)}

    def payload(cmd: list[str]) -> Any:
        r = host.run(cmd)
        if not r.ok:
            return None
        text = r.stdout.strip()
        start = min([i for i in (text.find("["), text.find("{")) if i >= 0], default=-1)
        try:
            return json.loads(text[start:]) if start >= 0 else None
        except ValueError:
            return None

    metric = payload(["amd-smi", "metric", "--ecc", "--power", "--json"])
    for idx, c in parse_amd_smi_ecc(metric).items():
        h = by_smi.get(idx)
        if h is not None and not h.ras_blocks:
            h.uncorrectable, h.correctable = c["uncorrectable"], c["correctable"]
    for idx, t in parse_amd_smi_throttle(metric).items():
        h = by_smi.get(idx)
        if h is not None:
            h.throttle = t
    for idx, n in parse_amd_smi_bad_pages(payload(["amd-smi", "bad-pages", "--json"])).items():
        h = by_smi.get(idx)
        if h is not None:
            h.bad_pages = max(h.bad_pages, n)
