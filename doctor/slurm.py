"""Slurm's view of a job, from the variables ``srun`` sets (no ``scontrol``, no ``sinfo``).

``srun`` starts one task per GPU (``--ntasks-per-node=8 --gpus-per-task=1``) or one per node
(``--ntasks-per-node=1``). One task per GPU maps to torch.distributed directly: ``SLURM_PROCID`` is the
rank, ``SLURM_NTASKS`` the world size, ``SLURM_LOCALID`` the local rank, ``SLURM_NODEID`` the node rank.
One task per node launches that node's ranks itself (torchrun with ``--nnodes SLURM_NNODES --node_rank
SLURM_NODEID``). ``MASTER_ADDR`` defaults to the first host of ``SLURM_JOB_NODELIST`` (Slurm's compressed
host-list syntax, expanded here), ``MASTER_PORT`` derives from ``SLURM_JOB_ID``; explicit values win.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

PORT_BASE, PORT_SPAN = 20000, 20000  # MASTER_PORT = 20000 + job id mod 20000: distinct per job, below 40000


def expand_hostlist(spec: str) -> list[str]:
    """Slurm's host-list syntax: ``node[01-04,07]``, ``gpu-a[1-2],gpu-b3``, ``rack[1-2]-n[01-02]`` (several
    bracket groups multiply), zero padding kept (``n[008-010]``). Raises ValueError for unbalanced brackets."""
    out: list[str] = []
    for item in _split_top(spec.strip()):
        if item:
            out += _expand_one(item)
    return out


def _split_top(spec: str) -> list[str]:
    """Split at the commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in spec:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in host list {spec!r}")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if depth:
        raise ValueError(f"unbalanced '[' in host list {spec!r}")
    parts.append(cur)
    return [p.strip() for p in parts]


def _expand_one(item: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", item)
    if not m:
        return [item]
    head, tail = item[:m.start()], item[m.end():]
    out = []
    for rng in m.group(1).split(","):
        rng = rng.strip()
        if "-" in rng:
            lo, hi = rng.split("-", 1)
            width = len(lo) if lo.startswith("0") else 0
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ValueError(f"bad range {rng!r} in host list {item!r}")
            vals = [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
        else:
            vals = [rng]
        for v in vals:
            out += _expand_one(head + v + tail)
    return out


def tasks_per_node(value: str | None, nnodes: int) -> list[int] | None:
    """``SLURM_TASKS_PER_NODE`` / ``SLURM_NTASKS_PER_NODE`` (``2(x3),1``) as a list per node."""
    if not value:
        return None
    out: list[int] = []
    for part in value.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            return None
        out += [int(m.group(1))] * int(m.group(2) or 1)
    if len(out) == 1 and nnodes > 1:
        out *= nnodes
    return out


@dataclass
class Job:
    rank: int
    world_size: int
    local_rank: int
    node_rank: int
    nnodes: int
    nodes: list[str]
    node_name: str
    job_id: str
    per_node: bool                   # one task per node: this task launches the node's ranks
    tasks: list[int] | None = None   # tasks per node, when Slurm says

    def expected_node(self, rank: int, nproc: int | None = None) -> str | None:
        """The node a rank is placed on: Slurm's default block distribution of tasks, or, when each node's task
        launched ``nproc`` local ranks, rank // nproc (for naming a rank that never arrived)."""
        if not self.nodes:
            return None
        if self.per_node:
            return self.nodes[rank // nproc] if nproc and rank // nproc < len(self.nodes) else None
        counts = self.tasks or [max(1, self.world_size // max(1, len(self.nodes)))] * len(self.nodes)
        acc = 0
        for node, n in zip(self.nodes, counts, strict=False):
            if rank < acc + n:
                return node
            acc += n
        return None


def job(env: dict[str, str]) -> Job | None:
    """The Slurm job this process is a task of (None outside srun)."""
    try:
        rank, world = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
    except (KeyError, ValueError):
        return None
    try:
        nodes = expand_hostlist(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "")
    except ValueError:
        nodes = []
    nnodes = int(env.get("SLURM_NNODES") or env.get("SLURM_JOB_NUM_NODES") or (len(nodes) or 1))
    tasks = tasks_per_node(env.get("SLURM_TASKS_PER_NODE") or env.get("SLURM_STEP_TASKS_PER_NODE"), nnodes)
    per_node = env.get("SLURM_NTASKS_PER_NODE") == "1" or (world == nnodes and nnodes >= 1
                                                           and (tasks is None or set(tasks) == {1}))
    return Job(rank=rank, world_size=world, local_rank=int(env.get("SLURM_LOCALID", "0") or 0),
               node_rank=int(env.get("SLURM_NODEID", "0") or 0), nnodes=nnodes, nodes=nodes,
               node_name=env.get("SLURMD_NODENAME") or (nodes[int(env.get("SLURM_NODEID", "0") or 0)]
                                                       if nodes else ""),
               job_id=env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "", per_node=per_node, tasks=tasks)


def master(env: dict[str, str], j: Job) -> tuple[str, str]:
    """MASTER_ADDR / MASTER_PORT: explicit values win; else the first node and a port from the job id."""
    addr = env.get("MASTER_ADDR") or (j.nodes[0] if j.nodes else "127.0.0.1")
    port = env.get("MASTER_PORT")
    if not port:
        jid = int(j.job_id) if j.job_id.isdigit() else 0
        port = str(PORT_BASE + jid % PORT_SPAN)
    return addr, port


def rank_env(env: dict[str, str], j: Job) -> dict[str, str]:
    """torch.distributed's variables for a one-task-per-GPU layout."""
    addr, port = master(env, j)
    return {"RANK": str(j.rank), "WORLD_SIZE": str(j.world_size), "LOCAL_RANK": str(j.local_rank),
            "GROUP_RANK": str(j.node_rank), "MASTER_ADDR": addr, "MASTER_PORT": port,
            "LOCAL_WORLD_SIZE": str((j.tasks or [0])[j.node_rank] if j.tasks and j.node_rank < len(j.tasks) else 1)}


def describe(j: Job) -> dict[str, Any]:
    return {"job_id": j.job_id, "nodes": j.nodes, "nnodes": j.nnodes, "layout": "per-node" if j.per_node else "per-gpu",
            "world_size": j.world_size}
