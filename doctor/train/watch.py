"""What ``train`` watches while an attempt runs: the losses (divergence), the trainer log's new records,
and the GPUs (one full, the others idle).

All of it reads what LLaMA-Factory and HF Trainer write anyway: ``output_dir/trainer_log.jsonl`` (one JSON
record per logging step) and the HF log dicts on stdout; the GPUs through :mod:`doctor.gpuinfo` (the
system tools, never torch). Nothing here starts or stops a process.
"""

from __future__ import annotations

import json
import math
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor import gpuinfo

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
