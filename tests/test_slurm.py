"""Fleet preflight on Slurm: host-list expansion, srun's variables, the node x area matrix and the exclude list,
and srun-style launches simulated on this machine (processes with srun's variables, gloo, real subprocesses)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checks.distributed import DIST007, node_matrix
from doctor import slurm
from doctor.render import distributed_html, distributed_markdown, node_table_text
from tests.conftest import FIXTURES, ROOT, stack

slow = pytest.mark.slow


# ---------------------------------------------------------------- host lists (Slurm's documented syntax)

@pytest.mark.parametrize("spec, want", [
    ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
    ("gpu-a[1-2],gpu-b3", ["gpu-a1", "gpu-a2", "gpu-b3"]),
    ("tux[2,4-6]", ["tux2", "tux4", "tux5", "tux6"]),
    ("linux[0-3]", ["linux0", "linux1", "linux2", "linux3"]),
    ("n[008-010]", ["n008", "n009", "n010"]),
    ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
    ("node1,node2", ["node1", "node2"]),
    ("single", ["single"]),
    ("", []),
])
def test_expand_hostlist(spec, want):
    assert slurm.expand_hostlist(spec) == want


def test_expand_hostlist_rejects_bad_syntax():
    for bad in ("node[01-04", "node01]", "node[4-1]", "node[a-c]"):
        with pytest.raises(ValueError):
            slurm.expand_hostlist(bad)
    assert slurm.tasks_per_node("2(x3),1", 4) == [2, 2, 2, 1]
    assert slurm.tasks_per_node("8", 4) == [8, 8, 8, 8]


SRUN = {"SLURM_JOB_ID": "123456", "SLURM_JOB_NODELIST": "mi300x-[017-018]", "SLURM_NNODES": "2"}


def test_one_task_per_gpu_maps_to_ranks_and_the_master():
    env = {**SRUN, "SLURM_PROCID": "9", "SLURM_NTASKS": "16", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
           "SLURM_TASKS_PER_NODE": "8(x2)", "SLURMD_NODENAME": "mi300x-018"}
    j = slurm.job(env)
    assert j is not None and not j.per_node and j.nodes == ["mi300x-017", "mi300x-018"]
    e = slurm.rank_env(env, j)
    assert e == {"RANK": "9", "WORLD_SIZE": "16", "LOCAL_RANK": "1", "GROUP_RANK": "1", "MASTER_ADDR": "mi300x-017",
                 "MASTER_PORT": str(20000 + 123456 % 20000), "LOCAL_WORLD_SIZE": "8"}
    assert j.expected_node(3) == "mi300x-017" and j.expected_node(12) == "mi300x-018"
    assert slurm.rank_env({**env, "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29501"}, j)["MASTER_ADDR"] == "10.0.0.5"


def test_one_task_per_node_is_a_node_launcher():
    env = {**SRUN, "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_NODEID": "1", "SLURM_NTASKS_PER_NODE": "1",
           "SLURMD_NODENAME": "mi300x-018"}
    j = slurm.job(env)
    assert j.per_node and j.node_name == "mi300x-018" and j.expected_node(9, nproc=8) == "mi300x-018"
    assert slurm.job({"PATH": "/usr/bin"}) is None


# ---------------------------------------------------------------- the matrix and the exclude list

def rank(r: int, node: str, *findings: tuple[str, str, str]) -> dict:
    return {"rank": r, "node": node, "host": node, "findings": [
        {"id": i, "check": area, "severity": sev, "title": i} for i, area, sev in findings]}


def test_node_matrix_excludes_node_faults_not_job_errors():
    ranks = [rank(0, "n01", ("CFG007", "config", "error"), ("GPU000", "gpus", "ok")),
             rank(1, "n01", ("CFG007", "config", "error")),
             rank(2, "n02", ("CFG007", "config", "error"), ("HLTH001", "health", "error")),
             rank(3, "n03", ("CFG007", "config", "error"), ("TORCH002", "torch", "error"))]
    m = node_matrix(ranks, [], [])
    assert m["exclude"] == ["n02", "n03"] and m["healthy"] == ["n01"]
    assert m["job_errors"] == ["CFG007 (config)"]  # the same dataset error everywhere: the job's, not a node's
    assert m["nodes"]["n02"]["health"] == "error" and m["nodes"]["n01"]["gpus"] == "ok"
    assert m["ranks_by_node"] == {"n01": [0, 1], "n02": [2], "n03": [3]}
    one = node_matrix([rank(0, "n01", ("HLTH001", "health", "error"))], [], [])
    assert one["exclude"] == ["n01"]  # a GPU fault is the node's even when it is the only node
    strag = node_matrix([rank(0, "n01"), rank(1, "n02")], [DIST007.finding("slow", rank=1)],
                        [{"rank": 2, "node": "n03"}])
    assert strag["exclude"] == ["n02", "n03"] and strag["nodes"]["n03"]["collectives"] == "error"
    assert "rank 2 never joined" in strag["reasons"]["n03"]


def test_renderings_of_the_matrix():
    rep = {"nodes": {"n01": {"torch": "ok", "health": "ok", "collectives": "ok"},
                     "n02": {"torch": "error", "health": None, "collectives": "ok"}},
           "exclude": ["n02"], "healthy": ["n01"], "exclude_reasons": {"n02": ["TORCH002 (torch)"]},
           "distributed": {"world_size": 2, "backend": "gloo"}, "collectives": [],
           "findings": [{"id": "DIST010", "severity": "error", "title": "Exclude 1 of 2 node(s): --exclude=n02"}]}
    text = node_table_text(rep)
    assert text.splitlines()[2].split() == ["n02", "✗", "·", "✓", "exclude"]
    md = distributed_markdown(rep)
    assert "--exclude=n02" in md and "| n02 | ✗ error |" in md
    html = distributed_html(rep)
    assert html.startswith("<!doctype html>") and "<script" not in html and "n02" in html and "#f8d7da" in html


# ---------------------------------------------------------------- srun-style launches on this machine

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def srun_env(**kv: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                                  "MASTER_", "TORCHELASTIC"))}
    e["PYTHONPATH"] = str(ROOT)
    e.update(kv)
    return e


def task(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "doctor", "check", "--distributed", "--dist-sizes", "1M",
                             "--dist-iters", "2", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)


def faulty_path(tmp: Path) -> str:
    """A node whose rocm-smi reports an AMD GPU (the recorded output of an RX 7900 XT) while this torch is
    CPU-only: its local check has errors the other node does not."""
    b = tmp / "bin"
    b.mkdir()
    smi = b / "rocm-smi"
    smi.write_text(f"#!/bin/sh\ncat {FIXTURES / 'rocm-smi' / 'rx7900xt-productname-use-meminfo.json'}\n")
    smi.chmod(0o755)
    return f"{b}{os.pathsep}{os.environ['PATH']}"


@stack
@slow
def test_one_task_per_node_two_nodes_one_faulty(tmp_path):
    port = str(free_port())
    common = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[01-02]", "SLURM_NNODES": "2", "SLURM_NTASKS": "2",
              "SLURM_NTASKS_PER_NODE": "1", "NPROC_PER_NODE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    html = tmp_path / "fleet.html"
    p0 = task(["--json", "--html", str(html), "--dist-timeout", "60"],
              srun_env(**common, SLURM_PROCID="0", SLURM_NODEID="0", SLURMD_NODENAME="node01"))
    p1 = task(["--json"], srun_env(**common, SLURM_PROCID="1", SLURM_NODEID="1", SLURMD_NODENAME="node02",
                                   PATH=faulty_path(tmp_path)))
    out0, err0 = p0.communicate(timeout=400)
    out1, _ = p1.communicate(timeout=400)
    rep = json.loads(out0)
    assert out1.strip() == ""  # one report, from rank 0
    assert set(rep["nodes"]) == {"node01", "node02"} and rep["exclude"] == ["node02"] and rep["healthy"] == ["node01"]
    assert rep["slurm"]["layout"] == "per-node" and rep["distributed"]["world_size"] == 2
    assert any(f["id"] == "DIST010" and "--exclude=node02" in f["title"] for f in rep["findings"])
    assert p0.returncode == 1  # a node to exclude
    assert "node02" in html.read_text() and "exclude" in html.read_text()
    assert rep["gather"]["payload_bytes"] < 20000  # findings and fingerprint, not evidence


@stack
@slow
def test_one_task_per_gpu_and_a_rank_that_never_joins(tmp_path):
    port = str(free_port())
    common = {"SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "gpu-a[1-2]", "SLURM_NNODES": "2", "SLURM_NTASKS": "4",
              "SLURM_TASKS_PER_NODE": "2(x2)", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    # ranks 0-2 start (node gpu-a1: 0, 1; gpu-a2: 2); rank 3 (gpu-a2) never does
    ps = [task(["--json", "--dist-timeout", "25"] if r == 0 else ["--dist-timeout", "25"],
               srun_env(**common, SLURM_PROCID=str(r), SLURM_LOCALID=str(r % 2), SLURM_NODEID=str(r // 2),
                        SLURMD_NODENAME=f"gpu-a{r // 2 + 1}")) for r in range(3)]
    t0 = time.monotonic()
    outs = [p.communicate(timeout=400) for p in ps]
    rep = json.loads(outs[0][0])
    assert time.monotonic() - t0 < 300
    assert rep["slurm"]["layout"] == "per-gpu" and rep["missing_ranks"] == [{"rank": 3, "node": "gpu-a2"}]
    f = next(f for f in rep["findings"] if f["id"] == "DIST005")
    assert "rank 3 (gpu-a2)" in f["title"]
    assert sorted(r["rank"] for r in rep["ranks"]) == [0, 1, 2]  # the others still report
    assert rep["exclude"] == ["gpu-a2"] and rep["ranks_by_node"]["gpu-a1"] == [0, 1]
    assert ps[0].returncode == 1
