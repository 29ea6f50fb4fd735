"""GPU architecture facts: BF16 matrix hardware and per-SKU peak dense BF16 TFLOP/s.

Sources: ../shared/reference/rocm-and-llamafactory-facts.md §3. ``verified`` marks figures seen in
a retrieved source (MI300X 1307.4, the NVIDIA datasheet for H100/H200); the others are AMD
spec-sheet values cross-checked as CUs × clock × FLOPs/clk/CU, to be confirmed on amd.com.
"""

from __future__ import annotations

# gfx -> matrix hardware for bf16
MATRIX = {
    "gfx906": "none", "gfx900": "none", "gfx908": "mfma-half", "gfx90a": "mfma", "gfx940": "mfma",
    "gfx941": "mfma", "gfx942": "mfma", "gfx950": "mfma",
    "gfx1100": "wmma", "gfx1101": "wmma", "gfx1102": "wmma", "gfx1103": "wmma", "gfx1150": "wmma",
    "gfx1151": "wmma", "gfx1200": "wmma", "gfx1201": "wmma",
    "gfx1030": "none", "gfx1031": "none", "gfx1032": "none", "gfx1010": "none",
}

# (substring of the device name, peak dense bf16 TFLOP/s per device as torch sees it, verified)
PEAKS: list[tuple[str, float, bool]] = [
    ("MI300X", 1307.4, True), ("MI325X", 1307.4, False), ("MI300A", 980.6, False),
    ("MI355X", 2516.6, False), ("MI350X", 2307.0, False),
    ("MI250X", 191.5, False), ("MI250", 181.0, False), ("MI210", 181.0, False),  # MI250/X: per GCD
    ("MI100", 92.3, False),
    ("7900 XTX", 122.8, False), ("7900 XT", 103.0, False), ("W7900", 122.6, False),
    ("7800 XT", 74.6, False), ("7700 XT", 70.3, False), ("7600", 43.5, False),
    ("9070 XT", 194.7, False), ("9070", 144.5, False), ("R9700", 191.0, False),
    ("H200", 989.4, True), ("H100", 989.4, True), ("A100", 312.0, True),
]


def peak_for(name: str | None) -> tuple[float | None, bool]:
    for key, peak, verified in PEAKS:
        if name and key.lower() in name.lower():
            return peak, verified
    return None, False


def has_bf16_matrix(arch: str | None) -> bool | None:
    m = MATRIX.get((arch or "").split(":")[0])
    if m is None:
        return None
    return m != "none"


AOTRITON_COMPILED = {"gfx90a", "gfx942", "gfx1100", "gfx1101", "gfx950", "gfx1201", "gfx1151"}
AOTRITON_EXPERIMENTAL = {"gfx950", "gfx1151", "gfx1201", "gfx1100", "gfx1101"}

# flash-attn's CK backend (ROCm): the archs its setup.py allows (facts §5.1). RDNA 3/4 arrived after the
# v2.8.3 tag (commit 5301a359, 2026-03-26); HEAD says 2.8.4. The Triton backend covers CDNA and RDNA.
_FA_CK_27 = {"gfx90a", "gfx940", "gfx941", "gfx942"}
_FA_CK_28 = {"gfx90a", "gfx942", "gfx950"}
_FA_CK_RDNA = {"gfx1100", "gfx1101", "gfx1102", "gfx1150", "gfx1151", "gfx1200", "gfx1201"}
FA_CK_MAX_HEAD_DIM = 256  # csrc/flash_attn_ck/mha_fwd.cpp: "CK only supports head dimension at most 256"


def _ver(v: str | None) -> tuple[int, ...]:
    import re

    return tuple(int(x) for x in re.findall(r"\d+", (v or "0").split("+")[0])[:3])


def fa_ck_archs(version: str | None) -> set[str]:
    """GPU archs the flash-attn CK backend of this version is built for."""
    v = _ver(version)
    if v < (2, 8):
        return set(_FA_CK_27)
    if v < (2, 8, 4):
        return set(_FA_CK_28)
    return _FA_CK_28 | _FA_CK_RDNA
