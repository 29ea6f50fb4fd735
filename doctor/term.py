"""Terminal output every command shares: the rich console, a progress spinner on stderr, and wrapping that
keeps a line's indent. A leaf: ``explain`` prints through it without loading the checks' machinery."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any


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
