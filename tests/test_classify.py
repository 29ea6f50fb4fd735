"""Classifier: every public-corpus case, cases written from library error strings, messy logs."""

import json
import time

import pytest

from doctor.classify import classify_text
from tests.conftest import DATA, fixture, run_cli


def corpus():
    p = DATA / "failure-logs-public.jsonl"
    return [json.loads(line) for line in p.read_text().splitlines() if line.strip()]


def test_corpus_is_here():
    assert len(corpus()) >= 27  # a clone carries the corpus; it never silently shrinks to nothing


@pytest.mark.parametrize("case", corpus(), ids=lambda c: c["id"])
def test_public_corpus(case):
    text = case.get("log") or case["excerpt"]
    assert classify_text(text).category == case["category"], case["fix"][:200]


WRITTEN = [
    # (category, log) from the libraries' own error strings
    ("unknown_config_key", "ValueError: Some keys are not used by the HfArgumentParser: ['device_map']"),
    ("oom", "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 191.98 GiB"),
    ("flash_attn_failure", 'File "/x/flash_attn/flash_attn_interface.py", line 91, in _flash_attn_forward\n'
                           "RuntimeError: HIP error: invalid device function\nHIP kernel errors might be asynchronously reported"),
    ("bitsandbytes_unavailable", 'File "/x/bitsandbytes/functional.py", line 1010, in quantize_4bit\n'
                                 "RuntimeError: HIP error: invalid device function"),
    ("hip_invalid_device_function", 'File "/x/torch/nn/modules/linear.py", line 125, in forward\n'
                                    "RuntimeError: HIP error: invalid device function"),
    ("hip_invalid_device_function", "rocBLAS error: Cannot read TensileLibrary.dat\n"
                                    "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"),
    ("gpu_not_detected", "RuntimeError: No HIP GPUs are available"),
    ("dataset_missing", "ValueError: Undefined dataset my_data in dataset_info.json."),
    ("template_or_tokenizer", "ValueError: Template llama4x does not exist."),
    ("deepspeed_config", "ValueError: Please use `FORCE_TORCHRUN=1` to launch DeepSpeed training."),
    ("bf16_unsupported", "ValueError: Your setup doesn't support bf16/gpu. You need to assign use_cpu if you want to train the model on CPU."),
    ("model_path_or_hub", "OSError: /models/llama is not a local folder and is not a valid model identifier listed on 'https://huggingface.co/models'"),
    ("nan_or_divergent_loss", "{'loss': nan, 'grad_norm': nan, 'learning_rate': 0.001, 'epoch': 0.1}"),
    ("bitsandbytes_unavailable", "RuntimeError: Method 'cquantize_blockwise_fp16_nf4' not available in CPU-only version of bitsandbytes."),
    ("nccl_rccl_timeout", "[rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: "
                          "WorkNCCL(SeqNum=3, OpType=BROADCAST, NumelIn=1, Timeout(ms)=1800000) ran for 1800087 milliseconds"),
    ("dataset_missing", "ValueError: Cannot find valid samples, check `data/README.md` for the data format."),
    ("model_path_or_hub", "OSError: /data/models/llama3 does not appear to have a file named config.json. "
                          "Checkout 'https://huggingface.co//data/models/llama3/tree/None' for available files."),
    ("gpu_not_detected", "AssertionError: Torch not compiled with CUDA enabled"),
    ("gpu_not_detected", "RuntimeError: HIP error: no ROCm-capable device is detected"),
    ("oom", "RuntimeError: DataLoader worker (pid 1234) is killed by signal: Killed."),
    ("hip_invalid_device_function", "Memory access fault by GPU node-2 (Agent handle: 0x55d0c0b3e2a0) on address "
                                    "0x7f3c0dc00000. Reason: Page not present or supervisor privilege."),
    ("flash_attn_failure", 'File "/x/flash_attn/flash_attn_interface.py", line 91, in _flash_attn_forward\n'
                           "Memory access fault by GPU node-2 (Agent handle: 0x1) on address 0x7f. Reason: Unknown."),
    ("flash_attn_failure", "RuntimeError: FlashAttention forward only supports head dimension at most 256"),
    ("hip_invalid_device_function", "rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: "
                                    "No such file or directory for GPU arch : gfx1036"),
    ("bitsandbytes_unavailable", "RuntimeError: Configured ROCm binary not found at "
                                 "/opt/venv/lib/python3.10/site-packages/bitsandbytes/libbitsandbytes_rocm62.so"),
    ("nccl_rccl_timeout", "RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via "
                          "c10d key-value store by key '0', but store->get('0') got error: Socket Timeout"),
    ("gpu_not_detected", "ValueError: fp16 mixed precision requires a GPU (not 'cpu')."),
    ("flash_attn_failure", '  File "/x/llamafactory/model/model_utils/attention.py", line 83, in configure_attn_implementation\n'
                           "    raise NotImplementedError(f\"Unknown attention type: {model_args.flash_attn}\")\n"
                           "NotImplementedError: Unknown attention type: fa3"),
]


@pytest.mark.parametrize("cat,log", WRITTEN)
def test_written_cases(cat, log):
    assert classify_text(log).category == cat


def test_root_cause_is_first_error_not_torchrun_noise():
    log = ("[rank0]: Traceback (most recent call last):\n"
           "[rank0]: torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.00 GiB\n"
           "[rank1]: RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
           "Root Cause (first observed failure):\n")
    assert classify_text(log).category == "oom"


def test_early_vs_late_collective_timeout():
    early = classify_text("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE)")
    late = classify_text("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE)")
    assert early.playbook == "raise-ddp-timeout" and late.playbook is None
    assert "preprocessing" in early.summary and "mid-training" in late.summary


def test_training_yaml_to_wrong_subcommand():
    c = classify_text("ValueError: Some keys are not used by the HfArgumentParser: "
                      "['do_train', 'learning_rate', 'num_train_epochs', 'output_dir', 'stage']")
    assert "wrong subcommand" in c.summary


def test_messy_log_ansi_cr_chinese():
    log = ("\x1b[31m训练开始\x1b[0m\n 10%|█         | 1/10 [00:01<00:09]\r 20%|██        | 2/10\r"
           "\x1b[1;31mtorch.OutOfMemoryError: HIP out of memory.\x1b[0m 显存不足\n")
    assert classify_text(log).category == "oom"


def test_real_llamafactory_fixture_logs():
    assert classify_text(fixture("llamafactory/fail-device_map-cpu-0.9.5.log").read_text()).category == \
        "unknown_config_key"
    c = classify_text(fixture("llamafactory/fail-qlora-no-bitsandbytes-cpu-0.9.5.log").read_text())
    assert c.category == "bitsandbytes_unavailable", c.evidence
    assert classify_text(fixture("llamafactory/ok-qlora-h200-0.9.5.log").read_text()).category == "unknown"


def test_robust_inputs(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    r = run_cli("explain", "--json", str(empty))
    assert r.returncode == 1 and json.loads(r.stdout)["category"] == "unknown"
    binary = tmp_path / "bin.log"
    binary.write_bytes(bytes(range(256)) * 100)
    r = run_cli("explain", str(binary))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "binary" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout  # one line, no raw control bytes echoed
    mixed = tmp_path / "mixed.log"
    mixed.write_bytes("héllo\n".encode("latin-1") + b"torch.OutOfMemoryError: HIP out of memory\n")
    assert json.loads(run_cli("explain", "--json", str(mixed)).stdout)["category"] == "oom"
    assert run_cli("explain", str(tmp_path / "missing.log")).returncode == 2
    assert run_cli("explain", str(tmp_path)).returncode == 2


def test_big_log_bounded(tmp_path):
    big = tmp_path / "big.log"
    line = b"[INFO] step ok, loss 1.234 " + b"x" * 200 + b"\n"
    with open(big, "wb") as f:
        f.write(line * (50 * 2**20 // len(line)))
        f.write(b"torch.OutOfMemoryError: HIP out of memory. Tried to allocate 20.00 MiB\n")
    t0 = time.monotonic()
    r = run_cli("explain", "--json", str(big))
    assert json.loads(r.stdout)["category"] == "oom"
    assert time.monotonic() - t0 < 20


def test_stdin_and_no_torch_import():
    r = run_cli("explain", "--json", "-", input="RuntimeError: No HIP GPUs are available\n")
    out = json.loads(r.stdout)
    assert out["schema"] == "rocm-doctor.explain/1" and out["category"] == "gpu_not_detected"
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = "import sys; from doctor.classify import classify_text; classify_text('x'); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True).stdout.strip() == "False"
