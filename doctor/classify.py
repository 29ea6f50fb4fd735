"""Failure-log classifier, shared by ``explain`` and the ``train`` supervisor.

Designed around the error messages of the libraries involved (torch, HIP/ROCm, RCCL/NCCL,
bitsandbytes, flash-attn, transformers, DeepSpeed, LLaMA-Factory), not around a corpus: each rule
is a regex on one line plus, where the same string means different things, the context around it
(frames of flash-attn vs bitsandbytes for "invalid device function"; training keys vs
``device_map`` for "Some keys are not used"). The root cause is the *first* matching error of the
failing rank; torchrun's ChildFailedError and shutdown noise at the end are ignored.

Reads only the tail of huge logs (bounded memory/time); never imports torch.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from doctor.config import InputError

MAX_BYTES = 4 * 1024 * 1024  # tail of a log read for classification
MAX_LINE = 4000

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
RANK_PREFIX = re.compile(r"^\s*(?:\[\d+\]\s*)?\[(?:rank|default)\s*\d+\]:\s?|^\s*\[rank-\d+/\d+\]")

# category -> (playbook, applied automatically by `train`, summary)
CATEGORIES: dict[str, tuple[str | None, bool, str]] = {
    "unknown_config_key": ("drop-unknown-keys", True,
                           "LLaMA-Factory rejected a key of the training YAML before loading anything. "
                           "Drop or rename the key(s) quoted below (`rocm-doctor fix` does it on a copy)."),
    "flash_attn_failure": ("disable-flash-attn", True,
                           "The flash-attention kernels failed (not built for this GPU/arch, ABI mismatch with torch, "
                           "or an unsupported head dim). Train with `flash_attn: sdpa` or `disabled`."),
    "bitsandbytes_unavailable": ("qlora-to-lora", True,
                                 "bitsandbytes could not run its GPU kernels (no ROCm/CUDA library for this setup). "
                                 "Fall back from QLoRA to 16-bit LoRA, or install a bitsandbytes built for your ROCm."),
    "oom": ("reduce-memory", True,
            "The GPU ran out of memory. Halve per_device_train_batch_size (doubling gradient_accumulation_steps "
            "keeps the effective batch), keep gradient checkpointing on, or shorten cutoff_len."),
    "hip_invalid_device_function": (None, False,
                                    "A kernel was launched that was not compiled for this GPU's architecture: the "
                                    "torch wheel (or an extension) lacks this gfx/sm target. Install a build that "
                                    "lists your arch; HSA_OVERRIDE_GFX_VERSION only for RDNA2/3 consumer cards."),
    "nccl_rccl_timeout": ("raise-ddp-timeout", True,
                          "A collective (RCCL/NCCL) timed out or failed. Early in the run with a low sequence number "
                          "this is usually rank 0 still preprocessing: raise ddp_timeout. Later, one rank hung or "
                          "the interconnect failed: check NCCL_SOCKET_IFNAME / P2P settings."),
    "nan_or_divergent_loss": ("disable-flash-attn", True,
                              "The loss became NaN/Inf or diverged. A wrong attention kernel is ruled out first "
                              "(`flash_attn: sdpa`/`disabled`), then the learning rate is lowered (playbook lower-lr)."),
    "bf16_unsupported": ("fix-precision", True,
                         "The precision flags were refused: bf16 and fp16 both set, a bf16 check that does not know "
                         "this GPU, or no GPU visible at all (transformers 5 words that case the same way: check "
                         "`rocm-doctor check`, BF16005). Keep one precision flag; on MI200/MI300 upgrade transformers "
                         "rather than dropping bf16."),
    "template_or_tokenizer": (None, False,
                              "The chat template or tokenizer setup is wrong for this model (no chat template, no pad "
                              "token, unknown template). Set `template:` to the model family's template."),
    "dataset_missing": (None, False,
                        "The dataset could not be found: the name is not in dataset_info.json or dataset_dir does not "
                        "resolve from the working directory. Fix dataset/dataset_dir; retrying will not help."),
    "model_path_or_hub": (None, False,
                          "The model could not be loaded: a wrong local path, no network to the Hub, or a gated repo. "
                          "Download the model and point model_name_or_path at the local directory."),
    "deepspeed_config": (None, False,
                         "The DeepSpeed JSON contradicts the training arguments. Set the values named below to "
                         "\"auto\" in the DeepSpeed config."),
    "gpu_not_detected": (None, False,
                         "torch found no usable GPU: a CPU/CUDA wheel on AMD GPUs, missing /dev/kfd permissions "
                         "(render/video groups), or a container without the devices. Run `rocm-doctor check`."),
    "killed_by_signal": (None, True,
                         "The process was killed by a signal (often the kernel's OOM killer, SIGKILL). It is retried "
                         "once unchanged, resuming from the last checkpoint."),
    "unknown": (None, False, "No known failure signature was found in the log."),
}

DETERMINISTIC = {"dataset_missing", "model_path_or_hub", "template_or_tokenizer", "deepspeed_config"}


@dataclass
class Rule:
    category: str
    pattern: re.Pattern[str]
    weight: int = 10  # ties between categories on the same line: higher wins


def R(cat: str, rx: str, weight: int = 10) -> Rule:
    return Rule(cat, re.compile(rx, re.IGNORECASE), weight)


RULES: list[Rule] = [
    R("unknown_config_key", r"Some (?:keys|specified arguments) are not used by the HfArgumentParser", 30),
    R("oom", r"OutOfMemoryError|out of memory|HIP out of memory|CUDA error: out of memory|hipErrorOutOfMemory|"
             r"RuntimeError: \[enforce fail at alloc_cpu|CUBLAS_STATUS_ALLOC_FAILED|Tried to allocate [\d.]+ [GM]iB|"
             # host RAM: the kernel's OOM killer takes a DataLoader worker first
             r"DataLoader worker \(pid \d+\) is killed by signal: Killed", 25),
    R("flash_attn_failure", r"FlashAttention (?:forward |backward )?only supports|FlashAttention backward for head dim|flash_attn_2_cuda|"
                            r"flash_attn_cuda|flash_attn_interface|flash-attn|flash_attn\b.*(?:error|not)|"
                            r"does not support this problem|Invalid archs: \[|"
                            r"FlashAttention2 has been toggled on|ck_tile|fmha_fwd|"
                            # LLaMA-Factory's configure_attn_implementation (fa3 on a model it cannot give it)
                            r"Unknown attention type: ", 18),
    R("bitsandbytes_unavailable", r"bitsandbytes|libbitsandbytes|bnb\.|BNB_ROCM_VERSION|"
                                  r"compiled without GPU support|CPU-only version of bitsandbytes|"
                                  r"quantize_4bit|dequantize_4bit|Linear4bit|Params4bit|"
                                  # bnb's igemmlt failure print: shapes with ctypes c_int, then "error detected"
                                  r"\(lda, ldb, ldc\): \(c_int|cublasLt ran into an error|^error detected", 16),
    R("hip_invalid_device_function", r"invalid device function|hipErrorInvalidDeviceFunction|"
                                     r"hipErrorNoBinaryForGpu|no kernel image is available|"
                                     r"Unable to find code object for all current devices|"
                                     r"no binary for gpu|TensileLibrary.*(?:No such file|for GPU arch)|"
                                     r"rocBLAS error: Cannot read", 20),
    # a GPU page fault: kernels for the wrong arch (HSA_OVERRIDE_GFX_VERSION) or a broken kernel; the frames
    # around it (flash-attn, bitsandbytes) refine it like "invalid device function"
    R("hip_invalid_device_function", r"Memory access fault by GPU node-\d+", 14),
    R("nccl_rccl_timeout", r"Watchdog caught collective operation timeout|ProcessGroupNCCL.*[Tt]imeout|"
                           r"NCCL error|RCCL error|ncclUnhandledCudaError|ncclSystemError|ncclInternalError|"
                           r"ncclRemoteError|DistBackendError|collective operation timeout|"
                           r"Socket Timeout|Connection reset by peer.*(?:gloo|nccl|rccl)", 15),
    R("nan_or_divergent_loss", r"'loss': '?nan|\"loss\": NaN|'grad_norm': '?(?:nan|inf)|loss(?:=| is |: )n?an\b|"
                               r"Loss is NaN|nan loss|detected.*\bnan\b|'loss': inf|grad_norm.: inf", 12),
    R("bf16_unsupported", r"Your setup doesn't support bf16|At most one of fp16 and bf16|"
                          r"bf16.*(?:not supported|requires)|does not support `pure_bf16`|"
                          r"Bfloat16 is only supported", 20),
    R("template_or_tokenizer", r"Template .* does not exist|chat_template is not set|"
                               r"Cannot use chat template|tokenizer does not have a padding token|"
                               r"Current template does not support|Stop words are required|"
                               r"Asking to pad but the tokenizer", 20),
    R("dataset_missing", r"Undefined dataset .* in|dataset_info\.json|Cannot open .*dataset|Cannot find valid samples|"
                         r"File not found.*\.json|Please specify dataset|DatasetNotFoundError|"
                         r"Couldn't find (?:a )?dataset|Unable to find .*(?:data|dataset)", 18),
    R("model_path_or_hub", r"gated repo|Repository Not Found|is not a local folder and is not a valid model identifier|"
                           r"Can't load (?:the )?(?:tokenizer|config|model) for|"
                           r"Max retries exceeded with url: /.*(?:resolve|api)|huggingface\.co.*timed out|"
                           r"Connection to huggingface\.co|LocalEntryNotFoundError|"
                           r"We couldn't connect to 'https://huggingface\.co'|OfflineModeIsEnabled|"
                           r"HFValidationError|Incorrect path_or_model_id|"
                           r"does not appear to have (?:a )?files? named", 17),
    R("deepspeed_config", r"Please correct the following DeepSpeed config values|"
                          r"DeepSpeed config values that mismatch|ds_config|zero_optimization.*(?:error|invalid)|"
                          r"Please use `FORCE_TORCHRUN=1` to launch DeepSpeed", 22),
    R("gpu_not_detected", r"No HIP GPUs are available|No CUDA GPUs are available|fp16 mixed precision requires a GPU|"
                          r"Torch not compiled with CUDA enabled|"
                          r"Found no NVIDIA driver|torch\.cuda\.is_available\(\) (?:is|returned) False|"
                          r"hipErrorNoDevice|no ROCm-capable device|HSA_STATUS_ERROR_OUT_OF_RESOURCES|"
                          r"Is CUDA available: False|Unable to open /dev/kfd|Failed to get HSA", 18),
]

NOISE = re.compile(r"ChildFailedError|torch\.distributed\.elastic|Root Cause \(first observed failure\)|"
                   r"sys\.exit\(main\(\)\)|^\s*File \"|^\s*\^+\s*$|^\s*frame #\d+|Sending process \d+ closing signal|"
                   r"failed \(exitcode: |Traceback \(most recent call last\)|^={5,}|^-{5,}|"
                   r"During handling of the above exception|The above exception was the direct cause", re.IGNORECASE)
# a tqdm progress bar ("  40%|████      | 4/10 [00:02<00:03,  1.9it/s]"): never evidence
PROGRESS = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\d+/\d+ \[\d+:\d+(?::\d+)?<")

FRAME = re.compile(r'File "([^"]+)", line \d+')
NOT_INSTALLED = re.compile(r"No module named '?bitsandbytes|No package metadata was found for (?:The ')?bitsandbytes|"
                           r"pip install (?:-U )?bitsandbytes", re.IGNORECASE)


@dataclass
class Classification:
    category: str
    playbook: str | None
    auto_fix: bool
    evidence: list[str] = field(default_factory=list)
    summary: str = ""
    line_no: int | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"category": self.category, "playbook": self.playbook, "auto_fix": self.auto_fix,
                "evidence": self.evidence, "summary": self.summary}


def clean_lines(text: str) -> list[str]:
    """ANSI colours removed, progress-bar carriage returns resolved, rank prefixes stripped, lines capped."""
    text = ANSI.sub("", text)
    out = []
    for raw in text.split("\n"):
        if "\r" in raw:
            parts = [p for p in raw.split("\r") if p.strip()]
            # keep every segment that carries an error, else the last (what the terminal showed)
            keep = [p for p in parts if re.search(r"error|exception|nan|killed", p, re.I)] or parts[-1:]
            raw = " ".join(keep)
        line = RANK_PREFIX.sub("", raw)[:MAX_LINE]
        out.append(line)
    return out


def read_log_tail(path_or_bytes: str | bytes, max_bytes: int = MAX_BYTES) -> str:
    """Decode a log (file path or bytes) tolerating mixed encodings; keep its last ``max_bytes``."""
    if isinstance(path_or_bytes, bytes):
        data = path_or_bytes[-max_bytes:]
    else:
        with open(path_or_bytes, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    if b"\x00" in data[:8192] and data.count(b"\x00") > len(data) // 10:
        data = data.replace(b"\x00", b"")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace")


_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]")


def looks_binary(text: str) -> bool:
    """More than 5 % control characters (besides tab, newline, CR, form feed, ESC for colours) in the first
    8 KiB: an archive, a core dump or a checkpoint, not a log."""
    head = text[:8192]
    return bool(head) and len(_CONTROL.findall(head)) > 0.05 * len(head)


def read_log(arg: str) -> str:
    """A log named on the command line (a path, or ``-`` for stdin), its tail decoded; bad input raises
    :class:`InputError` (missing, a directory, unreadable, binary)."""
    if arg == "-":
        text = read_log_tail(sys.stdin.buffer.read())
    else:
        if not os.path.exists(arg):
            raise InputError(f"log not found: {arg}")
        if os.path.isdir(arg):
            raise InputError(f"log is a directory: {arg}")
        try:
            text = read_log_tail(arg)
        except OSError as e:
            raise InputError(f"cannot read log {arg}: {e.strerror or e}") from None
    if looks_binary(text):
        raise InputError(f"{'stdin' if arg == '-' else arg} is binary, not a text log")
    return text


def _context_category(lines: list[str], i: int, cat: str) -> str:
    """Refine a generic match by the frames and lines around it."""
    window = "\n".join(lines[max(0, i - 40): i + 15])
    if cat == "hip_invalid_device_function":
        if re.search(r"flash_attn|flash-attn|ck_tile|fmha|aotriton|scaled_dot_product", window, re.I):
            return "flash_attn_failure"
        if re.search(r"bitsandbytes|bnb[./]|libbitsandbytes", window, re.I):
            return "bitsandbytes_unavailable"
    if cat == "bitsandbytes_unavailable":
        if re.search(r"invalid device function|hipErrorNoBinaryForGpu", window, re.I):
            return "bitsandbytes_unavailable"
    if cat == "nccl_rccl_timeout" and re.search(r"out of memory", window, re.I):
        return "oom"
    return cat


def _unknown_keys(line: str) -> list[str]:
    m = re.search(r"HfArgumentParser: \[(.*)\]", line)
    return re.findall(r"'([^']+)'", m.group(1)) if m else []


TRAINING_KEYS = {"per_device_train_batch_size", "learning_rate", "num_train_epochs", "output_dir", "do_train",
                 "gradient_accumulation_steps", "lr_scheduler_type", "logging_steps", "save_steps", "stage",
                 "finetuning_type", "dataset", "cutoff_len", "bf16", "fp16", "lora_target", "template"}


def _is_source_line(lines: list[str], i: int) -> bool:
    """The quoted source line under a traceback frame (``raise ValueError(f"...")``): not the error itself."""
    return i > 0 and lines[i].startswith(" ") and bool(FRAME.search(lines[i - 1]))


def classify_text(text: str, exit_code: int | None = None, signal_name: str | None = None) -> Classification:
    lines = clean_lines(text)
    first = _first_error(lines, skip_source=True) or _first_error(lines, skip_source=False)
    return _classification(lines, first, exit_code, signal_name)


def _first_error(lines: list[str], skip_source: bool) -> tuple[int, Rule] | None:
    first: tuple[int, Rule] | None = None
    for i, line in enumerate(lines):
        if not line.strip() or NOISE.search(line) and not re.search(r"Error:|error:", line):
            continue
        if skip_source and _is_source_line(lines, i):
            continue
        best = None
        for rule in RULES:
            if rule.pattern.search(line) and (best is None or rule.weight > best.weight):
                best = rule
        if best is None:
            continue
        # warnings are context, not causes: a line must look like an error, or be a loss/log record
        if re.match(r"\s*\[?(WARNING|WARN|INFO)\b", line) and best.category not in ("nan_or_divergent_loss",):
            if not re.search(r"Error|error:|Exception|Traceback|failed|nan", line):
                continue
        first = (i, best)
        if best.category != "nan_or_divergent_loss":
            break  # the first real error is the root cause
        # a NaN line may precede a crash caused by it; keep it, but keep scanning for a hard error
        for j in range(i + 1, len(lines)):
            for rule in RULES:
                if rule.category in ("oom", "flash_attn_failure", "hip_invalid_device_function") and \
                        rule.pattern.search(lines[j]) and not NOISE.search(lines[j]):
                    first = (j, rule)
                    break
            else:
                continue
            break
        break
    return first


def _classification(lines: list[str], first: tuple[int, Rule] | None, exit_code: int | None,
                    signal_name: str | None) -> Classification:
    if first is None:
        if signal_name or (exit_code is not None and exit_code in (137, -9, 143, -15)):
            cat = "killed_by_signal"
            pb, auto, summ = CATEGORIES[cat]
            ev = [ln for ln in lines if re.search(r"Killed|SIGKILL|signal", ln)][-3:]
            return Classification(cat, pb, auto, ev, summ, details={"signal": signal_name, "exit_code": exit_code})
        pb, auto, summ = CATEGORIES["unknown"]
        tail = [ln for ln in lines if ln.strip()][-3:]
        return Classification("unknown", pb, auto, tail, summ)
    i, rule = first
    cat = _context_category(lines, i, rule.category)
    details: dict[str, Any] = {}
    summary_extra = ""
    if cat == "unknown_config_key":
        keys = _unknown_keys(lines[i])
        details["keys"] = keys
        if len(set(keys) & TRAINING_KEYS) >= 3:
            summary_extra = (" The rejected keys are ordinary training keys: the YAML was probably passed to the "
                             "wrong subcommand (e.g. `llamafactory-cli chat/export` instead of `train`).")
    if cat == "nccl_rccl_timeout":
        m = re.search(r"SeqNum=(\d+)", "\n".join(lines[i:i + 5]))
        if m:
            seq = int(m.group(1))
            details["seq_num"] = seq
            summary_extra = (f" SeqNum {seq} is early: rank 0 was most likely still preprocessing; raise ddp_timeout."
                             if seq < 50 else f" SeqNum {seq} is mid-training: one rank stopped issuing collectives "
                             "(hang, straggler or a dead link); raising ddp_timeout alone rarely helps.")
    pb, auto, summ = CATEGORIES[cat]
    if cat == "bitsandbytes_unavailable" and NOT_INSTALLED.search("\n".join(lines[max(0, i - 3):i + 4])):
        details["not_installed"] = True
        summ = ("bitsandbytes is not installed in this environment, and QLoRA (`quantization_bit`) needs it. Fall "
                "back from QLoRA to 16-bit LoRA, or install bitsandbytes (>= 0.49 ships ROCm binaries).")
    if cat == "nccl_rccl_timeout" and details.get("seq_num", 0) >= 50:
        pb, auto = None, False
    ev_idx = [i] + [j for j in range(i + 1, min(len(lines), i + 6))
                    if lines[j].strip() and not NOISE.search(lines[j]) and not PROGRESS.search(lines[j])
                    and not _is_source_line(lines, j)][:3]
    evidence = [lines[j].strip()[:500] for j in ev_idx]
    return Classification(cat, pb, auto, evidence, summ + summary_extra, line_no=i + 1, details=details)


def classify_file(path: str, **kw: Any) -> Classification:
    return classify_text(read_log_tail(path), **kw)
