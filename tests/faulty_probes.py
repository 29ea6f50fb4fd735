"""Probes that misbehave on purpose, and a plugin check that runs them (ROCM_DOCTOR_PLUGINS)."""

import os
import signal
import time

from doctor.registry import probe_failure
from doctor.runner import check  # what a plugin imports
from doctor.worker import ProbeSpec


def segfault() -> dict:
    os.kill(os.getpid(), signal.SIGSEGV)
    return {}


def hang() -> dict:
    time.sleep(3600)
    return {}


def broken_import() -> dict:
    import module_that_does_not_exist_rocm_doctor  # noqa: F401

    return {}


def fine(value: int = 1) -> dict:
    return {"value": value, "pid": os.getpid()}


def touch(path: str) -> dict:
    """Stands in for a GPU probe: leaves a mark the moment the device worker runs."""
    open(path, "w").close()
    return {"pid": os.getpid()}


def _probes(ctx):
    return [ProbeSpec("t_fine1", "tests.faulty_probes", "fine", {"value": 1}, group="faulty"),
            ProbeSpec("t_segv", "tests.faulty_probes", "segfault", group="faulty"),
            ProbeSpec("t_hang", "tests.faulty_probes", "hang", timeout=2, group="faulty"),
            ProbeSpec("t_import", "tests.faulty_probes", "broken_import", group="faulty"),
            ProbeSpec("t_fine2", "tests.faulty_probes", "fine", {"value": 2}, group="faulty")]


@check("doctor", probes=_probes, order=1)
def faulty(ctx):
    out = []
    for name in ("t_fine1", "t_segv", "t_hang", "t_import", "t_fine2"):
        out += probe_failure(ctx.probes.get(name), "doctor")
    return out
