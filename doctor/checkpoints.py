"""The output_dir layout LLaMA-Factory inherits from HF Trainer: ``checkpoint-<global_step>`` dirs.

Shared by the config lint (CFG011/CFG012: checkpoints a run would discard or resume) and the
``train`` supervisor (which checkpoint a retry resumes from).
"""

from __future__ import annotations

import re
from pathlib import Path

CKPT = re.compile(r"^checkpoint-(\d+)$")  # transformers.trainer_utils.get_last_checkpoint's pattern


def checkpoints(output_dir: Path) -> list[tuple[int, Path, bool]]:
    """(step, path, complete) sorted by step; complete = trainer_state.json written (HF writes it last)."""
    if not output_dir.is_dir():
        return []
    out = []
    for p in output_dir.iterdir():
        m = CKPT.match(p.name)
        if m and p.is_dir():
            out.append((int(m.group(1)), p, (p / "trainer_state.json").is_file()))
    return sorted(out)


def last_good(found: list[tuple[int, Path, bool]], before_step: int | None = None) -> Path | None:
    """Of ``checkpoints()``'s answer, the last complete one older than ``before_step`` (the first diverged
    step) if given."""
    good = [p for s, p, ok in found if ok and (before_step is None or s < before_step)]
    return good[-1] if good else None


def last_good_checkpoint(output_dir: Path, before_step: int | None = None) -> Path | None:
    return last_good(checkpoints(output_dir), before_step)


def step_of(path: str | Path) -> int:
    """The global step a ``checkpoint-N`` directory holds (0 for anything else)."""
    m = CKPT.match(Path(path).name)
    return int(m.group(1)) if m else 0
