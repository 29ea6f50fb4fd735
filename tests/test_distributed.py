"""`check --distributed`: real torchrun, real torch.distributed on gloo (CPU), real subprocesses."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from checks.distributed import cluster_findings, collectives_from
from doctor.config import InputError
from doctor.distributed import local_device_env, parse_sizes
from tests.conftest import ROOT, run_cli, stack, write_config, write_dataset

MiB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dist_env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    e["PYTHONPATH"] = str(ROOT)
    e.update(extra)
    return e


@pytest.fixture
def cfg(tmp_path, tiny_llama3):
    write_dataset(tmp_path / "data")
    return write_config(tmp_path / "cfg.yaml", model_name_or_path=str(tiny_llama3), stage="sft", do_train=True,
                        finetuning_type="lora", lora_target="all", dataset="tiny", dataset_dir="data",
                        template="llama3", output_dir="out", per_device_train_batch_size=1, report_to="none")


@stack
@pytest.mark.slow
def test_launcher_mode_two_ranks_on_gloo(tmp_path, cfg):
    """No torchrun variables: rocm-doctor launches torchrun itself from NPROC_PER_NODE like llamafactory-cli."""
    t = time.time()
    r = run_cli("check", str(cfg), "--distributed", "--json", "--dist-sizes", "1M,8M", "--dist-iters", "3",
                cwd=tmp_path, env={"NPROC_PER_NODE": "2", "MASTER_PORT": str(free_port())}, timeout=400)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    d = json.loads(r.stdout)
    assert d["schema"] == "rocm-doctor.check/1" and d["distributed"]["backend"] == "gloo"
    assert [x["rank"] for x in d["ranks"]] == [0, 1]
    for rk in d["ranks"]:
        assert rk["fingerprint"]["torch"] and rk["fingerprint"]["config_sha256"] and rk["findings"]
    assert [c["size_bytes"] for c in d["collectives"]] == [MiB, 8 * MiB]
    for c in d["collectives"]:
        assert c["busbw_gbps"] > 0 and abs(c["busbw_gbps"] - c["algbw_gbps"]) < 1e-6  # 2(n-1)/n = 1 for n=2
        assert c["slowest_rank"] in (0, 1)
    ids = [f["id"] for f in d["findings"]]
    assert "DIST000" in ids and "DIST009" in ids and "CFG000" in ids
    print(f"launcher mode wall {time.time() - t:.1f} s; collectives {d['collectives']}")


@stack
@pytest.mark.slow
def test_torchrun_flags_env_mismatch_and_slow_rank(tmp_path, cfg):
    """torchrun started by the test; rank 1 alone gets a flash-attention switch and a slow local step."""
    inner = (f"if [ \"$RANK\" = 1 ]; then export FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE ROCM_DOCTOR_TEST_SLOW_MS=150; "
             f"fi; exec {sys.executable} -m doctor check {cfg} --distributed --json --dist-sizes 1M --dist-iters 3")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), "--no-python", "sh", "-c", inner]
    p = subprocess.run(cmd, cwd=tmp_path, env=dist_env(), capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    d = json.loads(p.stdout)
    by = {f["id"]: f for f in d["findings"]}
    assert "DIST003" in by and "FLASH_ATTENTION_TRITON_AMD_ENABLE" in by["DIST003"]["title"]
    assert "rank 1" in by["DIST003"]["detail"] and by["DIST003"]["severity"] == "warning"
    assert "DIST007" in by and by["DIST007"]["evidence"]["rank"] == 1
    assert "DIST000" not in by
    assert d["ranks"][1]["fingerprint"]["env"]["FLASH_ATTENTION_TRITON_AMD_ENABLE"] == "TRUE"


@stack
@pytest.mark.slow
def test_rank_that_never_joins_is_bounded(tmp_path):
    """World size 2, only rank 0 started: a finding within the timeout, no hang."""
    t = time.time()
    r = run_cli("check", "--distributed", "--json", "--dist-timeout", "5", "--dist-sizes", "1M", cwd=tmp_path,
                env={"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                     "MASTER_PORT": str(free_port())}, timeout=300)
    wall = time.time() - t
    assert r.returncode == 1, r.stderr[-3000:]
    d = json.loads(r.stdout)
    f = next(f for f in d["findings"] if f["id"] == "DIST005")
    assert "NCCL_SOCKET_IFNAME" in f["detail"] and "MASTER_ADDR" in f["detail"]
    assert wall < 120
    print(f"never-joining rank reported after {wall:.1f} s")


def test_bad_distributed_input(tmp_path):
    r = run_cli("check", "--distributed", "--dist-sizes", "1Q", cwd=tmp_path)
    assert r.returncode == 2 and "bad size" in r.stderr
    r = run_cli("check", "--distributed", "--quick", cwd=tmp_path)
    assert r.returncode == 2


# ------------------------------------------------------------------ pure verdicts

def _rank(i: int, host: str, **fp) -> dict:
    base = {"python": "3.11.7", "torch": "2.9.1+rocm6.4", "hip": "6.4.4", "cuda": None, "rocm": "6.4.1",
            "driver": "6.12.12", "transformers": "5.6.0", "llamafactory": "0.9.5", "config_sha256": "abc",
            "env": {"NCCL_SOCKET_IFNAME": "eth0"}}
    base.update(fp)
    return {"rank": i, "host": host, "fingerprint": base, "findings": [{"id": "CFG000", "severity": "ok"}]}


def test_cluster_findings_mismatch_errors_and_floor():
    ranks = [_rank(i, f"node{i // 8}") for i in range(16)]
    ranks[9]["fingerprint"]["transformers"] = "5.5.0"
    ranks[12]["fingerprint"]["config_sha256"] = "def"
    for i in range(8, 16):
        ranks[i]["fingerprint"]["env"] = {"NCCL_SOCKET_IFNAME": "ens5"}
    ranks[3]["findings"].append({"id": "BNB001", "severity": "error", "title": "bitsandbytes unusable"})
    timings = [[{"size_bytes": 256 * MiB, "arrival_s": 0.010 if r != 5 else 0.080, "allreduce_s": 0.02,
                 "allreduce_min_s": 0.02}] for r in range(16)]
    coll = collectives_from(timings, "nccl")
    assert coll[0]["slowest_rank"] == 5
    assert coll[0]["busbw_gbps"] == pytest.approx(256 * MiB / 0.02 / 1e9 * 2 * 15 / 16, rel=1e-3)
    out = {f.id: f for f in cluster_findings(ranks, coll, min_busbw=100.0)}
    assert "transformers" in out["DIST001"].title and "rank 9 (node1)" in out["DIST001"].detail
    assert "DIST002" in out and "rank 12" in out["DIST002"].detail
    assert out["DIST003"].severity.value == "info"           # interface names differ per node: normal
    assert out["DIST004"].evidence == {"finding": "BNB001", "ranks": [3]}
    assert out["DIST007"].evidence["rank"] == 5
    assert "DIST008" in out and "DIST000" not in out
    clean = [_rank(i, "n0") for i in range(2)]
    assert "DIST000" in {f.id for f in cluster_findings(clean, [])}


def test_one_rank_reports_algbw_and_skips_the_floor():
    """World size 1 (the lent H200 with NCCL): busbw is 0 by definition, which must not trip --min-busbw."""
    timings = [[{"size_bytes": 256 * MiB, "arrival_s": 0.001, "allreduce_s": 0.0001, "allreduce_min_s": 0.0001}]]
    coll = collectives_from(timings, "nccl")
    assert coll[0]["busbw_gbps"] == 0 and coll[0]["algbw_gbps"] > 1000
    out = {f.id: f for f in cluster_findings([_rank(0, "n0")], coll, min_busbw=100.0)}
    assert "DIST008" not in out and "DIST000" in out
    assert "algbw" in out["DIST009"].title and "256 MiB 2684.36 GB/s" in out["DIST009"].title
    assert "no data crosses a link" in out["DIST009"].detail


def test_sizes_and_device_env():
    assert parse_sizes("1M,16M,1G,4096") == [MiB, 16 * MiB, 1024 * MiB, 4096]
    with pytest.raises(InputError):
        parse_sizes("0M")
    e = local_device_env({"HIP_VISIBLE_DEVICES": "4,5,6,7"}, 2, 8)
    assert e["HIP_VISIBLE_DEVICES"] == e["CUDA_VISIBLE_DEVICES"] == "6"
    assert local_device_env({}, 3, 8)["HIP_VISIBLE_DEVICES"] == "3"
    assert "HIP_VISIBLE_DEVICES" not in local_device_env({}, 1, 0)   # CPU: nothing to restrict
    assert local_device_env({"HIP_VISIBLE_DEVICES": " "}, 1, 2)["HIP_VISIBLE_DEVICES"] == "1"  # blank: all GPUs


@stack
@pytest.mark.slow
def test_each_rank_reports_its_own_gpu(tmp_path):
    """Two ranks on a node whose nvidia-smi (a recorded-format stand-in: no GPU here) lists two GPUs, the
    second one busy: rank 1 names GPU 1 and reports it busy; rank 0 names GPU 0 and does not."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho '0, NVIDIA H200, 143771 MiB, 0 MiB, 0 %'\n"
                   "echo '1, NVIDIA H200, 143771 MiB, 90000 MiB, 97 %'\n")
    smi.chmod(0o755)
    r = run_cli("check", "--distributed", "--json", "--only", "gpus", "--dist-sizes", "1M", "--dist-iters", "1",
                "--dist-backend", "gloo", cwd=tmp_path, timeout=400,
                env={"NPROC_PER_NODE": "2", "MASTER_PORT": str(free_port()),
                     "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"})
    d = json.loads(r.stdout)
    by_rank = {x["rank"]: x for x in d["ranks"]}
    assert by_rank[0]["gpu"]["index"] == 0 and by_rank[1]["gpu"]["index"] == 1, r.stderr[-2000:]
    busy = {rk: [f["id"] for f in x["findings"] if f["id"] == "GPU002"] for rk, x in by_rank.items()}
    assert busy == {0: [], 1: ["GPU002"]}
