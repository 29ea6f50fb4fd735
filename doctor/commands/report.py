"""``rocm-doctor report [CONFIG] [--log FILE ...]``: one redacted bundle for a support engineer."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from doctor import bundle
from doctor.commands import _options
from doctor.config import InputError
from doctor.redact import Redactor
from doctor.render import console, progress


def add_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("config", nargs="?", help="LLaMA-Factory training YAML")
    r.add_argument("--log", action="append", metavar="FILE", help="a failure log to explain and include (repeatable)")
    r.add_argument("-o", "--output", help="bundle path: *.tar.gz (default) or a directory")
    r.add_argument("--no-redact", action="store_true", help="keep secrets, host names, IPs and user names")
    _options.add_quick(r, "no torch import (config lint from the cached schema)")
    _options.add_python(r)
    _options.add_timeout(r)
    r.add_argument("--json", action="store_true", help="print {schema, output, redaction} as JSON on stdout")


def run(args: argparse.Namespace) -> int:
    red = Redactor(enabled=not args.no_redact)
    with progress(enabled=not args.json):
        rep, files = bundle.build(args.config, args.log or [], quick=args.quick, redactor=red, python=args.python,
                                  timeout=args.timeout)
    dest = Path(args.output or f"rocm-doctor-report-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz")
    try:
        out = bundle.write_bundle(dest, rep, files)
    except OSError as e:
        raise InputError(f"cannot write {dest}: {e.strerror or e}") from None
    con = console(stderr=args.json)
    errors = sum(1 for f in rep["findings"] if f["severity"] == "error")
    con.print(f"Wrote [bold]{out}[/] (report.md, report.json, {len(files)} file(s)): {errors} error(s)"
              + (f"; not checked: {', '.join(rep['skipped'])}" if rep.get("skipped") else "") + ".")
    counts = rep["redaction"]["counts"]
    if red.enabled:
        con.print("Redacted: " + (", ".join(f"{n} {k}" for k, n in counts.items()) or "nothing found")
                  + ". Review report.md before sharing; `--no-redact` turns this off.")
    else:
        con.print("[yellow]Not redacted[/] (--no-redact): it may contain tokens, host names and user names.")
    if args.json:
        print(json.dumps({"schema": bundle.SCHEMA, "output": str(out), "redaction": rep["redaction"]}))
    return 0
