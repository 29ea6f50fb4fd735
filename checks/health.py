"""GPU health: ECC/RAS errors and retired pages, recent amdgpu resets/hangs/RAS events, throttling, and the
partition mode, for the GPUs the run will use.

A GPU that reset or reported an uncorrectable error in the last hour fails again: the run would crash hours
in (`HW Exception by GPU node-N`, `GPU Hang`, an RCCL timeout on one rank). The data comes from
:mod:`doctor.health` (sysfs RAS counters, ``dmesg``, ``amd-smi``), whose parsers ``train`` shares.
"""

from __future__ import annotations

from typing import Any

from doctor import gpuinfo
from doctor import health as hl
from doctor.context import Context
from doctor.findings import Code, Finding, Severity, with_all_good
from doctor.registry import check

AREA = "health"
CE_WARN = 10  # correctable errors worth a look (a handful over a GPU's life is normal)

HLTH000 = Code(
    AREA, "HLTH000", Severity.OK, "GPUs healthy",
    why="No uncorrectable errors, retired pages, recent resets, hangs or RAS events on the GPUs this run uses.",
    fix="Nothing to do.",
)

HLTH001 = Code(
    AREA, "HLTH001", Severity.ERROR, "A GPU this run uses has uncorrectable errors or reset recently",
    why="Uncorrectable ECC/RAS errors, or a GPU reset, ring timeout, `GPU Hang` or RAS/XGMI event in the last "
        "hour: the GPU (or its HBM) is faulty or the driver recovered it from a hang. A run on it crashes again "
        "(`HW Exception by GPU node-N`, a NCCL/RCCL timeout on one rank) hours in.",
    fix="Exclude the GPU (`ROCR_VISIBLE_DEVICES` without its index: `rocm-doctor fix CONFIG --apply exclude-gpu` "
        "prints the value), drain the node from the scheduler, and "
        "collect `sudo amd-smi bad-pages`, `sudo amd-smi metric --ecc`, `sudo dmesg | grep -i amdgpu` for the "
        "vendor; a reboot clears a recovered hang but not failing HBM.",
    playbook="exclude-gpu", autofix=False,
)

HLTH002 = Code(
    AREA, "HLTH002", Severity.WARNING, "Correctable errors or retired pages on a GPU",
    why="The GPU corrected ECC errors or retired HBM pages. It keeps working (retirement is the designed "
        "response), but a growing count precedes uncorrectable errors and page retirement stops at the bad-page "
        "threshold.",
    fix="Watch the counts (`amd-smi metric --ecc`, `amd-smi bad-pages`); above the vendor's threshold, RMA.",
)

HLTH003 = Code(
    AREA, "HLTH003", Severity.WARNING, "Earlier amdgpu faults in the kernel log",
    why="A reset, hang, RAS/XGMI event older than an hour (or of unknown age), or GPU page faults (a kernel "
        "touching unmapped memory: usually a software bug, sometimes a wrong-arch kernel) since boot.",
    fix="Read the lines in the evidence (`sudo dmesg -T | grep -i amdgpu`); a recurring reset on the same GPU "
        "is a hardware fault: exclude it.",
)

HLTH004 = Code(
    AREA, "HLTH004", Severity.WARNING, "A GPU is throttling",
    why="amd-smi reports the GPU throttled (power, thermal or current limit): it runs below its clocks and, in "
        "a multi-GPU run, holds back every other rank at each collective.",
    fix="Check cooling and the power cap (`amd-smi metric --power --temperature`, `amd-smi static --limit`); an "
        "idle GPU should not throttle.",
)

HLTH005 = Code(
    AREA, "HLTH005", Severity.INFO, "GPU partitioned (compute/memory partition mode)",
    why="In CPX/DPX/TPX/QPX compute modes one MI300-class GPU appears as several; the tools report the full HBM "
        "for every partition, so the memory fit divides it (NPS4 splits the HBM into four pools).",
    fix="Nothing to do if intended; `sudo amd-smi set --compute-partition SPX` (and `--memory-partition NPS1`) "
        "for one large GPU.",
)

HLTH006 = Code(
    AREA, "HLTH006", Severity.INFO, "Kernel log not readable",
    why="dmesg needs CAP_SYSLOG where `kernel.dmesg_restrict=1` (the default on Ubuntu and in containers), so "
        "recent GPU resets and RAS events are unknown; the error counters were still read.",
    fix="Run `sudo rocm-doctor check --only health`, or `sudo dmesg -T | grep -i amdgpu`.",
)

CODES = (HLTH000, HLTH001, HLTH002, HLTH003, HLTH004, HLTH005, HLTH006)


def _name(g: dict[str, Any]) -> str:
    return f"GPU {g.get('index')} ({g.get('bdf') or '?'})"


def judge(h: dict[str, Any], gpus: list[dict[str, Any]], inventory: list[dict[str, Any]] | None = None,
          env: dict[str, str] | None = None) -> list[Finding]:
    """Health verdicts for the GPUs ``gpus`` (inventory entries of the run) from ``h``
    (:class:`doctor.health.Health` as a dict). ``inventory`` (every GPU) lets an error carry the
    visible-device variables that run the job on healthy GPUs (the ``exclude-gpu`` playbook)."""
    out: list[Finding] = []
    used = {str(g.get("bdf") or "").lower(): g for g in gpus if g.get("vendor") == "amd"}
    per = {str(x.get("bdf") or "").lower(): x for x in h.get("gpus") or []}
    for bdf, g in used.items():
        x = per.get(bdf)
        if x is None:
            continue
        recent = [e for e in x.get("events") or [] if e["kind"] in hl.SEVERE and e.get("age_s") is not None
                  and e["age_s"] <= hl.RECENT_S]
        older = [e for e in x.get("events") or [] if e not in recent]
        fw = x.get("firmware") or {}
        if x.get("uncorrectable") or recent:
            what = []
            if x.get("uncorrectable"):
                blocks = [b for b, (ue, _) in (x.get("ras_blocks") or {}).items() if ue]
                what.append(f"{x['uncorrectable']} uncorrectable error(s)" + (f" ({', '.join(blocks)})" if blocks else ""))
            if recent:
                kinds = sorted({e["kind"].replace("_", " ") for e in recent})
                what.append(f"{', '.join(kinds)} in the last {int(max(e['age_s'] for e in recent) // 60) + 1} min")
            out.append(HLTH001.finding(f"{_name(g)}: " + "; ".join(what),
                                       "\n".join(e["line"] for e in recent[-5:]),
                                       gpu=g.get("index"), bdf=bdf, uncorrectable=x.get("uncorrectable"),
                                       events=recent[-10:], firmware=fw))
        elif older:
            kinds = sorted({e["kind"].replace("_", " ") for e in older})
            out.append(HLTH003.finding(f"{_name(g)}: {len(older)} earlier amdgpu event(s): {', '.join(kinds)}",
                                       "\n".join(e["line"] for e in older[-5:]), gpu=g.get("index"), bdf=bdf,
                                       events=older[-10:]))
        if x.get("bad_pages") or (x.get("correctable") or 0) >= CE_WARN:
            out.append(HLTH002.finding(f"{_name(g)}: {x.get('correctable') or 0} correctable error(s), "
                                       f"{x.get('bad_pages') or 0} retired page(s)", gpu=g.get("index"), bdf=bdf,
                                       correctable=x.get("correctable"), bad_pages=x.get("bad_pages")))
        if (x.get("throttle") or "").startswith("THROTTLED"):
            out.append(HLTH004.finding(f"{_name(g)} reports {x['throttle']}", gpu=g.get("index"), bdf=bdf))
        cp, mp = x.get("compute_partition"), x.get("memory_partition")
        if (cp and cp != "SPX") or (mp and mp not in ("NPS1",)):
            out.append(HLTH005.finding(f"{_name(g)} in {cp or '?'}/{mp or '?'} mode",
                                       f"{hl.partition_count(cp, mp, g.get('name'))} partitions share this "
                                       "GPU's HBM; the memory fit counts one share", gpu=g.get("index"),
                                       compute_partition=cp, memory_partition=mp))
    # events that name no GPU's BDF (MCE, an unlabelled "GPU Hang" from the runtime)
    loose = [e for e in h.get("events") or [] if not e.get("bdf") and e["kind"] in hl.SEVERE | {"mce"}]
    if loose and used:
        rec = [e for e in loose if e.get("age_s") is not None and e["age_s"] <= hl.RECENT_S]
        out.append(HLTH003.finding(f"{len(loose)} kernel event(s) naming no GPU"
                                   + (f", {len(rec)} in the last hour" if rec else ""),
                                   "\n".join(e["line"] for e in loose[-5:]), events=loose[-10:]))
    if h.get("dmesg") == "denied" and used:
        out.append(HLTH006.finding("dmesg is not readable without privileges: recent GPU resets unknown"))
    bad = [f for f in out if f.id == "HLTH001"]
    if bad:
        patch = gpuinfo.exclusion(inventory or gpus, list(used.values()), [{"index": f.evidence["gpu"]} for f in bad],
                          env or {})
        for f in bad:
            f.evidence["env"] = patch
            if patch is None:
                f.playbook = None
    fw = {bdf: (per.get(bdf) or {}).get("firmware") for bdf in used}
    return with_all_good(out, HLTH000, f"{len(used)} AMD GPU(s): no errors, resets or hangs" if used else
                         "No AMD GPU to examine", firmware=fw, dmesg=h.get("dmesg"))


@check(AREA, order=48)
def gpu_health(ctx: Context) -> list[Finding]:
    gpus = [g for g in ctx.used_gpus() if g.get("vendor") == "amd"]
    if not gpus:
        return [HLTH000.finding("No AMD GPU to examine")]
    return judge(ctx.health(), gpus, ctx.system().get("gpus") or [], ctx.env)
