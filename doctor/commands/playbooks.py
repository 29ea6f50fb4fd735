"""``rocm-doctor playbooks [--markdown]``: list the remedies ``fix`` and ``train`` apply."""

from __future__ import annotations

import argparse

import playbooks


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--markdown", action="store_true", help="print docs/playbooks.md")


def run(args: argparse.Namespace) -> int:
    if args.markdown:
        print(playbooks.markdown_page())
        return 0
    for pb in playbooks.catalog().values():
        ans = ", ".join(list(pb.findings) + list(pb.categories))
        print(f"{pb.id:19} {'auto' if pb.auto else 'asks':5} {pb.title}  [{ans}]")
    return 0
