"""A plugin check (ROCM_DOCTOR_PLUGINS) whose probes leave a line in a log each time they really run, to see
what the probe cache reuses: one pure probe reading a file, one that is pure only without a GPU, one never kept."""

import os
from pathlib import Path

from doctor.runner import check  # what a plugin imports
from doctor.worker import ProbeSpec


def read_input(log: str, path: str) -> dict:
    with open(log, "a") as f:
        f.write("pure\n")
    return {"text": Path(path).read_text(), "pid": os.getpid()}


def machine(log: str) -> dict:
    with open(log, "a") as f:
        f.write("nogpu\n")
    return {"pid": os.getpid()}


def never(log: str) -> dict:
    with open(log, "a") as f:
        f.write("never\n")
    return {"pid": os.getpid()}


def fails(log: str) -> dict:
    with open(log, "a") as f:
        f.write("fails\n")
    raise RuntimeError("a deterministic failure")


def _probes(ctx):
    log, data = ctx.env["CACHE_TEST_LOG"], ctx.env["CACHE_TEST_INPUT"]
    return [ProbeSpec("c_pure", "tests.cache_probes", "read_input", {"log": log, "path": data}, group="cachetest",
                      cache="pure", inputs=[data]),
            ProbeSpec("c_nogpu", "tests.cache_probes", "machine", {"log": log}, group="cachetest", cache="nogpu"),
            ProbeSpec("c_never", "tests.cache_probes", "never", {"log": log}, group="cachetest"),
            ProbeSpec("c_fails", "tests.cache_probes", "fails", {"log": log}, group="cachetest", cache="pure")]


@check("doctor", probes=_probes, order=1)
def cached(ctx):
    return []
