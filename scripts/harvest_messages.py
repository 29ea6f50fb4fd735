"""List the error messages the training stack can raise, to seed and refresh the signature catalog.

Walks the sources of the installed (or unpacked) libraries a LLaMA-Factory run goes through and prints
every ``raise SomeError("...")``, ``logger.error(...)``/``logger.critical(...)`` and ``sys.exit("...")``
message with its module, one JSON object per line::

    python scripts/harvest_messages.py > /tmp/messages.jsonl
    python scripts/harvest_messages.py --root /tmp/unpacked-deepspeed --package deepspeed
    python scripts/harvest_messages.py --uncovered      # only messages no signature of the catalog matches
    python scripts/harvest_messages.py --root /tmp/src-unsloth/unsloth --package unsloth      # not installed here:
    python scripts/harvest_messages.py --root /tmp/src-axolotl/src/axolotl --package axolotl  # from their sources

scripts/labels/ holds the labelled harvests (unsloth at 015bdef0, axolotl at 067b021c from their GitHub trees;
hfhub-swift-liger-flashattn.jsonl: the ``--uncovered`` messages of huggingface_hub 1.33.0 as installed and of
ms-swift 3602360a5, Liger-Kernel ead96b61, flash-attention 0251105a from their trees).

f-strings keep their literal parts with ``{...}`` where the value goes, so a message reads as a user sees
it ("Template {} does not exist."). ``--uncovered`` runs each message through the classifier's own
signature matching, which is how the catalog (``playbooks/signatures.yaml``) is kept complete for a new
LLaMA-Factory release: label what is left, add it, rerun.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# package -> the sub-paths users' failures come from (whole package when empty)
TARGETS: dict[str, tuple[str, ...]] = {
    "llamafactory": (),
    "transformers": ("trainer.py", "training_args.py", "modeling_utils.py", "tokenization_utils_base.py",
                     "tokenization_utils.py", "tokenization_utils_fast.py", "integrations/deepspeed.py",
                     "integrations/bitsandbytes.py", "integrations/flash_attention.py", "modeling_flash_attention_utils.py",
                     "hf_argparser.py", "configuration_utils.py", "dynamic_module_utils.py", "utils/hub.py",
                     "utils/import_utils.py", "utils/versions.py", "quantizers/quantizer_bnb_4bit.py",
                     "quantizers/quantizer_bnb_8bit.py", "processing_utils.py", "models/auto/", "trainer_utils.py",
                     "trainer_pt_utils.py", "integrations/", "data/data_collator.py", "modeling_rope_utils.py"),
    "peft": (),
    "accelerate": ("accelerator.py", "state.py", "utils/deepspeed.py", "utils/dataclasses.py", "commands/launch.py"),
    "trl": ("trainer/",),
    "datasets": ("load.py", "builder.py", "arrow_dataset.py"),
    "deepspeed": ("runtime/engine.py", "runtime/config.py", "runtime/zero/", "runtime/fp16/", "ops/op_builder/",
                  "op_builder/", "launcher/", "accelerator/", "utils/"),
    "bitsandbytes": (),
    "flash_attn": (),
    "torch": ("distributed/", "cuda/__init__.py", "cuda/memory.py", "utils/data/", "serialization.py",
              "utils/cpp_extension.py", "_utils.py"),
}
LOG_CALLS = {"error", "critical", "fatal", "exception", "error_rank0", "warning_rank0_once"}


def _text(node: ast.AST) -> str | None:
    """The literal text of a message argument; ``{}`` where an f-string or ``%``/format value goes."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        left, right = _text(node.left), _text(node.right)
        if isinstance(node.op, ast.Mod):
            return left
        return (left or "{}") + (right or "{}") if (left or right) else None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _text(node.func.value)
    return None


def messages(path: Path, module: str) -> list[dict[str, object]]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        kind, exc, args = None, None, []
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            f = node.exc.func
            exc = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            kind, args = "raise", node.exc.args
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in LOG_CALLS:
            kind, args = f"log.{node.func.attr}", node.args
        if kind is None or not args:
            continue
        text = _text(args[0])
        if text and len(re.sub(r"\{\}|\W", "", text)) >= 8:
            out.append({"module": module, "line": node.lineno, "kind": kind, "exception": exc,
                        "message": " ".join(text.split())})
    return out


def package_root(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def harvest(root: Path, package: str, subpaths: tuple[str, ...]) -> list[dict[str, object]]:
    files = sorted(root.rglob("*.py")) if not subpaths else sorted(
        f for sp in subpaths for f in ((root / sp).rglob("*.py") if (root / sp).is_dir() else [root / sp])
        if f.is_file())
    out = []
    for f in files:
        module = package + "." + ".".join(f.relative_to(root).with_suffix("").parts)
        out += messages(f, module.removesuffix(".__init__"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, help="an unpacked source tree instead of the installed package")
    ap.add_argument("--package", help="only this package (with --root: the package the tree is)")
    ap.add_argument("--uncovered", action="store_true", help="only messages no catalog signature matches")
    args = ap.parse_args()
    out: list[dict[str, object]] = []
    targets = {args.package: TARGETS.get(args.package, ())} if args.package else TARGETS
    for pkg, subs in targets.items():
        root = args.root if args.root else package_root(pkg)
        if root is None:
            print(f"# {pkg}: not installed (pass --root DIR --package {pkg})", file=sys.stderr)
            continue
        got = harvest(root, pkg, subs)
        print(f"# {pkg}: {len(got)} messages from {root}", file=sys.stderr)
        out += got
    if args.uncovered:
        sys.path.insert(0, str(ROOT))
        from doctor.classify import match_message

        out = [m for m in out if match_message(str(m["message"]), str(m.get("exception") or "")) is None]
        print(f"# {len(out)} not covered by the catalog", file=sys.stderr)
    for m in out:
        print(json.dumps(m, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
