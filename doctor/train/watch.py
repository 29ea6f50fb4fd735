"""What ``train`` watches while an attempt runs: the losses (divergence), the trainer log's new records,
progress and activity (the hang watchdog), throughput, and the GPUs (one full, the others idle; clocks,
power, temperature).

All of it reads what LLaMA-Factory and HF Trainer write anyway: ``output_dir/trainer_log.jsonl`` (one JSON
record per logging step) and the HF log dicts on stdout; the GPUs through :mod:`doctor.gpuinfo` (the
system tools, never torch). Nothing here starts or stops a process.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor import gpuinfo
from doctor.host import Host

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
    """Samples the GPUs every ``interval`` s through the system tools (never torch): the inventory's memory,
    utilisation, clock, power and temperature (sysfs hwmon on AMD, NVML on NVIDIA)."""

    def __init__(self, interval: float, env: dict[str, str] | None = None) -> None:
        super().__init__(daemon=True)
        self.interval, self.samples, self.stop_event = interval, [], threading.Event()
        self.event: str | None = None
        self.env = env

    def run(self) -> None:
        while not self.stop_event.wait(self.interval):
            if not self.sample_once():
                return

    def sample_once(self) -> bool:
        """One sample; False when there is nothing to watch on this machine."""
        try:
            host = Host.from_env(self.env)
            gpus, _ = gpuinfo.inventory(host, env=self.env, use_library=False)
        except Exception:
            return False
        if not gpus:
            return False
        self.samples.append(gpus)
        self.samples = self.samples[-100:]
        self.event = self.event or judge_balance(self.samples[-10:])
        return True

    def busy(self, recent: int = 2) -> bool | None:
        """Whether any GPU was busy in the last samples (None: no utilisation known)."""
        utils = [g.util_pct for gpus in self.samples[-recent:] for g in gpus if g.util_pct is not None]
        return None if not utils else max(utils) > 5

    def peaks(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for gpus in self.samples:
            for g in gpus:
                if g.vram_used_mib is not None:
                    out[str(g.index)] = max(out.get(str(g.index), 0.0), float(g.vram_used_mib))
        return out

    def last(self) -> list[dict[str, Any]]:
        """The last sample, GPU by GPU, with its clocks/power/temperature (hang and throughput evidence)."""
        if not self.samples:
            return []
        return [{"index": g.index, "bdf": g.bdf, "util_pct": g.util_pct, "vram_used_mib": g.vram_used_mib,
                 "sclk_mhz": g.sclk_mhz, "power_w": g.power_w, "temp_c": g.temp_c} for g in self.samples[-1]]

    def straggler(self) -> str | None:
        """The GPU whose clock or utilisation stands out low against the others in the last samples."""
        last = self.last()
        for key, unit in (("sclk_mhz", "MHz"), ("util_pct", "%")):
            vals = [(g["index"], g.get(key)) for g in last if g.get(key) is not None]
            if len(vals) >= 2:
                med = statistics.median(v for _, v in vals)
                low = min(vals, key=lambda x: x[1])
                if med > 0 and low[1] < 0.7 * med:
                    return f"GPU {low[0]} at {low[1]:.0f} {unit} (others ~{med:.0f} {unit})"
        return None


# ------------------------------------------------------------------ progress, activity, throughput

_TQDM = re.compile(r"(\d+)/(\d+) \[")


class Progress:
    """When the run last made progress: a trainer-log record, an HF log dict, a progress-bar counter that
    moved (the tokenizer's bars count too: a run tokenizing is not hung). ``last_step_at`` is only training
    steps (records and HF log dicts), what the status line shows."""

    def __init__(self, now: float | None = None) -> None:
        t = time.monotonic() if now is None else now
        self.started = self.last = t
        self.last_step_at: float | None = None
        self.bars: dict[str, int] = {}
        self.step_times: list[float] = []   # seconds between consecutive training-step events

    def tick(self, now: float | None = None, step: bool = False) -> None:
        t = time.monotonic() if now is None else now
        if step:
            if self.last_step_at is not None:
                self.step_times.append(t - self.last_step_at)
            self.last_step_at = t
        self.last = t

    def line(self, text: str, now: float | None = None) -> None:
        """A chunk of output: a progress-bar counter that advanced is progress."""
        for seg in text.split("\r"):
            m = _TQDM.search(seg)
            if not m:
                continue
            key = seg[:m.start()].split("|")[0].strip()[-60:] + "/" + m.group(2)
            n = int(m.group(1))
            if n > self.bars.get(key, -1):
                self.bars[key] = n
                self.tick(now)

    def slowest_step(self) -> float:
        return max(self.step_times, default=0.0)


def stall_limit(requested: float | None, progress: Progress, default: float = 1800.0) -> float:
    """The stall timeout: what the user asked for, else 30 min or 10x the slowest step so far, the larger."""
    if requested is not None:
        return requested
    return max(default, 10 * progress.slowest_step())


class Activity:
    """CPU time of the training process tree (psutil; every rank and DataLoader worker), as the fraction of
    one core used since the previous reading. Reading a few dozen processes costs well under a millisecond."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.prev: tuple[float, float] | None = None
        self.usage: float | None = None   # cores in use, averaged over the last interval

    def cpu_seconds(self) -> float | None:
        try:
            import psutil

            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except Exception:
            return None
        total = 0.0
        for p in procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except Exception:  # noqa: S112 - a process that just exited
                continue
        return total

    def sample(self, now: float | None = None) -> float | None:
        t = time.monotonic() if now is None else now
        cpu = self.cpu_seconds()
        if cpu is None:
            return self.usage
        if self.prev is not None and t > self.prev[0]:
            self.usage = max(0.0, (cpu - self.prev[1]) / (t - self.prev[0]))
        self.prev = (t, cpu)
        return self.usage


IDLE_CORES = 0.1   # below a tenth of one core, the whole tree is asleep (a blocked collective, a deadlock)


@dataclass
class StallVerdict:
    state: str          # ok | busy | hang | busy_cap
    quiet_s: float      # seconds without progress
    limit_s: float
    message: str = ""


def judge_stall(quiet_s: float, limit_s: float, cpu_cores: float | None, gpu_busy: bool | None,
                cap_factor: float = 4.0) -> StallVerdict:
    """No progress for ``limit_s`` while the tree is idle (CPU below a tenth of a core, GPUs idle or unknown)
    is a hang; while busy it is warm-up (tokenising, torch.compile, Triton/TunableOp tuning) until
    ``cap_factor`` x the limit."""
    if limit_s <= 0 or quiet_s < limit_s:
        return StallVerdict("ok", quiet_s, limit_s)
    idle = (cpu_cores is not None and cpu_cores < IDLE_CORES) and gpu_busy is not True
    if idle:
        return StallVerdict("hang", quiet_s, limit_s, f"no progress for {fmt_s(quiet_s)} while the training "
                            f"processes are idle (CPU {cpu_cores:.2f} cores"
                            + (", GPUs idle" if gpu_busy is False else "") + ")")
    if quiet_s >= cap_factor * limit_s:
        return StallVerdict("busy_cap", quiet_s, limit_s, f"no progress for {fmt_s(quiet_s)} although busy "
                            f"(CPU {cpu_cores or 0:.2f} cores" + (", GPUs busy" if gpu_busy else "")
                            + f"): past {cap_factor:g}x the stall timeout")
    return StallVerdict("busy", quiet_s, limit_s, f"no step for {fmt_s(quiet_s)}, busy: compiling or tuning?")


def fmt_s(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


@dataclass
class Throughput:
    """Steps/s, samples/s and tokens/s from the trainer log: LLaMA-Factory's ``throughput`` (tokens/s, with
    ``include_num_input_tokens_seen``) when present, else estimated from the batch and ``cutoff_len`` (an upper
    bound: sequences are at most that long). A drop below ``drop`` x the run's own median after warm-up is an
    event."""

    samples_per_step: float = 1.0
    tokens_per_sample: float | None = None
    warmup_records: int = 3
    drop: float = 0.7
    points: list[tuple[float, int]] = field(default_factory=list)      # (monotonic time, step)
    rates: list[float] = field(default_factory=list)                  # steps/s between records
    tokens: list[float] = field(default_factory=list)                 # reported tokens/s
    events: list[dict[str, Any]] = field(default_factory=list)
    series: list[list[float]] = field(default_factory=list)           # [step, steps/s] for the plot
    first_step_s: float | None = None
    low_run: int = 0

    def feed(self, rec: dict[str, Any], now: float, started: float) -> dict[str, Any] | None:
        step = rec.get("current_steps")
        if not isinstance(step, int):
            return None
        if self.first_step_s is None:
            self.first_step_s = round(now - started, 2)
        if isinstance(rec.get("throughput"), (int, float)) and rec["throughput"] > 0:
            self.tokens.append(float(rec["throughput"]))
        if self.points and step > self.points[-1][1] and now > self.points[-1][0]:
            self.rates.append((step - self.points[-1][1]) / (now - self.points[-1][0]))
            self.series.append([step, round(self.rates[-1], 4)])
        self.points.append((now, step))
        return self._check(step)

    def _check(self, step: int) -> dict[str, Any] | None:
        if len(self.rates) <= self.warmup_records:
            return None
        steady = self.rates[self.warmup_records - 1:]
        med = statistics.median(steady[:-1]) if len(steady) > 1 else steady[0]
        if med > 0 and self.rates[-1] < self.drop * med:
            self.low_run += 1
            if self.low_run == 2:
                ev = {"step": step, "steps_per_s": round(self.rates[-1], 4), "median_steps_per_s": round(med, 4),
                      "drop_pct": round(100 * (1 - self.rates[-1] / med))}
                self.events.append(ev)
                return ev
        else:
            self.low_run = 0
        return None

    def summary(self) -> dict[str, Any]:
        steady = self.rates[self.warmup_records - 1:] if len(self.rates) >= self.warmup_records else self.rates
        sps = statistics.median(steady) if steady else None
        out: dict[str, Any] = {"median_steps_per_s": round(sps, 4) if sps else None,
                               "median_samples_per_s": round(sps * self.samples_per_step, 3) if sps else None,
                               "median_tokens_per_s": None, "tokens_source": None,
                               "warmup_s": self.first_step_s, "events": self.events}
        if self.tokens:
            out["median_tokens_per_s"], out["tokens_source"] = round(statistics.median(self.tokens), 1), "trainer_log"
        elif sps and self.tokens_per_sample:
            out["median_tokens_per_s"] = round(sps * self.samples_per_step * self.tokens_per_sample, 1)
            out["tokens_source"] = "estimated (batch x cutoff_len: an upper bound)"
        return out

    def status(self) -> str:
        if not self.rates:
            return ""
        sps = self.rates[-1]
        tok = self.tokens[-1] if self.tokens else (sps * self.samples_per_step * self.tokens_per_sample
                                                   if self.tokens_per_sample else None)
        return f"{sps:.3g} steps/s" + (f" · {human(tok)} tok/s" if tok else "")


def human(v: float) -> str:
    return f"{v / 1e6:.2f}M" if v >= 1e6 else f"{v / 1e3:.1f}k" if v >= 1e3 else f"{v:.0f}"


def nan_or_none(v: Any) -> float | None:
    """A loss logged as the string "nan"/"inf" (how some writers serialise it), as a float."""
    if isinstance(v, str) and v.strip().lower() in ("nan", "inf", "-inf", "infinity"):
        return float(v)
    return None


class TrainerLogTail:
    """Reads what is appended to ``trainer_log.jsonl``: only complete lines, only the new part (a log
    left by an earlier attempt is skipped), and from the start again when the file is replaced or
    truncated (``overwrite_output_dir`` deletes it)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.offset, self.ino = 0, None
        if path is not None and path.is_file():
            st = path.stat()
            self.offset, self.ino = st.st_size, st.st_ino

    def read_new(self) -> list[dict[str, Any]]:
        if self.path is None:
            return []
        try:
            st = self.path.stat()
        except OSError:
            self.offset, self.ino = 0, None  # not there yet, or deleted: start over when it returns
            return []
        if self.ino is not None and (st.st_ino != self.ino or st.st_size < self.offset):
            self.offset = 0
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        cut = data.rfind(b"\n") + 1
        out = []
        for line in data[:cut].splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        self.offset, self.ino = self.offset + cut, st.st_ino
        return out
