"""GPU architecture facts: BF16 matrix hardware and per-SKU peak dense BF16 TFLOP/s.

Sources: ../shared/reference/rocm-and-llamafactory-facts.md §3. ``verified`` marks figures seen in
a retrieved source (MI300X 1307.4, the NVIDIA datasheet for H100/H200); the others are AMD
spec-sheet values cross-checked as CUs × clock × FLOPs/clk/CU, to be confirmed on amd.com.
"""

from __future__ import annotations

import re

# gfx -> matrix hardware for bf16 (facts §3: gfx906 has no matrix cores, gfx908 half-rate MFMA, RDNA3/4 WMMA;
# RDNA1/2 and the GCN/Vega iGPUs have none)
MATRIX = {
    "gfx803": "none", "gfx900": "none", "gfx902": "none", "gfx906": "none", "gfx909": "none", "gfx90c": "none",
    "gfx908": "mfma-half", "gfx90a": "mfma", "gfx940": "mfma", "gfx941": "mfma", "gfx942": "mfma", "gfx950": "mfma",
    "gfx1010": "none", "gfx1011": "none", "gfx1012": "none", "gfx1013": "none",
    "gfx1030": "none", "gfx1031": "none", "gfx1032": "none", "gfx1033": "none", "gfx1034": "none", "gfx1035": "none",
    "gfx1036": "none", "gfx1037": "none",
    "gfx1100": "wmma", "gfx1101": "wmma", "gfx1102": "wmma", "gfx1103": "wmma", "gfx1150": "wmma",
    "gfx1151": "wmma", "gfx1152": "wmma", "gfx1153": "wmma", "gfx1200": "wmma", "gfx1201": "wmma",
}

# (substring of the device name as torch reports it, peak dense bf16 TFLOP/s per device, verified, note).
# First match wins: the PCIe/NVL variants come before the SXM name they contain. NVIDIA figures are the
# datasheets' dense (non-sparse) BF16 tensor rates; AMD's are spec-sheet values (see the module docs).
PEAKS: list[tuple[str, float, bool, str]] = [
    ("MI300X", 1307.4, True, ""), ("MI325X", 1307.4, False, ""), ("MI300A", 980.6, False, ""),
    ("MI355X", 2516.6, False, ""), ("MI350X", 2307.0, False, ""),
    # torch names both "AMD Instinct MI250X/MI250": the MI250X figure (per GCD, one device each) is assumed
    ("MI250X/MI250", 191.5, False, "torch reports MI250X and MI250 alike; assumed MI250X (MI250: 181.0)"),
    ("MI250X", 191.5, False, "per GCD"), ("MI250", 181.0, False, "per GCD"), ("MI210", 181.0, False, ""),
    ("MI100", 92.3, False, ""), ("MI60", 0.0, False, "no BF16 matrix cores"), ("MI50", 0.0, False, "no BF16 matrix cores"),
    ("7900 XTX", 122.8, False, ""), ("7900 XT", 103.0, False, ""), ("7900 GRE", 91.9, False, ""),
    ("W7900", 122.6, False, ""), ("W7800", 90.5, False, ""),
    ("7800 XT", 74.6, False, ""), ("7700 XT", 70.3, False, ""), ("W7700", 56.7, False, ""), ("7600", 43.5, False, ""),
    ("9070 XT", 194.7, False, ""), ("9070", 144.5, False, ""), ("9060 XT", 102.6, False, ""), ("R9700", 191.0, False, ""),
    ("H100 PCIe", 756.0, True, ""), ("H100 NVL", 835.5, True, ""), ("H200 NVL", 835.5, True, ""),
    ("H200", 989.4, True, ""), ("H100", 989.4, True, ""), ("H800", 989.4, False, ""),
    ("A100", 312.0, True, ""), ("A800", 312.0, False, ""), ("L40S", 362.1, True, ""), ("B200", 2250.0, True, ""),
]

# consumer integrated GPUs: the GPU of an APU (Vega/RDNA iGPUs); its "VRAM" is a BIOS carve-out and the
# memory it really uses is system memory through GTT. MI300A is an APU too, but its HBM is what it reports.
# Instinct (datacenter) archs: OAM modules on XGMI from MI250 on; MI100/MI210 are PCIe cards
INSTINCT = {"gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"}
_OAM_NAME = re.compile(r"MI250|MI300X|MI308|MI325|MI35\d", re.I)


def is_oam(name: str | None) -> bool:
    """An OAM module whose peers talk over XGMI (MI250/MI250X, MI300X/MI325X, MI350X/MI355X), not a PCIe card."""
    return bool(_OAM_NAME.search(name or ""))


INTEGRATED = {"gfx801", "gfx810", "gfx902", "gfx909", "gfx90c", "gfx1013", "gfx1033", "gfx1035", "gfx1036", "gfx1037",
              "gfx1103", "gfx1150", "gfx1151", "gfx1152", "gfx1153"}
_IGPU_NAME = re.compile(r"^(?:AMD )?Radeon(?:\(TM\))? Graphics$|Radeon \d{3}M\b|Radeon 80[56]0S|\b(?:Raphael|Phoenix\d?|"
                        r"Rembrandt|Cezanne|Renoir|Lucienne|Picasso|Raven|Strix|Krackan|Granite Ridge|Barcelo|"
                        r"Mendocino|Van ?Gogh|Hawk Point)\b|Vega \d+ Graphics", re.I)


def is_integrated(arch: str | None, name: str | None = None, has_cpu_cores: bool = False) -> bool:
    """An iGPU: by its gfx target, its name (a tool may report "AMD Radeon Graphics" or a codename), or a
    KFD node that also has CPU cores."""
    a = (arch or "").split(":")[0]
    if "MI300A" in (name or ""):
        return False
    return a in INTEGRATED or bool(_IGPU_NAME.search((name or "").strip())) or (has_cpu_cores and a != "gfx942")


def peak_for(name: str | None) -> tuple[float | None, bool]:
    peak, verified, _ = peak_with_note(name)
    return peak, verified


def peak_with_note(name: str | None) -> tuple[float | None, bool, str]:
    for key, peak, verified, note in PEAKS:
        if name and key.lower() in name.lower():
            return (peak or None), verified, note
    return None, False, ""


def has_bf16_matrix(arch: str | None) -> bool | None:
    m = MATRIX.get((arch or "").split(":")[0])
    if m is None:
        return None
    return m != "none"


# AOTriton (the SDPA flash / mem-efficient kernels of ROCm torch): which archs are "experimental" (off unless
# TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 exactly) depends on the AOTriton version torch ships
# (facts §4, read at each release tag of ROCm/aotriton v2src/v3src util.cc). The attention probe asks torch
# itself first (its own warning names the arch); this table answers when only the version is known.
AOTRITON_EXPERIMENTAL_BY_VERSION: list[tuple[tuple[int, ...], set[str]]] = [
    ((0, 9), {"gfx950", "gfx1201"}),
    ((0, 10), {"gfx1150", "gfx1151", "gfx1101", "gfx1200", "gfx1250"}),
    ((0, 11), {"gfx1150", "gfx1151", "gfx1100", "gfx1101", "gfx1102", "gfx1200", "gfx1250"}),
    ((0, 11, 1), {"gfx1150", "gfx1151", "gfx1101", "gfx1102", "gfx1103", "gfx1200", "gfx1250"}),
    ((0, 11, 2), {"gfx1150", "gfx1151", "gfx1101", "gfx1102", "gfx1103", "gfx1152", "gfx1153", "gfx1200", "gfx1250"}),
    ((0, 12), {"gfx1150", "gfx1101", "gfx1102", "gfx1103", "gfx1152", "gfx1153", "gfx1200", "gfx1250"}),
    ((0, 13), {"gfx1150", "gfx1152", "gfx1153", "gfx1101", "gfx1102", "gfx1103", "gfx1200"}),
]


def aotriton_experimental(version: str | None) -> set[str] | None:
    """The experimental arch set of an AOTriton version (None: version unknown)."""
    v = _ver(version) if version else None
    if not v or v < (0, 9):
        return None
    found = None
    for since, archs in AOTRITON_EXPERIMENTAL_BY_VERSION:
        if v >= since:
            found = archs
    return set(found) if found is not None else None



# flash-attn's CK backend (ROCm): the archs its setup.py allows (facts §5.1). RDNA 3/4 arrived after the
# v2.8.3 tag (commit 5301a359, 2026-03-26); HEAD says 2.8.4. The Triton backend covers CDNA and RDNA.
_FA_CK_27 = {"gfx90a", "gfx940", "gfx941", "gfx942"}
_FA_CK_28 = {"gfx90a", "gfx942", "gfx950"}
_FA_CK_RDNA = {"gfx1100", "gfx1101", "gfx1102", "gfx1150", "gfx1151", "gfx1200", "gfx1201"}
FA_CK_MAX_HEAD_DIM = 256  # csrc/flash_attn_ck/mha_fwd.cpp: "CK only supports head dimension at most 256"


def _ver(v: str | None) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", (v or "0").split("+")[0])[:3])


def fa_ck_archs(version: str | None) -> set[str]:
    """GPU archs the flash-attn CK backend of this version is built for."""
    v = _ver(version)
    if v < (2, 8):
        return set(_FA_CK_27)
    if v < (2, 8, 4):
        return set(_FA_CK_28)
    return _FA_CK_28 | _FA_CK_RDNA
