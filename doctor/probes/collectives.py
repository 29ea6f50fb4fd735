"""The collective probe of ``check --distributed``; runs in the isolated worker (imports torch).

Every rank calls it with its own payload (findings + fingerprint). It joins the process group that
torchrun set up (``env://``: MASTER_ADDR/PORT, RANK, WORLD_SIZE) with the backend training will use
(``nccl`` — RCCL on ROCm — when a GPU is visible, else ``gloo``), gathers every rank's payload with
``all_gather_object``, then times ``all_reduce`` over a few sizes. Each iteration starts at a barrier,
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
    phase = "init"
    t0 = time.perf_counter()
    try:
        kw: dict[str, Any] = {"backend": backend, "timeout": timedelta(seconds=timeout)}
        if backend == "nccl":
            kw["device_id"] = dev
        dist.init_process_group(**kw)
        out["init_s"] = round(time.perf_counter() - t0, 3)
        phase = "all_gather_object"
        gathered: list[Any] = [None] * world
        dist.all_gather_object(gathered, payload)
        out["ranks"] = gathered
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
