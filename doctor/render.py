"""Rendering: rich for people (stdout; progress on stderr), JSON for machines, Markdown for reports."""

from __future__ import annotations

import contextlib
import difflib
import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

from doctor.findings import Finding, Severity
from doctor.runner import areas

CHECK_SCHEMA = "rocm-doctor.check/1"
_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan", Severity.OK: "green"}


def console(stderr: bool = False):
    """The one rich console every command prints with (no syntax highlighting of numbers and paths)."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


@contextlib.contextmanager
def progress(enabled: bool = True) -> Iterator[Callable[[str], None] | None]:
    """A one-line spinner on stderr while a long step runs, only where stderr is a terminal (never in
    ``--json`` output, logs or pipes). Yields the callback that updates its text, or None."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    con = console(stderr=True)
    with con.status("rocm-doctor: starting", spinner="dots") as status:
        yield lambda msg: status.update(f"rocm-doctor: {msg}")


def sort_findings(findings: list[Finding]) -> list[Finding]:
    order = {a: i for i, a in enumerate(areas())}
    return sorted(findings, key=lambda f: (order.get(f.check, 99), f.severity.rank, f.id))


def unified_diff(old: str, new: str, a: str, b: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), a, b))


def wrap(text: str, width: int, first: int, rest: int) -> list[str]:
    """``text`` wrapped to ``width`` columns: the first line after ``first`` columns, the others indented
    by ``rest`` (so a wrapped line keeps its indent, and no line ends in padding)."""
    import textwrap

    lines = textwrap.wrap(text, width=max(20, width - rest), initial_indent=" " * (first - rest),
                          break_long_words=True, break_on_hyphens=False, drop_whitespace=True) or [""]
    return [lines[0][first - rest:]] + [" " * rest + ln for ln in lines[1:]]


def indented(con: Any, text: str, indent: int = 5, style: str = "", prefix: Any = None) -> None:
    """Print ``text`` at ``indent`` columns, wrapped lines keeping the indent; ``prefix`` (rich Text) goes
    before the first line and counts toward the first line's width."""
    from rich.text import Text

    first = indent + (prefix.cell_len if prefix is not None else 0)
    lines = wrap(text, con.width, first, indent)
    head = Text(" " * indent)
    if prefix is not None:
        head.append_text(prefix)
    head.append(lines[0], style=style)
    con.print(head, soft_wrap=True)
    for ln in lines[1:]:
        con.print(Text(ln, style=style), soft_wrap=True)


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
