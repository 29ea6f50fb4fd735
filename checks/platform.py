"""Host platform below the Python stack: IOMMU mode, PCIe links and ACS, NUMA balancing, /dev/shm, memlock,
and the container the run is in.

What AMD's MI300X system-optimization guide and BIOS-settings page, the ROCm Validation Suite and RCCL's own
start-up warnings check. Severity follows the run: a translating IOMMU is an error for a multi-GPU run on
PCIe GPUs (peer-to-peer traffic hangs or crawls), a warning on XGMI-connected OAM modules, and only info for
one GPU. The facts come from :mod:`doctor.hostinfo` through the host read layer, so every verdict here is a
pure function tests feed recorded machine trees.
"""

from __future__ import annotations

from typing import Any

from doctor import archs
from doctor.context import Context
from doctor.findings import Code, Finding, Severity, with_all_good
from doctor.registry import check

AREA = "platform"

DOCKER_FLAGS = ("--device=/dev/kfd --device=/dev/dri --group-add video --ipc=host --shm-size 16G "
                "--security-opt seccomp=unconfined")
SHM_MIN_MIB = 1024          # below this a DataLoader with workers or RCCL's shm transport runs out
MEMLOCK_MIN_MIB = 64 * 1024  # RDMA registers GPU/host buffers; distributions default to 8 MiB

PLAT000 = Code(
    AREA, "PLAT000", Severity.OK, "Host platform ready",
    why="IOMMU mode, PCIe links, NUMA balancing, /dev/shm and the device files suit the GPUs this run uses.",
    fix="Nothing to do.",
)

PLAT001 = Code(
    AREA, "PLAT001", Severity.ERROR, "IOMMU translates GPU DMA (not passthrough)",
    why="With the IOMMU in translated mode every GPU DMA is remapped: peer-to-peer copies between PCIe GPUs "
        "fail or hang in RCCL (`hipIpcGetMemHandle`, `NCCL WARN ... invalid argument`) and host transfers slow "
        "down. AMD's MI300X/MI200 system-optimization guides require `iommu=pt` (with `amd_iommu=on` on AMD "
        "CPUs); RCCL warns `Missing \"iommu=pt\"` at start-up. XGMI-connected OAM modules route peer traffic "
        "over XGMI, so there it is a warning; with one GPU it is only info.",
    fix='Add `iommu=pt` (AMD CPUs: `amd_iommu=on iommu=pt`) to GRUB_CMDLINE_LINUX in /etc/default/grub, run '
        '`sudo update-grub` (or `grub2-mkconfig -o /boot/grub2/grub.cfg`) and reboot. Until then '
        '`NCCL_P2P_DISABLE=1` lets a run proceed without P2P (slower).',
    playbook="disable-p2p", autofix=False,
)

PLAT002 = Code(
    AREA, "PLAT002", Severity.WARNING, "Instinct MI300-class GPU without `pci=realloc=off`",
    why="AMD's BIOS settings for the Instinct MI3xx line: with SR-IOV disabled in the BIOS (no virtualization), "
        "\"the kernel command-line must contain the `pci=realloc=off` parameter\"; otherwise the kernel may "
        "reassign the GPUs' large BARs at boot and GPUs go missing or fail to initialise. AMD's own cluster "
        "validation checks /proc/cmdline for it.",
    fix="Add `pci=realloc=off` to GRUB_CMDLINE_LINUX, update grub and reboot (or enable SR-IOV in the BIOS if "
        "the host runs virtual machines).",
)

PLAT003 = Code(
    AREA, "PLAT003", Severity.WARNING, "NUMA auto-balancing is on",
    why="`/proc/sys/kernel/numa_balancing` = 1 makes the kernel migrate pages and unmap them periodically to "
        "sample accesses, which stalls GPU DMA to host memory; AMD's MI300X/MI200 tuning guides disable it.",
    fix="`sudo sh -c 'echo 0 > /proc/sys/kernel/numa_balancing'` (persist with `kernel.numa_balancing=0` in "
        "/etc/sysctl.d/).",
)

PLAT004 = Code(
    AREA, "PLAT004", Severity.WARNING, "/dev/shm is small",
    why="PyTorch DataLoader workers hand batches over through /dev/shm and RCCL/NCCL's intra-node shm transport "
        "allocates there; Docker's default is 64 MB (`Bus error`, `unable to write to file </torch_...>`, "
        "`No space left on device`). DeepSpeed's ds_report warns below 512 MB.",
    fix=f"Start the container with `--ipc=host` or `--shm-size 16G` (recommended: `docker run {DOCKER_FLAGS}`); "
        "on a host, `sudo mount -o remount,size=16G /dev/shm`. Meanwhile `dataloader_num_workers: 0`.",
    playbook="dataloader-no-workers", autofix=False,
)

PLAT005 = Code(
    AREA, "PLAT005", Severity.WARNING, "Locked-memory limit too low for a multi-node run",
    why="RDMA (InfiniBand/RoCE) registers buffers by pinning them; with the default `ulimit -l` (often 8 MiB) "
        "RCCL's IB transport fails to register memory or falls back to sockets.",
    fix="Raise `memlock` to unlimited: `* - memlock unlimited` in /etc/security/limits.conf (Slurm: "
        "`PropagateResourceLimits`; Docker: `--ulimit memlock=-1:-1`).",
)

PLAT006 = Code(
    AREA, "PLAT006", Severity.WARNING, "GPU PCIe link below its maximum",
    why="The link trained narrower (or slower) than the GPU supports: a riser, a wrong slot, bifurcation, a "
        "dirty contact. Host<->GPU copies and PCIe peer traffic run at the reduced rate. A lower *speed* on an "
        "idle consumer GPU is often power management (the link speeds up under load), so that alone is info.",
    fix="Reseat the GPU in an x16 slot wired for x16, check the BIOS PCIe generation and bifurcation settings; "
        "compare `sudo lspci -vv -s BDF` LnkCap with LnkSta under load.",
)

PLAT007 = Code(
    AREA, "PLAT007", Severity.WARNING, "ACS redirects peer traffic on the GPUs' PCIe path",
    why="Access Control Services on a PCIe switch or root port between the GPUs force peer-to-peer transfers up "
        "through the root complex (or block them): RCCL P2P hangs or runs at a fraction of the bandwidth. AMD's "
        "BIOS settings without virtualization: ACS disabled.",
    fix="Disable ACS in the BIOS (AMD CBS / NBIO common options / ACS), or clear it on the bridges "
        "(`sudo setpci -s BDF ECAP_ACS+6.w=0000`, until reboot); otherwise `NCCL_P2P_DISABLE=1`.",
    playbook="disable-p2p", autofix=False,
)

PLAT008 = Code(
    AREA, "PLAT008", Severity.ERROR, "Container started without the GPU devices",
    why="In a container /dev/kfd (the ROCm compute interface) and /dev/dri (the render nodes) exist only when "
        "passed in; without them torch finds no GPU (`No HIP GPUs are available`).",
    fix=f"Restart the container with `docker run {DOCKER_FLAGS} ...` (Podman: the same flags; Kubernetes: the "
        "AMD GPU device plugin's `amd.com/gpu` resource).",
)

PLAT009 = Code(
    AREA, "PLAT009", Severity.INFO, "Some host facts need privileges",
    why="`lspci -vvv` shows the ACS capability only to root; without it ACS on the GPUs' path is unknown.",
    fix="Run `sudo rocm-doctor check` (or `sudo lspci -vvv`) to include them; nothing else is affected.",
)

CODES = (PLAT000, PLAT001, PLAT002, PLAT003, PLAT004, PLAT005, PLAT006, PLAT007, PLAT008, PLAT009)


def _nodes(env: dict[str, str]) -> int:
    for var in ("NNODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
        try:
            return max(1, int(env.get(var, "") or 1))
        except ValueError:
            continue
    return 1


def _passthrough(p: dict[str, Any], bdfs: list[str]) -> tuple[bool | None, str]:
    """Whether DMA of the GPUs at ``bdfs`` bypasses IOMMU translation, and what says so. The kernel's own
    answer (the IOMMU group's ``type``) wins over the command line and the kernel config."""
    io = p.get("iommu") or {}
    types = [io.get("group_types", {}).get(b) for b in bdfs]
    types = [t for t in types if t]
    if types:
        translated = [t for t in types if t.upper().startswith("DMA")]
        return (not translated), f"IOMMU group type {', '.join(sorted(set(types)))}"
    cmd = p.get("cmdline") or {}
    if cmd.get("iommu_off"):
        return True, "IOMMU disabled on the kernel command line"
    if cmd.get("passthrough"):
        return True, "iommu=pt on the kernel command line"
    if not io.get("units") and not io.get("groups_listed"):
        return True, "no IOMMU active (/sys/class/iommu is empty)"
    if p.get("config_passthrough"):
        return True, "CONFIG_IOMMU_DEFAULT_PASSTHROUGH=y"
    if p.get("config_passthrough") is False:
        return False, "IOMMU active, no iommu=pt, kernel default translated"
    return None, "IOMMU active; passthrough unknown (no group type, no kernel config)"


def judge(p: dict[str, Any], gpus: list[dict[str, Any]], env: dict[str, str], rocm_torch: bool = False) -> list[Finding]:
    """Platform verdicts for a run on ``gpus`` (the inventory entries it will use) on a host with facts ``p``
    (:class:`doctor.hostinfo.Platform` as a dict); ``rocm_torch``: the examined torch is a ROCm build."""
    out: list[Finding] = []
    amd = [g for g in gpus if g.get("vendor") == "amd" and not g.get("integrated")]
    bdfs = [str(g.get("bdf") or "").lower() for g in amd if g.get("bdf")]
    multi = len(amd) > 1 or (_nodes(env) > 1 and len(amd) >= 1)
    oam = bool(amd) and all(archs.is_oam(g.get("name")) for g in amd)
    cmd = p.get("cmdline") or {}

    if amd:
        pt, why = _passthrough(p, bdfs)
        if pt is False or (pt is None and multi):
            sev = Severity.ERROR if multi and not oam else Severity.WARNING if multi else Severity.INFO
            if pt is None:
                sev = Severity.WARNING if sev is Severity.ERROR else Severity.INFO
            out.append(PLAT001.finding(
                "IOMMU is not in passthrough" + (f" ({len(amd)} GPUs on {'XGMI' if oam else 'PCIe'})" if multi
                                                  else " (one GPU: no peer traffic)")
                if pt is False else "IOMMU active; passthrough could not be confirmed",
                why + (f"; kernel command line: {cmd.get('raw') or '(empty)'}" if cmd.get("raw") is not None else ""),
                severity=sev, playbook=None if multi else "", source=why, gpus=bdfs))

    instinct3 = [g for g in amd if g.get("arch") in ("gfx942", "gfx950") and " VF" not in str(g.get("name"))
                 and not str(g.get("name", "")).endswith("VF")]
    if instinct3 and not cmd.get("pci_realloc_off") and cmd.get("raw") is not None:
        sriov = p.get("sriov") or {}
        if not any(sriov.get(str(g.get("bdf") or "").lower()) for g in instinct3):
            out.append(PLAT002.finding(f"{len(instinct3)} {instinct3[0].get('name') or 'Instinct'} GPU(s), SR-IOV "
                                       "off, and no pci=realloc=off on the kernel command line",
                                       f"kernel command line: {cmd.get('raw') or '(empty)'}"))

    nb = p.get("numa_balancing")
    if nb and amd:
        out.append(PLAT003.finding("NUMA auto-balancing is enabled (/proc/sys/kernel/numa_balancing = "
                                   f"{nb})", severity=Severity.WARNING if multi or any(
                                       g.get("arch") in archs.INSTINCT for g in amd) else Severity.INFO))

    shm = p.get("shm") or {}
    size = shm.get("size_mib")
    if size is not None and size < SHM_MIN_MIB:
        ctr = (p.get("container") or {}).get("kind")
        out.append(PLAT004.finding(f"/dev/shm is {size:.0f} MiB" + (f" (in a {ctr} container)" if ctr else ""),
                                   f"mount options: {shm.get('options')}", size_mib=size, container=ctr))

    lim = p.get("limits") or {}
    if _nodes(env) > 1 and lim and not lim.get("memlock_unlimited") and (lim.get("memlock_mib") or 0) < MEMLOCK_MIN_MIB:
        out.append(PLAT005.finding(f"Max locked memory {lim.get('memlock_mib')} MiB with {_nodes(env)} nodes",
                                   "ulimit -l of this process (/proc/self/limits)"))

    by_bdf = {str(g.get("bdf") or "").lower(): g for g in amd}
    for lk in p.get("links") or []:
        g = by_bdf.get(str(lk.get("bdf")).lower())
        if g is None:
            continue
        cw, mw, cs, ms = lk.get("current_width"), lk.get("max_width"), lk.get("current_speed"), lk.get("max_speed")
        if cw and mw and cw < mw:
            out.append(PLAT006.finding(f"GPU {g['index']} ({lk['bdf']}) links at x{cw} of x{mw}",
                                       f"{cs} of {ms} GT/s", gpu=g["index"], bdf=lk["bdf"], **_link(lk)))
        elif cs and ms and cs < ms:
            out.append(PLAT006.finding(f"GPU {g['index']} ({lk['bdf']}) links at {cs:g} of {ms:g} GT/s",
                                       "Link speed drops at idle under power management; width is full. Check "
                                       "again under load.", severity=Severity.INFO, gpu=g["index"],
                                       bdf=lk["bdf"], **_link(lk)))

    acs = p.get("acs") or {}
    if len(amd) > 1 and not oam and acs.get("enabled"):
        out.append(PLAT007.finding(f"ACS enabled on {len(acs['enabled'])} bridge(s) above the GPUs: "
                                   + ", ".join(acs["enabled"]), bridges=acs["enabled"]))
    if len(amd) > 1 and not oam and acs.get("denied"):
        out.append(PLAT009.finding("ACS on the GPUs' PCIe path unknown: lspci -vvv needs root",
                                   acs.get("error") or ""))

    ctr = p.get("container") or {}
    # a CPU-only container is no fault: only one meant for ROCm (a ROCm torch, /opt/rocm) is missing devices
    if ctr.get("kind") and not ctr.get("kfd") and (rocm_torch or ctr.get("rocm")) \
            and not any(g.get("vendor") == "nvidia" for g in gpus):
        out.append(PLAT008.finding(f"In a {ctr['kind']} container without /dev/kfd"
                                   + ("" if ctr.get("dri") else " or /dev/dri")))

    return with_all_good(out, PLAT000, _summary(p, amd), kernel=p.get("kernel"), os=p.get("os_release"))


def _link(lk: dict[str, Any]) -> dict[str, Any]:
    return {k: lk.get(k) for k in ("current_speed", "max_speed", "current_width", "max_width")}


def _summary(p: dict[str, Any], amd: list[dict[str, Any]]) -> str:
    bits = [p.get("os_release") or "", f"kernel {p['kernel']}" if p.get("kernel") else ""]
    shm = (p.get("shm") or {}).get("size_mib")
    if shm is not None:
        bits.append(f"/dev/shm {shm / 1024:.0f} GiB" if shm >= 1024 else f"/dev/shm {shm:.0f} MiB")
    if amd:
        bits.append(f"{len(amd)} AMD GPU(s)")
    return "Host platform ready" + (": " + ", ".join(b for b in bits if b) if any(bits) else "")


@check(AREA, order=47)
def platform(ctx: Context) -> list[Finding]:
    t = ctx.probes.get("torch")
    rocm_torch = bool(t is not None and t.ok and t.data.get("hip"))
    return judge(ctx.platform(), ctx.used_gpus(), ctx.env, rocm_torch)
