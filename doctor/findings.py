"""The finding model: what every check returns, and the documented ids it is made from.

A finding is data, not text: a stable id, a severity, a title, the detail, a hint, the playbook that
would fix it, and the evidence that led to it. Renderers (rich, JSON, Markdown), ``fix`` and ``train``
all consume the same objects.

Ids are :class:`Code` objects declared beside the check that emits them (ruff keeps a rule's docs on
the rule): a check builds its findings with ``CODE.finding(...)``, so severity, hint and playbook come
from the documented entry and a check cannot emit an id the docs do not describe.
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
        return _SYMBOL[self]

    @property
    def blocking(self) -> bool:
        """Error or warning: what a user must read (details and the fix are shown)."""
        return self in (Severity.ERROR, Severity.WARNING)


_RANK = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2, Severity.OK: 3}
_SYMBOL = {Severity.ERROR: "✗", Severity.WARNING: "!", Severity.INFO: "i", Severity.OK: "✓"}


@dataclass
class Finding:
    """One diagnosis. ``autofix`` (from its :class:`Code`) is not part of the JSON schema."""

    id: str
    check: str
    severity: Severity
    title: str
    detail: str = ""
    hint: str = ""
    playbook: str | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    autofix: bool = False

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

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


@dataclass(frozen=True)
class Code:
    """A documented finding id: what it means, why it matters, how it is fixed, whether the fix is safe
    to apply without asking. ``<AREA>000`` is the area's all-good summary."""

    area: str
    id: str
    severity: Severity
    title: str
    why: str
    fix: str
    playbook: str | None = None
    autofix: bool = False

    @property
    def fix_short(self) -> str:
        return self.fix.split("\n")[0]

    def finding(self, title: str, detail: str = "", hint: str = "", *, severity: Severity | None = None,
                playbook: str | None = None, check: str | None = None, **evidence: Any) -> Finding:
        """A finding of this id. ``playbook=""`` says explicitly "no playbook" for this instance (an
        info-level variant of a fixable id); ``check`` names the area it was found in when that is not
        the id's own (a DOC00x probe failure inside the torch area)."""
        pb = self.playbook if playbook is None else (playbook or None)
        return Finding(id=self.id, check=check or self.area, severity=severity or self.severity, title=title,
                       detail=detail, hint=hint or self.fix_short, playbook=pb, evidence=evidence,
                       autofix=self.autofix and pb == self.playbook)


def with_all_good(out: list[Finding], ok: Code, title: str, detail: str = "", *, tolerate_warnings: bool = False,
                  **evidence: Any) -> list[Finding]:
    """Append the area's ``<AREA>000`` line when nothing above info was found (Django's "no messages
    means healthy", said out loud so a user sees what was checked). ``tolerate_warnings``: the area is
    good unless it has an error (the config is accepted even when it earns warnings)."""
    bad = (lambda f: f.is_error) if tolerate_warnings else (lambda f: f.severity.blocking)
    if not any(bad(f) for f in out):
        out.append(ok.finding(title, detail, **evidence))
    return out


def worst(findings: list[Finding]) -> Severity:
    """The most severe severity among findings (OK when empty)."""
    return min((f.severity for f in findings), key=lambda s: s.rank, default=Severity.OK)


def has_errors(findings: list[Finding]) -> bool:
    return any(f.is_error for f in findings)
