"""What the config switches on beyond the model: its optional packages (all at once), DeepSpeed's ops,
bitsandbytes optimizers, Liger and Unsloth kernels, and the ZeRO-3 combinations LLaMA-Factory refuses.

On ROCm each of these fails after the model has loaded, minutes or hours in. The package list comes from
LLaMA-Factory's own ``_check_extra_dependencies`` and ``configure_quantization`` and transformers' own
optimizer factory, run in the worker without stopping at the first miss; each probe runs only when the
config turns its feature on, so a config that uses none of them pays one call in the stack worker.
"""

from __future__ import annotations

import json
from typing import Any

from doctor.context import Context
from doctor.findings import Code, Finding, Severity, with_all_good
from doctor.registry import check, probe_failure
from doctor.worker import ProbeSpec

AREA = "features"

FEAT000 = Code(
    AREA, "FEAT000", Severity.OK, "Everything the config turns on is installed and works",
    why="Every optional package the config needs is installed at a version LLaMA-Factory accepts, and the probed "
        "features (DeepSpeed ops, bitsandbytes optimizer, Liger/Unsloth kernels) ran.",
    fix="Nothing to do.",
)

FEAT001 = Code(
    AREA, "FEAT001", Severity.ERROR, "A package the config needs is not installed",
    why="LLaMA-Factory checks optional packages one at a time and stops at the first missing one (`deepspeed`, "
        "then `liger-kernel`, ...), some only after the model has loaded; transformers checks an optimizer's "
        "package when the trainer builds it. rocm-doctor runs those same checks without stopping and lists every "
        "missing package at once, each with the setting that needs it.",
    fix="Install each one (`pip install 'PKG>=X'`), or turn the setting off. On ROCm: bitsandbytes ships ROCm "
        "binaries on PyPI from 0.49.0; DeepSpeed builds its ops with hipcc at first use.",
)

FEAT002 = Code(
    AREA, "FEAT002", Severity.ERROR, "A package the config needs is too old (or too new)",
    why="LLaMA-Factory requires a version range for it (`badam>=1.2.1`, `bitsandbytes>=0.43.0` for QLoRA under "
        "ZeRO-3/FSDP, `vllm>=0.4.3,<=0.11.0`, ...) and stops with `... is required for a normal functioning`.",
    fix="`pip install 'REQUIREMENT'` (the requirement in the finding).",
)

FEAT010 = Code(
    AREA, "FEAT010", Severity.ERROR, "A DeepSpeed op this config needs cannot be built or loaded",
    why="DeepSpeed JIT-compiles its C++/HIP ops at first use (`cpu_adam` for ZeRO-Offload, `fused_adam` for its "
        "Adam): without ninja, hipcc/nvcc, a C++ compiler or Python headers, or with a compiler error, training "
        "dies in `deepspeed.initialize` after the model loaded (`Error building extension 'cpu_adam'`).",
    fix="Install what the finding names (`pip install ninja`; the ROCm/CUDA toolkit; `python3-dev`), or prebuild "
        "(`DS_BUILD_CPU_ADAM=1 pip install deepspeed`); `deepspeed-no-offload` drops CPU offload (asks first).",
    playbook="deepspeed-no-offload", autofix=False,
)

FEAT011 = Code(
    AREA, "FEAT011", Severity.ERROR, "DeepSpeed does not see a ROCm/CUDA accelerator",
    why="`deepspeed.accelerator.get_accelerator()` chose another accelerator (cpu, xpu): a DeepSpeed built "
        "for a different torch, or torch without GPU support; ZeRO then fails at initialize.",
    fix="Reinstall DeepSpeed against this torch (`pip install --force-reinstall --no-cache-dir deepspeed`), or set "
        "`DS_ACCELERATOR=cuda` (ROCm uses the cuda accelerator).",
)

FEAT012 = Code(
    AREA, "FEAT012", Severity.ERROR, "ZeRO-3 with a combination LLaMA-Factory refuses",
    why="LLaMA-Factory stops with `DeepSpeed ZeRO-3 or FSDP is incompatible with PTQ-quantized models.` for a "
        "pre-quantized (GPTQ/AWQ/AQLM/bnb) checkpoint, and with `Only 4-bit quantized model can use fsdp+qlora "
        "or auto device map.` for 8-bit QLoRA (llamafactory/model/model_utils/quantization.py).",
    fix="Use ZeRO stage 2 (`deepspeed-stage2` asks first), an unquantized checkpoint, or 4-bit QLoRA.",
    playbook="deepspeed-stage2", autofix=False,
)

FEAT020 = Code(
    AREA, "FEAT020", Severity.ERROR, "The bitsandbytes optimizer fails on this GPU",
    why="8-bit and paged optimizers (`optim: paged_adamw_8bit`, `adamw_8bit`, ...) run bitsandbytes' own GPU "
        "kernels; one optimizer step on the GPU failed or left the weights unchanged/non-finite (a CUDA-only build "
        "on ROCm, an arch missing from the ROCm library).",
    fix="Install a bitsandbytes with ROCm binaries for this arch (PyPI >= 0.49.0), or `optim: adamw_torch` "
        "(`optim-torch` asks first: fp32 Adam states need 6 more bytes per trainable parameter).",
    playbook="optim-torch", autofix=False,
)

FEAT030 = Code(
    AREA, "FEAT030", Severity.ERROR, "Liger kernels fail on this GPU",
    why="`enable_liger_kernel: true` replaces RMSNorm, SwiGLU, RoPE and the cross-entropy with Triton kernels; "
        "a forward + backward of them failed or disagreed with torch (Triton on ROCm fails here first).",
    fix="Turn it off (`disable-liger`), or install a Triton/liger-kernel pair built for this ROCm.",
    playbook="disable-liger", autofix=True,
)

FEAT031 = Code(
    AREA, "FEAT031", Severity.ERROR, "Unsloth does not load here",
    why="`use_unsloth: true` imports unsloth, which patches transformers and compiles Triton kernels at import; "
        "it failed in the worker, so it fails at launch too.",
    fix="Turn it off (`disable-unsloth`), or install unsloth's ROCm build.",
    playbook="disable-unsloth", autofix=True,
)

FEAT032 = Code(
    AREA, "FEAT032", Severity.INFO, "Feature probe needs a GPU",
    why="The bitsandbytes optimizer and Liger probes run their kernels on a GPU; on this machine only the import "
        "was checked.",
    fix="Nothing to do; run `check` on the training machine.",
)

CODES = (FEAT000, FEAT001, FEAT002, FEAT010, FEAT011, FEAT012, FEAT020, FEAT030, FEAT031, FEAT032)

# which setting asks for a package (the finding names it)
WHY = {"deepspeed": "deepspeed", "liger-kernel": "enable_liger_kernel", "unsloth": "use_unsloth",
       "galore_torch": "use_galore", "galore-torch": "use_galore", "apollo_torch": "use_apollo",
       "apollo-torch": "use_apollo", "badam": "use_badam", "adam-mini": "use_adam_mini", "swanlab": "use_swanlab",
       "matplotlib": "plot_loss", "vllm": "infer_backend: vllm", "sglang": "infer_backend: sglang",
       "jieba": "predict_with_generate", "nltk": "predict_with_generate", "rouge_chinese": "predict_with_generate",
       "rouge-chinese": "predict_with_generate", "mixture-of-depth": "mixture_of_depths", "hqq": "quantization_method: hqq",
       "eetq": "quantization_method: eetq", "gptqmodel": "a GPTQ checkpoint", "optimum": "a GPTQ checkpoint",
       "autoawq": "an AWQ checkpoint", "aqlm": "an AQLM checkpoint"}
OFFLOAD_DEVICES = ("cpu", "nvme")


def ds_config(ctx: Context) -> dict[str, Any] | None:
    """The DeepSpeed JSON the config names (inline dict or path), or None (unset or unreadable: CFG008)."""
    if "ds_config" not in ctx.facts:
        ds = ctx.cfg("deepspeed")
        conf = None
        if isinstance(ds, dict):
            conf = ds
        elif ds:
            try:
                conf = json.loads(ctx.resolve_path(str(ds)).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                conf = None
        ctx.facts["ds_config"] = conf if isinstance(conf, dict) else None
    return ctx.facts["ds_config"]


def ds_ops(conf: dict[str, Any] | None) -> list[str]:
    """The DeepSpeed ops this JSON makes DeepSpeed load: ``cpu_adam`` for ZeRO-Offload of the optimizer
    (``async_io`` for NVMe), ``fused_adam`` for DeepSpeed's own Adam on the GPU."""
    if not conf:
        return []
    zero = conf.get("zero_optimization") if isinstance(conf.get("zero_optimization"), dict) else {}
    off = zero.get("offload_optimizer") if isinstance(zero.get("offload_optimizer"), dict) else {}
    offp = zero.get("offload_param") if isinstance(zero.get("offload_param"), dict) else {}
    ops = []
    if off.get("device") in OFFLOAD_DEVICES:
        ops.append("cpu_adam")
    if "nvme" in (off.get("device"), offp.get("device")):
        ops.append("async_io")
    opt = conf.get("optimizer") if isinstance(conf.get("optimizer"), dict) else {}
    if str(opt.get("type", "")).lower() in ("adam", "adamw") and "cpu_adam" not in ops:
        ops.append("fused_adam")
    return ops


def zero_stage(conf: dict[str, Any] | None) -> int | None:
    zero = (conf or {}).get("zero_optimization")
    return zero.get("stage") if isinstance(zero, dict) else None


def _args(ctx: Context) -> dict[str, Any]:
    """The config's values as plain JSON for the worker."""
    return json.loads(json.dumps(ctx.config or {}, default=str))


def _probes(ctx: Context) -> list[ProbeSpec]:
    cfg = ctx.config or {}
    mq = ((ctx.model_config() or {}).get("quantization_config") or {}).get("quant_method")
    specs = [ProbeSpec("requirements", "doctor.probes.features", "probe_requirements",
                       {"args": _args(ctx), "zero3": zero_stage(ds_config(ctx)) == 3,
                        "model_quant": str(mq) if mq else None}, timeout=min(90, ctx.options.timeout), group="stack",
                       cache="pure")]
    ops = ds_ops(ds_config(ctx))
    if cfg.get("deepspeed") and ops:
        specs.append(ProbeSpec("deepspeed", "doctor.probes.features", "probe_deepspeed", {"ops": ops},
                               timeout=max(300.0, ctx.options.timeout), group="deepspeed"))
    if bnb_optimizer(cfg.get("optim")):
        specs.append(ProbeSpec("bnb_optim", "doctor.probes.features", "probe_bnb_optimizer", {"optim": cfg["optim"]},
                               timeout=min(90, ctx.options.timeout), group="bnb", cache="nogpu"))
    if cfg.get("enable_liger_kernel"):
        specs.append(ProbeSpec("liger", "doctor.probes.features", "probe_liger",
                               {"model_type": (ctx.model_config() or {}).get("model_type")},
                               timeout=min(180, max(90, ctx.options.timeout)), group="liger", cache="nogpu"))
    if cfg.get("use_unsloth"):
        specs.append(ProbeSpec("unsloth", "doctor.probes.features", "probe_unsloth", {},
                               timeout=min(180, max(90, ctx.options.timeout)), group="unsloth", cache="nogpu"))
    return specs


def bnb_optimizer(optim: Any) -> bool:
    """transformers' bitsandbytes optimizers: the 8-bit, paged, bnb-suffixed, Lion and AdEMAMix families."""
    o = str(optim or "")
    return any(k in o for k in ("8bit", "paged_", "_bnb", "lion_", "ademamix"))


# ---------------------------------------------------------------- verdicts

def judge_requirements(data: dict[str, Any], optim: str | None = None) -> list[Finding]:
    """One finding per missing or out-of-range package (the strictest requirement when several ask)."""
    by_pkg: dict[str, list[dict[str, Any]]] = {}
    for r in data.get("requirements") or []:
        if not r.get("ok") and r.get("mandatory", True):
            by_pkg.setdefault(str(r["package"]).lower(), []).append(r)
    out: list[Finding] = []
    for rs in by_pkg.values():
        req = max((r["requirement"] for r in rs), key=len)
        why = sorted({_why(r, optim) for r in rs})
        installed = rs[0].get("installed")
        cmd = f"pip install '{req}'" if req != rs[0]["package"] else f"pip install {rs[0]['package']}"
        sources = sorted({r.get("source", "") for r in rs})
        if installed is None:
            out.append(FEAT001.finding(f"{rs[0]['package']} is not installed (needed by {', '.join(why)})",
                                       f"LLaMA-Factory / transformers require `{req}`. Fix: `{cmd}`.",
                                       package=rs[0]["package"], requirement=req, settings=why, sources=sources))
        else:
            out.append(FEAT002.finding(f"{rs[0]['package']} {installed} does not satisfy `{req}` (needed by "
                                       f"{', '.join(why)})", f"Fix: `{cmd}`.", package=rs[0]["package"],
                                       requirement=req, installed=installed, settings=why, sources=sources))
    return out


def _why(r: dict[str, Any], optim: str | None) -> str:
    pkg = str(r["package"]).lower()
    src = str(r.get("source", ""))
    if "get_optimizer_cls_and_kwargs" in src:
        return f"optim: {optim}"
    if pkg == "bitsandbytes":
        return "quantization_bit" + (" with ZeRO-3" if "ZeRO-3" in src else "")
    return WHY.get(pkg, WHY.get(pkg.replace("-", "_"), pkg))


def judge_deepspeed(data: dict[str, Any], ops: list[str]) -> list[Finding]:
    out: list[Finding] = []
    acc = data.get("accelerator")
    if acc != "cuda":  # ROCm torch uses DeepSpeed's cuda accelerator
        out.append(FEAT011.finding(f"DeepSpeed {data.get('version')} chose accelerator `{acc}`",
                                   data.get("accelerator_error") or "", **data))
        return out
    tc = data.get("toolchain") or {}
    for op in ops:
        e = (data.get("ops") or {}).get(op) or {}
        if e.get("loaded"):
            continue
        missing = [name for name, ok in (("ninja", tc.get("ninja")), ("hipcc" if tc.get("hip") else "nvcc",
                                         tc.get("compiler")), ("a C++ compiler", tc.get("cxx")),
                                        ("Python headers (python3-dev)", tc.get("python_headers"))) if not ok]
        detail = e.get("error") or ("not compatible here" if e.get("compatible") is False else "")
        if missing:
            detail = f"missing: {', '.join(missing)}" + (f"; {detail}" if detail else "")
        out.append(FEAT010.finding(f"DeepSpeed op `{op}` cannot be " + ("loaded" if e.get("prebuilt") else "built"),
                                   detail, playbook=None if op == "cpu_adam" else "", op=op, missing=missing,
                                   toolchain=tc, entry=e, version=data.get("version")))
    return out


def judge_zero3(conf: dict[str, Any] | None, cfg: dict[str, Any], model_cfg: dict[str, Any] | None) -> list[Finding]:
    if zero_stage(conf) != 3:
        return []
    qc = (model_cfg or {}).get("quantization_config")
    if qc:
        return [FEAT012.finding(f"ZeRO-3 with a pre-quantized ({qc.get('quant_method', '?')}) checkpoint",
                                "LLaMA-Factory stops with `DeepSpeed ZeRO-3 or FSDP is incompatible with "
                                "PTQ-quantized models.`", quantization_config=qc)]
    if cfg.get("quantization_bit") == 8:
        return [FEAT012.finding("ZeRO-3 with 8-bit QLoRA", "LLaMA-Factory stops with `Only 4-bit quantized model "
                                "can use fsdp+qlora or auto device map.`")]
    return []


def judge_bnb_optim(data: dict[str, Any], trainable_params: float | None = None) -> list[Finding]:
    st = data.get("status")
    if st == "no_gpu":
        return [FEAT032.finding(f"optim: {data.get('optim')}: no GPU here to run one optimizer step",
                                f"bitsandbytes {data.get('version')} imported")]
    if st in ("error", "wrong"):
        extra = (f" `optim-torch` (adamw_torch) needs about {trainable_params * 6 / 2**30:.1f} GiB more for fp32 "
                 "optimizer states." if trainable_params and "8bit" in str(data.get("optim")) else "")
        return [FEAT020.finding(f"optim: {data.get('optim')}: one bnb.optim.{data.get('class')} step "
                                + ("failed" if st == "error" else "left the weights unchanged or non-finite"),
                                (data.get("error") or f"max change {data.get('moved')}, finite {data.get('finite')}")
                                + "." + extra, **data)]
    return []


def judge_liger(data: dict[str, Any]) -> list[Finding]:
    st = data.get("status")
    if st == "no_gpu":
        return [FEAT032.finding("enable_liger_kernel: no GPU here to run its Triton kernels",
                                f"liger-kernel {data.get('version')} imported", playbook="")]
    if st in ("error", "wrong"):
        return [FEAT030.finding("Liger kernels " + ("fail" if st == "error" else "disagree with torch"),
                                data.get("error") or f"loss error {data.get('loss_err')}, norm error "
                                f"{data.get('norm_err')}", **data)]
    if data.get("model_type") and not data.get("patch"):
        return [FEAT030.finding(f"liger-kernel has no patch for model_type `{data['model_type']}`",
                                "LLaMA-Factory logs `Current model does not support liger kernel.` and trains "
                                "without it.", severity=Severity.WARNING, playbook="", **data)]
    return []


def judge_unsloth(data: dict[str, Any]) -> list[Finding]:
    if data.get("status") == "error":
        return [FEAT031.finding("use_unsloth: unsloth fails to import", data.get("error") or "", **data)]
    return []


def _trainable(ctx: Context) -> float | None:
    mc = ctx.model_config()
    if not mc or not mc.get("hidden_size"):
        return None
    from checks.memory import estimate

    est = estimate(mc, ctx.config or {})
    ft = (ctx.config or {}).get("finetuning_type", "lora")
    return est["params"] * (1.0 if ft == "full" else 0.01)


@check(AREA, needs_config=True, needs=("torch",), probes=_probes, order=44)
def features(ctx: Context) -> list[Finding]:
    cfg = ctx.config or {}
    out: list[Finding] = []
    res = ctx.probes.get("requirements")
    if res is not None and res.ok:
        out += judge_requirements(res.data, cfg.get("optim"))
    elif res is not None:
        out += probe_failure(res, AREA)
    missing = {f.evidence.get("package", "").lower() for f in out if f.id in ("FEAT001", "FEAT002")}
    out += judge_zero3(ds_config(ctx), cfg, ctx.model_config())
    probes = (("deepspeed", "deepspeed", lambda d: judge_deepspeed(d, ds_ops(ds_config(ctx)))),
              ("bnb_optim", "bitsandbytes", lambda d: judge_bnb_optim(d, _trainable(ctx))),
              ("liger", "liger-kernel", judge_liger), ("unsloth", "unsloth", judge_unsloth))
    for name, pkg, judge in probes:
        r = ctx.probes.get(name)
        if r is None or pkg in missing:
            continue  # not turned on, or FEAT001 already says it is not installed
        if r.ok:
            out += judge(r.data)
        elif r.status != "import_error":
            out += probe_failure(r, AREA)
    on = [k for k in ("deepspeed", "enable_liger_kernel", "use_unsloth", "optim", "quantization_bit") if cfg.get(k)]
    return with_all_good(out, FEAT000, "Everything the config turns on is installed"
                         + (f" ({', '.join(on)})" if on else ""), tolerate_warnings=True)
