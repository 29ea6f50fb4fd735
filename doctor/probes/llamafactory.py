"""Probes that run LLaMA-Factory's own code in the "stack" worker (GPUs hidden).

They reuse LLaMA-Factory rather than re-implementing it: its argument dataclasses and
``HfArgumentParser`` for the lint, ``get_train_args`` for its own validation, ``TEMPLATES`` and
``get_template_and_fix_tokenizer`` for the template-token check.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import typing
from typing import Any

# what these probes import when they run: a warm server (doctor._warm_main) imports it once, ahead of the request
PRELOAD = ("omegaconf", "transformers", "transformers.models.auto.tokenization_auto", "llamafactory.hparams",
           "llamafactory.hparams.parser", "llamafactory.data.template", "llamafactory.extras.constants",
           "llamafactory.model.model_utils.attention")


def _describe_type(tp: Any) -> dict[str, Any]:
    """JSON description of a dataclass field type: kind, optional, strict choices."""
    origin = typing.get_origin(tp)
    args = list(typing.get_args(tp))
    optional = False
    if origin in (typing.Union,) or type(tp).__name__ == "UnionType":
        optional = type(None) in args
        args = [a for a in args if a is not type(None)]
        if len(args) == 1:
            d = _describe_type(args[0])
            d["optional"] = d.get("optional", False) or optional
            return d
        kinds = sorted({_describe_type(a)["kind"] for a in args})
        return {"kind": "|".join(kinds), "optional": optional}
    if origin is typing.Literal:
        return {"kind": "str", "choices": [str(a) for a in args], "optional": False}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"kind": "str", "choices": [str(m.value) for m in tp], "optional": False}
    if tp is bool:
        return {"kind": "bool", "optional": False}
    if tp is int:
        return {"kind": "int", "optional": False}
    if tp is float:
        return {"kind": "float", "optional": False}
    if tp is str:
        return {"kind": "str", "optional": False}
    if origin in (list, tuple) or tp in (list, tuple):
        return {"kind": "list", "optional": False}
    if origin is dict or tp is dict:
        return {"kind": "dict", "optional": False}
    return {"kind": "any", "optional": False}


def probe_lf_schema() -> dict[str, Any]:
    """The fields LLaMA-Factory's train parser accepts, its dependency pins and template names."""
    import importlib.metadata as md
    import inspect

    from llamafactory.data.template import TEMPLATES
    from llamafactory.extras import misc
    from llamafactory.hparams.parser import _TRAIN_ARGS

    fields: dict[str, Any] = {}
    for cls in _TRAIN_ARGS:
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            d = _describe_type(f.type)
            d["dataclass"] = cls.__name__
            if f.default is not dataclasses.MISSING:
                default = f.default.value if isinstance(f.default, enum.Enum) else f.default
                d["default"] = default if isinstance(default, (str, int, float, bool, type(None))) else str(default)
            fields[f.name] = d
    ranges: dict[str, str] = {}
    try:
        src = inspect.getsource(misc.check_dependencies)
        for req in re.findall(r'check_version\(\s*"([^"]+)"', src):
            m = re.match(r"([A-Za-z0-9_.\-]+)(.*)", req)
            if m and m.group(2):
                ranges[m.group(1)] = m.group(2)
    except (OSError, TypeError):
        pass
    return {"llamafactory": md.version("llamafactory"), "fields": fields,
            "dependency_ranges": ranges, "templates": sorted(TEMPLATES)}


_PRECISION_KEYS = ("bf16", "fp16", "pure_bf16")


def probe_lf_parse(config_path: str) -> dict[str, Any]:
    """Parse the config exactly as ``llamafactory-cli train cfg.yaml`` does, then run its validation.

    Precision and DeepSpeed keys are judged by our own checks (this worker has no GPU, which
    would make transformers' precision checks answer for the wrong device); they are removed
    only for the validation pass, never for the unknown-key pass.
    """
    import logging
    import os
    from pathlib import Path

    from llamafactory.hparams.parser import _TRAIN_ARGS, get_train_args
    from omegaconf import OmegaConf
    from transformers import HfArgumentParser

    args = OmegaConf.to_container(OmegaConf.load(Path(config_path).absolute()))
    out: dict[str, Any] = {"unknown_keys": [], "parse_error": None, "validate_error": None, "warnings": []}
    if not isinstance(args, dict):
        out["parse_error"] = "config is not a mapping"
        return out
    parser = HfArgumentParser(_TRAIN_ARGS)
    # HfArgumentParser.parse_dict accepts only init fields: device_map exists but is init=False
    known = {f.name for cls in _TRAIN_ARGS for f in dataclasses.fields(cls) if f.init}
    out["unknown_keys"] = sorted(k for k in args if k not in known)
    clean = {k: v for k, v in args.items() if k in known}
    import importlib.util

    if clean.get("deepspeed") and importlib.util.find_spec("deepspeed") is None:
        # TrainingArguments would stop at the missing package with accelerate's garbled message; the features
        # area names every missing package at once
        clean.pop("deepspeed")
        out["skipped"] = ["deepspeed"]
    try:
        parser.parse_dict({k: v for k, v in clean.items() if k not in _PRECISION_KEYS}, allow_extra_keys=True)
    except Exception as e:
        out["parse_error"] = f"{type(e).__name__}: {e}"
        return out
    # LLaMA-Factory's own validation (get_train_args), with its warnings captured
    records: list[str] = []

    class _Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                records.append(record.getMessage())

    grab = _Grab()
    logging.getLogger("llamafactory").addHandler(grab)
    validate = {k: v for k, v in clean.items() if k not in _PRECISION_KEYS and k != "deepspeed"}
    os.environ.setdefault("DISABLE_VERSION_CHECK", "1")  # versions are judged by the torch check
    from llamafactory.hparams import parser as lfp

    real_check = lfp.check_version
    lfp.check_version = lambda requirement, mandatory=False: None  # packages: the features area, all at once
    try:
        model_args, data_args, training_args, finetuning_args, _ = get_train_args(validate)
        out["resolved"] = {
            "resume_from_checkpoint": training_args.resume_from_checkpoint,
            "output_dir": training_args.output_dir,
            "stage": finetuning_args.stage,
            "finetuning_type": finetuning_args.finetuning_type,
            "template": data_args.template,
        }
    except Exception as e:
        out["validate_error"] = f"{type(e).__name__}: {e}"
    finally:
        lfp.check_version = real_check
        logging.getLogger("llamafactory").removeHandler(grab)
    out["warnings"] = records[:20]
    return out


# ---------------------------------------------------------------- template tokens

_SPECIAL = re.compile(r"<\|[^|<>]{1,40}\|>|<[A-Za-z_][\w/.-]{0,30}>|\[/?[A-Z_]{2,20}\]")


def _slot_tokens(template: Any) -> tuple[list[str], list[str], set[str]]:
    """(special-looking strings inside string slots, explicit {"token": x} slots, {bos/eos} sets)."""
    strs: list[str] = []
    toks: list[str] = []
    sets: set[str] = set()
    for attr in ("format_user", "format_assistant", "format_system", "format_observation",
                 "format_function", "format_prefix"):
        fmt = getattr(template, attr, None)
        for slot in getattr(fmt, "slots", None) or []:
            if isinstance(slot, str):
                strs += _SPECIAL.findall(slot.replace("{{content}}", "\x00"))
            elif isinstance(slot, dict) and slot.get("token"):
                toks.append(slot["token"])
            elif isinstance(slot, set):
                sets |= slot
    return list(dict.fromkeys(strs)), list(dict.fromkeys(toks)), sets


def _known(tokenizer: Any, tok: str) -> tuple[bool, list[int]]:
    ids = tokenizer.encode(tok, add_special_tokens=False)
    tid = tokenizer.convert_tokens_to_ids(tok)
    single = len(ids) == 1 and tid is not None and tid != tokenizer.unk_token_id
    return single, ids


def template_tokens_report(tokenizer: Any, template: Any) -> dict[str, Any]:
    """Every token a template emits (slots; the first stop word when it replaces eos) or only stops on."""
    strs, toks, sets = _slot_tokens(template)
    rep: dict[str, Any] = {"tokens": [], "stop_words": []}
    for t in strs + toks:
        single, ids = _known(tokenizer, t)
        rep["tokens"].append({"token": t, "ids": ids[:8], "single": single})
    for i, t in enumerate(template.stop_words or []):
        single, ids = _known(tokenizer, t)
        # with replace_eos the first stop word becomes eos and ends every assistant turn: it is trained
        rep["stop_words"].append({"token": t, "ids": ids[:8], "single": single,
                                  "emitted": bool(i == 0 and template.replace_eos) or t in strs + toks})
    rep["needs_bos"] = "bos_token" in sets
    return rep


def _emitted(template: Any) -> tuple[list[str], list[str]]:
    strs, toks, _ = _slot_tokens(template)
    stops = list(template.stop_words or [])
    emitted = list(dict.fromkeys(strs + toks + (stops[:1] if template.replace_eos else [])))
    return emitted, [t for t in stops if t not in emitted]


def _top_level_value(text: str, key: str) -> Any:
    """The value of ``key`` in the JSON object ``text``, parsed alone; ``KeyError`` where it is not a key of the
    outermost object before any nested value names it (the caller then parses the whole text).

    The Rust ``tokenizers`` library writes ``tokenizer.json`` with ``added_tokens`` as the fourth key, after
    ``version``, ``truncation`` and ``padding``: the scan over that prefix is a few hundred bytes, the value is a
    short list, the vocabulary and merges after it are never parsed."""
    import json

    needle = f'"{key}"'
    at = text.find(needle)
    if at < 0:
        raise KeyError(key)
    depth, in_str, esc = 0, False, False
    for ch in text[:at]:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    if in_str or depth != 1:
        raise KeyError(key)
    rest = text[at + len(needle):].lstrip()
    if not rest.startswith(":"):
        raise KeyError(key)
    rest = rest[1:].lstrip()
    return json.JSONDecoder().raw_decode(rest)[0]


def _load_tokenizer(model_dir: str, exact: bool = False) -> Any:
    """``AutoTokenizer.from_pretrained`` as LLaMA-Factory calls it, less two redundant passes over the vocabulary.

    - transformers 5 builds the Rust backend with ``Tokenizer.from_file`` and then ``TokenizersBackend.__init__``
      deep-copies that fresh object (a JSON round trip of the whole vocabulary: 1.4 s of a Llama-3 tokenizer's
      4.8 s load on a 2-core machine). Nothing else holds the object it copies (it lives in a local dict of this
      one call, and this probe never passes a ``tokenizer_object`` of its own), so for the duration of the call
      the module's ``copy.deepcopy`` hands a ``tokenizers.Tokenizer`` back as is and copies everything else as
      before.
    - A ``tokenizer_config.json`` without ``added_tokens_decoder`` (what transformers 5's ``save_pretrained``
      writes) sends ``_from_pretrained`` down its legacy path: ``json.load`` of the whole ``tokenizer.json`` (1.5 s
      for Llama-3's 9 MB) only to ``pop("added_tokens")``. There the module's ``json.load`` reads the file up to
      that one value and parses it alone (:func:`_top_level_value`), and parses the whole file when it is laid
      out otherwise.

    ``exact=True`` loads without the shortcuts; a test checks both loads give the same report."""
    import copy as _copy
    import json as _json
    import os
    import sys
    import types

    from transformers import AutoTokenizer

    try:
        import transformers.tokenization_utils_base as base
        import transformers.tokenization_utils_tokenizers as backend
        from tokenizers import Tokenizer
    except ImportError:  # another transformers layout: load it plainly
        backend = base = None
    real_copy = getattr(backend, "copy", None)
    real_json = getattr(base, "json", None)
    if exact or backend is None or real_copy is not _copy or real_json is not _json:
        return AutoTokenizer.from_pretrained(model_dir, local_files_only=True, trust_remote_code=False)

    def deepcopy(obj: Any, memo: Any = None) -> Any:
        return obj if type(obj) is Tokenizer else _copy.deepcopy(obj, memo)

    def load(fp: Any, *args: Any, **kwargs: Any) -> Any:
        name = os.path.basename(str(getattr(fp, "name", "")))
        if args or kwargs or name != "tokenizer.json" or sys._getframe(1).f_code.co_name != "_from_pretrained":
            return _json.load(fp, *args, **kwargs)
        # the value sits near the top: read on only until it parses (a text file: read(n) counts characters)
        text = fp.read(1 << 17)
        while True:
            try:
                return {"added_tokens": _top_level_value(text, "added_tokens")}
            except (KeyError, ValueError):
                more = fp.read(1 << 20)
                if not more:
                    return _json.loads(text)
                text += more

    backend.copy = types.SimpleNamespace(**{**vars(_copy), "deepcopy": deepcopy})
    base.json = types.SimpleNamespace(**{**vars(_json), "load": load})
    try:
        return AutoTokenizer.from_pretrained(model_dir, local_files_only=True, trust_remote_code=False)
    finally:
        backend.copy = real_copy
        base.json = real_json


def probe_template_tokens(model_dir: str, template: str | None, model_vocab: int | None,
                          resize_vocab: bool = False, exact_load: bool = False) -> dict[str, Any]:
    """Load the local tokenizer, run LLaMA-Factory's template fix on it, and report every token
    (``exact_load``: load it without the copy shortcut of ``_load_tokenizer``)."""
    from llamafactory.data.template import TEMPLATES, get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments

    # one load (a Llama-3 tokenizer.json takes seconds): everything that reads the tokenizer as shipped runs
    # before LLaMA-Factory's fix changes it in place
    tokenizer = _load_tokenizer(model_dir, exact=exact_load)
    before = len(tokenizer)
    out: dict[str, Any] = {"tokenizer_len": before, "model_vocab": model_vocab,
                           "eos": tokenizer.eos_token, "pad": tokenizer.pad_token, "bos": tokenizer.bos_token,
                           "has_chat_template": isinstance(getattr(tokenizer, "chat_template", None), str),
                           "template": template}
    chat = tokenizer.chat_template if out["has_chat_template"] else ""
    # which templates fit this tokenizer: all their special tokens known, most of them in the chat template
    known: dict[str, bool] = {}

    def is_known(t: str) -> bool:
        if t not in known:
            known[t] = _known(tokenizer, t)[0]
        return known[t]

    fits = []
    for name, tpl in TEMPLATES.items():
        emitted, stop_only = _emitted(tpl)
        if not emitted or not all(is_known(t) for t in emitted):
            continue
        in_chat = sum(1 for t in emitted if t in chat)
        stops_known = sum(1 for t in stop_only if is_known(t)) - len(stop_only)
        fits.append({"name": name, "tokens": len(emitted), "in_chat_template": in_chat,
                     "stop_words_unknown": -stops_known})
    fits.sort(key=lambda f: (-f["in_chat_template"], -f["tokens"], f["stop_words_unknown"], len(f["name"])))
    out["fitting_templates"] = fits[:12]
    if template is not None and template not in TEMPLATES:
        out["error"] = f"Template {template} does not exist."
    else:
        tpl_obj = TEMPLATES[template] if template else None
        if tpl_obj is not None:
            out["report"] = template_tokens_report(tokenizer, tpl_obj)
        added_before = dict(tokenizer.get_added_vocab())
        get_template_and_fix_tokenizer(tokenizer, DataArguments(template=template))
        # LLaMA-Factory adds tokens with add_special_tokens: they are added tokens, never the base vocabulary
        added = {t: i for t, i in tokenizer.get_added_vocab().items() if t not in added_before}
        out["added_tokens"] = [{"token": t, "id": i} for t, i in sorted(added.items(), key=lambda x: x[1])]
        out["eos_after"] = tokenizer.eos_token
        out["pad_after"] = tokenizer.pad_token
    return out


# ---------------------------------------------------------------- attention choice

def _attn_choice(configure: Any, fa_enum: Any, flash_attn: str, model_type: str | None, fa2_ok: bool) -> str:
    """Run LLaMA-Factory's ``configure_attn_implementation`` on a bare config of this model type,
    with transformers' FlashAttention-2 gate answering ``fa2_ok``; return what it requested."""
    import types

    import transformers.utils as tu

    child = types.SimpleNamespace
    cfg = child(model_type=model_type, vision_config=child(), text_config=child())
    args = child(flash_attn=fa_enum(flash_attn))
    orig = tu.is_flash_attn_2_available
    tu.is_flash_attn_2_available = lambda: fa2_ok  # LLaMA-Factory imports it from here at call time
    try:
        configure(cfg, args)
    except NotImplementedError as e:  # e.g. fa3 on any model but gpt_oss in 0.9.5: "Unknown attention type"
        return f"error: {e}"
    finally:
        tu.is_flash_attn_2_available = orig
    return (getattr(cfg, "_attn_implementation", None) or getattr(cfg, "attn_implementation", None)
            or getattr(cfg.text_config, "_attn_implementation", None) or "default")


def probe_attn_choice(flash_attn: str, model_type: str | None, architectures: list[str] | None = None) -> dict[str, Any]:
    """What LLaMA-Factory will ask transformers for, by its own code: ``configure_attn_implementation``
    for this ``flash_attn`` value and model type, once as on a machine where transformers' FlashAttention-2
    gate passes and once where it fails; and that gate's verdict for this environment given a GPU
    (``is_flash_attn_2_available`` with CUDA/HIP availability assumed: this worker has GPUs hidden).
    "default" means transformers' own choice: SDPA when the model class supports it, else eager."""
    import importlib

    import transformers.utils.import_utils as iu
    from llamafactory.extras.constants import AttentionFunction
    from llamafactory.model.model_utils.attention import configure_attn_implementation

    out: dict[str, Any] = {"flash_attn": flash_attn, "model_type": model_type}
    if model_type == "gpt_oss":  # LLaMA-Factory loads a hub kernel here, whatever flash_attn says
        out["with_fa2"] = out["without_fa2"] = "kernels-community/vllm-flash-attn3"
        out["fa2_gate"] = None
        return out
    try:
        AttentionFunction(flash_attn)
    except ValueError:
        out["error"] = f"unknown flash_attn value {flash_attn!r} (LLaMA-Factory accepts " \
                       f"{', '.join(m.value for m in AttentionFunction)})"
        return out
    cuda = iu.is_torch_cuda_available
    iu.is_flash_attn_2_available.cache_clear()
    iu.is_torch_cuda_available = lambda: True
    try:
        out["fa2_gate"] = bool(iu.is_flash_attn_2_available())
    finally:
        iu.is_torch_cuda_available = cuda
        iu.is_flash_attn_2_available.cache_clear()
    out["with_fa2"] = _attn_choice(configure_attn_implementation, AttentionFunction, flash_attn, model_type, True)
    out["without_fa2"] = _attn_choice(configure_attn_implementation, AttentionFunction, flash_attn, model_type, False)
    out["supports_sdpa"] = None
    for arch in architectures or []:
        try:
            cls = getattr(importlib.import_module("transformers"), arch)
            out["supports_sdpa"] = bool(getattr(cls, "_supports_sdpa", False))
            break
        except Exception:  # a custom (trust_remote_code) class: transformers decides at load time
            continue
    return out
