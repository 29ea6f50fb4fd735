"""Turn a training log into structure before anything judges it.

What comes out (:class:`ParsedLog`):
- the cleaned lines (ANSI colours gone, progress-bar carriage returns resolved, rank and host prefixes
  stripped, each line's rank kept);
- the Python tracebacks, parsed per rank stream (ranks interleave their lines): frames with file,
  package and function, the exception type and message, and the chains
  (``During handling of the above exception ...`` / ``The above exception was the direct cause ...``);
  in a chain the first printed exception is the original, the innermost;
- exception lines printed without a traceback (a logger's ``ERROR`` line, a truncated paste);
- HF Trainer's log dicts and ``trainer_log.jsonl`` records (loss, grad_norm);
- launcher summaries: torchrun's ``Root Cause (first observed failure)`` block (rank, exit code, signal),
  the DeepSpeed launcher's ``exits with return code``, accelerate's ``died with <Signals...>``.

Bounded: the caller hands in a tail (classify reads at most 4 MiB), lines are capped, and only a bounded
number of tracebacks and exception lines is kept.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

MAX_LINE = 4000
MAX_TRACEBACKS = 200
MAX_EXC_LINES = 400

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
# [rank3]: / [default0]: (torchrun --tee) / [1,0]<stderr>: (mpirun) / [rank-1/8] / "3: " (srun --label)
RANK_PREFIX = re.compile(r"^\s*(?:\[\d+\]\s*)?\[(?:rank|default)\s*(\d+)\]:\s?|^\s*\[rank-?(\d+)/\d+\]\s*|"
                         r"^\s*\[(\d+),\d+\]<std(?:out|err)>:\s?")
SRUN_PREFIX = re.compile(r"^\s{0,2}(\d{1,4}): (?=Traceback|\s+File \"|\[?[A-Za-z_][\w.]*(?:Error|Exception)\b)")
HOST_PREFIX = re.compile(r"^([A-Za-z][\w.-]{1,62}): (?=Traceback \(most|\s+File \"|[A-Za-z_][\w.]*(?:Error|Exception)\b|"
                         r"\[(?:rank|default)\d+\]:)")
# the UTC stamp GitHub Actions, Kubernetes (`kubectl logs --timestamps`) and Docker (`docker logs -t`) put before
# every line: a traceback pasted from them is a traceback like any other
CI_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z ")
# a line a reporter set in Markdown bold in the issue ("**TypeError: ...**"): the text inside is the log's
MD_BOLD = re.compile(r"^\s*\*\*(?=[^*\s])(.*[^*\s])\*\*\s*$")
TRACEBACK = re.compile(r"^\s*Traceback \(most recent call last\):")
# a frame; its quotes escaped (`File \"/x.py\"`) where a log was pasted out of a JSON string
FRAME = re.compile(r'^\s*File \\?"([^"]+?)\\?", line (\d+)(?:, in (.+))?')
IPY_FRAME = re.compile(r"^\s*File (\S+?\.py|<[\w.-]+>):(\d+)(?:, in (.+))?")  # IPython / rich tracebacks
CHAIN_CONTEXT = re.compile(r"During handling of the above exception, another exception occurred")
CHAIN_CAUSE = re.compile(r"The above exception was the direct cause of the following exception")
EXC_LINE = re.compile(r"^\s*(?:E\s+)?((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Fault|"
                      r"Failure|Warning|Timeout|Abort)|KeyError|StopIteration|AssertionError|NotImplementedError)"
                      r"(?:: ?(.*))?$")
# a record of a logging library, not a continuation of an exception message
LOG_RECORD = re.compile(r"^\s*(?:\[?\d{4}-\d\d-\d\d[ T]\d|\[?(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\b|"
                        r"[IWEF]\d{4} \d\d:\d\d|\d{1,3}%\|)")
WARNING_LINE = re.compile(r"^\s*\[?(?:WARNING|WARN)\b|\b(?:User|Future|Deprecation|Runtime|Resource)Warning\b|"
                          r"\bwarnings\.warn\(|^\s*warn\(")
PROGRESS_BAR = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\d+/\d+ \[\d+:\d+(?::\d+)?<")
HF_DICT = re.compile(r"\{'(?:loss|train_loss|grad_norm|eval_loss)'.*?\}")
HF_ITEM = re.compile(r"'(\w+)': '?([^,'}]*)'?")
SITE = re.compile(r"(?:site|dist)-packages[/\\]([A-Za-z_][\w]*)")
# llmtuner: LLaMA-Factory's package name before 0.6 (src/llmtuner/...), still in many pasted logs
SRC_PKG = re.compile(r"[/\\]src[/\\](llamafactory|llmtuner|transformers|peft|trl|accelerate|deepspeed|torch|datasets)[/\\]")
# a traceback's quoted source line that raises (the evidence left when a paste is cut before the exception)
QUOTED_RAISE = re.compile(r"^\s*(?:-*>\s*)?(?:\d+\s+)?raise ((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*)\(\s*(?:f|r|rf|fr)?[\"'](.{8,}?)(?:[\"']\s*(?:\+|%|\)|,|\.format).*)?$")
WRAPPERS = {"ChildFailedError", "CalledProcessError", "SignalException", "KeyboardInterrupt", "SystemExit"}


@dataclass
class Frame:
    path: str
    line: int
    func: str
    package: str
    code: str = ""    # the quoted source line under it, when the log shows one

    @property
    def where(self) -> str:
        """The path below the package (``llamafactory/data/template.py``), for frame rules."""
        p = self.path.replace("\\", "/")
        i = p.rfind(f"/{self.package}/") if self.package != "user" else -1
        return p[i + 1:] if i >= 0 else "/".join(p.rsplit("/", 2)[-2:])


@dataclass
class Exc:
    """One exception: what was raised, where, and how it relates to the one printed after it."""

    type: str
    message: str
    line_no: int                       # index of the exception line in ParsedLog.lines
    frames: list[Frame] = field(default_factory=list)
    rank: int | None = None
    in_traceback: bool = True
    chain_index: int = 0               # 0 = the original (innermost) exception of its chain

    @property
    def text(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type

    @property
    def short_type(self) -> str:
        return self.type.rsplit(".", 1)[-1]

    @property
    def package(self) -> str:
        """The package that raised it: the innermost frame's ('user' for the script's own code). Code a library
        generated at run time (``File "<string>"``: unsloth's patched trainer loop, a dataclass's ``__init__``) has
        no file of its own: the frame that called into it names the package."""
        real = [f for f in self.frames if f.package != GENERATED]
        return (real or self.frames)[-1].package if self.frames else ""

    @property
    def packages(self) -> list[str]:
        return list(dict.fromkeys(f.package for f in self.frames))


@dataclass
class Traceback:
    chain: list[Exc]                   # printed order: chain[0] is the original exception
    rank: int | None = None

    @property
    def start(self) -> int:
        return self.chain[0].line_no

    @property
    def final(self) -> Exc:
        return self.chain[-1]


@dataclass
class ParsedLog:
    lines: list[str]
    ranks: list[int | None]
    tracebacks: list[Traceback] = field(default_factory=list)
    loose: list[Exc] = field(default_factory=list)       # exception lines outside any traceback
    quoted: list[Exc] = field(default_factory=list)      # `raise X("...")` source lines
    hf_logs: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    launcher: dict[str, Any] = field(default_factory=dict)
    stamped: bool = False  # the lines carried a CI/container UTC stamp: each one is a timed record

    def window(self, i: int, before: int = 40, after: int = 15) -> str:
        return "\n".join(self.lines[max(0, i - before): i + after])

    def exceptions(self) -> list[Exc]:
        """Every exception, tracebacks' and loose ones, in log order."""
        out = [e for tb in self.tracebacks for e in tb.chain] + self.loose
        return sorted(out, key=lambda e: e.line_no)


GENERATED = "generated"  # the package of a frame in code exec'd from a string


def package_of(path: str) -> str:
    if path == "<string>" or re.fullmatch(r"<\w+-gen-\d+>", path):  # exec'd code, decorator's generated wrappers
        return GENERATED
    m = SITE.search(path)
    if m:
        return m.group(1)
    m = SRC_PKG.search(path)
    if m:
        return m.group(1)
    p = path.replace("\\", "/")
    if p.startswith("<frozen") or re.search(r"/(?:lib/)?python3\.\d+/(?!.*-packages/)", p):
        return "stdlib"
    for pkg in ("llamafactory", "transformers", "deepspeed", "torch", "peft", "trl", "accelerate", "bitsandbytes",
                "flash_attn", "triton"):
        if f"/{pkg}/" in p:
            return pkg
    return "user"


# where a progress bar left no newline before the next record: "...2.88s/it][rank5]:[E602 ...", "...it/s]Traceback"
GLUED = re.compile(r"(?<=[\]\w%])\s*(?=\[(?:rank|default)\d+\]:|Traceback \(most recent call last\)|"
                   r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+\] \[(?:INFO|WARNING|ERROR)\]|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ |"
                   r"(?:WARNING|ERROR|INFO|CRITICAL):[\w.]+:)")


def clean(text: str) -> tuple[list[str], list[int | None], bool]:
    """Lines as a terminal showed them, prefixes stripped, each line's rank; whether CI stamps were stripped."""
    text = ANSI.sub("", text)
    lines: list[str] = []
    ranks: list[int | None] = []
    raws: list[str] = []
    for raw in text.split("\n"):
        raws += GLUED.split(raw) if len(raw) > 40 and GLUED.search(raw) else [raw]
    stamped = False
    host_prefix = ""  # "worker-3: " once a host's traceback started: its source lines carry it too
    for raw in raws:
        if "\r" in raw:
            parts = [p for p in raw.split("\r") if p.strip()]
            # keep every segment that carries an error, else the last (what the terminal showed)
            keep = [p for p in parts if re.search(r"error|exception|nan|killed|traceback", p, re.I)] or parts[-1:]
            raw = " ".join(keep)
        if (m := CI_STAMP.match(raw)):
            raw, stamped = raw[m.end():], True
        if (m := MD_BOLD.match(raw)):
            raw = m.group(1)
        rank = None
        m = RANK_PREFIX.match(raw)
        if m:
            rank = int(next(g for g in m.groups() if g is not None))
            raw = raw[m.end():]
        else:
            m = SRUN_PREFIX.match(raw)
            if m:
                rank, raw = int(m.group(1)), raw[m.end():]
            else:
                m = HOST_PREFIX.match(raw)
                if m and not EXC_LINE.match(raw):
                    host_prefix = raw[:m.end()]
                    raw = raw[m.end():]
                elif host_prefix and raw.startswith(host_prefix):
                    raw = raw[len(host_prefix):]
        lines.append(raw[:MAX_LINE].rstrip())
        ranks.append(rank)
    return lines, ranks, stamped


def _frame(line: str) -> Frame | None:
    m = FRAME.match(line) or IPY_FRAME.match(line)
    if not m:
        return None
    return Frame(m.group(1), int(m.group(2)), (m.group(3) or "").strip(), package_of(m.group(1)))


def _banner(line: str) -> bool:
    return bool(CHAIN_CONTEXT.search(line) or CHAIN_CAUSE.search(line))


def _parse_one(idx: list[int], lines: list[str], k: int) -> tuple[list[Frame], int]:
    """Frames from ``k`` (just after the ``Traceback`` line) up to the exception line; returns its position."""
    frames: list[Frame] = []
    n = len(idx)
    frame_indent = 0
    while k < n:
        ln = lines[idx[k]]
        f = _frame(ln)
        indent = len(ln) - len(ln.lstrip())
        if f is not None:
            frames.append(f)
            frame_indent = indent
        elif frames and 0 < indent < frame_indent and EXC_LINE.match(ln):
            break  # a traceback pasted indented as a whole: its exception line sits left of the frames
        elif frames and not frames[-1].code and ln.startswith((" ", "\t")) and ln.strip() \
                and not re.match(r"^\s*[\^~]+\s*$", ln):
            frames[-1].code = ln.strip()[:300]
        elif not (not ln.strip() or ln.startswith((" ", "\t")) or re.match(r"^\s*[\^~]+\s*$", ln)
                  or re.match(r"^-*>?\s*\d+\s", ln) or ln.strip() == "..." or ln.startswith("[Previous line")):
            break  # not a frame, source line, caret or IPython arrow: the exception line
        k += 1
    return frames, k


def _exception_at(lines: list[str], i: int) -> tuple[str, str]:
    m = EXC_LINE.match(lines[i])
    if m:
        return m.group(1), (m.group(2) or "").strip()
    head, _, rest = lines[i].partition(": ")
    if re.fullmatch(r"[\w.:]+", head.strip()):  # a class the pattern does not know (c10::Error, ...)
        return head.strip(), rest.strip()
    return "", lines[i].strip()


def _parse_stream(idx: list[int], lines: list[str], rank: int | None) -> list[Traceback]:
    """Tracebacks in one rank's lines (``idx`` are indices into ``lines``)."""
    out: list[Traceback] = []
    chain: list[Exc] = []
    k, n = 0, len(idx)
    while k < n and len(out) < MAX_TRACEBACKS:
        line = lines[idx[k]]
        headless = not chain and _frame(line) is not None  # a paste that starts inside a traceback
        if not TRACEBACK.match(line) and not headless:
            if chain and line.strip() and not _banner(line):
                out.append(Traceback(chain, rank))  # a banner that no traceback followed (a cut paste)
                chain = []
            k += 1
            continue
        frames, k = _parse_one(idx, lines, k if headless else k + 1)
        if k >= n:  # the paste ends inside the traceback: keep its frames (the raising package still speaks)
            if frames:
                chain.append(Exc("", "", idx[-1], frames, rank, True, len(chain)))
            break
        exc_i = idx[k]
        etype, msg = _exception_at(lines, exc_i)
        k += 1
        cont = []
        while k < n and len(cont) < 30:  # a message over several lines
            ln = lines[idx[k]]
            if not ln.strip() or TRACEBACK.match(ln) or _banner(ln) or LOG_RECORD.match(ln) or _frame(ln):
                break
            cont.append(ln.strip())
            k += 1
        if cont:
            msg = (msg + "\n" + "\n".join(cont)).strip()
        chain.append(Exc(etype, msg, exc_i, frames, rank, True, len(chain)))
        j = k
        while j < n and not lines[idx[j]].strip():
            j += 1
        if j < n and _banner(lines[idx[j]]):
            k = j + 1  # the next traceback continues this chain
            continue
        out.append(Traceback(chain, rank))
        chain = []
    if chain:
        out.append(Traceback(chain, rank))
    return out


_TORCHRUN_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)")
_TORCHRUN_EXIT = re.compile(r"^\s*exitcode\s*:\s*(-?\d+)")
_SIGNAL = re.compile(r"Signal (\d+) \((SIG\w+)\) received by PID|died with <Signals\.(SIG\w+): (\d+)>")
_DS_EXIT = re.compile(r"exits with return code = (-?\d+)|failed \(exitcode: (-?\d+)\)")


def _launcher(lines: list[str]) -> dict[str, Any]:
    info: dict[str, Any] = {}
    for i, ln in enumerate(lines):
        if "Root Cause (first observed failure)" in ln:
            info["root_cause_line"] = i
            for ln2 in lines[i + 1:i + 12]:
                m = _TORCHRUN_RANK.match(ln2)
                if m:
                    info["rank"] = int(m.group(1))
                m = _TORCHRUN_EXIT.match(ln2)
                if m:
                    info["exit_code"] = int(m.group(1))
        m = _SIGNAL.search(ln)
        if m:
            info["signal"] = m.group(2) or m.group(3)
            info.setdefault("signal_line", i)
        m = _DS_EXIT.search(ln)
        if m:
            info.setdefault("exit_code", int(m.group(1) or m.group(2)))
            info.setdefault("signal_line", i)
    if "signal" not in info and isinstance(info.get("exit_code"), int) and info["exit_code"] < 0:
        import signal as _s

        try:
            info["signal"] = _s.Signals(-info["exit_code"]).name
        except ValueError:
            pass
    return info


def hf_log_values(line: str) -> dict[str, float] | None:
    """``{'loss': '11.76', 'grad_norm': 'nan', ...}`` as HF Trainer prints it (values quoted in transformers 5),
    or a ``trainer_log.jsonl`` record; the numeric values."""
    s = line.strip()
    if s.startswith("{\"") and '"loss"' in s and ("current_steps" in s or '"grad_norm"' in s or '"epoch"' in s):
        try:
            rec = json.loads(s)
        except ValueError:
            return None
        vals: dict[str, float] = {}
        for k, v in rec.items():
            try:
                vals[k] = float(v)
            except (TypeError, ValueError):
                continue
        return vals or None
    found = list(HF_DICT.finditer(line))
    if not found:
        return None
    vals = {}
    for k, v in HF_ITEM.findall(found[-1].group(0)):
        try:
            vals[k] = float(v)
        except ValueError:
            continue
    return vals


def parse(text: str) -> ParsedLog:
    lines, ranks, stamped = clean(text)
    log = ParsedLog(lines, ranks, stamped=stamped)
    streams: dict[int | None, list[int]] = {}
    for i, r in enumerate(ranks):
        streams.setdefault(r, []).append(i)
    for r, idx in streams.items():
        log.tracebacks += _parse_stream(idx, lines, r)
    log.tracebacks.sort(key=lambda t: t.start)
    in_tb = {e.line_no for tb in log.tracebacks for e in tb.chain}
    for i, ln in enumerate(lines):
        if i in in_tb or len(log.loose) >= MAX_EXC_LINES:
            continue
        m = EXC_LINE.match(ln)
        if m and m.group(2) is not None and not WARNING_LINE.search(ln) and not m.group(1).endswith("Warning"):
            msg = [m.group(2).strip()]
            for nxt in lines[i + 1:i + 6]:  # a message over several lines (cut from its traceback)
                if not nxt.strip() or TRACEBACK.match(nxt) or LOG_RECORD.match(nxt) or _frame(nxt) \
                        or EXC_LINE.match(nxt):
                    break
                msg.append(nxt.strip())
            log.loose.append(Exc(m.group(1), "\n".join(msg).strip(), i, [], ranks[i], False, 0))
        elif "raise " in ln and len(log.quoted) < MAX_EXC_LINES:
            q = QUOTED_RAISE.match(ln)
            if q:
                log.quoted.append(Exc(q.group(1), q.group(2).strip(), i, [], ranks[i], False, 0))
        if ("{'" in ln or ln.lstrip().startswith('{"')) and len(log.hf_logs) < 10000:
            vals = hf_log_values(ln)
            if vals:
                log.hf_logs.append((i, vals))
    log.launcher = _launcher(lines)
    return log
