"""Which GPU a failed attempt faulted on, from the health data of the GPUs it used.

A snapshot before the launch and one after the failure, through the health area's own parsers
(:mod:`doctor.health`: sysfs RAS counters, retired pages, the amdgpu lines of dmesg) and the inventory
(:mod:`doctor.gpuinfo`): a GPU whose uncorrectable count grew, that gained retired pages, or that got a
reset / ring timeout / `GPU Hang` / RAS event during the attempt faulted; so did the KFD node a
``HW Exception by GPU node-N`` / ``Memory access fault by GPU node-N`` line names and the PCI address of an
``amdgpu 0000:xx:00.0`` line in the log. The policy decides what to do with it.
"""

from __future__ import annotations

import re
from typing import Any

from doctor import gpuinfo, health
from doctor.host import Host, ToolResult

NODE = re.compile(r"(?:HW Exception|Memory access fault) by GPU node-(\d+)")
BDF = re.compile(r"amdgpu (\d{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f])", re.I)


def snapshot(env: dict[str, str] | None) -> dict[str, Any]:
    """GPUs (inventory) and their health now, and the OOM killer's records (:func:`host_oom`). sysfs, cgroup files
    and one read of dmesg only: amd-smi would cost a second per call."""
    try:
        host = Host.from_env(env)
        dmesg = host.run(["dmesg"]) if host.which("dmesg") else None
    except Exception as e:  # never let the watchdog take the supervisor down
        return {"gpus": [], "health": {"gpus": [], "events": []}, "oom": {}, "error": f"{type(e).__name__}: {e}"}
    out: dict[str, Any] = {"oom": _oom_records(host, dmesg)}
    try:
        gpus = [g.to_dict() for g in gpuinfo.inventory(host, env=env, use_library=False)[0]]
        h = health.gather(host, gpus, use_amd_smi=False, dmesg=dmesg).to_dict() if gpus else {"gpus": [], "events": []}
    except Exception as e:
        return {**out, "gpus": [], "health": {"gpus": [], "events": []}, "error": f"{type(e).__name__}: {e}"}
    return {**out, "gpus": gpus, "health": h}


def _by_bdf(snap: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {str(x.get("bdf") or "").lower(): x for x in (snap.get("health") or {}).get("gpus") or []}


def faulty(before: dict[str, Any], after: dict[str, Any], log_lines: list[str],
           used: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The GPUs of ``used`` (inventory entries) that faulted between the snapshots or that the log names."""
    b, a = _by_bdf(before), _by_bdf(after)
    text = "\n".join(log_lines)
    nodes = {int(n) for n in NODE.findall(text)}
    bdfs = {x.lower() for x in BDF.findall(text)}
    out = []
    for g in used:
        if g.get("vendor") != "amd":
            continue
        bdf = str(g.get("bdf") or "").lower()
        why: list[str] = []
        x, y = b.get(bdf) or {}, a.get(bdf) or {}
        if (y.get("uncorrectable") or 0) > (x.get("uncorrectable") or 0):
            why.append(f"uncorrectable errors {x.get('uncorrectable') or 0} -> {y['uncorrectable']}")
        if (y.get("bad_pages") or 0) > (x.get("bad_pages") or 0):
            why.append(f"retired pages {x.get('bad_pages') or 0} -> {y['bad_pages']}")
        old = {e["line"] for e in x.get("events") or []}
        new = [e for e in y.get("events") or [] if e["kind"] in health.SEVERE and e["line"] not in old]
        if new:
            why.append(f"{', '.join(sorted({e['kind'].replace('_', ' ') for e in new}))} in the kernel log")
        if g.get("kfd_node") is not None and int(g["kfd_node"]) in nodes:
            why.append(f"the log names GPU node-{g['kfd_node']}")
        if bdf and bdf in bdfs and not why:
            why.append("the log's amdgpu lines name it")
        if why:
            out.append({"index": g.get("index"), "bdf": bdf, "name": g.get("name"), "why": why,
                        "evidence": [e["line"] for e in new[-5:]]})
    return out


exclusion = gpuinfo.exclusion  # the same answer the health area's HLTH001 carries


# ---------------------------------------------------------------- the kernel's OOM killer (host RAM)
# mm/oom_kill.c: "Out of memory: Killed process 4242 (python) total-vm:..." and, for a cgroup's limit,
# "Memory cgroup out of memory: Killed process ..."; kernels before 5.0 said "Kill process N (x) score ..."
OOM_LINE = re.compile(r"(?:Out of memory|Memory cgroup out of memory): Kill(?:ed)? process (\d+) \(([^)]*)\)")


# the names (comm, 15 characters at most) the processes of a training run have: python ranks (torch names its
# threads pt_main_thread), the launchers
TRAINER_COMM = re.compile(r"python|pt_main_thread|pt_elastic|torchrun|llamafactory|deepspeed|accelerate", re.I)


def oom_kill_count(events: str | None) -> int | None:
    """The ``oom_kill`` counter of a cgroup v2 ``memory.events`` (or v1 ``memory.oom_control``) file: the
    processes of the cgroup (and its children) the OOM killer has killed so far."""
    m = re.search(r"^oom_kill (\d+)$", events or "", re.M)
    return int(m.group(1)) if m else None


def _own_cgroup_events(host: Host) -> tuple[str, str | None]:
    """(path, content) of the memory events of the cgroup this process (and so the training it starts) is in."""
    paths = []
    for line in (host.read("/proc/self/cgroup") or "").splitlines():
        hid, _, rest = line.partition(":")
        ctrl, _, path = rest.partition(":")
        if hid == "0" and ctrl == "":  # cgroup v2: the unified hierarchy
            paths.append(f"/sys/fs/cgroup{path.rstrip('/')}/memory.events")
        elif "memory" in ctrl.split(","):
            paths.append(f"/sys/fs/cgroup/memory{path.rstrip('/')}/memory.oom_control")
    paths += ["/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"]
    for p in paths:
        text = host.read(p)
        if oom_kill_count(text) is not None:
            return p, text
    return "", None


def _oom_records(host: Host, dmesg: ToolResult | None) -> dict[str, Any]:
    """The OOM-kill counter of our cgroup and the kernel log's OOM-kill lines, before or after an attempt."""
    try:
        path, text = _own_cgroup_events(host)
    except Exception as e:  # never let the evidence take the supervisor down
        return {"error": f"{type(e).__name__}: {e}"}
    lines = [ln for ln in dmesg.stdout.splitlines() if OOM_LINE.search(ln)][-20:] if dmesg is not None and dmesg.ok \
        else []
    return {"cgroup": path, "oom_kill": oom_kill_count(text), "dmesg": lines}


def host_oom(before: dict[str, Any], after: dict[str, Any]) -> str:
    """Why an attempt's processes were killed by the OOM killer (host RAM), or "" when nothing says so: the
    cgroup's oom_kill counter rose, or the kernel log gained an OOM-kill line, during the attempt."""
    b, a = before.get("oom_kill"), after.get("oom_kill")
    if isinstance(a, int) and isinstance(b, int) and a > b:
        return f"the OOM killer killed {a - b} process(es) of this job's cgroup ({after.get('cgroup')}: oom_kill {b} -> {a})"
    seen = set(before.get("dmesg") or [])
    # on a shared host the kernel log names other jobs' kills too: only a training process counts
    new = [ln for ln in after.get("dmesg") or [] if ln not in seen and TRAINER_COMM.match(OOM_LINE.search(ln).group(2))]
    if new:
        m = OOM_LINE.search(new[-1])
        who = f"{m.group(2)} (pid {m.group(1)})" if m else "a process"
        return f"the kernel log says the OOM killer killed {who}: {new[-1].strip()[:200]}"
    return ""
