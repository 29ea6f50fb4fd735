"""``rocm-doctor explain LOG``: classify a failure log for a support engineer (the classifier ``train``
uses on a failed attempt)."""

from __future__ import annotations

import argparse
import json

from doctor.classify import classify_text, read_log
from doctor.commands import _options
from doctor.render import console, indented

SCHEMA = "rocm-doctor.explain/1"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("log", help="log file, or - for stdin")
    _options.add_json(p, SCHEMA)


def run(args: argparse.Namespace) -> int:
    c = classify_text(read_log(args.log))
    if args.json:
        print(json.dumps({"schema": SCHEMA, **c.to_dict()}, indent=2, ensure_ascii=False))
    else:
        from rich.markup import escape

        con = console()
        con.print(f"[bold]category:[/bold] {c.category}")
        if c.playbook:
            con.print(f"[bold]playbook:[/bold] {c.playbook} "
                      f"({'rocm-doctor train applies it automatically' if c.auto_fix else 'manual'})")
        con.print(f"\n{escape(c.summary)}\n")
        if c.evidence:
            con.print("[bold]evidence[/bold]" + (f" (line {c.line_no} of the tail read)" if c.line_no else ""))
            for line in c.evidence:
                indented(con, line, indent=2, style="dim")
    return 1 if c.category == "unknown" else 0
