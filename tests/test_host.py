"""The host layer: recorded machine trees (tests/fixtures/hosts), the platform and health areas, integrated
GPUs and partitions in the inventory and the memory fit, and `report` -> `check --replay` parity."""

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from checks import gpus as gpus_check
from checks import health as health_check
from checks import memory as memory_fit
from checks import platform as platform_check
from doctor import gpuinfo, health, hostinfo
from doctor.host import Host, Recorder, write_tree
from doctor.preflight import run_check
from tests.conftest import FIXTURES, run_cli

HOSTS = FIXTURES / "hosts"
AREAS = {"gpus", "platform", "health"}


def host_findings(tree: Path, only=AREAS, env: dict | None = None):
    e = {"PATH": "/usr/bin:/bin", "ROCM_DOCTOR_SYSROOT": str(tree), **(env or {})}
    return run_check(None, only=set(only), env=e, replay=True).findings


def ids(fs):
    return sorted({f.id for f in fs})


def by_id(fs, i):
    return [f for f in fs if f.id == i]


def copy_tree(name: str, tmp_path: Path) -> Path:
    dest = tmp_path / name
    shutil.copytree(HOSTS / name, dest, symlinks=True)
    return dest


# ---------------------------------------------------------------- trees -> findings

def test_healthy_tree_gives_no_platform_or_health_finding():
    fs = host_findings(HOSTS / "mi300x-healthy")
    assert ids(fs) == ["GPU000", "HLTH000", "PLAT000"], [(f.id, f.title) for f in fs]
    assert "8× AMD Instinct MI300X gfx942" in by_id(fs, "GPU000")[0].title


def test_faulty_mi300x_tree():
    fs = host_findings(HOSTS / "mi300x-faults")
    assert ids(fs) == ["GPU000", "HLTH001", "HLTH002", "PLAT001", "PLAT002", "PLAT003"]
    # OAM modules talk over XGMI: a translating IOMMU is a warning there, not the PCIe error
    assert by_id(fs, "PLAT001")[0].severity.value == "warning"
    errs = {f.evidence["bdf"]: f for f in by_id(fs, "HLTH001")}
    # the ACA/ERREVENT lines of ROCm/legacy-rocm-build#4021 (110 s old) and the UMC counter of GPU 6
    assert set(errs) == {"0000:68:00.0", "0000:9e:00.0", "0000:d4:00.0", "0000:c6:00.0"}
    assert errs["0000:c6:00.0"].title.startswith("GPU 6 (0000:c6:00.0): 2 uncorrectable error(s) (umc)")
    assert "ERREVENT_ATHUB_INTERRUPT" in errs["0000:68:00.0"].detail and "last 2 min" in errs["0000:68:00.0"].title
    assert errs["0000:68:00.0"].severity.value == "error"
    warn = {f.evidence["bdf"]: f for f in by_id(fs, "HLTH002")}
    assert warn["0000:85:00.0"].evidence["bad_pages"] == 2


def test_events_older_than_an_hour_are_a_warning(tmp_path):
    tree = copy_tree("mi300x-faults", tmp_path)
    (tree / "proc" / "uptime").write_text("98390.00 1.0\n")  # the same lines, now a day old
    for f in (tree / "sys" / "devices").rglob("umc_err_count"):
        f.write_text("ue: 0\nce: 0\n")
    fs = host_findings(tree, {"health"})
    assert "HLTH001" not in ids(fs) and {f.evidence["bdf"] for f in by_id(fs, "HLTH003")} == {
        "0000:68:00.0", "0000:9e:00.0", "0000:d4:00.0"}


def test_pcie_pair_with_acs_and_a_narrow_link():
    fs = host_findings(HOSTS / "mi210-pcie-acs")
    assert ids(fs) == ["GPU000", "HLTH000", "PLAT001", "PLAT006", "PLAT007"]
    assert by_id(fs, "PLAT001")[0].severity.value == "error"  # two PCIe GPUs, DMA translated
    assert by_id(fs, "PLAT001")[0].playbook == "disable-p2p"
    link = by_id(fs, "PLAT006")[0]
    assert link.evidence["bdf"] == "0000:61:00.0" and "x8 of x16" in link.title
    assert by_id(fs, "PLAT007")[0].evidence["bridges"] == ["0000:00:03.1", "0000:00:03.2"]


def test_lspci_without_root_is_one_info(tmp_path):
    tree = copy_tree("mi210-pcie-acs", tmp_path)
    tools = json.loads((tree / "tools.json").read_text())
    tools["lspci_-vvv"]["stdout"] = ("0000:00:03.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Starship/Matisse "
                                     "GPP Bridge\n\tCapabilities: <access denied>\n")
    (tree / "tools.json").write_text(json.dumps(tools))
    fs = host_findings(tree, {"platform"})
    assert "PLAT007" not in ids(fs) and len(by_id(fs, "PLAT009")) == 1
    assert by_id(fs, "PLAT009")[0].severity.value == "info"


def test_container_without_devices_and_small_shm():
    fs = host_findings(HOSTS / "docker-rocm-no-devices")
    assert ids(fs) == ["GPU005", "HLTH000", "PLAT004", "PLAT008"]
    shm = by_id(fs, "PLAT004")[0]
    assert shm.evidence["size_mib"] == 64.0 and "--shm-size 16G" in shm.hint and "--ipc=host" in shm.hint
    assert "--device=/dev/kfd" in by_id(fs, "PLAT008")[0].hint


def test_cpu_only_container_is_no_fault(tmp_path):
    tree = copy_tree("docker-rocm-no-devices", tmp_path)
    shutil.rmtree(tree / "opt")
    assert "PLAT008" not in ids(host_findings(tree, {"platform"}))


def test_dmesg_without_privileges_is_one_info(tmp_path):
    tree = copy_tree("mi300x-healthy", tmp_path)
    tools = json.loads((tree / "tools.json").read_text())
    tools["dmesg"] = {"cmd": ["dmesg"], "rc": 1, "stdout": "",
                      "stderr": "dmesg: read kernel buffer failed: Operation not permitted\n"}
    (tree / "tools.json").write_text(json.dumps(tools))
    fs = host_findings(tree, {"health"})
    assert ids(fs) == ["HLTH000", "HLTH006"] and by_id(fs, "HLTH006")[0].severity.value == "info"


def test_cpx_partitions_are_eight_gpus_sharing_the_hbm():
    fs = host_findings(HOSTS / "mi300x-cpx")
    inv = by_id(fs, "GPU000")[0].evidence["gpus"]
    assert [g["index"] for g in inv] == list(range(8)) and {g["bdf"] for g in inv} == {"0000:0c:00.0"}
    assert all(g["kfd_mem_mib"] == 24574.0 and g["compute_partition"] == "CPX" for g in inv)
    part = by_id(fs, "HLTH005")[0]
    assert part.evidence["compute_partition"] == "CPX" and "8 partitions" in part.detail


def test_igpu_beside_dgpu_is_reported_with_its_mask():
    fs = host_findings(HOSTS / "radeon-7900xtx-igpu", {"gpus"}, env={})
    f = by_id(fs, "GPU006")[0]
    assert f.evidence["env"] == {"ROCR_VISIBLE_DEVICES": "1"} and f.playbook == "hide-igpu"
    # the 7900 XTX holds 1.5 GiB for the desktop, idle, no compute process: not "busy"
    assert "GPU002" not in ids(fs)


def test_igpu_mask_renumbers_hip_visible_devices():
    inv = [{"index": 0, "vendor": "amd", "integrated": True, "name": "AMD Radeon Graphics", "arch": "gfx1036"},
           {"index": 1, "vendor": "amd", "integrated": False, "name": "RX 7900 XTX", "arch": "gfx1100"},
           {"index": 2, "vendor": "amd", "integrated": False, "name": "RX 7900 XTX", "arch": "gfx1100"}]
    f = by_id(gpus_check.judge(inv, None, {"HIP_VISIBLE_DEVICES": "0,2"}), "GPU006")[0]
    # ROCR keeps raw 2 (the run's discrete GPU); HIP then numbers what is left from 0
    assert f.evidence["env"] == {"ROCR_VISIBLE_DEVICES": "2", "HIP_VISIBLE_DEVICES": "0"}
    assert "GPU006" not in ids(gpus_check.judge(inv, None, {"HIP_VISIBLE_DEVICES": "1,2"}))


def test_index_map_only_when_verbose():
    fs = host_findings(HOSTS / "radeon-7900xtx-igpu", {"gpus"})
    assert "GPU007" not in ids(fs)
    e = {"PATH": "/usr/bin:/bin", "ROCM_DOCTOR_SYSROOT": str(HOSTS / "radeon-7900xtx-igpu")}
    f = by_id(run_check(None, only={"gpus"}, env=e, replay=True, verbose=True).findings, "GPU007")[0]
    rows = f.detail.splitlines()
    assert rows[1].split()[:5] == ["0", "0", "1", "0000:12:00.0", "gfx1036"] and "(integrated)" in rows[1]
    assert rows[2].split()[:5] == ["1", "1", "2", "0000:03:00.0", "gfx1100"]


def test_display_memory_is_not_busy_but_compute_is():
    desk = {"index": 0, "vendor": "amd", "name": "AMD Radeon RX 6800 XT", "vram_used_mib": 1800, "util_pct": 0,
            "processes": [], "vram_total_mib": 16368}
    assert "GPU002" not in ids(gpus_check.judge([desk], None, {}))
    assert "GPU002" in ids(gpus_check.judge([{**desk, "util_pct": 35}], None, {}))
    assert "GPU002" in ids(gpus_check.judge([{**desk, "name": "AMD Instinct MI210"}], None, {}))


# ---------------------------------------------------------------- memory fit on the trees

MC_7B = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
         "intermediate_size": 14336, "vocab_size": 128256}
LORA = {"finetuning_type": "lora", "bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 1024}


def tree_gpus(name: str):
    host = Host(HOSTS / name, tools={})
    return [g.to_dict() for g in gpuinfo.inventory(host, env={}, use_library=False)[0]]


def test_memory_fit_ignores_the_igpu_carve_out():
    est = memory_fit.estimate(MC_7B, LORA)
    fs = memory_fit.judge(est, tree_gpus("radeon-7900xtx-igpu"))
    assert ids(fs) == ["MEM000"], fs[0].title  # was a false MEM001 against the 512 MiB iGPU


def test_memory_fit_measures_an_apu_by_its_gtt():
    g = tree_gpus("strix-halo-apu")
    assert g[0]["integrated"] and g[0]["gtt_total_mib"] == 65536.0 and g[0]["vram_total_mib"] == 512.0
    f = memory_fit.judge(memory_fit.estimate(MC_7B, LORA), g)[0]
    assert f.id == "MEM000" and "GTT" in f.title


def test_memory_fit_counts_one_partition_share():
    g = tree_gpus("mi300x-cpx")
    full = {"finetuning_type": "full", "bf16": True, "per_device_train_batch_size": 1, "cutoff_len": 1024}
    est = memory_fit.estimate(MC_7B, full)  # ~120 GiB: fits 192 GiB, not a 24 GiB CPX share
    assert 30 < est["total_gib"] < 190
    f = memory_fit.judge(est, g)[0]
    assert f.id == "MEM001" and "memory bank" in f.title
    assert gpuinfo.usable_memory({"vram_total_mib": 196592.0, "compute_partition": "CPX", "memory_partition": "NPS1",
                                  "name": "AMD Instinct MI300X"})[0] == pytest.approx(196592 / 8)
    assert gpuinfo.partition_count("CPX", "NPS1", "AMD Instinct MI300A") == 6
    assert gpuinfo.partition_count("DPX", "NPS4") == 4


# ---------------------------------------------------------------- pure parsers on real text

def test_dmesg_events_of_real_logs():
    def kinds(name, **kw):
        return {(e.kind, e.bdf) for e in health.parse_dmesg((FIXTURES / "dmesg" / name).read_text(), **kw)}

    aca = kinds("mi300x-aca-hardware-error-athub-uncorrectable-rocm6.2.3.txt")
    assert aca == {("ras", "0000:68:00.0"), ("ras", "0000:9e:00.0"), ("ras", "0000:d4:00.0")}
    navi = kinds("navi33-ring-gfx-timeout-mes-failed-gpu-reset-begin.txt")
    assert {("ring_timeout", "0000:03:00.0"), ("hang", "0000:03:00.0"), ("reset", "0000:03:00.0")} <= navi
    assert kinds("mi50-mem-ecc-active-uncorrectable-athub-gpu-reset.txt") == {
        ("ras", "0000:e3:00.0"), ("reset", "0000:e3:00.0")}  # "MEM ECC is active." is no error
    assert kinds("mi-gfxhub0-no-retry-page-fault-pt_main_thread.txt") == {("page_fault", "0000:c6:00.0")}
    assert kinds("rx7900xtx-plus-raphael-igpu-journal-topology-add-gpu-node.txt") == set()  # boot lines only
    # human (-T) and RFC 3339 timestamps give ages against "now"
    ev = health.parse_dmesg((FIXTURES / "dmesg" / "gfx1103-7840u-iso-timestamps-gpu-reset-mode2.txt").read_text(),
                            now=1723944000.0 + 3600)
    assert ev and all(e.age_s is not None and e.age_s < 2 * 86400 for e in ev)


def test_unlabelled_driver_lines_belong_to_the_only_gpu(tmp_path):
    tree = copy_tree("strix-halo-apu", tmp_path)
    tools = json.loads((tree / "tools.json").read_text())
    tools["dmesg"]["stdout"] += (FIXTURES / "dmesg" / "journalctl-ring-gfx-timeout-picom-mode2-reset.txt").read_text()
    (tree / "tools.json").write_text(json.dumps(tools))
    h = health.gather(Host.from_env({"ROCM_DOCTOR_SYSROOT": str(tree)}), tree_gpus("strix-halo-apu"))
    kinds = {e["kind"] for e in h.gpus[0].events}
    assert "ring_timeout" in kinds  # `[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout`


def test_kernel_command_lines_of_real_hosts():
    strix = ("BOOT_IMAGE=/vmlinuz-6.12.57+deb13-amd64 root=/dev/mapper/ubuntu--vg-ubuntu--lv ro amdgpu.gttsize=65536 "
             "ttm.pages_limit=16777216 amdgpu.cwsr_enable=0 amd_iommu=off")
    c = hostinfo.parse_cmdline(strix)
    assert c["iommu_off"] and not c["passthrough"] and not c["pci_realloc_off"]
    pt = hostinfo.parse_cmdline("BOOT_IMAGE=/vmlinuz-5.1-x86_64 root=UUID=1c9e rw amd_iommu=on iommu=pt quiet")
    assert pt["passthrough"] and pt["amd_iommu"] == "on"
    assert hostinfo.parse_cmdline("ro pci=realloc=off iommu.passthrough=1")["pci_realloc_off"]
    assert hostinfo.kernel_default_passthrough("CONFIG_IOMMU_DEFAULT_PASSTHROUGH=y\n") is True
    assert hostinfo.kernel_default_passthrough("# CONFIG_IOMMU_DEFAULT_PASSTHROUGH is not set\n") is False


def test_mounts_limits_and_acs_parsers():
    assert hostinfo.parse_mounts("shm /dev/shm tmpfs rw,nosuid,nodev,noexec,relatime,size=65536k 0 0\n")[
        "size_mib"] == 64.0
    assert hostinfo.parse_mounts("tmpfs /dev/shm tmpfs rw,nosuid,nodev 0 0\n")["size_mib"] is None
    lim = hostinfo.parse_limits("Max locked memory         8388608              8388608              bytes\n")
    assert lim == {"memlock_unlimited": False, "memlock_mib": 8.0}
    assert hostinfo.parse_limits("Max locked memory         unlimited            unlimited            bytes\n")[
        "memlock_unlimited"]
    # NVIDIA/nccl#304: the broken (ACS enabled) and the working (disabled) ACSCtl lines
    text = ("00:03.1 PCI bridge: AMD GPP Bridge\n\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ "
            "EgressCtrl- DirectTrans-\n00:03.2 PCI bridge: AMD GPP Bridge\n\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- "
            "CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-\n")
    assert hostinfo.parse_lspci_acs(text) == {"enabled": ["0000:00:03.1"], "denied": False}


def test_iommu_group_type_wins_over_the_command_line():
    base = {"cmdline": hostinfo.parse_cmdline("ro quiet"), "iommu": {"units": ["ivhd0"], "group_types": {}}}
    gpus = [{"index": i, "vendor": "amd", "bdf": f"0000:0{i}:00.0", "name": "AMD Instinct MI210", "arch": "gfx90a"}
            for i in (1, 2)]
    assert by_id(platform_check.judge({**base, "config_passthrough": False}, gpus, {}), "PLAT001")[0].is_error
    ident = {**base, "iommu": {"units": ["ivhd0"], "group_types": {g["bdf"]: "identity" for g in gpus}}}
    assert "PLAT001" not in ids(platform_check.judge(ident, gpus, {}))  # CONFIG_..._PASSTHROUGH / iommu.passthrough
    unknown = platform_check.judge(base, gpus, {})  # IOMMU on, nothing says how: a warning, not an error
    assert by_id(unknown, "PLAT001")[0].severity.value == "warning"
    one = platform_check.judge({**base, "config_passthrough": False}, gpus[:1], {})
    assert by_id(one, "PLAT001")[0].severity.value == "info" and by_id(one, "PLAT001")[0].playbook is None


def test_memlock_matters_only_across_nodes():
    p = {"limits": {"memlock_unlimited": False, "memlock_mib": 8.0}}
    gpus = [{"index": 0, "vendor": "amd", "bdf": "0000:05:00.0", "name": "AMD Instinct MI300X", "arch": "gfx942"}]
    assert "PLAT005" not in ids(platform_check.judge(p, gpus, {}))
    assert "PLAT005" in ids(platform_check.judge(p, gpus, {"NNODES": "2"}))


def test_health_judge_ignores_gpus_the_run_excludes():
    h = {"gpus": [{"index": 1, "bdf": "0000:26:00.0", "uncorrectable": 4, "ras_blocks": {"umc": [4, 0]},
                   "events": []}], "events": [], "dmesg": "ok"}
    mine = [{"index": 0, "vendor": "amd", "bdf": "0000:05:00.0"}]
    assert ids(health_check.judge(h, mine)) == ["HLTH000"]
    assert ids(health_check.judge(h, mine + [{"index": 1, "vendor": "amd", "bdf": "0000:26:00.0"}])) == ["HLTH001"]


def test_amd_smi_health_payloads():
    ecc = [{"gpu": 0, "ecc": {"total_correctable_count": 2, "total_uncorrectable_count": 0,
                              "total_deferred_count": "N/A"}}]
    assert health.parse_amd_smi_ecc(ecc) == {0: {"uncorrectable": 0, "correctable": 2, "deferred": 0}}
    assert health.parse_amd_smi_ecc({"gpu_data": ecc})[0]["correctable"] == 2  # amd-smi >= 26 envelope
    assert health.parse_amd_smi_bad_pages([{"gpu": 0, "retired": "No bad pages found.", "pending": []}]) == {0: 0}
    assert health.parse_ras_count("ue: 3\nce: 17\n") == (3, 17)
    assert health.parse_bad_pages("0x00000001 : 0x00001000 : R\n0x00000002 : 0x00001000 : P\n") == 2


# ---------------------------------------------------------------- record -> bundle -> replay

def test_recorder_tree_replays_the_same_reads(tmp_path):
    rec = Recorder()
    live = Host(HOSTS / "radeon-7900xtx-igpu", tools={}, recorder=rec)
    first = [g.to_dict() for g in gpuinfo.inventory(live, env={}, use_library=False)[0]]
    write_tree(tmp_path / "root", rec)
    again = [g.to_dict() for g in gpuinfo.inventory(Host.from_env({"ROCM_DOCTOR_SYSROOT": str(tmp_path / "root")}),
                                                    env={}, use_library=False)[0]]
    assert again == first and len(first) == 2


@pytest.mark.parametrize("tree", ["mi300x-faults", "radeon-7900xtx-igpu", "docker-rocm-no-devices", None])
def test_replay_of_a_report_gives_the_live_host_findings(tree, tmp_path):
    """`report` records every host read; `check --replay` on its bundle gives the same host findings (ids,
    titles, evidence) as the live run: on recorded trees and on this machine itself (tree None)."""
    env = {"ROCM_DOCTOR_SYSROOT": str(HOSTS / tree)} if tree else {}
    bundle = tmp_path / "b.tar.gz"
    r = run_cli("report", "--quick", "-o", str(bundle), env=env)
    assert r.returncode == 0, r.stderr
    with tarfile.open(bundle) as tf:
        names = tf.getnames()
    assert any(n.endswith("sysroot/tools.json") for n in names) and any("/host/" in n for n in names)
    live = run_cli("check", "--only", "gpus,platform,health", "--json", env=env)
    rep = run_cli("check", "--replay", str(bundle), "--json")
    assert rep.returncode == live.returncode, rep.stderr

    def key(out):
        return [(f["id"], f["title"], json.dumps(f["evidence"], sort_keys=True)) for f in json.loads(out)["findings"]]

    assert key(rep.stdout) == key(live.stdout)


def test_replay_bad_input_is_one_line(tmp_path):
    bogus = tmp_path / "x.tar.gz"
    bogus.write_text("not a tarball")
    for args in (["--replay", str(bogus)], ["--replay", str(tmp_path / "missing")], ["--replay", str(tmp_path)],
                 ["--replay", str(tmp_path), "--only", "torch"]):
        r = run_cli("check", *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_recorded_trees_survive_version_control():
    """git drops empty directories; an empty /sys/kernel/iommu_groups/0 or /opt/rocm/bin is a fact the checks
    read, so every one holds a .keep that the rooted host layer never lists."""
    import os

    empty = [d for d, sub, files in os.walk(HOSTS) if not sub and not files]
    assert empty == []
    host = Host(HOSTS / "mi300x-healthy")
    assert host.listdir("/sys/kernel/iommu_groups/0") == []
    assert host.glob("/sys/kernel/iommu_groups/0/*") == []
