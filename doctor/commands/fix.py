"""``rocm-doctor fix CONFIG``: apply the safe playbooks for a config's findings to a copy, show the diff.

The user's file is never written: the copy goes to ``<name>.fixed.yaml`` beside it (or ``-o``), and
writing over the original is refused. The engine is :func:`playbooks.fix_findings`, also ``train``'s
preflight step.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import playbooks as pbs
from doctor.commands import _options
from doctor.config import InputError, dump_config
from doctor.preflight import run_check
from doctor.redact import mask
from doctor.render import console, progress, unified_diff

SCHEMA = "rocm-doctor.fix/1"


def add_arguments(f: argparse.ArgumentParser) -> None:
    f.add_argument("config", help="LLaMA-Factory training YAML (never modified)")
    f.add_argument("-o", "--output", help="where to write the copy (default: <name>.fixed.yaml beside it)")
    f.add_argument("--apply", action="append", metavar="PLAYBOOK",
                   help="also apply this playbook although it is not automatic (repeatable)")
    _options.add_quick(f, "lint from the cached schema only (no torch import)")
    _options.add_json(f, SCHEMA)
    _options.add_timeout(f)


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


def run(args: argparse.Namespace) -> int:
    src = Path(args.config)
    bad = set(args.apply or ()) - set(pbs.catalog())
    if bad:
        raise InputError(f"unknown playbook(s) for --apply: {', '.join(sorted(bad))} (see `rocm-doctor playbooks`)")
    out_path = Path(args.output) if args.output else default_output(src)
    if out_path.resolve() == src.resolve():
        raise InputError("refusing to overwrite the original config; choose another -o path")
    with progress(enabled=not args.json) as step:
        checked = run_check(args.config, quick=args.quick, timeout=args.timeout, progress=step)
    ctx = checked.ctx
    cm = ctx.config_rt  # the round-trip map check loaded; patched in place, written to the copy only
    res = pbs.fix_findings(cm, checked.findings, include=set(args.apply or ()), model_config=ctx.model_config())
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
        print(json.dumps({"schema": SCHEMA, "config": str(src), "output": str(out_path) if res.applied else None,
                          "applied": res.applied, "pending": res.pending, "stopped": res.stopped, "env": res.env,
                          "remaining": [f.to_dict() for f in res.remaining], "diff": diff}, indent=2, default=str))
        return code
    render(res, diff, src, out_path)
    return code


def render(res: pbs.FixResult, diff: str, src: Path, out_path: Path) -> None:
    from rich.syntax import Syntax

    con = console()
    if not res.applied:
        con.print("[bold]No automatic fix applies.[/] The config was not copied.")
    else:
        for a in res.applied:
            con.print(f"[green]✓[/] [bold]{a['playbook']}[/] ({', '.join(a['findings'])}): " + "; ".join(a["changes"]
                      + [f"env {k}={v}" for k, v in a["env"].items()]))
        # wrapped, not cut at the terminal's width: a long value must be read whole
        con.print(Syntax(diff, "diff", theme="ansi_dark", background_color="default", word_wrap=True))
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
