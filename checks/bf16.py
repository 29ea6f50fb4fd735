"""BF16 matrix cores: a bf16 GEMM against an fp32 reference and its TFLOP/s against the SKU's peak.

The probe (``doctor.probes.kernels.probe_bf16``) runs in the device worker; the verdict here is a pure
function of its result, tested with injected faults on the CPU.
"""

from __future__ import annotations

from typing import Any

from doctor import archs
from doctor.context import Context
from doctor.findings import Code, Finding, Severity
from doctor.registry import check, probe_data
from doctor.worker import ProbeSpec

AREA = "bf16"
SLOW_FRACTION = 0.25  # below this fraction of the SKU's peak the BLAS path is suspect

BF16000 = Code(
    AREA, "BF16000", Severity.OK, 'BF16 matrix cores healthy',
    why='A bf16 GEMM matches the fp32 reference and runs at a plausible rate.',
    fix='Nothing to do.',
)

BF16001 = Code(
    AREA, "BF16001", Severity.ERROR, 'bf16 requested on a GPU without BF16 matrix cores',
    why='`torch.cuda.is_bf16_supported()` is hard-coded True on ROCm, so nothing upstream refuses `bf16: '
        'true` on gfx906 (MI50/MI60/Radeon VII): it emulates bf16 on the vector units, many times slower.',
    fix='Use `fp16: true` instead of bf16 on this GPU.',
    playbook='bf16-to-fp16', autofix=True,
)

BF16002 = Code(
    AREA, "BF16002", Severity.ERROR, 'bf16 GEMM gives wrong results',
    why='The bf16 matrix product differs from the fp32 reference beyond bf16 rounding (or is NaN): a broken '
        'BLAS library or kernel.',
    fix='Try TORCH_BLAS_PREFER_HIPBLASLT=0 (hipBLAS) and report the evidence; train in fp16/fp32 meanwhile.',
    playbook='bf16-to-fp16', autofix=False,
)

BF16003 = Code(
    AREA, "BF16003", Severity.WARNING, "bf16 GEMM far below the GPU's peak",
    why="Achieved TFLOP/s is a small fraction of the SKU's dense BF16 peak: a slow BLAS path (hipBLAS "
        'instead of hipBLASLt), a throttled or shared GPU.',
    fix='Check the BLAS backend in the evidence and that the GPU is idle; TORCH_BLAS_PREFER_HIPBLASLT=1 on '
        'MI200/MI300.',
)

BF16004 = Code(
    AREA, "BF16004", Severity.INFO, 'bf16 probed on the CPU only',
    why='No GPU is visible; the bf16 numerics were checked on the CPU.',
    fix='Nothing to do.',
)

BF16005 = Code(
    AREA, "BF16005", Severity.ERROR, 'Mixed precision requested but torch sees no GPU',
    why='bf16/fp16 training needs a GPU; with none visible (a CPU torch wheel, no /dev/kfd access, '
        'HIP_VISIBLE_DEVICES=-1, a container started without the devices) transformers refuses the config.',
    fix='Fix GPU visibility first (the torch findings say why); to train on the CPU on purpose, set '
        '`use_cpu: true` and drop bf16/fp16.',
)

CODES = (BF16000, BF16001, BF16002, BF16003, BF16004, BF16005)


def judge_bf16(data: dict[str, Any], arch: str | None, bf16_requested: bool,
               precision: str | None = None, use_cpu: bool = False) -> list[Finding]:
    out: list[Finding] = []
    if precision and data.get("device") == "cpu" and not use_cpu:
        out.append(BF16005.finding(f"`{precision}: true` but torch sees no GPU",
                        "transformers stops with `Your setup doesn't support bf16/gpu. You need to assign use_cpu "
                        "if you want to train the model on CPU.` (fp16: `fp16 mixed precision requires a GPU`).",
                        precision=precision))
    if bf16_requested and archs.has_bf16_matrix(arch) is False:
        out.append(BF16001.finding(f"`bf16: true` on {arch}, which has no BF16 matrix cores",
                        "torch.cuda.is_bf16_supported() says True on every ROCm GPU; this one emulates bf16.",
                        arch=arch))
    if data.get("nonfinite") or data.get("rel_err", 0) > 1e-2:
        out.append(BF16002.finding(f"bf16 GEMM error {data.get('rel_err'):.2e} vs fp32 reference"
                        + (" (NaN/Inf)" if data.get("nonfinite") else ""), "Expected below 1e-2.", **data))
    if data.get("device") == "cpu":
        if not out:
            out.append(BF16004.finding(f"bf16 numerics ok on the CPU (rel err {data['rel_err']:.1e})", "", **data))
        return out
    peak, verified = archs.peak_for(data.get("name"))
    frac = data["tflops"] / peak if peak else None
    ev = dict(data, peak_tflops=peak, peak_verified=verified, fraction_of_peak=round(frac, 3) if frac else None)
    if frac is not None and frac < SLOW_FRACTION:
        out.append(BF16003.finding(f"bf16 GEMM {data['tflops']} TFLOP/s = {frac:.0%} of {data.get('name')}'s "
                        f"{peak} peak", f"BLAS backend: {data.get('blas')}.", **ev))
    pct = f", {frac:.0%} of peak {peak}{'' if verified else ' (unverified)'}" if frac else ""
    if not out:
        out.append(BF16000.finding(f"bf16 GEMM n={data['n']}: {data['tflops']} TFLOP/s{pct}, "
                                   f"rel err {data['rel_err']:.1e}", "", **ev))
    return out


def _probes(ctx: Context) -> list[ProbeSpec]:
    return [ProbeSpec("bf16", "doctor.probes.kernels", "probe_bf16", timeout=min(60, ctx.options.timeout),
                      cache="nogpu")]


@check(AREA, probes=_probes, needs=("torch",), order=40)
def bf16(ctx: Context) -> list[Finding]:
    data, fails = probe_data(ctx, "bf16", AREA)
    if data is None:
        return fails
    arch = (ctx.probes["torch"].data.get("devices") or [{}])[0].get("arch")
    precision = next((k for k in ("bf16", "pure_bf16", "fp16") if ctx.cfg(k) is True), None)
    return judge_bf16(data, arch, bool(ctx.cfg("bf16") or ctx.cfg("pure_bf16")), precision,
                      bool(ctx.cfg("use_cpu")))
