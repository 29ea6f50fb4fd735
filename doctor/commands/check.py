"""``rocm-doctor check [CONFIG]``: preflight the environment (and a training YAML); ``--distributed`` on
every rank of a job."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from doctor import bundle, distributed
from doctor.commands import _options
from doctor.config import InputError
from doctor.findings import Finding, has_errors
from doctor.preflight import environment_summary, run_check, skipped_areas
from doctor.render import (
    check_json,
    console,
    distributed_html,
    distributed_markdown,
    exclude_line,
    node_table_text,
    print_human,
    progress,
)
from doctor.runner import areas

MiB = 1024 * 1024


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("config", nargs="?", help="LLaMA-Factory training YAML")
    _options.add_json(c, "rocm-doctor.check/1")
    _options.add_quick(c)
    c.add_argument("--only", metavar="AREAS", help="comma-separated areas (torch,config,template,...)")
    _options.add_verbose(c)
    c.add_argument("--replay", metavar="BUNDLE", help="re-run the inventory, platform and health checks on a "
                   "`rocm-doctor report` bundle (.tar.gz or directory) instead of this machine")
    _options.add_python(c)
    _options.add_timeout(c)
    _options.add_no_cache(c)
    c.add_argument("--distributed", action="store_true", help="run on every rank under torchrun (or launch "
                   "torchrun from NNODES/NODE_RANK/NPROC_PER_NODE/MASTER_ADDR/MASTER_PORT); rank 0 reports")
    c.add_argument("--dist-timeout", type=float, default=60.0, help="seconds for process-group init and for "
                   "each collective phase (default 60)")
    c.add_argument("--dist-sizes", default="1M,16M,64M,256M", help="all_reduce sizes (default 1M,16M,64M,256M)")
    c.add_argument("--dist-backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="collective backend (default auto: nccl/RCCL with GPUs, gloo without)")
    c.add_argument("--dist-iters", type=int, default=5, help="timed all_reduce iterations per size (default 5)")
    c.add_argument("--markdown", action="store_true", help="with --distributed: print the node x area report as "
                   "Markdown")
    c.add_argument("--html", metavar="FILE", help="with --distributed: also write the report as a self-contained "
                   "HTML page")
    c.add_argument("--min-busbw", type=float, help="warn when all_reduce bus bandwidth at the largest size is "
                   "below this many GB/s")


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    args = parser.parse_args(argv)
    args.argv = ["check", *argv]  # what --distributed's torchrun re-runs on every rank
    return args


def _only(spec: str | None) -> set[str] | None:
    if not spec:
        return None
    only = {a.strip() for a in spec.split(",") if a.strip()}
    bad = only - set(areas())
    if bad:
        raise InputError(f"unknown area(s) for --only: {', '.join(sorted(bad))} (areas: {', '.join(areas())})")
    return only


REPLAY_AREAS = bundle.HOST_AREAS


def run(args: argparse.Namespace) -> int:
    only = _only(args.only)
    if (args.markdown or args.html) and not args.distributed:
        raise InputError("--markdown and --html belong to --distributed (the node x area report)")
    if args.replay:
        return replay(args, only)
    if args.distributed:
        if args.quick:
            raise InputError("--distributed runs probes and collectives; it cannot be --quick")
        out = distributed.run(args, args.argv, say=None if args.json else lambda m: print(m, file=sys.stderr))
        if out.note:
            print(f"rocm-doctor: {out.note}", file=sys.stderr)
        if out.report is not None:
            print_distributed(out.report, args)
        return out.exit_code
    with progress(enabled=not args.json) as step:
        checked = run_check(args.config, quick=args.quick, only=only, python=args.python, timeout=args.timeout,
                            progress=step, verbose=args.verbose and not args.json, no_cache=args.no_cache)
    if args.json:
        print(check_json(checked.findings, environment_summary(checked.ctx)))
    else:
        print_human(checked.findings, console(), verbose=args.verbose, skipped=skipped_areas(checked.ctx))
        reused = environment_summary(checked.ctx).get("reused")  # what --json says, in words
        served = bool(reused) and reused["stack_worker"] == "served"
        if args.verbose and reused and (reused["probes"] or served):
            console().print(f"[dim]reused from the probe cache: {', '.join(reused['probes']) or 'nothing'}"
                            + ("; the stack probes ran in a fork of the warm worker" if served else "")
                            + " (--no-cache probes everything afresh)[/dim]")
    return 1 if has_errors(checked.findings) else 0


def replay(args: argparse.Namespace, only: set[str] | None) -> int:
    """``check --replay BUNDLE``: the host areas on the machine a report recorded (its ``sysroot/``)."""
    import os
    import tempfile

    if args.config or args.distributed:
        raise InputError("--replay re-runs the host checks of a bundle; it takes no CONFIG and no --distributed")
    areas_ = set(REPLAY_AREAS) if only is None else only & set(REPLAY_AREAS)
    if not areas_:
        raise InputError(f"--replay runs only {', '.join(REPLAY_AREAS)}; --only {args.only} leaves nothing")
    with tempfile.TemporaryDirectory(prefix="rocm-doctor-replay-") as tmp:
        root = bundle.sysroot_of(args.replay, tmp)
        env = dict(os.environ, ROCM_DOCTOR_SYSROOT=str(root))
        checked = run_check(None, only=areas_, timeout=args.timeout, env=env, replay=True,
                            verbose=args.verbose and not args.json)
        if args.json:
            summary = environment_summary(checked.ctx)
            summary["replayed"] = args.replay
            print(check_json(checked.findings, summary))
        else:
            print_human(checked.findings, console(), verbose=args.verbose,
                        title=f"rocm-doctor check --replay {args.replay}")
    return 1 if has_errors(checked.findings) else 0


def print_distributed(report: dict[str, Any], args: argparse.Namespace) -> None:
    if args.html:
        try:
            Path(args.html).write_text(distributed_html(report), encoding="utf-8")
        except OSError as e:
            print(f"rocm-doctor: cannot write {args.html}: {e.strerror or e}", file=sys.stderr)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return
    if args.markdown:
        print(distributed_markdown(report), end="")
        return
    con = console()
    print_human([Finding.from_dict(f) for f in report["findings"]], con, verbose=args.verbose,
                title=f"rocm-doctor check --distributed ({len(report['ranks'])} ranks)")
    table = node_table_text(report)
    if table:
        from rich.markup import escape

        con.print("\n[bold]nodes × areas[/]  (✗ error  ! warning  i info  ✓ ok  · not run)")
        con.print(escape(table))
        con.print(f"[bold]{escape(exclude_line(report))}[/]")
    if report["collectives"]:
        con.print("\n[bold]all_reduce[/]  size        time      algbw      busbw   slowest rank")
        for c in report["collectives"]:
            con.print(f"            {c['size_bytes'] / MiB:8.2f} MiB {c['time_us'] / 1000:8.2f} ms "
                      f"{c['algbw_gbps']:7.2f} GB/s {c['busbw_gbps']:7.2f} GB/s   {c['slowest_rank']}")
