"""Every finding id is documented beside the check that emits it, and the docs are generated from those
declarations (no drift)."""

import importlib
import re
from pathlib import Path

from doctor import codes, runner
from doctor.findings import Code

ROOT = Path(__file__).resolve().parent.parent


def test_readme_table_and_docs_page_in_sync():
    assert codes.markdown_table() in (ROOT / "README.md").read_text()
    assert (ROOT / "docs" / "codes.md").read_text().strip() == codes.markdown_page().strip()


def test_each_area_module_declares_its_own_codes():
    for name in runner.CHECK_MODULES:
        mod = importlib.import_module(name)
        declared = [v for k, v in vars(mod).items() if isinstance(v, Code)]
        assert declared, name
        assert set(declared) == set(mod.CODES), f"{name}: a Code object missing from CODES"
        for c in declared:
            assert getattr(mod, c.id) is c, f"{name}: {c.id} is not bound to its own id"
            assert c.area == mod.AREA, c.id
            assert c.why and c.fix, f"{c.id} lacks its why/fix docs"


def test_every_declared_id_is_emitted():
    """A documented id that no code path can produce is dead documentation: each Code must be used
    somewhere besides its declaration and its module's CODES tuple."""
    src = "\n".join(p.read_text() for d in ("doctor", "checks", "playbooks") for p in (ROOT / d).rglob("*.py"))
    src = re.sub(r"^CODES = \(.*?\)$", "", src, flags=re.M | re.S)
    for c in codes.all_codes():
        uses = len(re.findall(rf"\b{c.id}\b(?!\s*=\s*Code\()", src)) - len(re.findall(rf'"{c.id}"', src))
        assert uses >= 1, f"{c.id} is declared but never emitted"


def test_no_finding_is_built_from_a_bare_id():
    """Findings come from their Code (severity, hint and playbook from the docs); nothing builds one by hand."""
    for d in ("doctor", "checks", "playbooks"):
        for p in (ROOT / d).rglob("*.py"):
            if p.name == "findings.py":
                continue
            assert not re.search(r"\bFinding\(\s*id=", p.read_text()), p
