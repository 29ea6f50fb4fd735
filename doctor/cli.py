"""Command line: the parser built from :data:`doctor.commands.COMMANDS`, dispatch, exit codes.

Exit codes: 0 no error findings (or success), 1 error findings (or failure), 2 usage or input error,
130 interrupted. Bad input prints one clear line on stderr, never a traceback. Only the chosen
subcommand's module is imported (pip's ``create_command``).
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys

from doctor.commands import COMMANDS
from doctor.config import InputError

PROG = "rocm-doctor"
DESCRIPTION = "Preflight, fix-and-retry and support tool for LLaMA-Factory fine-tuning on AMD ROCm GPUs."


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2 already; keep its one-line style
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def version() -> str:
    import importlib.metadata as md

    try:
        return md.version("rocm-doctor")
    except md.PackageNotFoundError:
        from doctor import __version__

        return __version__


def top_parser() -> Parser:
    p = Parser(prog=PROG, description=DESCRIPTION)
    p.add_argument("--version", action="version", version=f"{PROG} {version()}")
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=Parser)
    for name, c in COMMANDS.items():
        sub.add_parser(name, help=c.summary, add_help=False)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    name = next((a for a in argv if not a.startswith("-")), None)
    if name is None or argv[0] != name:  # --version, --help, or nothing
        top = top_parser()
        top.parse_args(argv)
        top.print_help(sys.stderr)
        return 2
    if name not in COMMANDS:
        close = difflib.get_close_matches(name, COMMANDS, n=1)
        top_parser().print_usage(sys.stderr)
        print(f"{PROG}: error: unknown command {name!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
              + f"; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name].module)
    parser = Parser(prog=f"{PROG} {name}", description=COMMANDS[name].summary)
    module.add_arguments(parser)
    parse = getattr(module, "parse_args", None)
    args = parse(parser, argv[1:]) if parse else parser.parse_args(argv[1:])
    try:
        return module.run(args)
    except InputError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
