"""Loading a LLaMA-Factory training YAML safely, and writing patched copies.

Loading goes through ruamel's round-trip loader so that ``fix``/``train`` can write copies that
keep the user's comments and key order. Everything that can go wrong with user input becomes an
:class:`InputError` (exit code 2 with a one-line message), never a traceback.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

MAX_CONFIG_BYTES = 2 * 1024 * 1024
MAX_NODES = 100_000  # after alias expansion; a YAML alias bomb blows far past this


class InputError(Exception):
    """Bad user input: printed as one line, exit code 2."""


def yaml_rt():
    """ruamel's round-trip loader/dumper as every config read and write here uses it (quotes kept,
    no line folding)."""
    from ruamel.yaml import YAML

    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096
    return y


def _count_nodes(obj: Any, budget: int) -> int:
    """Count nodes as a consumer would see them (aliases expanded), stopping past ``budget``."""
    n = 0
    stack = [obj]
    while stack:
        cur = stack.pop()
        n += 1
        if n > budget:
            return n
        if isinstance(cur, dict):
            stack.extend(cur.values())
        elif isinstance(cur, list):
            stack.extend(cur)
    return n


def load_config(path: str | Path) -> tuple[Any, str]:
    """Return (round-trip mapping, original text) or raise InputError."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"config not found: {p}")
    if p.is_dir():
        raise InputError(f"config is a directory, not a YAML file: {p}")
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read config {p}: {e.strerror or e}") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise InputError(f"config {p} is {len(raw)} bytes; a training YAML is a few KB (wrong file?)")
    if b"\x00" in raw:
        raise InputError(f"config {p} is binary, not YAML")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"config {p} is not UTF-8 text") from None
    if not text.strip():
        raise InputError(f"config {p} is empty")
    from ruamel.yaml.error import YAMLError

    try:
        data = yaml_rt().load(text)
    except YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise InputError(f"config {p} is not valid YAML{where}: {problem}") from None
    except RecursionError:
        raise InputError(f"config {p} nests too deeply") from None
    except Exception as e:  # ruamel raises a few non-YAMLError types on odd input
        raise InputError(f"config {p} could not be parsed: {type(e).__name__}: {e}") from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else type(data).__name__
        raise InputError(f"config {p} must be a YAML mapping of LLaMA-Factory arguments, got {kind}")
    if _count_nodes(data, MAX_NODES) > MAX_NODES:
        raise InputError(f"config {p} expands to more than {MAX_NODES} nodes (YAML alias bomb?)")
    return data, text


def to_plain(obj: Any) -> Any:
    """ruamel CommentedMap/Seq and scalar subclasses -> plain JSON-able Python."""
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_plain(v) for v in obj]
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, str):
        return str(obj)
    return str(obj)


def dump_config(data: Any) -> str:
    buf = io.StringIO()
    yaml_rt().dump(data, buf)
    return buf.getvalue()


def clone(cm: Any) -> Any:
    """A deep copy of a round-trip mapping, comments included (what a playbook trial edits)."""
    return yaml_rt().load(dump_config(cm))
