"""The collective probe of ``check --distributed``; runs in the isolated worker (imports torch).

Every rank calls it with its own small payload (findings without evidence + fingerprint). The payloads meet
in torch.distributed's own TCPStore at MASTER_ADDR:MASTER_PORT (torchrun's agent store when torchrun launched
the ranks, else one rank 0 hosts, as under ``srun``): each rank sets its key, rank 0 waits up to the timeout,
so a rank that never arrives is *named* and the others still report (a process group would only time out).
Then every rank joins the process group on that store with the backend training will use (``nccl`` — RCCL
on ROCm — when a GPU is visible, else ``gloo``) and times ``all_reduce`` over a few sizes. Each iteration starts at a barrier,
runs a fixed local matmul (so a slow GPU/CPU arrives late), then the all_reduce; the arrival time
names the straggler, and the all_reduce time of the *last* rank to arrive (it waits for nobody) is
the communication time, from which algbw and busbw (rccl-tests' 2(n-1)/n) follow.

Failures come back as data (``phase`` + ``error``), so the parent can name the env to check; a hang
that ignores the timeout is killed by the worker's own timeout.
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import timedelta
from typing import Any


def _sync(torch: Any, dev: Any) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def probe_collectives(payload: dict[str, Any], sizes: list[int], iters: int = 5, timeout: float = 60.0,
                      backend: str | None = None, compute_n: int = 512) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    backend = backend if backend and backend != "auto" else ("nccl" if cuda else "gloo")
    dev = torch.device("cpu")
    if backend == "nccl":
        dev = torch.device("cuda", local % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(dev)
    out: dict[str, Any] = {"backend": backend, "rank": rank, "world_size": world, "device": str(dev),
                           "nccl_version": None}
    if backend == "nccl":
        try:
            out["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:
            pass
    phase = "rendezvous"
    t0 = time.perf_counter()
    try:
        store = _store(dist, rank, timeout)
        arrived = _gather(store, rank, world, payload, timeout, out)
        out["gather_s"] = round(time.perf_counter() - t0, 3)
        if not arrived:
            out["phase"] = "rendezvous"
            out["error"] = (f"rank(s) {', '.join(map(str, out.get('missing_ranks') or []))} never arrived within "
                            f"{timeout:.0f} s" if rank == 0 else "rank 0 called the check off: a rank is missing")
            out["elapsed_s"] = round(time.perf_counter() - t0, 3)
            return out
        phase = "init"
        kw: dict[str, Any] = {"backend": backend, "timeout": timedelta(seconds=timeout),
                              "store": dist.PrefixStore("rocm-doctor/pg", store), "rank": rank, "world_size": world}
        if backend == "nccl":
            kw["device_id"] = dev
        dist.init_process_group(**kw)
        out["init_s"] = round(time.perf_counter() - t0, 3)
        phase = "all_reduce"
        slow_ms = float(os.environ.get("ROCM_DOCTOR_TEST_SLOW_MS", "0") or 0)  # test hook: a slow rank
        a = torch.randn(compute_n, compute_n, device=dev)
        timings = []
        for size in sizes:
            x = torch.ones(max(1, size // 4), dtype=torch.float32, device=dev)
            for _ in range(2):  # warm-up: connection set-up, algorithm selection
                dist.all_reduce(x)
            _sync(torch, dev)
            arrivals, times = [], []
            for _ in range(iters):
                dist.barrier()
                s0 = time.perf_counter()
                (a @ a).sum().item()
                if slow_ms:
                    time.sleep(slow_ms / 1000)
                _sync(torch, dev)
                s1 = time.perf_counter()
                dist.all_reduce(x)
                _sync(torch, dev)
                s2 = time.perf_counter()
                arrivals.append(s1 - s0)
                times.append(s2 - s1)
            timings.append({"size_bytes": size, "arrival_s": statistics.median(arrivals),
                            "allreduce_s": statistics.median(times), "allreduce_min_s": min(times)})
        phase = "gather timings"
        all_t: list[Any] = [None] * world
        dist.all_gather_object(all_t, timings)
        out["timings"] = all_t
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:  # a collective failure is a finding, not a crash
        out["phase"], out["error"] = phase, f"{type(e).__name__}: {e}"[:2000]
        out["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return out


def _store(dist: Any, rank: int, timeout: float) -> Any:
    """The job's TCPStore: torchrun's agent hosts it (TORCHELASTIC_USE_AGENT_STORE); without torchrun
    (srun, one task per GPU) rank 0 does. Keys live under ``rocm-doctor/``."""
    addr, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "29500"))
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    store = dist.TCPStore(addr, port, is_master=(rank == 0 and not agent), timeout=timedelta(seconds=timeout),
                          wait_for_workers=False)
    return dist.PrefixStore("rocm-doctor/", store)


def _gather(store: Any, rank: int, world: int, payload: Any, timeout: float, out: dict[str, Any]) -> bool:
    """Every rank's payload on rank 0 (``out["ranks"]``), ranks that never came in ``missing_ranks``; then
    rank 0 says go (everyone is here) or stop. Returns whether the collectives may start."""
    import json

    store.set(f"payload/{rank}", json.dumps(payload, default=str))
    store.add("arrived", 1)
    if rank != 0:
        store.wait(["verdict"], timedelta(seconds=timeout * 2 + 10))
        return store.get("verdict") == b"go"
    deadline = time.monotonic() + timeout
    while store.add("arrived", 0) < world and time.monotonic() < deadline:
        time.sleep(0.05)
    out["wait_s"] = round(timeout - max(0.0, deadline - time.monotonic()), 3)  # until the last rank arrived
    t0 = time.perf_counter()
    present = [r for r in range(world) if store.check([f"payload/{r}"])]
    out["missing_ranks"] = sorted(set(range(world)) - set(present))
    raw = [store.get(f"payload/{r}") for r in present]
    out["fetch_s"] = round(time.perf_counter() - t0, 4)  # reading every payload once all are there
    out["ranks"] = [json.loads(b) for b in raw]
    out["payload_bytes"] = sum(len(b) for b in raw)
    go = not out["missing_ranks"]
    store.set("verdict", "go" if go else "stop")
    return go
