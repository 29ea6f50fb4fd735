"""Where rocm-doctor keeps what it may reuse between runs (``ROCM_DOCTOR_CACHE``, else
``~/.cache/rocm-doctor``): LLaMA-Factory schemas by version, the tokenizer files the demo may use."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(env: dict[str, str] | None = None) -> Path:
    e = os.environ if env is None else env
    return Path(e.get("ROCM_DOCTOR_CACHE") or Path(e.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rocm-doctor")
