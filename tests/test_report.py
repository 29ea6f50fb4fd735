"""`rocm-doctor report`: planted secrets in the environment, the config and a log never reach the bundle."""

from __future__ import annotations

import json
import socket
import tarfile
from pathlib import Path

from doctor.redact import Redactor
from tests.conftest import DATA, run_cli, stack

HF = "hf_PlantedTokenAbCdEfGhIjKlMnOpQrSt"
WANDB = "0f1e2d3c4b5a69788796a5b4c3d2e1f001234567"
OPENAI = "sk-plantedPLANTEDplanted1234567890"
CUSTOM = "custom-secret-value-42"       # shape unknown: caught only because its env name says SECRET
CFG_TOKEN = "cfgTokenValue123456"        # a config key named *token with an unremarkable value
HOST = "gpu-node-042.cluster.example.org"
IP = "10.20.30.40"
USER = "mkowalski"

PLANTED = [HF, WANDB, OPENAI, CUSTOM, CFG_TOKEN, HOST, IP, USER, "gpu-node-042", "172.16.5.9"]


def env() -> dict[str, str]:
    return {"HF_TOKEN": HF, "WANDB_API_KEY": WANDB, "OPENAI_API_KEY": OPENAI, "MY_SERVICE_SECRET": CUSTOM,
            "HOSTNAME": HOST, "MASTER_ADDR": IP, "USER": USER, "LOGNAME": USER, "NCCL_SOCKET_IFNAME": "eth0"}


def plant(tmp: Path) -> tuple[Path, Path]:
    cfg = tmp / "train.yaml"
    cfg.write_text(f"# tuned by {USER}\nmodel_name_or_path: /home/{USER}/models/llama3\nhf_hub_token: {CFG_TOKEN}\n"
                   f"template: llama3\ndataset: tiny\noutput_dir: /scratch/{USER}/out\ndevice_map: auto\n")
    log = tmp / "rank0.log"
    log.write_text(
        f"[rank0]: Connecting to {IP}:29500 ({HOST}), peer 172.16.5.9\n"
        f"wandb: Appending key for api.wandb.ai to your netrc file: /home/{USER}/.netrc  key={WANDB}\n"
        f"Authorization: Bearer {OPENAI}\n"
        f"login with token {HF} as {USER}@{HOST}\n"
        f"service secret {CUSTOM}\n"
        f'  File "/home/{USER}/LLaMA-Factory/src/llamafactory/hparams/parser.py", line 107, in _parse_args\n'
        "ValueError: Some keys are not used by the HfArgumentParser: ['device_map']\n"
        "torch 2.9.1 at 127.0.0.1 on ROCm 6.4.1\n")
    return cfg, log


def bundle_text(path: Path) -> str:
    if path.is_dir():
        return "\n".join(p.read_text() for p in sorted(path.rglob("*")) if p.is_file())
    with tarfile.open(path) as tf:
        return "\n".join(tf.extractfile(m).read().decode() for m in tf.getmembers() if m.isfile())


@stack  # the bundle's package versions come from the examined stack (transformers)
def test_report_redacts_everything_planted(tmp_path):
    cfg, log = plant(tmp_path)
    out = tmp_path / "bundle.tar.gz"
    r = run_cli("report", str(cfg), "--log", str(log), "-o", str(out), "--quick", env=env(), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = bundle_text(out)
    for s in PLANTED + [socket.gethostname()] if len(socket.gethostname()) >= 3 else PLANTED:
        assert s not in text, f"{s!r} leaked"
    assert "Redacted:" in r.stdout and "secret" in r.stdout and HF not in r.stdout
    with tarfile.open(out) as tf:
        names = [m.name for m in tf.getmembers()]
        rep = json.loads(tf.extractfile(next(m for m in tf.getmembers() if m.name.endswith("report.json"))).read())
    assert any(n.endswith("report.md") for n in names) and any("/logs/" in n for n in names)
    assert any(n.endswith("/config/train.yaml") for n in names)
    assert rep["schema"] == "rocm-doctor.report/1"
    assert rep["logs"][0]["category"] == "unknown_config_key" and rep["logs"][0]["playbook"] == "drop-unknown-keys"
    assert "CFG001" in [f["id"] for f in rep["findings"]]
    counts = rep["redaction"]["counts"]
    assert counts.get("secret-named variables", 0) >= 4 and counts.get("IP addresses", 0) >= 1
    assert counts.get("host names", 0) >= 2
    assert rep["environment"]["packages"]["transformers"]  # versions survive (tokenizers too)
    assert rep["environment"]["env"]["NCCL_SOCKET_IFNAME"] == "eth0"
    assert "127.0.0.1" in text and "6.4.1" in text      # loopback and versions are not IPs to hide


def test_no_redact_keeps_values_and_directory_bundle(tmp_path):
    cfg, log = plant(tmp_path)
    out = tmp_path / "bundle-dir"
    r = run_cli("report", str(cfg), "--log", str(log), "-o", str(out), "--quick", "--no-redact", env=env(),
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = bundle_text(out)
    assert HF in text and IP in text and "Not redacted" in text
    r = run_cli("report", "--log", str(log), "-o", str(out), "--quick", env=env(), cwd=tmp_path)
    assert r.returncode == 2 and "not empty" in r.stderr  # never writes into someone's directory


def test_quick_report_says_what_it_did_not_check(tmp_path):
    out = tmp_path / "quick-dir"
    r = run_cli("report", "--quick", "-o", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    md = (out / "report.md").read_text()
    rep = json.loads((out / "report.json").read_text())
    assert "torch" in rep["skipped"] and "bf16" in rep["skipped"]
    # the host areas import nothing: a bundle always carries them (and what `check --replay` reads)
    assert not {"gpus", "platform", "health"} & set(rep["skipped"])
    assert {f["check"] for f in rep["findings"]} >= {"platform", "health"}
    assert (out / "sysroot" / "tools.json").is_file() and (out / "host" / "cmdline.txt").is_file()
    assert "Not checked:" in md and "torch None/None" not in md and "None / None" not in md
    assert "not checked: " in r.stdout


def test_report_bad_inputs(tmp_path):
    r = run_cli("report", "--log", str(tmp_path / "nope.log"), "--quick", cwd=tmp_path)
    assert r.returncode == 2 and "log not found" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1\n")
    r = run_cli("report", str(bad), "--quick", cwd=tmp_path)
    assert r.returncode == 2 and "not valid YAML" in r.stderr


def test_redactor_units():
    red = Redactor(env={"USER": "zofia", "GH_TOKEN": "ghp_" + "a" * 36}, enabled=True)
    s = red.text("ghp_" + "a" * 36 + " /Users/zofia/x zofia@box AKIAABCDEFGHIJKLMNOP password=hunter2hunter2 "
                 "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c "
                 "fe80::1ff:fe23:4567:890a 192.168.1.7 0.0.0.0 version 2.9.1")
    for leaked in ("ghp_", "zofia", "AKIA", "hunter2", "eyJhbGci", "fe80::", "192.168"):
        assert leaked not in s, (leaked, s)
    assert "0.0.0.0" in s and "2.9.1" in s
    assert sum(red.counts.values()) >= 7
    off = Redactor(env={"HF_TOKEN": HF}, enabled=False)
    assert off.text(HF) == HF and not off.counts


def test_corpus_logs_are_explained_in_a_report(tmp_path):
    corpus = DATA / "failure-logs-public.jsonl"
    rows = [json.loads(x) for x in corpus.read_text().splitlines()[:3]]
    logs = []
    for i, row in enumerate(rows):
        p = tmp_path / f"case{i}.log"
        p.write_text(row["excerpt"])
        logs += ["--log", str(p)]
    out = tmp_path / "b.tar.gz"
    r = run_cli("report", *logs, "-o", str(out), "--quick", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    with tarfile.open(out) as tf:
        rep = json.loads(tf.extractfile(next(m for m in tf.getmembers() if m.name.endswith("report.json"))).read())
    assert [lg["category"] for lg in rep["logs"]] == [row["category"] for row in rows]


def test_short_host_names_are_redacted_where_they_stand_as_a_host():
    """A host named `vm` kept `vm.internal:29500`; its letters inside other words must survive."""
    red = Redactor(env={"HOSTNAME": "vm", "USER": "x"})
    red.hosts = ["vm"]
    out = red.text("connecting to vm.internal:29500 via vm:22, alice@vm, http://vm/x; the vm crashed in vmware; "
                   "vm.py loaded; llvm.sys")
    assert "vm.internal" not in out and "vm:22" not in out and "@vm" not in out and "//vm/" not in out
    assert out.count("<host>") == 4 and "the vm crashed in vmware" in out and "vm.py" in out and "llvm.sys" in out
