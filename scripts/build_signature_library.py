"""Build playbooks/signatures-library.json from labelled harvested messages.

Input: JSON lines as ``harvest_messages.py`` prints them plus the labeller's verdict per message
(``category`` or ``skip``, a ``pattern`` and a ``confidence``). Output: the library part of the signature
catalog, one signature per distinct pattern, naming the module and line the message comes from.

A message's pattern is the shortest word prefix of its longest literal part (five words and 24 characters
at least; a message whose literal parts are all shorter than 16 characters is matched whole, its values as
wildcards) that matches no message labelled otherwise, skipped ones included: a prefix survives the small
rewordings between releases ("... with the LoRA method." became "... with the LoRA or OFT method.") where
the whole message would not, and it is extended until it is distinctive. Where no prefix is, the
labeller's own pattern is kept.

    python scripts/harvest_messages.py > messages.jsonl        # refresh for a new release
    (label each line: category / skip, pattern, confidence)
    python scripts/build_signature_library.py labels-*.jsonl
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "playbooks" / "signatures-library.json"
MAX_CONFIDENCE = 0.9  # a harvested message never outranks a curated signature of playbooks/signatures.yaml


def _literal_parts(message: str) -> list[str]:
    return [" ".join(p.split()) for p in message.split("{}") if p.strip()]


_QUOTES = "'\"`‘’“”"


def _word(w: str) -> str:
    """One word of a message as a pattern that survives the punctuation a release or a paste changes: a
    trailing comma, semicolon or colon may be missing ("When using DeepSpeed, ..." was "When using DeepSpeed
    ..."), and quotes may be any kind (straight, curly, backticks: issue text pastes them all)."""
    lead = len(w) - len(w.lstrip(_QUOTES))
    core = w.lstrip(_QUOTES)
    trail_p = ""
    if core[-1:] in ",;:":
        trail_p, core = "[,;:]?", core[:-1]
    elif core[-1:] == "." and core[-2:-1] in tuple(_QUOTES):
        trail_p, core = r"\.", core[:-1]
    body = core.rstrip(_QUOTES)
    quotes_after = len(core) - len(body)
    q = "[" + re.escape(_QUOTES) + "]"
    if not body:
        return re.escape(w)
    return q * lead + re.escape(body) + q * quotes_after + trail_p


def distinctive(message: str, category: str, others: list[tuple[str, str]]) -> str | None:
    """The shortest distinctive prefix pattern (see the module docs), or None."""
    parts = _literal_parts(message)
    if not parts:
        return None
    first, longest = parts[0], max(parts, key=len)
    seg = first if len(first) >= 24 else longest
    words = seg.split(" ")
    for k in range(min(5, len(words)), len(words) + 1):
        lead = words[:k]
        pat = r"\s+".join(_word(w) for w in lead)
        if len(" ".join(lead)) < 24 and k < len(words):
            continue
        if len(" ".join(lead)) < 16 and len(parts) > 1:
            # a short fragment ("Cannot open" of "Cannot open {} due to {}.") matches other libraries' and the
            # system's messages too: the whole message, its values as wildcards
            pat = r".{0,300}?".join(r"\s+".join(_word(w) for w in part.split(" ")) for part in parts)
        rx = re.compile(pat, re.I)
        if not any(rx.search(text) for text, cat in others if cat != category):
            return pat
    return None


def main(paths: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    from doctor.classify import anchors, load_catalog

    known = set(load_catalog().categories)
    rows = [(path, json.loads(line)) for path in paths
            for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    others = [(r["message"].replace("{}", "X"), r.get("category") or "skip") for _, r in rows]
    seen: dict[str, dict] = {}
    for path, r in rows:
        cat = r.get("category")
        if not cat or cat == "skip" or cat.startswith("other:") or not r.get("pattern"):
            continue
        if cat not in known:
            raise SystemExit(f"{path}: unknown category {cat!r} for {r['module']}:{r['line']}")
        pattern = distinctive(r["message"], cat, others) or r["pattern"]
        re.compile(pattern, re.I)
        src = f"{r['module']}:{r['line']}"
        if pattern in seen:
            seen[pattern]["source"] += f", {src}"
            continue
        found = anchors(pattern)
        seen[pattern] = {"id": f"lib-{r['module']}-{r['line']}", "category": cat, "pattern": pattern,
                         "confidence": min(float(r.get("confidence") or 0.6), MAX_CONFIDENCE),
                         "where": "line" if str(r.get("kind", "")).startswith("log.") else "exception",
                         "source": src, "message": r["message"][:300],
                         "anchors": sorted(found) if found is not None else None}
    sigs = sorted(seen.values(), key=lambda s: (s["category"], s["id"]))
    OUT.write_text(json.dumps({"generated_by": "scripts/build_signature_library.py",
                               "signatures": sigs}, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{OUT}: {len(sigs)} signatures")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
