"""``rocm-doctor train CONFIG [-- key=value ...]``: supervise ``llamafactory-cli train`` (preflight, launch,
watch, classify a failure, patch a copy, resume). The engine is :mod:`doctor.train`."""

from __future__ import annotations

import argparse
from pathlib import Path

import playbooks as pbs
from doctor.commands import _options
from doctor.config import InputError, load_config
from doctor.render import console
from doctor.train.record import default_run_dir
from doctor.train.supervisor import Supervisor


def add_arguments(t: argparse.ArgumentParser) -> None:
    t.description = ("Supervise `llamafactory-cli train CONFIG`: preflight, launch, watch for divergence, classify "
                     "a failure, apply the next playbook to a copy, resume from the last checkpoint. Arguments "
                     "after `--` (key=value overrides) go to llamafactory-cli.")
    t.add_argument("config", help="LLaMA-Factory training YAML (never modified)")
    t.add_argument("--max-attempts", type=int, default=3, help="launches at most (default 3)")
    t.add_argument("--run-dir", help="where attempt-N.yaml/.log and run.json go "
                   "(default .rocm-doctor/runs/<timestamp>)")
    t.add_argument("--no-preflight", action="store_true", help="launch without running `check` first")
    t.add_argument("--launcher", metavar="CMD", help="command instead of `llamafactory-cli train`; the attempt's "
                   "config path is appended (or replaces {config})")
    t.add_argument("--quiet", "-q", action="store_true", help="do not echo the training output (still in the logs)")
    t.add_argument("--json", action="store_true", help="print run.json at the end")
    t.add_argument("--gpu-interval", type=float, default=15.0, help="seconds between GPU samples (default 15)")
    t.add_argument("--stall-timeout", type=float, metavar="SECONDS", help="stop an attempt that made no progress "
                   "for this long while its processes and GPUs were idle, as a hang (default: 30 min or 10x the "
                   "slowest step, the larger; 0 turns the watchdog off)")
    _options.add_no_cache(t)
    t.add_argument("--apply", action="append", default=[], metavar="PLAYBOOK", help="allow a playbook that asks "
                   "first (e.g. exclude-gpu: move the run off a GPU that faulted) when a retry calls for it")


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``train CONFIG [options] -- key=value ...``: what follows ``--`` goes to llamafactory-cli untouched."""
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    args = parser.parse_args(argv)
    args.extra = extra
    return args


def run(args: argparse.Namespace) -> int:
    if args.max_attempts < 1:
        raise InputError("--max-attempts must be at least 1")
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir()
    if run_dir.exists() and (run_dir / "run.json").exists():
        raise InputError(f"run directory {run_dir} already holds a run; choose another --run-dir")
    if args.stall_timeout is not None and args.stall_timeout < 0:
        raise InputError("--stall-timeout must be 0 (off) or a number of seconds")
    unknown = [p for p in args.apply if p not in pbs.catalog()]
    if unknown:
        raise InputError(f"unknown playbook for --apply: {', '.join(unknown)} (see `rocm-doctor playbooks`)")
    load_config(args.config)  # validate before anything else
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot use {run_dir} as the run directory: {e.strerror or e}") from None
    sup = Supervisor(Path(args.config), run_dir=run_dir, max_attempts=args.max_attempts,
                     preflight=not args.no_preflight, launcher=args.launcher, extra=list(args.extra),
                     quiet=args.quiet or args.json, gpu_interval=args.gpu_interval, console=console(stderr=args.json),
                     stall_timeout=args.stall_timeout, allow=set(args.apply), no_cache=args.no_cache)
    sup.command_for(run_dir / "attempt-1.yaml")  # no llamafactory-cli and no --launcher: exit 2 before anything
    code = sup.run()
    if args.json:
        print((run_dir / "run.json").read_text(encoding="utf-8"))
    return code
