"""GPU inventory parsing on recorded real outputs (tests/fixtures, copied from public sources), and black-box fake tools on PATH."""

import json
import os
import shutil
import stat

import pytest

from doctor import gpuinfo
from doctor.host import Host
from tests.conftest import fixture


def test_rocm_smi_rx7900xt_bytes_to_mib():
    g = gpuinfo.parse_rocm_smi(json.loads(fixture("rocm-smi/rx7900xt-productname-use-meminfo.json").read_text()))
    assert len(g) == 1
    assert g[0].name == "Radeon RX 7900 XT" and g[0].arch == "gfx1100"
    assert g[0].vram_total_mib == round(21458059264 / 2**20, 1) and g[0].vram_used_mib == round(27856896 / 2**20, 1)
    assert g[0].util_pct == 0.0 and g[0].source == "rocm-smi"


def test_rocm_smi_memuse_only_and_na():
    g = gpuinfo.parse_rocm_smi(json.loads(fixture("rocm-smi/2x-rx6800-memuse-rocm-smi-1.4.1.json").read_text()))
    assert [x.index for x in g] == [0, 1] and all(x.vram_total_mib is None for x in g)


def test_rocm_smi_gfx_version_bug_fragment():
    frag = fixture("rocm-smi/mi250-all-fragment-rocm-6.2.4.txt").read_text().strip()
    payload = json.loads('{"card0": {' + frag)  # the fixture is the tail of one card object + "system"
    g = gpuinfo.parse_rocm_smi(payload)
    assert g[0].arch == "gfx90a" and "MI250" in g[0].name


def test_normalize_gfx():
    assert gpuinfo.normalize_gfx("gfx9010") == "gfx90a"
    assert gpuinfo.normalize_gfx("gfx11000") == "gfx1100"
    assert gpuinfo.normalize_gfx("gfx11001") == "gfx1101"
    assert gpuinfo.normalize_gfx("gfx942:sramecc+:xnack-") == "gfx942"
    assert gpuinfo.normalize_gfx("gfx1201") == "gfx1201"


def test_amd_smi_both_envelopes():
    static = json.loads(fixture("amd-smi/CONSTRUCTED-mi300x-static-asic-vram-wrapped.json").read_text())
    metric = json.loads(fixture("amd-smi/CONSTRUCTED-mi300x-metric-usage-memusage-list.json").read_text())
    g = gpuinfo.parse_amd_smi(static, metric)
    assert len(g) == 1 and g[0].name == "AMD Instinct MI300X" and g[0].arch == "gfx942"
    assert g[0].vram_total_mib == 196592 and g[0].vram_used_mib == 283 and g[0].util_pct == 0
    # the same data in the other envelope gives the same GPU
    g2 = gpuinfo.parse_amd_smi(static["gpu_data"], {"gpu_data": metric})
    assert g2[0].to_dict() == g[0].to_dict()


def test_amd_smi_hip_index_mapping_and_na_sections():
    static = [{"gpu": 0, "asic": {"market_name": "A", "target_graphics_version": "gfx942"}},
              {"gpu": 1, "asic": {"market_name": "B", "target_graphics_version": "gfx942"}}]
    metric = [{"gpu": 0, "usage": "N/A", "mem_usage": "N/A"}, {"gpu": 1, "usage": {"gfx_activity": "N/A"}}]
    enum = [{"gpu": 0, "hip_id": 1}, {"gpu": 1, "hip_id": 0}]
    g = gpuinfo.parse_amd_smi(static, metric, enum)
    assert [(x.index, x.name) for x in g] == [(0, "B"), (1, "A")]
    assert all(x.util_pct is None for x in g)


def test_nvidia_smi_csv_h200():
    text = fixture("nvidia/h200-nvidia-smi.txt").read_text()
    csv = "\n".join(line for line in text.splitlines() if line[:1].isdigit())
    g = gpuinfo.parse_nvidia_smi_csv(csv)
    assert len(g) == 1 and g[0].name == "NVIDIA H200" and g[0].vram_total_mib == 143771 and g[0].util_pct == 0


def test_sysfs(tmp_path):
    dev = tmp_path / "sys/class/drm/card0/device"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x1002\n")
    (dev / "mem_info_vram_total").write_text(str(64 * 2**30))
    (dev / "mem_info_vram_used").write_text(str(2**30))
    (dev / "gpu_busy_percent").write_text("7\n")
    node = tmp_path / "sys/class/kfd/kfd/topology/nodes/1"
    node.mkdir(parents=True)
    (node / "properties").write_text("cpu_cores_count 0\ngfx_target_version 90010\n")
    cpu = tmp_path / "sys/class/kfd/kfd/topology/nodes/0"
    cpu.mkdir(parents=True)
    (cpu / "properties").write_text("gfx_target_version 0\n")
    g = gpuinfo.parse_sysfs(Host(tmp_path))
    assert g[0].vram_total_mib == 65536 and g[0].vram_used_mib == 1024 and g[0].util_pct == 7
    assert gpuinfo.kfd_archs(Host(tmp_path)) == ["gfx90a"]


def _fake_tool(bindir, name, stdout_file=None, rc=0, stderr=""):
    p = bindir / name
    body = "#!/bin/sh\n"
    if stderr:
        body += f"echo '{stderr}' >&2\n"
    if stdout_file:
        body += f"cat '{stdout_file}'\n"
    body += f"exit {rc}\n"
    p.write_text(body)
    p.chmod(p.stat().st_mode | stat.S_IEXEC)


def test_inventory_falls_back_from_failing_amd_smi_to_rocm_smi(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _fake_tool(bindir, "amd-smi", rc=1, stderr="amdsmi init failed")
    _fake_tool(bindir, "rocm-smi", fixture("rocm-smi/rx7900xt-productname-use-meminfo.json"),
               stderr="WARNING: something on stderr")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}/usr/bin:/bin")
    gpus, notes = gpuinfo.inventory(host=Host(tmp_path))
    assert gpus[0].source == "rocm-smi" and gpus[0].arch == "gfx1100"
    assert any("amd-smi" in n for n in notes)


def test_inventory_amd_smi_with_stderr_warnings(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "amd-smi"
    static = fixture("amd-smi/CONSTRUCTED-mi300x-static-asic-vram-wrapped.json")
    metric = fixture("amd-smi/CONSTRUCTED-mi300x-metric-usage-memusage-list.json")
    script.write_text(f"""#!/bin/sh
echo "SyntaxWarning: invalid escape sequence" >&2
case "$1" in static) cat '{static}';; metric) cat '{metric}';; *) exit 2;; esac
""")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}/usr/bin:/bin")
    gpus, _ = gpuinfo.inventory(host=Host(tmp_path))
    assert gpus[0].source == "amd-smi" and gpus[0].vram_used_mib == 283


def _fake_amdsmi(tmp_path, body: str):
    pkg = tmp_path / "site" / "amdsmi"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    return tmp_path / "site"


def _amdsmi_from_fixture() -> str:
    """A stand-in for the amdsmi library (no AMD GPU here) answering with the recorded MI300X values, in the
    shapes the library returns (VRAM usage in MiB, activity in %, N/A strings)."""
    static = json.loads(fixture("amd-smi/CONSTRUCTED-mi300x-static-asic-vram-wrapped.json").read_text())
    metric = json.loads(fixture("amd-smi/CONSTRUCTED-mi300x-metric-usage-memusage-list.json").read_text())
    asic = static["gpu_data"][0]["asic"]
    mem = metric[0]["mem_usage"]
    return f"""
def amdsmi_init(): pass
def amdsmi_shut_down(): pass
def amdsmi_get_processor_handles(): return ["h0", "h1"]
def amdsmi_get_gpu_asic_info(h): return {asic!r}
def amdsmi_get_gpu_vram_usage(h):
    return {{"vram_total": {mem['total_vram']['value']}, "vram_used": {mem['used_vram']['value']} if h == "h0" else 150000}}
def amdsmi_get_gpu_activity(h): return {{"gfx_activity": 0, "umc_activity": 0, "mm_activity": "N/A"}}
def amdsmi_get_gpu_driver_info(h): return {{"driver_name": "amdgpu", "driver_version": "6.10.5"}}
def amdsmi_get_gpu_device_bdf(h): return "0000:0c:00.0" if h == "h0" else "0000:22:00.0"
def amdsmi_get_gpu_enumeration_info(h): return {{"hip_id": 1 if h == "h0" else 0}}
def amdsmi_get_gpu_process_list(h): raise RuntimeError("not permitted")
"""


def test_inventory_prefers_amdsmi_library(tmp_path, monkeypatch):
    site = _fake_amdsmi(tmp_path, _amdsmi_from_fixture())
    monkeypatch.syspath_prepend(str(site))
    env = dict(os.environ, PYTHONPATH=str(site))
    gpus, notes = gpuinfo.inventory(host=Host(tmp_path), env=env)
    assert [g.source for g in gpus] == ["amdsmi", "amdsmi"]
    assert [(g.index, g.bdf) for g in gpus] == [(0, "0000:22:00.0"), (1, "0000:0c:00.0")]  # HIP order
    g1 = gpus[1]
    assert g1.name == "AMD Instinct MI300X" and g1.arch == "gfx942" and g1.vram_total_mib == 196592
    assert g1.vram_used_mib == 283 and g1.util_pct == 0 and g1.driver == "6.10.5" and g1.processes == []
    # --quick never starts the extra interpreter
    gpus, _ = gpuinfo.inventory(host=Host(tmp_path), env=env, use_library=False)
    assert not gpus or gpus[0].source != "amdsmi"


@pytest.mark.parametrize("body", ["raise KeyError('libamd_smi.so')",
                                  "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)",
                                  "def amdsmi_init():\n    raise AttributeError('undefined symbol: amdsmi_get_gpu_metrics_info')"],
                         ids=["keyerror", "segfault", "symbol"])
def test_broken_amdsmi_library_falls_back(tmp_path, monkeypatch, body):
    site = _fake_amdsmi(tmp_path, body)
    monkeypatch.syspath_prepend(str(site))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _fake_tool(bindir, "rocm-smi", fixture("rocm-smi/rx7900xt-productname-use-meminfo.json"))
    env = dict(os.environ, PYTHONPATH=str(site))
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}/usr/bin:/bin")
    gpus, notes = gpuinfo.inventory(host=Host(tmp_path), env=env)
    assert gpus and gpus[0].source == "rocm-smi"
    assert any(n.startswith("amdsmi") for n in notes)


def test_inventory_is_read_before_our_device_worker_touches_a_gpu(tmp_path, monkeypatch):
    """The doctor's own probe worker holds GPU memory (0.6 GiB on the H200) while it runs. The
    inventory must see the GPUs as they were before it, or the doctor calls the GPU "already busy"
    (GPU002). A fake nvidia-smi reports memory in use once the worker has started."""
    from doctor.context import Context, Options
    from doctor.runner import run_probe_specs
    from doctor.worker import ProbeSpec

    marker, bin_dir = tmp_path / "worker-started", tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nif [ -e '{marker}' ]; then echo '0, NVIDIA H200, 143771 MiB, 9000 MiB, 40 %'; "
                   "else echo '0, NVIDIA H200, 143771 MiB, 0 MiB, 0 %'; fi\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    if shutil.which("amd-smi") or shutil.which("rocm-smi") or os.path.isdir("/sys/class/kfd"):
        pytest.skip("an AMD tool would answer before nvidia-smi here")
    ctx = Context.build(Options(config=None), env=dict(os.environ))
    ctx.facts.pop("system", None)
    run_probe_specs(ctx, [ProbeSpec("t_touch", "tests.faulty_probes", "touch", {"path": str(marker)})])
    assert ctx.probes["t_touch"].ok and marker.exists()
    g = ctx.system()["gpus"][0]
    assert g["source"] == "nvidia-smi" and g["vram_used_mib"] == 0
    from checks import gpus as gpus_check

    assert "GPU002" not in [f.id for f in gpus_check.judge(ctx.system()["gpus"], 1, {})]


class _Mem:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def _fake_pynvml(v2: bool):
    """Stand-in for nvidia-ml-py (no NVIDIA GPU in CI) answering what the H200 answered in the GPU
    validation run (docs/gpu-validation/): v1 counts the driver's reserved memory as used."""
    import types

    MiB = 2**20
    m = types.ModuleType("pynvml")
    m.NVMLError = RuntimeError
    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlSystemGetDriverVersion = lambda: "580.159.04"
    m.nvmlDeviceGetCount = lambda: 1
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetName = lambda h: "NVIDIA H200"
    m.nvmlDeviceGetUtilizationRates = lambda h: _Mem(gpu=0)
    m.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: []

    def meminfo(h, version=None):
        if version is None:
            return _Mem(total=143771 * MiB, free=143771 * MiB - 645005312, used=645005312)
        if not v2:
            raise RuntimeError("Function Not Found")
        return _Mem(version=version, total=143771 * MiB, reserved=645005312, free=143771 * MiB - 645005312, used=0)

    m.nvmlDeviceGetMemoryInfo = meminfo
    m.nvmlMemory_v2 = 0x02000028
    return m


def test_nvml_used_memory_excludes_the_drivers_reserved_memory(monkeypatch):
    import sys

    from checks import memory as memory_fit

    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(v2=True))
    g = gpuinfo.query_nvml()[0]
    assert (g.vram_used_mib, g.vram_reserved_mib, g.arch, g.source) == (0.0, 615.1, "sm_90", "nvml")
    est = {"total_gib": 100.0, "params": 8e9, "weights_gib": 1, "states_gib": 1, "activations_gib": 1,
           "logits_gib": 1}
    f = memory_fit.judge(est, [g.to_dict()])[0]
    assert f.id == "MEM000" and f.evidence["free_gib"] == pytest.approx((143771 - 615.1) / 1024, abs=0.01)
    # an old driver without the v2 call: v1's figure, reserved unknown
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(v2=False))
    g = gpuinfo.query_nvml()[0]
    assert (g.vram_used_mib, g.vram_reserved_mib) == (615.1, None)


def test_check_black_box_with_recorded_rocm_smi_on_path(tmp_path):
    """The real CLI on this CPU-only machine, with a `rocm-smi` on PATH printing a recorded RX 7900 XT output
    (and an `amd-smi` that fails first): the AMD GPU is found, and torch (a CPU/CUDA wheel here) seeing none
    of it is the error a user with the wrong wheel gets."""
    from tests.conftest import HAVE_STACK, run_cli

    if not HAVE_STACK:
        pytest.skip("needs torch for the torch-side findings")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _fake_tool(bindir, "amd-smi", rc=1, stderr="ERROR:root:Unable to load libamd_smi.so")
    _fake_tool(bindir, "rocm-smi", fixture("rocm-smi/rx7900xt-productname-use-meminfo.json"),
               stderr="WARNING: AMD GPU device(s) is/are in a low-power state")
    r = run_cli("check", "--json", "--only", "torch,gpus", env={"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"})
    assert r.returncode == 1, r.stderr[-2000:]
    out = json.loads(r.stdout)
    g = out["environment"]["gpus"]
    assert [(x["source"], x["name"], x["arch"]) for x in g] == [("rocm-smi", "Radeon RX 7900 XT", "gfx1100")]
    assert round(g[0]["vram_total_mib"]) == 20464 and g[0]["vram_used_mib"] < 30
    got = {f["id"]: f for f in out["findings"]}
    assert got["TORCH002"]["severity"] == "error"            # a CPU/CUDA torch on an AMD machine
    assert "GPU001" in got and "GPU002" not in got           # torch sees 0 of 1; the idle card is not busy
