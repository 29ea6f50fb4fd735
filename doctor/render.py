"""Rendering: rich for people (stdout; progress on stderr), JSON for machines, Markdown for reports."""

from __future__ import annotations

import difflib
import json
from typing import Any

from doctor.findings import Finding, Severity
from doctor.runner import areas
from doctor.term import console, indented, progress, wrap

__all__ = ["CHECK_SCHEMA", "check_json", "console", "indented", "markdown", "print_human", "progress",
           "sort_findings", "summary_counts", "unified_diff", "wrap"]

CHECK_SCHEMA = "rocm-doctor.check/1"
_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan", Severity.OK: "green"}


def sort_findings(findings: list[Finding]) -> list[Finding]:
    order = {a: i for i, a in enumerate(areas())}
    return sorted(findings, key=lambda f: (order.get(f.check, 99), f.severity.rank, f.id))


def unified_diff(old: str, new: str, a: str, b: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), a, b))


def check_json(findings: list[Finding], environment: dict[str, Any]) -> str:
    return json.dumps({"schema": CHECK_SCHEMA, "findings": [f.to_dict() for f in sort_findings(findings)],
                       "environment": environment}, indent=2, default=str)


def summary_counts(findings: list[Finding]) -> dict[str, int]:
    return {s.value: sum(1 for f in findings if f.severity is s) for s in Severity}


def print_human(findings: list[Finding], con: Any, verbose: bool = False, title: str = "rocm-doctor check",
                skipped: list[str] | None = None) -> None:
    from rich.markup import escape
    from rich.text import Text

    con.print(f"[bold]{title}[/bold]")
    current = None
    for f in sort_findings(findings):
        if f.check != current:
            current = f.check
            con.print(f"\n[bold]{escape(current)}[/bold]")
        head = Text.assemble((f.severity.symbol, _STYLE[f.severity]), " ", (f.id, "dim"), " ")
        pb = f"  → playbook {f.playbook}" if f.playbook and f.severity.blocking else ""
        lines = wrap(f.title + pb, con.width, 1 + head.cell_len, 1 + head.cell_len)
        first = Text(" ")
        first.append_text(head)
        first.append(lines[0])
        con.print(first, soft_wrap=True)
        for ln in lines[1:]:
            con.print(Text(ln), soft_wrap=True)
        if (verbose or f.severity.blocking) and f.detail:
            for ln in f.detail.splitlines()[:None if verbose else 4]:
                indented(con, ln, style="dim")
        if f.severity.blocking and f.hint:
            indented(con, f.hint, prefix=Text("fix: ", style="bold"))
        if verbose and f.evidence:
            indented(con, "evidence: " + json.dumps(f.evidence, default=str)[:1500], style="dim")
    c = summary_counts(findings)
    con.print(f"\n[bold]{c['error']} error(s), {c['warning']} warning(s)[/bold], "
              f"{c['info']} info, {c['ok']} ok"
              + ("" if verbose else "  [dim](--verbose for details and evidence)[/dim]"))
    if skipped:
        con.print(f"[dim]not checked: {', '.join(skipped)}[/dim]")


def markdown(findings: list[Finding]) -> str:
    out = ["| | id | area | finding | fix |", "|---|---|---|---|---|"]
    for f in sort_findings(findings):
        title = f.title.replace("|", "\\|")
        hint = (f.hint if f.severity.blocking else "").replace("|", "\\|")
        out.append(f"| {f.severity.symbol} | `{f.id}` | {f.check} | {title} | {hint} |")
    return "\n".join(out)
