"""Probes of what a config switches on beyond the model: its optional packages (every one at once, with
LLaMA-Factory's and transformers' own requirement checks), DeepSpeed's ops, bitsandbytes optimizers, and the
Liger / Unsloth kernels. Run in the isolated worker, each only when the config turns its feature on.

Imports nothing of rocm-doctor (this runs inside the examined Python).
"""

from __future__ import annotations

import importlib.metadata as md
import re
import time
from typing import Any

# what probe_requirements (the stack worker's probe here) imports; a warm server imports it once
PRELOAD = ("packaging.requirements", "llamafactory.hparams.parser", "llamafactory.model.model_utils.quantization")

# ---------------------------------------------------------------- requirements in one pass

class _Args:
    """An arguments namespace for LLaMA-Factory's dependency check: the config's values over the
    dataclasses' defaults. It needs no parse (which stops at the first missing package)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:  # a field none of the dataclasses has
        return None


def _defaults(classes: Any) -> dict[str, Any]:
    import dataclasses

    out: dict[str, Any] = {}
    for cls in classes:
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                try:
                    out[f.name] = f.default_factory()  # type: ignore[misc]
                except Exception:  # noqa: S112
                    continue
    return out


def evaluate(requirement: str) -> dict[str, Any]:
    """One requirement string (``deepspeed``, ``badam>=1.2.1``) against what is installed."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    req = Requirement(requirement)
    try:
        have = md.version(req.name)
    except md.PackageNotFoundError:
        return {"package": req.name, "requirement": requirement, "installed": None, "ok": False}
    ok = not req.specifier or Version(have) in req.specifier
    return {"package": req.name, "requirement": requirement, "installed": have, "ok": ok}


def _lf_extra(args: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """(requirement, mandatory, why) from LLaMA-Factory's own ``_check_extra_dependencies``, called with
    ``check_version`` collecting instead of raising."""
    from llamafactory.hparams import parser as lfp

    got: list[tuple[str, bool]] = []
    real = lfp.check_version
    lfp.check_version = lambda requirement, mandatory=False: got.append((requirement, mandatory))
    try:
        ns = _Args({**_defaults(lfp._TRAIN_ARGS), **args})
        lfp._check_extra_dependencies(ns, ns, ns)
    finally:
        lfp.check_version = real
    return [(r, m, "llamafactory.hparams.parser._check_extra_dependencies") for r, m in got]


def _lf_quantization(args: dict[str, Any], zero3: bool, model_quant: str | None) -> list[tuple[str, bool, str]]:
    """The requirements LLaMA-Factory's ``configure_quantization`` checks for this config, read from its source
    (the bitsandbytes floors for 8-bit, 4-bit and 4-bit under ZeRO-3/FSDP; hqq; eetq; the PTQ methods)."""
    import inspect

    from llamafactory.model.model_utils import quantization as q

    src = inspect.getsource(q.configure_quantization)
    found = re.findall(r'check_version\("([^"]+)"', src)
    bnb = [r for r in found if r.startswith("bitsandbytes")]
    where = "llamafactory.model.model_utils.quantization.configure_quantization"
    out: list[tuple[str, bool, str]] = []
    bit, method = args.get("quantization_bit"), str(args.get("quantization_method") or "bnb")
    if model_quant:  # a pre-quantized checkpoint
        pkgs = {"gptq": ("gptqmodel", "optimum"), "awq": ("autoawq",), "aqlm": ("aqlm",)}.get(model_quant.lower(), ())
        out += [(r, True, where) for r in found if r.split(">")[0].split("=")[0] in pkgs]
    elif bit is not None and method == "bnb" and len(bnb) >= 3:
        out.append((bnb[0] if bit == 8 else bnb[1], True, where))
        if zero3 and bit == 4:
            out.append((bnb[2], True, where + " (ZeRO-3 / FSDP)"))
    elif bit is not None and method in ("hqq", "eetq"):
        out += [(r, True, where) for r in found if r.startswith(method)]
    return out


def _optimizer(optim: str | None) -> tuple[str, str] | None:
    """transformers' own answer for ``optim``: ``Trainer.get_optimizer_cls_and_kwargs`` raises ImportError
    naming the package a bitsandbytes / GaLore / APOLLO / LOMO / schedule-free optimizer needs."""
    if not optim or optim in ("adamw_torch", "adamw_torch_fused", "sgd", "adagrad", "adafactor"):
        return None
    import tempfile

    from transformers import Trainer, TrainingArguments

    try:
        with tempfile.TemporaryDirectory() as d:
            targs = TrainingArguments(output_dir=d, optim=optim, report_to=[], use_cpu=True)
            Trainer.get_optimizer_cls_and_kwargs(targs)
    except ImportError as e:
        return str(e).splitlines()[0][:300], "transformers.Trainer.get_optimizer_cls_and_kwargs"
    except Exception:  # needs a model (GaLore target modules) or an invalid value: the config check says so
        return None
    return None


def probe_requirements(args: dict[str, Any], zero3: bool = False, model_quant: str | None = None) -> dict[str, Any]:
    """Every optional package this config needs, each against what is installed, all at once."""
    reqs: list[dict[str, Any]] = []
    for r, mandatory, source in _lf_extra(args) + _lf_quantization(args, zero3, model_quant):
        e = evaluate(r)
        e.update(mandatory=mandatory, source=source)
        if not any(x["requirement"] == r for x in reqs):
            reqs.append(e)
    opt = _optimizer(args.get("optim"))
    optimizer_error = None
    if opt is not None:
        optimizer_error = {"message": opt[0], "source": opt[1], "optim": args.get("optim")}
        m = re.search(r"install `?([A-Za-z0-9_.\-]+)`?", opt[0])
        if m:
            reqs.append({"package": m.group(1), "requirement": m.group(1), "installed": None, "ok": False,
                         "mandatory": True, "source": opt[1], "message": opt[0]})
    return {"requirements": reqs, "optimizer_error": optimizer_error}


# ---------------------------------------------------------------- DeepSpeed

_BUILDERS = {"cpu_adam": "CPUAdamBuilder", "fused_adam": "FusedAdamBuilder", "async_io": "AsyncIOBuilder",
             "cpu_adagrad": "CPUAdagradBuilder", "fused_lamb": "FusedLambBuilder"}


def _toolchain() -> dict[str, Any]:
    import os
    import shutil
    import sysconfig

    import torch

    hip = bool(torch.version.hip)
    home = os.environ.get("ROCM_PATH") or os.environ.get("ROCM_HOME") or "/opt/rocm"
    compiler = (shutil.which("hipcc") or (os.path.join(home, "bin", "hipcc") if os.path.exists(
        os.path.join(home, "bin", "hipcc")) else None)) if hip else (shutil.which("nvcc") or (
            os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc") if os.path.exists(
                os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")) else None))
    try:
        import ninja  # noqa: F401

        has_ninja = True
    except ImportError:
        has_ninja = shutil.which("ninja") is not None
    inc = sysconfig.get_paths().get("include") or ""
    return {"hip": hip, "compiler": compiler, "ninja": has_ninja, "cxx": shutil.which("c++") or shutil.which("g++"),
            "python_headers": os.path.exists(os.path.join(inc, "Python.h"))}


def probe_deepspeed(ops: list[str], build_timeout: float = 240.0) -> dict[str, Any]:
    """Like ``ds_report`` for the ops this config needs: the accelerator, and each op prebuilt, compatible,
    or JIT-built now (its build error's line when it fails)."""
    out: dict[str, Any] = {"ops": {}, "toolchain": _toolchain()}
    t0 = time.perf_counter()
    import deepspeed

    out["version"] = deepspeed.__version__
    out["import_s"] = round(time.perf_counter() - t0, 2)
    try:
        from deepspeed.accelerator import get_accelerator

        acc = get_accelerator()
        out["accelerator"] = acc.device_name()
    except Exception as e:
        out["accelerator"] = None
        out["accelerator_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        return out
    try:
        from deepspeed.git_version_info import installed_ops
    except Exception:
        installed_ops = {}
    for op in ops:
        entry: dict[str, Any] = {"prebuilt": bool(installed_ops.get(op))}
        cls = _BUILDERS.get(op)
        try:
            builder = acc.create_op_builder(cls) if cls else None
        except Exception as e:
            builder, entry["error"] = None, f"{type(e).__name__}: {str(e)[:300]}"
        if builder is None:
            entry.setdefault("error", f"no op builder for {op} on this accelerator")
            out["ops"][op] = entry
            continue
        try:
            entry["compatible"] = bool(builder.is_compatible(verbose=False))
        except Exception as e:
            entry["compatible"], entry["error"] = False, f"{type(e).__name__}: {str(e)[:300]}"
        if entry["prebuilt"] or entry.get("compatible"):
            t1 = time.perf_counter()
            try:
                builder.load(verbose=False)
                entry["loaded"] = True
            except BaseException as e:  # a failed build raises RuntimeError / SystemExit / CalledProcessError
                entry["loaded"] = False
                entry["error"] = _build_error(e)
            entry["load_s"] = round(time.perf_counter() - t1, 1)
        out["ops"][op] = entry
    return out


def _build_error(e: BaseException) -> str:
    """The line of a failed extension build a user needs (the compiler's ``error:``), not the traceback."""
    text = f"{type(e).__name__}: {e}"
    for line in text.splitlines():
        if re.search(r"\berror\b|fatal|No such file|not found", line, re.I):
            return line.strip()[:300]
    return text.splitlines()[0][:300]


# ---------------------------------------------------------------- bitsandbytes optimizers

# transformers' OptimizerNames of the bitsandbytes family -> the bnb.optim class it builds
_BNB_OPTIMS = {"adamw_bnb_8bit": "AdamW8bit", "adamw_8bit": "AdamW8bit", "paged_adamw_8bit": "PagedAdamW8bit",
               "paged_adamw_32bit": "PagedAdamW32bit", "lion_8bit": "Lion8bit", "lion_32bit": "Lion32bit",
               "paged_lion_8bit": "PagedLion8bit", "paged_lion_32bit": "PagedLion32bit",
               "rmsprop_bnb": "RMSprop", "rmsprop_bnb_8bit": "RMSprop8bit", "rmsprop_bnb_32bit": "RMSprop32bit",
               "ademamix": "AdEMAMix", "ademamix_8bit": "AdEMAMix8bit", "paged_ademamix_8bit": "PagedAdEMAMix8bit",
               "paged_ademamix_32bit": "PagedAdEMAMix32bit"}


def probe_bnb_optimizer(optim: str) -> dict[str, Any]:
    """One optimizer step of the bitsandbytes optimizer ``optim`` on the GPU (what `python -m bitsandbytes`
    exercises): the parameter moves and stays finite."""
    import torch

    out: dict[str, Any] = {"optim": optim, "class": _BNB_OPTIMS.get(optim)}
    if out["class"] is None:
        out["status"] = "unknown_optimizer"
        return out
    import bitsandbytes as bnb

    out["version"] = getattr(bnb, "__version__", "?")
    if not torch.cuda.is_available():
        out["status"] = "no_gpu"
        return out
    cls = getattr(bnb.optim, out["class"], None)
    if cls is None:
        out["status"], out["error"] = "error", f"bitsandbytes {out['version']} has no bnb.optim.{out['class']}"
        return out
    try:
        p = torch.nn.Parameter(torch.randn(4096, 1024, device="cuda"))  # big enough for the 8-bit path
        before = p.detach().clone()
        opt = cls([p], lr=1e-3)
        p.grad = torch.randn_like(p)
        opt.step()
        torch.cuda.synchronize()
        moved = float((p.detach() - before).abs().max())
        finite = bool(torch.isfinite(p).all())
        out.update(status="ok" if finite and moved > 0 else "wrong", moved=moved, finite=finite)
    except Exception as e:
        out.update(status="error", error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
    return out


# ---------------------------------------------------------------- Liger / Unsloth

def probe_liger(model_type: str | None) -> dict[str, Any]:
    """A forward + backward of Liger's RMSNorm, SwiGLU MLP and fused linear cross-entropy (the Triton kernels
    LLaMA-Factory's ``apply_liger_kernel`` patches in for llama-like models) against torch."""
    import torch

    out: dict[str, Any] = {"model_type": model_type}
    import liger_kernel.transformers as lt

    out["version"] = md.version("liger-kernel")
    out["patch"] = f"apply_liger_kernel_to_{model_type}" if hasattr(lt, f"apply_liger_kernel_to_{model_type}") else None
    if not torch.cuda.is_available():
        out["status"] = "no_gpu"
        return out
    from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss, LigerRMSNorm

    try:
        dev, dt = "cuda", torch.bfloat16
        h, v, n = 512, 1024, 64
        x = torch.randn(n, h, device=dev, dtype=dt, requires_grad=True)
        norm = LigerRMSNorm(h).to(dev, dt)
        y = norm(x)
        ref = torch.nn.functional.rms_norm(x.float(), (h,), norm.weight.float(), eps=norm.variance_epsilon) \
            if hasattr(torch.nn.functional, "rms_norm") else None
        w = torch.randn(v, h, device=dev, dtype=dt, requires_grad=True)
        target = torch.randint(0, v, (n,), device=dev)
        loss = LigerFusedLinearCrossEntropyLoss()(w, y, target)
        loss.backward()
        torch.cuda.synchronize()
        ref_loss = torch.nn.functional.cross_entropy((y.float() @ w.float().t()), target)
        err = abs(float(loss) - float(ref_loss))
        finite = bool(torch.isfinite(loss)) and bool(torch.isfinite(x.grad).all())
        norm_err = float((y.float() - ref).abs().max()) if ref is not None else None
        out.update(status="ok" if finite and err < 0.05 * max(1.0, abs(float(ref_loss))) else "wrong",
                   loss_err=err, norm_err=norm_err, finite=finite)
    except Exception as e:
        out.update(status="error", error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
    return out


def probe_unsloth() -> dict[str, Any]:
    """Import unsloth (it patches transformers and compiles Triton kernels at import, where it fails on
    unsupported GPUs) and report what it decided about this device."""
    out: dict[str, Any] = {}
    try:
        import unsloth

        out["version"] = getattr(unsloth, "__version__", "?")
        out["status"] = "ok"
        try:
            from unsloth import device_type as dt

            out["allow_prequantized"] = getattr(dt, "ALLOW_PREQUANTIZED_MODELS", None)
            out["allow_bitsandbytes"] = getattr(dt, "ALLOW_BITSANDBYTES", None)
        except Exception:  # noqa: S110 - older unsloth has no device_type module
            pass
    except Exception as e:
        out.update(status="error", error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
    return out
