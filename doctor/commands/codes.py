"""``rocm-doctor codes [ID] [--markdown]``: list the finding ids, or explain one."""

from __future__ import annotations

import argparse

from doctor import codes
from doctor.config import InputError


def add_arguments(k: argparse.ArgumentParser) -> None:
    k.add_argument("id", nargs="?")
    k.add_argument("--markdown", action="store_true", help="print docs/codes.md")


def run(args: argparse.Namespace) -> int:
    if args.markdown:
        print(codes.markdown_page())
        return 0
    if args.id:
        c = codes.get(args.id)
        if c is None:
            raise InputError(f"unknown finding id {args.id!r} (see `rocm-doctor codes`)")
        print(f"{c.id} [{c.severity.value}] {c.title}\n\nWhy: {c.why}\n\nFix: {c.fix}")
        if c.playbook:
            print(f"\nPlaybook: {c.playbook} ({'applied automatically' if c.autofix else 'asks first'})")
        return 0
    for c in codes.all_codes():
        print(f"{c.id:9} {c.severity.value:8} {c.title}")
    return 0
