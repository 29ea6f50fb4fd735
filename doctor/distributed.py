"""``rocm-doctor check --distributed``: the same checks on every rank, one cluster verdict on rank 0.

Launched on every node by torchrun (``torchrun ... -m doctor check --distributed cfg.yaml``), or,
without torchrun's RANK/WORLD_SIZE in the environment, it launches torchrun itself from the
variables ``llamafactory-cli`` uses (NNODES, NODE_RANK, NPROC_PER_NODE, MASTER_ADDR, MASTER_PORT).

Each rank runs the local check (probes in the isolated worker, GPUs restricted to its own), builds
a fingerprint (versions, driver, ROCm, config hash, training-relevant env vars), then the collective
probe (:mod:`checks.dist_probes`, also in the isolated worker, bounded by a timeout) gathers every
rank's result on rank 0 and measures all_reduce bandwidth. Rank 0 reports mismatches, per-rank
errors, the straggler and the bandwidth; a rank that never joins or a collective that hangs becomes a
finding naming the environment to check.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from doctor import gpuinfo
from doctor.config import InputError
from doctor.findings import Finding, Severity, make

A = "distributed"
RESULT_ENV = "ROCM_DOCTOR_DIST_RESULT"
VERSION_KEYS = ("python", "torch", "hip", "cuda", "rocm", "driver", "transformers", "peft", "trl", "accelerate",
                "datasets", "llamafactory", "deepspeed", "bitsandbytes", "flash_attn")
ENV_KEYS = ("HSA_OVERRIDE_GFX_VERSION", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "OPTIM_TORCH",
            "FLASH_ATTENTION_TRITON_AMD_ENABLE", "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", "HIP_FORCE_DEV_KERNARG",
            "TORCH_BLAS_PREFER_HIPBLASLT", "DISABLE_VERSION_CHECK", "ALLOW_EXTRA_ARGS", "FORCE_TORCHRUN")
ENV_PREFIXES = ("NCCL_", "RCCL_")
ENV_PER_NODE = {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_DEBUG_FILE"}  # legitimately differ between nodes
NET_ENV_HINT = ("check MASTER_ADDR/MASTER_PORT reachability and the firewall between nodes, NCCL_SOCKET_IFNAME "
                "(the interface that routes to the other nodes), NCCL_IB_HCA / NCCL_IB_DISABLE / NCCL_NET_GDR_LEVEL, "
                "RCCL's HSA_FORCE_FINE_GRAIN_PCIE, and rerun with NCCL_DEBUG=INFO")
MiB = 1024 * 1024


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


def fingerprint(ctx: Any, env_summary: dict[str, Any]) -> dict[str, Any]:
    t = env_summary.get("torch") or {}
    pk = env_summary.get("packages") or {}
    gpus = env_summary.get("gpus") or []
    fp: dict[str, Any] = {"python": platform.python_version(), "torch": t.get("version") or pk.get("torch"),
                          "hip": t.get("hip"), "cuda": t.get("cuda"), "rocm": env_summary.get("rocm_version"),
                          "driver": (gpus[0].get("driver") if gpus else None) or None}
    for k in ("transformers", "peft", "trl", "accelerate", "datasets", "llamafactory", "deepspeed", "bitsandbytes",
              "flash_attn"):
        fp[k] = pk.get(k)
    fp["config_sha256"] = hashlib.sha256(ctx.config_text.encode()).hexdigest()[:16] if ctx.config_path else None
    fp["env"] = {k: v for k, v in sorted(ctx.env.items()) if k in ENV_KEYS or k.startswith(ENV_PREFIXES)}
    fp["gpu"] = ({"name": gpus[0].get("name"), "arch": gpus[0].get("arch"),
                  "vram_total_mib": gpus[0].get("vram_total_mib")} if gpus else None)
    return fp


def _where(ranks: list[dict[str, Any]], idx: list[int]) -> str:
    hosts = sorted({ranks[i]["host"] for i in idx})
    r = ",".join(str(ranks[i]["rank"]) for i in idx)
    return f"rank{'s' if len(idx) > 1 else ''} {r} ({', '.join(hosts)})"


def cluster_findings(ranks: list[dict[str, Any]], collectives: list[dict[str, Any]], *,
                     min_busbw: float | None = None, straggler_factor: float = 2.0,
                     straggler_slack_s: float = 0.005) -> list[Finding]:
    """Rank 0's verdict over every rank's fingerprint, findings and the collective timings (pure)."""
    out: list[Finding] = []
    fps = [r.get("fingerprint") or {} for r in ranks]
    for key in VERSION_KEYS:
        groups: dict[str, list[int]] = {}
        for i, fp in enumerate(fps):
            groups.setdefault(str(fp.get(key)), []).append(i)
        if len(groups) > 1:
            detail = "; ".join(f"{v} on {_where(ranks, idx)}" for v, idx in groups.items())
            out.append(make("DIST001", A, f"{key} differs across ranks", detail, key=key,
                            values={v: [ranks[i]["rank"] for i in idx] for v, idx in groups.items()}))
    cfg_groups: dict[str, list[int]] = {}
    for i, fp in enumerate(fps):
        cfg_groups.setdefault(str(fp.get("config_sha256")), []).append(i)
    if len(cfg_groups) > 1:
        out.append(make("DIST002", A, "The training config differs across ranks",
                        "; ".join(f"sha256 {v} on {_where(ranks, idx)}" for v, idx in cfg_groups.items()),
                        hashes={v: [ranks[i]["rank"] for i in idx] for v, idx in cfg_groups.items()}))
    env_keys = sorted({k for fp in fps for k in (fp.get("env") or {})})
    for k in env_keys:
        groups = {}
        for i, fp in enumerate(fps):
            groups.setdefault(str((fp.get("env") or {}).get(k, "<unset>")), []).append(i)
        if len(groups) > 1:
            per_node = k in ENV_PER_NODE
            out.append(make("DIST003", A, f"{k} differs across ranks",
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
        out.append(make("DIST004", A, f"{fid} on {where}: {titles[fid]}",
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
                host = next((r["host"] for r in ranks if str(r["rank"]) == str(slow_rank)), "?")
                out.append(make("DIST007", A, f"Rank {slow_rank} ({host}) is a straggler",
                                f"It reaches the collective {slow * 1000:.1f} ms after the barrier; the other ranks "
                                f"{ref * 1000:.1f} ms (median {med * 1000:.1f} ms). Every step waits for it.",
                                rank=int(slow_rank), arrival_s=arrival_round(arr)))
        single = len(ranks) == 1
        if min_busbw is not None and not single and big["busbw_gbps"] < min_busbw:
            out.append(make("DIST008", A, f"all_reduce bus bandwidth {big['busbw_gbps']:.2f} GB/s at "
                            f"{big['size_bytes'] // MiB} MiB is below the floor {min_busbw:g} GB/s",
                            "The interconnect (or its configuration) is far slower than expected.",
                            busbw_gbps=big["busbw_gbps"], floor=min_busbw))
        # one rank moves no data over a link: busbw is 0 by the definition, so show algbw and say so
        key, label = ("algbw_gbps", "algbw") if single else ("busbw_gbps", "busbw")
        out.append(make("DIST009", A, f"all_reduce ({collectives[0].get('backend')}, {len(ranks)} "
                        f"rank{'' if single else 's'}, {label}): "
                        + ", ".join(f"{c['size_bytes'] // MiB if c['size_bytes'] >= MiB else c['size_bytes']}"
                                    f"{' MiB' if c['size_bytes'] >= MiB else ' B'} {c[key]:.2f} GB/s"
                                    for c in collectives),
                        "busbw = algbw × 2(n-1)/n (the rccl-tests definition)."
                        + (" With one rank no data crosses a link, so busbw is 0 and the --min-busbw floor is not "
                           "applied; run two or more ranks to measure the interconnect." if single else ""),
                        collectives=collectives))
    if not [f for f in out if f.severity in (Severity.ERROR, Severity.WARNING)]:
        out.insert(0, make("DIST000", A, f"{len(ranks)} rank(s) agree", "Same versions, config and environment on "
                           "every rank; collectives complete."))
    return out


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


def run_rank(args: Any) -> int:
    """One rank's part under torchrun; rank 0 prints the cluster report."""
    from doctor.cli import environment_summary, run_check
    from doctor.render import sort_findings
    from doctor.worker import ProbeSpec, run_probes

    env = dict(os.environ)
    re_ = rank_env(env)
    assert re_ is not None
    gpus, _ = gpuinfo.inventory(env=env)
    local_env = local_device_env(env, re_["local_rank"], len(gpus))
    ctx, findings = run_check(args.config, only=None, python=args.python, timeout=args.timeout, env=local_env)
    es = environment_summary(ctx)
    inv = es.get("gpus") or []
    mine = gpuinfo.visible_gpus(local_env, inv)  # this rank's GPU, not the node's first
    me = {"rank": re_["rank"], "local_rank": re_["local_rank"], "node_rank": re_["node_rank"],
          "host": socket.gethostname(), "gpu": (mine or inv or [None])[0],
          "fingerprint": fingerprint(ctx, es), "findings": [f.to_dict() for f in findings]}
    sizes = parse_sizes(args.dist_sizes)
    spec = ProbeSpec("collectives", "checks.dist_probes", "probe_collectives",
                     {"payload": me, "sizes": sizes, "iters": args.dist_iters, "timeout": args.dist_timeout,
                      "backend": args.dist_backend},
                     timeout=args.dist_timeout * 2 + 30 + 10 * len(sizes), group="dist")
    res = run_probes([spec], python=ctx.python, env=env)["collectives"]
    if re_["rank"] != 0:
        return 0
    cluster: list[Finding] = []
    ranks: list[dict[str, Any]] = [me]
    collectives: list[dict[str, Any]] = []
    backend = None
    if not res.ok:
        cluster.append(make("DIST006", A, f"The collective probe did not finish ({res.status})",
                            f"{res.error or ''} A hang here would hang training at its first collective; "
                            + NET_ENV_HINT + ".", status=res.status))
    else:
        d = res.data
        backend = d.get("backend")
        if d.get("error"):
            code = "DIST005" if d.get("phase") == "init" else "DIST006"
            what = ("Process group init failed: not every rank joined" if code == "DIST005"
                    else f"Collective failed during {d.get('phase')}")
            cluster.append(make(code, A, f"{what} ({backend}, world size {d.get('world_size')})",
                                f"{d['error']}\nAfter {d.get('elapsed_s')} s. To check: " + NET_ENV_HINT + ".",
                                phase=d.get("phase"), error=d["error"]))
        if d.get("ranks"):
            ranks = d["ranks"]
        if d.get("timings"):
            collectives = collectives_from(d["timings"], backend or "?")
    cluster += cluster_findings(ranks, collectives, min_busbw=args.min_busbw)
    report = {"schema": "rocm-doctor.check/1", "findings": [f.to_dict() for f in sort_findings(findings + cluster)],
              "environment": es, "distributed": {"world_size": re_["world_size"], "backend": backend,
                                                 "nccl_version": res.data.get("nccl_version") if res.ok else None},
              "ranks": ranks, "collectives": [{k: v for k, v in c.items() if k != "arrival_by_rank"}
                                              | {"arrival_ms_by_rank": {str(r): round(a * 1000, 3) for r, a in
                                                                        c["arrival_by_rank"].items()}}
                                              for c in collectives]}
    code = 1 if any(f["severity"] == "error" for f in report["findings"]) else 0
    out_path = env.get(RESULT_ENV)
    if out_path:  # launched by our own torchrun wrapper: it prints
        Path(out_path).write_text(json.dumps({"exit_code": code, "report": report}, default=str))
        return 0
    print_report(report, args)
    return code


def print_report(report: dict[str, Any], args: Any) -> None:
    if args.json:
        print(json.dumps(report, indent=2, default=str))
        return
    from doctor.cli import _console
    from doctor.render import print_human

    con = _console()
    print_human([Finding.from_dict(f) for f in report["findings"]], con, verbose=args.verbose,
                title=f"rocm-doctor check --distributed ({len(report['ranks'])} ranks)")
    if report["collectives"]:
        con.print("\n[bold]all_reduce[/]  size        time      algbw      busbw   slowest rank")
        for c in report["collectives"]:
            con.print(f"            {c['size_bytes'] / MiB:8.2f} MiB {c['time_us'] / 1000:8.2f} ms "
                      f"{c['algbw_gbps']:7.2f} GB/s {c['busbw_gbps']:7.2f} GB/s   {c['slowest_rank']}")


def launch(args: Any, argv: list[str]) -> int:
    """Not under torchrun: launch it from llamafactory-cli's variables, print rank 0's report."""

    env = dict(os.environ)
    nnodes = env.get("NNODES", "1")
    node_rank = env.get("NODE_RANK", "0")
    nproc = env.get("NPROC_PER_NODE")
    if not nproc:
        gpus, _ = gpuinfo.inventory(env=env)
        vis = env.get("HIP_VISIBLE_DEVICES") or env.get("CUDA_VISIBLE_DEVICES")
        nproc = str(len([x for x in vis.split(",") if x.strip()]) if vis else max(1, len(gpus)))
    addr = env.get("MASTER_ADDR", "127.0.0.1")
    port = env.get("MASTER_PORT") or (str(_free_port()) if nnodes == "1" else "29500")
    root = str(Path(__file__).resolve().parent.parent)  # `-m doctor` in the examined Python, installed or not
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    with tempfile.TemporaryDirectory(prefix="rocm-doctor-dist-") as tmp:
        result = Path(tmp) / "result.json"
        env[RESULT_ENV] = str(result)
        cmd = [args.python or sys.executable, "-m", "torch.distributed.run", "--nnodes", nnodes,
               "--node_rank", node_rank, "--nproc_per_node", nproc, "--master_addr", addr, "--master_port", port,
               "-m", "doctor", *argv]
        if not args.json:
            print(f"launching: {' '.join(cmd)}", file=sys.stderr)
        try:
            p = subprocess.run(cmd, env=env, stdout=sys.stderr if args.json else None,
                               timeout=args.dist_timeout * 4 + args.timeout * 3 + 300)
        except subprocess.TimeoutExpired:
            print("rocm-doctor: torchrun did not finish in time (a rank never joined?)", file=sys.stderr)
            return 1
        except OSError as e:
            raise InputError(f"cannot launch torchrun with {cmd[0]}: {e}") from None
        if result.is_file():
            data = json.loads(result.read_text())
            print_report(data["report"], args)
            return int(data["exit_code"])
        if node_rank != "0":
            print(f"node {node_rank}: local ranks finished (torchrun exit {p.returncode}); the report is on node 0.",
                  file=sys.stderr)
            return 0 if p.returncode == 0 else 1
        print(f"rocm-doctor: torchrun exited {p.returncode} without a report from rank 0", file=sys.stderr)
        return 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cmd(args: Any, argv: list[str]) -> int:
    parse_sizes(args.dist_sizes)  # bad input -> exit 2 before anything starts
    if args.config:
        from doctor.config import load_config

        load_config(args.config)
    if rank_env(dict(os.environ)) is not None:
        return run_rank(args)
    return launch(args, argv)
