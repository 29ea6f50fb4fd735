"""``rocm-doctor demo``: watch fail -> fix -> retry -> success on a CPU in about a minute."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from doctor.render import console
from doctor.train import demo
from doctor.train.supervisor import Supervisor


def add_arguments(d: argparse.ArgumentParser) -> None:
    d.add_argument("--dir", help="where to build the demo (default: a new temporary directory)")
    d.add_argument("--max-attempts", type=int, default=4, help="launches at most (default 4)")
    d.add_argument("--verbose", "-v", action="store_true", help="echo LLaMA-Factory's output")


def run(args: argparse.Namespace) -> int:
    con = console()
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="rocm-doctor-demo-"))
    con.print(f"[bold]rocm-doctor demo[/] in {base}: building a tiny Llama and a dataset ...")
    try:
        d = demo.prepare(base)
    except RuntimeError as e:
        con.print(f"[red]Could not build the demo model[/] (the demo needs torch, transformers and llamafactory "
                  f"in {sys.executable}): {e}")
        return 1
    con.print(f"  model: {d.model} (tokenizer: {d.tokenizer})")
    con.print(f"  config with injected faults: {d.config}\n")
    sup = Supervisor(d.config, run_dir=base / "run", max_attempts=args.max_attempts, preflight=False,
                     quiet=not args.verbose, console=con, cwd=base)
    code = sup.run()
    con.print(f"\nYour demo.yaml is unchanged; every attempt's config, log and run.json are in {base / 'run'}.")
    return code
