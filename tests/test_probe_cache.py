"""The probe cache (issue 17): what a warm `check` reuses, and what it never does. Real workers run real
probes (tests/cache_probes.py logs each real run); the stack test runs the real LLaMA-Factory on a tiny model."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from doctor import cache
from doctor.preflight import run_check
from tests.conftest import FIXTURES, build_tiny_model, run_cli, stack, write_dataset


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    log, data = tmp_path / "runs.log", tmp_path / "input.txt"
    data.write_text("one")
    monkeypatch.setenv("ROCM_DOCTOR_PLUGINS", "tests.cache_probes")
    monkeypatch.setenv("ROCM_DOCTOR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CACHE_TEST_LOG", str(log))
    monkeypatch.setenv("CACHE_TEST_INPUT", str(data))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))
    return log, data, tmp_path / "cache" / "probes"


def runs(log: Path) -> list[str]:
    out = log.read_text().split() if log.exists() else []
    log.write_text("")
    return out


def check(**kw):
    c = run_check(None, only={"doctor"}, env=dict(os.environ), **kw)
    return c.ctx


def test_warm_run_reuses_pure_probes_and_never_the_rest(plugin):
    log, data, _ = plugin
    cold = check()
    assert sorted(runs(log)) == ["fails", "never", "nogpu", "pure"]
    warm = check()
    # this machine has no GPU: the "nogpu" probe is kept; a deterministic failure is kept as well
    assert runs(log) == ["never"]
    assert sorted(warm.facts["cache_hits"]) == ["c_fails", "c_nogpu", "c_pure"]
    for name in ("c_pure", "c_nogpu", "c_fails"):
        a, b = cold.probes[name], warm.probes[name]
        assert (a.status, a.data, a.error) == (b.status, b.data, b.error)
    assert warm.probes["c_pure"].data["text"] == "one"
    data.write_text("two")  # an input changed: that probe runs again, the others stay kept
    edited = check()
    assert sorted(runs(log)) == ["never", "pure"] and edited.probes["c_pure"].data["text"] == "two"


def test_no_cache_neither_reads_nor_writes(plugin):
    log, _, store = plugin
    check(no_cache=True)
    assert not store.exists()
    check()  # writes
    check(no_cache=True)  # and this one does not read it
    assert sorted(runs(log)) == sorted(["fails", "never", "nogpu", "pure"] * 3)
    check()
    assert runs(log) == ["never"]


def test_corrupt_or_foreign_entries_are_recomputed(plugin):
    log, _, store = plugin
    check()
    runs(log)
    files = sorted(store.glob("*.json"))
    assert len(files) == 3
    files[0].write_text("{torn")
    files[1].write_text(json.dumps({"v": 99, "key": files[1].stem, "result": {"status": "ok"}}))
    files[2].write_bytes(b"\xff\xfe\x00")
    ctx = check()
    assert sorted(runs(log)) == ["fails", "never", "nogpu", "pure"] and ctx.facts["cache_hits"] == []
    assert ctx.probes["c_pure"].ok


def test_a_machine_with_a_gpu_keeps_only_pure_probes(plugin, monkeypatch):
    log, _, _ = plugin
    monkeypatch.setenv("ROCM_DOCTOR_SYSROOT", str(FIXTURES / "hosts" / "mi300x-healthy"))  # /dev/kfd, 8 GPUs
    check()
    runs(log)
    warm = check()
    assert sorted(runs(log)) == ["never", "nogpu"] and sorted(warm.facts["cache_hits"]) == ["c_fails", "c_pure"]


def test_the_environment_is_part_of_the_key(plugin, monkeypatch):
    log, _, _ = plugin
    check()
    runs(log)
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "1")
    check()
    assert sorted(runs(log)) == ["fails", "never", "nogpu", "pure"]
    monkeypatch.setenv("SLURM_JOB_ID", "4711")  # changes per job, answers nothing
    monkeypatch.setenv("OLDPWD", "/elsewhere")
    check()
    assert runs(log) == ["never"]


def test_fingerprint_follows_installs_and_code_on_the_path(tmp_path):
    site = tmp_path / "site-packages"
    src = tmp_path / "src"
    site.mkdir()
    (src / "fakepkg").mkdir(parents=True)
    (src / "fakepkg" / "__init__.py").write_text("x = 1\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(src)]))
    fp = cache.python_fingerprint(sys.executable, env)
    assert cache.python_fingerprint(sys.executable, env) == fp
    (site / "torch-2.9.1.dist-info").mkdir()
    fp2 = cache.python_fingerprint(sys.executable, env)
    assert fp2 != fp
    os.utime(site / "torch-2.9.1.dist-info", ns=(1, 1))  # reinstalled: same name, new mtime
    fp3 = cache.python_fingerprint(sys.executable, env)
    assert fp3 != fp2
    os.utime(src / "fakepkg" / "__init__.py", ns=(2, 2))
    fp4 = cache.python_fingerprint(sys.executable, env)
    assert fp4 != fp3
    (src / "out" / "checkpoint-5").mkdir(parents=True)  # what a run leaves in the working directory: no package
    assert cache.python_fingerprint(sys.executable, env) == fp4
    # another interpreter is asked, not assumed (every venv's python resolves to the same base binary)
    other = cache.python_fingerprint(str(tmp_path / "no-such-python"), env)
    assert other != fp4


def test_path_signature(tmp_path):
    f = tmp_path / "cfg.yaml"
    f.write_text("a: 1\n")
    s1 = cache.path_signature(f)
    os.utime(f, ns=(5, 5))
    assert cache.path_signature(f) == s1  # a small file by content
    f.write_text("a: 2\n")
    assert cache.path_signature(f) != s1
    out = tmp_path / "out"
    assert cache.path_signature(out) is None
    (out / "checkpoint-10").mkdir(parents=True)
    s2 = cache.path_signature(out)
    (out / "checkpoint-10" / "trainer_state.json").write_text("{}")
    assert cache.path_signature(out) != s2  # one level into a checkpoint


def test_secrets_never_reach_the_cache(plugin, monkeypatch):
    _, _, store = plugin
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz0123")
    check()
    assert all("hf_abcdefghijklmnop" not in f.read_text() for f in store.glob("*.json"))


@stack
@pytest.mark.slow
def test_realistic_config_same_findings_cold_warm_and_no_cache(tmp_path, monkeypatch):
    model = build_tiny_model(tmp_path / "model", tokenizer="llama3")
    write_dataset(tmp_path / "data")
    cfg = {"model_name_or_path": str(model), "stage": "sft", "do_train": True, "finetuning_type": "lora",
           "lora_target": "all", "dataset": "tiny", "dataset_dir": "data", "template": "llama3", "cutoff_len": 512,
           "output_dir": "out", "per_device_train_batch_size": 1, "bf16": True, "report_to": "none"}
    (tmp_path / "real.yaml").write_text(json.dumps(cfg))
    env = {"ROCM_DOCTOR_CACHE": str(tmp_path / "cache")}

    def findings(*extra: str) -> list[dict]:
        r = run_cli("check", "--json", "real.yaml", *extra, cwd=tmp_path, env=env)
        assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr[-2000:]
        return json.loads(r.stdout)["findings"]

    cold = findings()
    assert {"CFG000", "TPL000", "TORCH010"} <= {f["id"] for f in cold}
    assert findings() == cold
    assert findings("--no-cache") == cold
    monkeypatch.chdir(tmp_path)  # LLaMA-Factory resolves data/ and out/ from here, and so does the key
    warm = run_check(str(tmp_path / "real.yaml"), env=dict(os.environ, **env))
    hits = set(warm.ctx.facts["cache_hits"])
    assert {"lf_schema", "lf_parse", "template_tokens", "companions", "requirements", "torch"} <= hits
    # an edited config: the parser's verdict is recomputed, the tokenizer's is not
    (tmp_path / "real.yaml").write_text(json.dumps({**cfg, "learning_rate": 2e-4}))
    edited = run_check(str(tmp_path / "real.yaml"), env=dict(os.environ, **env))
    hits = set(edited.ctx.facts["cache_hits"])
    assert "template_tokens" in hits and "lf_parse" not in hits and edited.ctx.probes["lf_parse"].ok


@stack
@pytest.mark.slow
def test_train_preflight_keeps_and_reuses_what_check_reads(tmp_path, monkeypatch, tiny_llama3):
    """`train`'s preflight goes through the same cache as `check`: what it kept, a later check reuses (and the
    other way round); `train --no-cache` keeps nothing."""
    write_dataset(tmp_path / "data")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({"model_name_or_path": str(tiny_llama3), "stage": "sft", "do_train": True,
                               "finetuning_type": "lora", "lora_target": "all", "dataset": "tiny",
                               "dataset_dir": "data", "template": "llama3", "cutoff_len": 128, "output_dir": "out",
                               "per_device_train_batch_size": 1, "max_steps": 1, "report_to": "none"}))
    launcher = f"{sys.executable} -c 'import sys; sys.exit(0)' {{config}}"

    def train(run_dir: str, cache_dir: Path, *extra: str) -> dict:
        r = run_cli("train", "cfg.yaml", "--run-dir", run_dir, "-q", "--launcher", launcher, *extra, cwd=tmp_path,
                    env={"ROCM_DOCTOR_CACHE": str(cache_dir)})
        assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout[-2000:] + r.stderr[-2000:]
        return json.loads((tmp_path / run_dir / "run.json").read_text())

    run = train("run1", tmp_path / "cache")
    assert run["preflight"]["findings"] and run["outcome"] == "succeeded"
    assert list((tmp_path / "cache" / "probes").glob("*.json"))
    monkeypatch.chdir(tmp_path)
    warm = run_check(str(cfg), env=dict(os.environ, ROCM_DOCTOR_CACHE=str(tmp_path / "cache")))
    assert {"lf_schema", "lf_parse", "template_tokens", "companions"} <= set(warm.ctx.facts["cache_hits"])
    train("run2", tmp_path / "cache-off", "--no-cache")
    assert not (tmp_path / "cache-off" / "probes").exists()
