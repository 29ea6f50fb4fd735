"""``rocm-doctor train``: supervise ``llamafactory-cli train``, classify a failure, patch, resume.

One attempt = one launch of the training command on ``attempt-N.yaml`` (a copy; the user's file is
never written) in its own process group (:mod:`doctor.train.process`), its output streamed and teed to
``attempt-N.log``. While it runs, ``output_dir/trainer_log.jsonl`` and the HF log lines on stdout are
watched for NaN/Inf or a sustained loss blow-up (the run is stopped within a logging step or two), and
the GPUs are sampled for "one GPU full, others idle" (:mod:`doctor.train.watch`).

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
from doctor.preflight import run_check
from doctor.redact import mask
from doctor.render import unified_diff
from doctor.train import policy
from doctor.train.process import Child, Interrupted, SignalTrap, command_for
from doctor.train.record import Attempt, run_record, save_trainer_log, write_run
from doctor.train.watch import DivergenceWatch, GpuSampler, TrainerLogTail, nan_or_none, parse_hf_log_line


class Supervisor:
    def __init__(self, config: Path, *, run_dir: Path, max_attempts: int = 3, preflight: bool = True,
                 launcher: str | None = None, extra: list[str] | None = None, quiet: bool = False,
                 gpu_interval: float = 15.0, grace: float = 15.0, console: Any = None,
                 env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.cwd = (cwd or Path.cwd()).resolve()  # LLaMA-Factory resolves relative paths from here
        self.config = config
        self.run_dir = run_dir.resolve()
        self.max_attempts = max_attempts
        self.preflight = preflight
        self.launcher = launcher
        self.extra = extra or []
        self.quiet = quiet
        self.gpu_interval = gpu_interval
        self.grace = grace
        self.env = dict(os.environ if env is None else env)
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
        checked = run_check(str(self.config), timeout=120.0, env=self.env)
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
        failure = policy.Failure(category=cat, summary=att.summary,
                                 classification=att.classification or self._classification(att),
                                 diverged_at=att.steps.get("diverged_at") if att.early_stop else None,
                                 resumed=att.resumed_from is not None)
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
        t0 = time.monotonic()
        self.child = Child(cmd, env=env, cwd=self.cwd, log_path=Path(att.log), echo=not self.quiet,
                           on_line=lambda raw: self._on_line(raw, watch, att))
        sampler = GpuSampler(self.gpu_interval)
        sampler.start()
        try:
            self._monitor(att, watch, tail, sampler, t0)
        finally:
            sampler.stop_event.set()
            att.gpu_event = att.gpu_event or sampler.event
            att.gpu_peak_mib = sampler.peaks()
            if self.child.poll() is None:
                self.child.stop(signal.SIGTERM, self.grace)
            self.child.close()
        self._conclude(att, time.monotonic() - t0)
        save_trainer_log(self.run_dir, att)
        return att

    def _monitor(self, att: Attempt, watch: DivergenceWatch, tail: TrainerLogTail, sampler: GpuSampler,
                 t0: float) -> None:
        """Until the child exits: read the trainer log, stop a diverging run, report GPU imbalance, and
        forward a Ctrl-C to the training group."""
        assert self.child is not None
        while True:
            if self.trap.signum is not None:
                self.child.stop(signal.SIGINT, self.grace)
                att.exit_code = self.child.returncode
                att.duration_s = round(time.monotonic() - t0, 2)
                self.trap.check()
            self._feed_records(tail.read_new(), watch, att)
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
        self._feed_records(tail.read_new(), watch, att)

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
        if att.early_stop:
            att.category = "nan_or_divergent_loss"
            att.summary = att.early_stop
        elif rc != 0:
            c = att.classification = self._classification(att)
            att.category, att.summary, att.evidence = c.category, c.summary, c.evidence
            self.say(f"[red]Attempt {att.n} failed[/] (exit {att.exit_code}{', ' + att.signal if att.signal else ''}): "
                     f"[bold]{c.category}[/] — {c.summary}")
            for ev in c.evidence[:2]:
                self.say(f"    [dim]{ev[:200]}[/]")

    def _on_line(self, raw: bytes, watch: DivergenceWatch, att: Attempt) -> None:
        """A line of the child's output: NaN/Inf in HF's log dicts (the trainer log has the finite losses)."""
        if b"{'" not in raw:
            return
        for seg in raw.decode("utf-8", "replace").split("\r"):
            vals = parse_hf_log_line(seg)
            if not vals or "learning_rate" not in vals:
                continue  # the final {'train_runtime': ..., 'train_loss': ...} is not a step
            att.hf_logs += 1
            # the progress bar on these lines lags by a step; count logging steps instead
            step = att.step_base + att.hf_logs * att.logging_steps if att.logging_steps else att.steps.get("end")
            loss = vals.get("loss")
            with self._lock:
                watch.feed(step, loss if loss is not None and not math.isfinite(loss) else None, vals.get("grad_norm"))

    def _feed_records(self, records: list[dict[str, Any]], watch: DivergenceWatch, att: Attempt) -> None:
        for rec in records:
            step = rec.get("current_steps")
            att.records.append(rec)
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
            self.say(f"[dim]⟳ attempt {att.n} · step {step}/{rec.get('total_steps')} · loss {shown} · "
                     f"{rec.get('elapsed_time', '')} elapsed · ETA {rec.get('remaining_time', '?')}[/]")

    # ---------------------------------------------------------- results
    def finish(self, interrupted: bool = False) -> int:
        run = run_record(outcome=self.outcome, config=self.config, run_dir=self.run_dir, stop_reason=self.stop_reason,
                         interrupted=interrupted, preflight=self.preflight_info, attempts=self.attempts)
        write_run(self.run_dir, run, self.attempts)
        self.say(f"Run directory: {self.run_dir}")
        return 0 if self.outcome == "succeeded" else 1
