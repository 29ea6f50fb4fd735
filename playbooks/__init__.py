"""Playbooks: remedies applied to a *copy* of a LLaMA-Factory training YAML.

The catalog is data (``catalog.yaml``, plus files named by ``ROCM_DOCTOR_PLAYBOOKS``): what each
playbook answers (finding ids, failure categories), whether it is safe to apply automatically,
whether a retry may resume from a checkpoint after it, and its patch — declarative ops, or a named
handler in :mod:`playbooks.handlers` where the patch needs judgement. ``fix`` and ``train`` share
this one engine.

Patches edit ruamel's round-trip mapping in place (:mod:`playbooks.edits`), so the user's comments and
key order survive. :func:`fix_findings` is what ``fix`` and ``train``'s preflight apply to a config's
findings; ``train``'s retry policy picks playbooks by failure category (:func:`for_category`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor.config import InputError, to_plain
from doctor.findings import Finding, Severity
from playbooks import handlers
from playbooks.edits import Outcome, PatchInput, delete_key, rename_key, set_key, show

__all__ = ["Outcome", "PatchInput", "Playbook", "FixResult", "catalog", "apply", "for_category", "for_finding",
           "fix_findings", "delete_key", "set_key", "rename_key"]

CATALOG = Path(__file__).resolve().parent / "catalog.yaml"
_OPS = ("set", "set_at_least", "unset", "rename", "env")


@dataclass(frozen=True)
class Playbook:
    id: str
    title: str
    findings: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    auto: bool = False
    resume: bool = True
    repeatable: bool = False
    when: dict[str, Any] = field(default_factory=dict)
    ops: tuple[dict[str, Any], ...] = ()
    handler: str | None = None
    doc: dict[str, str] = field(default_factory=dict)
    source: str = "builtin"


# ------------------------------------------------------------------ catalog

def _parse_entry(e: Any, source: str) -> Playbook:
    if not isinstance(e, dict) or not isinstance(e.get("id"), str):
        raise InputError(f"playbook file {source}: every entry needs an `id`")
    pid = e["id"]
    ans = e.get("answers") or {}
    ops = e.get("ops") or []
    if not isinstance(ops, list) or any(not isinstance(o, dict) or len(o) != 1 or next(iter(o)) not in _OPS
                                        for o in ops):
        raise InputError(f"playbook {pid} ({source}): each op must be one of {', '.join(_OPS)}")
    handler = e.get("handler")
    if handler is not None:
        if not callable(getattr(handlers, str(handler), None)):
            raise InputError(f"playbook {pid} ({source}): unknown handler {handler!r}")
    if not ops and not handler:
        raise InputError(f"playbook {pid} ({source}): needs `ops` or a `handler`")
    return Playbook(id=pid, title=str(e.get("title", pid)),
                    findings=tuple(ans.get("findings") or ()), categories=tuple(ans.get("categories") or ()),
                    auto=bool(e.get("auto", False)), resume=bool(e.get("resume", True)),
                    repeatable=bool(e.get("repeatable", False)), when=dict(e.get("when") or {}),
                    ops=tuple(ops), handler=handler, doc={k: str(v) for k, v in (e.get("doc") or {}).items()},
                    source=source)


def _load_file(path: Path) -> list[Playbook]:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = to_plain(YAML(typ="rt").load(path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read playbook file {path}: {e}") from None
    except YAMLError as e:
        raise InputError(f"playbook file {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, list):
        raise InputError(f"playbook file {path} must be a YAML list of playbooks")
    return [_parse_entry(e, str(path)) for e in data]


_CACHE: dict[str, dict[str, Playbook]] = {}


def catalog(env: dict[str, str] | None = None) -> dict[str, Playbook]:
    """All playbooks by id, in catalog order (order matters: it is the retry order per category)."""
    extra = (env if env is not None else os.environ).get("ROCM_DOCTOR_PLAYBOOKS", "")
    if extra not in _CACHE:
        out: dict[str, Playbook] = {}
        for pb in _load_file(CATALOG):
            out[pb.id] = pb
        for f in [x for x in extra.split(os.pathsep) if x]:
            for pb in _load_file(Path(f)):
                out[pb.id] = pb  # a site file may override a builtin playbook
        _CACHE[extra] = out
    return _CACHE[extra]


def for_category(category: str, env: dict[str, str] | None = None) -> list[Playbook]:
    return [pb for pb in catalog(env).values() if category in pb.categories]


def for_finding(finding_id: str, env: dict[str, str] | None = None) -> list[Playbook]:
    return [pb for pb in catalog(env).values() if finding_id in pb.findings]


def _matches(cm: Any, when: dict[str, Any]) -> bool:
    for k, want in when.items():
        if want == "present":
            ok = k in cm
        elif want == "absent":
            ok = k not in cm
        else:
            have = cm.get(k)
            ok = (have is want) if isinstance(want, bool) else str(have) == str(want)
        if not ok:
            return False
    return True


def _run_ops(pb: Playbook, cm: Any, out: Outcome) -> None:
    for op in pb.ops:
        (kind, arg), = op.items()
        if kind == "set":
            for k, v in arg.items():
                if k not in cm or cm[k] != v or type(cm[k]) is not type(v):
                    out.changes.append(f"{k}: {show(k, cm[k])} -> {show(k, v)}" if k in cm else f"{k}: {show(k, v)} (added)")
                    set_key(cm, k, v)
        elif kind == "set_at_least":
            for k, v in arg.items():
                try:
                    cur = float(cm.get(k)) if cm.get(k) is not None else None
                except (TypeError, ValueError):
                    cur = None
                if cur is None or cur < float(v):
                    out.changes.append(f"{k}: {show(k, cm.get(k, 'unset'))} -> {show(k, v)}")
                    set_key(cm, k, v)
        elif kind == "unset":
            for k in arg:
                if k in cm:
                    out.changes.append(f"{k}: removed (was {show(k, cm[k])})")
                    delete_key(cm, k)
        elif kind == "rename":
            for old, new in arg.items():
                if old in cm:
                    out.changes.append(f"{old} -> {new}" if new not in cm else f"{old}: removed ({new} is set)")
                    rename_key(cm, old, new)
        elif kind == "env":
            out.env.update({k: str(v) for k, v in arg.items()})


def apply(pb: Playbook, cm: Any, inp: PatchInput | None = None) -> Outcome:
    """Apply one playbook to the round-trip mapping ``cm`` in place."""
    out = Outcome(pb.id)
    if pb.when and not _matches(cm, pb.when):
        return out
    if pb.handler:
        getattr(handlers, pb.handler)(cm, inp or PatchInput(), out)
    _run_ops(pb, cm, out)
    return out


# ------------------------------------------------------------------ fixing a config's findings

@dataclass
class FixResult:
    applied: list[dict[str, Any]] = field(default_factory=list)   # {playbook, findings, changes, env}
    pending: list[dict[str, Any]] = field(default_factory=list)   # not auto: {playbook, findings}
    stopped: list[dict[str, Any]] = field(default_factory=list)   # {playbook, reason}
    remaining: list[Finding] = field(default_factory=list)        # error findings nothing fixed
    env: dict[str, str] = field(default_factory=dict)


def fix_findings(cm: Any, findings: list[Finding], *, severities: tuple[str, ...] = ("error", "warning"),
                 include: set[str] | frozenset[str] = frozenset(), model_config: dict[str, Any] | None = None,
                 env: dict[str, str] | None = None) -> FixResult:
    """Apply, in catalog order, each playbook that answers one of ``findings`` (edits ``cm``)."""
    res = FixResult()
    relevant = [f for f in findings if f.severity.value in severities and f.playbook]
    fixed: set[int] = set()
    for pb in catalog(env).values():
        hits = [f for f in relevant if f.playbook == pb.id or f.id in pb.findings]
        if not hits:
            continue
        if pb.id not in include:
            asks = [f for f in hits if not (pb.auto and f.autofix)]
            if asks:
                res.pending.append({"playbook": pb.id, "findings": sorted({f.id for f in asks}), "title": pb.title})
            hits = [f for f in hits if all(f is not a for a in asks)]
            if not hits:
                continue
        ids = sorted({f.id for f in hits})
        out = apply(pb, cm, PatchInput(findings=hits, model_config=model_config))
        if out.stop:
            res.stopped.append({"playbook": pb.id, "findings": ids, "reason": out.stop})
            continue
        if out.changed:
            res.applied.append({"playbook": pb.id, "findings": ids, "changes": out.changes, "env": out.env})
            res.env.update(out.env)
            fixed.update(id(f) for f in hits)
    res.remaining = [f for f in findings if f.severity is Severity.ERROR and id(f) not in fixed]
    return res


# ------------------------------------------------------------------ docs

def markdown_table(env: dict[str, str] | None = None) -> str:
    rows = ["| playbook | answers | auto | resumes | what it changes |", "|---|---|---|---|---|"]
    for pb in catalog(env).values():
        ans = ", ".join([f"`{f}`" for f in pb.findings] + [f"*{c}*" for c in pb.categories])
        rows.append(f"| `{pb.id}` | {ans} | {'yes' if pb.auto else 'asks'} | {'yes' if pb.resume else 'no'} "
                    f"| {pb.title} |")
    return "\n".join(rows)


def markdown_page(env: dict[str, str] | None = None) -> str:
    out = ["# Playbooks", "", "Generated by `rocm-doctor playbooks --markdown` from `playbooks/catalog.yaml`; "
           "do not edit by hand.", "",
           "A playbook is applied to a copy of the training YAML (`rocm-doctor fix`, or `rocm-doctor train` "
           "between attempts). *auto*: applied without asking. *resumes*: the next attempt may resume from "
           "the last checkpoint.", ""]
    for pb in catalog(env).values():
        ans = ", ".join([f"`{f}`" for f in pb.findings] + [f"*{c}*" for c in pb.categories]) or "—"
        out += [f"## {pb.id} — {pb.title}", "",
                f"*Answers:* {ans} · *Auto:* {'yes' if pb.auto else 'no, asks first'} · "
                f"*Resumes:* {'yes' if pb.resume else 'no'}" + (" · *Repeatable*" if pb.repeatable else ""), ""]
        for k, label in (("what", "What it changes."), ("why", "Why."), ("safe", "Safe to apply automatically?")):
            if pb.doc.get(k):
                out += [f"**{label}** {pb.doc[k]}", ""]
    return "\n".join(out)
