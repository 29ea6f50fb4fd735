"""``rocm-doctor explain LOG [--json]``: classify a failure log for a support engineer."""

from __future__ import annotations

import argparse
import json
import os
import sys

from doctor.classify import classify_text, read_log_tail
from doctor.config import InputError

SCHEMA = "rocm-doctor.explain/1"


def load(arg: str) -> str:
    if arg == "-":
        data = sys.stdin.buffer.read()
        return read_log_tail(data)
    if not os.path.exists(arg):
        raise InputError(f"log not found: {arg}")
    if os.path.isdir(arg):
        raise InputError(f"log is a directory: {arg}")
    try:
        return read_log_tail(arg)
    except OSError as e:
        raise InputError(f"cannot read log {arg}: {e.strerror or e}") from None


def cmd_explain(args: argparse.Namespace) -> int:
    text = load(args.log)
    c = classify_text(text)
    if args.json:
        print(json.dumps({"schema": SCHEMA, **c.to_dict()}, indent=2, ensure_ascii=False))
    else:
        from rich.console import Console
        from rich.markup import escape

        con = Console(highlight=False)
        con.print(f"[bold]category:[/bold] {c.category}")
        if c.playbook:
            con.print(f"[bold]playbook:[/bold] {c.playbook} "
                      f"({'rocm-doctor train applies it automatically' if c.auto_fix else 'manual'})")
        con.print(f"\n{escape(c.summary)}\n")
        if c.evidence:
            con.print("[bold]evidence[/bold]" + (f" (line {c.line_no} of the tail read)" if c.line_no else ""))
            for line in c.evidence:
                con.print(f"  [dim]{escape(line)}[/dim]")
    return 1 if c.category == "unknown" else 0


def register(sub) -> None:
    p = sub.add_parser("explain", help="classify a failure log: category, playbook, evidence")
    p.add_argument("log", help="log file, or - for stdin")
    p.add_argument("--json", action="store_true", help="print only JSON (schema rocm-doctor.explain/1)")
    p.set_defaults(func=cmd_explain)
