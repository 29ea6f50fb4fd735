"""torch build: importable, backend vs the GPUs present, gfx arch vs the wheel, HIP vs system ROCm,
companion wheels, HSA override, device files, visible-device variables, library ranges."""

from __future__ import annotations

import re
from typing import Any

from doctor import archs
from doctor.context import Context
from doctor.findings import Code, Finding, Severity, with_all_good
from doctor.gpuinfo import parse_visible
from doctor.registry import check, probe_failure
from doctor.stack import PACKAGES, env_flag
from doctor.worker import ProbeSpec

AREA = "torch"

TORCH000 = Code(
    AREA, "TORCH000", Severity.OK, 'torch build matches this machine',
    why="torch imports, its backend matches the GPUs present and every GPU's arch is in the wheel.",
    fix='Nothing to do.',
)

TORCH001 = Code(
    AREA, "TORCH001", Severity.ERROR, 'torch cannot be imported',
    why='Without torch nothing trains. A broken `import torch` on ROCm is often a mismatched `amdsmi` '
        'package (torch imports it and only catches ImportError).',
    fix='Reinstall a ROCm torch wheel from the PyTorch ROCm index matching your ROCm; if the error mentions '
        'amdsmi, `pip uninstall amdsmi` or install the one in /opt/rocm/share/amd_smi.',
)

TORCH002 = Code(
    AREA, "TORCH002", Severity.ERROR, 'torch build does not match the GPUs (CPU/CUDA torch on AMD GPUs)',
    why='A CPU or CUDA wheel on a machine whose GPUs are AMD trains on the CPU (or not at all).',
    fix='Install the ROCm wheel: `pip install torch --index-url https://download.pytorch.org/whl/rocmX.Y`.',
)

TORCH003 = Code(
    AREA, "TORCH003", Severity.ERROR, 'GPU architecture not compiled into this torch',
    why='Each ROCm wheel ships kernels for a list of gfx targets (`torch.cuda.get_arch_list()`). A GPU '
        'outside it fails with `hipErrorNoBinaryForGpu` or `invalid device function`.',
    fix='Use a wheel that lists your arch (newer ROCm wheels add RDNA3/4); as a last resort set '
        '`HSA_OVERRIDE_GFX_VERSION` to a compatible listed arch (e.g. 11.0.0 for gfx1101/1102).',
)

TORCH004 = Code(
    AREA, "TORCH004", Severity.WARNING, "torch's HIP version differs from the system ROCm",
    why="A ROCm torch wheel bundles its own ROCm libraries (hipBLAS(Lt), MIOpen, RCCL), so torch itself runs "
        "whatever /opt/rocm holds. The mismatch matters for extensions built against /opt/rocm and loaded into "
        "this torch: bitsandbytes built from source, flash-attn, apex, DeepSpeed's JIT ops. They can fail to "
        "load or pick the wrong library. It is a warning when such an extension is installed, else info.",
    fix="Build the extensions against the ROCm torch was built for (or install the torch wheel for the "
        "system ROCm).",
)

TORCH005 = Code(
    AREA, "TORCH005", Severity.ERROR, 'torchvision/torchaudio built for another backend than torch',
    why='A CUDA torchaudio beside a ROCm torch (or any mixed pair) fails at import; LLaMA-Factory 0.9.5 '
        'imports torchaudio at start-up.',
    fix='Reinstall torch, torchvision and torchaudio together from the same index URL.',
)

TORCH006 = Code(
    AREA, "TORCH006", Severity.WARNING, 'HSA_OVERRIDE_GFX_VERSION set where it is not needed',
    why='The override makes the runtime load kernels built for another arch. It helps only for archs missing '
        'from the wheel (gfx1101/1102 on old wheels; 9.0.0 for the Vega APUs gfx90c/902/909, which no wheel '
        'ships) and is harmful on RDNA4 and Instinct GPUs. An override equal to the GPU\'s own arch is a no-op.',
    fix='Unset HSA_OVERRIDE_GFX_VERSION.',
)

TORCH007 = Code(
    AREA, "TORCH007", Severity.ERROR, 'GPU device files not accessible',
    why='ROCm needs read/write access to /dev/kfd and /dev/dri/renderD*; without it torch sees no GPU. In '
        'containers they must be passed with `--device`.',
    fix='Add the user to the `render` and `video` groups (log in again), or run the container with '
        '`--device=/dev/kfd --device=/dev/dri`.',
)

TORCH008 = Code(
    AREA, "TORCH008", Severity.WARNING, 'Visible-device variables are incoherent',
    why='ROCR_VISIBLE_DEVICES filters first, then HIP_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES index into what '
        'is left. Contradicting or out-of-range values hide GPUs or crash torch at init.',
    fix='Set one of them (HIP_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES), with indices that exist.',
)

TORCH009 = Code(
    AREA, "TORCH009", Severity.WARNING, "Library version outside LLaMA-Factory's supported range",
    why='LLaMA-Factory checks transformers/peft/trl/accelerate/datasets ranges at start-up and refuses to '
        'run outside them unless DISABLE_VERSION_CHECK=1; outside the range, behaviour is untested.',
    fix='Install the versions in the range shown, or set DISABLE_VERSION_CHECK=1 knowingly.',
)

TORCH010 = Code(
    AREA, "TORCH010", Severity.INFO, 'No GPU visible; CPU-only environment',
    why='torch sees no GPU and no AMD or NVIDIA GPU was found on the machine. Training runs on the CPU.',
    fix='Nothing to do on a CPU machine; on a GPU machine see TORCH002/TORCH007.',
)

CODES = (TORCH000, TORCH001, TORCH002, TORCH003, TORCH004, TORCH005, TORCH006, TORCH007, TORCH008, TORCH009, TORCH010)


def _probes(ctx: Context) -> list[ProbeSpec]:
    return [ProbeSpec("torch", "doctor.probes.torch_env", "probe_torch", timeout=ctx.options.timeout, cache="nogpu"),
            # in the stack worker, not the device one: llamafactory imports torchvision/torchaudio there
            # anyway, and on the H200 these imports (7 s) otherwise serialise with the GPU probes
            ProbeSpec("companions", "doctor.probes.torch_env", "probe_companions", timeout=60, group="stack",
                      cache="pure"),
            ProbeSpec("libs", "doctor.probes.torch_env", "probe_libs", {"names": list(PACKAGES)}, timeout=30,
                      group="stack", cache="pure")]


# ---------------------------------------------------------------- pure verdict logic

_GENERIC = {
    "gfx9-generic": {"gfx900", "gfx902", "gfx904", "gfx906", "gfx909", "gfx90c"},
    "gfx9-4-generic": {"gfx940", "gfx941", "gfx942", "gfx950"},
    "gfx10-1-generic": {"gfx1010", "gfx1011", "gfx1012", "gfx1013"},
    "gfx10-3-generic": {f"gfx103{i}" for i in range(7)},
    "gfx11-generic": {"gfx1100", "gfx1101", "gfx1102", "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"},
    "gfx12-generic": {"gfx1200", "gfx1201"},
}


def arch_supported(arch: str, arch_list: list[str]) -> bool:
    """``arch`` in torch's arch list, accepting LLVM's family-generic targets (gfx11-generic ...)."""
    if arch in arch_list:
        return True
    return any(arch in _GENERIC.get(a, ()) for a in arch_list)


def override_to_arch(value: str) -> str | None:
    """HSA_OVERRIDE_GFX_VERSION ``major.minor.stepping`` → gfx name (stepping in hex: 9.0.10 = gfx90a)."""
    m = re.fullmatch(r"\s*(\d+)\.(\d+)\.(\d+)\s*", value or "")
    if not m:
        return None
    return f"gfx{int(m.group(1))}{int(m.group(2))}{int(m.group(3)):x}"


def _backend(info: dict[str, Any]) -> str:
    if info.get("hip"):
        return "rocm"
    if info.get("cuda"):
        return "cuda"
    return "cpu"


def _wheel_tag(ver: str) -> str | None:
    m = re.search(r"\+(rocm|cu|cpu)", ver or "")
    return {"rocm": "rocm", "cu": "cuda", "cpu": "cpu"}[m.group(1)] if m else None


def judge_visible_devices(env: dict[str, str], n_system: int, backend: str) -> list[Finding]:
    out = []
    rocr = parse_visible(env.get("ROCR_VISIBLE_DEVICES"))
    hip = parse_visible(env.get("HIP_VISIBLE_DEVICES"))
    cuda = parse_visible(env.get("CUDA_VISIBLE_DEVICES"))
    ev = {k: env[k] for k in ("ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if k in env}
    if backend == "rocm" or (backend != "cuda" and (rocr is not None or hip is not None)):
        if rocr is not None and hip is not None and len(hip) > len(rocr):
            out.append(TORCH008.finding("HIP_VISIBLE_DEVICES lists more GPUs than ROCR_VISIBLE_DEVICES",
                            "ROCR filters first; torch raises `HIP_VISIBLE_DEVICES contains more devices than "
                            "ROCR_VISIBLE_DEVICES` at init.", **ev))
        if hip is not None and cuda is not None and hip != cuda:
            out.append(TORCH008.finding("HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES disagree",
                            "On ROCm HIP_VISIBLE_DEVICES wins; the CUDA_VISIBLE_DEVICES value is ignored, "
                            "which is rarely what was meant.", **ev))
    for name, vals in (("ROCR_VISIBLE_DEVICES", rocr), ("HIP_VISIBLE_DEVICES", hip), ("CUDA_VISIBLE_DEVICES", cuda)):
        if vals is None:
            continue
        if vals == [] or vals == ["-1"]:
            if n_system:
                out.append(TORCH008.finding(f"{name} hides every GPU",
                                f"{name}={env.get(name)!r} leaves torch no GPU although {n_system} exist.", **ev))
            continue
        if n_system:
            bad = [v for v in vals if v.isdigit() and int(v) >= n_system]
            if bad:
                out.append(TORCH008.finding(f"{name} names GPUs that do not exist",
                                f"{name}={env.get(name)!r} but the machine has {n_system} GPU(s) "
                                f"(indices 0..{n_system - 1}); index {', '.join(bad)} is out of range.", **ev))
    return out


INSTINCT = archs.INSTINCT
# extensions that are built against /opt/rocm rather than shipped inside the torch wheel
EXTENSIONS = ("flash_attn", "bitsandbytes", "deepspeed", "apex")


def judge_hsa_override(env: dict[str, str], real_archs: list[str], arch_list: list[str]) -> list[Finding]:
    val = env.get("HSA_OVERRIDE_GFX_VERSION")
    if not val:
        return []
    target = override_to_arch(val)
    ev = {"HSA_OVERRIDE_GFX_VERSION": val, "override_arch": target, "real_archs": real_archs}
    if target is None:
        return [TORCH006.finding(f"HSA_OVERRIDE_GFX_VERSION={val!r} is malformed",
                     "The value must be major.minor.stepping, e.g. 11.0.0.", **ev)]
    if all(a == target for a in real_archs) and real_archs:
        return []  # the GPU's own arch: a no-op (11.0.0 on a gfx1100)
    natives = [a for a in real_archs if arch_list and arch_supported(a, arch_list)]
    # Instinct (CDNA) and RDNA4 get only harm from it; the Vega APUs (gfx90c/902/909) have no kernels in any
    # wheel and 9.0.0 (gfx900) is the workaround AMD staff recommend for them (ROCm/rocBLAS#1398)
    harmful = [a for a in real_archs if a.startswith("gfx12") or a in INSTINCT]
    if harmful:
        return [TORCH006.finding(f"HSA_OVERRIDE_GFX_VERSION={val} on {', '.join(sorted(set(harmful)))}",
                     "The override is harmful on RDNA4 and Instinct GPUs: it loads kernels built for "
                     f"{target} on a GPU that is not one.", **ev)]
    if natives and len(natives) == len(real_archs):
        return [TORCH006.finding(f"HSA_OVERRIDE_GFX_VERSION={val} but the wheel supports your GPU",
                     f"torch already ships kernels for {', '.join(sorted(set(natives)))}; the override "
                     f"makes it run {target} kernels instead.", **ev)]
    return []


def judge(info: dict[str, Any] | None, companions: dict[str, Any] | None, sysf: dict[str, Any],
          env: dict[str, str], libs: dict[str, Any] | None = None,
          ranges: dict[str, str] | None = None) -> list[Finding]:
    """All torch-build verdicts from probe data and system facts (pure: tested on recorded data)."""
    out: list[Finding] = []
    backend = _backend(info or {})
    sys_gpus = sysf.get("gpus") or []
    amd = [g for g in sys_gpus if g.get("vendor") == "amd"] or (
        [{"arch": a} for a in sysf.get("kfd_archs") or []])
    nvidia = [g for g in sys_gpus if g.get("vendor") == "nvidia"]
    real_archs = [g.get("arch") for g in amd if g.get("arch")] or list(sysf.get("kfd_archs") or [])
    if info is not None:
        ev = {"torch": info.get("version"), "hip": info.get("hip"), "cuda": info.get("cuda"),
              "arch_list": info.get("arch_list"), "devices": info.get("devices")}
        if amd and backend != "rocm":
            out.append(TORCH002.finding(f"{backend.upper()} torch {info.get('version')} on a machine with "
                            f"{len(amd)} AMD GPU(s)",
                            "This wheel cannot use AMD GPUs; training would run on the CPU (or fail).", **ev))
        if nvidia and backend == "rocm":
            out.append(TORCH002.finding("ROCm torch on a machine with NVIDIA GPUs",
                            "A ROCm wheel cannot use NVIDIA GPUs.", **ev))
        if info.get("init_error"):
            out.append(TORCH008.finding("torch fails to initialise the GPUs", info["init_error"], **ev))
        if backend == "rocm":
            bad = [d for d in info.get("devices", []) if not arch_supported(d["arch"], info.get("arch_list") or [])]
            for d in bad:
                out.append(TORCH003.finding(f"GPU {d['index']} ({d['name']}, {d['arch']}) is not in torch's "
                                f"arch list", f"torch.cuda.get_arch_list() = {info.get('arch_list')}", **ev))
            # kernels missing although the device is not even enumerated: compare with system archs
            if not info.get("devices") and real_archs and info.get("arch_list"):
                for a in sorted(set(real_archs)):
                    if not arch_supported(a, info["arch_list"]) and not env.get("HSA_OVERRIDE_GFX_VERSION"):
                        out.append(TORCH003.finding(f"System GPU arch {a} is not in torch's arch list",
                                        f"torch.cuda.get_arch_list() = {info['arch_list']}", **ev))
            sys_rocm = sysf.get("rocm_version")
            if sys_rocm and info.get("hip"):
                th = ".".join(info["hip"].split(".")[:2])
                sr = ".".join(str(sys_rocm).split(".")[:2])
                if th != sr:
                    built = [p for p in EXTENSIONS if (libs or {}).get(p)]
                    out.append(TORCH004.finding(
                        f"torch built for HIP {th}, system ROCm is {sr}"
                        + (f"; {', '.join(built)} may be built against the system's" if built else ""),
                        f"torch.version.hip = {info['hip']}; system ROCm {sys_rocm} (from "
                        f"{sysf.get('rocm_version_source')}). The wheel carries its own ROCm libraries; "
                        + (f"{', '.join(built)} load code built against /opt/rocm into it." if built else
                           "no extension built against /opt/rocm is installed, so nothing here depends on it.")
                        + " TheRock-based ROCm 7.x reports a higher HIP version than the release number.",
                        severity=None if built else Severity.INFO, torch_hip=info["hip"], system_rocm=sys_rocm,
                        extensions=built))
        # companion wheels
        for name, c in (companions or {}).items():
            if not c:
                continue
            tag, ttag = _wheel_tag(c.get("version", "")), _wheel_tag(info.get("version", ""))
            mismatch = tag and ttag and tag != ttag
            if mismatch or c.get("import_ok") is False:
                out.append(TORCH005.finding(f"{name} {c.get('version')} does not match torch {info.get('version')}",
                                c.get("error") or f"{name} is a {tag} build, torch a {ttag} build.",
                                **{name: c, "torch": info.get("version")}))
        out += judge_hsa_override(env, real_archs, info.get("arch_list") or [])
        n_devices = len(info.get("devices") or [])
        if not n_devices and not amd and not nvidia and not out:
            out.append(TORCH010.finding(f"torch {info.get('version')} ({backend}); no GPU on this machine",
                            "Training would run on the CPU.", **ev))
    out += judge_visible_devices(env, len(amd) or len(nvidia), backend)
    # device files (ROCm only)
    dev = sysf.get("devices") or {}
    if amd or backend == "rocm" or sysf.get("amdgpu_module"):
        if not dev.get("kfd_exists"):
            out.append(TORCH007.finding("/dev/kfd does not exist",
                            "The amdgpu kernel driver is not loaded, or the container was started without "
                            "--device=/dev/kfd.", **dev))
        elif dev.get("kfd_rw") is False or (dev.get("render_nodes") and dev.get("render_rw") == []):
            # (None: a recorded tree, where who may open the devices is unknown)
            missing = [g for g in ("render", "video") if g not in (dev.get("groups") or [])]
            out.append(TORCH007.finding("No read/write access to /dev/kfd or /dev/dri/renderD*",
                            f"Your groups: {', '.join(dev.get('groups') or []) or 'none'}"
                            + (f"; missing {', '.join(missing)}" if missing else ""), **dev))
    # library ranges (LLaMA-Factory's own check_dependencies pins)
    if libs and ranges and not env_flag(env, "DISABLE_VERSION_CHECK"):
        for pkg, spec in ranges.items():
            ver = libs.get(pkg)
            if ver and not version_in(ver, spec):
                out.append(TORCH009.finding(f"{pkg} {ver} outside LLaMA-Factory's range {spec}",
                                f"llamafactory {libs.get('llamafactory')} requires {pkg}{spec} at start-up.",
                                package=pkg, version=ver, required=spec))
    if info is not None and n_devices:
        devs = ", ".join(f"{d['arch']}" for d in info["devices"])
        with_all_good(out, TORCH000, f"torch {info['version']} ({backend}) runs on {n_devices} GPU(s): {devs}",
                      f"arch list: {info.get('arch_list')}", torch=info.get("version"), blas=info.get("blas"))
    return out


def _vtuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:3])


def version_in(ver: str, spec: str) -> bool:
    """Minimal PEP 440 range test for ``>=a,<=b,!=c`` pins (packaging is not a doctor dependency)."""
    v = _vtuple(ver)
    for part in spec.split(","):
        m = re.match(r"\s*(>=|<=|==|!=|<|>)\s*([\w.]+)", part)
        if not m:
            continue
        op, ref = m.group(1), _vtuple(m.group(2))
        n = max(len(v), len(ref))
        a, b = v + (0,) * (n - len(v)), ref + (0,) * (n - len(ref))
        ok = {">=": a >= b, "<=": a <= b, "==": a == b, "!=": a != b, "<": a < b, ">": a > b}[op]
        if not ok:
            return False
    return True


# ---------------------------------------------------------------- the check


def dependency_ranges(ctx: Context, libs: dict[str, Any] | None) -> dict[str, str] | None:
    """LLaMA-Factory's own version pins, from a schema of the installed llamafactory version only (the
    bundled 0.9.5 pins say nothing about another release)."""
    schema, _ = ctx.lf_schema()
    if not schema or not libs or schema.get("llamafactory") != libs.get("llamafactory"):
        return None
    return schema.get("dependency_ranges")


@check(AREA, probes=_probes, order=10)
def torch_build(ctx: Context) -> list[Finding]:
    res = ctx.probes.get("torch")
    sysf = ctx.system()
    if res is None or not res.ok:
        if res is not None and res.status in ("import_error", "error", "crashed", "timeout", "not_run"):
            what = {"crashed": "crashes the interpreter", "timeout": "hangs",
                    "not_run": "cannot even start"}.get(res.status, "fails")
            return [TORCH001.finding(f"`import torch` {what} in {ctx.python}", res.error, **res.evidence())]
        return probe_failure(res, AREA)
    comp = ctx.probes.get("companions")
    libs_res = ctx.probes.get("libs")
    libs = libs_res.data if libs_res is not None and libs_res.ok else None
    return judge(res.data, comp.data if comp and comp.ok else None, sysf, ctx.env, libs,
                 dependency_ranges(ctx, libs))
