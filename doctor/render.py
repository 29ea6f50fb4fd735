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


# ------------------------------------------------------------------ check --distributed: nodes x areas

MATRIX_SYMBOL = {"error": "✗", "warning": "!", "info": "i", "ok": "✓", None: "·"}
MATRIX_COLOUR = {"error": "#f8d7da", "warning": "#fff3cd", "info": "#d1ecf1", "ok": "#d4edda", None: "#eeeeee"}


def node_rows(report: dict[str, Any]) -> tuple[list[str], list[tuple[str, list[str | None], str]]]:
    """(area columns, [(node, worst severity per area, verdict)]) of a --distributed report."""
    nodes = report.get("nodes") or {}
    cols = [a for a in next(iter(nodes.values()), {}) if any(n.get(a) for n in nodes.values())]
    excl = set(report.get("exclude") or [])
    return cols, [(n, [cells.get(a) for a in cols], "exclude" if n in excl else "healthy")
                  for n, cells in nodes.items()]


def node_table_text(report: dict[str, Any]) -> str:
    """The compact terminal table: one row per node, one symbol per area (✗ ! i ✓, · not run)."""
    cols, rows = node_rows(report)
    if not rows:
        return ""
    w = max(len(n) for n, _, _ in rows)
    head = f"{'node':<{w}}  " + " ".join(f"{c[:5]:>5}" for c in cols) + "  verdict"
    lines = [head]
    for n, cells, verdict in rows:
        lines.append(f"{n:<{w}}  " + " ".join(f"{MATRIX_SYMBOL[c]:>5}" for c in cells) + f"  {verdict}")
    return "\n".join(lines)


def exclude_line(report: dict[str, Any]) -> str:
    ex, ok = report.get("exclude") or [], report.get("healthy") or []
    if ex:
        return f"exclude {len(ex)} of {len(ex) + len(ok)} node(s): --exclude={','.join(ex)}" + (
            f"   healthy: {','.join(ok)}" if ok else "")
    return f"all {len(ok)} node(s) healthy"


def distributed_markdown(report: dict[str, Any]) -> str:
    cols, rows = node_rows(report)
    d = report.get("distributed") or {}
    out = ["# rocm-doctor check --distributed", "",
           f"{d.get('world_size')} ranks on {len(rows)} node(s), backend {d.get('backend')}.", "",
           f"**{exclude_line(report)}**", ""]
    if rows:
        out += ["| node | " + " | ".join(cols) + " | verdict |", "|---|" + "---|" * len(cols) + "---|"]
        out += [f"| {n} | " + " | ".join(f"{MATRIX_SYMBOL[c]} {c or ''}".strip() for c in cells) + f" | {v} |"
                for n, cells, v in rows]
    for n, why in (report.get("exclude_reasons") or {}).items():
        out.append(f"- `{n}`: {'; '.join(why)}")
    if report.get("job_errors"):
        out += ["", "Errors on every node (the job's, not a node's): " + ", ".join(report["job_errors"])]
    if report.get("collectives"):
        out += ["", "| all_reduce size | time | algbw | busbw | slowest rank |", "|---|---|---|---|---|"]
        out += [f"| {c['size_bytes'] / 2**20:.2f} MiB | {c['time_us'] / 1000:.2f} ms | {c['algbw_gbps']:.2f} GB/s | "
                f"{c['busbw_gbps']:.2f} GB/s | {c['slowest_rank']} |" for c in report["collectives"]]
    out += ["", "## Findings", ""] + [f"- **{f['id']}** [{f['severity']}] {f['title']}" for f in report["findings"]]
    return "\n".join(out) + "\n"


def distributed_html(report: dict[str, Any]) -> str:
    """A self-contained page (inline CSS, no scripts) an operator can open or attach to a ticket."""
    from html import escape

    cols, rows = node_rows(report)
    d = report.get("distributed") or {}
    cells = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = []
    for n, sev, v in rows:
        tds = "".join(f'<td style="background:{MATRIX_COLOUR[c]}" title="{escape(c or "not run")}">'
                      f"{MATRIX_SYMBOL[c]}</td>" for c in sev)
        why = "; ".join((report.get("exclude_reasons") or {}).get(n, []))
        body.append(f'<tr><th class="n">{escape(n)}</th>{tds}<td class="{v}">{v}</td><td>{escape(why)}</td></tr>')
    coll = "".join(f"<tr><td>{c['size_bytes'] / 2**20:.2f} MiB</td><td>{c['time_us'] / 1000:.2f} ms</td>"
                   f"<td>{c['algbw_gbps']:.2f}</td><td>{c['busbw_gbps']:.2f}</td><td>{c['slowest_rank']}</td></tr>"
                   for c in report.get("collectives") or [])
    finds = "".join(f"<li><b>{escape(f['id'])}</b> [{escape(f['severity'])}] {escape(f['title'])}</li>"
                    for f in report["findings"])
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>rocm-doctor check --distributed</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:center}}th.n{{text-align:left}}
td.exclude{{background:#f8d7da;font-weight:bold}}td.healthy{{background:#d4edda}}code{{background:#f4f4f4}}</style>
</head><body>
<h1>rocm-doctor check --distributed</h1>
<p>{d.get('world_size')} ranks on {len(rows)} node(s), backend {escape(str(d.get('backend')))}.</p>
<p><b>{escape(exclude_line(report))}</b></p>
<table><tr><th>node</th>{cells}<th>verdict</th><th>why</th></tr>{''.join(body)}</table>
<p>✗ error · ! warning · i info · ✓ ok · · not run</p>
{'<h2>all_reduce</h2><table><tr><th>size</th><th>time</th><th>algbw GB/s</th><th>busbw GB/s</th><th>slowest rank</th></tr>' + coll + '</table>' if coll else ''}
<h2>Findings</h2><ul>{finds}</ul>
</body></html>
"""
