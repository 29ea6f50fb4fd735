"""``rocm-doctor fix``: apply the safe playbooks for a config's findings to a copy, show the diff.

The same :func:`fix_findings` is the preflight step of ``train``. The user's file is never written:
the copy goes to ``<name>.fixed.yaml`` beside it (or ``-o``), and writing over the original is
refused.
"""

from __future__ import annotations

import argparse
import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor.config import InputError, dump_config
from doctor.secrets import mask


@dataclass
class FixResult:
    applied: list[dict[str, Any]] = field(default_factory=list)   # {playbook, findings, changes, env}
    pending: list[dict[str, Any]] = field(default_factory=list)   # not auto: {playbook, findings}
    stopped: list[dict[str, Any]] = field(default_factory=list)   # {playbook, reason}
    remaining: list[Any] = field(default_factory=list)            # error findings nothing fixed
    env: dict[str, str] = field(default_factory=dict)


def fix_findings(cm: Any, findings: list[Any], *, severities: tuple[str, ...] = ("error", "warning"),
                 include: set[str] | frozenset[str] = frozenset(), model_config: dict[str, Any] | None = None,
                 env: dict[str, str] | None = None) -> FixResult:
    """Apply, in catalog order, each playbook that answers one of ``findings`` (edits ``cm``)."""
    import playbooks as pbs
    from doctor.codes import CODES

    res = FixResult()
    relevant = [f for f in findings if f.severity.value in severities and f.playbook]
    fixed: set[int] = set()
    for pb in pbs.catalog(env).values():
        hits = [f for f in relevant if f.playbook == pb.id or f.id in pb.findings]
        if not hits:
            continue
        if pb.id not in include:
            asks = [f for f in hits if not (pb.auto and CODES[f.id].autofix)]
            if asks:
                res.pending.append({"playbook": pb.id, "findings": sorted({f.id for f in asks}), "title": pb.title})
            hits = [f for f in hits if all(f is not a for a in asks)]
            if not hits:
                continue
        ids = sorted({f.id for f in hits})
        out = pbs.apply(pb, cm, pbs.PatchInput(findings=hits, model_config=model_config))
        if out.stop:
            res.stopped.append({"playbook": pb.id, "findings": ids, "reason": out.stop})
            continue
        if out.changed:
            res.applied.append({"playbook": pb.id, "findings": ids, "changes": out.changes, "env": out.env})
            res.env.update(out.env)
            fixed.update(id(f) for f in hits)
    res.remaining = [f for f in findings if f.severity.value == "error" and id(f) not in fixed]
    return res


def default_output(config: Path) -> Path:
    name = config.name
    for suffix in (".yaml", ".yml"):
        if name.endswith(suffix):
            return config.with_name(name[: -len(suffix)] + ".fixed" + suffix)
    return config.with_name(name + ".fixed.yaml")


def header(source: Path, applied: list[dict[str, Any]], env: dict[str, str]) -> str:
    lines = [f"# Written by rocm-doctor from {source.name}: {', '.join(a['playbook'] for a in applied) or 'no change'}."]
    if env:
        lines.append("# Launch with: " + " ".join(f"{k}={v}" for k, v in env.items()) + " llamafactory-cli train ...")
    return "\n".join(lines) + "\n"


def unified_diff(old: str, new: str, a: str, b: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), a, b))


def cmd_fix(args: argparse.Namespace) -> int:
    from doctor.cli import _console, run_check

    src = Path(args.config)
    ctx, findings = run_check(args.config, quick=args.quick, timeout=args.timeout)
    out_path = Path(args.output) if args.output else default_output(src)
    if out_path.resolve() == src.resolve():
        raise InputError("refusing to overwrite the original config; choose another -o path")
    cm = ctx.config_rt  # the round-trip map check loaded; patched in place, written to the copy only
    import playbooks as pbs

    known = set(pbs.catalog())
    bad = set(args.apply or ()) - known
    if bad:
        raise InputError(f"unknown playbook(s) for --apply: {', '.join(sorted(bad))} (see `rocm-doctor playbooks`)")
    res = fix_findings(cm, findings, include=set(args.apply or ()), model_config=ctx.model_config())
    new_text = dump_config(cm)
    if res.applied:
        new_text = header(src, res.applied, res.env) + new_text
        try:
            out_path.parent.mkdir(parents=True, exist_ok=True)
            out_path.write_text(new_text, encoding="utf-8")
        except OSError as e:
            raise InputError(f"cannot write {out_path}: {e.strerror or e} (use -o to write elsewhere)") from None
    # shown, never written: a token in the config's context lines must not reach the terminal or JSON
    diff = mask(unified_diff(ctx.config_text, new_text, str(src), str(out_path))) if res.applied else ""
    code = 1 if res.remaining or res.stopped else 0
    if args.json:
        print(json.dumps({"schema": "rocm-doctor.fix/1", "config": str(src),
                          "output": str(out_path) if res.applied else None, "applied": res.applied,
                          "pending": res.pending, "stopped": res.stopped, "env": res.env,
                          "remaining": [f.to_dict() for f in res.remaining], "diff": diff}, indent=2, default=str))
        return code
    con = _console()
    if not res.applied:
        con.print("[bold]No automatic fix applies.[/] The config was not copied.")
    else:
        from rich.syntax import Syntax

        for a in res.applied:
            con.print(f"[green]✓[/] [bold]{a['playbook']}[/] ({', '.join(a['findings'])}): " + "; ".join(a["changes"]
                      + [f"env {k}={v}" for k, v in a["env"].items()]))
        con.print(Syntax(diff, "diff", theme="ansi_dark", background_color="default"))
        con.print(f"Wrote [bold]{out_path}[/] (your {src.name} is unchanged).")
        if res.env:
            con.print("Launch it with: " + " ".join(f"{k}={v}" for k, v in res.env.items())
                      + f" llamafactory-cli train {out_path}")
    for p in res.pending:
        con.print(f"[yellow]?[/] {p['playbook']} ({', '.join(p['findings'])}) is not applied automatically: "
                  f"rerun with `--apply {p['playbook']}` if you want it.")
    for s in res.stopped:
        con.print(f"[red]✗[/] {s['playbook']}: {s['reason']}")
    for f in res.remaining:
        con.print(f"[red]✗[/] {f.id} {f.title} — no automatic fix" + (f" ({f.hint})" if f.hint else ""))
    return code


def register(sub: Any) -> None:
    f = sub.add_parser("fix", help="apply the safe playbooks to a copy of the config and show the diff")
    f.add_argument("config", help="LLaMA-Factory training YAML (never modified)")
    f.add_argument("-o", "--output", help="where to write the copy (default: <name>.fixed.yaml beside it)")
    f.add_argument("--apply", action="append", metavar="PLAYBOOK",
                   help="also apply this playbook although it is not automatic (repeatable)")
    f.add_argument("--quick", action="store_true", help="lint from the cached schema only (no torch import)")
    f.add_argument("--json", action="store_true", help="print only JSON (schema rocm-doctor.fix/1)")
    f.add_argument("--timeout", type=float, default=120.0, help="seconds per probe (default 120)")
    f.set_defaults(func=cmd_fix)
