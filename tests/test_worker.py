"""The isolated worker: crashes, hangs and broken imports become results/findings, never crashes."""

import json
import sys
import time

from doctor.worker import ProbeSpec, run_probes
from tests.conftest import ROOT, run_cli


def _specs():
    return [ProbeSpec("a", "tests.faulty_probes", "fine", {"value": 1}),
            ProbeSpec("segv", "tests.faulty_probes", "segfault"),
            ProbeSpec("hang", "tests.faulty_probes", "hang", timeout=2),
            ProbeSpec("imp", "tests.faulty_probes", "broken_import"),
            ProbeSpec("b", "tests.faulty_probes", "fine", {"value": 2})]


def test_faults_become_results_and_later_probes_still_run(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    t0 = time.monotonic()
    res = run_probes(_specs(), python=sys.executable)
    assert time.monotonic() - t0 < 30
    assert res["a"].ok and res["a"].data["value"] == 1
    assert res["segv"].status == "crashed" and "SIGSEGV" in res["segv"].error
    assert res["hang"].status == "timeout"
    assert res["imp"].status == "import_error" and "module_that_does_not_exist" in res["imp"].error
    assert res["b"].ok and res["b"].data["value"] == 2
    # a fresh worker took over after the crash: different processes
    assert res["a"].data["pid"] != res["b"].data["pid"]


def test_one_import_per_worker(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    res = run_probes([ProbeSpec(f"p{i}", "tests.faulty_probes", "fine", {"value": i}) for i in range(4)])
    assert len({r.data["pid"] for r in res.values()}) == 1


def test_unstartable_python_is_reported():
    res = run_probes([ProbeSpec("x", "tests.faulty_probes", "fine")], python="/nonexistent/python3")
    assert res["x"].status == "not_run" and "cannot start" in res["x"].error


def test_cli_survives_faulty_plugin_probes():
    p = run_cli("check", "--json", "--only", "doctor", env={"ROCM_DOCTOR_PLUGINS": "tests.faulty_probes"})
    assert p.returncode == 1, p.stderr
    assert "Traceback" not in p.stderr
    ids = [f["id"] for f in json.loads(p.stdout)["findings"]]
    assert ids.count("DOC002") == 1 and ids.count("DOC003") == 1 and ids.count("DOC004") == 1
