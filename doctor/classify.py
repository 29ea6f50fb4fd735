"""Failure-log classifier, shared by ``explain`` and the ``train`` supervisor: parse, then judge.

1. :mod:`doctor.logparse` turns the log into structure: tracebacks per rank with frames, packages and
   chained exceptions, loose exception lines, HF log dicts, launcher summaries.
2. The root cause is the first failing rank's original exception (the innermost of its chain; torchrun's
   summary names the rank). Its message is matched against the signature catalog, data in
   ``playbooks/signatures.yaml`` (curated, with the source of each message) and
   ``playbooks/signatures-library.json`` (every ``raise``/``logger.error`` message of the libraries a run
   goes through, harvested by ``scripts/harvest_messages.py`` and labelled). The exception line outranks
   frame context: context only refines a generic message (``invalid device function`` inside flash-attn
   frames is flash-attn's).
3. Other evidence competes at lower weight: the outer exceptions of the chain, other exceptions, runtime
   lines (the HSA runtime's fault lines, RCCL warnings), NaN or zero losses in HF log dicts, and the
   launcher's signal. Where no message matches, the package that raised the root exception decides at low
   confidence (an exception raised in ``deepspeed/`` is DeepSpeed's).
4. Honest output: a confidence and up to two alternatives; ``unknown`` below 0.4 rather than a confident
   wrong category.

Reads only the tail of huge logs (bounded memory and time); never imports torch.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from doctor.config import InputError
from doctor.logparse import FRAME, LOG_RECORD, PROGRESS_BAR, WARNING_LINE, WRAPPERS, Exc, ParsedLog, parse

MAX_BYTES = 4 * 1024 * 1024  # tail of a log read for classification
THRESHOLD = 0.4               # below this the answer is `unknown`
CATALOG_DIR = Path(__file__).resolve().parent.parent / "playbooks"
CURATED = CATALOG_DIR / "signatures.yaml"
LIBRARY = CATALOG_DIR / "signatures-library.json"

# weight of a candidate by where it was found (the root exception outranks everything else)
W_ROOT, W_CHAIN, W_OTHER, W_LINE, W_FATAL, W_LOSS, W_QUOTED, W_TEXT = 1.0, 0.92, 0.8, 0.78, 0.9, 0.85, 0.72, 0.74
W_CUT = 0.9  # a frame-judged traceback whose exception line the paste lost
# confidence of the verdicts read from the log's shape (STRUCTURAL documents them)
C_LOSS_NONFINITE, C_LOSS_ZERO, C_LAUNCHER, C_SILENT_DEATH, C_STALL = 0.88, 0.82, 0.62, 0.5, 0.45
C_LOSS_EXPLODING, C_P2P_STALL = 0.62, 0.55


# ------------------------------------------------------------------ the catalog

@dataclass(frozen=True)
class Category:
    name: str
    summary: str
    playbook: str | None = None
    auto: bool = False
    stop: bool = False


@dataclass
class Signature:
    id: str
    category: str
    source_pattern: str
    confidence: float
    where: str = "exception"           # exception | line | fatal
    type: re.Pattern[str] | None = None
    package: re.Pattern[str] | None = None
    extract: dict[str, str] = field(default_factory=dict)
    refine: list[tuple[str, str, bool]] = field(default_factory=list)  # (regex, category, over the whole log)
    source: str = ""
    curated: bool = True
    warning: bool = False              # may match a warning line (a library warns just before it fails)
    playbook: str | None = None        # this signature's remedy, where it differs from its category's
    # one entry per way the pattern can match: the words that way needs, joined with "&" (longest first; "~w": w
    # inside a word); a text is tried only where every word of some entry is in it. None: no anchor (always tried)
    anchors: list[str] | None = None
    _rx: re.Pattern[str] | None = None

    @property
    def pattern(self) -> re.Pattern[str]:
        """Compiled on first use: a log meets a handful of the catalog's signatures, not all of them."""
        if self._rx is None:
            self._rx = re.compile(self.source_pattern, re.I | re.M)
        return self._rx


@dataclass
class Catalog:
    categories: dict[str, Category]
    signatures: list[Signature]
    frame_rules: list[dict[str, Any]]  # the catalog's `frames:` entries, compiled on first use (most logs need none)

    def __post_init__(self) -> None:
        self.exception_sigs = [s for s in self.signatures if s.where == "exception"]
        self.line_sigs = [s for s in self.signatures if s.where in ("line", "fatal")]
        # an index from a required word to the signatures that need it: a text is matched only against the
        # signatures one of its words can satisfy (the catalog has hundreds; a log has thousands of lines)
        # (the entry's first word indexes it; the rest of its words are checked before the pattern is compiled)
        self.by_word: dict[str, list[tuple[Signature, tuple[str, ...]]]] = {}
        self.by_part: dict[str, list[tuple[Signature, tuple[str, ...]]]] = {}
        self.unanchored: list[Signature] = []
        self._order = {id(s): i for i, s in enumerate(self.signatures)}  # catalog order, built once
        for sig in self.signatures:
            if sig.anchors is None:
                self.unanchored.append(sig)
            else:
                for entry in sig.anchors:
                    first, *rest = entry.split("&")
                    if first.startswith("~"):  # contained in the text, maybe inside a longer word
                        self.by_part.setdefault(first[1:], []).append((sig, tuple(rest)))
                    else:
                        self.by_word.setdefault(first, []).append((sig, tuple(rest)))

    @cached_property
    def frames(self) -> list[tuple[re.Pattern[str], str, float, str | None]]:
        """(path rule, category, confidence, playbook) per frame rule."""
        return [(re.compile(f["path"], re.I | re.M), f["category"], float(f["confidence"]), f.get("playbook"))
                for f in self.frame_rules]

    def signature(self, sig_id: str) -> Signature:
        return self.ids()[sig_id]

    def ids(self) -> dict[str, Signature]:
        if not hasattr(self, "_by_id"):
            self._by_id = {s.id: s for s in self.signatures}
        return self._by_id

    def candidates(self, text: str) -> list[Signature]:
        """The signatures that could match ``text`` (the rest certainly cannot), in catalog order."""
        found: dict[int, Signature] = {id(s): s for s in self.unanchored}
        low = text.lower()
        words = set(_WORD.findall(low))

        def holds(rest: tuple[str, ...]) -> bool:
            return all(w[1:] in low if w.startswith("~") else w in words for w in rest)

        for w in words:
            for sig, rest in self.by_word.get(w, ()):
                if not rest or holds(rest):
                    found[id(sig)] = sig
        for part, entries in self.by_part.items():
            if part in low:
                for sig, rest in entries:
                    if not rest or holds(rest):
                        found[id(sig)] = sig
        order = self._order
        return sorted(found.values(), key=lambda s: order[id(s)])


_WORD = re.compile(r"[a-z0-9_]{4,}")


class _TooMany(Exception):
    """More ways to match than :func:`_options` follows: the pattern gets no anchors (always tried)."""


OPEN, EDGE = "\x01", "\x00"  # unknown text may touch the run here / a word boundary is certain here
_RUN_WORD = re.compile("[a-z0-9_\x01]+")


def _options(seq: Any, limit: int = 64) -> list[list[str]]:
    """The ways a parsed regex can match, each as the literal runs it needs (``re._parser`` AST). Literal text
    on both sides of a group is one run (``flash_attn(?:_2)?_cuda`` needs ``flash_attn_cuda`` or
    ``flash_attn_2_cuda``); where unknown text may touch a run (a class, ``.*``, the pattern's own ends) the run
    is marked OPEN there, where a word boundary is certain (``^``, ``\\b``, ``\\s``) EDGE. Every way is kept or
    none (:class:`_TooMany`): a way left out would let a text that matches it skip the pattern."""
    from re import _constants as c

    opts: list[list[str]] = [[""]]

    def add(ch: str) -> None:
        for o in opts:
            o[-1] += ch

    def open_gap() -> None:
        for o in opts:
            if not o[-1].endswith(OPEN):
                o[-1] += OPEN
                o.append(OPEN)

    def join(ways: list[list[list[str]]]) -> None:
        nonlocal opts
        inner = [w for ws in ways for w in ws]
        if len(opts) * len(inner) > limit:
            raise _TooMany
        opts = [a[:-1] + [a[-1] + b[0]] + b[1:] for a in opts for b in inner]

    def word_free(op: Any, av: Any) -> bool:
        """A single character that is never a word character ([a-z0-9_])."""
        if op is c.LITERAL:
            return not re.match(r"[a-z0-9_]", chr(av).lower())
        if op is c.CATEGORY:
            return av in (c.CATEGORY_SPACE, c.CATEGORY_NOT_WORD)
        if op is c.IN:
            return all(word_free(o, a) for o, a in av)
        return False

    for op, av in seq:
        if op is c.LITERAL:
            add(chr(av).lower() if not word_free(op, av) else EDGE)
        elif op is c.AT:
            if av in (c.AT_BOUNDARY, c.AT_BEGINNING, c.AT_BEGINNING_LINE, c.AT_BEGINNING_STRING, c.AT_END,
                      c.AT_END_LINE, c.AT_END_STRING):
                add(EDGE)
            else:
                open_gap()
        elif op in (c.IN, c.CATEGORY) and word_free(op, av):
            add(EDGE)
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT) and len(av[2]) == 1 and word_free(*av[2][0]):
            # `\\s*`, ` ?`, `[-_ ]+`: a separator, absent (the two sides touch) or a certain boundary
            join([[[""]], [[EDGE]]] if av[0] == 0 else [[[EDGE]]])
        elif op is c.SUBPATTERN:
            join([_options(av[-1], limit)])
        elif op is c.BRANCH:
            join([_options(alt, limit) for alt in av[1]])
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[0] == 0 and av[1] == 1:  # optional: with or without
            join([[[""]], _options(av[2], limit)])
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[0] == 1 and av[1] == 1:
            join([_options(av[2], limit)])
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[0] >= 1:  # at least once: needed, but may repeat
            open_gap()
            join([_options(av[2], limit)])
            open_gap()
        else:  # a class, any character, a `*` repeat, a back reference, a lookaround
            open_gap()
    return opts


def anchors(pattern: str) -> set[str] | None:
    """One entry per way the pattern can match: the lowercase words that way needs, joined with "&", its longest
    whole word first (a text the way matches holds each as a whole word; the text is split into the same words)
    and "~w" for a word the text may extend (held inside a longer word). A text holding all words of no entry
    cannot match. None when some way needs no word of 4+ characters whose both ends the pattern pins down."""
    import re._parser as sre_parse

    try:
        tree = sre_parse.parse(pattern, re.I)
    except (re.error, RecursionError):
        return None
    out: set[str] = set()
    try:
        ways = _options(tree)
    except _TooMany:
        return None
    for o in ways:
        runs = [OPEN + o[0]] + o[1:]  # the pattern's ends: a search may start or stop inside a word
        runs[-1] += OPEN
        found = [w for run in runs for w in _RUN_WORD.findall(run)]
        words = [w for w in found if OPEN not in w and len(w) >= 4]
        # a word the text may extend ("... out of memory" also matches "memory_pool", `hipErrorOutOfMemory` a
        # longer name): contained in the text, not necessarily one of its words (a substring anchor, "~word")
        parts = [w.replace(OPEN, "") for w in found if OPEN in w and len(w.replace(OPEN, "")) >= 5]
        whole = sorted(set(words), key=lambda w: (-len(w), w))
        subs = ["~" + w for w in sorted(set(parts), key=lambda w: (-len(w), w))]
        if not whole and not subs:
            return None
        out.add("&".join((whole + subs)[:_ANCHOR_WORDS]))
    return out


_ANCHOR_WORDS = 4  # words kept per way: more filter little and cost a check each


def _rx(p: str | None) -> re.Pattern[str] | None:
    return re.compile(p, re.I | re.M) if p else None


def _signature(d: dict[str, Any], curated: bool, source: str, validate: bool = False) -> Signature:
    try:
        sig = Signature(
            id=str(d["id"]), category=str(d["category"]), source_pattern=str(d["pattern"]),
            confidence=float(d.get("confidence", 0.7)), where=str(d.get("where", "exception")),
            type=_rx(d.get("type")), package=_rx(d.get("package")),
            extract={k: str(v) for k, v in (d.get("extract") or {}).items()},
            refine=[(str(r.get("near") or r["in_log"]), str(r["category"]), "near" not in r)
                    for r in d.get("refine") or []],
            source=str(d.get("source", "")), curated=curated, warning=bool(d.get("warning", False)),
            playbook=d.get("playbook"),
            anchors=d["anchors"] if "anchors" in d else None)
        if "anchors" not in d:
            found = anchors(sig.source_pattern)
            sig.anchors = sorted(found) if found is not None else None
        if validate:
            sig.pattern  # noqa: B018 - a site file's bad regex is reported when loaded, not when a log meets it
        return sig
    except (KeyError, TypeError, ValueError, re.error) as e:
        raise InputError(f"signature file {source}: bad entry {d.get('id', d)!r}: {e}") from None


def _load_yaml(path: Path) -> dict[str, Any]:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read signature file {path}: {e}") from None
    except YAMLError as e:
        raise InputError(f"signature file {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise InputError(f"signature file {path} must be a mapping with `signatures:` (and `categories:`)")
    return data


def _cached_yaml(path: Path) -> dict[str, Any]:
    """A YAML file's content, parsed once per version of the file: pure-Python YAML parsing costs more
    than a log's whole classification, so the parse is kept as JSON in the user cache (keyed by the file's
    path, size and mtime, and this module's, which computes the anchors kept with it; an unreadable or stale
    entry is rebuilt, never an error)."""
    import hashlib

    from doctor.cache import cache_dir

    try:
        st, code = path.stat(), Path(__file__).stat()
        key = hashlib.sha1(f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}:{code.st_size}:{code.st_mtime_ns}"
                           .encode()).hexdigest()[:16]
        cached = cache_dir() / "signatures" / f"{path.stem}-{key}.json"
        return json.loads(cached.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    data = _load_yaml(path)
    for d in data.get("signatures") or []:
        if isinstance(d, dict) and "pattern" in d and "anchors" not in d:
            found = anchors(str(d["pattern"]))
            d["anchors"] = sorted(found) if found is not None else None
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(cached.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        tmp.replace(cached)
    except (OSError, NameError):
        pass
    return data


@lru_cache(maxsize=4)
def load_catalog(extra: str = "") -> Catalog:
    """The curated catalog, the harvested library signatures, and site files (``ROCM_DOCTOR_SIGNATURES``)."""
    data = _cached_yaml(CURATED)
    cats = {name: Category(name, " ".join(str(c.get("summary", "")).split()), c.get("playbook"),
                           bool(c.get("auto", False)), bool(c.get("stop", False)))
            for name, c in data["categories"].items()}
    sigs = [_signature(d, True, str(CURATED)) for d in data["signatures"]]
    frames = list(data.get("frames", []))
    try:
        lib = json.loads(LIBRARY.read_text(encoding="utf-8"))["signatures"]
    except (OSError, ValueError, KeyError):
        lib = []
    sigs += [_signature(d, False, str(LIBRARY)) for d in lib]
    for f in [x for x in extra.split(os.pathsep) if x]:
        site = _cached_yaml(Path(f))
        for name, c in (site.get("categories") or {}).items():
            cats[name] = Category(name, " ".join(str(c.get("summary", "")).split()), c.get("playbook"),
                                  bool(c.get("auto", False)), bool(c.get("stop", False)))
        sigs = [_signature(d, True, f, validate=True) for d in site.get("signatures") or []] + sigs  # site first
    for s in sigs:
        if s.category not in cats:
            raise InputError(f"signature {s.id}: unknown category {s.category!r}")
    return Catalog(cats, sigs, frames)


def catalog() -> Catalog:
    return load_catalog(os.environ.get("ROCM_DOCTOR_SIGNATURES", ""))


def categories() -> dict[str, Category]:
    """Every failure category, by name, with its summary and remedy."""
    return catalog().categories


def stops(category: str) -> bool:
    """A retry cannot fix this category (``stop: true`` in the catalog): the supervisor stops with the
    diagnosis instead of relaunching."""
    c = catalog().categories.get(category)
    return bool(c and c.stop and category != "unknown")


# ------------------------------------------------------------------ reading logs

_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1a\x1c-\x1f\x7f]")


def looks_binary(text: str) -> bool:
    """More than 5 % control characters (besides tab, newline, CR, form feed, ESC for colours) in the first
    8 KiB: an archive, a core dump or a checkpoint, not a log."""
    head = text[:8192]
    return bool(head) and len(_CONTROL.findall(head)) > 0.05 * len(head)


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
        data = data.replace(b"\x00", b"")  # UTF-16 written by a Windows tool
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace")


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


# ------------------------------------------------------------------ the verdict

@dataclass
class Classification:
    category: str
    playbook: str | None
    auto_fix: bool
    evidence: list[str] = field(default_factory=list)
    summary: str = ""
    line_no: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    confidence: float = 0.0
    alternatives: list[dict[str, Any]] = field(default_factory=list)
    signature: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"category": self.category, "playbook": self.playbook, "auto_fix": self.auto_fix,
                "evidence": self.evidence, "summary": self.summary, "confidence": round(self.confidence, 2),
                "alternatives": self.alternatives, "signature": self.signature}


@dataclass
class _Hit:
    category: str
    score: float
    line: int
    signature: str
    details: dict[str, Any] = field(default_factory=dict)


def _context(log: ParsedLog, exc: Exc | None, line: int) -> str:
    frames = "\n".join(f.path for f in exc.frames) if exc is not None else ""
    return frames + "\n" + log.window(line)


def _match(sig: Signature, text: str, exc: Exc | None) -> re.Match[str] | None:
    if sig.type is not None and (exc is None or not sig.type.search(exc.type)):
        return None
    if sig.package is not None and (exc is None or not any(sig.package.search(p) for p in exc.packages)):
        return None
    return sig.pattern.search(text)


def _refined(sig: Signature, log: ParsedLog, exc: Exc | None, line: int) -> str:
    if not sig.refine:
        return sig.category
    ctx = _context(log, exc, line)
    for near, cat, whole in sig.refine:
        if re.search(near, "\n".join(log.lines) if whole else ctx, re.I):
            return cat
    return sig.category


def _extract(sig: Signature, log: ParsedLog, line: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    ctx = "\n".join(log.lines[line:line + 6])
    for k, rx in sig.extract.items():
        m = re.search(rx, ctx, re.I)
        if m:
            out[k] = m.group(1)
    return out


def match_message(text: str, exc_type: str = "") -> Signature | None:
    """The best signature for one message (what ``scripts/harvest_messages.py --uncovered`` asks)."""
    cat = catalog()
    exc = Exc(exc_type or "", text, 0)
    full = f"{exc_type}: {text}" if exc_type else text
    best = None
    for sig in cat.exception_sigs + cat.line_sigs:
        if _match(sig, full, exc) and (best is None or sig.confidence > best.confidence):
            best = sig
    return best


def _hits_for(cat: Catalog, log: ParsedLog, text: str, exc: Exc | None, line: int, weight: float,
              kinds: tuple[str, ...]) -> list[_Hit]:
    """Every signature of ``kinds`` (exception / line / fatal) that matches ``text``, weighted."""
    hits = []
    for sig in cat.candidates(text):
        if sig.where not in kinds:
            continue
        if _match(sig, text, exc) is None:
            continue
        w = weight * (W_FATAL / W_LINE if sig.where == "fatal" and weight == W_LINE else 1.0)
        hits.append(_Hit(_refined(sig, log, exc, line), sig.confidence * w * (1.0 if sig.curated else 0.97),
                         line, sig.id, _extract(sig, log, line)))
    return hits


def _exception_hits(cat: Catalog, log: ParsedLog, exc: Exc, weight: float) -> list[_Hit]:
    # a message over several lines is one text (a paste wraps "killed by signal: Bus\nerror.")
    return _hits_for(cat, log, " ".join(exc.text.split()), exc, exc.line_no, weight, ("exception", "line", "fatal"))


def _frame_hit(cat: Catalog, exc: Exc, weight: float) -> _Hit | None:
    if not exc.frames:
        return None
    # the innermost frame that a rule knows decides ("path/below/package.py:function", then its source line)
    for f in reversed(exc.frames[-3:]):
        where = f"{f.where}:{f.func}" + (f"\n{f.code}" if f.code else "")
        for rx, c, conf, pb in cat.frames:
            if rx.search(where):
                return _Hit(c, conf * weight, exc.line_no, f"frame:{f.where}", {"playbook": pb} if pb else {})
    return None


def _loss_hits(log: ParsedLog) -> list[_Hit]:
    hits: list[_Hit] = []
    seen_positive = False
    for i, vals in log.hf_logs:
        loss, gn = vals.get("loss"), vals.get("grad_norm")
        for name, v in (("loss", loss), ("grad_norm", gn)):
            if v is not None and (v != v or v in (float("inf"), float("-inf"))):
                hits.append(_Hit("nan_or_divergent_loss", C_LOSS_NONFINITE * W_LOSS, i, f"hf-log-{name}-nonfinite",
                                 {name: str(v)}))
                return hits
        if loss is not None and loss == 0.0 and ("learning_rate" in vals or "current_steps" in vals or gn is not None):
            conf = C_LOSS_ZERO if seen_positive or (gn is not None and (gn == 0.0 or gn != gn)) else 0.7
            hits.append(_Hit("nan_or_divergent_loss", conf * W_LOSS, i, "hf-log-loss-zero", {"loss": "0.0"}))
            return hits
        if loss:
            seen_positive = True
    logged = [(i, float(v["loss"])) for i, v in log.hf_logs
              if isinstance(v.get("loss"), (int, float)) and v["loss"] == v["loss"]]
    if len(logged) >= 3:
        (i, last), lowest = logged[-1], min(x for _, x in logged[:-1])
        if last >= 10 and last >= 5 * lowest and last > logged[-2][1]:
            # no NaN yet, but the logged loss climbing to several times its low: the run is diverging
            hits.append(_Hit("nan_or_divergent_loss", C_LOSS_EXPLODING * W_LOSS, i, "hf-log-loss-exploding",
                             {"loss": str(last), "lowest": str(lowest)}))
    return hits


def _root(log: ParsedLog) -> tuple[Exc | None, list[Exc]]:
    """The root exception (the first failing rank's original) and the rest of its chain."""
    tbs = [tb for tb in log.tracebacks if tb.final.short_type not in WRAPPERS and tb.final.type] or \
        [tb for tb in log.tracebacks if not tb.final.type and tb.final.frames]  # only a cut traceback is left
    rank = log.launcher.get("rank")
    if rank is not None:
        mine = [tb for tb in tbs if tb.rank == rank]
        tbs = mine or tbs
    if not tbs:
        loose = [e for e in log.loose if e.short_type not in WRAPPERS]
        return (loose[0], []) if loose else (None, [])
    tb = tbs[0]
    chain = [e for e in tb.chain if e.short_type not in WRAPPERS]
    if chain and not chain[0].type and not chain[0].frames:
        chain = chain[1:]
    return (chain[0], chain[1:]) if chain else (None, [])


def _text_lines(log: ParsedLog, skip: set[int]) -> list[int]:
    """The lines worth matching as text: not inside an exception already judged, not a traceback's
    frame or quoted source line, not a bare progress bar (:func:`_bar_only`); at most the first and last 300."""
    out = []
    prev_frame = False
    for i, ln in enumerate(log.lines):
        is_frame = bool(FRAME.match(ln))
        quoted = prev_frame and ln.startswith("    ")
        prev_frame = is_frame
        if i in skip or not ln.strip() or is_frame or quoted or _bar_only(ln):
            continue
        out.append(i)
    return out if len(out) <= 600 else out[:300] + out[-300:]


def _bar_only(ln: str) -> bool:
    """A progress bar and nothing after it. A bar redrawn with \\r runs into what the process printed next
    (`... 1.28it/s]Killed`, `...]Traceback`): that text is kept."""
    m = PROGRESS_BAR.search(ln)
    if m is None:
        return False
    if re.search(r"(?:it/s|s/it)(?=[A-Z][a-z]{2})", ln):
        return False  # the next message glued to the rate, and another redraw after it (`5.26s/itMemory access fault`)
    close = ln.rfind("]")
    tail = ln[close + 1:] if close >= m.start() else ""
    return not re.search(r"[A-Za-z]{3}", tail)


def _candidates(cat: Catalog, log: ParsedLog) -> list[_Hit]:
    hits: list[_Hit] = []
    root, rest = _root(log)
    judged: set[int] = set()
    if root is not None:
        hits += _exception_hits(cat, log, root, W_ROOT)
        judged |= set(range(root.line_no, root.line_no + 1 + root.message.count("\n")))
        for e in rest:
            hits += _exception_hits(cat, log, e, W_CHAIN)
            judged |= set(range(e.line_no, e.line_no + 1 + e.message.count("\n")))
        if not hits:
            for e, w in [(root, W_ROOT)] + [(e, W_CHAIN) for e in rest]:
                # a traceback cut before its exception line tells where, not what: other evidence may outrank it
                fh = _frame_hit(cat, e, w if e.type else w * W_CUT)
                if fh is not None:
                    hits.append(fh)
                    break
    others = [e for e in log.exceptions() if e.line_no not in judged and e.short_type not in WRAPPERS]
    for e in others[:60] + others[-60:] if len(others) > 120 else others:
        if WARNING_LINE.search(log.lines[e.line_no]):
            continue
        hits += _exception_hits(cat, log, e, W_OTHER)
        judged |= set(range(e.line_no, e.line_no + 1 + e.message.count("\n")))
    # any other line: runtime messages (HSA faults, RCCL), the shell's "Killed", and library messages pasted
    # without their exception type (a cut log, a logger's line)
    for i in _text_lines(log, judged):
        ln = log.lines[i]
        warned = bool(WARNING_LINE.search(ln)) and "NCCL WARN" not in ln
        for h in _hits_for(cat, log, ln, None, i, W_LINE, ("line", "fatal")) + \
                _hits_for(cat, log, ln, None, i, W_TEXT, ("exception",)):
            sig = cat.signature(h.signature)
            if (sig.type or sig.package) and sig.where == "exception":
                continue  # needs an exception's type or frames, which a bare line has not
            if warned and not sig.warning:
                continue  # a warning is context, not the cause, unless the signature says it foretells one
            hits.append(h)
    # a progress bar is no cause, but the loss it shows is evidence (tqdm postfixes: `loss: nan`, `loss=nan`)
    for i, ln in enumerate(log.lines):
        if "nan" in ln.lower() and PROGRESS_BAR.search(ln):
            nan = [h for h in _hits_for(cat, log, ln, None, i, W_LINE, ("line",)) if h.category == "nan_or_divergent_loss"]
            if nan:
                hits.append(nan[0])
                break
    hits += _loss_hits(log)
    if root is None:  # a paste cut before the exception: the quoted `raise X("...")` it was heading for
        for q in log.quoted[:40]:
            hits += _exception_hits(cat, log, q, W_QUOTED)
    return hits


ERRORISH = re.compile(r"error|exception|traceback|\bfail|fatal|killed|abort|segmentation|core dumped|denied|"
                      r"cannot|can't|unable to|invalid|timed? ?out|no such file|not found|"
                      r"closing signal|SIG(?:HUP|TERM|INT)\b", re.I)  # torch elastic tearing the job down: no silent stop
# torch elastic stopping the other ranks after one died: a warning record by level, an error by what it says
TEARDOWN = re.compile(r"Sending process \d+ closing signal SIG\w+")
# NCCL's own INFO record (`host:pid:tid [dev] NCCL INFO ...`): its problems come as NCCL WARN records
NCCL_INFO = re.compile(r"\bNCCL INFO\b")
# a logger's warning record, with or without a timestamp before it (torch elastic's W-records excluded: their
# "closing signal" lines are a job being torn down)
WARNING_RECORD = re.compile(r"^\s*\[?(?:WARNING|WARN)\b|\[WARNING\]|\| WARNING \||^\s*\S*WARNING\S*:\S")
SUCCESS = re.compile(r"train_runtime|Training completed|\*{5} train metrics|Saving model checkpoint to|"
                     r"Training finished|Finished training", re.I)


# a progress line of a training loop that is not a bar: "Epoch 0 step 0", "step 120/3000", "[Rank 0] iteration 5"
STEP_LINE = re.compile(r"^\s*(?:\[[^\]]*\]\s*)?(?:epoch\s+\d+[,:]?\s+)?(?:step|iteration|iter)\s*[:=]?\s*\d+(?:/\d+)?\b", re.I)
# an INFO record of a library logger in the formats LLaMA-Factory, vLLM, torchtune, swift, Lightning print
INFO_RECORD = re.compile(r"^\s*(?:\S+\s+)?(?:\[INFO[|:\]]|INFO[: ]\s?\S|\[I [^\]]*\])|initializing ddp: GLOBAL_RANK", re.I)


def _progress(ln: str) -> bool:
    """A line that shows the training loop advancing: a progress bar (whole or cut) or a step line."""
    return bool(PROGRESS_BAR.search(ln) or re.search(r"\d+%\|", ln) or STEP_LINE.search(ln))


# accelerate/utils/other.py (check_os_kernel) warns that Linux before 5.5 "can cause the process to hang": a log
# that stops, error-free, right after it stopped where accelerate said it might
OLD_KERNEL = re.compile(r"Detected kernel version [\d.]+, which is below the recommended minimum of [\d.]+; this can "
                        r"cause the process to hang")


def _stalled(log: ParsedLog) -> list[_Hit]:
    """A log that shows a run at work and then simply stops, with no error anywhere and no sign of the run
    finishing: what a hang leaves behind (the process was killed from outside, the log cut)."""
    body = [ln for ln in log.lines if ln.strip()]
    # a warning record is no error ("[WARNING] Unable to find hostfile, will proceed ...")
    # nor is an NCCL INFO record (its net plugin "cannot open shared object file" on every run without one)
    if not body or any(ERRORISH.search(ln) and not NCCL_INFO.search(ln)
                       and (not WARNING_RECORD.search(ln) or TEARDOWN.search(ln)) for ln in body) \
            or any(SUCCESS.search(ln) for ln in body):
        return []

    last = body[-1]

    def at_work(ln: str) -> bool:
        return _progress(ln) or bool(re.match(r"\s*\{['\"](?:loss|eval_loss)", ln))

    # a bar or a loss record is the run at work even alone (what users paste of a stuck run); a plain log record
    # at the end needs a bar just before it or a few lines of context before a silent end reads as a stall
    record = bool(log.stamped or LOG_RECORD.match(last) or INFO_RECORD.search(last) or "NCCL INFO" in last)
    if P2P_SETUP.search(last) and not any(NCCL_READY.search(ln) for ln in body):
        # NCCL/RCCL stopped while connecting peers over P2P/IPC and never finished: the classic peer-to-peer
        # hang (IOMMU not in passthrough, ACS on the PCIe path, a board without working P2P)
        return [_Hit("rccl_p2p_or_iommu", C_P2P_STALL, len(log.lines) - 1, "hang-at-p2p-setup"),
                _Hit("hang", C_STALL, len(log.lines) - 1, "log-ends-without-error")]
    if at_work(last) or OLD_KERNEL.search(last) or (record and (len(body) >= 3 or any(at_work(ln) for ln in body[-3:]))):
        return [_Hit("hang", C_STALL, len(log.lines) - 1, "log-ends-without-error")]
    return []


# NCCL's init lines connecting two ranks through peer-to-peer (P2P/IPC, P2P/CUMEM, P2P/direct pointer)
P2P_SETUP = re.compile(r"NCCL INFO (?:Channel|Ring|Tree|Trees)\b.*\bvia P2P/")
# ... and those saying a communicator is up (training went on after the P2P setup)
NCCL_READY = re.compile(r"NCCL INFO .*(?:Init COMPLETE|init done)")


def _refuses_bf16(log: ParsedLog, top: _Hit) -> bool:
    """A bf16_unsupported verdict whose message refuses bf16 itself (a GPU or build without it), not the two
    precision flags together (fix-precision drops fp16), fp16, or tf32."""
    if top.signature in ("fp16-and-bf16", "bf16-fp16-assert"):
        return False
    text = "\n".join(log.lines[max(0, top.line - 1):top.line + 2])
    return bool(re.search(r"bf16|bfloat16|use float16 instead", text, re.I)) and not re.search(
        r"at most one|at once|\bboth\b|tf32|type fp16", text, re.I)


TEARDOWN = re.compile(r"Sending process \d+ closing signal SIGTERM")


def _silent_rank_death(log: ParsedLog) -> _Hit | None:
    """torch elastic tearing the ranks down right after one was at work (a bar, a step), with no exception
    anywhere: the rank that died printed nothing, which a Python error always does. It was killed (the host OOM
    killer while every rank loads the model into RAM is the usual case) or crashed natively."""
    first = next((i for i, ln in enumerate(log.lines) if TEARDOWN.search(ln)), None)
    if first is None or log.exceptions():
        return None
    before = [ln for ln in log.lines[:first] if ln.strip()]
    # a bar redrawn with \r and the launcher's warning often share one pasted line: what precedes the record
    m = re.match(r"(.*?)[WIE]\d{4} \d\d:\d\d", log.lines[first])
    prior = before[-1:] + ([m.group(1)] if m and m.group(1).strip() else [])
    if not prior or any(ERRORISH.search(ln) for ln in log.lines[:first]):
        return None
    if any(_progress(ln) for ln in prior):
        return _Hit("killed_by_signal", C_SILENT_DEATH, first, "rank-died-silently")
    return None


def _launcher_hit(log: ParsedLog, exit_code: int | None, signal_name: str | None) -> _Hit | None:
    sig = signal_name or log.launcher.get("signal")
    code = exit_code if exit_code is not None else log.launcher.get("exit_code")
    if sig in ("SIGKILL", "SIGTERM", "SIGINT") or code in (137, -9, 143, -15):
        line = log.launcher.get("signal_line", log.launcher.get("root_cause_line", max(0, len(log.lines) - 1)))
        return _Hit("killed_by_signal", C_LAUNCHER, line, "launcher-signal", {"signal": sig, "exit_code": code})
    return None


def classify_text(text: str, exit_code: int | None = None, signal_name: str | None = None) -> Classification:
    cat = catalog()
    log = parse(text)
    hits = _candidates(cat, log)
    lh = _launcher_hit(log, exit_code, signal_name)
    if lh is not None and not hits:
        hits.append(lh)
    # best score per category; ties go to the earliest line (the first error is the cause)
    best: dict[str, _Hit] = {}
    for h in hits:
        b = best.get(h.category)
        if b is None or h.score > b.score + 1e-9 or (abs(h.score - b.score) < 1e-9 and h.line < b.line):
            best[h.category] = h
    ranked = sorted(best.values(), key=lambda h: (-h.score, h.line))
    if not ranked or ranked[0].score < THRESHOLD or ranked[0].signature == "elastic-teardown":
        silent = _silent_rank_death(log)
        if silent is not None:
            ranked = [silent] + ranked
    if not ranked or ranked[0].score < THRESHOLD:
        ranked = _stalled(log) + ranked
    if not ranked or ranked[0].score < THRESHOLD:
        c = cat.categories["unknown"]
        tail = [ln.strip()[:500] for ln in log.lines if ln.strip()][-3:]
        return Classification("unknown", None, False, tail, c.summary, None, {},
                              ranked[0].score if ranked else 0.0,
                              [{"category": h.category, "confidence": round(h.score, 2)} for h in ranked[:2]])
    top = ranked[0]
    return _verdict(cat, log, top, ranked[1:3])


def _evidence(log: ParsedLog, i: int) -> list[str]:
    from doctor.logparse import CHAIN_CAUSE, CHAIN_CONTEXT, FRAME, TRACEBACK

    out = [i]
    for j in range(i + 1, min(len(log.lines), i + 8)):
        ln = log.lines[j]
        if not ln.strip() or FRAME.match(ln) or TRACEBACK.match(ln) or CHAIN_CONTEXT.search(ln) \
                or CHAIN_CAUSE.search(ln) or re.search(r"\d+%\|.*\|\s*\d+/\d+", ln) or ln.startswith("    "):
            continue
        out.append(j)
        if len(out) == 4:
            break
    return [log.lines[j].strip()[:500] for j in out]


_NOT_INSTALLED = re.compile(r"No module named '?bitsandbytes|No package metadata was found for (?:The ')?bitsandbytes|"
                            r"pip install (?:-U )?bitsandbytes", re.I)
TRAINING_KEYS = {"per_device_train_batch_size", "learning_rate", "num_train_epochs", "output_dir", "do_train",
                 "gradient_accumulation_steps", "lr_scheduler_type", "logging_steps", "save_steps", "stage",
                 "finetuning_type", "dataset", "cutoff_len", "bf16", "fp16", "lora_target", "template"}


@lru_cache(maxsize=1)
def transformers_tokenizer_classes() -> frozenset[str]:
    """The tokenizer classes a recent transformers ships (doctor/data, scripts/list_tokenizer_classes.py)."""
    path = Path(__file__).with_name("data") / "transformers-tokenizer-classes.txt"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return frozenset()
    return frozenset(ln.strip() for ln in lines if ln.strip() and not ln.startswith("#"))


def _tokenizer_class_too_new(log: ParsedLog, top: _Hit) -> str | None:
    """The class of `Tokenizer class X does not exist or is not currently imported` when transformers itself
    ships it (so the failing environment's transformers predates it), else None (the model's remote code)."""
    if top.signature != "cant-load-tokenizer":
        return None
    m = re.search(r"Tokenizer class (\w+) does not exist", "\n".join(log.lines[top.line:top.line + 2]))
    if not m:
        return None
    name = m.group(1)
    known = transformers_tokenizer_classes()
    return name if name in known or name.removesuffix("Fast") in known else None


_OOM_FIGURES = re.compile(r"Tried to allocate ([\d.]+) ?([GMK])i?B.{0,160}?of which ([\d.]+) ?([GMK])i?B (?:is )?free", re.I | re.S)
_UNIT = {"K": 1 / 2**20, "M": 1 / 1024, "G": 1.0}


# Work one rank does alone while the others wait in a collective: the trainers' and LLaMA-Factory's own log
# lines (transformers `Saving model checkpoint to`, `***** Running Evaluation *****`; torchtune `Saving
# checkpoint`; DeepSpeed's 16-bit gather at save; peft's merge) and the frames of such a call.
_SINGLE_RANK_WORK = re.compile(
    r"(?P<what>Saving model checkpoint|Saving checkpoint|[Ss]aving (?:the )?(?:final )?model|save_pretrained|"
    r"_save_checkpoint|save_16bit_model|stage3_gather_16bit_weights_on_model_save|full model state dict|"
    r"merge_and_unload|[Mm]erging (?:the )?(?:LoRA|adapter|lora)|Running Evaluation|evaluation_loop)")


def _single_rank_work(log: ParsedLog, line: int) -> str | None:
    """What single-rank work (a save, an evaluation, a merge) the log shows around the timeout at `line`: the
    trainer's own lines in the 40 before it, or the frames of the failed rank's traceback in the 40 after it (the
    nearest to the end wins).

    transformers documents `ddp_timeout` for exactly this: slow operations on one rank. A timeout with no such
    work around it is a stalled rank, where a longer timeout only waits longer."""
    lo = max(0, line - 40)
    for text in reversed(log.lines[lo:line + 40]):
        if (m := _SINGLE_RANK_WORK.search(text)):
            return f"`{m.group('what')}`"
    return None


def _free_beside_oom(window: str) -> str | None:
    """The free memory torch's OOM message reports when it dwarfs the request (ten times it and 8 GiB or more):
    the allocation failed for another reason than a full GPU. None for every ordinary OOM (a fragmented or full
    GPU reports less free than it asked for). A per-process fraction torch enforces says "allowed": a real limit."""
    m = _OOM_FIGURES.search(window)
    if not m or re.search(r"\ballowed\b", window):
        return None
    want = float(m.group(1)) * _UNIT[m.group(2).upper()]
    free = float(m.group(3)) * _UNIT[m.group(4).upper()]
    return f"{m.group(3)} {m.group(4).upper()}iB" if free >= 8 and free >= 10 * want else None


def _verdict(cat: Catalog, log: ParsedLog, top: _Hit, alts: list[_Hit]) -> Classification:
    too_new = _tokenizer_class_too_new(log, top)
    if too_new:
        top = _Hit("dependency_version", top.score, top.line, top.signature, {**top.details, "class": too_new})
    c = cat.categories[top.category]
    details = dict(top.details)
    summary, pb, auto = c.summary, c.playbook, c.auto
    window = log.window(top.line, 3, 4)
    if too_new:
        summary = (f"This transformers does not know the tokenizer class {too_new}, which newer transformers releases "
                   "ship: the model is newer than the installed transformers. Upgrade transformers (the model's "
                   "config.json names the release it was saved with, `transformers_version`).")
    if top.category == "unknown_config_key":
        m = re.search(r"HfArgumentParser: \[(.*)\]", window)
        keys = re.findall(r"'([^']+)'", m.group(1)) if m else []
        details["keys"] = keys
        if keys and all(not k.replace("\\r", "").replace("\\n", "").strip() for k in keys):
            return Classification("unknown", None, False, _evidence(log, top.line),
                                  "The argument list holds a carriage return ('\\r'): the launch script has Windows line "
                                  "endings, so every line's end became an argument. Convert it (`dos2unix train.sh`); "
                                  "this is not a config key problem.", top.line + 1, {"crlf": True},
                                  round(min(top.score, 0.99), 2), [], top.signature)
        if len(set(keys) & TRAINING_KEYS) >= 3:
            summary += (" The rejected keys are ordinary training keys: the YAML was probably passed to the wrong "
                        "subcommand (e.g. `llamafactory-cli chat/export` instead of `train`).")
    elif top.category == "oom" and (free := _free_beside_oom(window)) is not None:
        # the allocator's own figures say the memory was there: no batch size makes this run fit "better"
        return Classification("unknown", None, False, _evidence(log, top.line),
                              f"The GPU reported out of memory while {free} was free on it: not a lack of memory. "
                              "Suspect the build (a custom torch/ROCm image, a driver mismatch) or a limit outside "
                              "torch; reducing the batch will not help.", top.line + 1, {"free_at_oom": free},
                              round(min(top.score * 0.5, 0.39), 2),
                              [{"category": "oom", "confidence": round(min(top.score, 0.99), 2)}], top.signature)
    elif top.category == "nccl_rccl_timeout":
        m = re.search(r"SeqNum=(\d+)", "\n".join(log.lines[top.line:top.line + 5]))
        if m:
            seq = details["seq_num"] = int(m.group(1))
            if seq < 50:
                summary += f" SeqNum {seq} is early: rank 0 was most likely still preprocessing; raise ddp_timeout."
            elif (work := _single_rank_work(log, top.line)):
                details["during"] = work
                summary += (f" SeqNum {seq} is mid-training, beside {work} in the log: one rank was busy alone "
                            "(saving, gathering or merging weights, evaluating) past the timeout while the others "
                            "waited in the collective. Raise ddp_timeout so that work fits in it.")
            else:
                summary += (f" SeqNum {seq} is mid-training: one rank stopped issuing collectives (hang, straggler or a "
                            "dead link); raising ddp_timeout alone rarely helps.")
                pb, auto = None, False
    elif top.category == "shm_exhausted" and re.search(r"NCCL|RCCL|nccl", window):
        # NCCL's own shared-memory segments, not a DataLoader's: loading data in the main process changes nothing
        pb, auto = None, False
        details["nccl"] = True
        summary = ("NCCL/RCCL could not set up its shared-memory transport (/dev/shm, a container's 64 MB, or a "
                   "system call it needs failed). Start the container with `--shm-size=16g` or `--ipc=host`; "
                   "NCCL_SHM_DISABLE=1 runs without it (slower). Where the job spans nodes, check the network too "
                   "(NCCL_SOCKET_IFNAME): the same NCCL error covers a failed socket.")
    elif top.category == "bitsandbytes_unavailable" and _NOT_INSTALLED.search(window):
        details["not_installed"] = True
        summary = ("bitsandbytes is not installed in this environment, and QLoRA (`quantization_bit`) needs it. Fall "
                   "back from QLoRA to 16-bit LoRA, or install bitsandbytes (>= 0.49 ships ROCm binaries).")
    elif top.category == "bf16_unsupported" and _refuses_bf16(log, top):
        # a refusal of bf16 itself, not of two flags: fp16 is the run that can go ahead
        pb, auto = "bf16-to-fp16", True
        summary += (" Train in fp16 (`bf16-to-fp16`) on a GPU without bf16 (pre-Ampere NVIDIA, gfx906); where this "
                    "GPU does run bf16 (`rocm-doctor check`: BF16000) the refusal is a library's own check (older "
                    "transformers/accelerate read torch.version.cuda, None on ROCm): upgrade it instead.")
    elif top.category == "killed_by_signal":
        details.setdefault("signal", log.launcher.get("signal"))
        details.setdefault("exit_code", log.launcher.get("exit_code"))
    sig = cat.signature(top.signature) if top.signature in cat.ids() else None
    if sig is not None and sig.playbook:
        pb, auto = sig.playbook, True
    elif details.get("playbook"):  # a frame rule's own remedy (DeepSpeed's loss scaler: fp16 -> bf16)
        pb, auto = details.pop("playbook"), True
    if top.category == "extension_build_failed" and re.search(r"flash[-_]attn|flash-attention|composable_kernel|ck_tile",
                                                                 "\n".join(log.lines), re.I):
        pb, auto = "disable-flash-attn", True
        summary += " The failing build is flash-attn: train without it (`flash_attn: sdpa`) until a build for this GPU exists."
    if top.category == "unknown" and sig is not None:
        # a recognised failure that no category's remedy fits: say what it is, never a wrong category
        summary = f"{c.summary} What the log shows: {sig.source}."
    if top.signature.startswith("frame:"):
        summary = f"(Judged by where the error was raised, {top.signature[6:]}: no known message matched.) " + summary
    return Classification(top.category, pb, bool(pb) and auto if top.category != "killed_by_signal" else True,
                          _evidence(log, top.line), summary, top.line + 1, details, round(min(top.score, 0.99), 2),
                          [{"category": h.category, "confidence": round(h.score, 2)} for h in alts], top.signature)


def classify_file(path: str, **kw: Any) -> Classification:
    return classify_text(read_log_tail(path), **kw)


# ------------------------------------------------------------------ docs

def _cell(text: str) -> str:
    return text.replace("|", "\\|")


# The verdicts read from the log's shape rather than a message (documented with the signatures)
STRUCTURAL = [
    ("hf-log-loss-nonfinite / hf-log-grad_norm-nonfinite", "nan_or_divergent_loss", C_LOSS_NONFINITE * W_LOSS,
     "an HF trainer log dict (`{'loss': nan, ...}`) or a trainer-log record with a NaN/Inf loss or grad_norm"),
    ("hf-log-loss-zero", "nan_or_divergent_loss", C_LOSS_ZERO * W_LOSS,
     "a logged loss of exactly 0.0 while training (how HF logs NaN steps under fp16 / a collapsed run); lower "
     "without an earlier positive loss or a zero grad_norm"),
    ("launcher-signal", "killed_by_signal", C_LAUNCHER,
     "the launcher's summary (torchrun, DeepSpeed, accelerate) or train's own exit status says SIGKILL/SIGTERM "
     "/ -9 / 137, and no message matched"),
    ("rank-died-silently", "killed_by_signal", C_SILENT_DEATH,
     "torch elastic stops the other ranks right after a rank was at work (a bar, a step) and no Python error is "
     "anywhere in the log: the dead rank was killed (the host OOM killer while every rank loads the model) or "
     "crashed natively"),
    ("cant-load-tokenizer, a class transformers ships", "dependency_version", None,
     "`Tokenizer class X does not exist or is not currently imported` where a recent transformers exports X "
     "(doctor/data/transformers-tokenizer-classes.txt): the installed transformers predates the model; a class it "
     "does not ship stays template_or_tokenizer (the model's remote code)"),
    ("hf-log-loss-exploding", "nan_or_divergent_loss", C_LOSS_EXPLODING * W_LOSS,
     "HF trainer log dicts whose loss climbs to 10 or more and at least 5 times its lowest logged value, still "
     "rising at the last record (diverging before any NaN)"),
    ("hang-at-p2p-setup", "rccl_p2p_or_iommu", C_P2P_STALL,
     "a log that stops without an error while NCCL/RCCL connects ranks `via P2P/IPC` (or P2P/CUMEM), with no "
     "`Init COMPLETE` after it: the peer-to-peer hang (IOMMU passthrough, ACS); `hang` is the alternative"),
    ("log-ends-without-error", "hang", C_STALL,
     "no error, no sign of the run finishing, and the last line is the run at work (a progress bar, a step, a "
     "loss record; an INFO record after a bar or a few lines of log; accelerate's warning that this Linux kernel "
     "can hang the process)"),
]


def markdown_table() -> str:
    """The README's table of categories, generated from the catalog."""
    cat = catalog()
    counts: dict[str, int] = {}
    for s in cat.signatures:
        counts[s.category] = counts.get(s.category, 0) + 1
    rows = ["| category | playbook (auto) or stop | signatures | what happened |", "|---|---|---|---|"]
    for name, c in cat.categories.items():
        remedy = f"`{c.playbook}`" + (" (auto)" if c.auto else "") if c.playbook else (
            "retry once" if c.auto else "stop")
        rows.append(f"| `{name}` | {remedy} | {counts.get(name, 0)} | {_cell(c.summary.split('. ')[0].rstrip('.'))}. |")
    return "\n".join(rows)


def markdown_page() -> str:
    """docs/categories.md: every category with its remedy, and every curated signature with its source."""
    cat = catalog()
    out = ["# Failure categories and signatures", "",
           "Generated by `rocm-doctor explain --list --markdown` from `playbooks/signatures.yaml` and "
           "`playbooks/signatures-library.json`; do not edit by hand.", "",
           "`explain` and `train` classify a log by its root exception (the first failing rank's original one), "
           "matched against these signatures; other evidence (runtime lines, HF log dicts, the launcher's signal) "
           "competes at lower weight, and where no message matches, the package that raised decides at low "
           "confidence. Below 0.4 the answer is `unknown`.", ""]
    lib: dict[str, int] = {}
    for s in cat.signatures:
        if not s.curated:
            lib[s.category] = lib.get(s.category, 0) + 1
    for name, c in cat.categories.items():
        remedy = (f"playbook `{c.playbook}` ({'applied automatically' if c.auto else 'asks first'})" if c.playbook
                  else "retried once unchanged" if c.auto else "stop: a retry cannot fix it")
        out += [f"## {name}", "", f"*Remedy:* {remedy}", "", c.summary, ""]
        sigs = [s for s in cat.signatures if s.category == name and s.curated]
        if sigs:
            out += ["| signature | matches | where | confidence | source |", "|---|---|---|---|---|"]
            for s in sigs:
                out.append(f"| `{s.id}` | `{_cell(s.source_pattern[:90])}` | {s.where} | {s.confidence:.2f} | "
                           f"{_cell(s.source)} |")
            out.append("")
        if lib.get(name):
            out += [f"Plus {lib[name]} messages harvested from the libraries' sources "
                    "(`playbooks/signatures-library.json`).", ""]
    # a refinement of a signature carries that signature's confidence
    shape = "".join(f"\n| `{sid}` | `{c}` | {conf if conf is not None else cat.signature(sid.split(',')[0]).confidence:.2f}"
                    f" | {_cell(doc)} |" for sid, c, conf, doc in STRUCTURAL)
    out += ["## Read from the log's shape and context", "",
            "Where no message decides, the log's structure can; where a message is ambiguous, what it names decides:",
            "",
            "| signature | category | confidence | when |", "|---|---|---|---|" + shape, ""]
    frames = "".join(f"\n| `{_cell(rx.pattern)}` | `{c}`{f' (playbook `{pb}`)' if pb else ''} | {conf:.2f} |"
                     for rx, c, conf, pb in cat.frames)
    out += ["## Where no message matches", "", "The innermost frame that a rule knows decides:", "",
            "| frame (path:function, source line) | category | confidence |", "|---|---|---|" + frames, ""]
    return "\n".join(out)
