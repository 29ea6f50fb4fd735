"""Regenerate the bundled LLaMA-Factory schema (doctor/data/lf-schema-<version>.json) from the installed
llamafactory, with the same probe a full ``check`` runs: ``python scripts/regen_lf_schema.py``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from doctor.lfschema import BUNDLED_DIR  # noqa: E402
from doctor.probes.llamafactory import probe_lf_schema  # noqa: E402

if __name__ == "__main__":
    s = probe_lf_schema()
    out = BUNDLED_DIR / f"lf-schema-{s['llamafactory']}.json"
    out.write_text(json.dumps(s, sort_keys=True, indent=0), encoding="utf-8")
    print(out)
