"""Verdicts of the GPU probes (with injected faults), the real probes on this CPU, GPU tests marked gpu."""

import json

import pytest

from checks import attention, bf16, bitsandbytes, gpus
from checks import memory as memory_fit
from doctor import archs
from tests.conftest import fixture, run_cli, stack


def ids(fs):
    return [f.id for f in fs]


# ---------------------------------------------------------------- BF16

def test_bf16_on_gfx906_is_error_with_fix():
    fs = bf16.judge_bf16({"device": "cuda", "n": 8192, "rel_err": 2e-3, "nonfinite": False, "tflops": 20.0,
                                "name": "AMD Instinct MI50"}, "gfx906", True)
    f = next(x for x in fs if x.id == "BF16001")
    assert f.severity.value == "error" and f.playbook == "bf16-to-fp16"


def test_bf16_nan_and_slow():
    fs = bf16.judge_bf16({"device": "cuda", "n": 8192, "rel_err": float("nan"), "nonfinite": True,
                                "tflops": 100.0, "name": "AMD Instinct MI300X", "blas": "Cublas"}, "gfx942", True)
    assert "BF16002" in ids(fs) and "BF16003" in ids(fs)  # 100 of 1307 TFLOP/s is a slow BLAS path
    ok = bf16.judge_bf16({"device": "cuda", "n": 8192, "rel_err": 2e-3, "nonfinite": False,
                                "tflops": 786.0, "name": "NVIDIA H200"}, "sm_90", True)
    assert ids(ok) == ["BF16000"] and ok[0].evidence["fraction_of_peak"] == pytest.approx(0.794, abs=0.01)


# ---------------------------------------------------------------- attention

ATT_OK = {"device": "cuda", "baseline_fwd": 0.0156, "shape": [2, 32, 8, 512, 128],
          "backends": {"FLASH_ATTENTION": {"status": "ok"}, "EFFICIENT_ATTENTION": {"status": "ok"},
                       "MATH": {"status": "ok"}}, "flash_attn": {"status": "not_installed"}}


def test_attention_broken_fa2_is_error():
    data = dict(ATT_OK, flash_attn={"status": "error", "error": "ImportError: undefined symbol: _ZN3c104cuda9SetDeviceEi"})
    fs = attention.judge_attention(data, "fa2", 2048, {}, "gfx942", True)
    f = next(x for x in fs if x.id == "ATTN001")
    assert f.playbook == "disable-flash-attn" and "undefined symbol" in f.detail


def test_attention_wrong_backend_and_math_only():
    wrong = dict(ATT_OK, backends={"FLASH_ATTENTION": {"status": "wrong", "fwd_err": 3.0}, "MATH": {"status": "ok"}})
    assert "ATTN002" in ids(attention.judge_attention(wrong, "auto", 2048, {}, "gfx942", True))
    math_only = dict(ATT_OK, backends={"FLASH_ATTENTION": {"status": "unavailable"}, "MATH": {"status": "ok"}})
    assert "ATTN003" in ids(attention.judge_attention(math_only, "sdpa", 8192, {}, "gfx1030", True))
    assert "ATTN003" not in ids(attention.judge_attention(math_only, "sdpa", 1024, {}, "gfx1030", True))


# torch's own warning (pytorch aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, AOTriton >= 0.9)
EXPERIMENTAL = ("Flash Efficient attention on Current AMD GPU is still experimental. Enable it with "
                "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1.")


def test_attention_env_values():
    warned = dict(ATT_OK, sdpa_warnings=[EXPERIMENTAL])
    fs = attention.judge_attention(warned, "fa2", 2048, {"FLASH_ATTENTION_TRITON_AMD_ENABLE": "1"}, "gfx1102", True)
    assert "ATTN004" in ids(fs) and "ATTN006" in ids(fs) and "ATTN005" in ids(fs)
    fs2 = attention.judge_attention(ATT_OK, "auto", 2048, {"FLASH_ATTENTION_TRITON_AMD_ENABLE": "TRUE",
                                                            "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL": "1"},
                                     "gfx1100", True)
    assert ids(fs2) == ["ATTN000"]


def test_experimental_arch_comes_from_torch_not_a_table():
    """gfx950 and gfx1201 were experimental in AOTriton 0.9 and are not from 0.10: only torch's own warning says
    which applies to the torch installed; without it nothing is claimed."""
    for arch in ("gfx950", "gfx1201", "gfx1100"):
        assert "ATTN006" not in ids(attention.judge_attention(ATT_OK, "auto", 2048, {}, arch, True))
    fs = attention.judge_attention(dict(ATT_OK, sdpa_warnings=[EXPERIMENTAL]), "auto", 2048, {}, "gfx1151", True)
    f = next(x for x in fs if x.id == "ATTN006")
    assert "still experimental" in f.detail
    # the opt-in counts only as exactly 1: torch ignores TRUE / on and says so
    bad = attention.judge_attention(dict(ATT_OK, sdpa_warnings=[EXPERIMENTAL]), "auto", 2048,
                                    {"TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL": "TRUE"}, "gfx1151", True)
    assert {"ATTN006", "ATTN008"} <= set(ids(bad))
    from doctor import archs

    assert archs.aotriton_experimental("0.9.2b") == {"gfx950", "gfx1201"}
    assert "gfx950" not in archs.aotriton_experimental("0.10b") and "gfx1101" in archs.aotriton_experimental("0.10b")


def test_what_llamafactory_will_use_is_judged_not_the_yaml_value():
    broken = dict(ATT_OK, flash_attn={"status": "error", "error": "ImportError: undefined symbol"},
                  flash_attn_version="2.8.3", flash_attn_backend="ck")
    # Gemma-2 with `auto`: LLaMA-Factory switches to FA2 by itself when transformers' gate passes
    gemma = {"model_type": "gemma2", "fa2_gate": True, "with_fa2": "flash_attention_2", "without_fa2": "eager"}
    f = next(x for x in attention.judge_attention(broken, "auto", 2048, {}, "gfx942", True, gemma) if x.id == "ATTN001")
    assert "picks FlashAttention-2" in f.title and "(ck)" in f.title
    # the same broken build is harmless where LLaMA-Factory uses SDPA (llama, auto)
    llama = {"model_type": "llama", "fa2_gate": True, "with_fa2": "default", "without_fa2": "default",
             "supports_sdpa": True}
    fs = attention.judge_attention(broken, "auto", 2048, {}, "gfx942", True, llama)
    assert ids(fs) == ["ATTN000"] and "will use sdpa (transformers' default)" in fs[0].title
    # explicit disabled: eager; a wrong SDPA kernel does not matter then
    eager = {"model_type": "llama", "fa2_gate": False, "with_fa2": "eager", "without_fa2": "eager"}
    wrong = dict(ATT_OK, backends={"FLASH_ATTENTION": {"status": "wrong", "fwd_err": 3.0}, "MATH": {"status": "ok"}})
    fs = attention.judge_attention(wrong, "disabled", 2048, {}, "gfx942", True, eager)
    assert ids(fs) == ["ATTN000"] and "will use eager" in fs[0].title
    # fa2 asked, gate fails on the installed version: info naming what is used instead
    old = dict(ATT_OK, flash_attn={"status": "ok"}, flash_attn_version="2.0.4")
    gate = {"model_type": "llama", "fa2_gate": False, "with_fa2": "flash_attention_2", "without_fa2": "default",
            "supports_sdpa": True}
    f = next(x for x in attention.judge_attention(old, "fa2", 2048, {}, "gfx942", True, gate) if x.id == "ATTN005")
    assert "will not use" in f.title and "uses sdpa instead" in f.detail


def test_ck_build_without_the_arch_says_why_and_what_to_do():
    data = dict(ATT_OK, flash_attn={"status": "error", "error": "RuntimeError: HIP error: invalid device function"},
                flash_attn_version="2.8.3", flash_attn_backend="ck")
    f = next(x for x in attention.judge_attention(data, "fa2", 2048, {}, "gfx1100", True, head_dim=512)
             if x.id == "ATTN001")
    assert "built for gfx90a, gfx942, gfx950, not gfx1100" in f.detail
    assert "FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE" in f.detail and "head_dim ≤ 256" in f.detail
    assert archs.fa_ck_archs("2.7.4") == {"gfx90a", "gfx940", "gfx941", "gfx942"}
    assert "gfx1100" in archs.fa_ck_archs("2.8.4") and "gfx1100" not in archs.fa_ck_archs("2.8.3+rocm")


@stack
@pytest.mark.parametrize("flash,model_type,with_fa2,without_fa2", [
    ("auto", "llama", "default", "default"),          # transformers decides (SDPA)
    ("fa2", "llama", "flash_attention_2", "default"),  # "FlashAttention-2 is not installed." then default
    ("disabled", "qwen3", "eager", "eager"),
    ("sdpa", "llama", "sdpa", "sdpa"),
    ("auto", "gemma2", "flash_attention_2", "eager"),  # Gemma-2: FA2 or eager, never SDPA
    ("sdpa", "youtu", "eager", "eager"),
])
def test_attention_choice_comes_from_llamafactory_itself(flash, model_type, with_fa2, without_fa2):
    from doctor.probes.llamafactory import probe_attn_choice

    got = probe_attn_choice(flash, model_type, ["LlamaForCausalLM"])
    assert (got["with_fa2"], got["without_fa2"]) == (with_fa2, without_fa2)
    assert got["supports_sdpa"] is True and got["fa2_gate"] is False  # no flash-attn in the test stack


@stack
def test_fa3_is_caught_before_the_run_and_fixed(tmp_path):
    """LLaMA-Factory 0.9.5's parser accepts `flash_attn: fa3`, then model loading raises
    `NotImplementedError: Unknown attention type: fa3` (seen with the real llamafactory-cli)."""
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                                                   "hidden_size": 64, "num_attention_heads": 4,
                                                   "num_hidden_layers": 2, "vocab_size": 1000}))
    cfg = tmp_path / "fa3.yaml"
    cfg.write_text(f"model_name_or_path: {model}\nstage: sft\ndo_train: true\nfinetuning_type: lora\n"
                   f"dataset: demo\ntemplate: llama3\noutput_dir: {tmp_path / 'out'}\nflash_attn: fa3\n")
    r = run_cli("check", str(cfg), "--json", "--only", "torch,attention")
    f = {x["id"]: x for x in json.loads(r.stdout)["findings"]}["ATTN007"]
    assert r.returncode == 1 and "Unknown attention type: fa3" in f["detail"] and f["playbook"] == "disable-flash-attn"
    r = run_cli("fix", str(cfg))  # ATTN007 comes from the probes: a full (not --quick) fix
    assert "flash_attn: sdpa" in (tmp_path / "fa3.fixed.yaml").read_text(), r.stdout + r.stderr


# ---------------------------------------------------------------- bitsandbytes

def test_bnb_mock_library_with_qlora_is_error():
    data = {"installed": True, "version": "0.48.0", "lib_mock": True, "lib_class": "ErrorHandlerMockBNBNativeLibrary",
            "backend": "ROCm", "device": "cuda", "compiled_with_cuda": False}
    f = bitsandbytes.judge_bnb(data, 4, "bnb", None, "6.2.41134")
    assert ids(f) == ["BNB001"] and f[0].playbook == "qlora-to-lora"
    assert ids(bitsandbytes.judge_bnb(data, None, "bnb", None, "6.2.41134")) == ["BNB002"]


def test_bnb_wrong_nf4_and_prequantized_and_version():
    data = {"installed": True, "version": "0.49.0", "device": "cuda", "compiled_with_cuda": True,
            "nf4_rel_err": 0.9, "linear4bit_rel_err": 0.5, "lib_path": "/x/libbitsandbytes_rocm63.so"}
    f = bitsandbytes.judge_bnb(data, 4, "bnb", {"quantization_config": {"quant_method": "bitsandbytes"}}, "6.2.41134")
    assert {"BNB004", "BNB003", "BNB005"} <= set(ids(f))


def test_bnb_h200_recorded_numbers_are_healthy():
    text = fixture("nvidia/h200-torch-probe.txt").read_text()
    rel = float(text.split("bnb nf4 roundtrip rel err ")[1].split()[0])
    data = {"installed": True, "version": "0.50.2", "device": "cuda", "compiled_with_cuda": True,
            "nf4_rel_err": rel, "linear4bit_rel_err": 0.004, "linear4bit_finite": True}
    assert ids(bitsandbytes.judge_bnb(data, 4, "bnb", None, None)) == ["BNB000"]


def test_qlora_on_cpu_without_bnb():
    assert ids(bitsandbytes.judge_bnb({"installed": False}, 4, "bnb", None, None)) == ["BNB001"]


# ---------------------------------------------------------------- GPUs and memory

def test_gpus_imbalance_busy_and_missing():
    g = [{"index": i, "name": "MI300X", "arch": "gfx942", "vram_total_mib": 196592, "vram_used_mib": u,
          "source": "amd-smi"} for i, u in enumerate([150000, 300, 280, 310])]
    fs = gpus.judge(g, 2, {})
    assert {"GPU001", "GPU002", "GPU003"} <= set(ids(fs))
    assert "GPU001" not in ids(gpus.judge(g[:2], 1, {"HIP_VISIBLE_DEVICES": "0"}))
    assert ids(gpus.judge([], None, {})) == ["GPU005"]
    assert "GPU004" in ids(gpus.judge([], None, {}, (False, "KeyError: 'libamd_smi.so'")))


def test_memory_fit_llama3_8b():
    mc = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
          "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False}
    n = memory_fit.param_count(mc)
    assert 7.9e9 < n < 8.1e9
    lora = memory_fit.estimate(mc, {"finetuning_type": "lora", "bf16": True, "per_device_train_batch_size": 1,
                                    "cutoff_len": 1024})
    full = memory_fit.estimate(mc, {"finetuning_type": "full", "bf16": True})
    small = [{"index": 0, "vram_total_mib": 24576, "vram_used_mib": 500}]
    big = [{"index": 0, "vram_total_mib": 196592, "vram_used_mib": 283}]
    assert ids(memory_fit.judge(lora, small)) == ["MEM000"]
    f = memory_fit.judge(full, small)
    assert ids(f) == ["MEM001"] and f[0].playbook == "reduce-memory"
    assert ids(memory_fit.judge(full, big)) == ["MEM000"]


# ---------------------------------------------------------------- real probes

@stack
def test_real_probes_on_cpu():
    r = run_cli("check", "--json", "--only", "torch,bf16,attention,bitsandbytes,gpus")
    out = json.loads(r.stdout)
    got = {f["id"]: f for f in out["findings"]}
    assert "BF16004" in got and got["BF16004"]["evidence"]["rel_err"] < 1e-2
    assert "ATTN000" in got and got["ATTN000"]["evidence"]["backends"]["MATH"]["status"] == "ok"
    assert "GPU005" in got


def test_injected_nan_probe_becomes_finding():
    data = {"device": "cpu", "n": 256, "rel_err": float("nan"), "nonfinite": True, "tflops": 0.1}
    assert "BF16002" in ids(bf16.judge_bf16(data, None, True))


@pytest.mark.gpu
def test_gpu_probes_for_real():
    r = run_cli("check", "--json", "--only", "torch,bf16,attention,bitsandbytes,gpus", timeout=600)
    got = {f["id"] for f in json.loads(r.stdout)["findings"]}
    assert "BF16000" in got and "TORCH000" in got and "GPU000" in got


def test_mixed_precision_without_gpu_is_an_error():
    cpu = {"device": "cpu", "n": 256, "rel_err": 1e-3, "tflops": 0.1}
    gh = bf16
    out = gh.judge_bf16(cpu, None, True, "bf16")
    assert [f.id for f in out] == ["BF16005"] and "use_cpu" in out[0].detail
    assert [f.id for f in gh.judge_bf16(cpu, None, False, "fp16")] == ["BF16005"]
    assert [f.id for f in gh.judge_bf16(cpu, None, True, "bf16", use_cpu=True)] == ["BF16004"]  # on purpose
    assert [f.id for f in gh.judge_bf16(cpu, None, False, None)] == ["BF16004"]


def test_only_the_gpus_this_run_uses_are_judged():
    """GPU002's own fix is to exclude the busy GPU with HIP_VISIBLE_DEVICES: then it must go quiet. Under
    `check --distributed` each rank sees only its own GPU, so other ranks' work is not reported either."""
    from doctor.gpuinfo import visible_indices

    g = [{"index": i, "name": "MI300X", "arch": "gfx942", "vram_total_mib": 196592, "vram_used_mib": u,
          "source": "amd-smi", "vendor": "amd"} for i, u in enumerate([150000, 300, 280, 310])]
    assert "GPU002" in ids(gpus.judge(g, 4, {}))
    assert ids(gpus.judge(g, 3, {"HIP_VISIBLE_DEVICES": "1,2,3"})) == ["GPU000"]
    assert visible_indices({"ROCR_VISIBLE_DEVICES": "1,2,3", "HIP_VISIBLE_DEVICES": "0"}, g) == {1}
    assert visible_indices({"ROCR_VISIBLE_DEVICES": "GPU-abc"}, g) is None          # UUIDs: not decidable
    assert visible_indices({"CUDA_VISIBLE_DEVICES": "2"}, g) == {2}                  # ROCm honours it too
    assert visible_indices({"HIP_VISIBLE_DEVICES": "3", "CUDA_VISIBLE_DEVICES": "2"}, g) == {3}
    nv = [dict(x, vendor="nvidia", source="nvml") for x in g]
    assert visible_indices({"HIP_VISIBLE_DEVICES": "1"}, nv) is None and visible_indices({}, nv) is None
    assert visible_indices({"CUDA_VISIBLE_DEVICES": "-1"}, nv) == set()
    est = memory_fit.estimate({"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
                               "vocab_size": 128256}, {"finetuning_type": "full", "bf16": True})
    full = [dict(x, vram_total_mib=196592, vram_used_mib=190000 if x["index"] == 0 else 0) for x in g]
    assert memory_fit.judge(est, full)[0].evidence["free_gib"] < 10
    assert memory_fit.judge(est, full[1:])[0].evidence["free_gib"] > 190
