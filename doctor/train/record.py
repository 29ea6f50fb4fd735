"""What ``train`` leaves behind: one :class:`Attempt` per launch, and the run directory's ``run.json``
(schema ``rocm-doctor.run/1``), ``summary.md`` and ``loss.png``."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "rocm-doctor.run/1"


@dataclass
class Attempt:
    n: int
    config: str
    command: list[str]
    playbooks: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    resumed_from: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    category: str | None = None
    summary: str = ""
    evidence: list[str] = field(default_factory=list)
    steps: dict[str, int | None] = field(default_factory=lambda: {"start": None, "end": None, "total": None})
    duration_s: float = 0.0
    early_stop: str | None = None
    gpu_event: str | None = None
    gpu_peak_mib: dict[str, float] = field(default_factory=dict)  # per GPU, from the samples
    hang: dict[str, Any] | None = None          # the watchdog's verdict and where its evidence is
    gpu_fault: dict[str, Any] | None = None     # GPUs that faulted during the attempt, and the exclusion
    host_oom: str = ""                          # the OOM killer's evidence when host RAM ran out
    throughput: dict[str, Any] = field(default_factory=dict)  # medians, warm-up, drops (Throughput.summary)
    log: str = ""
    losses: list[list[float]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    step_base: int = 0          # global step the attempt starts from (the resumed checkpoint's)
    logging_steps: int = 0      # from the config; 0 when a ratio or unknown
    hf_logs: int = 0            # HF log dicts seen on stdout (counts logging steps)
    classification: Any = None  # doctor.classify.Classification of a failed attempt's log
    rates: list[list[float]] = field(default_factory=list)  # [step, steps/s] between trainer-log records

    def public(self) -> dict[str, Any]:
        """The attempt as ``run.json`` records it (the working state left out)."""
        d = asdict(self)
        for k in ("losses", "records", "step_base", "logging_steps", "hf_logs", "classification", "rates"):
            d.pop(k)
        return d


def run_record(*, outcome: str, config: Path, run_dir: Path, stop_reason: str, interrupted: bool,
               preflight: dict[str, Any] | None, attempts: list[Attempt]) -> dict[str, Any]:
    """The content of ``run.json``."""
    return {"schema": SCHEMA, "outcome": outcome, "config": str(config), "run_dir": str(run_dir),
            "stop_reason": stop_reason if outcome != "succeeded" else "", "interrupted": interrupted,
            "preflight": preflight or None, "attempts": [a.public() for a in attempts],
            "final_step": next((a.steps["end"] for a in reversed(attempts) if a.steps["end"] is not None), None)}


def write_run(run_dir: Path, run: dict[str, Any], attempts: list[Attempt]) -> None:
    (run_dir / "run.json").write_text(json.dumps(run, indent=2), encoding="utf-8")
    (run_dir / "summary.md").write_text(summary_markdown(run), encoding="utf-8")
    plot_losses(attempts, run_dir / "loss.png")


def save_trainer_log(run_dir: Path, att: Attempt) -> None:
    """A copy of what this attempt appended to trainer_log.jsonl (overwrite_output_dir deletes the original)."""
    if att.records:
        (run_dir / f"attempt-{att.n}.trainer_log.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in att.records), encoding="utf-8")


def summary_markdown(run: dict[str, Any]) -> str:
    lines = [f"# rocm-doctor train: {run['outcome']}", "", f"Config: `{run['config']}`", ""]
    if run.get("stop_reason"):
        lines += [f"Stopped: {run['stop_reason']}", ""]
    lines += ["| attempt | exit | category | playbooks | resumed from | steps | duration | steps/s | tokens/s | "
              "warm-up | peak VRAM |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for a in run["attempts"]:
        st = a["steps"]
        steps = f"{st.get('start')}–{st.get('end')} / {st.get('total')}" if st.get("end") is not None else "—"
        tp = a.get("throughput") or {}
        peak = max((a.get("gpu_peak_mib") or {}).values(), default=None)
        lines.append(f"| {a['n']} | {a['exit_code']}{' ' + a['signal'] if a.get('signal') else ''} | "
                     f"{a.get('category') or ('ok' if a['exit_code'] == 0 else '')} | {', '.join(a['playbooks']) or '—'} "
                     f"| {Path(a['resumed_from']).name if a.get('resumed_from') else '—'} | {steps} | {a['duration_s']} s "
                     f"| {tp.get('median_steps_per_s') or '—'} | {tp.get('median_tokens_per_s') or '—'}"
                     f"{'*' if tp.get('tokens_source', '') and str(tp.get('tokens_source')).startswith('estimated') else ''} "
                     f"| {str(tp['warmup_s']) + ' s' if tp.get('warmup_s') is not None else '—'} "
                     f"| {f'{peak:.0f} MiB' if peak else '—'} |")
    if any(str((a.get("throughput") or {}).get("tokens_source") or "").startswith("estimated") for a in run["attempts"]):
        lines += ["", "\\* tokens/s estimated from batch x cutoff_len (an upper bound); set "
                  "`include_num_input_tokens_seen: true` for LLaMA-Factory's own figure."]
    for a in run["attempts"]:
        lines += ["", f"**Attempt {a['n']}**" + (f" ({', '.join(a['playbooks'])})" if a["playbooks"] else "") + ":"]
        lines += [f"- {c}" for c in a.get("changes", [])]
        if a.get("early_stop") or a.get("summary"):
            lines.append(f"- stopped: {a.get('early_stop') or a.get('summary')}")
        for ev in a.get("evidence", [])[:2]:
            lines.append(f"  > `{ev[:200]}`")
        if a.get("gpu_event"):
            lines.append(f"- GPU balance: {a['gpu_event']}")
        if a.get("hang"):
            lines.append(f"- hang ({a['hang'].get('suspect')}): evidence in `{Path(a['hang']['evidence']).name}`")
        for g in (a.get("gpu_fault") or {}).get("gpus") or []:
            lines.append(f"- GPU fault: GPU {g['index']} ({g['bdf']}): {'; '.join(g['why'])}")
        for ev in (a.get("throughput") or {}).get("events") or []:
            lines.append(f"- throughput dropped {ev['drop_pct']}% at step {ev['step']}"
                         + (f" ({ev['gpu']})" if ev.get("gpu") else ""))
    return "\n".join(lines) + "\n"


def preload_plotting() -> None:
    """Import matplotlib (about a second) while the first attempt runs, so writing loss.png at the end costs
    the drawing only; called in a daemon thread, quietly without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
    except Exception:  # noqa: S110 - plotting is optional
        pass


def plot_losses(attempts: list[Attempt], path: Path) -> bool:
    """Loss curves of all attempts on one chart; quietly skipped without matplotlib."""
    if not any(a.losses for a in attempts):
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        return False
    rates = any(a.rates for a in attempts)
    fig, axes = plt.subplots(2 if rates else 1, 1, figsize=(7, 6 if rates else 4), sharex=True, squeeze=False)
    ax = axes[0][0]
    for a in attempts:
        if a.losses:
            xs, ys = zip(*[(s, v) for s, v in a.losses if math.isfinite(v)], strict=False) or ((), ())
            ax.plot(xs, ys, marker=".", label=f"attempt {a.n}" + (f" ({', '.join(a.playbooks)})" if a.playbooks else ""))
    ax.set_ylabel("loss")
    ax.set_title("rocm-doctor train")
    ax.legend()
    if rates:
        tx = axes[1][0]
        for a in attempts:
            if a.rates:
                tx.plot([s for s, _ in a.rates], [r for _, r in a.rates], marker=".", label=f"attempt {a.n}")
        tx.set_ylabel("steps/s")
        tx.set_xlabel("step")
    else:
        ax.set_xlabel("step")
    fig.subplots_adjust(left=0.11, right=0.97, top=0.93, bottom=0.09, hspace=0.08)  # tight_layout: +0.2 s
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def default_run_dir() -> Path:
    """``.rocm-doctor/runs/<timestamp>`` under the working directory, never one another run uses."""
    base = Path.cwd() / ".rocm-doctor" / "runs" / time.strftime("%Y%m%d-%H%M%S")
    d, n = base, 1
    while d.exists():
        n += 1
        d = base.with_name(f"{base.name}-{n}")
    return d
