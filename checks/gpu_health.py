"""Active GPU health in ``check``: BF16 matrix cores, attention kernels, bitsandbytes 4-bit.

The probes (``checks.gpu_probes``) run in the device worker, sized from the config's model; the
verdicts here are pure functions of their results, tested with injected faults on the CPU.
"""

from __future__ import annotations

from typing import Any

from checks import archs
from doctor.context import Context
from doctor.findings import Finding, Severity, make
from doctor.runner import check, probe_failure
from doctor.worker import ProbeSpec

SLOW_FRACTION = 0.25  # below this fraction of the SKU's peak the BLAS path is suspect


def _precision(ctx: Context) -> str:
    if ctx.cfg("fp16"):
        return "float16"
    return "bfloat16"


def _shape(ctx: Context) -> dict[str, int]:
    mc = ctx.model_config() or {}
    heads = int(mc.get("num_attention_heads") or 32)
    kv = int(mc.get("num_key_value_heads") or heads)
    hd = int(mc.get("head_dim") or (int(mc.get("hidden_size") or 4096) // heads))
    return {"heads": heads, "kv_heads": kv, "head_dim": hd}


def _probe_data(ctx: Context, name: str, area: str) -> tuple[dict[str, Any] | None, list[Finding]]:
    """(probe data, failure findings). Without a working torch there is nothing to add: the torch
    check already explains why, so both are empty."""
    t = ctx.probes.get("torch")
    if t is None or not t.ok:
        return None, []
    res = ctx.probes.get(name)
    if res is None or not res.ok:
        return None, probe_failure(res, area)
    return res.data, []


# ---------------------------------------------------------------- BF16

def judge_bf16(data: dict[str, Any], arch: str | None, bf16_requested: bool,
               precision: str | None = None, use_cpu: bool = False) -> list[Finding]:
    out: list[Finding] = []
    A = "bf16"
    if precision and data.get("device") == "cpu" and not use_cpu:
        out.append(make("BF16005", A, f"`{precision}: true` but torch sees no GPU",
                        "transformers stops with `Your setup doesn't support bf16/gpu. You need to assign use_cpu "
                        "if you want to train the model on CPU.` (fp16: `fp16 mixed precision requires a GPU`).",
                        precision=precision))
    if bf16_requested and archs.has_bf16_matrix(arch) is False:
        out.append(make("BF16001", A, f"`bf16: true` on {arch}, which has no BF16 matrix cores",
                        "torch.cuda.is_bf16_supported() says True on every ROCm GPU; this one emulates bf16.",
                        arch=arch))
    if data.get("nonfinite") or data.get("rel_err", 0) > 1e-2:
        out.append(make("BF16002", A, f"bf16 GEMM error {data.get('rel_err'):.2e} vs fp32 reference"
                        + (" (NaN/Inf)" if data.get("nonfinite") else ""), "Expected below 1e-2.", **data))
    if data.get("device") == "cpu":
        if not out:
            out.append(make("BF16004", A, f"bf16 numerics ok on the CPU (rel err {data['rel_err']:.1e})", "", **data))
        return out
    peak, verified = archs.peak_for(data.get("name"))
    frac = data["tflops"] / peak if peak else None
    ev = dict(data, peak_tflops=peak, peak_verified=verified, fraction_of_peak=round(frac, 3) if frac else None)
    if frac is not None and frac < SLOW_FRACTION:
        out.append(make("BF16003", A, f"bf16 GEMM {data['tflops']} TFLOP/s = {frac:.0%} of {data.get('name')}'s "
                        f"{peak} peak", f"BLAS backend: {data.get('blas')}.", **ev))
    if not out:
        pct = f", {frac:.0%} of peak {peak}{'' if verified else ' (unverified)'}" if frac else ""
        out.append(make("BF16000", A, f"bf16 GEMM n={data['n']}: {data['tflops']} TFLOP/s{pct}, "
                        f"rel err {data['rel_err']:.1e}", "", **ev))
    return out


def _bf16_probes(ctx: Context) -> list[ProbeSpec]:
    return [ProbeSpec("bf16", "checks.gpu_probes", "probe_bf16", timeout=min(60, ctx.options.timeout))]


@check("bf16", probes=_bf16_probes, order=40)
def bf16(ctx: Context) -> list[Finding]:
    data, fails = _probe_data(ctx, "bf16", "bf16")
    if data is None:
        return fails
    arch = (ctx.probes["torch"].data.get("devices") or [{}])[0].get("arch")
    precision = next((k for k in ("bf16", "pure_bf16", "fp16") if ctx.cfg(k) is True), None)
    return judge_bf16(data, arch, bool(ctx.cfg("bf16") or ctx.cfg("pure_bf16")), precision,
                      bool(ctx.cfg("use_cpu")))


# ---------------------------------------------------------------- attention

def lf_attention(choice: dict[str, Any] | None, gpu_visible: bool) -> dict[str, Any] | None:
    """What LLaMA-Factory will ask transformers for, from ``probe_attn_choice`` (its own code):
    ``impl`` (sdpa / eager / flash_attention_2 / a hub kernel / error: ...) and whether it is
    transformers' default rather than an explicit request."""
    if not choice or choice.get("error"):
        return None
    fa2 = bool(choice.get("fa2_gate")) and gpu_visible
    impl = choice.get("with_fa2") if fa2 else choice.get("without_fa2")
    default = impl == "default"
    if default:
        impl = "eager" if choice.get("supports_sdpa") is False else "sdpa"
    return {"impl": impl, "default": default}


def _ck_note(data: dict[str, Any], arch: str | None, head_dim: int | None) -> str:
    """Why a CK flash-attn build fails on this GPU, where the facts say so."""
    if data.get("flash_attn_backend") != "ck":
        return ""
    notes = []
    ok = archs.fa_ck_archs(data.get("flash_attn_version"))
    if arch and arch not in ok:
        notes.append(f"flash-attn {data.get('flash_attn_version')}'s CK backend is built for {', '.join(sorted(ok))}, "
                     f"not {arch}: rebuild with FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE (Triton backend, CDNA and RDNA)")
    if head_dim and head_dim > archs.FA_CK_MAX_HEAD_DIM:
        notes.append(f"CK supports head_dim ≤ {archs.FA_CK_MAX_HEAD_DIM}; this model has {head_dim}")
    return "; ".join(notes)


def judge_attention(data: dict[str, Any] | None, flash_cfg: str, cutoff_len: int, env: dict[str, str],
                    arch: str | None, hip: bool, choice: dict[str, Any] | None = None,
                    gpu_visible: bool = True, head_dim: int | None = None) -> list[Finding]:
    A = "attention"
    out: list[Finding] = []
    v = env.get("FLASH_ATTENTION_TRITON_AMD_ENABLE")
    if v is not None and v != "TRUE" and v.lower() in ("1", "true", "yes", "on"):
        out.append(make("ATTN004", A, f"FLASH_ATTENTION_TRITON_AMD_ENABLE={v!r} is ignored",
                        "flash-attn compares the value with the exact string `TRUE`.", value=v))
    if hip and arch in archs.AOTRITON_EXPERIMENTAL and env.get("TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", "") \
            not in ("1", "TRUE", "true", "ON", "on"):
        out.append(make("ATTN006", A, f"{arch}: SDPA flash/mem-efficient kernels are experimental and off",
                        "PyTorch disables them on this arch without TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1.",
                        arch=arch))
    lf = lf_attention(choice, gpu_visible)
    impl = lf["impl"] if lf else None
    if impl and impl.startswith("error:"):
        out.append(make("ATTN007", A, f"LLaMA-Factory cannot set up `flash_attn: {flash_cfg}` for "
                        f"{(choice or {}).get('model_type') or 'this model'}", impl[len("error:"):].strip(),
                        choice=choice))
    if data is None:
        return out
    fa = data.get("flash_attn") or {}
    backends = data.get("backends") or {}
    fa2_used = impl == "flash_attention_2" if impl else (flash_cfg == "fa2" and fa.get("status") != "not_installed")
    fa_label = f"flash-attn {data.get('flash_attn_version', '')}" + (
        f" ({data['flash_attn_backend']})" if data.get("flash_attn_backend") else "")
    if fa2_used and fa.get("status") in ("error", "wrong"):
        why = "" if flash_cfg == "fa2" else f" (LLaMA-Factory picks FlashAttention-2 for this model with `flash_attn: {flash_cfg}`)"
        detail = fa.get("error") or f"forward error {fa.get('fwd_err')} vs baseline {data.get('baseline_fwd')}"
        note = _ck_note(data, arch, head_dim)  # empty unless the ROCm CK backend is in use
        out.append(make("ATTN001", A, f"FlashAttention-2 will be used but {fa_label} is "
                        f"{'wrong' if fa['status'] == 'wrong' else 'broken'}{why}",
                        detail + (f"\n{note}." if note else ""), flash_attn=fa, version=data.get("flash_attn_version"),
                        backend=data.get("flash_attn_backend")))
    elif flash_cfg == "fa2" and not fa2_used:
        if fa.get("status") == "not_installed":
            title, why = "flash_attn: fa2 but flash-attn is not installed", "not installed"
        elif not gpu_visible:
            title, why = "flash_attn: fa2 but no GPU is visible", "no GPU"
        else:
            title = f"flash_attn: fa2 but transformers will not use {fa_label}"
            why = "transformers' is_flash_attn_2_available() is False (flash-attn too old for it, or not the flash-attn package)"
        out.append(make("ATTN005", A, title, f"LLaMA-Factory warns `FlashAttention-2 is not installed.` and uses "
                        f"{impl or 'the default attention'} instead ({why}).", lf_attn_implementation=impl))
    sdpa_used = impl == "sdpa" if impl else flash_cfg in ("auto", "sdpa", "fa2")
    if sdpa_used:
        for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"):
            b = backends.get(name) or {}
            if b.get("status") in ("wrong", "error"):
                out.append(make("ATTN002", A, f"SDPA {name} backend {'gives wrong results' if b['status'] == 'wrong' else 'fails'}",
                                b.get("error") or f"fwd err {b.get('fwd_err')} (baseline {data.get('baseline_fwd')}), "
                                f"grad err {b.get('grad_err')}", backend=name, result=b))
        fused = [n for n in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")
                 if (backends.get(n) or {}).get("status") == "ok"]
        if data.get("device") == "cuda" and not fused and cutoff_len >= 4096:
            out.append(make("ATTN003", A, f"Only the math SDPA kernel works; cutoff_len {cutoff_len}",
                            "The math kernel materialises the seq×seq score matrix per head.",
                            cutoff_len=cutoff_len, backends=backends))
    if not [f for f in out if f.severity in (Severity.ERROR, Severity.WARNING)]:
        ok = [n for n, b in backends.items() if b.get("status") == "ok"]
        uses = ""
        if impl:
            uses = f"LLaMA-Factory will use {impl}" + (" (transformers' default)" if lf and lf["default"] else "") + "; "
        out.append(make("ATTN000", A, f"attention ({flash_cfg}): {uses}SDPA backends ok: {', '.join(ok) or 'none'}"
                        + (f"; {fa_label.strip()} {fa.get('status')}" if fa.get("status") not in (None, "not_installed")
                           else "; flash-attn not installed" if fa else ""),
                        "", shape=data.get("shape"), backends=backends, flash_attn=fa,
                        flash_attn_backend=data.get("flash_attn_backend"), lf_attn_implementation=impl))
    return out


def _attn_probes(ctx: Context) -> list[ProbeSpec]:
    specs = [ProbeSpec("attention", "checks.gpu_probes", "probe_attention",
                       dict(_shape(ctx), dtype=_precision(ctx)), timeout=min(90, ctx.options.timeout))]
    if ctx.config is not None:
        mc = ctx.model_config() or {}
        specs.append(ProbeSpec("attn_choice", "checks.lf_probes", "probe_attn_choice",
                               {"flash_attn": str(ctx.cfg("flash_attn", "auto")).lower(),
                                "model_type": mc.get("model_type"), "architectures": mc.get("architectures")},
                               timeout=ctx.options.timeout, group="stack"))
    return specs


@check("attention", probes=_attn_probes, order=41)
def attention(ctx: Context) -> list[Finding]:
    data, fails = _probe_data(ctx, "attention", "attention")
    if data is None and not fails:
        return []  # no torch
    t = ctx.probes["torch"].data
    arch = (t.get("devices") or [{}])[0].get("arch")
    flash_cfg = str(ctx.cfg("flash_attn", "auto")).lower() if ctx.config else "auto"
    ch = ctx.probes.get("attn_choice")
    choice = ch.data if ch is not None and ch.ok else None  # no llamafactory: the config lint says so
    return fails + judge_attention(data, flash_cfg, int(ctx.cfg("cutoff_len", 2048) or 2048), ctx.env, arch,
                                   bool(t.get("hip")), choice, bool(t.get("devices")), _shape(ctx)["head_dim"])


# ---------------------------------------------------------------- bitsandbytes

def judge_bnb(data: dict[str, Any], qbit: Any, qmethod: str, model_cfg: dict[str, Any] | None,
              torch_hip: str | None) -> list[Finding]:
    A = "bitsandbytes"
    out: list[Finding] = []
    wants = qbit is not None and qmethod == "bnb"
    qc = (model_cfg or {}).get("quantization_config")
    if qc:
        out.append(make("BNB004", A, f"Model is pre-quantized ({qc.get('quant_method', '?')})",
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
            out.append(make("BNB001", A, f"quantization_bit: {qbit} but bitsandbytes is unusable", broken, **data))
        elif wrong:
            out.append(make("BNB003", A, "bitsandbytes 4-bit gives wrong results", wrong, **data))
        elif data.get("device") == "cpu":
            out.append(make("BNB001", A, f"quantization_bit: {qbit} but no GPU for bitsandbytes",
                            "LLaMA-Factory quantizes on the GPU; on this CPU-only machine QLoRA fails to load.", **data))
    elif data.get("installed") and broken:
        out.append(make("BNB002", A, "bitsandbytes installed but unusable", broken, **data))
    elif wrong:
        out.append(make("BNB003", A, "bitsandbytes 4-bit gives wrong results", wrong, **data))
    lib = data.get("lib_path") or ""
    if torch_hip and "rocm" in lib:
        want = "rocm" + "".join(torch_hip.split(".")[:2])
        if want not in lib:
            out.append(make("BNB005", A, f"bitsandbytes loaded {lib.rsplit('/', 1)[-1]}, torch wants {want}",
                            f"torch.version.hip = {torch_hip}", lib_path=lib))
    if not [f for f in out if f.severity in (Severity.ERROR, Severity.WARNING)] and data.get("nf4_rel_err") is not None:
        out.append(make("BNB000", A, f"bitsandbytes {data.get('version')}: NF4 rel err {data['nf4_rel_err']:.3f}, "
                        f"Linear4bit rel err {data.get('linear4bit_rel_err', 0):.1e}", "", **data))
    return out


def _bnb_probes(ctx: Context) -> list[ProbeSpec]:
    # its own worker, in parallel with the device one: importing bitsandbytes took 4.9 s on the H200,
    # serialised after the bf16 and attention probes it made the GPU probes 16 s cold
    return [ProbeSpec("bnb", "checks.gpu_probes", "probe_bnb", timeout=min(90, ctx.options.timeout), group="bnb")]


@check("bitsandbytes", probes=_bnb_probes, order=42)
def bitsandbytes(ctx: Context) -> list[Finding]:
    data, fails = _probe_data(ctx, "bnb", "bitsandbytes")
    if data is None:
        return fails
    return judge_bnb(data, ctx.cfg("quantization_bit"), str(ctx.cfg("quantization_method", "bnb")),
                     ctx.model_config(), ctx.probes["torch"].data.get("hip"))
