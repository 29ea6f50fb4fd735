"""Write the recorded machine trees under tests/fixtures/hosts/ (``ROCM_DOCTOR_SYSROOT`` roots).

Each tree is *assembled*: the text a tool or the kernel printed (dmesg lines, kernel command lines, the
/dev/shm mount, ACSCtl lines, link speeds, BDFs, device ids, memory sizes) is taken verbatim from the public
sources named in tests/fixtures/hosts/SOURCES.md; the sysfs/procfs files around it use the kernel's own
formats (``ue: N``/``ce: M`` RAS counters, KFD ``properties`` key-value lines, ``PCI_SLOT_NAME=`` uevents).
No tree claims to be a copy of one real machine. Regenerate with ``python scripts/make_host_trees.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from doctor.host import keep_empty_dirs  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "hosts"
GiB = 2**30

# gfx_target_version of KFD node properties: major*10000 + minor*100 + stepping
GFX = {"gfx942": 90402, "gfx90a": 90010, "gfx1100": 110000, "gfx1036": 100306, "gfx1151": 110501}


def loc(bdf: str) -> int:
    _, bus, devfn = bdf.split(":")
    dev, fn = devfn.split(".")
    return int(bus, 16) << 8 | int(dev, 16) << 3 | int(fn, 16)


class Tree:
    def __init__(self, name: str) -> None:
        self.dir = ROOT / name
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        self.tools: dict[str, dict] = {}
        self.cards = 0
        self.nodes = 1  # node 0: the CPU

    def file(self, path: str, text: str) -> None:
        p = self.dir / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")

    def dir_(self, path: str) -> None:
        (self.dir / path.lstrip("/")).mkdir(parents=True, exist_ok=True)

    def link(self, path: str, target: str) -> None:
        p = self.dir / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, p)

    def tool(self, cmd: list[str], stdout: str, rc: int = 0, stderr: str = "") -> None:
        import re

        key = re.sub(r"[^\w.=+-]+", "_", "_".join(cmd))[:180]
        self.tools[key] = {"cmd": cmd, "rc": rc, "stdout": stdout, "stderr": stderr}

    def base(self, cmdline: str, *, uptime: float = 9000.0, numa: int = 0, shm: str = "size=263934272k",
             memlock: str = "8388608", os_name: str = "Ubuntu 22.04.4 LTS", kernel: str = "5.15.0-116-generic",
             iommu: bool = True, meminfo_kb: int = 2113442816) -> None:
        self.file("/proc/cmdline", cmdline + "\n")
        self.file("/proc/uptime", f"{uptime:.2f} {uptime * 90:.2f}\n")
        self.file("/proc/sys/kernel/numa_balancing", f"{numa}\n")
        self.file("/proc/sys/kernel/osrelease", kernel + "\n")
        self.file("/proc/mounts", "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n"
                                  f"tmpfs /dev/shm tmpfs rw,nosuid,nodev,{shm},inode64 0 0\n")
        self.file("/proc/self/limits",
                  "Limit                     Soft Limit           Hard Limit           Units     \n"
                  "Max open files            1048576              1048576              files     \n"
                  f"Max locked memory         {memlock:<20} {memlock:<20} bytes     \n")
        self.file("/proc/meminfo", f"MemTotal:       {meminfo_kb} kB\nMemAvailable:   {meminfo_kb * 9 // 10} kB\n")
        self.file("/etc/os-release", f'PRETTY_NAME="{os_name}"\nNAME="{os_name.split()[0]}"\n')
        if iommu:
            self.dir_("/sys/class/iommu/ivhd0")
            self.dir_("/sys/kernel/iommu_groups/0")
        self.file("/sys/class/kfd/kfd/topology/nodes/0/properties",
                  "cpu_cores_count 128\nsimd_count 0\nmem_banks_count 1\ngfx_target_version 0\n"
                  "location_id 0\ndomain 0\ndevice_id 0\n")

    def gpu(self, bdf: str, arch: str, device_id: int, *, vram: int, used: int = 300 * 2**20, busy: int = 0,
            bridge: str = "0000:00:01.1", link: tuple[str, str, int, int] = ("32.0 GT/s PCIe", "32.0 GT/s PCIe", 16, 16),
            ras: dict[str, tuple[int, int]] | None = None, bad_pages: str = "", iommu_type: str | None = "identity",
            partition: tuple[str, str] | None = ("SPX", "NPS1"), simd: int = 1216, cpu_cores: int = 0,
            gtt: int | None = None, kfd_mem: int | None = None, product: str = "", card: bool = True,
            fw: dict[str, str] | None = None, sriov: bool = False) -> None:
        """One GPU: its PCI device directory (behind ``bridge``), a drm card linking to it, its KFD node."""
        dev = f"/sys/devices/pci{bdf[:4]}:00/{bridge}/{bdf}"
        if card:
            n = self.cards
            self.cards += 1
            self.link(f"/sys/class/drm/card{n}", f"../../devices/pci{bdf[:4]}:00/{bridge}/{bdf}/drm/card{n}")
            self.link(f"{dev}/drm/card{n}/device", "../..")
            self.link(f"/sys/bus/pci/devices/{bdf}", f"../../../devices/pci{bdf[:4]}:00/{bridge}/{bdf}")
            self.file(f"{dev}/vendor", "0x1002\n")
            self.file(f"{dev}/device", f"0x{device_id:04x}\n")
            self.file(f"{dev}/uevent", f"DRIVER=amdgpu\nPCI_CLASS=38000\nPCI_ID=1002:{device_id:04X}\n"
                                       f"PCI_SLOT_NAME={bdf}\nMODALIAS=pci:v00001002d0000{device_id:04X}\n")
            self.file(f"{dev}/mem_info_vram_total", f"{vram}\n")
            self.file(f"{dev}/mem_info_vram_used", f"{used}\n")
            self.file(f"{dev}/gpu_busy_percent", f"{busy}\n")
            if gtt is not None:
                self.file(f"{dev}/mem_info_gtt_total", f"{gtt}\n")
            if product:
                self.file(f"{dev}/product_name", product + "\n")
            cs, ms, cw, mw = link
            self.file(f"{dev}/current_link_speed", cs + "\n")
            self.file(f"{dev}/max_link_speed", ms + "\n")
            self.file(f"{dev}/current_link_width", f"{cw}\n")
            self.file(f"{dev}/max_link_width", f"{mw}\n")
            for block, (ue, ce) in (ras or {}).items():
                self.file(f"{dev}/ras/{block}_err_count", f"ue: {ue}\nce: {ce}\n")
            if ras is not None:
                self.file(f"{dev}/ras/gpu_vram_bad_pages", bad_pages)
            if iommu_type:
                self.file(f"{dev}/iommu_group/type", iommu_type + "\n")
            if partition:
                self.file(f"{dev}/current_compute_partition", partition[0] + "\n")
                self.file(f"{dev}/current_memory_partition", partition[1] + "\n")
            for k, v in (fw or {}).items():
                self.file(f"{dev}/fw_version/{k}_fw_version", v + "\n")
            if sriov:
                self.file(f"{dev}/sriov_totalvfs", "1\n")
        node = self.nodes
        self.nodes += 1
        nd = f"/sys/class/kfd/kfd/topology/nodes/{node}"
        self.file(f"{nd}/properties",
                  f"cpu_cores_count {cpu_cores}\nsimd_count {simd}\nmem_banks_count 1\n"
                  f"gfx_target_version {GFX[arch]}\nlocation_id {loc(bdf)}\ndomain {int(bdf[:4], 16)}\n"
                  f"device_id {device_id}\n")
        self.file(f"{nd}/mem_banks/0/properties",
                  f"heap_type 1\nsize_in_bytes {kfd_mem if kfd_mem is not None else vram}\nflags 0\nwidth 8192\n")

    def devices(self, kfd: bool = True) -> None:
        if kfd:
            self.file("/dev/kfd", "")
            self.file("/dev/dri/renderD128", "")

    def done(self) -> None:
        keep_empty_dirs(self.dir)
        (self.dir / "tools.json").write_text(json.dumps(self.tools, indent=1) + "\n", encoding="utf-8")


# public text the trees quote (see SOURCES.md)
MI300X_ACA = """\
[ 8390.785329] amdgpu 0000:68:00.0: {1}uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT) detected!
[ 8390.823777] amdgpu 0000:9e:00.0: {1}[Hardware Error]: Accelerator Check Architecture events logged
[ 8390.823790] amdgpu 0000:9e:00.0: {1}[Hardware Error]: aca entry[00].STATUS=0x98000800003e0000
[ 8390.823799] amdgpu 0000:9e:00.0: {1}[Hardware Error]: aca entry[00].ADDR=0x0000000000000000
[ 8390.839486] amdgpu 0000:d4:00.0: {1}[Hardware Error]: Accelerator Check Architecture events logged
[ 8390.839489] amdgpu 0000:d4:00.0: {1}[Hardware Error]: aca entry[00].STATUS=0x98000800003e0000
"""
BENIGN_BOOT = """\
[    2.618892] [drm] amdgpu kernel modesetting enabled.
[    2.620869] [drm] amdgpu version: 6.16.6
[    2.621357] amdgpu: Virtual CRAT table created for CPU
[    2.621510] amdgpu: Topology: Add CPU node
"""
MI300X_BDFS = ["0000:05:00.0", "0000:26:00.0", "0000:46:00.0", "0000:68:00.0",
               "0000:85:00.0", "0000:9e:00.0", "0000:c6:00.0", "0000:d4:00.0"]
MI300X_VRAM = 196592 * 2**20   # torch's total_memory=196592MB for MI300X (ROCm/ROCm#4203)
MI300X_FW = {"mec": "0x0000009e", "sdma": "0x00000014", "ta_ras": "0x1b000700"}
PT_CMDLINE = ("BOOT_IMAGE=/vmlinuz-5.15.0-116-generic root=/dev/mapper/ubuntu--vg-ubuntu--lv ro amd_iommu=on "
              "iommu=pt pci=realloc=off")
CENTOS_CMDLINE = ("BOOT_IMAGE=/vmlinuz-5.0.8-1.el7.elrepo.x86_64 root=/dev/mapper/centos-root ro "
                  "rd.lvm.lv=centos/root rd.lvm.lv=centos/swap rhgb quiet amdgpu.vm_fragment_size=9 LANG=en_US.UTF-8")
STRIX_CMDLINE = ("BOOT_IMAGE=/vmlinuz-6.12.57+deb13-amd64 root=/dev/mapper/ubuntu--vg-ubuntu--lv ro "
                 "amdgpu.gttsize=65536 ttm.pages_limit=16777216 amdgpu.cwsr_enable=0 amd_iommu=off")
RAPHAEL_JOURNAL = """\
Sep 03 23:07:26 bazzite kernel: amdgpu 0000:12:00.0: kiq ring mec 2 pipe 1 q 0
Sep 03 23:07:26 bazzite kernel: amdgpu: Virtual CRAT table created for GPU
Sep 03 23:07:26 bazzite kernel: amdgpu: Topology: Add GPU node [0x1002:0x164e]
Sep 03 23:07:26 bazzite kernel: amdgpu 0000:12:00.0: SE 1, SH per SE 1, CU per SH 2, active_cu_number 2
Sep 03 23:07:26 bazzite kernel: [drm] Initialized amdgpu 3.64.0 for 0000:12:00.0 on minor 0
"""
# lspci -vvv of the bridges above two GPUs: the ACSCtl lines of NVIDIA/nccl#304 ("broken (ACS enabled)")
ACS_LSPCI = """\
0000:00:03.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge (prog-if 00 [Normal decode])
\tCapabilities: [2a0 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
0000:00:03.2 PCI bridge: Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge (prog-if 00 [Normal decode])
\tCapabilities: [2a0 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
"""


def mi300x_healthy() -> None:
    t = Tree("mi300x-healthy")
    t.base(PT_CMDLINE)
    for i, bdf in enumerate(MI300X_BDFS):
        t.gpu(bdf, "gfx942", 0x74A1, vram=MI300X_VRAM, bridge=f"0000:00:0{i + 1}.1",
              ras={"umc": (0, 0), "gfx": (0, 0), "sdma": (0, 0)}, fw=MI300X_FW, product="AMD Instinct MI300X")
    t.devices()
    t.tool(["dmesg"], BENIGN_BOOT)
    t.done()


def mi300x_faults() -> None:
    """The healthy tree's GPUs on a host tuned like a fresh install, with the ACA events of
    ROCm/legacy-rocm-build#4021 110 s before "now", uncorrectable UMC errors on GPU 6 and retired pages on 4."""
    t = Tree("mi300x-faults")
    t.base(CENTOS_CMDLINE, uptime=8500.0, numa=1)
    for i, bdf in enumerate(MI300X_BDFS):
        ras = {"umc": (0, 0), "gfx": (0, 0), "sdma": (0, 0)}
        pages = ""
        if i == 6:
            ras["umc"] = (2, 14)
        if i == 4:
            ras["umc"] = (0, 3)
            pages = "0x00000001 : 0x00001000 : R\n0x00000002 : 0x00001000 : R\n"
        t.gpu(bdf, "gfx942", 0x74A1, vram=MI300X_VRAM, ras=ras, bad_pages=pages, iommu_type="DMA-FQ",
              bridge=f"0000:00:0{i + 1}.1",
              fw=MI300X_FW, product="AMD Instinct MI300X")
    t.devices()
    t.tool(["dmesg"], BENIGN_BOOT + MI300X_ACA)
    t.done()


def mi300x_cpx() -> None:
    """One MI300X in CPX/NPS4: eight KFD nodes share its BDF, each with a 24 GiB memory bank (the CPX
    mem_banks value of ROCm/legacy-rocm-build#4750), while the tools report 192 GiB for each."""
    t = Tree("mi300x-cpx")
    t.base(PT_CMDLINE)
    t.gpu("0000:0c:00.0", "gfx942", 0x74A1, vram=MI300X_VRAM, partition=("CPX", "NPS4"), simd=152,
          kfd_mem=25767706624, ras={"umc": (0, 0)}, product="AMD Instinct MI300X")
    for _ in range(7):
        t.gpu("0000:0c:00.0", "gfx942", 0x74A1, vram=MI300X_VRAM, simd=152, kfd_mem=25767706624, card=False)
    t.devices()
    t.tool(["dmesg"], BENIGN_BOOT)
    t.done()


def radeon_igpu() -> None:
    """A desktop: RX 7900 XTX (0000:03:00.0, device 0x744c) beside the Ryzen 7000 Raphael iGPU (0000:12:00.0,
    device 0x164e, 512 MiB carve-out), the pair of ROCm/ROC-smi#100 and ublue-os/bazzite#5729. The iGPU is the
    first KFD GPU node as in those reports (rocm-smi GPU 0); the 7900 XTX holds 1.5 GiB for the display."""
    t = Tree("radeon-7900xtx-igpu")
    t.base("BOOT_IMAGE=/vmlinuz-6.16.4-bazzite root=UUID=0f4c rw rhgb quiet", numa=0, shm="size=32771924k",
           os_name="Bazzite 42", kernel="6.16.4-bazzite", iommu=True, meminfo_kb=65543848)
    t.gpu("0000:12:00.0", "gfx1036", 0x164E, vram=512 * 2**20, used=180 * 2**20, bridge="0000:00:08.1",
          link=("16.0 GT/s PCIe", "16.0 GT/s PCIe", 16, 16), iommu_type="DMA", partition=None, simd=4,
          cpu_cores=0, gtt=32 * GiB, product="AMD Radeon Graphics")
    t.gpu("0000:03:00.0", "gfx1100", 0x744C, vram=24560 * 2**20, used=1536 * 2**20, bridge="0000:00:01.1",
          link=("16.0 GT/s PCIe", "16.0 GT/s PCIe", 16, 16), iommu_type="DMA", partition=None, simd=192,
          gtt=32 * GiB, product="AMD Radeon RX 7900 XTX")
    t.devices()
    t.tool(["dmesg"], RAPHAEL_JOURNAL)
    t.done()


def strix_halo() -> None:
    """A Strix Halo APU (gfx1151, device 0x1586 at 0000:01:00.0 as in ROCm/legacy-rocm-build#5671): a 512 MiB
    carve-out and 64 GiB of GTT (``amdgpu.gttsize=65536`` on its kernel command line)."""
    t = Tree("strix-halo-apu")
    t.base(STRIX_CMDLINE, os_name="Debian GNU/Linux 13 (trixie)", kernel="6.12.57+deb13-amd64", iommu=False,
           meminfo_kb=131072000)
    t.gpu("0000:01:00.0", "gfx1151", 0x1586, vram=512 * 2**20, used=90 * 2**20, bridge="0000:00:08.1",
          link=("16.0 GT/s PCIe", "16.0 GT/s PCIe", 16, 16), iommu_type=None, partition=None, simd=80,
          cpu_cores=0, gtt=64 * GiB, kfd_mem=512 * 2**20, product="AMD Radeon 8060S Graphics")
    t.devices()
    t.tool(["dmesg"], "[    0.000000] Command line: " + STRIX_CMDLINE + "\n" + BENIGN_BOOT)
    t.done()


def docker_small_shm() -> None:
    """A ROCm container started with plain `docker run`: /dev/shm is Docker's 64 MB default (``shm 64M`` in
    the df of RobotLocomotion/spartan#369), no /dev/kfd or /dev/dri passed in, /opt/rocm present."""
    t = Tree("docker-rocm-no-devices")
    t.base(PT_CMDLINE, shm="size=65536k", iommu=False)
    t.file("/.dockerenv", "")
    t.file("/proc/1/cgroup", "0::/\n")
    t.dir_("/opt/rocm/bin")
    t.tool(["dmesg"], "", rc=1, stderr="dmesg: read kernel buffer failed: Operation not permitted\n")
    t.done()


def pcie_pair() -> None:
    """Two MI210 PCIe cards (gfx90a, device 0x740f) behind AMD GPP bridges with ACS on (the ACSCtl line of
    NVIDIA/nccl#304), IOMMU translating, one card trained at x8 of x16 (the RX 7900 XT link of
    ollama/ollama#3144: max_system_link gen 3 x8 for a gen 4 x16 GPU, here on a gen 4 card)."""
    t = Tree("mi210-pcie-acs")
    t.base(CENTOS_CMDLINE, numa=0)
    t.gpu("0000:41:00.0", "gfx90a", 0x740F, vram=65520 * 2**20, bridge="0000:00:03.1", simd=416,
          link=("16.0 GT/s PCIe", "16.0 GT/s PCIe", 16, 16), iommu_type="DMA", partition=None,
          ras={"umc": (0, 0)}, product="AMD Instinct MI210")
    t.gpu("0000:61:00.0", "gfx90a", 0x740F, vram=65520 * 2**20, bridge="0000:00:03.2", simd=416,
          link=("8.0 GT/s PCIe", "16.0 GT/s PCIe", 8, 16), iommu_type="DMA", partition=None,
          ras={"umc": (0, 0)}, product="AMD Instinct MI210")
    t.devices()
    t.tool(["dmesg"], BENIGN_BOOT)
    t.tool(["lspci", "-vvv"], ACS_LSPCI)
    t.done()


def main() -> None:
    for make in (mi300x_healthy, mi300x_faults, mi300x_cpx, radeon_igpu, strix_halo, docker_small_shm, pcie_pair):
        make()
        print("wrote", make.__name__)


if __name__ == "__main__":
    main()
