"""Editing a LLaMA-Factory YAML's round-trip mapping in place, and the types a patch works with.

Shared by the declarative ops of the catalog and the handlers (which import this module, not the
package, so the package and its handlers do not import each other). A removed key hands its trailing
comment (often the next section's header) to the key before it, so the user's layout survives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml.tokens import CommentToken

from doctor.redact import shown


@dataclass
class PatchInput:
    """What a playbook may look at besides the config: why it is being applied, and the facts."""

    findings: list[Any] = field(default_factory=list)      # doctor.findings.Finding that triggered it
    classification: Any = None                            # doctor.classify.Classification
    model_config: dict[str, Any] | None = None            # the model's config.json, when local
    applied: list[str] = field(default_factory=list)      # playbooks applied on earlier attempts


@dataclass
class Outcome:
    """Result of one playbook on one config: ``changed`` false means it did not apply."""

    playbook: str
    changes: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    stop: str | None = None   # the playbook found that no config change can fix this; say why

    @property
    def changed(self) -> bool:
        return bool(self.changes or self.env)


# ------------------------------------------------------------------ editing the round-trip mapping

def delete_key(cm: Any, key: str) -> None:
    """Remove ``key`` keeping the comment lines that followed it (e.g. the next section's header)."""
    keys = list(cm)
    if key not in cm:
        return
    i = keys.index(key)
    tok = cm.ca.items.pop(key, None)
    del cm[key]
    post = tok[2] if tok and len(tok) > 2 else None
    if post is None:
        return
    v = post.value
    nl = v.find("\n")
    rest = v[nl:] if nl >= 0 else ""  # drop the deleted key's own inline comment
    if not rest.strip() and not (rest.count("\n") > 1 and i > 0):
        return  # nothing below it to keep (a blank separator line is kept)
    if i > 0:
        prev = keys[i - 1]
        ptok = cm.ca.items.setdefault(prev, [None, None, None, None])
        if ptok[2] is None:
            ptok[2] = CommentToken(rest, post.start_mark, None)
        else:
            ptok[2].value = ptok[2].value.rstrip("\n") + rest
    elif len(cm):
        lines = [ln.lstrip("# ").rstrip() for ln in rest.strip("\n").splitlines() if ln.strip()]
        if lines:
            cm.yaml_set_comment_before_after_key(next(iter(cm)), before="\n".join(lines))


def set_key(cm: Any, key: str, value: Any, after: str | None = None) -> None:
    """Set ``key``; a new key goes after ``after`` when given (else at the end)."""
    if key in cm or after is None or after not in cm:
        cm[key] = value
        return
    cm.insert(list(cm).index(after) + 1, key, value)


def rename_key(cm: Any, old: str, new: str) -> None:
    if old not in cm:
        return
    if new in cm:
        delete_key(cm, old)
        return
    pos = list(cm).index(old)
    tok = cm.ca.items.pop(old, None)
    value = cm.pop(old)
    cm.insert(pos, new, value)
    if tok is not None:
        cm.ca.items[new] = tok


def show(key: str, v: Any) -> str:
    """A value in a change list: ``fmt``, but never the value of a secret-named key (hf_hub_token ...)."""
    return shown(key, v, fmt)


def fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)
