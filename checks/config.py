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

from doctor.checkpoints import checkpoints
from doctor.context import Context
from doctor.findings import Code, Finding, Severity, with_all_good
from doctor.lfschema import KEY_NOTES, RENAMES
from doctor.registry import check
from doctor.stack import env_flag
from doctor.worker import ProbeSpec

AREA = "config"

CFG000 = Code(
    AREA, "CFG000", Severity.OK, 'LLaMA-Factory accepts the config',
    why="The config parses with LLaMA-Factory's own argument parser.",
    fix='Nothing to do.',
)

CFG001 = Code(
    AREA, "CFG001", Severity.ERROR, 'Key not accepted by LLaMA-Factory',
    why='LLaMA-Factory stops with `Some keys are not used by the HfArgumentParser: [...]` before loading '
        'anything. `device_map` (from a widely shared ROCm guide) is derived by LLaMA-Factory itself and '
        'must not be specified; `evaluation_strategy` was renamed `eval_strategy`.',
    fix='Drop the key (or rename it where upstream renamed it).',
    playbook='drop-unknown-keys', autofix=True,
)

CFG002 = Code(
    AREA, "CFG002", Severity.ERROR, 'Invalid value for a choice field',
    why="YAML values bypass argparse's `choices`, so a wrong value is not rejected at start-up: "
        '`quantization_method: bitsandbytes` silently disables quantization (the value is `bnb`).',
    fix='Use one of the listed values.',
)

CFG003 = Code(
    AREA, "CFG003", Severity.ERROR, 'bf16 and fp16 both enabled',
    why='transformers refuses it: `At most one of fp16 and bf16 can be True`.',
    fix='Keep `bf16: true` on MI200/MI300/RDNA3+ and drop `fp16`.',
    playbook='fix-precision', autofix=True,
)

CFG004 = Code(
    AREA, "CFG004", Severity.WARNING, 'model_name_or_path is a Hub id, not a local path',
    why='Compute nodes are often offline; a Hub id downloads at start-up (or fails on a gated repo).',
    fix='Download the model once and point model_name_or_path at the absolute local directory.',
)

CFG005 = Code(
    AREA, "CFG005", Severity.ERROR, 'A local path in the config does not exist',
    why='model_name_or_path / adapter_name_or_path / dataset_dir / deepspeed point to a missing path.',
    fix='Fix the path (relative paths resolve from the directory you launch in).',
)

CFG006 = Code(
    AREA, "CFG006", Severity.ERROR, 'template missing or unknown',
    why='LLaMA-Factory fails with `Template X does not exist.`; without a template it guesses from the '
        'tokenizer, which is wrong for base models.',
    fix="Set `template:` to the model family's template (e.g. llama3, qwen, qwen3).",
)

CFG007 = Code(
    AREA, "CFG007", Severity.ERROR, 'Dataset not found in dataset_info.json',
    why='Each `dataset` name must be a key of `<dataset_dir>/dataset_info.json`; a relative dataset_dir '
        "resolves from the working directory, not the config's directory.",
    fix='Add the dataset to dataset_info.json or fix dataset_dir (use an absolute path).',
)

CFG008 = Code(
    AREA, "CFG008", Severity.ERROR, 'DeepSpeed config unreadable',
    why='The `deepspeed:` JSON is missing or not valid JSON; the run fails after model loading.',
    fix='Fix the JSON (LLaMA-Factory ships examples/deepspeed/ds_z{0,2,3}_config.json).',
)

CFG009 = Code(
    AREA, "CFG009", Severity.WARNING, 'DeepSpeed config inconsistent with the training args',
    why='Hard-coded fp16/bf16 or scheduler values that differ from the training args make transformers stop '
        'with `Please correct the following DeepSpeed config values`.',
    fix='Set those DeepSpeed values to "auto".',
)

CFG010 = Code(
    AREA, "CFG010", Severity.WARNING, 'DeepSpeed without FORCE_TORCHRUN',
    why='On a single visible GPU, llamafactory-cli launches without torchrun and DeepSpeed refuses: `Please '
        'use FORCE_TORCHRUN=1 to launch DeepSpeed training.`',
    fix='Launch with `FORCE_TORCHRUN=1 llamafactory-cli train ...`.',
)

CFG011 = Code(
    AREA, "CFG011", Severity.WARNING, 'overwrite_output_dir with existing checkpoints',
    why='`overwrite_output_dir: true` makes LLaMA-Factory start from step 0 and delete its trainer log '
        'although checkpoints exist: the progress is discarded.',
    fix='Drop overwrite_output_dir to resume, or use a new output_dir.',
    playbook='keep-progress', autofix=True,
)

CFG012 = Code(
    AREA, "CFG012", Severity.INFO, 'output_dir has checkpoints: the run will resume',
    why='Without overwrite_output_dir, LLaMA-Factory silently resumes from the last checkpoint-N.',
    fix='Intended? Otherwise use a new output_dir.',
)

CFG013 = Code(
    AREA, "CFG013", Severity.WARNING, 'ddp_timeout short for a multi-GPU run',
    why='Rank 0 tokenises the dataset while the other ranks wait in a barrier; with the default 30-minute '
        'timeout a large dataset kills the run with a collective timeout.',
    fix="Set `ddp_timeout: 180000000` (LLaMA-Factory's examples do).",
    playbook='raise-ddp-timeout', autofix=True,
)

CFG014 = Code(
    AREA, "CFG014", Severity.WARNING, 'OPTIM_TORCH will force expandable_segments on ROCm',
    why='llamafactory-cli sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for torchrun launches unless '
        'OPTIM_TORCH=0; on ROCm this overrides PYTORCH_HIP_ALLOC_CONF and uses a feature that is unsupported '
        'or reported to crash/hang on several ROCm torch builds.',
    fix='Export OPTIM_TORCH=0 for multi-GPU ROCm runs.',
    playbook='optim-torch-off', autofix=True,
)

CFG015 = Code(
    AREA, "CFG015", Severity.ERROR, "LLaMA-Factory's parser rejects the config",
    why="LLaMA-Factory's own argument validation raised; the run would stop at start-up.",
    fix="Read the message in the detail; it is LLaMA-Factory's own.",
)

CFG016 = Code(
    AREA, "CFG016", Severity.INFO, 'Linted against a cached schema',
    why='LLaMA-Factory could not be imported in the examined Python (or --quick was given), so the keys were '
        'checked against a cached schema of its fields.',
    fix='Install llamafactory in the examined Python for the full lint.',
)

CFG017 = Code(
    AREA, "CFG017", Severity.ERROR, 'Value has the wrong type',
    why='YAML 1.1 reads `1e-4` (no dot) as a string; a string learning rate or a non-integer batch size '
        'fails inside transformers.',
    fix='Write numbers as numbers, e.g. `1.0e-4`.',
)

CFG018 = Code(
    AREA, "CFG018", Severity.ERROR, 'QLoRA settings LLaMA-Factory refuses',
    why='Quantization works only with finetuning_type lora/oft, 4 or 8 bits for bnb, and not with '
        'resize_vocab.',
    fix='Use finetuning_type: lora and quantization_bit: 4 (or drop quantization).',
    playbook='qlora-to-lora', autofix=False,
)

CODES = (CFG000, CFG001, CFG002, CFG003, CFG004, CFG005, CFG006, CFG007, CFG008, CFG009, CFG010, CFG011, CFG012, CFG013, CFG014, CFG015, CFG016, CFG017, CFG018)


def _probes(ctx: Context) -> list[ProbeSpec]:
    specs = [ProbeSpec("lf_schema", "doctor.probes.llamafactory", "probe_lf_schema", timeout=ctx.options.timeout,
                       group="stack", cache="pure")]
    if ctx.config_path is not None:
        specs.append(ProbeSpec("lf_parse", "doctor.probes.llamafactory", "probe_lf_parse",
                               {"config_path": str(ctx.config_path)}, timeout=ctx.options.timeout,
                               group="stack", cache="pure", inputs=[str(ctx.config_path), *ctx.config_inputs()]))
    return specs


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
        out.append(CFG001.finding(f"LLaMA-Factory rejects key(s): {', '.join(unknown)}",
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
            out.append(CFG002.finding(f"`{k}: {v}` is not a valid choice",
                            f"Valid values: {', '.join(choices)}.{extra}", key=k, value=v, choices=choices))
        elif not _type_ok(v, spec):
            out.append(CFG017.finding(f"`{k}: {v!r}` should be {spec.get('kind')}",
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
        out.append(CFG007.finding(f"{info_path} not found{rel_note}",
                        f"LLaMA-Factory looks up datasets {', '.join(n for _, n in names)} there.",
                        dataset_dir=str(ddir), datasets=[n for _, n in names]))
        return out
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        out.append(CFG007.finding(f"{info_path} is not valid JSON", str(e), path=str(info_path)))
        return out
    for key, n in names:
        if n not in info:
            close = difflib.get_close_matches(n, list(info), n=1)
            out.append(CFG007.finding(f"{key} `{n}` is not in {info_path}{rel_note}",
                            f"Defined datasets: {', '.join(sorted(info)[:15])}{' ...' if len(info) > 15 else ''}"
                            + (f"; did you mean `{close[0]}`?" if close else ""), dataset=n, path=str(info_path)))
            continue
        entry = info[n] if isinstance(info[n], dict) else {}
        fname = entry.get("file_name")
        if fname and not any(k in entry for k in ("hf_hub_url", "ms_hub_url", "om_hub_url", "script_url")):
            if not (ddir / fname).exists():
                out.append(CFG007.finding(f"dataset `{n}`: file {ddir / fname} not found",
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
            return [CFG008.finding(f"DeepSpeed config {p} cannot be read", e.strerror or str(e), path=str(p))]
        except ValueError as e:
            return [CFG008.finding(f"DeepSpeed config {p} is not valid JSON", str(e), path=str(p))]
        if not isinstance(conf, dict):
            return [CFG008.finding(f"DeepSpeed config {p} is not a JSON object", "", path=str(p))]
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
        out.append(CFG009.finding("DeepSpeed config disagrees with the training args",
                        "\n".join(problems), problems=problems, zero_stage=zero.get("stage")))
    env = ctx.env
    if not env_flag(env, "FORCE_TORCHRUN"):
        out.append(CFG010.finding("deepspeed is set but FORCE_TORCHRUN is not",
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
        return [CFG011.finding(f"overwrite_output_dir: true but {p} has {len(ckpts)} checkpoint(s)",
                     f"The run would start from step 0 and ignore {ckpts[-1].name}; LLaMA-Factory also deletes "
                     "trainer_log.jsonl.", checkpoints=[c.name for c in ckpts])]
    if cfg.get("resume_from_checkpoint"):
        return []
    return [CFG012.finding(f"{p} has {ckpts[-1].name}: the run will resume from it",
                 "LLaMA-Factory resumes silently from the last checkpoint when output_dir has one.",
                 checkpoints=[c.name for c in ckpts])]


def _launch(ctx: Context, cfg: dict[str, Any]) -> list[Finding]:
    """ddp_timeout and OPTIM_TORCH, for launches llamafactory-cli will run under torchrun."""
    env = ctx.env
    sysf = ctx.facts.get("system") or (ctx.system() if not ctx.options.quick else {})
    gpus = sysf.get("gpus") or []
    amd = any(g.get("vendor") == "amd" for g in gpus) or bool(sysf.get("kfd_archs"))
    torchrun = (env_flag(env, "FORCE_TORCHRUN") or len(gpus) > 1
                or int(env.get("NNODES", "1") or 1) > 1)
    out = []
    if torchrun and int(cfg.get("ddp_timeout", 1800) or 1800) < 3 * 3600:
        out.append(CFG013.finding(f"ddp_timeout is {cfg.get('ddp_timeout', 1800)} s for a distributed run",
                        "Rank 0 preprocesses the dataset while the others wait; a long preprocessing kills "
                        "the run with a collective timeout.", ddp_timeout=cfg.get("ddp_timeout", 1800)))
    if amd and torchrun and env_flag(env, "OPTIM_TORCH", "1"):
        user = env.get("PYTORCH_HIP_ALLOC_CONF")
        out.append(CFG014.finding("llamafactory-cli will set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                        "OPTIM_TORCH is on (the default) for this torchrun launch on ROCm"
                        + (f"; it overrides your PYTORCH_HIP_ALLOC_CONF={user!r}" if user else "") + ".",
                        PYTORCH_HIP_ALLOC_CONF=user))
    return out


_VALIDATE_MAP = [
    (re.compile(r"Template .* does not exist"), CFG006),
    (re.compile(r"Quantization is only compatible|Bitsandbytes only accepts|quantized model"), CFG018),
    (re.compile(r"At most one of fp16 and bf16"), CFG003),
]


def lint(ctx: Context) -> list[Finding]:
    cfg = ctx.config or {}
    out: list[Finding] = []
    schema, src = ctx.lf_schema()
    parse = ctx.probes.get("lf_parse")
    full = parse is not None and parse.ok
    if schema is None:
        out.append(CFG016.finding("No LLaMA-Factory schema available; key checks skipped",
                        "llamafactory is not importable and no cached schema exists for its version."))
    else:
        unknown = parse.data["unknown_keys"] if full else None
        out += lint_keys(cfg, schema, unknown)
        if not full:
            out.append(CFG016.finding(f"Config checked against the {src} schema",
                            "" if ctx.options.quick else (parse.error if parse else "llamafactory not importable"),
                            source=src))
    if full:
        for key in ("parse_error", "validate_error"):
            msg = parse.data.get(key)
            if not msg:
                continue
            code = next((c for rx, c in _VALIDATE_MAP if rx.search(msg)), CFG015)
            if code is CFG006 and any(f.id == "CFG006" for f in out):
                continue
            out.append(code.finding("LLaMA-Factory rejects the config: " + msg.split(": ", 1)[-1][:120],
                            msg, source="llamafactory " + key.replace("_error", "")))
    if cfg.get("bf16") and cfg.get("fp16"):
        out.append(CFG003.finding("bf16 and fp16 are both true",
                        "transformers stops with `At most one of fp16 and bf16 can be True, but not both`."))
    # paths
    m = cfg.get("model_name_or_path")
    if not m:
        out.append(CFG005.finding("model_name_or_path is missing", "Every training config needs it."))
    elif isinstance(m, str):
        p = ctx.resolve_path(m)
        if not p.exists():
            if _is_hub_id(m):
                out.append(CFG004.finding(f"model_name_or_path `{m}` is a Hub id",
                                "It will be downloaded at start-up (needs network and, for gated models, a token).",
                                model=m))
            else:
                out.append(CFG005.finding(f"model_name_or_path {p} does not exist", "", path=str(p)))
    for key in ("adapter_name_or_path",):
        v = cfg.get(key)
        for item in (v.split(",") if isinstance(v, str) else []):
            p = ctx.resolve_path(item.strip())
            if not p.exists() and not _is_hub_id(item.strip()):
                out.append(CFG005.finding(f"{key} {p} does not exist", "", path=str(p)))
    # template
    tpl = cfg.get("template")
    templates = (schema or {}).get("templates") or []
    stage = cfg.get("stage", "sft")
    if tpl is None and stage != "pt":
        out.append(CFG006.finding("No `template:` set",
                        "LLaMA-Factory then parses the tokenizer's chat template, or uses `empty` for base models.",
                        severity=Severity.WARNING))
    elif tpl is not None and templates and tpl not in templates and not any(f.id == "CFG006" for f in out):
        close = difflib.get_close_matches(str(tpl), templates, n=3)
        out.append(CFG006.finding(f"template `{tpl}` does not exist",
                        "LLaMA-Factory stops with `Template {tpl} does not exist.`"
                        + (f" Close: {', '.join(close)}." if close else ""), template=tpl))
    # QLoRA settings LLaMA-Factory refuses (quick mode has no parser to tell us)
    qb = cfg.get("quantization_bit")
    if qb is not None and not any(f.id == "CFG018" for f in out):
        if cfg.get("finetuning_type", "lora") not in ("lora", "oft"):
            out.append(CFG018.finding("quantization_bit with finetuning_type "
                            f"{cfg.get('finetuning_type')}", "Quantization is only compatible with LoRA or OFT."))
        elif cfg.get("quantization_method", "bnb") == "bnb" and qb not in (4, 8):
            out.append(CFG018.finding(f"quantization_bit: {qb} with bitsandbytes",
                            "Bitsandbytes only accepts 4-bit or 8-bit quantization."))
    out += _datasets(ctx, cfg)
    out += _deepspeed(ctx, cfg)
    out += _output_dir(ctx, cfg)
    out += _launch(ctx, cfg)
    return with_all_good(out, CFG000, "LLaMA-Factory accepts the config"
                         + ("" if full else f" (against the {src} schema)"), tolerate_warnings=True, source=src)


@check(AREA, needs_config=True, quick=True, probes=_probes, order=20)
def config_lint(ctx: Context) -> list[Finding]:
    return lint(ctx)
