"""Flags several subcommands share, defined once (pip's ``cmdoptions``)."""

from __future__ import annotations

import argparse


def add_json(p: argparse.ArgumentParser, schema: str) -> None:
    p.add_argument("--json", action="store_true", help=f"print only JSON (schema {schema})")


def add_quick(p: argparse.ArgumentParser, what: str = "no torch import: config lint from a cached schema") -> None:
    p.add_argument("--quick", action="store_true", help=what)


def add_python(p: argparse.ArgumentParser) -> None:
    p.add_argument("--python", help="the Python of the environment to examine (default: this one)")


def add_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per probe (default 120)")


def add_no_cache(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-cache", action="store_true",
                   help="run every probe afresh; neither read nor write kept probe results (also "
                        "ROCM_DOCTOR_NO_CACHE=1; the cache lives in ROCM_DOCTOR_CACHE or ~/.cache/rocm-doctor)")


def add_verbose(p: argparse.ArgumentParser, what: str = "details and evidence for every finding") -> None:
    p.add_argument("--verbose", "-v", action="store_true", help=what)
