"""``rocm-doctor train``: supervise ``llamafactory-cli train``, classify a failure, patch, resume.

One attempt = one launch of the training command on ``attempt-N.yaml`` (a copy; the user's file is
never written) in its own process group, its output streamed and teed to ``attempt-N.log``. While it
runs, ``output_dir/trainer_log.jsonl`` and the HF log lines on stdout are watched for NaN/Inf or a
sustained loss blow-up (the run is stopped within a logging step or two), and the GPUs are sampled
(amd-smi/rocm-smi/sysfs/NVML via :mod:`doctor.gpuinfo`, never torch) for "one GPU full, others idle".

After a failure the log tail is classified by :mod:`doctor.classify` (the same code as ``explain``),
the next playbook for the category is applied, and the next attempt resumes from the last *complete*
checkpoint (one with ``trainer_state.json``, which HF Trainer writes last) that predates any
divergence. ``overwrite_output_dir: true`` is removed on retries so LLaMA-Factory neither restarts
at step 0 nor deletes its trainer log; where resuming would be wrong (a changed learning rate that
the checkpoint's optimizer/scheduler state would undo, only poisoned checkpoints) the attempt starts
fresh and says so.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from doctor.config import InputError, _yaml, dump_config, load_config
from doctor.context import read_model_config, resolve_path
from doctor.outputs import CKPT, checkpoints, last_good_checkpoint
from doctor.secrets import mask

SCHEMA = "rocm-doctor.run/1"
HF_LOG = re.compile(r"\{'(?:loss|train_loss|grad_norm)'.*?\}")
HF_ITEM = re.compile(r"'(\w+)': '?([^,'}]*)'?")


# ------------------------------------------------------------------ divergence

@dataclass
class DivergenceWatch:
    """NaN/Inf, a loss collapsed to exactly 0 (HF's logging_nan_inf_filter hides NaN steps that way),
    a loss above ``factor``× its best, or a grad_norm stuck at exactly 0, for
    ``patience`` consecutive logs."""

    factor: float = 4.0
    margin: float = 3.0
    patience: int = 2
    best: float | None = None
    seen_positive: bool = False
    high_run: list[int] = field(default_factory=list)
    zero_grad_run: list[int] = field(default_factory=list)
    diverged_at: int | None = None
    detected_at: int | None = None
    reason: str = ""

    def feed(self, step: int | None, loss: float | None = None, grad_norm: float | None = None) -> bool:
        if self.diverged_at is not None:
            return True
        s = step if step is not None else -1
        for name, v in (("loss", loss), ("grad_norm", grad_norm)):
            if v is not None and not math.isfinite(v):
                return self._hit(s, s, f"{name} is {v} at step {s}")
        if grad_norm is not None:
            if grad_norm == 0.0:  # LoRA B starts at 0 but A still gets gradient: exactly 0 is never healthy
                self.zero_grad_run.append(s)
                if len(self.zero_grad_run) >= self.patience:
                    return self._hit(self.zero_grad_run[0], s, f"grad_norm stuck at 0 since step "
                                     f"{self.zero_grad_run[0]}: the weights saturated/overflowed, nothing is learned")
            else:
                self.zero_grad_run.clear()
        if loss is None:
            return False
        if loss == 0.0 and self.seen_positive:
            return self._hit(s, s, f"loss collapsed to 0.0 at step {s} (NaN steps are logged as 0 by "
                                   "logging_nan_inf_filter)")
        if loss > 0:
            self.seen_positive = True
        if self.best is not None and loss > max(self.best * self.factor, self.best + self.margin):
            self.high_run.append(s)
            if len(self.high_run) >= self.patience:
                return self._hit(self.high_run[0], s, f"loss {loss:.4g} at step {s} is above "
                                 f"{self.factor:g}x its best {self.best:.4g} for {self.patience} logs")
            return False
        self.high_run.clear()
        self.best = loss if self.best is None else min(self.best, loss)
        return False

    def _hit(self, first: int, now: int, reason: str) -> bool:
        self.diverged_at, self.detected_at, self.reason = first, now, reason
        return True


def parse_hf_log_line(line: str) -> dict[str, float] | None:
    """``{'loss': '11.76', 'grad_norm': 'nan', ...}`` as HF Trainer prints it (values quoted in
    transformers 5); the numeric values of the last such dict on the line."""
    found = list(HF_LOG.finditer(line))
    if not found:
        return None
    vals: dict[str, float] = {}
    for k, v in HF_ITEM.findall(found[-1].group(0)):
        try:
            vals[k] = float(v)
        except ValueError:
            continue
    return vals


# ------------------------------------------------------------------ GPU balance

def judge_balance(samples: list[list[Any]], full: float = 0.8, idle: float = 0.1, sustained: int = 3) -> str | None:
    """"One GPU full, the others idle" for ``sustained`` consecutive samples (GPU objects of gpuinfo)."""
    run = 0
    msg = None
    for gpus in samples:
        fr = [(g.index, (g.vram_used_mib or 0) / g.vram_total_mib) for g in gpus if g.vram_total_mib]
        if len(fr) >= 2 and max(f for _, f in fr) >= full and sum(1 for _, f in fr if f <= idle) == len(fr) - 1:
            run += 1
            busy = max(fr, key=lambda x: x[1])
            msg = (f"GPU {busy[0]} is {busy[1]:.0%} full while the other {len(fr) - 1} are idle: the job runs on one "
                   "GPU (device_map/model parallel, or torchrun not used).")
            if run >= sustained:
                return msg
        else:
            run = 0
    return None


class GpuSampler(threading.Thread):
    def __init__(self, interval: float) -> None:
        super().__init__(daemon=True)
        self.interval, self.samples, self.stop_event = interval, [], threading.Event()
        self.event: str | None = None

    def run(self) -> None:
        from doctor import gpuinfo

        while not self.stop_event.wait(self.interval):
            try:
                gpus, _ = gpuinfo.inventory()
            except Exception:
                return
            if not gpus:
                return  # nothing to watch on this machine
            self.samples.append(gpus)
            self.event = self.event or judge_balance(self.samples[-10:])

    def peaks(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for gpus in self.samples:
            for g in gpus:
                if g.vram_used_mib is not None:
                    out[str(g.index)] = max(out.get(str(g.index), 0.0), float(g.vram_used_mib))
        return out


# ------------------------------------------------------------------ one attempt

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
    log: str = ""
    losses: list[list[float]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    step_base: int = 0          # global step the attempt starts from (the resumed checkpoint's)
    logging_steps: int = 0      # from the config; 0 when a ratio or unknown
    classification: Any = None  # doctor.classify.Classification of a failed attempt's log

    def public(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("losses", "records", "step_base", "logging_steps", "classification"):
            d.pop(k)
        return d


class Interrupted(Exception):
    def __init__(self, signum: int) -> None:
        self.signum = signum


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
        self.child: subprocess.Popen | None = None
        self._interrupt: int | None = None
        self._lock = threading.Lock()
        self._prev_cfg: tuple[str, str] | None = None  # (file name, YAML) of the last attempt, for the diff

    # ---------------------------------------------------------- helpers
    def say(self, msg: str) -> None:
        if self.con is not None:
            self.con.print(msg)

    def command_for(self, cfg_path: Path) -> list[str]:
        if self.launcher:
            parts = shlex.split(self.launcher)
            if any("{config}" in p for p in parts):
                return [p.replace("{config}", str(cfg_path)) for p in parts] + self.extra
            return parts + [str(cfg_path)] + self.extra
        exe = Path(sys.executable).with_name("llamafactory-cli")
        cli = str(exe) if exe.exists() else shutil.which("llamafactory-cli")
        if cli:
            return [cli, "train", str(cfg_path)] + self.extra
        import importlib.util

        if importlib.util.find_spec("llamafactory") is not None:  # installed without its console script
            return [sys.executable, "-c", "import sys; from llamafactory.cli import main; sys.exit(main())",
                    "train", str(cfg_path)] + self.extra
        raise InputError("llamafactory-cli not found (install llamafactory, or pass --launcher)")

    def output_dir(self, cm: Any) -> Path | None:
        od = cm.get("output_dir")
        return resolve_path(od, self.cwd) if isinstance(od, str) else None

    # ---------------------------------------------------------- preflight
    def run_preflight(self, cm: Any) -> tuple[bool, list[str], list[str]]:
        """Check the config; apply the safe playbooks for error findings. False = do not launch."""
        from doctor.cli import run_check
        from doctor.fixing import fix_findings

        self.say("[bold]Preflight[/] (rocm-doctor check) ...")
        ctx, findings = run_check(str(self.config), timeout=120.0, env=self.env)
        res = fix_findings(cm, findings, severities=("error",), model_config=ctx.model_config(), env=self.env)
        self.preflight_info = {"findings": [f"{f.id}:{f.severity.value}" for f in findings],
                               "applied": res.applied, "remaining": [f.to_dict() for f in res.remaining],
                               "stopped": res.stopped, "pending": res.pending}
        names = [a["playbook"] for a in res.applied]
        changes = [c for a in res.applied for c in a["changes"]]
        self.launch_env.update(res.env)
        for a in res.applied:
            self.say(f"  [green]✓[/] {a['playbook']} ({', '.join(a['findings'])}): {'; '.join(a['changes'])}")
        blocking = [f for f in res.remaining if f.severity.value == "error"]
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
        old_handlers = self._install_signals()
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
                nxt = self.next_config(att, cm)
                if nxt is None:
                    break
                cm, names, changes, resumed = nxt
            self.say(f"[red bold]Training failed:[/] {self.stop_reason}")
            return self.finish()
        except Interrupted as e:
            self.stop_reason = f"interrupted by {signal.Signals(e.signum).name}"
            self.say(f"[yellow]{self.stop_reason}[/]: the training process group was stopped.")
            self.finish(interrupted=True)
            return 130 if e.signum == signal.SIGINT else 128 + e.signum
        finally:
            self._restore_signals(old_handlers)

    def next_config(self, att: Attempt, cm: Any) -> tuple[Any, list[str], list[str], str | None] | None:
        """Pick the remedy for ``att``'s failure and build the next attempt's config (None = stop)."""
        import playbooks as pbs
        from doctor.classify import DETERMINISTIC

        cat = att.category or "unknown"
        new = _yaml().load(dump_config(cm))
        if att.resumed_from is not None:
            pbs.delete_key(new, "resume_from_checkpoint")  # ours, set for the previous attempt; chosen afresh below
        names: list[str] = []
        changes: list[str] = []
        resume_ok = True
        if cat == "killed_by_signal":
            if sum(1 for a in self.attempts if a.category == "killed_by_signal") > 1:
                self.stop_reason = "killed by a signal twice; not retrying again (check dmesg for the OOM killer)"
                return None
            self.say("Retrying once unchanged, resuming from the last checkpoint.")
        elif cat in DETERMINISTIC:
            self.stop_reason = f"{cat}: {att.summary} (a retry cannot fix this)"
            return None
        else:
            chosen = None
            cls = att.classification or self._classification(att)
            model_config = read_model_config(new.get("model_name_or_path"), self.cwd)
            for pb in pbs.for_category(cat, self.env):
                if not pb.auto or (pb.id in self.applied and not pb.repeatable):
                    continue
                trial = _yaml().load(dump_config(new))
                out = pbs.apply(pb, trial, pbs.PatchInput(classification=cls, model_config=model_config,
                                                          applied=list(self.applied)))
                if out.stop:
                    self.stop_reason = f"{pb.id}: {out.stop}"
                    return None
                if out.changed:
                    chosen, new = (pb, out), trial
                    break
            if chosen is None:
                self.stop_reason = (f"{cat}: no playbook applies" + (f" ({att.summary})" if att.summary else ""))
                return None
            pb, out = chosen
            names.append(pb.id)
            changes += out.changes
            self.launch_env.update(out.env)
            resume_ok = pb.resume
            self.say(f"[cyan]→ {pb.id}[/]: {'; '.join(out.changes + [f'env {k}={v}' for k, v in out.env.items()])}")
        self.applied += names
        # resume: the last complete checkpoint before any divergence
        od = self.output_dir(new)
        resumed = None
        if od is not None:
            before = att.steps.get("diverged_at") if att.early_stop else None
            ck = last_good_checkpoint(od, before) if resume_ok else None
            if ck is not None:
                new["resume_from_checkpoint"] = str(ck)
                resumed = str(ck)
                if new.get("overwrite_output_dir"):
                    pbs.delete_key(new, "overwrite_output_dir")
                    changes.append("overwrite_output_dir: removed (the retry resumes; it would restart at step 0)")
                    names.append("keep-progress")
                changes.append(f"resume_from_checkpoint: {ck.name}")
            elif checkpoints(od):
                # only poisoned (or, after lower-lr, stateful) checkpoints: start over, and keep LLaMA-Factory
                # from auto-resuming the last one
                pbs.set_key(new, "overwrite_output_dir", True)
                changes.append("overwrite_output_dir: true (start fresh: "
                               + ("checkpoints after the divergence hold NaN weights)" if resume_ok else
                                  "resuming would restore the old optimizer/scheduler state)"))
        return new, names, changes, resumed

    def _classification(self, att: Attempt) -> Any:
        from doctor.classify import classify_file

        return classify_file(att.log, exit_code=att.exit_code, signal_name=att.signal)

    # ---------------------------------------------------------- launching
    def launch(self, n: int, cm: Any, names: list[str], changes: list[str], resumed: str | None) -> Attempt:
        cfg_path = (self.run_dir / f"attempt-{n}.yaml").resolve()
        body = dump_config(cm)
        cfg_path.write_text(f"# rocm-doctor train, attempt {n}, from {self.config}"
                            + (f"; playbooks: {', '.join(names)}" if names else "") + "\n" + body, encoding="utf-8")
        prev = self._prev_cfg
        if prev is not None and prev[1] != body:  # show what the playbooks changed, as a diff
            from rich.markup import escape

            from doctor.fixing import unified_diff

            for line in mask(unified_diff(prev[1], body, prev[0], cfg_path.name)).splitlines():
                colour = "green" if line.startswith("+") else "red" if line.startswith("-") else "dim"
                self.say(f"[{colour}]{escape(line)}[/]")
        self._prev_cfg = (cfg_path.name, body)
        cmd = self.command_for(cfg_path)
        log_path = self.run_dir / f"attempt-{n}.log"
        shown_cmd = [mask(c) for c in cmd]  # `-- hf_hub_token=...` must not reach the console or run.json
        att = Attempt(n=n, config=str(cfg_path), command=shown_cmd, playbooks=names, changes=changes,
                      env=dict(self.launch_env), resumed_from=resumed, log=str(log_path))
        if resumed:
            m = CKPT.match(Path(resumed).name)
            att.step_base = int(m.group(1)) if m else 0
        ls = cm.get("logging_steps", 500)
        att.logging_steps = int(ls) if isinstance(ls, int) or (isinstance(ls, float) and ls >= 1) else 0
        self.attempts.append(att)
        self.say(f"[bold]Attempt {n}[/]: {' '.join(shlex.quote(c) for c in shown_cmd)}"
                 + (f"  (resuming from {Path(resumed).name})" if resumed else ""))
        if self._interrupt is not None:
            raise Interrupted(self._interrupt)
        od = self.output_dir(cm)
        tlog = od / "trainer_log.jsonl" if od else None
        env = dict(self.env)
        env.update(self.launch_env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        watch = DivergenceWatch()
        t0 = time.monotonic()
        with open(log_path, "wb") as logf:
            self.child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True, cwd=self.cwd)
            reader = threading.Thread(target=self._pump, args=(self.child, logf, watch, att), daemon=True)
            reader.start()
            sampler = GpuSampler(self.gpu_interval)
            sampler.start()
            offset, ino = 0, None
            if tlog is not None and tlog.is_file():  # a log left by an earlier attempt or run: read only what is appended
                st = tlog.stat()
                offset, ino = st.st_size, st.st_ino
            try:
                while True:
                    if self._interrupt is not None:
                        self._stop_child(signal.SIGINT)
                        att.exit_code = self.child.returncode
                        att.duration_s = round(time.monotonic() - t0, 2)
                        raise Interrupted(self._interrupt)
                    if tlog is not None:
                        offset, ino = self._read_trainer_log(tlog, offset, ino, watch, att)
                    if watch.diverged_at is not None and not att.early_stop:
                        att.early_stop = watch.reason
                        att.steps["diverged_at"] = watch.diverged_at
                        att.steps["detected_at"] = watch.detected_at
                        self.say(f"[red]Divergence:[/] {watch.reason}; stopping the run.")
                        self._stop_child(signal.SIGTERM)
                    if sampler.event and not att.gpu_event:
                        att.gpu_event = sampler.event
                        self.say(f"[yellow]GPU balance:[/] {sampler.event}")
                    if self.child.poll() is not None:
                        break
                    time.sleep(0.2)
                reader.join(timeout=10)
                if tlog is not None:
                    offset, ino = self._read_trainer_log(tlog, offset, ino, watch, att)
            finally:
                sampler.stop_event.set()
                att.gpu_event = att.gpu_event or sampler.event
                att.gpu_peak_mib = sampler.peaks()
                if self.child.poll() is None:
                    self._stop_child(signal.SIGTERM)
        rc = self.child.returncode
        att.duration_s = round(time.monotonic() - t0, 2)
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
            self.say(f"[red]Attempt {n} failed[/] (exit {att.exit_code}{', ' + att.signal if att.signal else ''}): "
                     f"[bold]{c.category}[/] — {c.summary}")
            for ev in c.evidence[:2]:
                self.say(f"    [dim]{ev[:200]}[/]")
        self._save_trainer_log(att)
        return att

    def _pump(self, child: subprocess.Popen, logf: Any, watch: DivergenceWatch, att: Attempt) -> None:
        assert child.stdout is not None
        out = sys.stdout.buffer if not self.quiet else None
        n_logs = 0
        for raw in iter(child.stdout.readline, b""):
            logf.write(raw)
            logf.flush()
            if out is not None:
                try:
                    sys.stdout.flush()
                    out.write(raw)
                    out.flush()
                except (BrokenPipeError, ValueError):
                    out = None
            if b"{'" in raw:
                for seg in raw.decode("utf-8", "replace").split("\r"):
                    vals = parse_hf_log_line(seg)
                    if not vals or "learning_rate" not in vals:
                        continue  # the final {'train_runtime': ..., 'train_loss': ...} is not a step
                    n_logs += 1
                    # the progress bar on these lines lags by a step; count logging steps instead
                    step = att.step_base + n_logs * att.logging_steps if att.logging_steps else att.steps.get("end")
                    loss = vals.get("loss")
                    with self._lock:  # finite losses come from trainer_log.jsonl (exact step, full precision)
                        watch.feed(step, loss if loss is not None and not math.isfinite(loss) else None,
                                   vals.get("grad_norm"))

    def _read_trainer_log(self, path: Path, offset: int, ino: int | None, watch: DivergenceWatch,
                          att: Attempt) -> tuple[int, int | None]:
        try:
            st = path.stat()
        except OSError:
            return 0, None  # not there yet, or deleted by overwrite_output_dir: start over when it returns
        if ino is not None and (st.st_ino != ino or st.st_size < offset):
            offset = 0
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
        cut = data.rfind(b"\n") + 1
        for line in data[:cut].splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
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
                watch.feed(step, float(loss) if isinstance(loss, (int, float)) else _nan_or_none(loss))
            if self.con is not None:
                shown = f"{loss:.4g}" if isinstance(loss, float) else loss
                self.say(f"[dim]⟳ attempt {att.n} · step {step}/{rec.get('total_steps')} · loss {shown} · "
                         f"{rec.get('elapsed_time', '')} elapsed · ETA {rec.get('remaining_time', '?')}[/]")
        return offset + cut, st.st_ino

    def _save_trainer_log(self, att: Attempt) -> None:
        """A copy of what this attempt appended to trainer_log.jsonl (overwrite_output_dir deletes the original)."""
        if att.records:
            (self.run_dir / f"attempt-{att.n}.trainer_log.jsonl").write_text(
                "".join(json.dumps(r) + "\n" for r in att.records), encoding="utf-8")

    def _stop_child(self, first: int) -> None:
        """Signal the child's whole process group; escalate to SIGKILL; sweep stray descendants."""
        child = self.child
        if child is None or child.poll() is not None:
            return
        import psutil

        try:
            desc = psutil.Process(child.pid).children(recursive=True)
        except psutil.Error:
            desc = []
        for sig, wait in ((first, self.grace), (signal.SIGTERM, self.grace / 2), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(child.pid, sig)
            except ProcessLookupError:
                break
            try:
                child.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        for p in desc:
            try:
                p.kill()
            except psutil.Error:
                pass

    def _install_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        old = {}

        def handler(signum: int, frame: Any) -> None:
            self._interrupt = signum

        for s in (signal.SIGINT, signal.SIGTERM):
            old[s] = signal.signal(s, handler)
        return old

    def _restore_signals(self, old: dict[int, Any]) -> None:
        for s, h in old.items():
            signal.signal(s, h)

    # ---------------------------------------------------------- results
    def finish(self, interrupted: bool = False) -> int:
        run = {"schema": SCHEMA, "outcome": self.outcome, "config": str(self.config),
               "run_dir": str(self.run_dir), "stop_reason": self.stop_reason if self.outcome != "succeeded" else "",
               "interrupted": interrupted, "preflight": self.preflight_info or None,
               "attempts": [a.public() for a in self.attempts],
               "final_step": next((a.steps["end"] for a in reversed(self.attempts) if a.steps["end"] is not None),
                                  None)}
        (self.run_dir / "run.json").write_text(json.dumps(run, indent=2), encoding="utf-8")
        (self.run_dir / "summary.md").write_text(summary_markdown(run), encoding="utf-8")
        plot_losses(self.attempts, self.run_dir / "loss.png")
        self.say(f"Run directory: {self.run_dir}")
        return 0 if self.outcome == "succeeded" else 1


def _nan_or_none(v: Any) -> float | None:
    if isinstance(v, str) and v.strip().lower() in ("nan", "inf", "-inf", "infinity"):
        return float(v)
    return None


def summary_markdown(run: dict[str, Any]) -> str:
    lines = [f"# rocm-doctor train: {run['outcome']}", "", f"Config: `{run['config']}`", ""]
    if run.get("stop_reason"):
        lines += [f"Stopped: {run['stop_reason']}", ""]
    lines += ["| attempt | exit | category | playbooks | resumed from | steps | duration |",
              "|---|---|---|---|---|---|---|"]
    for a in run["attempts"]:
        st = a["steps"]
        steps = f"{st.get('start')}–{st.get('end')} / {st.get('total')}" if st.get("end") is not None else "—"
        lines.append(f"| {a['n']} | {a['exit_code']}{' ' + a['signal'] if a.get('signal') else ''} | "
                     f"{a.get('category') or ('ok' if a['exit_code'] == 0 else '')} | {', '.join(a['playbooks']) or '—'} "
                     f"| {Path(a['resumed_from']).name if a.get('resumed_from') else '—'} | {steps} | {a['duration_s']} s |")
    for a in run["attempts"]:
        lines += ["", f"**Attempt {a['n']}**" + (f" ({', '.join(a['playbooks'])})" if a["playbooks"] else "") + ":"]
        lines += [f"- {c}" for c in a.get("changes", [])]
        if a.get("early_stop") or a.get("summary"):
            lines.append(f"- stopped: {a.get('early_stop') or a.get('summary')}")
        for ev in a.get("evidence", [])[:2]:
            lines.append(f"  > `{ev[:200]}`")
        if a.get("gpu_event"):
            lines.append(f"- GPU balance: {a['gpu_event']}")
    return "\n".join(lines) + "\n"


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
    fig, ax = plt.subplots(figsize=(7, 4))
    for a in attempts:
        if a.losses:
            xs, ys = zip(*[(s, v) for s, v in a.losses if math.isfinite(v)], strict=False) or ((), ())
            ax.plot(xs, ys, marker=".", label=f"attempt {a.n}" + (f" ({', '.join(a.playbooks)})" if a.playbooks else ""))
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("rocm-doctor train")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
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


def cmd_train(args: Any) -> int:
    from doctor.cli import _console

    extra = list(getattr(args, "extra", None) or [])  # what followed `--` (split off in cli.main)
    if args.max_attempts < 1:
        raise InputError("--max-attempts must be at least 1")
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir()
    if run_dir.exists() and (run_dir / "run.json").exists():
        raise InputError(f"run directory {run_dir} already holds a run; choose another --run-dir")
    load_config(args.config)  # validate before anything else
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot use {run_dir} as the run directory: {e.strerror or e}") from None
    sup = Supervisor(Path(args.config), run_dir=run_dir, max_attempts=args.max_attempts,
                     preflight=not args.no_preflight, launcher=args.launcher, extra=extra,
                     quiet=args.quiet or args.json, gpu_interval=args.gpu_interval,
                     console=_console(stderr=args.json))
    sup.command_for(run_dir / "attempt-1.yaml")  # no llamafactory-cli and no --launcher: exit 2 before anything
    code = sup.run()
    if args.json:
        print((run_dir / "run.json").read_text(encoding="utf-8"))
    return code


def register(sub: Any) -> None:
    t = sub.add_parser("train", help="preflight, run llamafactory-cli train, fix and resume on failure",
                       description="Supervise `llamafactory-cli train CONFIG`: preflight, launch, watch for "
                       "divergence, classify a failure, apply the next playbook to a copy, resume from the last "
                       "checkpoint. Arguments after `--` (key=value overrides) go to llamafactory-cli.")
    t.add_argument("config", help="LLaMA-Factory training YAML (never modified)")
    t.add_argument("--max-attempts", type=int, default=3, help="launches at most (default 3)")
    t.add_argument("--run-dir", help="where attempt-N.yaml/.log and run.json go "
                   "(default .rocm-doctor/runs/<timestamp>)")
    t.add_argument("--no-preflight", action="store_true", help="launch without running `check` first")
    t.add_argument("--launcher", metavar="CMD", help="command instead of `llamafactory-cli train`; the attempt's "
                   "config path is appended (or replaces {config})")
    t.add_argument("--quiet", "-q", action="store_true", help="do not echo the training output (still in the logs)")
    t.add_argument("--json", action="store_true", help="print run.json at the end")
    t.add_argument("--gpu-interval", type=float, default=15.0, help="seconds between GPU samples (default 15)")
    t.set_defaults(func=cmd_train)


