"""What LLaMA-Factory accepts: cached schemas of its training arguments, keyed by its version, and
the story behind keys people copy from guides.

``check --quick`` and machines without llamafactory lint against the schemas. The bundled one for
0.9.5 is generated from the real dataclasses (``python scripts/regen_lf_schema.py``); a full
``check`` refreshes the user cache for whatever version is installed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from doctor.cache import cache_dir
from doctor.stack import package_versions

BUNDLED_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_VERSION = "0.9.5"

# Keys people copy from guides or older versions, with the real story: (rename target or None, note).
KEY_NOTES: dict[str, tuple[str | None, str]] = {
    "device_map": (None, "LLaMA-Factory derives device_map itself ({'': current device}) for training; "
                         "do not specify it. Multi-GPU goes through torchrun (llamafactory-cli does it), not device_map."),
    "evaluation_strategy": ("eval_strategy", "renamed to `eval_strategy` in transformers (the old name was removed)."),
    "disable_flash_attn": (None, "no such option in LLaMA-Factory; use `flash_attn: disabled` (or sdpa)."),
    "use_flash_attention_2": (None, "not a LLaMA-Factory key; use `flash_attn: fa2`."),
    "attn_implementation": (None, "not a LLaMA-Factory key; use `flash_attn: auto|sdpa|fa2|disabled`."),
    "load_in_4bit": (None, "not a LLaMA-Factory key; use `quantization_bit: 4`."),
    "load_in_8bit": (None, "not a LLaMA-Factory key; use `quantization_bit: 8`."),
    "max_length": ("cutoff_len", "LLaMA-Factory calls the sequence length `cutoff_len`."),
    "max_seq_length": ("cutoff_len", "LLaMA-Factory calls the sequence length `cutoff_len`."),
    "torch_dtype": (None, "not a training key; precision is `bf16: true` / `fp16: true`."),
    "lora_r": ("lora_rank", "LLaMA-Factory calls it `lora_rank`."),
    "lora_target_modules": ("lora_target", "LLaMA-Factory calls it `lora_target`."),
    "model_name": ("model_name_or_path", "LLaMA-Factory calls it `model_name_or_path`."),
}

RENAMES: dict[str, str] = {k: v[0] for k, v in KEY_NOTES.items() if v[0]}


def installed_version(python: str) -> str | None:
    """llamafactory's version in the examined Python, from metadata (no import)."""
    return package_versions(python, ("llamafactory",)).get("llamafactory")


def load(version: str | None) -> tuple[dict[str, Any] | None, str]:
    """Schema for ``version`` from the user cache or the bundle; the bundled default otherwise."""
    for v in ([version] if version else []) + [DEFAULT_VERSION]:
        for base, label in ((cache_dir(), "cached"), (BUNDLED_DIR, "bundled")):
            f = base / f"lf-schema-{v}.json"
            if f.is_file():
                try:
                    data = json.loads(f.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
                note = "" if v == version or not version else f" (llamafactory {version} installed)"
                return data, f"{label} llamafactory {v}{note}"
    return None, "none"


def save_cache(schema: dict[str, Any]) -> None:
    v = schema.get("llamafactory")
    if not v:
        return
    try:
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".lf-schema-{v}.json.tmp"
        tmp.write_text(json.dumps(schema, sort_keys=True, indent=0), encoding="utf-8")
        tmp.replace(d / f"lf-schema-{v}.json")
    except OSError:
        pass  # a read-only home must not fail a check


def known_fields(version: str | None = DEFAULT_VERSION) -> set[str] | None:
    """The training-argument names of a schema (the bundled one by default); None when none is known."""
    schema, _ = load(version)
    return set((schema or {}).get("fields", {})) or None
