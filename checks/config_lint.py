"""Lint of the LLaMA-Factory training YAML, with LLaMA-Factory's own parser.

Full mode runs LLaMA-Factory's ``HfArgumentParser`` and ``get_train_args`` in the stack worker.
``--quick`` (or no llamafactory in the examined Python) checks against a cached schema of its
fields, keyed by its version, so the answer comes in well under a second without torch.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any

from doctor import lfschema
from doctor.context import Context
from doctor.findings import Finding, Severity, make
from doctor.outputs import checkpoints
from doctor.runner import check
from doctor.worker import ProbeSpec

AREA = "config"

# Keys people copy from guides or older versions, with the real story.
KEY_NOTES: dict[str, tuple[str | None, str]] = {
    "device_map": (None, "LLaMA-Factory derives device_map itself ({'': current device}) for training; "
                         "do not specify it. Multi-GPU goes through torchrun (llamafactory-cli does it), not device_map."),
    "evaluation_strategy": ("eval_strategy", "renamed to `eval_strategy` in transformers (the old name was removed)."),
    "disable_flash_attn": (None, "no such option in LLaMA-Factory; use `flash_attn: disabled` (or sdpa)."),
    "use_flash_attention_2": (None, "not a LLaMA-Factory key; use `flash_attn: fa2`."),
    "attn_implementation": (None, "not a LLaMA-Factory key; use `flash_attn: auto|sdpa|fa2|disabled`."),
    "load_in_4bit": (None, "not a LLaMA-Factory key; use `quantization_bit: 4`."),
    "load_in_8bit": (None, "not a LLaMA-Factory key; use `quantization_bit: 8`."),
    "max_length": ("cutoff_len", "LLaMA-Factory calls the sequence length `cutoff_len`."),
    "max_seq_length": ("cutoff_len", "LLaMA-Factory calls the sequence length `cutoff_len`."),
    "torch_dtype": (None, "not a training key; precision is `bf16: true` / `fp16: true`."),
    "lora_r": ("lora_rank", "LLaMA-Factory calls it `lora_rank`."),
    "lora_target_modules": ("lora_target", "LLaMA-Factory calls it `lora_target`."),
    "model_name": ("model_name_or_path", "LLaMA-Factory calls it `model_name_or_path`."),
}

RENAMES = {k: v[0] for k, v in KEY_NOTES.items() if v[0]}


def _probes(ctx: Context) -> list[ProbeSpec]:
    specs = [ProbeSpec("lf_schema", "checks.lf_probes", "probe_lf_schema", timeout=ctx.options.timeout,
                       group="stack")]
    if ctx.config_path is not None:
        specs.append(ProbeSpec("lf_parse", "checks.lf_probes", "probe_lf_parse",
                               {"config_path": str(ctx.config_path)}, timeout=ctx.options.timeout,
                               group="stack"))
    return specs


def schema_for(ctx: Context) -> tuple[dict[str, Any] | None, str]:
    """The LLaMA-Factory schema and where it came from ('llamafactory X' or 'cached X')."""
    if "lf_schema" in ctx.facts:
        return ctx.facts["lf_schema"], ctx.facts["lf_schema_source"]
    res = ctx.probes.get("lf_schema")
    if res is not None and res.ok:
        schema, src = res.data, f"llamafactory {res.data.get('llamafactory')}"
        lfschema.save_cache(schema)
    else:
        schema, src = lfschema.load(lfschema.installed_version(ctx.python, quick=ctx.options.quick))
    ctx.facts["lf_schema"], ctx.facts["lf_schema_source"] = schema, src
    return schema, src


def _is_hub_id(v: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", v)) and not v.startswith((".", "/", "~"))


def _type_ok(value: Any, spec: dict[str, Any]) -> bool:
    if value is None:
        return True  # LLaMA-Factory treats null as "unset" for optional fields; non-optional ones error in parse
    kinds = spec.get("kind", "any").split("|")
    if "any" in kinds:
        return True
    checks = {
        "bool": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "str": lambda v: isinstance(v, (str, int, float)) and not isinstance(v, bool),
        "list": lambda v: isinstance(v, (list, str)),
        "dict": lambda v: isinstance(v, (dict, str)),
    }
    return any(checks.get(k, lambda v: True)(value) for k in kinds)


def lint_keys(cfg: dict[str, Any], schema: dict[str, Any], unknown: list[str] | None = None) -> list[Finding]:
    """Unknown keys, invalid choices and wrong types against the schema (shared by full and quick mode)."""
    out: list[Finding] = []
    fields = schema.get("fields", {})
    unknown = sorted(k for k in cfg if k not in fields) if unknown is None else unknown
    if unknown:
        notes = []
        for k in unknown:
            if k in KEY_NOTES:
                notes.append(f"`{k}`: {KEY_NOTES[k][1]}")
            else:
                close = difflib.get_close_matches(k, fields, n=1, cutoff=0.8)
                notes.append(f"`{k}`: unknown" + (f" (did you mean `{close[0]}`?)" if close else ""))
        out.append(make("CFG001", AREA, f"LLaMA-Factory rejects key(s): {', '.join(unknown)}",
                        "LLaMA-Factory stops at start-up with `ValueError: Some keys are not used by the "
                        f"HfArgumentParser: {sorted(unknown)}`.\n" + "\n".join(notes),
                        keys=unknown, renames={k: RENAMES[k] for k in unknown if k in RENAMES}))
    for k, v in cfg.items():
        spec = fields.get(k)
        if not spec:
            continue
        choices = spec.get("choices")
        if choices and v is not None and str(v) not in choices or (choices and isinstance(v, bool)):
            extra = ""
            if k == "quantization_method" and str(v).lower() in ("bitsandbytes", "bnb4", "bnb_4bit"):
                extra = " From YAML this value is NOT rejected by LLaMA-Factory: quantization is silently skipped."
            out.append(make("CFG002", AREA, f"`{k}: {v}` is not a valid choice",
                            f"Valid values: {', '.join(choices)}.{extra}", key=k, value=v, choices=choices))
        elif not _type_ok(v, spec):
            out.append(make("CFG017", AREA, f"`{k}: {v!r}` should be {spec.get('kind')}",
                            f"{k} is a {spec.get('kind')} field of {spec.get('dataclass')}.", key=k, value=v))
    return out


def _datasets(ctx: Context, cfg: dict[str, Any]) -> list[Finding]:
    out: list[Finding] = []
    names = []
    for key in ("dataset", "eval_dataset"):
        v = cfg.get(key)
        if isinstance(v, str):
            names += [(key, n.strip()) for n in v.split(",") if n.strip()]
        elif isinstance(v, list):
            names += [(key, str(n).strip()) for n in v]
    if not names:
        return out
    ddir_raw = cfg.get("dataset_dir", "data")
    ddir = ctx.resolve_path(str(ddir_raw))
    rel_note = "" if Path(str(ddir_raw)).is_absolute() else (
        f" (relative dataset_dir `{ddir_raw}` resolves from the working directory {ctx.cwd}, not from the config's directory)")
    info_path = ddir / "dataset_info.json"
    if str(ddir_raw).startswith("REMOTE:"):
        return out
    if not info_path.is_file():
        out.append(make("CFG007", AREA, f"{info_path} not found{rel_note}",
                        f"LLaMA-Factory looks up datasets {', '.join(n for _, n in names)} there.",
                        dataset_dir=str(ddir), datasets=[n for _, n in names]))
        return out
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        out.append(make("CFG007", AREA, f"{info_path} is not valid JSON", str(e), path=str(info_path)))
        return out
    for key, n in names:
        if n not in info:
            close = difflib.get_close_matches(n, list(info), n=1)
            out.append(make("CFG007", AREA, f"{key} `{n}` is not in {info_path}{rel_note}",
                            f"Defined datasets: {', '.join(sorted(info)[:15])}{' ...' if len(info) > 15 else ''}"
                            + (f"; did you mean `{close[0]}`?" if close else ""), dataset=n, path=str(info_path)))
            continue
        entry = info[n] if isinstance(info[n], dict) else {}
        fname = entry.get("file_name")
        if fname and not any(k in entry for k in ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url")):
            if not (ddir / fname).exists():
                out.append(make("CFG007", AREA, f"dataset `{n}`: file {ddir / fname} not found",
                                f"dataset_info.json names file_name `{fname}`{rel_note}.", dataset=n,
                                path=str(ddir / fname)))
    return out


def _deepspeed(ctx: Context, cfg: dict[str, Any]) -> list[Finding]:
    ds = cfg.get("deepspeed")
    if not ds:
        return []
    out: list[Finding] = []
    if isinstance(ds, dict):
        conf = ds
    else:
        p = ctx.resolve_path(str(ds))
        try:
            conf = json.loads(p.read_text(encoding="utf-8"))
        except OSError as e:
            return [make("CFG008", AREA, f"DeepSpeed config {p} cannot be read", e.strerror or str(e), path=str(p))]
        except ValueError as e:
            return [make("CFG008", AREA, f"DeepSpeed config {p} is not valid JSON", str(e), path=str(p))]
        if not isinstance(conf, dict):
            return [make("CFG008", AREA, f"DeepSpeed config {p} is not a JSON object", "", path=str(p))]
    problems = []
    for prec in ("fp16", "bf16"):
        en = (conf.get(prec) or {}).get("enabled") if isinstance(conf.get(prec), dict) else None
        if en is True and not cfg.get(prec):
            problems.append(f"ds {prec}.enabled=true but `{prec}` is not set in the training YAML")
        if en is False and cfg.get(prec):
            problems.append(f"ds {prec}.enabled=false but `{prec}: true` in the training YAML")
    sched = conf.get("scheduler") if isinstance(conf.get("scheduler"), dict) else {}
    for k, v in (sched.get("params") or {}).items():
        if k in ("total_num_steps", "warmup_num_steps") and v != "auto":
            problems.append(f"ds scheduler.params.{k}={v} is hard-coded (the Trainer computes it)")
    zero = conf.get("zero_optimization") if isinstance(conf.get("zero_optimization"), dict) else {}
    if zero.get("stage") == 3 and cfg.get("quantization_bit") not in (None, 4):
        problems.append("ZeRO-3 with quantization needs quantization_bit: 4 (bitsandbytes>=0.43)")
    if problems:
        out.append(make("CFG009", AREA, "DeepSpeed config disagrees with the training args",
                        "\n".join(problems), problems=problems, zero_stage=zero.get("stage")))
    env = ctx.env
    if env.get("FORCE_TORCHRUN", "0").lower() not in ("1", "true", "y"):
        out.append(make("CFG010", AREA, "deepspeed is set but FORCE_TORCHRUN is not",
                        "With one visible GPU llamafactory-cli does not use torchrun and LLaMA-Factory stops with "
                        "`Please use FORCE_TORCHRUN=1 to launch DeepSpeed training.`"))
    return out


def _output_dir(ctx: Context, cfg: dict[str, Any]) -> list[Finding]:
    od = cfg.get("output_dir")
    if not isinstance(od, str):
        return []
    p = ctx.resolve_path(od)
    ckpts = [c for _, c, _ in checkpoints(p)]
    if not ckpts:
        return []
    if cfg.get("overwrite_output_dir"):
        return [make("CFG011", AREA, f"overwrite_output_dir: true but {p} has {len(ckpts)} checkpoint(s)",
                     f"The run would start from step 0 and ignore {ckpts[-1].name}; LLaMA-Factory also deletes "
                     "trainer_log.jsonl.", checkpoints=[c.name for c in ckpts])]
    if cfg.get("resume_from_checkpoint"):
        return []
    return [make("CFG012", AREA, f"{p} has {ckpts[-1].name}: the run will resume from it",
                 "LLaMA-Factory resumes silently from the last checkpoint when output_dir has one.",
                 checkpoints=[c.name for c in ckpts])]


def _launch(ctx: Context, cfg: dict[str, Any]) -> list[Finding]:
    """ddp_timeout and OPTIM_TORCH, for launches llamafactory-cli will run under torchrun."""
    from doctor import system

    env = ctx.env
    sysf = ctx.facts.get("system") or (system.facts(ctx) if not ctx.options.quick else {})
    gpus = sysf.get("gpus") or []
    amd = any(g.get("vendor") == "amd" for g in gpus) or bool(sysf.get("kfd_archs"))
    torchrun = (env.get("FORCE_TORCHRUN", "0").lower() in ("1", "true", "y") or len(gpus) > 1
                or int(env.get("NNODES", "1") or 1) > 1)
    out = []
    if torchrun and int(cfg.get("ddp_timeout", 1800) or 1800) < 3 * 3600:
        out.append(make("CFG013", AREA, f"ddp_timeout is {cfg.get('ddp_timeout', 1800)} s for a distributed run",
                        "Rank 0 preprocesses the dataset while the others wait; a long preprocessing kills "
                        "the run with a collective timeout.", ddp_timeout=cfg.get("ddp_timeout", 1800)))
    if amd and torchrun and env.get("OPTIM_TORCH", "1").lower() not in ("0", "false", "n"):
        user = env.get("PYTORCH_HIP_ALLOC_CONF")
        out.append(make("CFG014", AREA, "llamafactory-cli will set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                        "OPTIM_TORCH is on (the default) for this torchrun launch on ROCm"
                        + (f"; it overrides your PYTORCH_HIP_ALLOC_CONF={user!r}" if user else "") + ".",
                        PYTORCH_HIP_ALLOC_CONF=user))
    return out


_VALIDATE_MAP = [
    (re.compile(r"Template .* does not exist"), "CFG006"),
    (re.compile(r"Quantization is only compatible|Bitsandbytes only accepts|quantized model"), "CFG018"),
    (re.compile(r"At most one of fp16 and bf16"), "CFG003"),
]


def lint(ctx: Context) -> list[Finding]:
    cfg = ctx.config or {}
    out: list[Finding] = []
    schema, src = schema_for(ctx)
    parse = ctx.probes.get("lf_parse")
    full = parse is not None and parse.ok
    if schema is None:
        out.append(make("CFG016", AREA, "No LLaMA-Factory schema available; key checks skipped",
                        "llamafactory is not importable and no cached schema exists for its version."))
    else:
        unknown = parse.data["unknown_keys"] if full else None
        out += lint_keys(cfg, schema, unknown)
        if not full:
            out.append(make("CFG016", AREA, f"Config checked against the {src} schema",
                            "" if ctx.options.quick else (parse.error if parse else "llamafactory not importable"),
                            source=src))
    if full:
        for key in ("parse_error", "validate_error"):
            msg = parse.data.get(key)
            if not msg:
                continue
            code = next((c for rx, c in _VALIDATE_MAP if rx.search(msg)), "CFG015")
            if code == "CFG006" and any(f.id == "CFG006" for f in out):
                continue
            out.append(make(code, AREA, "LLaMA-Factory rejects the config: " + msg.split(": ", 1)[-1][:120],
                            msg, source="llamafactory " + key.replace("_error", "")))
    if cfg.get("bf16") and cfg.get("fp16"):
        out.append(make("CFG003", AREA, "bf16 and fp16 are both true",
                        "transformers stops with `At most one of fp16 and bf16 can be True, but not both`."))
    # paths
    m = cfg.get("model_name_or_path")
    if not m:
        out.append(make("CFG005", AREA, "model_name_or_path is missing", "Every training config needs it."))
    elif isinstance(m, str):
        p = ctx.resolve_path(m)
        if not p.exists():
            if _is_hub_id(m):
                out.append(make("CFG004", AREA, f"model_name_or_path `{m}` is a Hub id",
                                "It will be downloaded at start-up (needs network and, for gated models, a token).",
                                model=m))
            else:
                out.append(make("CFG005", AREA, f"model_name_or_path {p} does not exist", "", path=str(p)))
    for key in ("adapter_name_or_path",):
        v = cfg.get(key)
        for item in (v.split(",") if isinstance(v, str) else []):
            p = ctx.resolve_path(item.strip())
            if not p.exists() and not _is_hub_id(item.strip()):
                out.append(make("CFG005", AREA, f"{key} {p} does not exist", "", path=str(p)))
    # template
    tpl = cfg.get("template")
    templates = (schema or {}).get("templates") or []
    stage = cfg.get("stage", "sft")
    if tpl is None and stage != "pt":
        out.append(make("CFG006", AREA, "No `template:` set",
                        "LLaMA-Factory then parses the tokenizer's chat template, or uses `empty` for base models.",
                        severity=Severity.WARNING))
    elif tpl is not None and templates and tpl not in templates and not any(f.id == "CFG006" for f in out):
        close = difflib.get_close_matches(str(tpl), templates, n=3)
        out.append(make("CFG006", AREA, f"template `{tpl}` does not exist",
                        "LLaMA-Factory stops with `Template {tpl} does not exist.`"
                        + (f" Close: {', '.join(close)}." if close else ""), template=tpl))
    # QLoRA settings LLaMA-Factory refuses (quick mode has no parser to tell us)
    qb = cfg.get("quantization_bit")
    if qb is not None and not any(f.id == "CFG018" for f in out):
        if cfg.get("finetuning_type", "lora") not in ("lora", "oft"):
            out.append(make("CFG018", AREA, "quantization_bit with finetuning_type "
                            f"{cfg.get('finetuning_type')}", "Quantization is only compatible with LoRA or OFT."))
        elif cfg.get("quantization_method", "bnb") == "bnb" and qb not in (4, 8):
            out.append(make("CFG018", AREA, f"quantization_bit: {qb} with bitsandbytes",
                            "Bitsandbytes only accepts 4-bit or 8-bit quantization."))
    out += _datasets(ctx, cfg)
    out += _deepspeed(ctx, cfg)
    out += _output_dir(ctx, cfg)
    out += _launch(ctx, cfg)
    if not any(f.severity.value == "error" for f in out):
        out.append(make("CFG000", AREA, "LLaMA-Factory accepts the config"
                        + ("" if full else f" (against the {src} schema)"), "", source=src))
    return out


@check(AREA, needs_config=True, quick=True, probes=_probes, order=20)
def config_lint(ctx: Context) -> list[Finding]:
    return lint(ctx)
