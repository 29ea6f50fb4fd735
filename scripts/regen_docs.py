"""Regenerate every generated document: docs/codes.md, docs/playbooks.md, docs/categories.md and the README's
finding-id, playbook and category tables (the tests fail when one is out of date)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import playbooks  # noqa: E402
from doctor import classify, codes  # noqa: E402


def replace_table(text: str, header: str, table: str) -> str:
    """Swap the Markdown table that starts with ``header`` for ``table``."""
    i = text.index(header)
    m = re.compile(r"\n(?!\|)").search(text, i)
    return text[:i] + table + text[m.start() if m else len(text):]


if __name__ == "__main__":
    (ROOT / "docs" / "codes.md").write_text(codes.markdown_page() + "\n", encoding="utf-8")
    (ROOT / "docs" / "playbooks.md").write_text(playbooks.markdown_page() + "\n", encoding="utf-8")
    (ROOT / "docs" / "categories.md").write_text(classify.markdown_page() + "\n", encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    readme = replace_table(readme, "| id | severity | title |", codes.markdown_table())
    readme = replace_table(readme, "| playbook | answers |", playbooks.markdown_table())
    if "| category | playbook (auto) or stop |" in readme:
        readme = replace_table(readme, "| category | playbook (auto) or stop |", classify.markdown_table())
    (ROOT / "README.md").write_text(readme, encoding="utf-8")
    print("regenerated docs/codes.md, docs/playbooks.md, docs/categories.md and the README tables")
