"""What a config turns on (issue: every missing piece at once): the requirements pass on the real
LLaMA-Factory, the verdicts of the DeepSpeed / bitsandbytes-optimizer / Liger / Unsloth probes on injected
results, the quantization facts, the attention cases closer to training, and their playbooks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import playbooks as pbs
from checks import attention, features
from checks.bitsandbytes import judge_prequantized
from doctor.config import dump_config, yaml_rt
from tests.conftest import run_cli, stack

slow = pytest.mark.slow

# LLaMA-Factory's own examples/deepspeed/ds_z3_offload_config.json and ds_z2_config.json (v0.9.5)
DS_Z3_OFFLOAD = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                 "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "zero_allow_untested_optimizer": True,
                 "fp16": {"enabled": "auto", "loss_scale": 0}, "bf16": {"enabled": "auto"},
                 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                                       "offload_param": {"device": "cpu", "pin_memory": True}, "overlap_comm": False,
                                       "contiguous_gradients": True, "sub_group_size": 1e9, "reduce_bucket_size": "auto",
                                       "stage3_prefetch_bucket_size": "auto",
                                       "stage3_param_persistence_threshold": "auto", "stage3_max_live_parameters": 1e9,
                                       "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": True}}
DS_Z2 = {"train_batch_size": "auto", "zero_optimization": {"stage": 2, "allgather_partitions": True,
                                                           "overlap_comm": False, "contiguous_gradients": True}}


def ids(fs):
    return sorted(f.id for f in fs)


# ---------------------------------------------------------------- the two measured cases, on the real stack

def _cfg(tmp: Path, **over) -> Path:
    cfg = {"model_name_or_path": str(tmp / "model"), "stage": "sft", "do_train": True, "finetuning_type": "lora",
           "lora_target": "all", "dataset": "identity", "template": "llama3", "output_dir": "out"}
    cfg.update(over)
    p = tmp / "cfg.yaml"
    p.write_text(json.dumps(cfg))
    return p


@stack
@slow
def test_zero3_offload_and_liger_name_every_missing_package_at_once(tmp_path):
    (tmp_path / "ds_z3_offload.json").write_text(json.dumps(DS_Z3_OFFLOAD))
    cfg = _cfg(tmp_path, deepspeed="ds_z3_offload.json", enable_liger_kernel=True)
    r = run_cli("check", str(cfg), "--only", "config,features", "--json", cwd=tmp_path)
    fs = json.loads(r.stdout)["findings"]
    missing = {f["evidence"]["package"]: f for f in fs if f["id"] == "FEAT001"}
    assert set(missing) == {"deepspeed", "liger-kernel"}, [(f["id"], f["title"]) for f in fs]
    assert missing["deepspeed"]["evidence"]["settings"] == ["deepspeed"]
    assert missing["liger-kernel"]["evidence"]["settings"] == ["enable_liger_kernel"]
    assert all(f["severity"] == "error" and "\n" not in f["title"] for f in missing.values())
    # not LLaMA-Factory's parser stopping at the first one, and not accelerate's garbled message
    assert not any("No package metadata" in (f["title"] + f["detail"]) for f in fs)
    assert not any(f["id"] == "CFG015" for f in fs)


@stack
@slow
def test_paged_8bit_optimizer_without_bitsandbytes_is_an_error(tmp_path):
    r = run_cli("check", str(_cfg(tmp_path, optim="paged_adamw_8bit")), "--only", "features", "--json", cwd=tmp_path)
    fs = json.loads(r.stdout)["findings"]
    f = next(f for f in fs if f["id"] == "FEAT001")
    assert f["evidence"]["package"] == "bitsandbytes" and f["evidence"]["settings"] == ["optim: paged_adamw_8bit"]
    assert "transformers.Trainer.get_optimizer_cls_and_kwargs" in f["evidence"]["sources"]  # transformers' own check
    assert r.returncode == 1


# ---------------------------------------------------------------- verdicts on injected probe results

def test_requirements_merge_and_versions():
    data = {"requirements": [
        {"package": "bitsandbytes", "requirement": "bitsandbytes>=0.39.0", "installed": "0.42.0", "ok": True,
         "mandatory": True, "source": "llamafactory.model.model_utils.quantization.configure_quantization"},
        {"package": "bitsandbytes", "requirement": "bitsandbytes>=0.43.0", "installed": "0.42.0", "ok": False,
         "mandatory": True, "source": "llamafactory...configure_quantization (ZeRO-3 / FSDP)"},
        {"package": "badam", "requirement": "badam>=1.2.1", "installed": None, "ok": False, "mandatory": True,
         "source": "llamafactory.hparams.parser._check_extra_dependencies"},
        {"package": "vllm", "requirement": "vllm>=0.4.3,<=0.11.0", "installed": "0.12.0", "ok": False,
         "mandatory": False, "source": "llamafactory.hparams.parser._check_extra_dependencies"}]}
    fs = features.judge_requirements(data)
    assert ids(fs) == ["FEAT001", "FEAT002"]  # the non-mandatory vllm range is LLaMA-Factory's own warning only
    old = next(f for f in fs if f.id == "FEAT002")
    assert "bitsandbytes 0.42.0 does not satisfy `bitsandbytes>=0.43.0`" in old.title
    assert old.evidence["settings"] == ["quantization_bit with ZeRO-3"]
    assert next(f for f in fs if f.id == "FEAT001").evidence["settings"] == ["use_badam"]


def test_deepspeed_op_verdicts():
    ok = {"version": "0.16.4", "accelerator": "cuda", "toolchain": {"ninja": True, "compiler": "/opt/rocm/bin/hipcc",
                                                                    "cxx": "/usr/bin/c++", "python_headers": True, "hip": True},
          "ops": {"cpu_adam": {"prebuilt": False, "compatible": True, "loaded": True, "load_s": 71.2}}}
    assert features.judge_deepspeed(ok, ["cpu_adam"]) == []
    broken = json.loads(json.dumps(ok))
    broken["toolchain"]["ninja"] = False
    broken["ops"]["cpu_adam"] = {"prebuilt": False, "compatible": True, "loaded": False,
                                 "error": "RuntimeError: Ninja is required to load C++ extensions"}
    f = features.judge_deepspeed(broken, ["cpu_adam"])[0]
    assert f.id == "FEAT010" and f.playbook == "deepspeed-no-offload" and "ninja" in f.detail
    fused = json.loads(json.dumps(broken))
    fused["ops"] = {"fused_adam": {"prebuilt": False, "compatible": True, "loaded": False,
                                   "error": "fused_adam.cu:12: error: no member named 'x'"}}
    assert features.judge_deepspeed(fused, ["fused_adam"])[0].playbook is None  # offload is not the cause
    cpu = {**ok, "accelerator": "cpu"}
    assert ids(features.judge_deepspeed(cpu, ["cpu_adam"])) == ["FEAT011"]


def test_ds_ops_from_llamafactory_examples():
    assert features.ds_ops(DS_Z3_OFFLOAD) == ["cpu_adam"]
    assert features.ds_ops(DS_Z2) == []
    assert features.ds_ops({**DS_Z2, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}) == ["fused_adam"]
    nvme = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}}
    assert features.ds_ops(nvme) == ["cpu_adam", "async_io"]


def test_zero3_combinations_llamafactory_refuses():
    gptq = {"quantization_config": {"quant_method": "gptq", "bits": 4}}
    f = features.judge_zero3(DS_Z3_OFFLOAD, {}, gptq)[0]
    assert f.id == "FEAT012" and "incompatible with PTQ-quantized models" in f.detail and f.playbook == "deepspeed-stage2"
    assert "Only 4-bit" in features.judge_zero3(DS_Z3_OFFLOAD, {"quantization_bit": 8}, None)[0].detail
    assert features.judge_zero3(DS_Z3_OFFLOAD, {"quantization_bit": 4}, None) == []
    assert features.judge_zero3(DS_Z2, {}, gptq) == []


def test_bnb_optimizer_liger_unsloth_verdicts():
    f = features.judge_bnb_optim({"optim": "paged_adamw_8bit", "class": "PagedAdamW8bit", "status": "error",
                                  "error": "RuntimeError: CUDA Setup failed despite GPU being available.",
                                  "version": "0.45.0"}, trainable_params=80e6)
    assert f[0].id == "FEAT020" and f[0].playbook == "optim-torch" and "0.4 GiB more" in f[0].detail
    assert ids(features.judge_bnb_optim({"optim": "adamw_8bit", "status": "no_gpu", "version": "0.49.0"})) == ["FEAT032"]
    assert features.judge_bnb_optim({"optim": "adamw_8bit", "status": "ok", "moved": 1e-3}) == []
    assert features.bnb_optimizer("paged_adamw_8bit") and features.bnb_optimizer("adamw_bnb_8bit")
    assert features.bnb_optimizer("lion_32bit") and not features.bnb_optimizer("adamw_torch")
    liger = features.judge_liger({"status": "error", "error": "triton.runtime.errors.OutOfResources: out of "
                                  "resource: shared memory", "version": "0.5.10", "model_type": "llama"})
    assert liger[0].id == "FEAT030" and liger[0].playbook == "disable-liger" and liger[0].autofix
    assert features.judge_liger({"status": "ok", "model_type": "llama", "patch": "apply_liger_kernel_to_llama"}) == []
    nopatch = features.judge_liger({"status": "ok", "model_type": "gpt2", "patch": None})
    assert nopatch[0].severity.value == "warning"
    assert ids(features.judge_unsloth({"status": "error", "error": "NotImplementedError: Unsloth: No NVIDIA GPU"})) == [
        "FEAT031"]


def test_prequantized_bnb4_on_wave64_needs_0_49_2():
    qc = {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}
    assert ids(judge_prequantized(qc, "0.49.1", "6.4.43482", ["gfx942"])) == ["BNB006"]
    assert judge_prequantized(qc, "0.49.2", "6.4.43482", ["gfx942"]) == []
    assert judge_prequantized(qc, "0.49.0", "6.4.43482", ["gfx1100"]) == []  # RDNA is wave32
    assert judge_prequantized(qc, "0.45.0", None, ["sm_90"]) == []           # CUDA
    assert judge_prequantized({"quant_method": "gptq"}, "0.45.0", "6.4", ["gfx942"]) == []


def test_attention_cases_closer_to_training():
    base = {"device": "cuda", "dtype": "bfloat16", "shape": [2, 32, 8, 512, 128], "baseline_fwd": 0.01,
            "backends": {"FLASH_ATTENTION": {"status": "ok"}, "MATH": {"status": "ok"}},
            "flash_attn": {"status": "ok"}, "flash_attn_version": "2.8.3",
            "cases": {"padded_mask": {"kind": "sdpa", "status": "wrong", "fwd_err": 0.9, "baseline_fwd": 0.01,
                                      "grad_err": [1, 1, 1], "finite": True}}}
    fs = attention.judge_attention(base, "sdpa", 2048, {}, "gfx942", True)
    f = next(x for x in fs if x.id == "ATTN002")
    assert "padded attention mask" in f.title and f.evidence["case"] == "padded_mask"
    timed = {**base, "cases": {}, "timing_ms": {"sdpa": 4.0, "flash_attn": 3.0}}
    t = next(x for x in attention.judge_attention(timed, "fa2", 2048, {}, "gfx942", True) if x.id == "ATTN009")
    assert "fa2 is faster here: 3.00 vs 4.00 ms" in t.title and "25 % less" in t.title
    big = {**base, "cases": {"large_flash_attn": {"kind": "flash_attn", "status": "wrong", "fwd_err": 3.0,
                                                  "baseline_fwd": 0.1}}}
    assert any(x.id == "ATTN001" for x in attention.judge_attention(big, "fa2", 2048, {}, "gfx942", True))


def test_attention_probe_runs_the_training_cases_on_this_cpu():
    pytest.importorskip("torch")
    from doctor.probes.kernels import probe_attention

    d = probe_attention(heads=4, kv_heads=2, head_dim=32)
    assert set(d["cases"]) == {"padded_mask", "large_values"}
    assert all(c["status"] == "ok" and c["finite"] for c in d["cases"].values()), d["cases"]


# ---------------------------------------------------------------- playbooks

def _apply(pid: str, cfg: dict, **inp):
    cm = yaml_rt().load(json.dumps(cfg))
    out = pbs.apply(pbs.catalog()[pid], cm, pbs.PatchInput(**inp))
    return out, yaml_rt().load(dump_config(cm))


def test_deepspeed_playbooks_inline_a_copy_and_leave_the_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    js = tmp_path / "ds_z3_offload.json"
    js.write_text(json.dumps(DS_Z3_OFFLOAD))
    before = js.read_text()
    out, cfg = _apply("deepspeed-no-offload", {"deepspeed": "ds_z3_offload.json", "stage": "sft"})
    zero = cfg["deepspeed"]["zero_optimization"]
    assert out.changed and "offload_optimizer" not in zero and "offload_param" not in zero and zero["stage"] == 3
    out, cfg = _apply("deepspeed-stage2", {"deepspeed": "ds_z3_offload.json"})
    zero = cfg["deepspeed"]["zero_optimization"]
    assert zero["stage"] == 2 and not [k for k in zero if k.startswith("stage3_")] and "offload_param" not in zero
    assert js.read_text() == before  # the user's JSON is never written
    assert not _apply("deepspeed-stage2", {"deepspeed": DS_Z2})[0].changed  # already stage 2
    assert not pbs.catalog()["deepspeed-no-offload"].auto and not pbs.catalog()["deepspeed-stage2"].auto


def test_optimizer_and_kernel_playbooks():
    out, cfg = _apply("optim-torch", {"optim": "paged_adamw_8bit"})
    assert cfg["optim"] == "adamw_torch" and not pbs.catalog()["optim-torch"].auto
    out, cfg = _apply("disable-liger", {"enable_liger_kernel": True})
    assert cfg["enable_liger_kernel"] is False and pbs.catalog()["disable-liger"].auto
    out, cfg = _apply("disable-unsloth", {"use_unsloth": True})
    assert cfg["use_unsloth"] is False
