"""``check --distributed``: rank 0's verdict over every rank (area ``distributed``).

Pure functions of what the ranks gathered: their fingerprints (versions, driver, ROCm, config hash,
training-relevant environment), their local findings, and the all_reduce timings of the collective
probe. The orchestration (torchrun, the probe, the report) is the engine in ``doctor.distributed``.
"""

from __future__ import annotations

import hashlib
import platform
import statistics
from typing import Any

from doctor.findings import Code, Finding, Severity, with_all_good
from doctor.stack import PER_NODE_ENV, RANK_VERSION_KEYS, training_env

AREA = "distributed"
MiB = 1024 * 1024

DIST000 = Code(
    AREA, "DIST000", Severity.OK, 'All ranks agree',
    why='Every rank has the same versions, config and training environment, and the collectives complete.',
    fix='Nothing to do.',
)

DIST001 = Code(
    AREA, "DIST001", Severity.ERROR, 'A version differs across ranks',
    why='torch, HIP/CUDA, ROCm, the driver, transformers, llamafactory, bitsandbytes or flash_attn differ '
        'between ranks (one node upgraded, a different container image): kernels and numerics differ, RCCL '
        'versions may not interoperate, and LLaMA-Factory may behave differently per node.',
    fix='Install the same stack on every node (one container image); the evidence lists which ranks have '
        'which version.',
)

DIST002 = Code(
    AREA, "DIST002", Severity.ERROR, 'The training config differs across ranks',
    why="The YAML's hash differs between ranks (an edited copy on one node): ranks would train different "
        'things or fail at different points.',
    fix='Put the config on shared storage or copy the same file to every node.',
)

DIST003 = Code(
    AREA, "DIST003", Severity.WARNING, 'A training-relevant environment variable differs across ranks',
    why='HSA_OVERRIDE_GFX_VERSION, allocator settings, OPTIM_TORCH, flash-attention switches or NCCL/RCCL '
        'variables set on some ranks only change kernels, memory behaviour or the collective algorithm per '
        'node. Interface names (NCCL_SOCKET_IFNAME) may legitimately differ (reported as info).',
    fix="Export the same variables on every node (the launcher script or the scheduler's environment).",
)

DIST004 = Code(
    AREA, "DIST004", Severity.ERROR, "A rank's local check found errors",
    why="The per-rank check (probes on that rank's GPU) found an error on some ranks: the job would fail or "
        'diverge there.',
    fix='Read `ranks[].findings` of the listed ranks; fix that node (or exclude it).',
)

DIST005 = Code(
    AREA, "DIST005", Severity.ERROR, 'Process group init failed or timed out',
    why='Not every rank joined the rendezvous within --dist-timeout: a node not started, MASTER_ADDR/PORT '
        'not reachable, a firewall, or the wrong network interface. Training would hang at start-up.',
    fix='Check MASTER_ADDR/MASTER_PORT reachability, the firewall, NCCL_SOCKET_IFNAME, then rerun with '
        'NCCL_DEBUG=INFO.',
)

DIST006 = Code(
    AREA, "DIST006", Severity.ERROR, 'A collective failed or hung',
    why='all_gather/all_reduce raised or did not finish in time (the probe was stopped): RCCL/NCCL cannot '
        'talk over the configured transport. Training would hang at its first collective.',
    fix='Check NCCL_SOCKET_IFNAME, NCCL_IB_HCA/NCCL_IB_DISABLE, NCCL_NET_GDR_LEVEL, '
        'HSA_FORCE_FINE_GRAIN_PCIE (RCCL) and rerun with NCCL_DEBUG=INFO.',
)

DIST007 = Code(
    AREA, "DIST007", Severity.WARNING, 'A straggler rank',
    why='One rank reaches the collective far later than the others after the same local work: a slower or '
        'throttled GPU, a busy CPU, or a GPU shared with another job. Every training step waits for it.',
    fix="Check that rank's GPU (clocks, temperature, other processes with `amd-smi`) and CPU load.",
)

DIST008 = Code(
    AREA, "DIST008", Severity.WARNING, 'Bus bandwidth below the floor',
    why='all_reduce bus bandwidth at the largest size is below --min-busbw: a slow or misconfigured '
        'interconnect (TCP instead of InfiniBand/RoCE, P2P disabled, a bad link).',
    fix='Compare with rccl-tests on the same nodes; check NCCL_IB_*, NCCL_P2P_DISABLE and the NIC.',
)

DIST009 = Code(
    AREA, "DIST009", Severity.INFO, 'Collective bandwidth',
    why='all_reduce time, algbw and busbw (rccl-tests definition: busbw = algbw × 2(n-1)/n) per size, with '
        'the backend training will use.',
    fix='Nothing to do; compare across runs and nodes.',
)

DIST010 = Code(
    AREA, "DIST010", Severity.ERROR, 'Nodes to exclude',
    why="Some nodes have errors the others do not (a failed local check, a GPU fault from the health area), a "
        "rank that never joined, or a straggler: a job including them fails or runs at their pace. The healthy "
        "nodes are listed too.",
    fix='Resubmit without them: `sbatch --exclude=NODES ...` (or `srun --exclude=...`), and drain them for the '
        'admins (`scontrol update nodename=NODE state=drain reason=...`).',
)

CODES = (DIST000, DIST001, DIST002, DIST003, DIST004, DIST005, DIST006, DIST007, DIST008, DIST009, DIST010)

MATRIX_AREAS = ("torch", "config", "platform", "health", "gpus", "bf16", "attention", "features", "memory",
                "collectives")
_SEV = {"error": 0, "warning": 1, "info": 2, "ok": 3}


def node_of(r: dict[str, Any]) -> str:
    return str(r.get("node") or r.get("host") or f"rank{r.get('rank')}")


def node_matrix(ranks: list[dict[str, Any]], cluster: list[Finding], missing: list[dict[str, Any]] | None = None
                ) -> dict[str, Any]:
    """Worst severity per node and area, the nodes to exclude (with why) and the healthy ones (pure).

    An error every node shares is the job's (a dataset path, a torch build): it excludes no node, except a
    health-area error (a GPU fault is hardware, node by node). A rank that never arrived excludes its node,
    and so does a straggler (DIST007) when the job spans several nodes."""
    nodes: dict[str, dict[str, str]] = {}
    errors: dict[str, set[str]] = {}
    ranks_of: dict[str, list[int]] = {}
    for r in ranks:
        n = node_of(r)
        cells = nodes.setdefault(n, {})
        ranks_of.setdefault(n, []).append(int(r.get("rank", -1)))
        for f in r.get("findings") or []:
            area = f.get("check") or "?"
            sev = f.get("severity", "ok")
            if area in MATRIX_AREAS and (area not in cells or _SEV.get(sev, 3) < _SEV[cells[area]]):
                cells[area] = sev
            if sev == "error":
                errors.setdefault(n, set()).add(f"{f.get('id')} ({area})")
        cells.setdefault("collectives", "ok")
    for m in missing or []:
        n = str(m.get("node") or f"rank{m['rank']}")
        nodes.setdefault(n, {})["collectives"] = "error"
        ranks_of.setdefault(n, []).append(int(m["rank"]))
    by_rank = {int(r.get("rank", -1)): node_of(r) for r in ranks}
    stragglers = {by_rank.get(int(f.evidence.get("rank", -1))) for f in cluster if f.id == "DIST007"} - {None}
    for n in stragglers:
        nodes[n]["collectives"] = "warning"
    shared = set.intersection(*errors.values()) if errors and len(errors) == len(nodes) else set()
    reasons: dict[str, list[str]] = {}
    for n, errs in errors.items():
        own = sorted(e for e in errs if e not in shared or e.endswith("(health)"))
        if own:
            reasons.setdefault(n, []).extend(own)
    for m in missing or []:
        n = str(m.get("node") or f"rank{m['rank']}")
        reasons.setdefault(n, []).append(f"rank {m['rank']} never joined")
    for n in stragglers if len(nodes) > 1 else ():  # within one node a straggler is a GPU's, not the node's
        reasons.setdefault(n, []).append("straggler (DIST007)")
    exclude = sorted(reasons)
    return {"nodes": {n: {a: cells.get(a) for a in MATRIX_AREAS} for n, cells in sorted(nodes.items())},
            "ranks_by_node": {n: sorted(v) for n, v in sorted(ranks_of.items())},
            "exclude": exclude, "healthy": sorted(n for n in nodes if n not in reasons),
            "reasons": {n: sorted(set(v)) for n, v in sorted(reasons.items())},
            "job_errors": sorted(e for e in shared if not e.endswith("(health)"))}


def exclude_finding(matrix: dict[str, Any]) -> list[Finding]:
    if not matrix["exclude"]:
        return []
    ex = ",".join(matrix["exclude"])
    return [DIST010.finding(f"Exclude {len(matrix['exclude'])} of {len(matrix['nodes'])} node(s): --exclude={ex}",
                            "\n".join(f"{n}: {'; '.join(r)}" for n, r in matrix["reasons"].items())
                            + (f"\nhealthy: {','.join(matrix['healthy'])}" if matrix["healthy"] else ""),
                            exclude=matrix["exclude"], healthy=matrix["healthy"])]


def fingerprint(ctx: Any, env_summary: dict[str, Any]) -> dict[str, Any]:
    t = env_summary.get("torch") or {}
    pk = env_summary.get("packages") or {}
    gpus = env_summary.get("gpus") or []
    fp: dict[str, Any] = {"python": platform.python_version(), "torch": t.get("version") or pk.get("torch"),
                          "hip": t.get("hip"), "cuda": t.get("cuda"), "rocm": env_summary.get("rocm_version"),
                          "driver": (gpus[0].get("driver") if gpus else None) or None}
    for k in RANK_VERSION_KEYS[6:]:  # the Python packages (python/torch/hip/cuda/rocm/driver come first)
        fp[k] = pk.get(k)
    fp["config_sha256"] = hashlib.sha256(ctx.config_text.encode()).hexdigest()[:16] if ctx.config_path else None
    fp["env"] = training_env(ctx.env)
    fp["gpu"] = ({"name": gpus[0].get("name"), "arch": gpus[0].get("arch"),
                  "vram_total_mib": gpus[0].get("vram_total_mib")} if gpus else None)
    return fp


def _where(ranks: list[dict[str, Any]], idx: list[int]) -> str:
    hosts = sorted({node_of(ranks[i]) for i in idx})
    r = ",".join(str(ranks[i]["rank"]) for i in idx)
    return f"rank{'s' if len(idx) > 1 else ''} {r} ({', '.join(hosts)})"


def cluster_findings(ranks: list[dict[str, Any]], collectives: list[dict[str, Any]], *,
                     min_busbw: float | None = None, straggler_factor: float = 2.0,
                     straggler_slack_s: float = 0.005) -> list[Finding]:
    """Rank 0's verdict over every rank's fingerprint, findings and the collective timings (pure)."""
    out: list[Finding] = []
    fps = [r.get("fingerprint") or {} for r in ranks]
    for key in RANK_VERSION_KEYS:
        groups: dict[str, list[int]] = {}
        for i, fp in enumerate(fps):
            groups.setdefault(str(fp.get(key)), []).append(i)
        if len(groups) > 1:
            detail = "; ".join(f"{v} on {_where(ranks, idx)}" for v, idx in groups.items())
            out.append(DIST001.finding(f"{key} differs across ranks", detail, key=key,
                            values={v: [ranks[i]["rank"] for i in idx] for v, idx in groups.items()}))
    cfg_groups: dict[str, list[int]] = {}
    for i, fp in enumerate(fps):
        cfg_groups.setdefault(str(fp.get("config_sha256")), []).append(i)
    if len(cfg_groups) > 1:
        out.append(DIST002.finding("The training config differs across ranks",
                        "; ".join(f"sha256 {v} on {_where(ranks, idx)}" for v, idx in cfg_groups.items()),
                        hashes={v: [ranks[i]["rank"] for i in idx] for v, idx in cfg_groups.items()}))
    env_keys = sorted({k for fp in fps for k in (fp.get("env") or {})})
    for k in env_keys:
        groups = {}
        for i, fp in enumerate(fps):
            groups.setdefault(str((fp.get("env") or {}).get(k, "<unset>")), []).append(i)
        if len(groups) > 1:
            per_node = k in PER_NODE_ENV
            out.append(DIST003.finding(f"{k} differs across ranks",
                            "; ".join(f"{k}={v} on {_where(ranks, idx)}" for v, idx in groups.items())
                            + (" (per-node values are normal for this variable)" if per_node else ""),
                            severity=Severity.INFO if per_node else None, var=k))
    by_id: dict[str, list[int]] = {}
    titles: dict[str, str] = {}
    for i, r in enumerate(ranks):
        for f in r.get("findings") or []:
            if f.get("severity") == "error":
                by_id.setdefault(f["id"], []).append(i)
                titles.setdefault(f["id"], f.get("title", ""))
    for fid, idx in sorted(by_id.items()):
        if len(idx) == len(ranks) and len(ranks) > 1:
            where = "every rank"
        else:
            where = _where(ranks, idx)
        out.append(DIST004.finding(f"{fid} on {where}: {titles[fid]}",
                        "The local check of these ranks found this error; see `ranks[].findings`.",
                        finding=fid, ranks=[ranks[i]["rank"] for i in idx]))
    if collectives:
        big = max(collectives, key=lambda c: c["size_bytes"])
        arr = big.get("arrival_by_rank") or {}
        if len(arr) >= 2:
            med = statistics.median(arr.values())
            slow_rank, slow = max(arr.items(), key=lambda kv: kv[1])
            others = [v for r, v in arr.items() if r != slow_rank]
            ref = sorted(others)[len(others) // 2]
            if slow > straggler_factor * ref + straggler_slack_s:
                host = next((node_of(r) for r in ranks if str(r["rank"]) == str(slow_rank)), "?")
                out.append(DIST007.finding(f"Rank {slow_rank} ({host}) is a straggler",
                                f"It reaches the collective {slow * 1000:.1f} ms after the barrier; the other ranks "
                                f"{ref * 1000:.1f} ms (median {med * 1000:.1f} ms). Every step waits for it.",
                                rank=int(slow_rank), arrival_s=arrival_round(arr)))
        single = len(ranks) == 1
        if min_busbw is not None and not single and big["busbw_gbps"] < min_busbw:
            out.append(DIST008.finding(f"all_reduce bus bandwidth {big['busbw_gbps']:.2f} GB/s at "
                            f"{big['size_bytes'] // MiB} MiB is below the floor {min_busbw:g} GB/s",
                            "The interconnect (or its configuration) is far slower than expected.",
                            busbw_gbps=big["busbw_gbps"], floor=min_busbw))
        # one rank moves no data over a link: busbw is 0 by the definition, so show algbw and say so
        key, label = ("algbw_gbps", "algbw") if single else ("busbw_gbps", "busbw")
        out.append(DIST009.finding(f"all_reduce ({collectives[0].get('backend')}, {len(ranks)} "
                        f"rank{'' if single else 's'}, {label}): "
                        + ", ".join(f"{c['size_bytes'] // MiB if c['size_bytes'] >= MiB else c['size_bytes']}"
                                    f"{' MiB' if c['size_bytes'] >= MiB else ' B'} {c[key]:.2f} GB/s"
                                    for c in collectives),
                        "busbw = algbw × 2(n-1)/n (the rccl-tests definition)."
                        + (" With one rank no data crosses a link, so busbw is 0 and the --min-busbw floor is not "
                           "applied; run two or more ranks to measure the interconnect." if single else ""),
                        collectives=collectives))
    return with_all_good(out, DIST000, f"{len(ranks)} rank(s) agree", "Same versions, config and environment on "
                         "every rank; collectives complete.")


def arrival_round(arr: dict[Any, float]) -> dict[str, float]:
    return {str(k): round(v, 6) for k, v in arr.items()}


def collectives_from(timings: list[list[dict[str, Any]]], backend: str) -> list[dict[str, Any]]:
    """Per size: the all_reduce time of the last rank to arrive (pure communication), algbw, busbw."""
    world = len(timings)
    out = []
    for j, first in enumerate(timings[0] if timings else []):
        per = [t[j] for t in timings]
        last = max(range(world), key=lambda r: per[r]["arrival_s"])
        comm = max(per[last]["allreduce_s"], 1e-9)  # it waited for nobody
        size = first["size_bytes"]
        algbw = size / comm / 1e9
        busbw = algbw * (2 * (world - 1) / world) if world > 1 else 0.0
        out.append({"size_bytes": size, "time_us": round(comm * 1e6, 1), "algbw_gbps": round(algbw, 3),
                    "busbw_gbps": round(busbw, 3), "slowest_rank": last, "backend": backend,
                    "arrival_by_rank": {r: round(per[r]["arrival_s"], 6) for r in range(world)}})
    return out
