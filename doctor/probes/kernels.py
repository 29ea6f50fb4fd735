"""Active GPU probes, run in the "device" worker after ``probe_torch`` imported torch.

The same code serves ROCm, CUDA and (with smaller sizes) the CPU; what differs is only what the
verdicts in the check modules make of the numbers.
"""

from __future__ import annotations

import time
from typing import Any


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _sync(dev: str) -> None:
    import torch

    if dev == "cuda":
        torch.cuda.synchronize()


def probe_bf16(n: int = 8192, iters: int = 10) -> dict[str, Any]:
    """bf16 GEMM vs an fp32 reference on the same rounded inputs, and achieved TFLOP/s."""
    import torch

    dev = _device()
    if dev == "cpu":
        n, iters = 256, 3
    g = torch.Generator(device=dev).manual_seed(1234)
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=g)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16, generator=g)
    out = a @ b
    ref = a.float() @ b.float()
    nonfinite = not bool(torch.isfinite(out).all())
    rel = float((out.float() - ref).norm() / ref.norm())
    for _ in range(3):
        a @ b
    _sync(dev)
    t0 = time.perf_counter()
    if dev == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            a @ b
        end.record()
        torch.cuda.synchronize()
        secs = start.elapsed_time(end) / 1000
    else:
        for _ in range(iters):
            a @ b
        secs = time.perf_counter() - t0
    info: dict[str, Any] = {"device": dev, "n": n, "rel_err": rel, "nonfinite": nonfinite,
                            "tflops": round(2 * n**3 * iters / secs / 1e12, 2)}
    if dev == "cuda":
        p = torch.cuda.get_device_properties(0)
        info["name"] = p.name
        info["arch"] = (getattr(p, "gcnArchName", "") or "").split(":")[0] if torch.version.hip else f"sm_{p.major}{p.minor}"
        try:
            info["blas"] = str(torch.backends.cuda.preferred_blas_library())
        except Exception:
            info["blas"] = None
    return info


def _attn_ref(q, k, v):
    import torch

    s = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)) / (q.shape[-1] ** 0.5)
    mask = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    return scores.softmax(-1) @ v


def probe_attention(heads: int = 32, kv_heads: int = 8, head_dim: int = 128, dtype: str = "bfloat16",
                    seq: int = 512, batch: int = 2) -> dict[str, Any]:
    """Forward + backward of each SDPA backend (and flash_attn if importable) vs an fp32 reference.

    Tolerance rule from flash-attn's own tests: error ≤ 2× (forward) and ≤ 10× (gradients) the error
    of the same math computed in the low precision dtype.
    """
    import torch
    import torch.nn.functional as F

    dev = _device()
    dt = getattr(torch, dtype)
    if dev == "cpu":
        seq, batch, heads, kv_heads = 64, 1, min(heads, 4), min(kv_heads, 2)
    g = torch.Generator(device=dev).manual_seed(7)
    q = torch.randn(batch, heads, seq, head_dim, device=dev, generator=g)
    k = torch.randn(batch, kv_heads, seq, head_dim, device=dev, generator=g)
    v = torch.randn(batch, kv_heads, seq, head_dim, device=dev, generator=g)
    dout = torch.randn(batch, heads, seq, head_dim, device=dev, generator=g)
    rep = heads // kv_heads
    qd, kd, vd = (t.to(dt) for t in (q, k, v))

    def run(fn, qq, kk, vv):
        qq, kk, vv = (t.detach().clone().requires_grad_(True) for t in (qq, kk, vv))
        o = fn(qq, kk.repeat_interleave(rep, 1), vv.repeat_interleave(rep, 1))
        o.backward(dout.to(o.dtype))
        return o.float(), [t.grad.float() for t in (qq, kk, vv)]

    ref_o, ref_g = run(_attn_ref, *(t.to(dt).float() for t in (q, k, v)))
    low_o, low_g = run(_attn_ref, qd, kd, vd)

    def err(o, grads):
        return float((o - ref_o).detach().abs().max()), [float((a - b).detach().abs().max()) for a, b in zip(grads, ref_g, strict=True)]

    base_f, base_g = err(low_o, low_g)
    out: dict[str, Any] = {"device": dev, "dtype": dtype, "shape": [batch, heads, kv_heads, seq, head_dim],
                           "baseline_fwd": base_f, "baseline_grad": base_g, "backends": {}}
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        SDPBackend = sdpa_kernel = None
    names = ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"]
    # torch says itself why a fused kernel is off (AOTriton's experimental archs, a build without this arch):
    # keep its warnings, they are the authority on the arch sets of the AOTriton it ships
    import warnings

    caught = warnings.catch_warnings(record=True)
    seen = caught.__enter__()
    warnings.simplefilter("always")
    for name in names:
        entry: dict[str, Any] = {}
        if sdpa_kernel is None or not hasattr(SDPBackend, name):
            entry["status"] = "unavailable"
        else:
            try:
                with sdpa_kernel([getattr(SDPBackend, name)]):
                    o, grads = run(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True), qd, kd, vd)
                f_err, g_err = err(o, grads)
                finite = bool(torch.isfinite(o).all()) and all(bool(torch.isfinite(x).all()) for x in grads)
                ok = finite and f_err <= 2 * base_f + 1e-3 and all(
                    ge <= 10 * bg + 1e-3 for ge, bg in zip(g_err, base_g, strict=True))
                entry = {"status": "ok" if ok else "wrong", "fwd_err": f_err, "grad_err": g_err, "finite": finite}
            except RuntimeError as e:
                msg = str(e).splitlines()[0][:300]
                unavailable = any(m in msg for m in ("No viable backend", "No available kernel", "not supported",
                                                     "not compiled", "not enabled", "not available"))
                entry = {"status": "unavailable" if unavailable else "error", "error": msg}
        out["backends"][name] = entry
    caught.__exit__(None, None, None)
    out["sdpa_warnings"] = list(dict.fromkeys(
        str(w.message)[:300] for w in seen
        if any(k in str(w.message) for k in ("experimental", "not compiled", "attention", "AOTriton", "Ignoring"))))[:6]
    out["cases"] = _training_cases(q, k, v, dout, dt, rep, run)
    # the flash_attn package (what `flash_attn: fa2` uses)
    fa_fn = None
    try:
        import flash_attn  # noqa: F401
        from flash_attn import flash_attn_func

        out["flash_attn_version"] = getattr(flash_attn, "__version__", "?")
        out["flash_attn_backend"] = _fa_backend()
        if dev != "cuda":
            out["flash_attn"] = {"status": "unavailable", "error": "no GPU"}
        else:
            def fa(a, b, c):  # flash_attn takes (b, s, h, d) and does GQA itself
                return flash_attn_func(a.transpose(1, 2), b.transpose(1, 2), c.transpose(1, 2),
                                       causal=True).transpose(1, 2)
            try:
                o, grads = run(fa, qd, kd, vd)
                f_err, g_err = err(o, grads)
                finite = bool(torch.isfinite(o).all())
                ok = finite and f_err <= 2 * base_f + 1e-3 and all(
                    ge <= 10 * bg + 1e-3 for ge, bg in zip(g_err, base_g, strict=True))
                out["flash_attn"] = {"status": "ok" if ok else "wrong", "fwd_err": f_err, "grad_err": g_err}
                fa_fn = fa
            except Exception as e:
                out["flash_attn"] = {"status": "error", "error": f"{type(e).__name__}: {str(e)[:300]}"}
    except ImportError as e:
        out["flash_attn"] = {"status": "not_installed" if "No module named 'flash_attn'" in str(e) else "error",
                             "error": str(e)[:300]}
    except Exception as e:  # an ABI mismatch can raise other errors at import
        out["flash_attn"] = {"status": "error", "error": f"{type(e).__name__}: {str(e)[:300]}"}
    if fa_fn is not None:
        out["cases"]["large_flash_attn"] = _large_case(q, k, v, dout, dt, rep, run, fa_fn)
        sdpa_ok = all(c.get("status") == "ok" for c in out["cases"].values() if c.get("kind") == "sdpa")
        if sdpa_ok:
            out["timing_ms"] = _time_both(qd, kd, vd, dout, rep, fa_fn)
    return out


def _compare(o: Any, grads: list[Any], ref: tuple[Any, list[Any]], low: tuple[Any, list[Any]]) -> dict[str, Any]:
    """flash-attn's rule against an fp32 reference: forward error <= 2x, gradients <= 10x the error of the same
    math in the low precision dtype; non-finite is wrong."""
    import torch

    f = float((o - ref[0]).detach().abs().max())
    g = [float((a - b).detach().abs().max()) for a, b in zip(grads, ref[1], strict=True)]
    bf = float((low[0] - ref[0]).detach().abs().max())
    bg = [float((a - b).detach().abs().max()) for a, b in zip(low[1], ref[1], strict=True)]
    finite = bool(torch.isfinite(o).all()) and all(bool(torch.isfinite(x).all()) for x in grads)
    ok = finite and f <= 2 * bf + 1e-3 and all(x <= 10 * y + 1e-3 for x, y in zip(g, bg, strict=True))
    return {"status": "ok" if ok else "wrong", "fwd_err": f, "grad_err": g, "baseline_fwd": bf, "finite": finite}


def _masked_ref(mask: Any) -> Any:
    def ref(q: Any, k: Any, v: Any) -> Any:
        scores = (q @ k.transpose(-1, -2)) / (q.shape[-1] ** 0.5)
        return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v
    return ref


def _training_cases(q: Any, k: Any, v: Any, dout: Any, dt: Any, rep: int, run: Any) -> dict[str, Any]:
    """SDPA as training reaches it: with a padded attention mask (HF's path without packing: the last quarter of
    one sequence is padding) and with large-magnitude inputs (logits of a trained model), in the default
    dispatch torch picks."""
    import torch
    import torch.nn.functional as F

    cases: dict[str, Any] = {}
    b, _, s, _ = q.shape
    mask = torch.ones(b, 1, s, s, dtype=torch.bool, device=q.device).tril()
    mask[0, :, :, (3 * s) // 4:] = False
    mask[0, :, :, 0] = True  # every query row keeps a key (a fully masked row is NaN in any kernel)
    try:
        ref = run(_masked_ref(mask), *(t.to(dt).float() for t in (q, k, v)))
        low = run(_masked_ref(mask), *(t.to(dt) for t in (q, k, v)))
        o, grads = run(lambda a, bb, c: F.scaled_dot_product_attention(a, bb, c, attn_mask=mask), *(t.to(dt) for t in (q, k, v)))
        cases["padded_mask"] = {"kind": "sdpa", **_compare(o, grads, ref, low)}
    except RuntimeError as e:
        cases["padded_mask"] = {"kind": "sdpa", "status": "error", "error": str(e).splitlines()[0][:300]}
    big = [t * 12 for t in (q, k)] + [v]
    try:
        ref = run(_attn_ref, *(t.to(dt).float() for t in big))
        low = run(_attn_ref, *(t.to(dt) for t in big))
        o, grads = run(lambda a, bb, c: F.scaled_dot_product_attention(a, bb, c, is_causal=True), *(t.to(dt) for t in big))
        cases["large_values"] = {"kind": "sdpa", **_compare(o, grads, ref, low)}
    except RuntimeError as e:
        cases["large_values"] = {"kind": "sdpa", "status": "error", "error": str(e).splitlines()[0][:300]}
    return cases


def _large_case(q: Any, k: Any, v: Any, dout: Any, dt: Any, rep: int, run: Any, fa: Any) -> dict[str, Any]:
    big = [t * 12 for t in (q, k)] + [v]
    try:
        ref = run(_attn_ref, *(t.to(dt).float() for t in big))
        low = run(_attn_ref, *(t.to(dt) for t in big))
        o, grads = run(fa, *(t.to(dt) for t in big))
        return {"kind": "flash_attn", **_compare(o, grads, ref, low)}
    except Exception as e:
        return {"kind": "flash_attn", "status": "error", "error": f"{type(e).__name__}: {str(e)[:300]}"}


def _time_both(qd: Any, kd: Any, vd: Any, dout: Any, rep: int, fa: Any, iters: int = 10) -> dict[str, float]:
    """Forward + backward per call at the model's shape: SDPA's default dispatch vs flash_attn."""
    import torch
    import torch.nn.functional as F

    def bench(fn: Any, kk: Any, vv: Any) -> float:
        qq, kk, vv = (t.detach().clone().requires_grad_(True) for t in (qd, kk, vv))
        for i in range(iters + 2):
            if i == 2:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
            o = fn(qq, kk, vv)
            o.backward(dout.to(o.dtype))
        torch.cuda.synchronize()
        return round((time.perf_counter() - t0) / iters * 1000, 3)

    sdpa = bench(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True),
                 kd.repeat_interleave(rep, 1), vd.repeat_interleave(rep, 1))
    return {"sdpa": sdpa, "flash_attn": bench(fa, kd.repeat_interleave(rep, 1), vd.repeat_interleave(rep, 1))}


def _fa_backend() -> str:
    """Which flash-attn kernels a call will reach: on ROCm CK (the compiled ``flash_attn_2_cuda``) or
    Triton, chosen at run time by FLASH_ATTENTION_TRITON_AMD_ENABLE == "TRUE" exactly (recent versions
    fall back to Triton when the CK extension is missing); on CUDA the compiled extension."""
    import importlib.util
    import os

    import torch

    has_ext = importlib.util.find_spec("flash_attn_2_cuda") is not None
    if not torch.version.hip:
        return "cuda" if has_ext else "missing extension"
    if os.environ.get("FLASH_ATTENTION_TRITON_AMD_ENABLE", "FALSE") == "TRUE":
        return "triton"
    return "ck" if has_ext else "triton (no CK extension: fallback)"


def probe_bnb() -> dict[str, Any]:
    """bitsandbytes: backend, whether the native library really loaded, and a real NF4 round trip."""
    import importlib.metadata as md

    out: dict[str, Any] = {}
    try:
        out["version"] = md.version("bitsandbytes")
    except md.PackageNotFoundError:
        return {"installed": False}
    out["installed"] = True
    try:
        import bitsandbytes as bnb
        from bitsandbytes import cextension as ce
    except Exception as e:
        out["import_error"] = f"{type(e).__name__}: {str(e)[:400]}"
        return out
    lib = getattr(ce, "lib", None)
    out["backend"] = getattr(ce, "BNB_BACKEND", None)
    out["hip_environment"] = getattr(ce, "HIP_ENVIRONMENT", None)
    out["lib_class"] = type(lib).__name__ if lib is not None else None
    out["lib_mock"] = out["lib_class"] == "ErrorHandlerMockBNBNativeLibrary"
    out["compiled_with_cuda"] = bool(getattr(lib, "compiled_with_cuda", False))
    for attr in ("_name", "name"):
        libobj = getattr(lib, "_lib", None)
        if libobj is not None and getattr(libobj, attr, None):
            out["lib_path"] = str(getattr(libobj, attr))
            break
    import torch

    if not torch.cuda.is_available():
        out["device"] = "cpu"
        return out
    out["device"] = "cuda"
    try:
        import bitsandbytes.functional as bf

        g = torch.Generator(device="cuda").manual_seed(3)
        w = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16, generator=g)
        qw, state = bf.quantize_4bit(w, quant_type="nf4")
        deq = bf.dequantize_4bit(qw, state)
        out["nf4_rel_err"] = float((deq.float() - w.float()).norm() / w.float().norm())
        lin = bnb.nn.Linear4bit(1024, 1024, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4")
        lin.weight = bnb.nn.Params4bit(w.cpu(), requires_grad=False, quant_type="nf4")
        lin = lin.cuda()
        x = torch.randn(4, 1024, device="cuda", dtype=torch.bfloat16, generator=g)
        y = lin(x)
        ref = torch.nn.functional.linear(x.float(), bf.dequantize_4bit(lin.weight.data, lin.weight.quant_state).float())
        out["linear4bit_rel_err"] = float((y.float() - ref).norm() / ref.norm())
        out["linear4bit_finite"] = bool(torch.isfinite(y).all())
    except Exception as e:
        out["op_error"] = f"{type(e).__name__}: {str(e)[:400]}"
    return out
