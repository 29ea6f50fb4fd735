"""Host platform facts a multi-GPU ROCm run depends on below the Python stack, read through :mod:`doctor.host`.

What AMD's MI300X system-optimization guide, the ROCm Validation Suite and RCCL's own start-up checks look
at: the kernel command line (IOMMU passthrough, ``pci=realloc=off``), NUMA auto-balancing, the size of
/dev/shm (from the mount table), the locked-memory limit, each GPU's PCIe link against its maximum, ACS on
the bridges between the GPUs, and whether this is a container (and what it was started with). Pure parsers
take text, so the tests feed them recorded outputs; :func:`gather` reads a host.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from doctor.host import Host

KIB = 1024


def parse_cmdline(text: str | None) -> dict[str, Any]:
    """The IOMMU-relevant parameters of /proc/cmdline."""
    args = (text or "").split()
    kv: dict[str, str] = {}
    for a in args:
        k, _, v = a.partition("=")
        kv[k] = v
    iommu = kv.get("iommu", "")
    amd_iommu = kv.get("amd_iommu", "")
    intel_iommu = kv.get("intel_iommu", "")
    return {"raw": (text or "").strip()[:2000], "iommu": iommu or None, "amd_iommu": amd_iommu or None,
            "intel_iommu": intel_iommu or None,
            "passthrough": iommu == "pt" or "iommu.passthrough=1" in args,
            "iommu_off": iommu == "off" or amd_iommu == "off" or intel_iommu == "off",
            "pci_realloc_off": "pci=realloc=off" in args or kv.get("pci", "") == "realloc=off"}


def kernel_default_passthrough(config: str | None) -> bool | None:
    """``CONFIG_IOMMU_DEFAULT_PASSTHROUGH=y`` in the kernel's config: passthrough without a parameter."""
    if not config:
        return None
    return bool(re.search(r"^CONFIG_IOMMU_DEFAULT_PASSTHROUGH=y", config, re.M))


def parse_mounts(text: str | None, mountpoint: str = "/dev/shm") -> dict[str, Any] | None:
    """The mount at ``mountpoint`` from /proc/mounts (or /proc/self/mountinfo's simple form): fstype, size."""
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1] == mountpoint:
            opts = dict(o.partition("=")[::2] for o in parts[3].split(","))
            size = opts.get("size")
            return {"fstype": parts[2], "size_mib": _size_mib(size) if size else None, "options": parts[3]}
    return None


def _size_mib(v: str) -> float | None:
    """A tmpfs size option: bytes, or with a k/m/g suffix (``65536k`` is Docker's 64 MB default)."""
    m = re.fullmatch(r"(\d+)([kmgKMG%]?)", v.strip())
    if not m or m.group(2) == "%":
        return None
    n = int(m.group(1))
    mult = {"": 1 / 2**20, "k": 1 / 1024, "m": 1.0, "g": 1024.0}[m.group(2).lower()]
    return round(n * mult, 1)


def parse_limits(text: str | None) -> dict[str, Any]:
    """``Max locked memory`` of /proc/self/limits (soft limit, MiB; None = unlimited)."""
    for line in (text or "").splitlines():
        if line.startswith("Max locked memory"):
            soft = line[len("Max locked memory"):].split()[0]
            return {"memlock_unlimited": soft == "unlimited",
                    "memlock_mib": None if soft == "unlimited" else round(int(soft) / 2**20, 2)}
    return {}


def parse_meminfo(text: str | None) -> dict[str, float]:
    out = {}
    for line in (text or "").splitlines():
        m = re.match(r"(\w+):\s+(\d+) kB", line)
        if m:
            out[m.group(1)] = round(int(m.group(2)) / KIB, 1)  # MiB
    return out


_SPEED = re.compile(r"([\d.]+)\s*GT/s")


def link_speed(v: str | None) -> float | None:
    """``16.0 GT/s PCIe`` / ``32 GT/s`` / ``8.0 GT/s`` -> GT/s."""
    m = _SPEED.search(v or "")
    return float(m.group(1)) if m else None


@dataclass
class PciLink:
    bdf: str
    current_speed: float | None
    max_speed: float | None
    current_width: int | None
    max_width: int | None
    path: list[str] = field(default_factory=list)   # bridges from the root port down to the device

    @property
    def width_downgraded(self) -> bool:
        return bool(self.current_width and self.max_width and self.current_width < self.max_width)

    @property
    def speed_downgraded(self) -> bool:
        return bool(self.current_speed and self.max_speed and self.current_speed < self.max_speed)


def pci_link(host: Host, bdf: str) -> PciLink | None:
    base = f"/sys/bus/pci/devices/{bdf}"
    if not host.exists(base):
        return None

    def rd(name: str) -> str | None:
        v = host.read(f"{base}/{name}")
        return v.strip() if v else None

    def num(v: str | None) -> int | None:
        return int(v) if v and v.isdigit() else None

    real = host.resolve(base)
    path = re.findall(r"([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f])", real)
    return PciLink(bdf, link_speed(rd("current_link_speed")), link_speed(rd("max_link_speed")),
                   num(rd("current_link_width")), num(rd("max_link_width")), [p for p in path if p != bdf])


_ACSCTL = re.compile(r"ACSCtl:\s*(.*)")


def parse_lspci_acs(text: str | None) -> dict[str, Any]:
    """``lspci -vvv`` of some devices: which have ACS source validation / request redirect on (a PCIe switch
    or root port that forces peer-to-peer traffic up through the root complex), and whether the capability
    list was readable at all (without root, lspci prints ``Capabilities: <access denied>``)."""
    out: dict[str, Any] = {"enabled": [], "denied": False}
    dev = None
    for line in (text or "").splitlines():
        m = re.match(r"^([0-9a-f]{2,4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]|[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f])\s", line)
        if m:
            dev = m.group(1) if m.group(1).count(":") == 2 else "0000:" + m.group(1)
        if "<access denied>" in line:
            out["denied"] = True
        a = _ACSCTL.search(line)
        if a and dev and re.search(r"SrcValid\+|ReqRedir\+|CmpltRedir\+", a.group(1)):
            out["enabled"].append(dev)
    out["enabled"] = sorted(set(out["enabled"]))
    return out


def container(host: Host) -> dict[str, Any]:
    """Docker / Podman / Kubernetes, from the files they leave (not from heuristics on the hostname)."""
    cgroup = host.read("/proc/1/cgroup") or ""
    kind = None
    if host.exists("/.dockerenv"):
        kind = "docker"
    elif host.exists("/run/.containerenv"):
        kind = "podman"
    elif re.search(r"kubepods|/docker/|docker-[0-9a-f]{12}|containerd|/lxc/", cgroup):
        kind = "kubernetes" if "kubepods" in cgroup else "container"
    return {"kind": kind, "kfd": host.exists("/dev/kfd"), "dri": host.exists("/dev/dri"),
            "rocm": host.exists("/opt/rocm")}


@dataclass
class Platform:
    cmdline: dict[str, Any]
    config_passthrough: bool | None
    numa_balancing: int | None
    shm: dict[str, Any] | None
    limits: dict[str, Any]
    meminfo: dict[str, float]
    container: dict[str, Any]
    kernel: str | None
    os_release: str | None
    links: list[dict[str, Any]] = field(default_factory=list)
    acs: dict[str, Any] = field(default_factory=dict)
    iommu: dict[str, Any] = field(default_factory=dict)
    sriov: dict[str, bool] = field(default_factory=dict)    # bdf -> the device offers SR-IOV (BIOS on)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gather(host: Host, gpu_bdfs: list[str], probe_acs: bool = True) -> Platform:
    """Every platform fact of ``host`` for the GPUs at ``gpu_bdfs`` (reads only; lspci for ACS when asked)."""
    release = (host.read("/proc/sys/kernel/osrelease") or "").strip() or None
    nb = (host.read("/proc/sys/kernel/numa_balancing") or "").strip()
    links = [pci_link(host, b) for b in gpu_bdfs if b]
    links_ok = [lk for lk in links if lk is not None]
    acs: dict[str, Any] = {}
    bridges = sorted({b for lk in links_ok for b in lk.path})
    if probe_acs and bridges and host.which("lspci"):
        res = host.run(["lspci", "-vvv", "-s", bridges[0]] if len(bridges) == 1 else ["lspci", "-vvv"])
        acs = parse_lspci_acs(res.stdout) if res.ok else {"error": (res.stderr or "").strip()[-200:], "denied": res.denied}
        if acs.get("enabled"):
            acs["enabled"] = [b for b in acs["enabled"] if b in bridges]
    config = host.read(f"/boot/config-{release}") if release else None
    sriov = {b: host.exists(f"/sys/bus/pci/devices/{b}/sriov_totalvfs") for b in gpu_bdfs if b}
    return Platform(cmdline=parse_cmdline(host.read("/proc/cmdline")),
                    config_passthrough=kernel_default_passthrough(config),
                    numa_balancing=int(nb) if nb.isdigit() else None,
                    shm=parse_mounts(host.read("/proc/mounts")),
                    limits=parse_limits(host.read("/proc/self/limits")),
                    meminfo=parse_meminfo(host.read("/proc/meminfo")),
                    container=container(host), kernel=release,
                    os_release=_pretty(host.read("/etc/os-release")),
                    links=[asdict(lk) for lk in links_ok], acs=acs, iommu=iommu_state(host, gpu_bdfs),
                    sriov=sriov)


def iommu_state(host: Host, gpu_bdfs: list[str]) -> dict[str, Any]:
    """Whether an IOMMU is active (``/sys/class/iommu`` lists its units: ``ivhd0``, ``dmar0``) and how each GPU's
    IOMMU group translates: ``identity`` is passthrough, ``DMA``/``DMA-FQ`` translate every DMA (the kernel's
    own answer since 5.11; the command line and the kernel config are the fallback)."""
    units = host.listdir("/sys/class/iommu")
    groups = {}
    for b in gpu_bdfs:
        if not b:
            continue
        t = host.read(f"/sys/bus/pci/devices/{b}/iommu_group/type")
        if t and t.strip():
            groups[b] = t.strip()
    return {"units": units, "group_types": groups,
            "groups_listed": bool(host.listdir("/sys/kernel/iommu_groups"))}


def _pretty(text: str | None) -> str | None:
    m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text or "", re.M)
    return m.group(1) if m else None
