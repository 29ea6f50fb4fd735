"""Attention kernels: what LLaMA-Factory will really use for the config's ``flash_attn`` and model
(its own ``configure_attn_implementation``, run in the stack worker), and forward + backward of every
SDPA backend and of flash-attn at the model's shape against an fp32 reference."""

from __future__ import annotations

from typing import Any

from doctor import archs
from doctor.context import Context
from doctor.findings import Code, Finding, Severity, with_all_good
from doctor.registry import check, probe_data
from doctor.worker import ProbeSpec

AREA = "attention"

ATTN000 = Code(
    AREA, "ATTN000", Severity.OK, 'Attention kernels healthy',
    why='The attention implementation LLaMA-Factory will use ran forward and backward within tolerance.',
    fix='Nothing to do.',
)

ATTN001 = Code(
    AREA, "ATTN001", Severity.ERROR, 'FlashAttention-2 will be used with a broken flash-attn',
    why="transformers' FlashAttention-2 gate only looks at the installed version, never imports the kernels "
        'or checks the arch; a broken or unsupported build (an ABI mismatch after a torch upgrade, a CK '
        'build without this gfx arch, head_dim > 256 on CK) fails at load or computes garbage. LLaMA-Factory '
        'picks FA2 for `flash_attn: fa2`, and by itself for Gemma-2 with `auto`. The detail names the ROCm '
        'backend (CK or Triton) and, for CK, the archs the build supports.',
    fix='Use `flash_attn: sdpa` (or disabled).',
    playbook='disable-flash-attn', autofix=True,
)

ATTN002 = Code(
    AREA, "ATTN002", Severity.ERROR, 'An SDPA backend gives wrong results or crashes',
    why='A fused attention kernel (flash / mem-efficient / AOTriton) differs from the fp32 reference beyond '
        "flash-attn's own tolerance rule, or returns NaN/Inf.",
    fix='Disable it: `flash_attn: disabled` (eager attention).',
    playbook='disable-flash-attn', autofix=True,
)

ATTN003 = Code(
    AREA, "ATTN003", Severity.WARNING, 'Only the math SDPA kernel is available',
    why='Without flash/mem-efficient kernels SDPA falls back to the O(N²)-memory math kernel; with a long '
        'cutoff_len this is an OOM risk.',
    fix='On gfx1100/1201 set TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1, or lower cutoff_len.',
)

ATTN004 = Code(
    AREA, "ATTN004", Severity.WARNING, 'FLASH_ATTENTION_TRITON_AMD_ENABLE has an ignored value',
    why='flash-attn compares it with the exact string `TRUE`; `1` or `true` do nothing.',
    fix='export FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE',
)

ATTN005 = Code(
    AREA, "ATTN005", Severity.INFO, 'flash_attn: fa2 but FlashAttention-2 will not be used',
    why="flash-attn is not installed, no GPU is visible, or transformers' gate rejects the installed "
        'version: LLaMA-Factory warns `FlashAttention-2 is not installed.` and falls back to the default '
        'attention (named in the finding).',
    fix='Set `flash_attn: sdpa` to say what you get.',
)

ATTN006 = Code(
    AREA, "ATTN006", Severity.WARNING, 'Experimental AOTriton arch without the opt-in',
    why="On the archs the AOTriton version torch ships calls experimental, SDPA's flash and mem-efficient "
        "kernels stay off unless TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1, so SDPA falls back to the math "
        "kernel (O(N²) memory). The set depends on the AOTriton version (0.9: gfx950, gfx1201; from 0.10 those "
        "two graduate and RDNA3/3.5 parts such as gfx1101/1102/1103/1150/1200 are experimental), so the verdict "
        "comes from torch's own warning in the attention probe, not from a table.",
    fix='export TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 (exactly 1; the probe checks the kernels are correct).',
)

ATTN007 = Code(
    AREA, "ATTN007", Severity.ERROR, 'LLaMA-Factory cannot set up this flash_attn value for the model',
    why='Its `configure_attn_implementation` raises at model load, e.g. `Unknown attention type: fa3` for '
        '`flash_attn: fa3` on any model but gpt-oss (LLaMA-Factory 0.9.5): the parser accepts the value, the '
        'run dies after loading the data.',
    fix='Use `flash_attn: sdpa`, `fa2` or `auto`.',
    playbook='disable-flash-attn', autofix=True,
)

ATTN008 = Code(
    AREA, "ATTN008", Severity.WARNING, 'TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL has an ignored value',
    why="torch reads the opt-in with c10::utils::check_env, which accepts only `1` (and `0`): `TRUE`, `true`, "
        "`on` print `Ignoring invalid value for boolean flag` and leave the experimental AOTriton kernels off "
        "(pytorch c10/util/env.cpp).",
    fix='export TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1',
)

ATTN009 = Code(
    AREA, "ATTN009", Severity.INFO, 'FlashAttention-2 and SDPA both healthy: which is faster here',
    why="Both kernels passed the reference checks at the model's shape; their forward + backward times on this GPU "
        "say which `flash_attn` setting trains faster.",
    fix='Nothing to do; pick the faster one (`flash_attn: fa2` or `sdpa`).',
)

CODES = (ATTN000, ATTN001, ATTN002, ATTN003, ATTN004, ATTN005, ATTN006, ATTN007, ATTN008, ATTN009)

CASES = {"padded_mask": "with a padded attention mask (HF's path without packing)",
         "large_values": "with large-magnitude inputs", "large_flash_attn": "flash-attn with large-magnitude inputs"}


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
    out: list[Finding] = []
    v = env.get("FLASH_ATTENTION_TRITON_AMD_ENABLE")
    if v is not None and v != "TRUE" and v.lower() in ("1", "true", "yes", "on"):
        out.append(ATTN004.finding(f"FLASH_ATTENTION_TRITON_AMD_ENABLE={v!r} is ignored",
                        "flash-attn compares the value with the exact string `TRUE`.", value=v))
    opt_in = env.get("TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL")
    if opt_in is not None and opt_in.strip() not in ("0", "1"):
        out.append(ATTN008.finding(f"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL={opt_in!r} is ignored",
                                   "torch reads it with c10::utils::check_env, which accepts only 0 and 1: any other "
                                   "value prints `Ignoring invalid value for boolean flag` and leaves the "
                                   "experimental kernels off.", value=opt_in))
    warned = [w for w in (data or {}).get("sdpa_warnings") or [] if "still experimental" in w]
    if hip and warned and (opt_in or "").strip() != "1":
        out.append(ATTN006.finding(f"{arch}: SDPA flash/mem-efficient kernels are experimental here and off",
                                   f"torch says: {warned[0]}", arch=arch, torch_warnings=warned))
    lf = lf_attention(choice, gpu_visible)
    impl = lf["impl"] if lf else None
    if impl and impl.startswith("error:"):
        out.append(ATTN007.finding(f"LLaMA-Factory cannot set up `flash_attn: {flash_cfg}` for "
                        f"{(choice or {}).get('model_type') or 'this model'}", impl[len("error:"):].strip(),
                        choice=choice))
    if data is None:
        return out
    fa = data.get("flash_attn") or {}
    backends = data.get("backends") or {}
    fa2_used = impl == "flash_attention_2" if impl else (flash_cfg == "fa2" and fa.get("status") != "not_installed")
    fa_label = f"flash-attn {data.get('flash_attn_version', '')}" + (
        f" ({data['flash_attn_backend']})" if data.get("flash_attn_backend") else "")
    lfa = (data.get("cases") or {}).get("large_flash_attn") or {}
    if fa.get("status") == "ok" and lfa.get("status") in ("error", "wrong"):
        fa = {**lfa, "status": lfa["status"], "error": lfa.get("error") or "wrong with large-magnitude inputs: fwd err "
              f"{lfa.get('fwd_err')} (baseline {lfa.get('baseline_fwd')})"}
    t = data.get("timing_ms") or {}
    if t.get("sdpa") and t.get("flash_attn"):
        fast, slow = ("flash_attn", "sdpa") if t["flash_attn"] < t["sdpa"] else ("sdpa", "flash_attn")
        out.append(ATTN009.finding(f"{'fa2' if fast == 'flash_attn' else 'sdpa'} is faster here: "
                                   f"{t[fast]:.2f} vs {t[slow]:.2f} ms per forward + backward "
                                   f"({(1 - t[fast] / t[slow]) * 100:.0f} % less)",
                                   f"shape {data.get('shape')}, {data.get('dtype')}", timing_ms=t))
    if fa2_used and fa.get("status") in ("error", "wrong"):
        why = "" if flash_cfg == "fa2" else f" (LLaMA-Factory picks FlashAttention-2 for this model with `flash_attn: {flash_cfg}`)"
        detail = fa.get("error") or f"forward error {fa.get('fwd_err')} vs baseline {data.get('baseline_fwd')}"
        note = _ck_note(data, arch, head_dim)  # empty unless the ROCm CK backend is in use
        out.append(ATTN001.finding(f"FlashAttention-2 will be used but {fa_label} is "
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
        out.append(ATTN005.finding(title, f"LLaMA-Factory warns `FlashAttention-2 is not installed.` and uses "
                        f"{impl or 'the default attention'} instead ({why}).", lf_attn_implementation=impl))
    sdpa_used = impl == "sdpa" if impl else flash_cfg in ("auto", "sdpa", "fa2")
    if sdpa_used:
        for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"):
            b = backends.get(name) or {}
            if b.get("status") in ("wrong", "error"):
                out.append(ATTN002.finding(f"SDPA {name} backend {'gives wrong results' if b['status'] == 'wrong' else 'fails'}",
                                b.get("error") or f"fwd err {b.get('fwd_err')} (baseline {data.get('baseline_fwd')}), "
                                f"grad err {b.get('grad_err')}", backend=name, result=b))
        for case, c in (data.get("cases") or {}).items():
            if c.get("kind") == "sdpa" and c.get("status") in ("wrong", "error"):
                out.append(ATTN002.finding(f"SDPA {'gives wrong results' if c['status'] == 'wrong' else 'fails'} "
                                           f"{CASES.get(case, case)}", c.get("error") or
                                           f"fwd err {c.get('fwd_err')} (baseline {c.get('baseline_fwd')}), grad err "
                                           f"{c.get('grad_err')}, finite {c.get('finite')}", case=case, result=c))
        fused = [n for n in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION")
                 if (backends.get(n) or {}).get("status") == "ok"]
        if data.get("device") == "cuda" and not fused and cutoff_len >= 4096:
            out.append(ATTN003.finding(f"Only the math SDPA kernel works; cutoff_len {cutoff_len}",
                            "The math kernel materialises the seq×seq score matrix per head.",
                            cutoff_len=cutoff_len, backends=backends))
    ok = [n for n, b in backends.items() if b.get("status") == "ok"]
    uses = ""
    if impl:
        uses = f"LLaMA-Factory will use {impl}" + (" (transformers' default)" if lf and lf["default"] else "") + "; "
    fa_note = (f"; {fa_label.strip()} {fa.get('status')}" if fa.get("status") not in (None, "not_installed")
               else "; flash-attn not installed" if fa else "")
    return with_all_good(out, ATTN000, f"attention ({flash_cfg}): {uses}SDPA backends ok: {', '.join(ok) or 'none'}"
                         + fa_note, shape=data.get("shape"), backends=backends, flash_attn=fa,
                         flash_attn_backend=data.get("flash_attn_backend"), lf_attn_implementation=impl)


def _probes(ctx: Context) -> list[ProbeSpec]:
    specs = [ProbeSpec("attention", "doctor.probes.kernels", "probe_attention",
                       dict(_shape(ctx), dtype=_precision(ctx)), timeout=min(90, ctx.options.timeout),
                       cache="nogpu")]
    if ctx.config is not None:
        mc = ctx.model_config() or {}
        specs.append(ProbeSpec("attn_choice", "doctor.probes.llamafactory", "probe_attn_choice",
                               {"flash_attn": str(ctx.cfg("flash_attn", "auto")).lower(),
                                "model_type": mc.get("model_type"), "architectures": mc.get("architectures")},
                               timeout=ctx.options.timeout, group="stack", cache="pure"))
    return specs


@check(AREA, probes=_probes, needs=("torch",), order=41)
def attention(ctx: Context) -> list[Finding]:
    data, fails = probe_data(ctx, "attention", AREA)
    if data is None and not fails:
        return []  # no torch
    t = ctx.probes["torch"].data
    arch = (t.get("devices") or [{}])[0].get("arch")
    flash_cfg = str(ctx.cfg("flash_attn", "auto")).lower() if ctx.config else "auto"
    ch = ctx.probes.get("attn_choice")
    choice = ch.data if ch is not None and ch.ok else None  # no llamafactory: the config lint says so
    return fails + judge_attention(data, flash_cfg, int(ctx.cfg("cutoff_len", 2048) or 2048), ctx.env, arch,
                                   bool(t.get("hip")), choice, bool(t.get("devices")), _shape(ctx)["head_dim"])
