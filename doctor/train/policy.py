"""The retry decision of ``train``, as a pure function: a failed attempt + the history -> Retry | Stop.

No console, no process, no file system: the supervisor hands in the facts (the failure's category and
classification, the config, the playbooks already applied, the output_dir's checkpoints, the model's
config.json) and carries out the answer. Table-driven tests cover it in milliseconds.

The rules:
- a deterministic failure (dataset, model path, template, DeepSpeed JSON, ...) stops at once: a retry
  cannot fix it;
- a kill by a signal is retried once unchanged, resuming; twice stops; a kill the OOM killer's own record
  explains (host RAM: the cgroup's oom_kill counter, the kernel log) stops at once, saying so; a kill whose
  evidence names a remedy (a DataLoader worker killed: ``dataloader-no-workers``) gets that playbook first;
- a hang (the watchdog stopped a run that made no progress while idle) is retried once unchanged, resuming;
  a second hang stops with the diagnosis (RCCL first when the ranks sat in a collective);
- a GPU fault is never retried on the same GPUs: with a spare GPU the ``exclude-gpu`` playbook moves the run
  off the faulty one, but only when the user allowed it (it asks first: ``--apply exclude-gpu``); without a
  spare, or unidentified, it stops naming the GPU and the evidence;
- otherwise the next automatic playbook for the category that changes the config is applied (a
  playbook applied on an earlier attempt is not applied again unless it is repeatable); none left
  stops;
- the retry resumes from the last *complete* checkpoint older than the first diverged step, removing
  ``overwrite_output_dir`` (which would restart at step 0 and delete the trainer log); where resuming
  would be wrong (a playbook whose change a checkpoint's optimizer/scheduler state would undo, or only
  poisoned checkpoints) it starts fresh and keeps LLaMA-Factory from auto-resuming.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor.checkpoints import last_good
from doctor.classify import stops
from doctor.config import clone
from playbooks import PatchInput, Playbook, apply, delete_key, set_key

HANG_ADVICE = {
    "collective": "the ranks sat in a collective (RCCL/NCCL): a rank died or never joined, or peer-to-peer "
                  "transport hangs (IOMMU not in passthrough, ACS on the PCIe path: `rocm-doctor check --only "
                  "platform`); try NCCL_P2P_DISABLE=1 and NCCL_DEBUG=INFO, and read the hang evidence file",
    "dataloader": "the main process waited on DataLoader workers: set `dataloader_num_workers: 0` or a larger "
                  "/dev/shm, and read the hang evidence file",
    "unknown": "no rank made progress and all were idle; the evidence file has the process states and "
               "wait channels (install py-spy for the Python stacks)",
}


@dataclass(frozen=True)
class Failure:
    """What the policy knows of a failed attempt."""

    category: str
    summary: str = ""
    classification: Any = None         # doctor.classify.Classification, for playbook handlers
    diverged_at: int | None = None     # first diverged step, when the watch stopped the run early
    resumed: bool = False              # the attempt ran with our resume_from_checkpoint
    faulty: tuple[dict[str, Any], ...] = ()   # GPUs the attempt faulted on: {index, bdf, name, why, evidence}
    exclude_env: dict[str, str] | None = None  # visible-device variables without them (None: no spare GPU)
    allowed: frozenset[str] = frozenset()      # ask-first playbooks the user allowed (``--apply``)
    suspect: str = ""                          # a hang's suspect: collective | dataloader | unknown
    bf16_ok: bool = False                      # the preflight ran bf16 GEMMs on this GPU (BF16000)
    host_oom: str = ""                         # evidence that the kernel's OOM killer killed the run (host RAM)


@dataclass(frozen=True)
class Retry:
    config: Any                        # the next attempt's round-trip mapping (a new object)
    playbooks: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    resume_from: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Stop:
    reason: str


def _usable(pb: Playbook, applied: list[str]) -> bool:
    """Automatic, and not applied on an earlier attempt unless it may repeat."""
    return pb.auto and (pb.id not in applied or pb.repeatable)


def _trial(pb: Playbook, config: Any, failure: Failure, applied: list[str],
           model_config: dict[str, Any] | None) -> tuple[Any, Any]:
    """``pb`` applied to a copy of ``config``: (its outcome, the patched copy); ``config`` is untouched."""
    trial = clone(config)
    out = apply(pb, trial, PatchInput(classification=failure.classification, model_config=model_config,
                                      applied=list(applied)))
    return out, trial


def _named_playbook(failure: Failure, config: Any, playbooks: list[Playbook], applied: list[str],
                    model_config: dict[str, Any] | None) -> tuple[Playbook, Any, Any] | None:
    """The playbook the classification itself names (a signature's own remedy) applied to a copy of
    ``config``: (playbook, outcome, patched copy) when it is usable and changes something; else None, and
    the category's own rule decides."""
    named = getattr(failure.classification, "playbook", None)
    for pb in playbooks:
        if pb.id == named and _usable(pb, applied):
            out, trial = _trial(pb, config, failure, applied, model_config)
            if out.changed and not out.stop:
                return pb, out, trial
    return None


def next_attempt(failure: Failure, config: Any, *, history: list[str], applied: list[str],
                 playbooks: list[Playbook], checkpoints: list[tuple[int, Path, bool]] | None,
                 model_config: dict[str, Any] | None = None) -> Retry | Stop:
    """Decide the next attempt. ``history``: the categories of every failed attempt so far, this one
    included; ``playbooks``: the catalog's playbooks for this category, in catalog order;
    ``checkpoints``: the output_dir's ``checkpoint-N`` dirs (None when the config has no output_dir)."""
    cat = failure.category or "unknown"
    new = clone(config)
    if failure.resumed:
        delete_key(new, "resume_from_checkpoint")  # ours, set for the previous attempt; chosen afresh below
    names: list[str] = []
    changes: list[str] = []
    env: dict[str, str] = {}
    note = ""
    resume_ok = True
    named = _named_playbook(failure, new, playbooks, applied, model_config) if cat == "killed_by_signal" else None
    if named is not None:
        # the kill's own evidence names a remedy (a DataLoader worker the OOM killer took: no workers)
        pb, out, new = named
        names.append(pb.id)
        changes += out.changes
        env.update(out.env)
        resume_ok = pb.resume
        note = f"{pb.title}: the signal's evidence names this remedy."
    elif cat == "killed_by_signal":
        oom = failure.host_oom or ("the log carries the kernel's OOM-killer line"
                                   if getattr(failure.classification, "signature", None) == "host-oom-killer" else "")
        if oom:
            return Stop(f"killed because host RAM ran out: {oom}. The same run would be killed again: "
                        "use fewer ranks per node or fewer preprocessing_num_workers / dataloader_num_workers, load "
                        "with ZeRO-3 (its zero.Init partitions the weights while loading) or add RAM / swap")
        if history.count("killed_by_signal") > 1:
            return Stop("killed by a signal twice; not retrying again (check dmesg for the OOM killer)")
        note = "Retrying once unchanged, resuming from the last checkpoint."
    elif cat == "hang":
        if history.count("hang") > 1:
            return Stop("hung twice: " + HANG_ADVICE.get(failure.suspect, HANG_ADVICE["unknown"]))
        note = "The run hung: retrying once unchanged, resuming from the last checkpoint."
    elif cat == "gpu_hw_fault":
        which = ", ".join(f"GPU {g.get('index')} ({g.get('bdf')}): {'; '.join(g.get('why') or [])}"
                          for g in failure.faulty)
        if not failure.faulty:
            return Stop(f"gpu_hw_fault: {failure.summary} (the faulty GPU could not be identified; a retry on the "
                        "same GPUs would fault again: check `sudo dmesg | grep amdgpu` and `amd-smi metric --ecc`)")
        if failure.exclude_env is None:
            return Stop(f"gpu_hw_fault on {which}; no spare GPU to move the run to: exclude it and have it serviced")
        if "exclude-gpu" not in failure.allowed:
            env_s = " ".join(f"{k}={v}" for k, v in failure.exclude_env.items())
            return Stop(f"gpu_hw_fault on {which}. A spare GPU exists: rerun with `--apply exclude-gpu` to move the "
                        f"run off it ({env_s}), or exclude it yourself")
        env.update(failure.exclude_env)
        names.append("exclude-gpu")
        changes.append("environment: " + " ".join(f"{k}={v}" for k, v in failure.exclude_env.items())
                       + " (without the faulty GPU)")
    elif stops(cat):
        return Stop(f"{cat}: {failure.summary} (a retry cannot fix this)")
    else:
        chosen = None
        held = None
        for pb in playbooks:
            if not _usable(pb, applied):
                continue
            if pb.id == "bf16-to-fp16" and cat == "bf16_unsupported" and failure.bf16_ok \
                    and pb.id not in failure.allowed:
                held = pb.id  # the GPU runs bf16: a library's check refused it, fp16 would only hide that
                continue
            out, trial = _trial(pb, new, failure, applied, model_config)
            if out.stop:
                return Stop(f"{pb.id}: {out.stop}")
            if out.changed:
                chosen, new = (pb, out), trial
                break
        if chosen is None and held:
            return Stop("bf16_unsupported, but the preflight ran bf16 on this GPU (BF16000): the refusal is a "
                        "library's own check (older transformers, accelerate and torchtune read torch.version.cuda, "
                        "None on ROCm); upgrade it, or rerun with `--apply bf16-to-fp16` to train in fp16")
        if chosen is None:
            return Stop(f"{cat}: no playbook applies" + (f" ({failure.summary})" if failure.summary else ""))
        pb, out = chosen
        names.append(pb.id)
        changes += out.changes
        env.update(out.env)
        resume_ok = pb.resume
    resumed = None
    if checkpoints is not None:
        ck = last_good(checkpoints, failure.diverged_at) if resume_ok else None
        if ck is not None:
            new["resume_from_checkpoint"] = str(ck)
            resumed = str(ck)
            if new.get("overwrite_output_dir"):
                delete_key(new, "overwrite_output_dir")
                changes.append("overwrite_output_dir: removed (the retry resumes; it would restart at step 0)")
                names.append("keep-progress")
            changes.append(f"resume_from_checkpoint: {ck.name}")
        elif checkpoints:
            # only poisoned (or, after lower-lr, stateful) checkpoints: start over, and keep LLaMA-Factory
            # from auto-resuming the last one
            set_key(new, "overwrite_output_dir", True)
            changes.append("overwrite_output_dir: true (start fresh: "
                           + ("checkpoints after the divergence hold NaN weights)" if resume_ok else
                              "resuming would restore the old optimizer/scheduler state)"))
    return Retry(new, names, changes, env, resumed, note)
