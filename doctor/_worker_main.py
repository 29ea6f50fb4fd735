"""Child side of the isolated probe worker. Standard library only.

Run as ``python -m doctor._worker_main SPEC.json`` by :mod:`doctor.worker`, in the *examined*
Python. For each probe it appends a ``start`` record, runs ``module.func(**params)``, then
appends a ``result`` record to the results file (flushed and fsync'ed line by line), so that
the parent knows which probe was in flight when the process died or hung. Heavy modules
(torch, llamafactory) are imported by the first probe that needs them and stay imported: one
import per worker, not per probe.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback


def _emit(fh, record: dict) -> None:
    fh.write(json.dumps(record, default=str) + "\n")
    fh.flush()
    os.fsync(fh.fileno())


def main(spec_path: str) -> int:
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    with open(spec["results"], "a", encoding="utf-8") as out:
        for probe in spec["probes"]:
            name = probe["name"]
            _emit(out, {"event": "start", "name": name, "t": time.time()})
            t0 = time.perf_counter()
            try:
                mod = importlib.import_module(probe["module"])
                func = getattr(mod, probe["func"])
                data = func(**probe.get("params", {}))
                rec = {"event": "result", "name": name, "status": "ok", "data": data}
            except ImportError as e:  # ModuleNotFoundError included
                rec = {"event": "result", "name": name, "status": "import_error",
                       "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)}
            except BaseException as e:  # a probe must never take the worker down by exception
                rec = {"event": "result", "name": name, "status": "error",
                       "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc(limit=8)}
            rec["duration_s"] = round(time.perf_counter() - t0, 4)
            _emit(out, rec)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1])
    # Every result is already fsync'ed: skip interpreter teardown, which takes ~1 s once torch,
    # transformers and llamafactory are loaded (atexit handlers, module finalisation, thread joins).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
