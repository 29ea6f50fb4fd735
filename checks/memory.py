"""Memory fit: estimated peak VRAM for the config vs each GPU's free memory.

A first-order estimate (weights + gradients + optimizer states + activations + logits), good enough
to predict a certain OOM before launch; its terms are in the evidence so a user can see why.
"""

from __future__ import annotations

from typing import Any

from doctor import gpuinfo
from doctor.context import Context
from doctor.findings import Code, Finding, Severity
from doctor.registry import check

AREA = "memory"

MEM000 = Code(
    AREA, "MEM000", Severity.OK, 'Estimated memory fits',
    why="The estimate of weights, gradients, optimizer states, activations and logits for this config fits the "
        "free memory of every GPU the run will use.",
    fix='Nothing to do.',
)

MEM001 = Code(
    AREA, "MEM001", Severity.WARNING, 'Predicted out of memory',
    why="The estimate of weights + optimizer + activations for this config exceeds a GPU's free memory.",
    fix='Lower per_device_train_batch_size (keep the effective batch with gradient_accumulation_steps), '
        'enable gradient checkpointing, or shorten cutoff_len.',
    playbook='reduce-memory', autofix=True,
)

MEM002 = Code(
    AREA, "MEM002", Severity.INFO, 'Memory estimate not possible',
    why="The model's config.json is not available locally, so its size is unknown.",
    fix='Nothing to do.',
)

CODES = (MEM000, MEM001, MEM002)

GiB = 2**30


def param_count(mc: dict[str, Any]) -> int:
    h = int(mc.get("hidden_size") or 0)
    layers = int(mc.get("num_hidden_layers") or 0)
    heads = int(mc.get("num_attention_heads") or 1)
    kv = int(mc.get("num_key_value_heads") or heads)
    hd = int(mc.get("head_dim") or (h // heads if heads else 0))
    inter = int(mc.get("intermediate_size") or 4 * h)
    vocab = int(mc.get("vocab_size") or 0)
    per_layer = h * heads * hd * 2 + h * kv * hd * 2 + 3 * h * inter + 2 * h
    emb = vocab * h * (1 if mc.get("tie_word_embeddings") else 2)
    return layers * per_layer + emb


def estimate(mc: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    n = param_count(mc)
    ft = cfg.get("finetuning_type", "lora")
    qbit = cfg.get("quantization_bit")
    half = bool(cfg.get("bf16") or cfg.get("fp16") or cfg.get("pure_bf16"))
    wbytes = (qbit / 8 * 1.1) if qbit else (2 if half or ft != "full" else 4)
    weights = n * wbytes
    if ft == "full":
        trainable = n
    elif ft == "freeze":
        trainable = n * int(cfg.get("freeze_trainable_layers", 2) or 2) / max(1, int(mc.get("num_hidden_layers") or 1))
    else:
        trainable = n * 0.01  # LoRA adapters: ~1% of the weights for rank 8-64 on all linear layers
    states = trainable * (2 + 4 + 8 + (4 if half else 0))  # grads + fp32 master/adam m,v
    b = int(cfg.get("per_device_train_batch_size", 1) or 1)
    s = int(cfg.get("cutoff_len", 2048) or 2048)
    h = int(mc.get("hidden_size") or 0)
    layers = int(mc.get("num_hidden_layers") or 0)
    gc = not cfg.get("disable_gradient_checkpointing", False)  # LLaMA-Factory checkpoints by default
    act = (2 * s * b * h * layers + 34 * s * b * h) if gc else 34 * s * b * h * layers
    logits = b * s * int(mc.get("vocab_size") or 0) * 4 * 2
    total = weights + states + act + logits + 1.0 * GiB
    return {"params": n, "weights_gib": weights / GiB, "states_gib": states / GiB, "activations_gib": act / GiB,
            "logits_gib": logits / GiB, "total_gib": round(total / GiB, 2), "gradient_checkpointing": gc,
            "batch": b, "cutoff_len": s, "finetuning_type": ft, "quantization_bit": qbit}


def judge(est: dict[str, Any], gpus: list[dict[str, Any]]) -> list[Finding]:
    """The estimate against every GPU the run will use. An integrated GPU beside a discrete one is left out
    (GPU006 says to hide it; its BIOS carve-out is no measure of the run); an APU is measured by its GTT;
    a partitioned GPU by one partition's share."""
    if any(not g.get("integrated") for g in gpus):
        gpus = [g for g in gpus if not g.get("integrated")]
    if not gpus:
        return [MEM000.finding(f"Estimated peak {est['total_gib']:.1f} GiB per GPU (no GPU here to compare)",
                     f"{est['params'] / 1e9:.2f} B parameters", **est)]
    worst = None
    for g in gpus:
        tot, used, basis = gpuinfo.usable_memory(g)
        if tot is None:
            continue
        free = (tot - used - (g.get("vram_reserved_mib") or 0)) / 1024
        margin = free - est["total_gib"]
        if worst is None or margin < worst[0]:
            worst = (margin, g, free, basis)
    if worst is None:
        return [MEM002.finding("GPU memory sizes unknown", "", **est)]
    margin, g, free, basis = worst
    note = f" ({basis})" if basis else ""
    if margin < 0:
        return [MEM001.finding(f"Estimated {est['total_gib']:.1f} GiB > {free:.1f} GiB free on GPU {g['index']}"
                               + note,
                     f"weights {est['weights_gib']:.1f} + optimizer {est['states_gib']:.1f} + activations "
                     f"{est['activations_gib']:.1f} + logits {est['logits_gib']:.1f} GiB (+1 GiB context)",
                     free_gib=round(free, 2), gpu=g.get("index"), basis=basis, **est)]
    return [MEM000.finding(f"Estimated {est['total_gib']:.1f} GiB of {free:.1f} GiB free "
                 f"(margin {margin:.1f} GiB){note}", "", free_gib=round(free, 2), basis=basis, **est)]


@check(AREA, needs_config=True, order=45)
def memory_fit(ctx: Context) -> list[Finding]:
    mc = ctx.model_config()
    if not mc or not mc.get("hidden_size"):
        return [MEM002.finding("Memory not estimated: the model's config.json is not local",
                     f"model_name_or_path = {ctx.cfg('model_name_or_path')!r}")]
    return judge(estimate(mc, ctx.config or {}), gpuinfo.visible_gpus(ctx.env, ctx.system().get("gpus") or []))
