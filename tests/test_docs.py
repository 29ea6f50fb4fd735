"""Every finding id is documented, and the docs are generated from the registry (no drift)."""

import re
from pathlib import Path

from doctor.codes import CODES, markdown_page, markdown_table

ROOT = Path(__file__).resolve().parent.parent


def test_readme_table_and_docs_page_in_sync():
    assert markdown_table() in (ROOT / "README.md").read_text()
    assert (ROOT / "docs" / "codes.md").read_text().strip() == markdown_page().strip()


def test_every_emitted_id_is_registered_and_every_registered_id_is_emitted():
    src = "\n".join(p.read_text() for d in ("doctor", "checks", "playbooks") for p in (ROOT / d).rglob("*.py")
                    if p.name != "codes.py")
    areas = "|".join(sorted({re.match(r"[A-Z]+(?:16)?", c).group(0) for c in CODES}))
    emitted = set(re.findall(rf'"((?:{areas})\d{{3}})"', src))
    assert emitted <= set(CODES), emitted - set(CODES)
    assert set(CODES) - emitted == set(), f"registered but never emitted: {sorted(set(CODES) - emitted)}"
