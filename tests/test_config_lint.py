"""Config lint: quick mode (cached schema, no torch) and full mode (the real LLaMA-Factory 0.9.5 parser)."""

import json
import time

from tests.conftest import ROOT, run_cli, stack, write_config, write_dataset

EXAMPLE = ROOT / "examples" / "llama3_lora_rocm.yaml"


def ids(r):
    return [f["id"] for f in json.loads(r.stdout)["findings"]]


def findings(r):
    return json.loads(r.stdout)["findings"]


def test_quick_example_flags_device_map_fast():
    t0 = time.monotonic()
    r = run_cli("check", "--quick", "--json", str(EXAMPLE))
    assert r.returncode == 1, r.stderr
    f = {x["id"]: x for x in findings(r)}
    assert "device_map" in f["CFG001"]["title"] and f["CFG001"]["playbook"] == "drop-unknown-keys"
    assert "CFG004" in f  # hub id
    assert "CFG016" in f  # says it used the cached schema
    assert time.monotonic() - t0 < 5  # includes interpreter start; the benchmark measures it properly


def test_quick_does_not_import_torch(tmp_path):
    code = ("import sys; from doctor.preflight import run_check; "
            f"run_check({str(EXAMPLE)!r}, quick=True); print('torch' in sys.modules)")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_quick_lints_values(tmp_path):
    cfg = write_config(tmp_path / "c.yaml", model_name_or_path=str(tmp_path), stage="sft", do_train=True,
                       template="llama3", quantization_bit=4, quantization_method="bitsandbytes",
                       flash_attn=True, bf16=True, fp16=True, evaluation_strategy="steps",
                       learning_rate="fast", output_dir=str(tmp_path / "out"))
    r = run_cli("check", "--quick", "--json", str(cfg))
    f = findings(r)
    got = {x["id"] for x in f}
    assert {"CFG001", "CFG002", "CFG003", "CFG017"} <= got
    cfg001 = next(x for x in f if x["id"] == "CFG001")
    assert cfg001["evidence"]["renames"] == {"evaluation_strategy": "eval_strategy"}
    qm = [x for x in f if x["id"] == "CFG002" and x["evidence"]["key"] == "quantization_method"]
    assert qm and "silently" in qm[0]["detail"]


def test_datasets_and_relative_dir(tmp_path):
    write_dataset(tmp_path / "data")
    cfg = write_config(tmp_path / "c.yaml", model_name_or_path=str(tmp_path), template="llama3",
                       dataset="tiny,missing_one", dataset_dir="data", output_dir="out")
    r = run_cli("check", "--quick", "--json", str(cfg), cwd=tmp_path)
    f = [x for x in findings(r) if x["id"] == "CFG007"]
    assert len(f) == 1 and "missing_one" in f[0]["title"] and "working directory" in f[0]["title"]
    r2 = run_cli("check", "--quick", "--json", str(cfg), cwd=ROOT)  # from elsewhere: dir not found
    assert any("dataset_info.json not found" in x["title"] for x in findings(r2) if x["id"] == "CFG007")


def test_deepspeed_checks(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "ds.json").write_text(json.dumps({"fp16": {"enabled": True}, "zero_optimization": {"stage": 2},
                                                  "scheduler": {"params": {"total_num_steps": 0}}}))
    c1 = write_config(tmp_path / "c1.yaml", model_name_or_path=str(tmp_path), template="llama3",
                      deepspeed=str(tmp_path / "bad.json"))
    c2 = write_config(tmp_path / "c2.yaml", model_name_or_path=str(tmp_path), template="llama3", bf16=True,
                      deepspeed=str(tmp_path / "ds.json"))
    assert "CFG008" in ids(run_cli("check", "--quick", "--json", str(c1)))
    f = findings(run_cli("check", "--quick", "--json", str(c2), env={"FORCE_TORCHRUN": ""}))
    cfg9 = next(x for x in f if x["id"] == "CFG009")
    assert "fp16.enabled=true" in cfg9["detail"] and "total_num_steps" in cfg9["detail"]
    assert "CFG010" in {x["id"] for x in f}


def test_overwrite_output_dir_with_checkpoints(tmp_path):
    (tmp_path / "out" / "checkpoint-4").mkdir(parents=True)
    (tmp_path / "out" / "checkpoint-12").mkdir()
    c = write_config(tmp_path / "c.yaml", model_name_or_path=str(tmp_path), template="llama3",
                     output_dir=str(tmp_path / "out"), overwrite_output_dir=True)
    f = {x["id"]: x for x in findings(run_cli("check", "--quick", "--json", str(c)))}
    assert f["CFG011"]["evidence"]["checkpoints"] == ["checkpoint-4", "checkpoint-12"]
    c2 = write_config(tmp_path / "c2.yaml", model_name_or_path=str(tmp_path), template="llama3",
                      output_dir=str(tmp_path / "out"))
    f2 = {x["id"]: x for x in findings(run_cli("check", "--quick", "--json", str(c2)))}
    assert "checkpoint-12" in f2["CFG012"]["title"]


def test_optim_torch_and_ddp_timeout_on_rocm_multi_gpu(tmp_path):
    from checks.config import lint
    from doctor.context import Context, Options

    c = write_config(tmp_path / "c.yaml", model_name_or_path=str(tmp_path), template="llama3")
    ctx = Context.build(Options(config=str(c), quick=True), env={"PYTORCH_HIP_ALLOC_CONF": "garbage_collection_threshold:0.8"})
    ctx.facts["system"] = {"gpus": [{"vendor": "amd", "arch": "gfx942"}] * 8}
    got = {f.id: f for f in lint(ctx)}
    assert "CFG013" in got and "CFG014" in got and "garbage_collection" in got["CFG014"].detail
    ctx.env["OPTIM_TORCH"] = "0"
    assert "CFG014" not in {f.id for f in lint(ctx)}


@stack
def test_full_lint_uses_real_parser_on_example():
    r = run_cli("check", "--json", "--only", "config", str(EXAMPLE))
    f = {x["id"]: x for x in findings(r)}
    assert "CFG001" in f and "CFG016" not in f  # real llamafactory, not the cached schema
    assert json.loads(r.stdout)["environment"]["llamafactory_schema"].startswith("llamafactory 0.9.5")


@stack
def test_full_lint_reports_llamafactory_validation(tmp_path, tiny_llama3):
    write_dataset(tmp_path / "data")
    c = write_config(tmp_path / "c.yaml", model_name_or_path=str(tiny_llama3), stage="sft", do_train=True,
                     finetuning_type="full", quantization_bit=4, template="llama3", dataset="tiny",
                     dataset_dir=str(tmp_path / "data"), output_dir=str(tmp_path / "out"))
    f = findings(run_cli("check", "--json", "--only", "config", str(c)))
    q = [x for x in f if x["id"] == "CFG018"]
    assert q and "LoRA" in q[0]["detail"]
    good = write_config(tmp_path / "g.yaml", model_name_or_path=str(tiny_llama3), stage="sft", do_train=True,
                        finetuning_type="lora", template="llama3", dataset="tiny",
                        dataset_dir=str(tmp_path / "data"), output_dir=str(tmp_path / "out2"))
    r = run_cli("check", "--json", "--only", "config", str(good))
    assert r.returncode == 0 and "CFG000" in ids(r), r.stdout


@stack
def test_bundled_schema_matches_installed_llamafactory():
    from doctor.lfschema import BUNDLED_DIR
    from doctor.probes.llamafactory import probe_lf_schema

    live = probe_lf_schema()
    bundled = json.loads((BUNDLED_DIR / f"lf-schema-{live['llamafactory']}.json").read_text())
    assert bundled["fields"] == json.loads(json.dumps(live["fields"]))
    assert bundled["dependency_ranges"] == live["dependency_ranges"]
    assert "device_map" not in bundled["fields"]
