"""The finding model: what every check returns.

A finding is data, not text: a stable id (documented in :mod:`doctor.codes`), a severity, a
title, the detail, a hint, the playbook that would fix it, and the evidence that led to it.
Renderers (rich, JSON, Markdown), ``fix`` and ``train`` all consume the same objects.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Severity(str, enum.Enum):
    """Ordered from worst to best; ``error`` findings make ``check`` exit 1."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"
    OK = "ok"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @property
    def symbol(self) -> str:
        return {"error": "✗", "warning": "!", "info": "i", "ok": "✓"}[self.value]


_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2, Severity.OK: 3}


@dataclass
class Finding:
    """One diagnosis. ``id`` must be registered in :data:`doctor.codes.CODES`."""

    id: str
    check: str
    severity: Severity
    title: str
    detail: str = ""
    hint: str = ""
    playbook: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "check": self.check,
            "severity": self.severity.value,
            "title": self.title,
            "detail": self.detail,
            "hint": self.hint,
            "playbook": self.playbook,
            "evidence": self.evidence,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Finding:
        return cls(
            id=d["id"],
            check=d.get("check", ""),
            severity=Severity(d["severity"]),
            title=d.get("title", ""),
            detail=d.get("detail", ""),
            hint=d.get("hint", ""),
            playbook=d.get("playbook"),
            evidence=d.get("evidence") or {},
        )


def make(code: str, check: str, title: str, detail: str = "", hint: str = "", *,
         severity: Severity | None = None, playbook: str | None = None,
         **evidence: Any) -> Finding:
    """Build a finding whose default severity and playbook come from the code registry.

    Keeping severity and playbook in the registry makes the documentation the source of truth:
    a check cannot silently emit an id with a severity the docs do not describe.
    """
    from doctor.codes import CODES

    doc = CODES[code]
    return Finding(
        id=code,
        check=check,
        severity=severity or doc.severity,
        title=title,
        detail=detail,
        hint=hint or doc.fix_short,
        playbook=(playbook or None) if playbook is not None else doc.playbook,  # "" = explicitly none
        evidence=evidence,
    )


def worst(findings: list[Finding]) -> Severity:
    """The most severe severity among findings (OK when empty)."""
    return min((f.severity for f in findings), key=lambda s: s.rank, default=Severity.OK)
