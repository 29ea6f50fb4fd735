"""Write doctor/data/transformers-tokenizer-classes.txt: the tokenizer classes the installed transformers exports.

`Tokenizer class X does not exist or is not currently imported` names a class from the model's
tokenizer_config.json. Where transformers itself ships X (in this release), the failing environment's
transformers predates it (a dependency_version verdict: upgrade); where it does not, X is the model's own
remote code (trust_remote_code, the model files). Refresh with a newer transformers installed:

    python scripts/list_tokenizer_classes.py
"""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "doctor" / "data" / "transformers-tokenizer-classes.txt"


def main() -> None:
    import transformers

    names = sorted({n for n in dir(transformers) if n.endswith(("Tokenizer", "TokenizerFast"))})
    OUT.write_text(f"# tokenizer classes exported by transformers {transformers.__version__} "
                   "(scripts/list_tokenizer_classes.py)\n" + "\n".join(names) + "\n", encoding="utf-8")
    print(f"{OUT}: {len(names)} classes from transformers {transformers.__version__}")


if __name__ == "__main__":
    main()
