"""bitsandbytes 4-bit: the native library really loaded (not its error mock), its ROCm build matches
torch's HIP, and a real NF4 round trip and ``Linear4bit`` forward on the GPU are correct."""

from __future__ import annotations

from typing import Any

from doctor.context import Context
from doctor.findings import Code, Finding, Severity, with_all_good
from doctor.registry import check, probe_data
from doctor.worker import ProbeSpec

AREA = "bitsandbytes"

BNB000 = Code(
    AREA, "BNB000", Severity.OK, 'bitsandbytes 4-bit works',
    why='The native library loaded and an NF4 round trip and Linear4bit forward are correct.',
    fix='Nothing to do.',
)

BNB001 = Code(
    AREA, "BNB001", Severity.ERROR, 'QLoRA requested but bitsandbytes is unusable',
    why='`quantization_bit` needs a bitsandbytes whose GPU library loads; on ROCm the PyPI wheel ships ROCm '
        'binaries only from 0.49.0, and import succeeds even when the library failed to load.',
    fix='Fall back to 16-bit LoRA, or install bitsandbytes>=0.49 for your ROCm.',
    playbook='qlora-to-lora', autofix=True,
)

BNB002 = Code(
    AREA, "BNB002", Severity.WARNING, 'bitsandbytes installed but its GPU library did not load',
    why='Import succeeds with an error mock; the first 4-bit op would fail.',
    fix='Install bitsandbytes>=0.49 (ROCm binaries) or build it with -DCOMPUTE_BACKEND=hip.',
)

BNB003 = Code(
    AREA, "BNB003", Severity.ERROR, 'bitsandbytes 4-bit gives wrong results',
    why='NF4 quantize/dequantize or a Linear4bit forward differs from the reference (bitsandbytes #2087: '
        'silently wrong on a prebuilt ROCm wheel).',
    fix='Fall back to 16-bit LoRA.',
    playbook='qlora-to-lora', autofix=True,
)

BNB004 = Code(
    AREA, "BNB004", Severity.INFO, 'Pre-quantized checkpoint',
    why="The model's config.json has a quantization_config: LLaMA-Factory takes the PTQ path and ignores "
        'quantization_bit; it cannot be un-quantized by a config change.',
    fix='To train 16-bit LoRA, point model_name_or_path at the unquantized base model.',
)

BNB005 = Code(
    AREA, "BNB005", Severity.WARNING, "bitsandbytes ROCm library version differs from torch's HIP",
    why='bitsandbytes loads libbitsandbytes_rocmXY.so named after torch.version.hip; a different one is a '
        'fallback that may not match.',
    fix="Install the bitsandbytes build for torch's ROCm, or set BNB_ROCM_VERSION.",
)

BNB006 = Code(
    AREA, "BNB006", Severity.ERROR, "Pre-quantized bnb-4bit checkpoint on a wave64 Instinct GPU needs bitsandbytes >= 0.49.2",
    why="Pre-quantized bitsandbytes 4-bit checkpoints (the Hub's `-bnb-4bit` models) are quantized with blocksize "
        "64. On ROCm, bitsandbytes before 0.49 hard-codes blocksize 128 (`blocksize = 64 if not HIP_ENVIRONMENT else "
        "128` in Params4bit), and 0.49.0/0.49.1 support 64 only on wave32 GPUs (RDNA); on wave64 Instinct GPUs "
        "(gfx90a/gfx942/gfx950: `ROCM_WARP_SIZE_64`) such checkpoints load only from 0.49.2 on. Source: Unsloth's "
        "own gate for this (unsloth/device_type.py: ALLOW_PREQUANTIZED_MODELS) and bitsandbytes' cextension.py.",
    fix="`pip install 'bitsandbytes>=0.49.2'`, or train from the unquantized checkpoint with `quantization_bit: 4`.",
)

CODES = (BNB000, BNB001, BNB002, BNB003, BNB004, BNB005, BNB006)


WAVE64 = ("gfx90", "gfx94", "gfx95")  # CDNA Instinct parts run wave64 (gfx908/90a/942/950)


def _ver(v: Any) -> tuple[int, ...]:
    import re

    return tuple(int(x) for x in re.findall(r"\d+", str(v or ""))[:3])


def judge_prequantized(qc: dict[str, Any] | None, version: Any, torch_hip: str | None,
                       archs: list[str]) -> list[Finding]:
    """A pre-quantized bnb-4bit checkpoint on a wave64 Instinct GPU with a bitsandbytes that cannot load it."""
    if not qc or str(qc.get("quant_method", "")).lower() != "bitsandbytes" or not qc.get("load_in_4bit", True):
        return []
    wave64 = sorted({a for a in archs if a.startswith(WAVE64)})
    if not torch_hip or not wave64 or not version or _ver(version) >= (0, 49, 2):
        return []
    return [BNB006.finding(f"bitsandbytes {version} cannot load this pre-quantized 4-bit checkpoint on "
                           f"{', '.join(wave64)}", "The checkpoint's blocksize is 64; this GPU runs wave64.",
                           version=version, archs=wave64)]


def judge_bnb(data: dict[str, Any], qbit: Any, qmethod: str, model_cfg: dict[str, Any] | None,
              torch_hip: str | None, archs: list[str] | None = None) -> list[Finding]:
    out: list[Finding] = []
    wants = qbit is not None and qmethod == "bnb"
    qc = (model_cfg or {}).get("quantization_config")
    out += judge_prequantized(qc, data.get("version"), torch_hip, archs or [])
    if qc:
        out.append(BNB004.finding(f"Model is pre-quantized ({qc.get('quant_method', '?')})",
                        "quantization_bit is ignored for it; qlora-to-lora cannot un-quantize it.", quantization_config=qc))
    broken = None
    if not data.get("installed"):
        broken = "bitsandbytes is not installed"
    elif data.get("import_error"):
        broken = data["import_error"]
    elif data.get("lib_mock") or (data.get("device") == "cuda" and not data.get("compiled_with_cuda")):
        broken = f"native library not loaded (lib = {data.get('lib_class')}, backend {data.get('backend')})"
    elif data.get("op_error"):
        broken = data["op_error"]
    wrong = None
    if data.get("nf4_rel_err") is not None and (data["nf4_rel_err"] > 0.2 or data.get("linear4bit_rel_err", 0) > 0.02
                                                or data.get("linear4bit_finite") is False):
        wrong = f"NF4 round trip rel err {data['nf4_rel_err']:.3f}, Linear4bit rel err {data.get('linear4bit_rel_err')}"
    if wants and not qc:
        if broken:
            out.append(BNB001.finding(f"quantization_bit: {qbit} but bitsandbytes is unusable", broken, **data))
        elif wrong:
            out.append(BNB003.finding("bitsandbytes 4-bit gives wrong results", wrong, **data))
        elif data.get("device") == "cpu":
            out.append(BNB001.finding(f"quantization_bit: {qbit} but no GPU for bitsandbytes",
                            "LLaMA-Factory quantizes on the GPU; on this CPU-only machine QLoRA fails to load.", **data))
    elif data.get("installed") and broken:
        out.append(BNB002.finding("bitsandbytes installed but unusable", broken, **data))
    elif wrong:
        out.append(BNB003.finding("bitsandbytes 4-bit gives wrong results", wrong, **data))
    lib = data.get("lib_path") or ""
    if torch_hip and "rocm" in lib:
        want = "rocm" + "".join(torch_hip.split(".")[:2])
        if want not in lib:
            out.append(BNB005.finding(f"bitsandbytes loaded {lib.rsplit('/', 1)[-1]}, torch wants {want}",
                            f"torch.version.hip = {torch_hip}", lib_path=lib))
    if data.get("nf4_rel_err") is not None:
        with_all_good(out, BNB000, f"bitsandbytes {data.get('version')}: NF4 rel err {data['nf4_rel_err']:.3f}, "
                      f"Linear4bit rel err {data.get('linear4bit_rel_err', 0):.1e}", **data)
    return out


def _probes(ctx: Context) -> list[ProbeSpec]:
    # its own worker, in parallel with the device one: importing bitsandbytes took 4.9 s on the H200,
    # serialised after the bf16 and attention probes it made the GPU probes 16 s cold
    return [ProbeSpec("bnb", "doctor.probes.kernels", "probe_bnb", timeout=min(90, ctx.options.timeout), group="bnb",
                      cache="nogpu")]


@check(AREA, probes=_probes, needs=("torch",), order=42)
def bitsandbytes(ctx: Context) -> list[Finding]:
    data, fails = probe_data(ctx, "bnb", AREA)
    if data is None:
        return fails
    t = ctx.probes["torch"].data
    return judge_bnb(data, ctx.cfg("quantization_bit"), str(ctx.cfg("quantization_method", "bnb")),
                     ctx.model_config(), t.get("hip"), [d.get("arch") or "" for d in t.get("devices") or []])
