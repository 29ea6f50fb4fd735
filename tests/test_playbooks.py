"""Playbook engine and catalog: real ruamel round trips of real-looking configs, no mocks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import playbooks as pbs
from checks.attention import ATTN002
from doctor import classify, codes
from doctor.config import dump_config, yaml_rt
from tests.conftest import ROOT, run_cli

GUIDE = (ROOT / "examples" / "llama3_lora_rocm.yaml").read_text()


def load(text: str):
    return yaml_rt().load(text)


def apply(pid: str, text: str, **inp):
    cm = load(text)
    out = pbs.apply(pbs.catalog()[pid], cm, pbs.PatchInput(**inp))
    return out, dump_config(cm)


def test_catalog_covers_every_referenced_playbook_consistently():
    cat = pbs.catalog()
    for c in codes.all_codes():
        if c.playbook:
            assert c.playbook in cat, c.id
            assert c.id in cat[c.playbook].findings, (c.id, c.playbook)
            assert cat[c.playbook].auto or not c.autofix, c.id  # a finding may only be stricter
    for name, c in classify.categories().items():
        answering = [p.id for p in cat.values() if name in p.categories and p.auto]
        if c.playbook is not None:
            assert c.playbook in answering, name  # explain names a playbook train applies for the category
            assert c.auto and not c.stop, name
        else:
            assert c.stop or name == "killed_by_signal" or name == "hang", name  # no remedy: said explicitly
    for p in cat.values():
        for cat_name in p.categories:
            assert cat_name in classify.categories()
        assert {"what", "why", "safe"} <= set(p.doc), p.id


def test_drop_unknown_keys_keeps_comments_and_order():
    out, text = apply("drop-unknown-keys", GUIDE)
    assert out.changes == ["device_map: removed (was auto)"]
    assert "device_map" not in text
    assert "### method" in text and "# Llama-3-8B LoRA SFT" in text  # section header below the key survives
    keys = [ln.split(":")[0] for ln in text.splitlines() if ln and not ln.startswith("#")]
    orig = [ln.split(":")[0] for ln in GUIDE.splitlines() if ln and not ln.startswith("#") and "device_map" not in ln]
    assert keys == orig


def test_drop_unknown_keys_renames_and_never_drops_real_keys():
    text = "model_name_or_path: m  # my model\nevaluation_strategy: steps  # old name\nmax_seq_length: 512\n" \
           "learning_rate: 1e-4\n"
    out, new = apply("drop-unknown-keys", text)
    assert re.search(r"eval_strategy: steps +# old name", new) and "cutoff_len: 512" in new
    assert "model_name_or_path: m  # my model" in new
    # the classifier's key list of a training YAML sent to the wrong subcommand names real keys: keep them
    c = classify.classify_text("ValueError: Some keys are not used by the HfArgumentParser: "
                               "['learning_rate', 'model_name_or_path']")
    out, new = apply("drop-unknown-keys", text.replace("evaluation_strategy: steps  # old name\n", "")
                     .replace("max_seq_length: 512\n", ""), classification=c)
    assert not out.changed


def test_rename_when_target_exists_drops_old():
    out, new = apply("drop-unknown-keys", "cutoff_len: 1024\nmax_seq_length: 512\n")
    assert "max_seq_length" not in new and "cutoff_len: 1024" in new


def test_disable_flash_attn_prefers_sdpa_unless_sdpa_is_broken():
    out, new = apply("disable-flash-attn", "template: llama3\nflash_attn: fa2\n")
    assert "flash_attn: sdpa" in new
    broken = ATTN002.finding("SDPA flash backend gives wrong results")
    out, new = apply("disable-flash-attn", "template: llama3\nflash_attn: fa2\n", findings=[broken])
    assert "flash_attn: disabled" in new
    out, new = apply("disable-flash-attn", "template: llama3\ncutoff_len: 8\n")
    assert new.splitlines()[1] == "flash_attn: disabled"  # added next to the template
    out, _ = apply("disable-flash-attn", "flash_attn: disabled\n")
    assert not out.changed


def test_qlora_to_lora_and_prequantized_stop():
    text = "finetuning_type: lora\nquantization_bit: 4\nquantization_method: bnb\ndouble_quantization: true\n" \
           "learning_rate: 1.0e-4\n"
    out, new = apply("qlora-to-lora", text)
    assert new == "finetuning_type: lora\nlearning_rate: 1.0e-4\n"
    out, new = apply("qlora-to-lora", text, model_config={"quantization_config": {"quant_method": "bitsandbytes"}})
    assert out.stop and "pre-quantized" in out.stop and new == text


def test_reduce_memory_steps_keep_effective_batch():
    text = "per_device_train_batch_size: 4\ngradient_accumulation_steps: 2\ncutoff_len: 4096\n"
    cm = load(text)
    pb = pbs.catalog()["reduce-memory"]
    seen = []
    for _ in range(6):
        out = pbs.apply(pb, cm)
        seen.append((cm.get("per_device_train_batch_size"), cm.get("gradient_accumulation_steps"), cm.get("cutoff_len")))
        if not out.changed:
            break
    assert seen[:2] == [(2, 4, 4096), (1, 8, 4096)]
    assert all(b * g == 8 for b, g, _ in seen)
    assert seen[2][2] == 2048 and seen[3][2] == 1024 and seen[4][2] == 512
    cm = load("per_device_train_batch_size: 1\ndisable_gradient_checkpointing: true\n")
    out = pbs.apply(pb, cm)
    assert "disable_gradient_checkpointing" not in cm and out.changed


def test_lower_lr_and_declaratives():
    out, new = apply("lower-lr", "learning_rate: 1000\nmax_grad_norm: 5.0\n")
    assert "learning_rate: 0.0002" in new and "max_grad_norm: 1.0" in new
    out, new = apply("lower-lr", "learning_rate: 1e-4\nfinetuning_type: full\n")
    assert "learning_rate: 1e-05" in new
    out, new = apply("fix-precision", "bf16: true\nfp16: true\n")
    assert new == "bf16: true\n"
    out, _ = apply("fix-precision", "bf16: true\n")
    assert not out.changed
    out, new = apply("bf16-to-fp16", "bf16: true  # precision\npure_bf16: true\n")
    assert new == "fp16: true  # precision\n"
    out, new = apply("raise-ddp-timeout", "ddp_timeout: 1800\n")
    assert "ddp_timeout: 180000000" in new
    out, _ = apply("raise-ddp-timeout", "ddp_timeout: 180000000\n")
    assert not out.changed
    out, new = apply("ddp-find-unused", "finetuning_type: lora\nddp_find_unused_parameters: false\n")
    assert "ddp_find_unused_parameters: true" in new and "finetuning_type: lora" in new
    out, new = apply("non-reentrant-gc", "gradient_checkpointing: true\n")
    assert "use_reentrant_gc: false" in new
    out, new = apply("optim-torch-off", "a: 1\n")
    assert out.env == {"OPTIM_TORCH": "0"} and new == "a: 1\n"


def test_site_playbook_file(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("- id: no-packing\n  title: Turn packing off\n  answers: {categories: [oom]}\n  auto: true\n"
                    "  when: {packing: true}\n  ops:\n    - unset: [packing]\n"
                    "  doc: {what: x, why: y, safe: z}\n")
    cat = pbs.catalog({"ROCM_DOCTOR_PLAYBOOKS": str(site)})
    assert "no-packing" in cat and "reduce-memory" in cat
    cm = load("packing: true\nlr: 1\n")
    assert pbs.apply(cat["no-packing"], cm).changed and "packing" not in cm
    bad = tmp_path / "bad.yaml"
    bad.write_text("- id: x\n  ops:\n    - explode: [a]\n")
    r = run_cli("playbooks", env={"ROCM_DOCTOR_PLAYBOOKS": str(bad)})
    assert r.returncode == 2 and "each op must be one of" in r.stderr
    assert "Traceback" not in r.stderr


def test_docs_in_sync():
    page = (ROOT / "docs" / "playbooks.md").read_text()
    assert page.strip() == pbs.markdown_page().strip(), "regenerate: rocm-doctor playbooks --markdown"
    readme = (ROOT / "README.md").read_text()
    assert pbs.markdown_table() in readme, "README playbooks table out of date"


# ------------------------------------------------------------------ fix (quick mode: cached schema, no torch)

def test_fix_writes_copy_and_diff(tmp_path):
    src = tmp_path / "guide.yaml"
    src.write_text(GUIDE)
    before = src.read_bytes()
    r = run_cli("fix", str(src), "--quick", "--json", cwd=tmp_path)
    assert r.returncode in (0, 1), r.stderr
    d = json.loads(r.stdout)
    assert d["schema"] == "rocm-doctor.fix/1"
    assert [a["playbook"] for a in d["applied"]] == ["drop-unknown-keys"]
    out = Path(d["output"])
    assert out == tmp_path / "guide.fixed.yaml" and out.is_file()
    assert "-device_map: auto" in d["diff"]
    assert src.read_bytes() == before
    fixed = out.read_text()
    assert "device_map" not in fixed and "### method" in fixed
    # the copy passes the same lint
    r2 = run_cli("check", str(out), "--quick", "--json", "--only", "config", cwd=tmp_path)
    assert "CFG001" not in [f["id"] for f in json.loads(r2.stdout)["findings"]]


def test_fix_refuses_to_overwrite_and_bad_apply(tmp_path):
    src = tmp_path / "c.yaml"
    src.write_text(GUIDE)
    r = run_cli("fix", str(src), "--quick", "-o", str(src), cwd=tmp_path)
    assert r.returncode == 2 and "refusing" in r.stderr
    r = run_cli("fix", str(src), "--quick", "--apply", "nope", cwd=tmp_path)
    assert r.returncode == 2 and "unknown playbook" in r.stderr
    r = run_cli("fix", str(tmp_path / "missing.yaml"), "--quick")
    assert r.returncode == 2 and "not found" in r.stderr
    assert src.read_text() == GUIDE


@pytest.mark.parametrize("name", ["x.yaml", "x.yml", "x.conf"])
def test_default_output(name):
    from doctor.commands.fix import default_output

    out = default_output(Path("/a") / name)
    assert out.parent == Path("/a") and ".fixed." in out.name and out.name != name


def test_secrets_never_reach_fix_output(tmp_path):
    token = "hf_SecretPlantedInTheConfig1234567"
    src = tmp_path / "c.yaml"
    src.write_text(f"hf_hub_token: {token}\nmodel_name_or_path: m\ndevice_map: auto\nwandb_key: plainvalue42\n"
                   "template: llama3\n")
    r = run_cli("fix", str(src), "--quick", "--json", cwd=tmp_path)
    assert token not in r.stdout + r.stderr and "plainvalue42" not in r.stdout + r.stderr
    d = json.loads(r.stdout)
    assert "-device_map: auto" in d["diff"] and "hf_hub_token: <redacted>" in d["diff"]
    changes = [c for a in d["applied"] for c in a["changes"]]
    assert "wandb_key: removed (was <redacted>)" in changes  # an unknown key, dropped, value not shown
    assert token in Path(d["output"]).read_text()  # the copy itself keeps what training needs


def test_mask_command_overrides():
    from doctor.redact import mask

    assert mask("hf_hub_token=abcdefgh12345") == "hf_hub_token=<redacted:token>"
    assert mask("max_steps=4") == "max_steps=4" and mask("/tmp/run/attempt-1.yaml") == "/tmp/run/attempt-1.yaml"


def test_fp16_to_bf16_only_where_the_classifier_saw_the_scale_collapse():
    """The handler trusts the classifier's choice: DeepSpeed's loss scaler at its minimum moves fp16 to bf16, a
    NaN loss with no overflow in evidence leaves the precision alone."""
    collapse = classify.classify_text("Exception: Current loss scale already at minimum - cannot decrease scale "
                                      "anymore. Exiting run.")
    out, new = apply("fp16-to-bf16", "fp16: true\nlearning_rate: 1.0e-4\n", classification=collapse)
    assert "fp16:" not in new and "bf16: true" in new, new
    nan = classify.classify_text("{'loss': nan, 'grad_norm': nan, 'learning_rate': 1e-05, 'epoch': 0.1}")
    assert nan.category == "nan_or_divergent_loss" and nan.playbook != "fp16-to-bf16"
    out, new = apply("fp16-to-bf16", "fp16: true\nlearning_rate: 1.0e-4\n", classification=nan)
    assert not out.changes and "fp16: true" in new
