"""torch-build verdicts on probe data shaped like real ROCm/CUDA/CPU outputs, and the real probe on CPU."""

import json

from checks.torch import arch_supported, judge, override_to_arch, version_in
from doctor import runner
from doctor.context import Context, Options
from doctor.worker import ProbeResult
from tests.conftest import fixture, run_cli, stack

OLD_WHEEL = ["gfx900", "gfx906", "gfx908", "gfx90a", "gfx1030", "gfx1100", "gfx942"]  # real ROCm 5.x/6.0 list
DEV_OK = {"kfd_exists": True, "kfd_rw": True, "render_nodes": ["/dev/dri/renderD128"],
          "render_rw": ["/dev/dri/renderD128"], "groups": ["render", "video"]}


def rocm_info(arch="gfx942", arch_list=OLD_WHEEL, n=1, hip="6.2.41134-65d174c3e", ver="2.5.1+rocm6.2"):
    return {"version": ver, "hip": hip, "cuda": None, "available": n > 0, "count": n, "arch_list": arch_list,
            "devices": [{"index": i, "name": "AMD Instinct MI300X", "arch": arch,
                         "gcnArchName": f"{arch}:sramecc+:xnack-", "total_mib": 196592} for i in range(n)]}


def sysf(archs=("gfx942",), rocm="6.2.4", dev=DEV_OK):
    return {"gpus": [{"vendor": "amd", "arch": a} for a in archs], "rocm_version": rocm,
            "rocm_version_source": "/opt/rocm/.info/version", "devices": dev, "kfd_archs": list(archs)}


def ids(fs):
    return [f.id for f in fs]


def test_healthy_mi300x():
    fs = judge(rocm_info(), {"torchvision": {"version": "0.20.1+rocm6.2", "import_ok": True}}, sysf(), {})
    assert ids(fs) == ["TORCH000"]


def test_arch_missing_from_wheel_rdna3_7800xt():
    fs = judge(rocm_info(arch="gfx1101"), None, sysf(["gfx1101"]), {})
    assert "TORCH003" in ids(fs)


def test_generic_targets_accepted():
    assert arch_supported("gfx1101", ["gfx11-generic"]) and arch_supported("gfx942", ["gfx9-4-generic"])
    assert not arch_supported("gfx1030", ["gfx11-generic"])


def test_cpu_and_cuda_torch_on_amd_machine():
    cpu = {"version": "2.9.1+cpu", "hip": None, "cuda": None, "devices": [], "arch_list": []}
    assert "TORCH002" in ids(judge(cpu, None, sysf(), {}))
    cuda = {"version": "2.9.1+cu128", "hip": None, "cuda": "12.8", "devices": [], "arch_list": []}
    assert "TORCH002" in ids(judge(cuda, None, sysf(), {}))


def test_hip_vs_system_rocm():
    f = [x for x in judge(rocm_info(), None, sysf(rocm="6.4.1"), {}) if x.id == "TORCH004"]
    assert f and "6.2" in f[0].title and "6.4" in f[0].title


def test_cuda_torchaudio_beside_rocm_torch():
    comp = {"torchaudio": {"version": "2.5.1+cu121", "import_ok": False, "error": "OSError: libcudart.so.12"}}
    assert "TORCH005" in ids(judge(rocm_info(), comp, sysf(), {}))


def test_hsa_override():
    assert override_to_arch("11.0.0") == "gfx1100" and override_to_arch("9.0.10") == "gfx90a"
    # needed: gfx1101 on an old wheel -> no warning
    assert "TORCH006" not in ids(judge(rocm_info(arch="gfx1100"), None, sysf(["gfx1101"]),
                                       {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}))
    # harmful on RDNA4 and Instinct
    assert "TORCH006" in ids(judge(rocm_info(arch="gfx1030", arch_list=OLD_WHEEL + ["gfx1201"]), None,
                                   sysf(["gfx1201"]), {"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}))
    assert "TORCH006" in ids(judge(rocm_info(), None, sysf(), {"HSA_OVERRIDE_GFX_VERSION": "9.0.10"}))
    # equal to the GPU's own arch: a no-op, not harmful
    assert "TORCH006" not in ids(judge(rocm_info(), None, sysf(), {"HSA_OVERRIDE_GFX_VERSION": "9.4.2"}))
    # Vega APUs (gfx90c/902/909) have no kernels in any wheel: 9.0.0 is their workaround, never "unset it"
    apu = rocm_info(arch="gfx900", arch_list=OLD_WHEEL)
    for vega in ("gfx90c", "gfx902", "gfx909"):
        assert "TORCH006" not in ids(judge(apu, None, sysf([vega]), {"HSA_OVERRIDE_GFX_VERSION": "9.0.0"})), vega


def test_hip_mismatch_matters_only_for_extensions_built_against_the_system_rocm():
    plain = [x for x in judge(rocm_info(), None, sysf(rocm="6.4.1"), {}, {"torch": "2.5.1"}) if x.id == "TORCH004"]
    assert plain and plain[0].severity.value == "info" and not plain[0].evidence["extensions"]
    ext = [x for x in judge(rocm_info(), None, sysf(rocm="6.4.1"), {}, {"flash_attn": "2.8.3"}) if x.id == "TORCH004"]
    assert ext and ext[0].severity.value == "warning" and ext[0].evidence["extensions"] == ["flash_attn"]


def test_device_files():
    bad = dict(DEV_OK, kfd_rw=False, groups=["users"])
    f = [x for x in judge(rocm_info(n=0), None, sysf(dev=bad), {}) if x.id == "TORCH007"]
    assert f and "render" in f[0].detail
    assert "TORCH007" in ids(judge(rocm_info(n=0), None, sysf(dev={"kfd_exists": False}), {}))


def test_visible_devices():
    env = {"ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0,1"}
    assert "TORCH008" in ids(judge(rocm_info(), None, sysf(["gfx942"] * 8), env))
    assert "TORCH008" in ids(judge(rocm_info(), None, sysf(["gfx942"] * 2), {"HIP_VISIBLE_DEVICES": "3"}))
    assert "TORCH008" in ids(judge(rocm_info(), None, sysf(), {"HIP_VISIBLE_DEVICES": "0",
                                                               "CUDA_VISIBLE_DEVICES": "1"}))
    assert "TORCH008" not in ids(judge(rocm_info(), None, sysf(["gfx942"] * 2), {"HIP_VISIBLE_DEVICES": "1"}))


def test_library_ranges():
    libs = {"transformers": "5.7.0", "peft": "0.18.1", "llamafactory": "0.9.5"}
    ranges = {"transformers": ">=4.55.0,<=5.6.0", "peft": ">=0.18.0,<=0.20.0"}
    fs = [f for f in judge(rocm_info(), None, sysf(), {}, libs, ranges) if f.id == "TORCH009"]
    assert len(fs) == 1 and fs[0].evidence["package"] == "transformers"
    assert not [f for f in judge(rocm_info(), None, sysf(), {"DISABLE_VERSION_CHECK": "1"}, libs, ranges)
                if f.id == "TORCH009"]
    assert version_in("4.57.1", ">=4.55.0,<=5.6.0,!=4.57.0") and not version_in("4.57.0", ">=4.55,!=4.57.0")


def test_h200_probe_shape_is_healthy():
    probe = json.loads(fixture("nvidia/h200-torch-probe.txt").read_text().split("\n}\n")[0] + "\n}")
    info = {"version": probe["torch"], "hip": None, "cuda": probe["cuda"], "arch_list": probe["arch_list"],
            "devices": [{"index": 0, "name": probe["props"]["name"], "arch": "sm_90"}]}
    fs = judge(info, None, {"gpus": [{"vendor": "nvidia", "arch": "sm_90"}], "devices": {}}, {})
    assert ids(fs) == ["TORCH000"]


@stack
def test_real_probe_on_this_cpu_machine():
    r = run_cli("check", "--json", "--only", "torch")
    out = json.loads(r.stdout)
    assert out["environment"]["torch"]["version"].startswith("2.9.1")
    # CPU torch, no GPU, the pinned stack inside LLaMA-Factory 0.9.5's ranges: exactly the CPU-only note
    assert [f["id"] for f in out["findings"]] == ["TORCH010"], out["findings"]
    assert out["environment"]["packages"]["llamafactory"] == "0.9.5"


def seeded(only: set[str], **probes: dict) -> Context:
    """A context whose probes already ran (recorded data): the runner plans them but runs no worker."""
    ctx = Context(options=Options(only=only), env={})
    ctx.facts["system"] = {"gpus": [], "devices": {}, "kfd_archs": []}
    for name, data in probes.items():
        ctx.probes[name] = ProbeResult(name, "ok", data=data)
    return ctx


def test_torch009_fires_in_a_real_run_of_the_checks():
    """Regression: the torch check used to read the schema the config check (which runs later) stored,
    so TORCH009 never fired in `rocm-doctor check`."""
    cpu = {"version": "2.9.1+cpu", "hip": None, "cuda": None, "devices": [], "arch_list": [], "count": 0}
    libs = {"transformers": "5.7.0", "peft": "0.18.1", "llamafactory": "0.9.5", "trl": "0.24.0"}
    fs = runner.run(seeded({"torch"}, torch=cpu, companions={}, libs=libs))
    t9 = [f for f in fs if f.id == "TORCH009"]
    assert len(t9) == 1 and t9[0].evidence["package"] == "transformers", [f.id for f in fs]
    assert t9[0].evidence["required"] == ">=4.55.0,<=5.6.0"  # llamafactory 0.9.5's own pin (bundled schema)
    # another llamafactory release: 0.9.5's pins say nothing about it
    fs = runner.run(seeded({"torch"}, torch=cpu, companions={}, libs=dict(libs, llamafactory="0.9.9")))
    assert not [f for f in fs if f.id == "TORCH009"]


def test_broken_python_is_a_finding(tmp_path):
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho 'Fatal Python error: init_import_site' >&2\nexit 1\n")
    fake.chmod(0o755)
    r = run_cli("check", "--json", "--only", "torch", "--python", str(fake))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    f = json.loads(r.stdout)["findings"]
    assert f and f[0]["severity"] == "error"


@stack
def test_only_bf16_reports_its_own_verdict():
    """Regression: `--only bf16` (also attention, bitsandbytes) printed no finding and exited 0 on any
    machine, because the torch probe the verdicts read ran only when the torch area was selected."""
    r = run_cli("check", "--json", "--only", "bf16")
    got = [f["id"] for f in json.loads(r.stdout)["findings"]]
    assert got == ["BF16004"], got  # this CPU machine: bf16 numerics checked on the CPU, nothing else shown
    r = run_cli("check", "--json", "--only", "attention,bitsandbytes")
    areas = {f["check"] for f in json.loads(r.stdout)["findings"]}
    assert areas == {"attention", "bitsandbytes"} or areas == {"attention"}, areas


def test_only_bf16_plans_the_torch_probe():
    from doctor import runner

    ctx = Context(options=Options(only={"bf16"}), env={})
    every, _ = runner.load_all()
    specs, _ = runner.plan(ctx, runner.select(ctx, every), every)
    assert {"torch", "bf16"} <= {s.name for s in specs}
    assert "attention" not in {s.name for s in specs}


def _on_a_tty(*args: str) -> tuple[bytes, str]:
    """Run the CLI with stderr on a pseudo-terminal (read while it runs: a full pty buffer blocks the
    writer); returns (stdout, what the terminal showed)."""
    import os
    import pty
    import subprocess
    import sys
    import threading

    from tests.conftest import ROOT

    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def reader() -> None:
        while True:
            try:
                b = os.read(master, 65536)
            except OSError:
                return
            if not b:
                return
            chunks.append(b)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120", TERM="xterm")
    p = subprocess.run([sys.executable, "-m", "doctor", *args], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=slave, timeout=300)
    os.close(slave)
    t.join(timeout=5)
    os.close(master)
    return p.stdout, b"".join(chunks).decode("utf-8", "replace")


@stack
def test_progress_shows_on_a_terminal_only():
    """A blank screen for the whole run looks hung: on a TTY, stderr shows what is being probed."""
    out, tty = _on_a_tty("check", "--only", "torch", "--no-cache")  # kept results would flash by unseen
    assert "probing in the examined Python" in tty
    assert b"probing" not in out  # the findings on stdout carry no progress
    out, tty = _on_a_tty("check", "--json", "--only", "torch")
    json.loads(out)  # stdout stays pure JSON
    assert "probing" not in tty  # --json: no progress, even on a terminal
