"""Template tokens with real tokenizer files (npm) and tiny models built here."""

import json

import pytest

from tests.conftest import run_cli, stack, write_config


def _check(tmp_path, model, **cfg):
    c = write_config(tmp_path / "c.yaml", model_name_or_path=str(model), stage="sft", do_train=True,
                     finetuning_type="lora", output_dir=str(tmp_path / "out"), **cfg)
    r = run_cli("check", "--json", "--only", "template", str(c))
    assert "Traceback" not in r.stderr
    return json.loads(r.stdout)["findings"]


@stack
def test_llama3_template_on_llama3_tokenizer_is_ok(tmp_path, tiny_llama3):
    f = _check(tmp_path, tiny_llama3, template="llama3")
    ok = [x for x in f if x["id"] == "TPL000"]
    assert ok, f
    assert "<|eot_id|>" in ok[0]["evidence"]["tokens"] and "<|start_header_id|>" in ok[0]["evidence"]["tokens"]


@stack
def test_llama3_template_on_qwen3_tokenizer_names_the_right_one(tmp_path, tiny_qwen3):
    f = _check(tmp_path, tiny_qwen3, template="llama3")
    got = {x["id"]: x for x in f}
    assert got["TPL003"]["evidence"]["suggested"].startswith("qwen3"), got["TPL003"]
    assert "<|eot_id|>" in got["TPL003"]["evidence"]["unknown"]
    assert "TPL001" in got  # header tokens split into pieces
    added = [x for x in f if x["id"] == "TPL002"]
    assert added and added[0]["evidence"]["token"] in ("<|eot_id|>", "<|eom_id|>")


@stack
def test_qwen_template_on_qwen3_tokenizer_is_ok(tmp_path, tiny_qwen3):
    f = _check(tmp_path, tiny_qwen3, template="qwen3_nothink")
    assert any(x["id"] == "TPL000" for x in f), f


@stack
def test_added_token_beyond_embedding_is_error(tmp_path, tiny_llama3):
    # gemma's stop word <end_of_turn> is unknown to Llama-3: added at id 128256 == vocab size
    f = _check(tmp_path, tiny_llama3, template="gemma")
    beyond = [x for x in f if x["id"] == "TPL002" and x["severity"] == "error"]
    assert beyond and beyond[0]["evidence"]["id"] >= beyond[0]["evidence"]["model_vocab"]
    assert beyond[0]["playbook"] == "resize-vocab"


def test_hub_model_is_not_fetched(tmp_path):
    f = _check(tmp_path, "meta-llama/Meta-Llama-3-8B-Instruct", template="llama3")
    assert [x["id"] for x in f] == ["TPL004"]


@stack
def test_tokenizer_load_shortcut_changes_no_report(tmp_path, tiny_llama3, tiny_qwen3):
    """The probe skips transformers' deepcopy of the backend it just built and its full parse of tokenizer.json for
    the added tokens alone (the tiny models are saved by transformers 5, without ``added_tokens_decoder``): the
    report must be the one the plain ``AutoTokenizer.from_pretrained`` load gives, and the modules' ``copy`` and
    ``json`` must be put back."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = (
        "import json, sys, copy\n"
        "from doctor.probes.llamafactory import probe_template_tokens\n"
        "import transformers.tokenization_utils_tokenizers as b\n"
        "import transformers.tokenization_utils_base as tb\n"
        "out = []\n"
        "for model, tpl in json.loads(sys.argv[1]):\n"
        "    fast = probe_template_tokens(model, tpl, None)\n"
        "    exact = probe_template_tokens(model, tpl, None, exact_load=True)\n"
        "    out.append([fast == exact, len(fast['added_tokens']), fast['tokenizer_len']])\n"
        "print(json.dumps({'same': out, 'restored': b.copy is copy and tb.json is json}))\n")
    # the same tokenizer with `added_tokens` written last, after the 9 MB vocabulary: read to the end, same report
    import shutil

    moved = tmp_path / "added-last"
    shutil.copytree(tiny_llama3, moved)
    tj = json.loads((moved / "tokenizer.json").read_text(encoding="utf-8"))
    tj["added_tokens"] = tj.pop("added_tokens")
    (moved / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    cases = [[str(tiny_llama3), "llama3"], [str(tiny_llama3), "gemma"], [str(tiny_qwen3), "llama3"],
             [str(moved), "llama3"]]
    r = subprocess.run([sys.executable, "-c", code, json.dumps(cases)], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["restored"]
    assert all(same for same, _, _ in got["same"]), got
    assert any(added for _, added, _ in got["same"])  # the gemma case adds tokens: the fix ran on both loads


def test_top_level_value_parses_only_the_outer_key():
    """The added-tokens shortcut reads ``added_tokens`` of the outermost object or gives up (full parse)."""
    from doctor.probes.llamafactory import _top_level_value

    text = '{"version": "1.0", "truncation": null, "padding": {"x": "a\\"}"}, "added_tokens" :\n [{"id": 1}], "model": {}}'
    assert _top_level_value(text, "added_tokens") == [{"id": 1}]
    assert _top_level_value('{"s": "\\"added_tokens\\": [9]", "added_tokens": [3]}', "added_tokens") == [3]
    for bad in ('{"a": {"added_tokens": [1]}, "added_tokens": [2]}', '[{"added_tokens": [1]}]', '{"model": {}}',
                '{"added_tokens" [1]}'):
        with pytest.raises(KeyError):
            _top_level_value(bad, "added_tokens")
