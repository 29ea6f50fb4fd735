"""The engine of ``rocm-doctor check --distributed``: the same checks on every rank, one verdict on rank 0.

Launched on every node by torchrun (``torchrun ... -m doctor check --distributed cfg.yaml``); by ``srun``
with one task per GPU (Slurm's SLURM_PROCID/NTASKS/LOCALID/NODEID are the ranks: :mod:`doctor.slurm`); or,
without either, it launches torchrun itself: from Slurm's variables with one task per node, else from the
variables ``llamafactory-cli`` uses (NNODES, NODE_RANK, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT).

Each rank runs the local check (probes in the isolated worker, GPUs restricted to its own), builds
a fingerprint (versions, driver, ROCm, config hash, training-relevant env vars), then the collective
probe (:mod:`doctor.probes.collectives`, also in the isolated worker, bounded by a timeout) gathers every
rank's result on rank 0 and measures all_reduce bandwidth. Rank 0's verdict (mismatches, per-rank
errors, the straggler, the bandwidth; a rank that never joins or a collective that hangs) is
:mod:`checks.distributed`; this module returns the report and the command renders it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checks.distributed import (
    DIST005,
    DIST006,
    MiB,
    cluster_findings,
    collectives_from,
    exclude_finding,
    fingerprint,
    node_matrix,
)
from doctor import gpuinfo, slurm
from doctor.config import InputError, load_config
from doctor.findings import Finding, has_errors
from doctor.preflight import environment_summary, run_check
from doctor.procs import kill_group, with_project_path
from doctor.render import CHECK_SCHEMA, sort_findings
from doctor.worker import ProbeSpec, run_probes

RESULT_ENV = "ROCM_DOCTOR_DIST_RESULT"
NPROC_ENV = "ROCM_DOCTOR_DIST_NPROC"  # ranks per node, when our own launcher started them
NET_ENV_HINT = ("check MASTER_ADDR/MASTER_PORT reachability and the firewall between nodes, NCCL_SOCKET_IFNAME "
                "(the interface that routes to the other nodes), NCCL_IB_HCA / NCCL_IB_DISABLE / NCCL_NET_GDR_LEVEL, "
                "RCCL's HSA_FORCE_FINE_GRAIN_PCIE, and rerun with NCCL_DEBUG=INFO")


@dataclass
class Outcome:
    """What this process has to show: rank 0's report (None on the other ranks and nodes) and the exit code."""

    report: dict[str, Any] | None
    exit_code: int
    note: str = ""


def rank_env(env: dict[str, str]) -> dict[str, int] | None:
    try:
        return {"rank": int(env["RANK"]), "world_size": int(env["WORLD_SIZE"]),
                "local_rank": int(env.get("LOCAL_RANK", "0")), "node_rank": int(env.get("GROUP_RANK", "0"))}
    except (KeyError, ValueError):
        return None


def parse_sizes(spec: str) -> list[int]:
    out = []
    for tok in [t.strip() for t in spec.split(",") if t.strip()]:
        mult = {"K": 1024, "M": MiB, "G": 1024 * MiB}.get(tok[-1].upper(), 1)
        num = tok[:-1] if mult != 1 else tok
        try:
            val = int(float(num) * mult)
        except ValueError:
            raise InputError(f"bad size {tok!r} in --dist-sizes (e.g. 1M,16M,256M)") from None
        if val <= 0:
            raise InputError(f"bad size {tok!r} in --dist-sizes")
        out.append(val)
    if not out:
        raise InputError("--dist-sizes is empty")
    return out


def local_device_env(env: dict[str, str], local_rank: int, n_gpus: int) -> dict[str, str]:
    """The local check of a rank examines its own GPU: restrict visibility to it."""
    e = dict(env)
    base = None
    for var in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        vals = gpuinfo.parse_visible(e.get(var))
        if vals:  # a blank value restricts nothing here (it used to divide by zero below)
            base = vals
            break
    if base is None:
        if n_gpus <= 0:
            return e
        base = [str(i) for i in range(n_gpus)]
    mine = base[local_rank % len(base)]
    e["HIP_VISIBLE_DEVICES"] = e["CUDA_VISIBLE_DEVICES"] = mine
    return e


def slim(f: Finding) -> dict[str, Any]:
    """A finding as rank 0 gathers it: no evidence blobs (512 ranks' payloads must gather in seconds)."""
    return {"id": f.id, "check": f.check, "severity": f.severity.value, "title": f.title[:300],
            "playbook": f.playbook}


def run_rank(args: Any, env: dict[str, str] | None = None, job: slurm.Job | None = None) -> Outcome:
    """One rank's part (under torchrun, or an srun task); rank 0 returns the cluster report."""
    env = dict(os.environ) if env is None else env
    re_ = rank_env(env)
    assert re_ is not None
    gpus, _ = gpuinfo.inventory(env=env)
    local_env = local_device_env(env, re_["local_rank"], len(gpus))
    checked = run_check(args.config, only=None, python=args.python, timeout=args.timeout, env=local_env,
                        no_cache=bool(getattr(args, "no_cache", False)), warm_start=False)  # ranks: no servers
    ctx, findings = checked.ctx, checked.findings
    es = environment_summary(ctx)
    inv = es.get("gpus") or []
    mine = gpuinfo.visible_gpus(local_env, inv)  # this rank's GPU, not the node's first
    gpu = (mine or inv or [None])[0]
    me = {"rank": re_["rank"], "local_rank": re_["local_rank"], "node_rank": re_["node_rank"],
          "host": socket.gethostname(), "node": env.get("SLURMD_NODENAME") or (job.node_name if job else "")
          or socket.gethostname(),
          "gpu": {k: gpu.get(k) for k in ("index", "name", "arch", "bdf", "vram_total_mib", "vram_used_mib")}
          if gpu else None, "fingerprint": fingerprint(ctx, es), "findings": [slim(f) for f in findings]}
    sizes = parse_sizes(args.dist_sizes)
    spec = ProbeSpec("collectives", "doctor.probes.collectives", "probe_collectives",
                     {"payload": me, "sizes": sizes, "iters": args.dist_iters, "timeout": args.dist_timeout,
                      "backend": args.dist_backend},
                     timeout=args.dist_timeout * 2 + 30 + 10 * len(sizes), group="dist")
    res = run_probes([spec], python=ctx.python, env=env)["collectives"]
    if re_["rank"] != 0:
        return Outcome(None, 0)
    cluster: list[Finding] = []
    ranks: list[dict[str, Any]] = [me]
    collectives: list[dict[str, Any]] = []
    backend = None
    if not res.ok:
        cluster.append(DIST006.finding(f"The collective probe did not finish ({res.status})",
                                       f"{res.error or ''} A hang here would hang training at its first "
                                       "collective; " + NET_ENV_HINT + ".", status=res.status))
    else:
        d = res.data
        backend = d.get("backend")
        if d.get("error"):
            code = DIST005 if d.get("phase") == "init" else DIST006
            what = ("Process group init failed: not every rank joined" if code is DIST005
                    else f"Collective failed during {d.get('phase')}")
            cluster.append(code.finding(f"{what} ({backend}, world size {d.get('world_size')})",
                                        f"{d['error']}\nAfter {d.get('elapsed_s')} s. To check: " + NET_ENV_HINT + ".",
                                        phase=d.get("phase"), error=d["error"]))
        if d.get("ranks"):
            ranks = d["ranks"]
        if d.get("timings"):
            collectives = collectives_from(d["timings"], backend or "?")
    nproc = int(env.get(NPROC_ENV, "0") or 0) or None
    missing = [{"rank": r, "node": job.expected_node(r, nproc) if job else None}
               for r in (res.data.get("missing_ranks") or [] if res.ok else [])]
    if missing:
        cluster = [f for f in cluster if f.id != "DIST005"]
        cluster.append(DIST005.finding(
            f"{len(missing)} rank(s) never arrived: " + ", ".join(
                f"rank {m['rank']}" + (f" ({m['node']})" if m["node"] else "") for m in missing),
            f"After --dist-timeout {args.dist_timeout:g} s; the {len(ranks)} rank(s) that did are reported. "
            + NET_ENV_HINT + ".", missing=missing))
    cluster += cluster_findings(ranks, collectives, min_busbw=args.min_busbw)
    matrix = node_matrix(ranks, cluster, missing)
    cluster += exclude_finding(matrix)
    all_findings = sort_findings(findings + cluster)
    report = {"schema": CHECK_SCHEMA, "findings": [f.to_dict() for f in all_findings],
              "environment": es, "distributed": {"world_size": re_["world_size"], "backend": backend,
                                                 "nccl_version": res.data.get("nccl_version") if res.ok else None},
              "nodes": matrix["nodes"], "exclude": matrix["exclude"], "healthy": matrix["healthy"],
              "exclude_reasons": matrix["reasons"], "job_errors": matrix["job_errors"],
              "ranks_by_node": matrix["ranks_by_node"], "missing_ranks": missing,
              "gather": {k: res.data.get(src) if res.ok else None for k, src in
                         (("seconds", "gather_s"), ("wait_s", "wait_s"), ("fetch_s", "fetch_s"),
                          ("payload_bytes", "payload_bytes"))},
              "slurm": slurm.describe(job) if job else None,
              "ranks": ranks, "collectives": [{k: v for k, v in c.items() if k != "arrival_by_rank"}
                                              | {"arrival_ms_by_rank": {str(r): round(a * 1000, 3) for r, a in
                                                                        c["arrival_by_rank"].items()}}
                                              for c in collectives]}
    code = 1 if has_errors(all_findings) or matrix["exclude"] else 0
    out_path = env.get(RESULT_ENV)
    if out_path:  # launched by our own torchrun wrapper: it shows the report
        Path(out_path).write_text(json.dumps({"exit_code": code, "report": report}, default=str))
        return Outcome(None, 0)
    return Outcome(report, code)


def _nproc(env: dict[str, str]) -> str:
    """Ranks per node: NPROC_PER_NODE, else Slurm's GPUs on this node, else the visible (or all) GPUs."""
    nproc = env.get("NPROC_PER_NODE") or env.get("SLURM_GPUS_ON_NODE")
    if nproc and nproc.isdigit():
        return nproc
    gpus, _ = gpuinfo.inventory(env=env)
    vis = gpuinfo.parse_visible(env.get("HIP_VISIBLE_DEVICES") or env.get("CUDA_VISIBLE_DEVICES"))
    return str(len(vis) if vis else max(1, len(gpus)))


def launch_node(args: Any, argv: list[str], job: slurm.Job, say: Any = None) -> Outcome:
    """One srun task per node: start this node's ranks ourselves (no torchrun, so no second process binds
    the master port), each with torch.distributed's variables; rank 0 (on the first node) hosts the store
    and names any rank that never arrives."""
    env = with_project_path(dict(os.environ))
    nproc = int(_nproc(env))
    addr, port = slurm.master(env, job)
    procs = []
    with tempfile.TemporaryDirectory(prefix="rocm-doctor-dist-") as tmp:
        result = Path(tmp) / "result.json"
        for local in range(nproc):
            e = dict(env, RANK=str(job.node_rank * nproc + local), WORLD_SIZE=str(job.nnodes * nproc),
                     LOCAL_RANK=str(local), GROUP_RANK=str(job.node_rank), LOCAL_WORLD_SIZE=str(nproc),
                     MASTER_ADDR=addr, MASTER_PORT=port, SLURMD_NODENAME=job.node_name or socket.gethostname(),
                     **{RESULT_ENV: str(result), NPROC_ENV: str(nproc)})
            cmd = [args.python or sys.executable, "-m", "doctor", *argv]
            if say is not None and local == 0:
                say(f"node {job.node_name or job.node_rank}: starting {nproc} rank(s), master {addr}:{port}")
            procs.append(subprocess.Popen(cmd, env=e, stdout=sys.stderr if args.json else subprocess.DEVNULL,
                                          start_new_session=True))
        deadline = args.dist_timeout * 4 + args.timeout * 3 + 300
        try:
            for p in procs:
                p.wait(timeout=deadline)
        except subprocess.TimeoutExpired:
            for p in procs:
                kill_group(p, signal.SIGTERM, grace=10)
            return Outcome(None, 1, f"node {job.node_name}: the local ranks did not finish in time")
        except KeyboardInterrupt:
            for p in procs:
                kill_group(p, signal.SIGINT, grace=10)
            raise
        if result.is_file():
            data = json.loads(result.read_text())
            return Outcome(data["report"], int(data["exit_code"]))
        bad = [p.returncode for p in procs if p.returncode]
        if job.node_rank != 0:
            return Outcome(None, 1 if bad else 0, f"{job.node_name or f'node {job.node_rank}'}: {nproc} local "
                           "rank(s) finished; the report is on the first node.")
        return Outcome(None, 1, f"rank 0 exited {bad} without a report")


def launch(args: Any, argv: list[str], say: Any = None, job: slurm.Job | None = None) -> Outcome:
    """Not under torchrun: start the ranks (ourselves for one srun task per node, else torchrun from
    llamafactory-cli's variables); rank 0's report comes back."""
    if job is not None:
        return launch_node(args, argv, job, say)
    env = dict(os.environ)
    nnodes = env.get("NNODES", "1")
    node_rank = env.get("NODE_RANK", "0")
    nproc = env.get("NPROC_PER_NODE")
    if not nproc:
        gpus, _ = gpuinfo.inventory(env=env)
        vis = gpuinfo.parse_visible(env.get("HIP_VISIBLE_DEVICES") or env.get("CUDA_VISIBLE_DEVICES"))
        nproc = str(len(vis) if vis else max(1, len(gpus)))
    addr = env.get("MASTER_ADDR", "127.0.0.1")
    port = env.get("MASTER_PORT") or (str(_free_port()) if nnodes == "1" else "29500")
    env = with_project_path(env)  # `-m doctor` in the examined Python, installed or not
    with tempfile.TemporaryDirectory(prefix="rocm-doctor-dist-") as tmp:
        result = Path(tmp) / "result.json"
        env[RESULT_ENV] = str(result)
        cmd = [args.python or sys.executable, "-m", "torch.distributed.run", "--nnodes", nnodes,
               "--node_rank", node_rank, "--nproc_per_node", nproc, "--master_addr", addr, "--master_port", port,
               "-m", "doctor", *argv]
        if say is not None:
            say(f"launching: {' '.join(cmd)}")
        try:  # its own process group: a timeout stops torchrun and every rank it started
            p = subprocess.Popen(cmd, env=env, stdout=sys.stderr if args.json else None, start_new_session=True)
        except OSError as e:
            raise InputError(f"cannot launch torchrun with {cmd[0]}: {e}") from None
        try:
            p.wait(timeout=args.dist_timeout * 4 + args.timeout * 3 + 300)
        except subprocess.TimeoutExpired:
            kill_group(p, signal.SIGTERM, grace=10)
            return Outcome(None, 1, "torchrun did not finish in time (a rank never joined?)")
        except KeyboardInterrupt:
            kill_group(p, signal.SIGINT, grace=10)
            raise
        if result.is_file():
            data = json.loads(result.read_text())
            return Outcome(data["report"], int(data["exit_code"]))
        if node_rank != "0":
            return Outcome(None, 0 if p.returncode == 0 else 1,
                           f"node {node_rank}: local ranks finished (torchrun exit {p.returncode}); "
                           "the report is on node 0.")
        return Outcome(None, 1, f"torchrun exited {p.returncode} without a report from rank 0")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: Any, argv: list[str], say: Any = None) -> Outcome:
    """``check --distributed``: as one rank under torchrun, or as the launcher of torchrun."""
    parse_sizes(args.dist_sizes)  # bad input -> exit 2 before anything starts
    if args.config:
        load_config(args.config)
    env = dict(os.environ)
    job = slurm.job(env)
    if rank_env(env) is not None:  # torchrun's ranks (also inside an srun allocation)
        return run_rank(args, env, job)
    if job is not None and not job.per_node:  # srun, one task per GPU: Slurm's ids are the ranks
        env.update(slurm.rank_env(env, job))
        return run_rank(args, env, job)
    return launch(args, argv, say, job)
