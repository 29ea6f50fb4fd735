"""Rendering findings: rich for people, JSON for machines, Markdown for reports."""

from __future__ import annotations

import json
from typing import Any

from doctor.codes import AREAS
from doctor.findings import Finding, Severity

CHECK_SCHEMA = "rocm-doctor.check/1"
_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan", Severity.OK: "green"}


def sort_findings(findings: list[Finding]) -> list[Finding]:
    order = {a: i for i, a in enumerate(AREAS)}
    return sorted(findings, key=lambda f: (order.get(f.check, 99), f.severity.rank, f.id))


def check_json(findings: list[Finding], environment: dict[str, Any]) -> str:
    return json.dumps({"schema": CHECK_SCHEMA, "findings": [f.to_dict() for f in sort_findings(findings)],
                       "environment": environment}, indent=2, default=str)


def summary_counts(findings: list[Finding]) -> dict[str, int]:
    return {s.value: sum(1 for f in findings if f.severity == s) for s in Severity}


def print_human(findings: list[Finding], console, verbose: bool = False, title: str = "rocm-doctor check") -> None:
    from rich.markup import escape

    console.print(f"[bold]{title}[/bold]")
    current = None
    for f in sort_findings(findings):
        if f.check != current:
            current = f.check
            console.print(f"\n[bold]{escape(current)}[/bold]")
        pb = f"  [dim]→ playbook {f.playbook}[/dim]" if f.playbook and f.severity in (Severity.ERROR, Severity.WARNING) else ""
        console.print(f" [{_STYLE[f.severity]}]{f.severity.symbol}[/] [dim]{f.id}[/dim] {escape(f.title)}{pb}")
        show_detail = verbose or f.severity in (Severity.ERROR, Severity.WARNING)
        if show_detail and f.detail:
            lines = f.detail.splitlines()
            limit = None if verbose else 4
            for line in lines[:limit]:
                console.print(f"     [dim]{escape(line)}[/dim]")
        if f.severity in (Severity.ERROR, Severity.WARNING) and f.hint:
            console.print(f"     [bold]fix:[/bold] {escape(f.hint)}")
        if verbose and f.evidence:
            ev = json.dumps(f.evidence, default=str)
            console.print(f"     [dim]evidence: {escape(ev[:1500])}[/dim]")
    c = summary_counts(findings)
    console.print(f"\n[bold]{c['error']} error(s), {c['warning']} warning(s)[/bold], "
                  f"{c['info']} info, {c['ok']} ok"
                  + ("" if verbose else "  [dim](--verbose for details and evidence)[/dim]"))


def markdown(findings: list[Finding]) -> str:
    out = ["| | id | area | finding | fix |", "|---|---|---|---|---|"]
    for f in sort_findings(findings):
        title = f.title.replace("|", "\\|")
        hint = (f.hint if f.severity in (Severity.ERROR, Severity.WARNING) else "").replace("|", "\\|")
        out.append(f"| {f.severity.symbol} | `{f.id}` | {f.check} | {title} | {hint} |")
    return "\n".join(out)
