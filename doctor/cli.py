"""Command line: ``rocm-doctor check|fix|train|explain|report|demo|codes``.

Exit codes: 0 no error findings (or success), 1 error findings (or failure), 2 usage or input
error, 130 interrupted. Bad input prints one clear line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from doctor.config import InputError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 already; keep its one-line style
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def _console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def environment_summary(ctx) -> dict[str, Any]:
    """The ``environment`` object of ``check --json``."""
    import platform

    env: dict[str, Any] = {"python": ctx.python, "platform": platform.platform(),
                           "config": str(ctx.config_path) if ctx.config_path else None}
    t = ctx.probes.get("torch")
    if t is not None and t.ok:
        env["torch"] = {k: t.data.get(k) for k in ("version", "hip", "cuda", "arch_list", "available", "blas")}
    libs = ctx.probes.get("libs")
    if libs is not None and libs.ok:
        env["packages"] = libs.data
    sysf = ctx.facts.get("system")
    if sysf:
        env["rocm_version"] = sysf.get("rocm_version")
        env["gpus"] = sysf.get("gpus", [])
    schema_src = ctx.facts.get("lf_schema_source")
    if schema_src:
        env["llamafactory_schema"] = schema_src
    return env


def run_check(config: str | None, *, quick: bool = False, only: set[str] | None = None,
              python: str | None = None, timeout: float = 120.0, env: dict[str, str] | None = None):
    """Build the context, run the selected checks; returns (ctx, findings). Raises InputError."""
    from doctor import runner
    from doctor.context import Context, Options

    ctx = Context.build(Options(config=config, quick=quick, only=only, python=python, timeout=timeout), env=env)
    findings = runner.run(ctx)
    return ctx, findings


def cmd_check(args: argparse.Namespace) -> int:
    from doctor.codes import AREAS
    from doctor.render import check_json, print_human

    only = None
    if args.only:
        only = {a.strip() for a in args.only.split(",") if a.strip()}
        bad = only - set(AREAS)
        if bad:
            raise InputError(f"unknown area(s) for --only: {', '.join(sorted(bad))} (areas: {', '.join(AREAS)})")
    if args.distributed:
        if args.quick:
            raise InputError("--distributed runs probes and collectives; it cannot be --quick")
        from doctor import distributed

        return distributed.cmd(args, getattr(args, "argv", ["check", "--distributed"]))
    ctx, findings = run_check(args.config, quick=args.quick, only=only, python=args.python, timeout=args.timeout)
    if args.json:
        print(check_json(findings, environment_summary(ctx)))
    else:
        print_human(findings, _console(), verbose=args.verbose)
    return 1 if any(f.severity.value == "error" for f in findings) else 0


def cmd_codes(args: argparse.Namespace) -> int:
    from doctor.codes import CODES, markdown_page

    if args.markdown:
        print(markdown_page())
        return 0
    if args.id:
        c = CODES.get(args.id.upper())
        if c is None:
            raise InputError(f"unknown finding id {args.id!r} (see `rocm-doctor codes`)")
        print(f"{c.id} [{c.severity.value}] {c.title}\n\nWhy: {c.why}\n\nFix: {c.fix}")
        if c.playbook:
            print(f"\nPlaybook: {c.playbook} ({'applied automatically' if c.autofix else 'asks first'})")
        return 0
    for c in CODES.values():
        print(f"{c.id:9} {c.severity.value:8} {c.title}")
    return 0


def cmd_playbooks(args: argparse.Namespace) -> int:
    import playbooks

    if args.markdown:
        print(playbooks.markdown_page())
        return 0
    for pb in playbooks.catalog().values():
        ans = ", ".join(list(pb.findings) + list(pb.categories))
        print(f"{pb.id:19} {'auto' if pb.auto else 'asks':5} {pb.title}  [{ans}]")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="rocm-doctor", description="Preflight, fix-and-retry and support tool for "
                "LLaMA-Factory fine-tuning on AMD ROCm GPUs.")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=_Parser)

    c = sub.add_parser("check", help="preflight the environment (and a training YAML)")
    c.add_argument("config", nargs="?", help="LLaMA-Factory training YAML")
    c.add_argument("--json", action="store_true", help="print only JSON (schema rocm-doctor.check/1)")
    c.add_argument("--quick", action="store_true", help="no torch import: config lint from a cached schema")
    c.add_argument("--only", metavar="AREAS", help="comma-separated areas (torch,config,template,...)")
    c.add_argument("--verbose", "-v", action="store_true", help="details and evidence for every finding")
    c.add_argument("--python", help="the Python of the environment to examine (default: this one)")
    c.add_argument("--timeout", type=float, default=120.0, help="seconds per probe (default 120)")
    c.add_argument("--distributed", action="store_true", help="run on every rank under torchrun (or launch "
                   "torchrun from NNODES/NODE_RANK/NPROC_PER_NODE/MASTER_ADDR/MASTER_PORT); rank 0 reports")
    c.add_argument("--dist-timeout", type=float, default=60.0, help="seconds for process-group init and for "
                   "each collective phase (default 60)")
    c.add_argument("--dist-sizes", default="1M,16M,64M,256M", help="all_reduce sizes (default 1M,16M,64M,256M)")
    c.add_argument("--dist-backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="collective backend (default auto: nccl/RCCL with GPUs, gloo without)")
    c.add_argument("--dist-iters", type=int, default=5, help="timed all_reduce iterations per size (default 5)")
    c.add_argument("--min-busbw", type=float, help="warn when all_reduce bus bandwidth at the largest size is "
                   "below this many GB/s")
    c.set_defaults(func=cmd_check)

    k = sub.add_parser("codes", help="list or explain finding ids")
    k.add_argument("id", nargs="?")
    k.add_argument("--markdown", action="store_true", help="print docs/codes.md")
    k.set_defaults(func=cmd_codes)

    pb = sub.add_parser("playbooks", help="list the playbooks (remedies fix/train apply)")
    pb.add_argument("--markdown", action="store_true", help="print docs/playbooks.md")
    pb.set_defaults(func=cmd_playbooks)

    from doctor import demo, explain, fixing, report, supervise

    fixing.register(sub)
    supervise.register(sub)
    demo.register(sub)
    explain.register(sub)
    report.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv and argv[:1] == ["train"]:  # `train CONFIG -- key=value ...` for llamafactory-cli
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    args = parser.parse_args(argv)
    args.extra = extra
    args.argv = argv
    try:
        return args.func(args)
    except InputError as e:
        print(f"rocm-doctor: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rocm-doctor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
