"""Special tokens of the chosen LLaMA-Factory template against the model's own tokenizer."""

from __future__ import annotations

from typing import Any

from doctor.context import Context
from doctor.findings import Code, Finding, Severity, with_all_good
from doctor.registry import check, probe_failure
from doctor.worker import ProbeSpec

AREA = "template"

TPL000 = Code(
    AREA, "TPL000", Severity.OK, 'Template tokens match the tokenizer',
    why='Every special token the template emits or stops on is one id the tokenizer knows.',
    fix='Nothing to do.',
)

TPL001 = Code(
    AREA, "TPL001", Severity.ERROR, 'Template token splits into several ids',
    why='A role header or stop word the tokenizer does not know as one token is trained as plain text '
        'pieces; the model never learns to stop.',
    fix="Use the template of the model's family.",
)

TPL002 = Code(
    AREA, "TPL002", Severity.ERROR, 'Template adds tokens the model has no embedding for',
    why="LLaMA-Factory adds missing stop words as new special tokens; their ids fall outside the model's "
        'embedding matrix unless `resize_vocab: true`, which then trains untrained rows.',
    fix='Prefer the right template; otherwise set `resize_vocab: true`.',
    playbook='resize-vocab', autofix=False,
)

TPL003 = Code(
    AREA, "TPL003", Severity.ERROR, 'Template does not match the model family',
    why="The template's tokens belong to another model family than the tokenizer's chat template.",
    fix='Set `template:` to the suggested one.',
)

TPL004 = Code(
    AREA, "TPL004", Severity.WARNING, 'Tokenizer could not be loaded; template not checked',
    why='The tokenizer files at model_name_or_path could not be loaded locally (no Hub access is attempted).',
    fix='Point model_name_or_path at a local directory with tokenizer files.',
)

TPL005 = Code(
    AREA, "TPL005", Severity.INFO, 'Tokenizer has no pad token',
    why='LLaMA-Factory sets pad = eos; fine for SFT, but note eos is then masked in padding.',
    fix='Nothing required.',
)

CODES = (TPL000, TPL001, TPL002, TPL003, TPL004, TPL005)


def _probes(ctx: Context) -> list[ProbeSpec]:
    d = ctx.model_dir()
    if d is None:
        return []
    mc = ctx.model_config() or {}
    return [ProbeSpec("template_tokens", "doctor.probes.llamafactory", "probe_template_tokens",
                      {"model_dir": str(d), "template": ctx.cfg("template"),
                       "model_vocab": mc.get("vocab_size"), "resize_vocab": bool(ctx.cfg("resize_vocab"))},
                      timeout=ctx.options.timeout, group="stack", cache="pure", inputs=[str(d)])]


def suggest(data: dict[str, Any], model_type: str | None) -> str | None:
    """The template that fits the tokenizer best; prefers the model type's own name (qwen3 for qwen3)."""
    fits = [f for f in data.get("fitting_templates") or [] if f["in_chat_template"] > 0] or []
    if not fits:
        return None
    top = fits[0]["in_chat_template"]
    best = [f["name"] for f in fits if f["in_chat_template"] == top]
    if model_type:
        for n in best:
            if n == model_type or n == f"{model_type}_nothink":
                return n
        for n in best:
            if n.startswith(model_type.rstrip("0123456789")):
                return n
    return best[0]


def judge(data: dict[str, Any], model_type: str | None, resize_vocab: bool) -> list[Finding]:
    out: list[Finding] = []
    tpl = data.get("template")
    if data.get("error"):
        return []  # unknown template: reported by the config lint (CFG006)
    rep = data.get("report") or {"tokens": [], "stop_words": []}
    split = [t for t in rep["tokens"] if not t["single"]]
    missing_stop = [t for t in rep["stop_words"] if not t["single"] and t.get("emitted")]
    stop_only = {t["token"] for t in rep["stop_words"] if not t.get("emitted")}
    better = suggest(data, model_type)
    if (split or missing_stop) and better and better != tpl:
        bad = ", ".join(t["token"] for t in split + missing_stop)
        out.append(TPL003.finding(f"template `{tpl}` does not match this tokenizer; use `{better}`",
                        f"The tokenizer does not know {bad} as single tokens; its chat template uses the "
                        f"tokens of `{better}`" + (f" (model_type {model_type})" if model_type else "") + ".",
                        template=tpl, suggested=better, unknown=[t["token"] for t in split + missing_stop]))
    for t in split:
        out.append(TPL001.finding(f"`{t['token']}` of template `{tpl}` splits into {len(t['ids'])} ids",
                        f"ids {t['ids']}: it would be trained as plain text.", token=t["token"], ids=t["ids"]))
    vocab = data.get("model_vocab")
    for a in data.get("added_tokens") or []:
        beyond = vocab is not None and a["id"] >= vocab
        if a["token"] in stop_only:
            out.append(TPL002.finding(f"stop word `{a['token']}` would be added as id {a['id']}",
                            "It only stops generation and never appears in training sequences, so training is "
                            "unaffected; LLaMA-Factory will still warn that new tokens were added.",
                            severity=Severity.INFO, playbook="", token=a["token"], id=a["id"], model_vocab=vocab))
        elif beyond and not resize_vocab:
            out.append(TPL002.finding(f"`{a['token']}` would be added as id {a['id']} ≥ embedding size {vocab}",
                            "LLaMA-Factory adds it as a new special token; without `resize_vocab: true` the id "
                            "indexes past the embedding matrix (device-side assert / index error).",
                            token=a["token"], id=a["id"], model_vocab=vocab))
        else:
            out.append(TPL002.finding(f"`{a['token']}` would be added as a new token (id {a['id']})",
                            f"The id fits the embedding ({vocab}) but its row is untrained"
                            + ("; resize_vocab is on" if resize_vocab else "") + ".",
                            severity=Severity.WARNING, token=a["token"], id=a["id"], model_vocab=vocab))
    if data.get("pad") is None:
        out.append(TPL005.finding("The tokenizer has no pad token",
                        f"LLaMA-Factory will use the eos token `{data.get('pad_after')}` as pad."))
    n = len(rep["tokens"]) + len(rep["stop_words"])
    return with_all_good(out, TPL000, f"template `{tpl}`: {n} special token(s), each one known id",
                         f"eos after LLaMA-Factory's fix: {data.get('eos_after')}",
                         tokens=[t["token"] for t in rep["tokens"] + rep["stop_words"]])


@check(AREA, needs_config=True, probes=_probes, order=30)
def template_tokens(ctx: Context) -> list[Finding]:
    if ctx.model_dir() is None:
        m = ctx.cfg("model_name_or_path")
        return [TPL004.finding("Template tokens not checked: model is not a local directory",
                     f"model_name_or_path = {m!r}; no Hub access is attempted.")]
    res = ctx.probes.get("template_tokens")
    if res is None or not res.ok:
        f = probe_failure(res, AREA)
        if res is not None and res.status in ("error", "import_error"):
            return [TPL004.finding("Tokenizer or template could not be loaded", res.error, **res.evidence())]
        return f
    mc = ctx.model_config() or {}
    return judge(res.data, mc.get("model_type"), bool(ctx.cfg("resize_vocab")))
