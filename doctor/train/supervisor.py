"""``rocm-doctor train``: supervise ``llamafactory-cli train``, classify a failure, patch, resume.

One attempt = one launch of the training command on ``attempt-N.yaml`` (a copy; the user's file is
never written) in its own process group (:mod:`doctor.train.process`), its output streamed and teed to
``attempt-N.log``. While it runs, ``output_dir/trainer_log.jsonl`` and the HF log lines on stdout are
watched for NaN/Inf or a sustained loss blow-up (the run is stopped within a logging step or two), and
the GPUs are sampled for "one GPU full, others idle" and their clocks/power/temperature
(:mod:`doctor.train.watch`). A hang watchdog stops an attempt that made no progress (no trainer-log record,
HF log line or progress-bar step) for ``--stall-timeout`` while its processes and GPUs were idle, after
saving the evidence (:mod:`doctor.train.hang`); a busy silence is warm-up until 4x the timeout. Throughput
(steps/s, samples/s, tokens/s) is followed live and a drop after warm-up is reported. After a failure the
health of the GPUs the attempt used is compared with a snapshot taken at launch (:mod:`doctor.train.faults`).

After a failure the log tail is classified by :mod:`doctor.classify` (the same code as ``explain``) and
the pure retry policy (:mod:`doctor.train.policy`) decides the next attempt: which playbook, and which
checkpoint it resumes from. The run directory is written by :mod:`doctor.train.record`.
"""

from __future__ import annotations

import math
import os
import shlex
import signal
import threading
import time
from pathlib import Path
from typing import Any

import playbooks as pbs
from doctor.checkpoints import checkpoints, step_of
from doctor.classify import classify_file
from doctor.config import dump_config, load_config
from doctor.context import read_model_config, resolve_path
from doctor.findings import Severity
from doctor.gpuinfo import visible_gpus
from doctor.preflight import run_check
from doctor.redact import mask
from doctor.render import unified_diff
from doctor.train import faults, hang, policy
from doctor.train.process import Child, Interrupted, SignalTrap, command_for
from doctor.train.record import Attempt, preload_plotting, run_record, save_trainer_log, write_run
from doctor.train.watch import (
    Activity,
    DivergenceWatch,
    GpuSampler,
    Progress,
    Throughput,
    TrainerLogTail,
    fmt_s,
    judge_stall,
    nan_or_none,
    parse_hf_log_line,
    stall_limit,
)

STATUS_EVERY = 60.0     # seconds between status lines while no step arrives
ACTIVITY_EVERY = 1.0    # seconds between CPU readings of the process tree


class Supervisor:
    def __init__(self, config: Path, *, run_dir: Path, max_attempts: int = 3, preflight: bool = True,
                 launcher: str | None = None, extra: list[str] | None = None, quiet: bool = False,
                 gpu_interval: float = 15.0, grace: float = 15.0, console: Any = None,
                 env: dict[str, str] | None = None, cwd: Path | None = None, stall_timeout: float | None = None,
                 allow: set[str] | None = None, status_every: float = STATUS_EVERY, no_cache: bool = False) -> None:
        self.cwd = (cwd or Path.cwd()).resolve()  # LLaMA-Factory resolves relative paths from here
        self.config = config
        self.run_dir = run_dir.resolve()
        self.max_attempts = max_attempts
        self.preflight = preflight
        self.no_cache = no_cache  # the preflight reuses kept probe results (the warm check) unless told not to
        self.launcher = launcher
        self.extra = extra or []
        self.quiet = quiet
        self.gpu_interval = gpu_interval
        self.grace = grace
        self.env = dict(os.environ if env is None else env)
        self.stall_timeout = stall_timeout   # None: max(30 min, 10x the slowest step); 0: off
        self.allow = set(allow or ())        # ask-first playbooks the user allowed (--apply)
        self.status_every = status_every
        self.con = console
        self.attempts: list[Attempt] = []
        self.preflight_info: dict[str, Any] = {}
        self.applied: list[str] = []
        self.launch_env: dict[str, str] = {}
        self.outcome = "failed"
        self.stop_reason = ""
        self.child: Child | None = None
        self.trap = SignalTrap()
        self._lock = threading.Lock()
        self._prev_cfg: tuple[str, str] | None = None  # (file name, YAML) of the last attempt, for the diff

    # ---------------------------------------------------------- helpers
    def say(self, msg: str) -> None:
        if self.con is not None:
            self.con.print(msg)

    def command_for(self, cfg_path: Path) -> list[str]:
        return command_for(cfg_path, self.launcher, self.extra)

    def output_dir(self, cm: Any) -> Path | None:
        od = cm.get("output_dir")
        return resolve_path(od, self.cwd) if isinstance(od, str) else None

    # ---------------------------------------------------------- preflight
    def run_preflight(self, cm: Any) -> tuple[bool, list[str], list[str]]:
        """Check the config; apply the safe playbooks for error findings. False = do not launch."""
        self.say("[bold]Preflight[/] (rocm-doctor check) ...")
        # a warm stack worker left by `check` serves this preflight; none is started (training wants the memory)
        checked = run_check(str(self.config), timeout=120.0, env=self.env, no_cache=self.no_cache, warm_start=False)
        findings = checked.findings
        res = pbs.fix_findings(cm, findings, severities=("error",), model_config=checked.ctx.model_config(),
                               env=self.env)
        self.preflight_info = {"findings": [f"{f.id}:{f.severity.value}" for f in findings],
                               "applied": res.applied, "remaining": [f.to_dict() for f in res.remaining],
                               "stopped": res.stopped, "pending": res.pending}
        names = [a["playbook"] for a in res.applied]
        changes = [c for a in res.applied for c in a["changes"]]
        self.launch_env.update(res.env)
        for a in res.applied:
            self.say(f"  [green]✓[/] {a['playbook']} ({', '.join(a['findings'])}): {'; '.join(a['changes'])}")
        blocking = [f for f in res.remaining if f.severity is Severity.ERROR]
        for s in res.stopped:
            self.say(f"  [red]✗[/] {s['playbook']}: {s['reason']}")
        for p in res.pending:
            self.say(f"  [yellow]?[/] {p['playbook']} would answer {', '.join(p['findings'])} but asks first: "
                     f"`rocm-doctor fix {self.config} --apply {p['playbook']}`, then train the fixed copy")
        for f in blocking:
            self.say(f"  [red]✗[/] {f.id} {f.title}" + (f" — {f.hint}" if f.hint else ""))
        if blocking or res.stopped:
            self.stop_reason = ("preflight found errors no playbook fixes: "
                                + ", ".join(sorted({f.id for f in blocking} | {s['playbook'] for s in res.stopped}))
                                + " (fix them, or rerun with --no-preflight)")
            return False, names, changes
        return True, names, changes

    # ---------------------------------------------------------- main loop
    def run(self) -> int:
        cm, _ = load_config(self.config)   # round-trip map; InputError for bad input
        self.run_dir.mkdir(parents=True, exist_ok=True)
        threading.Thread(target=preload_plotting, daemon=True).start()
        names: list[str] = []
        changes: list[str] = []
        with self.trap:
            try:
                if self.preflight:
                    ok, names, changes = self.run_preflight(cm)
                    self.applied += names
                    if not ok:
                        self.say(f"[red]Not launched:[/] {self.stop_reason}")
                        return self.finish()
                resumed: str | None = None
                for n in range(1, self.max_attempts + 1):
                    att = self.launch(n, cm, names, changes, resumed)
                    if att.exit_code == 0 and not att.early_stop:
                        self.outcome = "succeeded"
                        self.say(f"[green bold]Training succeeded[/] on attempt {n}.")
                        return self.finish()
                    if n == self.max_attempts:
                        self.stop_reason = f"--max-attempts {self.max_attempts} reached"
                        break
                    decision = self.decide(att, cm)
                    if isinstance(decision, policy.Stop):
                        self.stop_reason = decision.reason
                        break
                    cm, names, changes, resumed = (decision.config, decision.playbooks, decision.changes,
                                                   decision.resume_from)
                self.say(f"[red bold]Training failed:[/] {self.stop_reason}")
                return self.finish()
            except Interrupted as e:
                self.stop_reason = f"interrupted by {signal.Signals(e.signum).name}"
                self.say(f"[yellow]{self.stop_reason}[/]: the training process group was stopped.")
                self.finish(interrupted=True)
                return 130 if e.signum == signal.SIGINT else 128 + e.signum

    def decide(self, att: Attempt, cm: Any) -> policy.Retry | policy.Stop:
        """Ask the retry policy what to do after ``att``; carry out the bookkeeping of a retry."""
        cat = att.category or "unknown"
        od = self.output_dir(cm)
        fault = att.gpu_fault or {}
        failure = policy.Failure(category=cat, summary=att.summary,
                                 classification=att.classification or self._classification(att),
                                 diverged_at=att.steps.get("diverged_at") if att.early_stop and not att.hang else None,
                                 resumed=att.resumed_from is not None, faulty=tuple(fault.get("gpus") or ()),
                                 exclude_env=fault.get("exclude_env"), allowed=frozenset(self.allow),
                                 suspect=(att.hang or {}).get("suspect", ""),
                                 bf16_ok="BF16000:ok" in (self.preflight_info.get("findings") or []),
                                 host_oom=att.host_oom)
        decision = policy.next_attempt(
            failure, cm, history=[a.category for a in self.attempts if a.category],
            applied=self.applied, playbooks=pbs.for_category(cat, self.env),
            checkpoints=checkpoints(od) if od is not None else None,
            model_config=read_model_config(cm.get("model_name_or_path"), self.cwd))
        if isinstance(decision, policy.Retry):
            if decision.note:
                self.say(decision.note)
            if decision.playbooks and decision.playbooks[0] != "keep-progress":
                shown = decision.changes + [f"env {k}={v}" for k, v in decision.env.items()]
                self.say(f"[cyan]→ {decision.playbooks[0]}[/]: {'; '.join(shown)}")
            self.applied += decision.playbooks
            self.launch_env.update(decision.env)
        return decision

    def _classification(self, att: Attempt) -> Any:
        return classify_file(att.log, exit_code=att.exit_code, signal_name=att.signal)

    # ---------------------------------------------------------- one attempt
    def _write_attempt_config(self, n: int, cm: Any, names: list[str]) -> Path:
        """``attempt-N.yaml``, and the diff against the previous attempt's config on the console."""
        cfg_path = (self.run_dir / f"attempt-{n}.yaml").resolve()
        body = dump_config(cm)
        cfg_path.write_text(f"# rocm-doctor train, attempt {n}, from {self.config}"
                            + (f"; playbooks: {', '.join(names)}" if names else "") + "\n" + body, encoding="utf-8")
        prev = self._prev_cfg
        if prev is not None and prev[1] != body:
            from rich.markup import escape

            for line in mask(unified_diff(prev[1], body, prev[0], cfg_path.name)).splitlines():
                colour = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
                self.say(f"[{colour}]{escape(line)}[/]")
        self._prev_cfg = (cfg_path.name, body)
        return cfg_path

    def _new_attempt(self, n: int, cm: Any, cfg_path: Path, names: list[str], changes: list[str],
                     resumed: str | None) -> tuple[Attempt, list[str]]:
        cmd = self.command_for(cfg_path)
        shown_cmd = [mask(c) for c in cmd]  # `-- hf_hub_token=...` must not reach the console or run.json
        att = Attempt(n=n, config=str(cfg_path), command=shown_cmd, playbooks=names, changes=changes,
                      env=dict(self.launch_env), resumed_from=resumed, log=str(self.run_dir / f"attempt-{n}.log"))
        att.step_base = step_of(resumed) if resumed else 0
        ls = cm.get("logging_steps", 500)
        att.logging_steps = int(ls) if isinstance(ls, int) or (isinstance(ls, float) and ls >= 1) else 0
        self.attempts.append(att)
        self.say(f"[bold]Attempt {n}[/]: {' '.join(shlex.quote(c) for c in shown_cmd)}"
                 + (f"  (resuming from {Path(resumed).name})" if resumed else ""))
        return att, cmd

    def launch(self, n: int, cm: Any, names: list[str], changes: list[str], resumed: str | None) -> Attempt:
        cfg_path = self._write_attempt_config(n, cm, names)
        att, cmd = self._new_attempt(n, cm, cfg_path, names, changes, resumed)
        self.trap.check()
        od = self.output_dir(cm)
        env = dict(self.env)
        env.update(self.launch_env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        watch = DivergenceWatch()
        tail = TrainerLogTail(od / "trainer_log.jsonl" if od else None)
        baseline = faults.snapshot(env)
        t0 = time.monotonic()
        progress = Progress(t0)
        meter = self._throughput(cm, baseline, env)
        self.child = Child(cmd, env=env, cwd=self.cwd, log_path=Path(att.log), echo=not self.quiet,
                           on_line=lambda raw: self._on_line(raw, watch, att, progress))
        sampler = GpuSampler(self.gpu_interval, env)
        sampler.start()
        try:
            self._monitor(att, watch, tail, sampler, t0, progress, meter, env)
        finally:
            sampler.stop_event.set()
            att.gpu_event = att.gpu_event or sampler.event
            att.gpu_peak_mib = sampler.peaks()
            att.throughput = meter.summary()
            att.rates = meter.series
            if self.child.poll() is None:
                self.child.stop(signal.SIGTERM, self.grace)
            self.child.close()
        self._conclude(att, time.monotonic() - t0)
        if att.exit_code != 0 or att.hang:
            after = faults.snapshot(env)
            self._gpu_fault(att, baseline, after, env)
            if att.exit_code != 0 and att.category == "killed_by_signal":
                self._host_oom(att, baseline, after)
        save_trainer_log(self.run_dir, att)
        return att

    def _host_oom(self, att: Attempt, baseline: dict[str, Any], after: dict[str, Any]) -> None:
        """A kill the OOM killer recorded between the snapshots: host RAM ran out (the policy stops on it)."""
        att.host_oom = faults.host_oom(baseline.get("oom") or {}, after.get("oom") or {})
        if att.host_oom:
            att.summary = f"host RAM ran out: {att.host_oom}"
            self.say(f"  [red]host RAM ran out[/]: {att.host_oom}")

    def _throughput(self, cm: Any, baseline: dict[str, Any], env: dict[str, str]) -> Throughput:
        """A meter knowing the samples per optimizer step (batch x accumulation x ranks) and the tokens per
        sample at most (cutoff_len), for the estimate when the trainer log carries no ``throughput``."""
        def num(v: Any, default: int) -> int:
            return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else default

        ranks = len(visible_gpus(env, baseline.get("gpus") or [])) or 1
        nproc = str(env.get("NPROC_PER_NODE") or "")
        if nproc.isdigit():
            nodes = str(env.get("NNODES") or "1")
            ranks = int(nproc) * (int(nodes) if nodes.isdigit() else 1)
        per_step = (num(cm.get("per_device_train_batch_size"), 1) * num(cm.get("gradient_accumulation_steps"), 1)
                    * ranks)
        return Throughput(samples_per_step=per_step, tokens_per_sample=num(cm.get("cutoff_len"), 2048))

    def _gpu_fault(self, att: Attempt, baseline: dict[str, Any], after: dict[str, Any], env: dict[str, str]) -> None:
        """Compare the GPUs' health with the launch snapshot; a GPU that faulted makes this a gpu_hw_fault."""
        inv = after.get("gpus") or baseline.get("gpus") or []
        used = visible_gpus(env, inv)
        lines = att.evidence + _tail_lines(Path(att.log), 400)
        bad = faults.faulty(baseline, after, lines, used)
        if not bad:
            return
        att.gpu_fault = {"gpus": bad, "exclude_env": faults.exclusion(inv, used, bad, env)}
        names = ", ".join(f"GPU {g['index']} ({g['bdf']})" for g in bad)
        if att.category != "gpu_hw_fault":
            att.summary = f"{names} faulted during the attempt ({'; '.join(bad[0]['why'])})" + (
                f"; the log said {att.category}" if att.category else "")
            att.category = "gpu_hw_fault"
        self.say(f"[red]GPU fault:[/] {names}: " + "; ".join(w for g in bad for w in g["why"]))

    def _monitor(self, att: Attempt, watch: DivergenceWatch, tail: TrainerLogTail, sampler: GpuSampler,
                 t0: float, progress: Progress, meter: Throughput, env: dict[str, str]) -> None:
        """Until the child exits: read the trainer log, stop a diverging or hung run, report GPU imbalance
        and throughput drops, and forward a Ctrl-C to the training group."""
        assert self.child is not None
        activity = Activity(self.child.proc.pid)
        next_activity = next_status = 0.0
        while True:
            if self.trap.signum is not None:
                self.child.stop(signal.SIGINT, self.grace)
                att.exit_code = self.child.returncode
                att.duration_s = round(time.monotonic() - t0, 2)
                self.trap.check()
            self._feed_records(tail.read_new(), watch, att, progress, meter, sampler)
            now = time.monotonic()
            if now >= next_activity:
                next_activity = now + ACTIVITY_EVERY
                cpu = activity.sample(now)
                limit = stall_limit(self.stall_timeout, progress)
                v = judge_stall(now - progress.last, limit, cpu, sampler.busy())
                if v.state in ("hang", "busy_cap") and self.child.poll() is None and not att.early_stop:
                    self._stop_hung(att, v.message, sampler, env, now - progress.last)
                elif v.state == "busy" and now >= next_status:
                    next_status = now + self.status_every
                    self.say(f"[yellow]⟳ attempt {att.n} · {v.message}[/] (stall timeout {fmt_s(limit)}, "
                             f"hard cap {fmt_s(4 * limit)})")
                elif now - progress.last >= self.status_every and now >= next_status:
                    next_status = now + self.status_every
                    since = (f"last step {fmt_s(now - progress.last_step_at)} ago" if progress.last_step_at
                             else f"no step yet after {fmt_s(now - t0)}")
                    self.say(f"[dim]⟳ attempt {att.n} · step {att.steps.get('end') or 0}/"
                             f"{att.steps.get('total') or '?'} · {since}[/]")
            if watch.diverged_at is not None and not att.early_stop:
                att.early_stop = watch.reason
                att.steps["diverged_at"] = watch.diverged_at
                att.steps["detected_at"] = watch.detected_at
                self.say(f"[red]Divergence:[/] {watch.reason}; stopping the run.")
                self.child.stop(signal.SIGTERM, self.grace)
            if sampler.event and not att.gpu_event:
                att.gpu_event = sampler.event
                self.say(f"[yellow]GPU balance:[/] {sampler.event}")
            if self.child.poll() is not None:
                break
            time.sleep(0.2)
        self.child.close()
        self._feed_records(tail.read_new(), watch, att, progress, meter, sampler)

    def _stop_hung(self, att: Attempt, message: str, sampler: GpuSampler, env: dict[str, str], quiet: float) -> None:
        """Save the hang evidence (process states, py-spy, GPUs, log tail, amdgpu dmesg), then stop the group."""
        assert self.child is not None
        self.say(f"[red]Hang:[/] {message}; saving evidence and stopping the run.")
        ev = hang.gather(self.child.proc.pid, log_tail=_tail_lines(Path(att.log), 50), gpus=sampler.last(),
                         env=env, reason=message)
        path = self.run_dir / f"attempt-{att.n}.hang.txt"
        hang.write(path, ev)
        att.hang = {"reason": message, "quiet_s": round(quiet, 1), "suspect": ev["suspect"], "evidence": str(path),
                    "processes": len(ev["processes"]), "py_spy": bool(ev["py_spy"])}
        att.early_stop = message
        self.child.stop(signal.SIGTERM, self.grace)

    def _conclude(self, att: Attempt, elapsed: float) -> None:
        """Exit code or signal, and for a failure its category from the log."""
        assert self.child is not None
        rc = self.child.returncode
        att.duration_s = round(elapsed, 2)
        if rc is not None and rc < 0:
            att.signal = signal.Signals(-rc).name
            att.exit_code = 128 - rc
        else:
            att.exit_code = rc
        if att.hang:
            att.category = "hang"
            att.summary = att.hang["reason"]
        elif att.early_stop:
            att.category = "nan_or_divergent_loss"
            att.summary = att.early_stop
        elif rc != 0:
            c = att.classification = self._classification(att)
            att.category, att.summary, att.evidence = c.category, c.summary, c.evidence
            self.say(f"[red]Attempt {att.n} failed[/] (exit {att.exit_code}{', ' + att.signal if att.signal else ''}): "
                     f"[bold]{c.category}[/] — {c.summary}")
            for ev in c.evidence[:2]:
                self.say(f"    [dim]{ev[:200]}[/]")

    def _on_line(self, raw: bytes, watch: DivergenceWatch, att: Attempt, progress: Progress) -> None:
        """A line of the child's output: progress-bar steps (the watchdog), NaN/Inf in HF's log dicts (the
        trainer log has the finite losses)."""
        if b"/" in raw and b"[" in raw:
            progress.line(raw.decode("utf-8", "replace"))
        if b"{'" not in raw:
            return
        for seg in raw.decode("utf-8", "replace").split("\r"):
            vals = parse_hf_log_line(seg)
            if not vals or "learning_rate" not in vals:
                continue  # the final {'train_runtime': ..., 'train_loss': ...} is not a step
            att.hf_logs += 1
            progress.tick(step=True)
            # the progress bar on these lines lags by a step; count logging steps instead
            step = att.step_base + att.hf_logs * att.logging_steps if att.logging_steps else att.steps.get("end")
            loss = vals.get("loss")
            with self._lock:
                watch.feed(step, loss if loss is not None and not math.isfinite(loss) else None, vals.get("grad_norm"))

    def _feed_records(self, records: list[dict[str, Any]], watch: DivergenceWatch, att: Attempt,
                      progress: Progress | None = None, meter: Throughput | None = None,
                      sampler: GpuSampler | None = None) -> None:
        for rec in records:
            step = rec.get("current_steps")
            att.records.append(rec)
            if progress is not None:
                progress.tick(step=True)
            if meter is not None and progress is not None:
                drop = meter.feed(rec, time.monotonic(), progress.started)
                if drop:
                    who = sampler.straggler() if sampler is not None else None
                    if who:
                        drop["gpu"] = who
                    self.say(f"[yellow]Throughput:[/] {drop['drop_pct']}% below the run's median at step "
                             f"{drop['step']} ({drop['steps_per_s']:.3g} vs {drop['median_steps_per_s']:.3g} steps/s)"
                             + (f"; {who}" if who else "") + ": throttling, a straggler or a slow kernel?")
            if "loss" not in rec:
                continue
            if att.steps["start"] is None:
                att.steps["start"] = step
            att.steps["end"], att.steps["total"] = step, rec.get("total_steps")
            loss = rec.get("loss")
            if isinstance(loss, (int, float)):
                att.losses.append([step, float(loss)])
            with self._lock:
                watch.feed(step, float(loss) if isinstance(loss, (int, float)) else nan_or_none(loss))
            shown = f"{loss:.4g}" if isinstance(loss, float) else loss
            rate = meter.status() if meter is not None else ""
            self.say(f"[dim]⟳ attempt {att.n} · step {step}/{rec.get('total_steps')} · loss {shown} · "
                     f"{rec.get('elapsed_time', '')} elapsed · ETA {rec.get('remaining_time', '?')}"
                     + (f" · {rate}" if rate else "") + "[/]")

    # ---------------------------------------------------------- results
    def finish(self, interrupted: bool = False) -> int:
        run = run_record(outcome=self.outcome, config=self.config, run_dir=self.run_dir, stop_reason=self.stop_reason,
                         interrupted=interrupted, preflight=self.preflight_info, attempts=self.attempts)
        write_run(self.run_dir, run, self.attempts)
        self.say(f"Run directory: {self.run_dir}")
        return 0 if self.outcome == "succeeded" else 1


def _tail_lines(path: Path, n: int) -> list[str]:
    """The last ``n`` lines of an attempt's log (reads at most the last 256 KiB)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            data = f.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").replace("\r", "\n").splitlines()
    return [ln for ln in lines if ln.strip()][-n:]
