"""The warm stack worker (issue 17, doctor.warm): a fork of a server that imported the stack serves a re-check.
Real servers, real forks, real probes: the misbehaving ones of tests/faulty_probes.py, and the real LLaMA-Factory
on a tiny model for the verdicts."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from doctor import warm
from doctor.preflight import run_check
from doctor.worker import ProbeSpec, run_probes, worker_env
from tests.conftest import ROOT, build_tiny_model, stack, write_dataset

pytestmark = pytest.mark.skipif(not warm.enabled({}), reason="no fork or no Unix sockets here")


@pytest.fixture(autouse=True)
def _stop_servers():
    yield
    warm.stop_others()
    deadline = time.monotonic() + 15
    while warm.servers() and time.monotonic() < deadline:
        time.sleep(0.1)


def wait_ready(w: warm.Warm, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not w.path.exists():
        assert time.monotonic() < deadline, "the warm server never listened"
        time.sleep(0.1)


def server_pids() -> set[int]:
    return {pid for _, pid in warm.servers()}


def faulty_server(idle: str = "120", fingerprint: str = "test") -> warm.Warm:
    env = worker_env(dict(os.environ, PYTHONPATH=str(ROOT), ROCM_DOCTOR_WARM_IDLE=idle))
    w = warm.Warm(sys.executable, fingerprint, env, ["tests.faulty_probes"])
    assert w.start()
    wait_ready(w)
    return w


def test_faults_in_a_served_worker_are_results_and_the_server_lives_on():
    w = faulty_server()
    (pid,) = server_pids()
    specs = [ProbeSpec("a", "tests.faulty_probes", "fine", {"value": 1}),
             ProbeSpec("segv", "tests.faulty_probes", "segfault"),
             ProbeSpec("hang", "tests.faulty_probes", "hang", timeout=2),
             ProbeSpec("imp", "tests.faulty_probes", "broken_import"),
             ProbeSpec("b", "tests.faulty_probes", "fine", {"value": 2})]
    res = run_probes(specs, python=sys.executable, env=dict(os.environ, PYTHONPATH=str(ROOT)), warm=w)
    assert res["a"].ok and res["a"].data["value"] == 1
    assert res["segv"].status == "crashed" and "SIGSEGV" in res["segv"].error
    assert res["hang"].status == "timeout"
    assert res["imp"].status == "import_error" and "module_that_does_not_exist" in res["imp"].error
    assert res["b"].ok and res["b"].data["value"] == 2
    # every worker was a fork of the server (three: the crash and the hang each ended one), never the server
    assert w.served == 3 and pid not in {res["a"].data["pid"], res["b"].data["pid"]}
    assert res["a"].data["pid"] != res["b"].data["pid"]
    assert server_pids() == {pid}  # a segfault and a SIGKILL in its forks left the server serving


def test_a_fork_that_never_reaches_a_probe_falls_back_to_a_cold_worker(monkeypatch):
    w = faulty_server()
    spawn = w.spawn
    monkeypatch.setattr(w, "spawn", lambda spec, err: spawn(Path("/nonexistent/spec.json"), err))
    res = run_probes([ProbeSpec("a", "tests.faulty_probes", "fine", {"value": 1})], python=sys.executable,
                     env=dict(os.environ, PYTHONPATH=str(ROOT)), warm=w)
    assert w.served == 1 and res["a"].ok and res["a"].data["value"] == 1


def test_another_key_is_refused_and_retires_the_server():
    w = faulty_server()
    (pid,) = server_pids()
    w.key = "x" * 64  # what a client whose Python or environment changed sends
    assert w.spawn(Path("/nonexistent"), Path("/dev/null")) is None
    deadline = time.monotonic() + 10
    while pid in server_pids() or w.path.exists():
        assert time.monotonic() < deadline, "the server kept serving a changed environment"
        time.sleep(0.1)


def test_idle_server_exits_and_one_server_per_user():
    first = faulty_server(fingerprint="one")
    second = faulty_server(fingerprint="two", idle="1")  # starting it stopped the first
    deadline = time.monotonic() + 15
    while server_pids() or first.path.exists() or second.path.exists():
        assert time.monotonic() < deadline, f"servers left: {warm.servers()}"
        time.sleep(0.2)


def test_switches():
    assert not warm.enabled({"ROCM_DOCTOR_WARM": "0"})
    assert not warm.enabled({"ROCM_DOCTOR_NO_CACHE": "1"})
    assert not warm.enabled({"ROCM_DOCTOR_WARM_IDLE": "0"})
    assert warm.idle_seconds({"ROCM_DOCTOR_WARM_IDLE": "junk"}) == warm.IDLE_DEFAULT


@stack
@pytest.mark.slow
def test_an_edited_config_is_judged_by_a_warm_worker_with_the_same_findings(tmp_path, monkeypatch):
    """The case the warm worker exists for: the config changed, so LLaMA-Factory's parser runs again; a fork of
    the warm server runs it, and every finding equals a run that probes everything afresh."""
    model = build_tiny_model(tmp_path / "model", tokenizer="llama3")
    write_dataset(tmp_path / "data")
    cfg = {"model_name_or_path": str(model), "stage": "sft", "do_train": True, "finetuning_type": "lora",
           "lora_target": "all", "dataset": "tiny", "dataset_dir": "data", "template": "llama3", "cutoff_len": 512,
           "output_dir": "out", "per_device_train_batch_size": 1, "bf16": True, "report_to": "none"}
    path = tmp_path / "real.yaml"
    path.write_text(json.dumps(cfg))
    monkeypatch.chdir(tmp_path)
    env = dict(os.environ, ROCM_DOCTOR_CACHE=str(tmp_path / "cache"), ROCM_DOCTOR_WARM="1",
               ROCM_DOCTOR_WARM_IDLE="120")
    cold = run_check(str(path), env=env)
    assert cold.ctx.facts["warm"] == "started"
    deadline = time.monotonic() + 120
    while not list(Path(warm.run_dir()).glob("*.sock")):
        assert time.monotonic() < deadline
        time.sleep(0.2)

    def ids(c) -> list[tuple]:
        return sorted((f.id, f.severity, f.title, f.detail) for f in c.findings)

    for edit in ({"learning_rate": 2e-4}, {"lora_target": "q_proj,v_proj", "cutoff_len": 256}, {"template": "qwen3"}):
        path.write_text(json.dumps({**cfg, **edit}))
        served = run_check(str(path), env=env)
        assert served.ctx.facts["warm"] == "served", edit
        assert "lf_parse" not in served.ctx.facts["cache_hits"] and served.ctx.probes["lf_parse"].ok
        fresh = run_check(str(path), env=env, no_cache=True)
        assert ids(served) == ids(fresh), edit
    # a changed environment is never served by what the old one imported
    other = run_check(str(path), env=dict(env, HF_HOME=str(tmp_path / "hf")))
    assert other.ctx.facts["warm"] != "served"
