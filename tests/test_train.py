"""`rocm-doctor train` end to end: the real llamafactory-cli on CPU, a tiny Llama built by the tests,
real subprocesses and signals. Each run ends with the user's config byte-identical."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from doctor.checkpoints import checkpoints, last_good_checkpoint
from doctor.train.watch import DivergenceWatch, judge_balance, parse_hf_log_line
from tests.conftest import FIXTURES, ROOT, run_cli, stack, write_config, write_dataset

slow = pytest.mark.slow


def base_config(model: Path, **over) -> dict:
    cfg = {"model_name_or_path": str(model), "stage": "sft", "do_train": True, "finetuning_type": "lora",
           "lora_target": "all", "dataset": "tiny", "dataset_dir": "data", "template": "llama3", "cutoff_len": 64,
           "output_dir": "out", "logging_steps": 1, "save_steps": 2, "per_device_train_batch_size": 2,
           "gradient_accumulation_steps": 1, "learning_rate": 1e-3, "max_steps": 6, "report_to": "none"}
    cfg.update(over)
    return {k: v for k, v in cfg.items() if v is not None}


@pytest.fixture
def work(tmp_path: Path) -> Path:
    write_dataset(tmp_path / "data")
    return tmp_path


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def train(work: Path, cfg: Path, *args: str, timeout: float = 400) -> tuple[subprocess.CompletedProcess, dict]:
    before = sha(cfg)
    r = run_cli("train", str(cfg), "--run-dir", str(work / "run"), "-q", *args, cwd=work, timeout=timeout)
    assert sha(cfg) == before, "the user's config was modified"
    run = json.loads((work / "run" / "run.json").read_text())
    assert run["schema"] == "rocm-doctor.run/1"
    return r, run


def attempt_config(work: Path, n: int) -> dict:
    from doctor.config import load_config, to_plain

    return to_plain(load_config(work / "run" / f"attempt-{n}.yaml")[0])


def final_global_step(out: Path) -> int:
    return json.loads((out / "trainer_state.json").read_text())["global_step"]


@stack
@slow
def test_device_map_fixed_by_preflight(work, tiny_llama3):
    cfg = write_config(work / "cfg.yaml", **base_config(tiny_llama3, device_map="auto"))
    r, run = train(work, cfg, "--", "max_steps=4")  # extra llamafactory-cli overrides go through
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert run["outcome"] == "succeeded"
    assert [a["playbooks"] for a in run["attempts"]] == [["drop-unknown-keys"]]
    assert "device_map" not in attempt_config(work, 1)
    assert run["attempts"][0]["command"][-1] == "max_steps=4"
    assert run["attempts"][0]["steps"]["end"] == 4 and final_global_step(work / "out") == 4
    assert (work / "run" / "summary.md").is_file() and (work / "run" / "attempt-1.log").stat().st_size > 0
    assert (work / "run" / "loss.png").is_file()  # matplotlib is part of the LLaMA-Factory stack
    tp = run["attempts"][0]["throughput"]  # live figures of a real LLaMA-Factory run on this CPU
    assert tp["median_steps_per_s"] > 0 and tp["median_samples_per_s"] > 0 and tp["median_tokens_per_s"] > 0
    assert tp["warmup_s"] > 0 and run["attempts"][0]["hang"] is None
    assert "steps/s" in (work / "run" / "summary.md").read_text()


@stack
@slow
def test_qlora_without_bitsandbytes_falls_back_to_lora(work, tiny_llama3):
    cfg = write_config(work / "cfg.yaml", **base_config(tiny_llama3, quantization_bit=4, quantization_method="bnb"))
    launcher = f"{sys.executable} -c 'import sys; from llamafactory.cli import main; sys.exit(main())' train {{config}}"
    r, run = train(work, cfg, "--no-preflight", "--launcher", launcher)
    assert r.returncode == 0, r.stdout[-3000:]
    att = run["attempts"]
    assert att[0]["command"][:2] == [sys.executable, "-c"]  # --launcher, with {config} substituted
    assert [a["category"] for a in att] == ["bitsandbytes_unavailable", None]
    assert att[1]["playbooks"] == ["qlora-to-lora"]
    assert not [k for k in attempt_config(work, 2) if k.startswith("quantization")]
    assert str(work / "run" / "attempt-2.yaml") in att[1]["command"]


@stack
@slow
def test_divergence_stopped_early_then_fixed(work, tiny_llama3):
    # flash_attn: fa2 (LLaMA-Factory falls back on this CPU): the explicit kernel is the first suspect
    cfg = write_config(work / "cfg.yaml", **base_config(tiny_llama3, learning_rate=1000.0, max_steps=20, flash_attn="fa2"))
    r, run = train(work, cfg, "--no-preflight", "--max-attempts", "4")
    assert r.returncode == 0, r.stdout[-3000:]
    att = run["attempts"]
    assert att[0]["category"] == "nan_or_divergent_loss" and att[0]["early_stop"]
    assert att[0]["steps"]["end"] < 20  # stopped, not run to the end
    st = att[0]["steps"]
    assert st["detected_at"] - st["diverged_at"] <= 2  # within two logging steps
    applied = [p for a in att for p in a["playbooks"]]
    assert applied[0] == "disable-flash-attn" and "lower-lr" in applied
    assert att[-1]["exit_code"] == 0
    assert attempt_config(work, len(att))["learning_rate"] == 0.0002
    assert final_global_step(work / "out") == 20


def _start(work: Path, cfg: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "doctor", "train", str(cfg), "--run-dir", str(work / "run"), "-q",
                             "--no-preflight", *args], cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _wait_for(pred, timeout: float = 120.0) -> None:
    t = time.time()
    while not pred():
        assert time.time() - t < timeout, "timed out waiting"
        time.sleep(0.05)


def _kill_after_first_checkpoint(work: Path, sup: subprocess.Popen) -> int:
    ck = work / "out" / "checkpoint-5" / "trainer_state.json"
    _wait_for(ck.is_file)
    child = psutil.Process(sup.pid).children()[0]
    child.send_signal(signal.SIGKILL)
    return max(s for s, _, ok in checkpoints(work / "out") if ok)


@stack
@slow
@pytest.mark.parametrize("overwrite", [False, True], ids=["plain", "overwrite_output_dir"])
def test_sigkill_after_checkpoint_resumes(work, tiny_llama3, overwrite):
    cfg = write_config(work / "cfg.yaml", **base_config(tiny_llama3, max_steps=60, save_steps=5,
                                                           overwrite_output_dir=True if overwrite else None))
    before = sha(cfg)
    sup = _start(work, cfg)
    last_ck = _kill_after_first_checkpoint(work, sup)
    out, _ = sup.communicate(timeout=300)
    assert sup.returncode == 0, out[-3000:]
    assert sha(cfg) == before
    run = json.loads((work / "run" / "run.json").read_text())
    a1, a2 = run["attempts"]
    assert a1["category"] == "killed_by_signal" and a1["signal"] == "SIGKILL"
    assert a2["playbooks"] in ([], ["keep-progress"]) and a2["resumed_from"].endswith(f"checkpoint-{last_ck}")
    assert a2["steps"]["start"] == last_ck + 1 > 1  # resumed past 0
    assert final_global_step(work / "out") == 60 == run["final_step"]
    a2_cfg = attempt_config(work, 2)
    assert "overwrite_output_dir" not in a2_cfg and a2_cfg["resume_from_checkpoint"] == a2["resumed_from"]
    if overwrite:
        assert a2["playbooks"] == ["keep-progress"]
    lost = a1["steps"]["end"] - last_ck
    print(f"steps lost by the kill: {lost}")


@stack
@slow
def test_missing_dataset_stops_without_retry(work, tiny_llama3):
    cfg = write_config(work / "cfg.yaml", **base_config(tiny_llama3, dataset="nope"))
    r, run = train(work, cfg, "--no-preflight")
    assert r.returncode == 1
    assert len(run["attempts"]) == 1 and run["attempts"][0]["category"] == "dataset_missing"
    assert "retry cannot fix" in run["stop_reason"]
    # with preflight nothing is even launched
    import shutil

    shutil.rmtree(work / "run")
    r, run = train(work, cfg)
    assert r.returncode == 1 and run["attempts"] == [] and "CFG007" in run["stop_reason"]


@stack
@slow
def test_ctrl_c_leaves_no_child(work, tiny_llama3):
    cfg = write_config(work / "cfg.yaml", **base_config(tiny_llama3, max_steps=5000, save_steps=1000))
    sup = _start(work, cfg)
    _wait_for(lambda: (work / "out" / "trainer_log.jsonl").is_file())
    tree = psutil.Process(sup.pid).children(recursive=True)
    assert tree
    sup.send_signal(signal.SIGINT)
    out, _ = sup.communicate(timeout=120)
    assert sup.returncode == 130, out[-2000:]
    time.sleep(0.5)
    alive = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive
    run = json.loads((work / "run" / "run.json").read_text())
    assert run["interrupted"] and run["outcome"] == "failed"


def test_bad_input_exit_2(work):
    r = run_cli("train", str(work / "missing.yaml"), cwd=work)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    cfg = work / "c.yaml"
    cfg.write_text("a: 1\n")
    r = run_cli("train", str(cfg), "--max-attempts", "0", cwd=work)
    assert r.returncode == 2
    (work / "afile").write_text("")
    for args in (("train", str(cfg), "--run-dir", str(work / "afile")), ("demo", "--dir", str(work / "afile"))):
        r = run_cli(*args, cwd=work)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr


@stack
@slow
def test_demo(tmp_path):
    r = run_cli("demo", "--dir", str(tmp_path / "demo"), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    run = json.loads((tmp_path / "demo" / "run" / "run.json").read_text())
    cats = [a["category"] for a in run["attempts"]]
    assert cats == ["unknown_config_key", "bitsandbytes_unavailable", None]
    assert "device_map: auto" in (tmp_path / "demo" / "demo.yaml").read_text()


# ------------------------------------------------------------------ pure parts (no training)

def test_hf_log_line_and_watch():
    line = (" 15%|█▌        | 3/20 [00:00<00:01,  9.14it/s]          {'loss': '11.76', 'grad_norm': 'nan', "
            "'learning_rate': '900', 'epoch': '0.09375'}")
    vals = parse_hf_log_line(line)
    assert vals["loss"] == 11.76 and vals["grad_norm"] != vals["grad_norm"]  # NaN
    w = DivergenceWatch()
    assert not w.feed(1, 2.0) and not w.feed(2, 1.5)
    assert not w.feed(3, 9.0)            # one spike is not divergence
    assert not w.feed(4, 1.4)
    assert not w.feed(5, 9.0) and w.feed(6, 10.0)
    assert (w.diverged_at, w.detected_at) == (5, 6)
    w = DivergenceWatch()
    w.feed(1, 2.0)
    assert w.feed(2, 0.0) and "0.0" in w.reason
    w = DivergenceWatch()
    assert w.feed(7, None, float("inf")) and w.diverged_at == 7


def test_checkpoint_choice(tmp_path):
    for n, complete in ((2, True), (4, True), (6, False)):
        d = tmp_path / f"checkpoint-{n}"
        d.mkdir()
        if complete:
            (d / "trainer_state.json").write_text("{}")
    (tmp_path / "checkpoint-x").mkdir()
    assert last_good_checkpoint(tmp_path).name == "checkpoint-4"        # 6 is incomplete
    assert last_good_checkpoint(tmp_path, before_step=4).name == "checkpoint-2"
    assert last_good_checkpoint(tmp_path, before_step=2) is None


def test_balance_from_recorded_amd_smi():
    """Eight MI300X as amd-smi reports one (recorded output, real parser), one of them full."""
    import dataclasses

    from doctor import gpuinfo

    static = json.loads((FIXTURES / "amd-smi" / "CONSTRUCTED-mi300x-static-asic-vram-wrapped.json").read_text())
    metric = json.loads((FIXTURES / "amd-smi" / "CONSTRUCTED-mi300x-metric-usage-memusage-list.json").read_text())
    (one,) = gpuinfo.parse_amd_smi(static, metric)
    assert one.vram_total_mib == 196592
    idle = [dataclasses.replace(one, index=i) for i in range(8)]
    busy = [dataclasses.replace(g, vram_used_mib=190000 if g.index == 3 else g.vram_used_mib) for g in idle]
    msg = judge_balance([busy] * 3)
    assert msg and msg.startswith("GPU 3") and "other 7 are idle" in msg
    assert judge_balance([busy] * 2) is None                 # not sustained yet
    assert judge_balance([busy, idle, busy, busy]) is None   # interrupted
    assert judge_balance([idle] * 5) is None
    everyone = [dataclasses.replace(g, vram_used_mib=170000) for g in idle]
    assert judge_balance([everyone] * 5) is None


@stack
def test_demo_model_without_cached_tokenizer_fits_llama3_template(tmp_path):
    """The demo's fallback tokenizer (a BPE trained on the spot) must satisfy LLaMA-Factory's llama3 template."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "doctor.demo_model", str(tmp_path / "d"), str(tmp_path / "no-tok")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    info = json.loads(p.stdout.strip().splitlines()[-1])
    assert info["tokenizer"] == "a BPE built here"
    cfg = write_config(tmp_path / "d" / "c.yaml", model_name_or_path=info["model"], stage="sft", do_train=True,
                       finetuning_type="lora", dataset="demo", dataset_dir=info["dataset_dir"], template="llama3",
                       output_dir=str(tmp_path / "out"), report_to="none")
    r = run_cli("check", str(cfg), "--only", "template", "--json", cwd=tmp_path / "d")
    ids = [f["id"] for f in json.loads(r.stdout)["findings"]]
    assert "TPL000" in ids and not {"TPL001", "TPL002", "TPL003"} & set(ids), ids
