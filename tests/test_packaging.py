"""What an installed rocm-doctor reads must ship in its wheel: every data file beside the code (the signature
library, the LLaMA-Factory schema, the tokenizer classes, the catalogs) matches a package-data glob of
pyproject.toml. A file left out is no error at run time, only a classifier or lint that quietly knows less."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11 (the CI's); 3.10 has no TOML reader built in

ROOT = Path(__file__).resolve().parent.parent
CODE = {".py", ".pyc"}


def test_every_data_file_beside_the_code_is_package_data():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    missing = []
    for pkg in ("doctor", "checks", "playbooks"):
        base = ROOT / pkg
        globs = data.get(pkg, [])
        for f in base.rglob("*"):
            if not f.is_file() or f.suffix in CODE or "__pycache__" in f.parts:
                continue
            rel = f.relative_to(base).as_posix()
            if not any(fnmatch.fnmatch(rel, g) for g in globs):
                missing.append(f"{pkg}/{rel}")
    assert not missing, missing
