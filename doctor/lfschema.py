"""Cached schemas of LLaMA-Factory's training arguments, keyed by its version.

``check --quick`` and machines without llamafactory lint against these. The bundled one for
0.9.5 is generated from the real dataclasses (``python -m doctor.lfschema``); a full ``check``
refreshes the user cache for whatever version is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

BUNDLED_DIR = Path(__file__).resolve().parent / "data"
DEFAULT_VERSION = "0.9.5"


def cache_dir() -> Path:
    return Path(os.environ.get("ROCM_DOCTOR_CACHE") or Path.home() / ".cache" / "rocm-doctor")


def installed_version(python: str, quick: bool = False) -> str | None:
    """llamafactory's version in the examined Python, from metadata (no import)."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        import importlib.metadata as md

        try:
            return md.version("llamafactory")
        except md.PackageNotFoundError:
            return None
    try:
        p = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('llamafactory'))"],
                           capture_output=True, text=True, timeout=10)
        return p.stdout.strip() or None if p.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


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


if __name__ == "__main__":  # regenerate the bundled schema from the installed llamafactory
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from checks.lf_probes import probe_lf_schema

    s = probe_lf_schema()
    out = BUNDLED_DIR / f"lf-schema-{s['llamafactory']}.json"
    out.write_text(json.dumps(s, sort_keys=True, indent=0), encoding="utf-8")
    print(out)
