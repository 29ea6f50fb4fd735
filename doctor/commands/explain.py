"""``rocm-doctor explain LOG``: classify a failure log for a support engineer (the classifier ``train``
uses on a failed attempt)."""

from __future__ import annotations

import argparse
import json

from doctor import classify
from doctor.classify import classify_text, read_log
from doctor.commands import _options
from doctor.config import InputError
from doctor.term import console, indented

SCHEMA = "rocm-doctor.explain/1"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("log", nargs="?", help="log file, or - for stdin")
    _options.add_json(p, SCHEMA)
    p.add_argument("--list", action="store_true", help="list the failure categories (what each means, its remedy)")
    p.add_argument("--markdown", action="store_true", help="with --list: print docs/categories.md")


def list_categories(markdown: bool) -> int:
    if markdown:
        print(classify.markdown_page())
        return 0
    for name, c in classify.categories().items():
        remedy = c.playbook + (" (auto)" if c.auto else "") if c.playbook else ("retry once" if c.auto else "stop")
        print(f"{name:28} {remedy:28} {c.summary.split('. ')[0]}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.list:
        return list_categories(args.markdown)
    if args.log is None:
        raise InputError("explain needs a LOG (a file, or - for stdin), or --list")
    c = classify_text(read_log(args.log))
    if args.json:
        print(json.dumps({"schema": SCHEMA, **c.to_dict()}, indent=2, ensure_ascii=False))
    else:
        from rich.markup import escape

        con = console()
        con.print(f"[bold]category:[/bold] {c.category}" + (f"  [dim](confidence {c.confidence:.2f})[/dim]"
                                                             if c.category != "unknown" else ""))
        if c.playbook:
            con.print(f"[bold]playbook:[/bold] {c.playbook} "
                      f"({'rocm-doctor train applies it automatically' if c.auto_fix else 'manual'})")
        con.print(f"\n{escape(c.summary)}\n")
        if c.alternatives:
            con.print("[dim]also possible: " + ", ".join(f"{a['category']} ({a['confidence']:.2f})"
                                                         for a in c.alternatives) + "[/dim]")
        if c.evidence:
            con.print("[bold]evidence[/bold]" + (f" (line {c.line_no} of the tail read)" if c.line_no else ""))
            for line in c.evidence:
                indented(con, line, indent=2, style="dim")
    return 1 if c.category == "unknown" else 0
