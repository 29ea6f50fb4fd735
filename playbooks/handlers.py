"""Handlers for the playbooks whose patch needs judgement (see ``catalog.yaml``).

A handler gets the round-trip mapping (edited in place), the :class:`~playbooks.edits.PatchInput` (the
findings or classification that triggered it, the model's config.json, earlier playbooks) and the
:class:`~playbooks.edits.Outcome` to fill: ``changes`` (human-readable), ``env``, or ``stop`` when no config
change can help. Leaving ``changes`` empty means "does not apply here"; ``train`` then tries the next
playbook for the category.
"""

from __future__ import annotations

from typing import Any

from doctor.lfschema import RENAMES, known_fields
from playbooks.edits import Outcome, PatchInput, delete_key, fmt, rename_key, set_key, show

QUANT_KEYS = ("quantization_bit", "quantization_method", "quantization_type", "double_quantization",
              "quantization_device_map")


def _num(v: Any) -> float | None:
    """YAML gives `1.0e-4` as a float but `1e-4` as a string (YAML 1.2); LLaMA-Factory accepts both."""
    if isinstance(v, bool) or v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def drop_unknown_keys(cm: Any, inp: PatchInput, out: Outcome) -> None:
    keys: list[str] = []
    for f in inp.findings:
        if getattr(f, "id", "") == "CFG001":
            keys += list(f.evidence.get("keys") or [])
    if inp.classification is not None:
        keys += list((inp.classification.details or {}).get("keys") or [])
    fields = known_fields()
    if not keys and fields:
        keys = [k for k in cm if k not in fields]
    for k in dict.fromkeys(keys):
        if k not in cm:
            continue
        if fields and k in fields:
            continue  # a real LLaMA-Factory key: the YAML went to the wrong subcommand; dropping it is wrong
        new = RENAMES.get(k)
        if new and new not in cm:
            out.changes.append(f"{k} -> {new} (renamed upstream)")
            rename_key(cm, k, new)
        else:
            out.changes.append(f"{k}: removed (was {show(k, cm[k])})")
            delete_key(cm, k)


def disable_flash_attn(cm: Any, inp: PatchInput, out: Outcome) -> None:
    cur = str(cm.get("flash_attn", "auto"))
    sdpa_broken = any(getattr(f, "id", "") == "ATTN002" for f in inp.findings)
    diverged = getattr(inp.classification, "category", None) == "nan_or_divergent_loss"
    if diverged and cur not in ("fa2", "fa3"):
        return  # a NaN loss without an explicit flash-attn kernel: not the suspect (lower-lr comes next)
    if cur in ("fa2", "fa3") and not sdpa_broken:
        new = "sdpa"
    elif cur != "disabled":
        new = "disabled"
    else:
        return
    out.changes.append(f"flash_attn: {cur} -> {new}" if "flash_attn" in cm else f"flash_attn: {new} (added)")
    set_key(cm, "flash_attn", new, after="template")


def qlora_to_lora(cm: Any, inp: PatchInput, out: Outcome) -> None:
    qc = (inp.model_config or {}).get("quantization_config")
    if qc:
        method = qc.get("quant_method", "?") if isinstance(qc, dict) else "?"
        out.stop = (f"the model at model_name_or_path is a pre-quantized ({method}) checkpoint: it cannot be "
                    "un-quantized. Point model_name_or_path at the unquantized base model, then QLoRA->LoRA applies.")
        return
    if "quantization_bit" not in cm:
        return
    for k in QUANT_KEYS:
        if k in cm:
            out.changes.append(f"{k}: removed (was {show(k, cm[k])})")
            delete_key(cm, k)


def reduce_memory(cm: Any, inp: PatchInput, out: Outcome) -> None:
    bs = int(_num(cm.get("per_device_train_batch_size", 1)) or 1)
    ga = int(_num(cm.get("gradient_accumulation_steps", 1)) or 1)
    if bs > 1:
        nbs = bs // 2
        nga = ga * bs // nbs if (ga * bs) % nbs == 0 else ga * 2
        out.changes.append(f"per_device_train_batch_size: {bs} -> {nbs}")
        out.changes.append(f"gradient_accumulation_steps: {ga} -> {nga} (effective batch {bs * ga} -> {nbs * nga})")
        set_key(cm, "per_device_train_batch_size", nbs)
        set_key(cm, "gradient_accumulation_steps", nga, after="per_device_train_batch_size")
        return
    if cm.get("disable_gradient_checkpointing") is True:
        out.changes.append("disable_gradient_checkpointing: removed (gradient checkpointing back on)")
        delete_key(cm, "disable_gradient_checkpointing")
        return
    cl = int(_num(cm.get("cutoff_len", 2048)) or 2048)
    if cl > 512:
        new = max(512, cl // 2)
        out.changes.append(f"cutoff_len: {cl} -> {new} (longer samples are truncated)")
        set_key(cm, "cutoff_len", new)


def lower_lr(cm: Any, inp: PatchInput, out: Outcome) -> None:
    lr = _num(cm.get("learning_rate", 5e-5)) or 5e-5
    full = str(cm.get("finetuning_type", "lora")) == "full"
    cap = 1e-5 if full else 2e-4
    new = min(lr / 10, cap)
    new = float(f"{new:.3g}")
    if new < 1e-8:
        return
    out.changes.append(f"learning_rate: {fmt(cm.get('learning_rate', '5e-5 (default)'))} -> {new:g}")
    set_key(cm, "learning_rate", new)
    mgn = _num(cm.get("max_grad_norm", 1.0))
    if mgn is None or mgn > 1.0:
        out.changes.append(f"max_grad_norm: {fmt(cm.get('max_grad_norm', 'unset'))} -> 1.0")
        set_key(cm, "max_grad_norm", 1.0, after="learning_rate")


def dataloader_no_workers(cm: Any, inp: PatchInput, out: Outcome) -> None:
    """No worker processes, so nothing goes through /dev/shm; stop when there were none to begin with."""
    dl = _num(cm.get("dataloader_num_workers", 0)) or 0
    pp = _num(cm.get("preprocessing_num_workers", 1)) or 1
    if dl > 0:
        out.changes.append(f"dataloader_num_workers: {fmt(cm.get('dataloader_num_workers'))} -> 0")
        set_key(cm, "dataloader_num_workers", 0)
    if pp > 1:
        out.changes.append(f"preprocessing_num_workers: {fmt(cm.get('preprocessing_num_workers'))} -> 1")
        set_key(cm, "preprocessing_num_workers", 1)
    if not out.changes:
        out.stop = ("/dev/shm is exhausted although no DataLoader worker uses it (NCCL's shared-memory transport "
                    "or another process): start the container with --shm-size=16g or --ipc=host")


def fp16_to_bf16(cm: Any, inp: PatchInput, out: Outcome) -> None:
    """fp16 -> bf16, only where the failure shows fp16's loss scaling collapse (not for any NaN): the classifier
    names this playbook for exactly those failures (the signatures and frame rules of signatures.yaml that carry
    ``playbook: fp16-to-bf16``), so its choice is the evidence."""
    if cm.get("fp16") is not True or getattr(inp.classification, "playbook", None) != "fp16-to-bf16":
        return
    out.changes.append("fp16: removed; bf16: true (fp16's loss scale collapsed: the values overflow its range)")
    delete_key(cm, "fp16")
    set_key(cm, "bf16", True)


def hide_igpu(cm: Any, inp: PatchInput, out: Outcome) -> None:
    """The visible-device variables GPU006 computed (only the run's discrete GPUs; HIP_/CUDA_VISIBLE_DEVICES
    renumbered after ROCR_VISIBLE_DEVICES filters), or, after a failure, none: which GPU is the iGPU is a
    fact of the machine the log does not carry."""
    for f in inp.findings:
        if getattr(f, "id", "") == "GPU006" and isinstance(f.evidence.get("env"), dict):
            out.env.update({k: str(v) for k, v in f.evidence["env"].items()})
            out.changes.append("environment: " + " ".join(f"{k}={v}" for k, v in f.evidence["env"].items())
                               + " (hides the integrated GPU)")
            return


def exclude_gpu(cm: Any, inp: PatchInput, out: Outcome) -> None:
    """The visible-device variables that move the run off a faulty GPU: from HLTH001 (the preflight saw
    uncorrectable errors or a recent reset) or from ``train``'s fault detection after a failed attempt."""
    patch = None
    for f in inp.findings:
        if getattr(f, "id", "") == "HLTH001" and isinstance(f.evidence.get("env"), dict):
            patch = f.evidence["env"]
    if patch is None and inp.classification is not None:
        patch = (inp.classification.details or {}).get("exclude_env")
    if patch:
        out.env.update({k: str(v) for k, v in patch.items()})
        out.changes.append("environment: " + " ".join(f"{k}={v}" for k, v in patch.items())
                           + " (without the faulty GPU)")


def _ds_json(cm: Any) -> tuple[dict[str, Any] | None, str]:
    """The DeepSpeed config the YAML names (inline, or the JSON file it points at, from the working directory
    as LLaMA-Factory resolves it) as a plain dict, and where it came from."""
    import json
    import os

    ds = cm.get("deepspeed")
    if isinstance(ds, dict):
        return json.loads(json.dumps(ds)), "inline"
    if isinstance(ds, str) and ds:
        try:
            with open(os.path.expanduser(ds), encoding="utf-8") as f:
                conf = json.load(f)
            return (conf, ds) if isinstance(conf, dict) else (None, ds)
        except (OSError, ValueError):
            return None, ds
    return None, ""


def _inline_ds(cm: Any, conf: dict[str, Any], src: str, out: Outcome, what: str) -> None:
    """Put the edited DeepSpeed config into the YAML copy as a mapping (TrainingArguments.deepspeed takes a
    dict or a path): the user's JSON file is never written."""
    from ruamel.yaml.comments import CommentedMap

    def cmap(o: Any) -> Any:
        if isinstance(o, dict):
            m = CommentedMap()
            for k, v in o.items():
                m[k] = cmap(v)
            return m
        return [cmap(x) for x in o] if isinstance(o, list) else o

    set_key(cm, "deepspeed", cmap(conf))
    out.changes.append(f"deepspeed: {what} (from {src}, inlined into the copy; your JSON is unchanged)")


def deepspeed_no_offload(cm: Any, inp: PatchInput, out: Outcome) -> None:
    """ZeRO without CPU/NVMe offload: DeepSpeed then needs no cpu_adam build (and the GPUs must hold the
    optimizer states: the memory fit says whether they do)."""
    conf, src = _ds_json(cm)
    zero = (conf or {}).get("zero_optimization")
    if not isinstance(zero, dict) or not ({"offload_optimizer", "offload_param"} & set(zero)):
        return
    for k in ("offload_optimizer", "offload_param"):
        zero.pop(k, None)
    _inline_ds(cm, conf, src, out, "offload_optimizer / offload_param removed")


def deepspeed_stage2(cm: Any, inp: PatchInput, out: Outcome) -> None:
    """ZeRO-3 -> ZeRO-2: the stage LLaMA-Factory accepts with pre-quantized checkpoints and 8-bit QLoRA."""
    conf, src = _ds_json(cm)
    zero = (conf or {}).get("zero_optimization")
    if not isinstance(zero, dict) or zero.get("stage") != 3:
        return
    zero["stage"] = 2
    for k in list(zero):
        if k.startswith("stage3_") or k == "offload_param":
            zero.pop(k)
    _inline_ds(cm, conf, src, out, "ZeRO stage 3 -> 2 (stage3_* settings and offload_param removed)")
