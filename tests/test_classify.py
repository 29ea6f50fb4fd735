"""Classifier: every public-corpus case, cases written from library error strings, messy logs."""

import json
import time
from pathlib import Path

import pytest

from doctor.classify import classify_text
from tests.conftest import DATA, ROOT, fixture, run_cli


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
    # the OOM killer of the host took a DataLoader worker: a kill, whose remedy is no workers
    ("killed_by_signal", "RuntimeError: DataLoader worker (pid 1234) is killed by signal: Killed."),
    # a page fault on a supported arch is the GPU's (or a kernel's) fault, not a wrong-arch verdict ...
    ("gpu_hw_fault", "Memory access fault by GPU node-2 (Agent handle: 0x55d0c0b3e2a0) on address "
                     "0x7f3c0dc00000. Reason: Page not present or supervisor privilege."),
    # ... unless an override says kernels for another arch were loaded
    ("hip_invalid_device_function", "export HSA_OVERRIDE_GFX_VERSION=10.3.0\nMemory access fault by GPU node-1 (Agent "
                                    "handle: 0x5) on address 0x7f. Reason: Page not present or supervisor privilege."),
    ("flash_attn_failure", 'File "/x/flash_attn/flash_attn_interface.py", line 91, in _flash_attn_forward\n'
                           "Memory access fault by GPU node-2 (Agent handle: 0x1) on address 0x7f. Reason: Unknown."),
    ("flash_attn_failure", "RuntimeError: FlashAttention forward only supports head dimension at most 256"),
    ("hip_invalid_device_function", "rocBLAS error: Cannot read /opt/rocm/lib/rocblas/library/TensileLibrary.dat: "
                                    "No such file or directory for GPU arch : gfx1036"),
    ("bitsandbytes_unavailable", "RuntimeError: Configured ROCm binary not found at "
                                 "/opt/venv/lib/python3.10/site-packages/bitsandbytes/libbitsandbytes_rocm62.so"),
    ("nccl_rccl_timeout", "RuntimeError: [1] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via "
                          "c10d key-value store by key '0', but store->get('0') got error: Socket Timeout"),
    # fp16 asked where torch sees no GPU: the GPU is what is missing, and dropping fp16 would train on the CPU ...
    ("gpu_not_detected", "ValueError: fp16 mixed precision requires a GPU (not 'cpu')."),
    # ... but on a Mac the device is MPS, where fp16 AMP is refused: train without it
    ("bf16_unsupported", '  File "/Users/me/venv/lib/python3.11/site-packages/accelerate/accelerator.py", line 472, in '
                         "__init__\nValueError: fp16 mixed precision requires a GPU (not 'mps')."),
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


def test_late_timeout_while_one_rank_saves_raises_the_timeout():
    # torchtune's own save lines, then the other ranks' watchdog (pytorch/torchtune PR thread, corpus blind34-a3)
    saving = ("[INFO|trainer.py:3984] 2025-04-30 05:00:01,101 >> Saving model checkpoint to saves/qwen/checkpoint-500\n"
              "[rank4]:[E430 05:09:48.828088908 ProcessGroupNCCL.cpp:632] [Rank 4] Watchdog caught collective "
              "operation timeout: WorkNCCL(SeqNum=9387, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
              "Timeout(ms)=600000) ran for 600005 milliseconds before timing out.")
    c = classify_text(saving)
    assert c.playbook == "raise-ddp-timeout" and c.auto_fix and "Saving model checkpoint" in c.details["during"]
    # the same timeout with only training steps before it is a stalled rank
    stalled = saving.replace("Saving model checkpoint to saves/qwen/checkpoint-500", "{'loss': 1.02, 'epoch': 0.4}")
    assert classify_text(stalled).playbook is None


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


# ------------------------------------------------------------------ the kinds of failure issue #12 named
# (each written from the library's own message: the code that raises or prints it is named in the signature)
NAMED = [
    ("template_or_tokenizer", "ValueError: Processor was not found, please check and update your model file."),
    ("deepspeed_config", "ValueError: DeepSpeed ZeRO-3 is incompatible with PTQ-quantized models."),
    ("deepspeed_config", "ValueError: DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with passing a "
                         "`device_map`."),
    ("nan_or_divergent_loss", "Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
                              "Exiting run."),
    ("extension_build_failed", "Exception ignored in: <function DeepSpeedCPUAdam.__del__ at 0x7f>\nTraceback (most recent "
                               "call last):\n  File \"/x/deepspeed/ops/adam/cpu_adam.py\", line 102, in __del__\n"
                               "    self.ds_opt_adam.destroy_adam(self.opt_id)\n"
                               "AttributeError: 'DeepSpeedCPUAdam' object has no attribute 'ds_opt_adam'"),
    ("rccl_p2p_or_iommu", "node1:12:40 [0] NCCL WARN Cuda failure 'invalid argument'\n"
                          "node1:12:40 [0] transport/p2p.cc:256 NCCL WARN hipIpcGetMemHandle failed : invalid argument"),
    ("rccl_p2p_or_iommu", 'NCCL WARN Missing "iommu=pt" from kernel command line which can lead to system instablity '
                          "or hang!\ntorch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
                          "unhandled cuda error\nLast error:\nCuda failure 'invalid argument'"),
    ("nan_or_divergent_loss", "{'loss': 2.31, 'grad_norm': 3.1, 'learning_rate': 1e-4, 'epoch': 0.1}\n"
                              "{'loss': 0.0, 'grad_norm': nan, 'learning_rate': 1e-4, 'epoch': 0.2}"),
    ("template_or_tokenizer", "Traceback (most recent call last):\n"
                              '  File "/m/tokenization_chatglm.py", line 196, in __init__\n'
                              "    super().__init__(padding_side=padding_side, **kwargs)\n"
                              "AttributeError: 'ChatGLMTokenizer' object has no attribute 'tokenizer'"),
    ("bf16_unsupported", "Traceback (most recent call last):\n  File \"/m/modeling_x.py\", line 50, in forward\n"
                         "    assert not (self.config.bf16 and self.config.fp16)\n"
                         "AssertionError: bf16 and fp16 cannot both be enabled"),
    ("killed_by_signal", "Loading checkpoint shards:  60%|██████    | 3/5 [00:40<00:27]\nKilled"),
    ("killed_by_signal", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
                         "Root Cause (first observed failure):\n[0]:\n  time      : 2025-01-01_00:00:00\n"
                         "  rank      : 0 (local_rank: 0)\n  exitcode  : -9 (pid: 1234)\n"
                         "  traceback : Signal 9 (SIGKILL) received by PID 1234"),
    ("gpu_hw_fault", ":0:rocdevice.cpp            :2984: 1234 us: [pid:9 tid:0x1] Callback: Queue 0x7f aborting with "
                     "error : HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception. code: "
                     "0x1016\nHW Exception by GPU node-1 (Agent handle: 0x5) reason :GPU Hang"),
    ("hip_invalid_device_function", "RuntimeError: HIP error: hipErrorInvalidImage\nHIP kernel errors might be "
                                    "asynchronously reported at some other API call"),
    ("hip_invalid_device_function", "terminate called after throwing an instance of 'c10::Error'\n  what():  HIP error: "
                                    "shared object initialization failed"),
    ("shm_exhausted", "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared "
                      "memory (shm).\nRuntimeError: DataLoader worker (pid 4242) is killed by signal: Bus error."),
    ("dependency_version", "ImportError: transformers>=4.45.0,<=4.51.3 is required for a normal functioning of this "
                           "module, but found transformers==4.52.1.\nTo fix: run `pip install transformers>=4.45.0`."),
    ("disk_full_or_io", "RuntimeError: [enforce fail at inline_container.cc:626] . unexpected pos 1536 vs 1430\n"
                        "OSError: [Errno 28] No space left on device"),
    ("config_invalid", "ValueError: Quantization is only compatible with the LoRA or OFT method."),
]


@pytest.mark.parametrize("cat,log", NAMED, ids=[f"{c}-{i}" for i, (c, _) in enumerate(NAMED)])
def test_named_failure_kinds(cat, log):
    c = classify_text(log)
    assert c.category == cat, (c.category, c.signature, c.evidence)
    assert 0.4 <= c.confidence <= 1.0


def test_exception_line_outranks_frame_context():
    """A real OOM raised inside a bitsandbytes frame is an OOM, not bitsandbytes_unavailable."""
    log = ("Traceback (most recent call last):\n"
           '  File "/x/bitsandbytes/nn/modules.py", line 330, in forward\n'
           "    out = bnb.matmul_4bit(x, self.weight.t(), bias=bias, quant_state=self.weight.quant_state)\n"
           '  File "/x/bitsandbytes/autograd/_functions.py", line 577, in matmul_4bit\n'
           "    return MatMul4Bit.apply(A, B, out, bias, quant_state)\n"
           "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 191 GiB")
    assert classify_text(log).category == "oom"


def test_innermost_exception_of_a_chain_is_the_root():
    log = ("Traceback (most recent call last):\n  File \"/x/transformers/utils/hub.py\", line 402, in cached_file\n"
           "    resolved_file = hf_hub_download(\n"
           "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file on "
           "the Hub and we cannot find the requested files in the local cache.\n\n"
           "The above exception was the direct cause of the following exception:\n\n"
           "Traceback (most recent call last):\n  File \"/x/llamafactory/model/loader.py\", line 80, in load_tokenizer\n"
           "    tokenizer = AutoTokenizer.from_pretrained(\n"
           "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't find it in the "
           "cached files")
    from doctor.logparse import parse

    tb = parse(log).tracebacks
    assert len(tb) == 1 and [e.short_type for e in tb[0].chain] == ["LocalEntryNotFoundError", "OSError"]
    assert classify_text(log).category == "model_path_or_hub"


def test_a_traceback_pasted_indented_keeps_its_exception():
    """A traceback indented as a whole (a markdown code block): the exception line, left of the frames, is the
    exception, not one more source line."""
    from doctor.logparse import parse

    log = ("    Traceback (most recent call last):\n"
           '      File "C:\\py\\site-packages\\torch\\distributed\\elastic\\rendezvous\\static_tcp_rendezvous.py", '
           "line 67, in next_rendezvous\n"
           "        self._store = TCPStore(  # type: ignore[call-arg]\n"
           "                      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
           "    RuntimeError: use_libuv was requested but PyTorch was build without libuv support")
    exc = parse(log).tracebacks[0].final
    assert exc.short_type == "RuntimeError" and exc.message.startswith("use_libuv was requested")
    assert exc.frames[0].code.startswith("self._store = TCPStore(")


def test_first_failing_rank_decides_and_prefixes_are_parsed():
    log = ("[rank1]: Traceback (most recent call last):\n"
           '[rank0]: Traceback (most recent call last):\n'
           '[rank1]:   File "/x/train.py", line 3, in <module>\n'
           '[rank0]:   File "/x/train.py", line 3, in <module>\n'
           "[rank1]: torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB\n"
           "[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process "
           "exited or there was a network error\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\nRoot Cause (first observed failure):\n"
           "[0]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : 1 (pid: 2)\n")
    from doctor.logparse import parse

    p = parse(log)
    assert {tb.rank for tb in p.tracebacks} == {0, 1} and p.launcher["rank"] == 1
    c = classify_text(log)
    assert c.category == "oom" and "HIP out of memory" in c.evidence[0]  # rank 1's error, not rank 0's fallout


def test_progress_bar_glued_to_the_next_record():
    log = ("{'loss': 1.2, 'grad_norm': 0.5, 'learning_rate': 1e-5, 'epoch': 0.1}\n"
           "  1%|          | 24/1752 [01:08<1:22:56,  2.88s/it][rank5]:[E602 11:17:52.185 ProcessGroupNCCL.cpp:632] "
           "[Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE)")
    c = classify_text(log)
    assert c.category == "nccl_rccl_timeout" and c.details.get("seq_num") == 9


def test_a_paste_cut_inside_the_traceback_still_names_the_raising_code():
    log = ("Traceback (most recent call last):\n"
           '  File "/x/llamafactory/data/loader.py", line 280, in get_dataset\n'
           "    dataset = _get_merged_dataset(data_args.dataset, model_args, data_args, training_args, stage)\n"
           '  File "/x/llamafactory/data/loader.py", line 160, in _load_single_dataset\n'
           "    dataset = load_dataset(")
    c = classify_text(log)
    assert c.category == "dataset_missing" and c.signature.startswith("frame:") and c.confidence < 0.6


def test_out_of_taxonomy_is_unknown_not_a_confident_known_category():
    for log in ("SyntaxError: invalid syntax (train.py, line 12)",
                "wandb.errors.UsageError: api_key not configured (no-tty). call wandb.login(key=[your_api_key])",
                "Some warnings were printed\nAll done, exiting normally."):
        c = classify_text(log)
        assert c.category == "unknown", (log, c.category, c.signature)


def test_recognised_failures_outside_every_category_say_what_they_are():
    """Recognised, but no category's remedy fits: `unknown` with what the log shows, never a near-miss category
    (a /dev/shm permission problem is not a full /dev/shm; the trainer missing from the launched Python is no
    dependency version). Lines as LLaMA-Factory, NCCL's shm.h and Python print them."""
    c = classify_text("Traceback (most recent call last):\n  File \"/opt/LLaMA-Factory/src/llamafactory/launcher.py\", "
                      "line 15, in <module>\n    from llamafactory.train.tuner import run_exp\n"
                      "ModuleNotFoundError: No module named 'llamafactory'\n")
    assert c.category == "unknown" and c.signature == "trainer-not-installed" and "reinstall" in c.summary
    c = classify_text("node08:27106:27302 [0] include/shm.h:27 NCCL WARN Call to shm_open failed : Permission denied\n"
                      "node08:27106:27302 [0] include/shm.h:48 NCCL WARN Error while creating shared memory segment "
                      "nccl-shm-recv-b79-0-3-0 (size 4460544)\n")
    assert c.category == "unknown" and "drwxrwxrwt" in c.summary
    assert classify_text("ModuleNotFoundError: No module named 'peft'").category == "dependency_version"
    c = classify_text("Got unknown args, potentially deprecated arguments: ['--infer_backend:', 'vllm']\n"
                      "Traceback (most recent call last):\n  File \"/x/llamafactory/chat/chat_model.py\", line 157, in run_chat\n")
    assert c.category == "unknown_config_key"
    c = classify_text("pydantic_core._pydantic_core.ValidationError: 1 validation error for DeepSpeedZeroConfig\n"
                      "stage3_prefetch_bucket_size\n  Input should be a valid integer, got a number with a fractional part "
                      "[type=int_from_float, input_value=8493465.600000001, input_type=float]\n")
    assert c.category == "dependency_version", (c.category, c.signature)
    # weights saved from ZeRO-3 shards without gathering them: no setting of this run fixes the saved files
    c = classify_text("RuntimeError: Error(s) in loading state_dict for OPTForCausalLM:\n\tsize mismatch for "
                      "model.decoder.layers.26.fc1.weight: copying a param with shape torch.Size([0]) from checkpoint, "
                      "the shape in current model is torch.Size([10240, 2560]).\n")
    assert c.category == "unknown" and c.signature == "zero3-empty-params-saved" and "zero_to_fp32" in c.summary


# Messages as the libraries raise or print them, from the blind sets' misses: unsloth's loader, accelerate's DeepSpeed
# guard, huggingface_hub looking a dataset path up on the Hub, GPT-NeoX's overflow monitor, amdgpu's drm errors, the
# CUDA mismatch at a build, ptxas, LLaMA-Factory's export refusals, ms-swift, vllm, peft; and recognised failures
# that fit no category (`unknown`): OpenCV's libGL, a driver older than the build, a native crash, elastic's teardown
LIBRARY_MESSAGES = [
    ("ValueError: `unsloth/Qwen3.5-0.8B` is not supported yet in `transformers==4.57.6`.",
     "dependency_version"),
    ("ValueError: DeepSpeed is not compatible with `device_map`. n_gpu: 8, local_world_size: 1.",
     "deepspeed_config"),
    ("RuntimeError: Unsloth: No config file found - are you sure the `model_name` is correct?",
     "model_path_or_hub"),
    ("huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: Root=1-)\n"
     "Repository Not Found for url: https://huggingface.co/datasets/json/resolve/main/mydata.jsonl.",
     "dataset_missing"),
    ("huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: Root=1-)\n"
     "Repository Not Found for url: https://huggingface.co/api/models/meta-llama/x/revision/main.",
     "model_path_or_hub"),
    ("iter 12 step 1: loss nan, iter time: 825.32ms", "nan_or_divergent_loss"),
    ("EI0006: 2024-08-05-18:15:21.270.506 Getting socket times out. Reason: Remote Rank did not "
     "send the data in time. Please check the reason for the rank being stuck",
     "nccl_rccl_timeout"),
    ("Exception: Skipped 50 iterations in a row due to Overflow - Exiting training.", "nan_or_divergent_loss"),
    ("ImportError: cannot import name 'foo_bar' from 'somepkg.utils' "
     "(/opt/venv/lib/python3.10/site-packages/somepkg/utils/__init__.py)",
     "dependency_version"),
    ("ImportError: cannot import name 'convert_state_dict_to_diffusers' from 'diffusers.utils'",
     "dependency_version"),
    ("[22348.967851] [drm:amdgpu_device_fw_loading [amdgpu]] *ERROR* resume of IP block <psp> "
     "failed -62",
     "gpu_hw_fault"),
    ("RuntimeError: Cuda extensions are being compiled with a version of Cuda that does not match "
     "the version used to compile Pytorch binaries.  Pytorch binaries were compiled with Cuda 12.1.",
     "extension_build_failed"),
    ("ValueError: FP16 Mixed precision training with AMP or APEX (`--fp16`) and FP16 half precision "
     "evaluation (`--fp16_full_eval`) can only be used on CUDA or NPU devices.",
     "gpu_not_detected"),
    ("ValueError: Please specify which `template` to use.", "template_or_tokenizer"),
    ("ptxas /tmp/compile-ptx-src-b5bf24, line 392; error   : Feature '.bf16' requires .target sm_80 "
     "or higher",
     "bf16_unsupported"),
    ("ValueError: Cannot merge adapters to a quantized model", "config_invalid"),
    ("ValueError: `rope_scaling` must be a dictionary with two fields, `type` and `factor`, got "
     "{'factor': 8.0, 'low_freq_factor': 1.0, 'high_freq_factor': 4.0, 'rope_type': 'llama3'}",
     "dependency_version"),
    ("TypeError: DPOConfig.__init__() got an unexpected keyword argument 'ref_model_init_kwargs'",
     "unknown_config_key"),
    ("datasets.arrow_writer.SchemaInferenceError: Please pass `features` or at least one example "
     "when writing data",
     "dataset_missing"),
    (":0:/longer_pathname.../hipamd/src/hip_platform.cpp:110 : 3010170007 us:\nCannot retrieve "
     "Static function, error: 218",
     "hip_invalid_device_function"),
    # a flash-attn build that fails is a failed build (the verdict's playbook is still disable-flash-attn:
    # test_flash_attn_build_failure_trains_without_it)
    ("/home/n/flash-attention/csrc/composable_kernel/include/ck_tile/core/arch/generic_memory_space_atomic_hip.hpp:66:19: "
     "error: static assertion failed due to requirement",
     "extension_build_failed"),
    ("/tmp/ext/src/my_op.cpp:12:5: error: 'foo' was not declared in this scope", "extension_build_failed"),
    ("FileNotFoundError: [Errno 2] No such file or directory: 'data/alpaca_en.jsonl'", "dataset_missing"),
    ("ValueError: remaining_argv: ['--train_type', 'sft']", "unknown_config_key"),
    ("RuntimeError: Unsloth: The tokenizer `x/y` does not have a {% if add_generation_prompt %} for "
     "generation",
     "template_or_tokenizer"),
    ("ValueError: LoRA rank 64 is greater than max_lora_rank 16.", "config_invalid"),
    ("ValueError: Model was not initialized with `Zero-3` despite being configured for DeepSpeed "
     "Zero-3.",
     "deepspeed_config"),
    ("W0304 01:00:36.891000 3535919 "
     "site-packages/torch/distributed/elastic/agent/server/api.py:725] Received Signals.SIGTERM "
     "death signal, shutting down workers",
     "killed_by_signal"),
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 11060).", "unknown"),
    ("E0101 failed (exitcode: -11) local_rank: 0 (pid: 3304209) of binary: /usr/bin/python", "unknown"),
    ("W0726 18:36:31.897000 1404 torch/distributed/elastic/multiprocessing/api.py:858] Sending "
     "process 24503 closing signal SIGTERM",
     "unknown"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/models/llama/tokenizer_config.json'",
     "unknown"),
    ("用int4训练后，导出时失败。\n错误提示为：ValueError: Please merge adapters before quantizing the model.",
     "config_invalid"),
    ("ValueError: Can't find config.json at './sst2_lora'", "model_path_or_hub"),
    ("/opt/venv/lib/python3.8/site-packages/torch/cuda/__init__.py:88: UserWarning: HIP "
     "initialization: Unexpected error from hipGetDeviceCount(). Did you run some cuda functions "
     "before calling NumHipDevices() that might have already set an error? Error 101: "
     "hipErrorInvalidDevice",
     "gpu_not_detected"),
    ("CUDA error "
     "(/__w/xformers/xformers/third_party/flash-attention/hopper/flash_fwd_launch_template.h:167): "
     "no kernel image is available for execution on the device",
     "flash_attn_failure"),
    ("06/02 00:10:53 - mmengine - WARNING - WARNING: command error: 'libGL.so.1: cannot open shared "
     "object file: No such file or directory'!",
     "unknown"),
    ('NotImplementedError: Unsloth cannot find any torch accelerator? You need a GPU.', "gpu_not_detected"),
    ("host:4005:4041 [0] init.cc:521 NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 40\n"
     "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:957, invalid usage, NCCL version 21.0.3",
     "unknown"),
    ("host:1:1 [0] transport/nvls.cc:165 NCCL WARN Cuda failure 'invalid argument'", "unknown"),
    ("OSError: file my_dir/config.json not found", "model_path_or_hub"),
    ("ValueError: File data/alpaca_mine.json not found.", "dataset_missing"),
    ('      "grad_norm": NaN,\n      "learning_rate": 0.0,\n      "logits/chosen": NaN,', "nan_or_divergent_loss"),
    ("torch.AcceleratorError: CUDA error: file not found", "hip_invalid_device_function"),
    ("[27109.509433] amdgpu 0000:03:00.0: amdgpu: ring comp_1.1.1 timeout, signaled seq=7091, emitted seq=7093",
     "gpu_hw_fault"),
    ("2020-03-11 17:17:25.172845: E tensorflow/stream_executor/rocm/rocm_driver.cc:600] failed to allocate 2.02G "
     "(2168105472 bytes) from device: HIP_ERROR_OutOfMemory", "oom"),
    ("CMake Error at gloo_hip_generated_nccl.hip.o.cmake:146 (message):\n  Error generating\n",
     "extension_build_failed"),
    # a class transformers ships: this transformers predates the model; one it does not: the model's remote code
    ("ValueError: Tokenizer class Qwen2Tokenizer does not exist or is not currently imported.", "dependency_version"),
    ("ValueError: Tokenizer class Qwen2TokenizerFast does not exist or is not currently imported.",
     "dependency_version"),
    ("ValueError: Tokenizer class QWenTokenizer does not exist or is not currently imported.", "template_or_tokenizer"),
    ("Training Epoch: 2/15, step 486/487 completed (loss: nan, acc: 0.0): 100%|█████| 487/487 [05:44<00:00,  1.41it/s]",
     "nan_or_divergent_loss"),
    ("ncclUnhandledCudaError: Call to CUDA function failed.\nLast error:\nCuda failure 'invalid argument'",
     "rccl_p2p_or_iommu"),
    (":1:rocdevice.cpp            :478 : 0079107773 us: [pid:37    tid:0x79adf78bf340] hsa_init failed with 1008",
     "gpu_not_detected"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/workspace/mistral-finetune/mixtral/params.json'",
     "model_path_or_hub"),
    ("[2023-07-13 14:51:33,751] [WARNING] [runner.py:191:fetch_hostfile] Unable to find hostfile, will proceed with "
     "training with local resources only.\n[2023-07-13 14:51:33,954] [INFO] [runner.py:541:main] cmd = python -u -m "
     "deepspeed.launcher.launch main.py\n[2023-07-13 14:51:35,266] [INFO] [launch.py:222:main] 0 NCCL_IBEXT_DISABLE=1",
     "hang"),
    ("[rank0]: AssertionError: no_sync context manager is incompatible with gradient partitioning logic of ZeRO stage 3",
     "dependency_version"),
    ("[8d6bf97c3bf4:3039 :0:3095] Caught signal 7 (Bus error: nonexistent physical address)\n"
     "==== backtrace (tid:   3095) ====\n 2 0x000000000007587d ncclGroupEnd()  ???:0", "shm_exhausted"),
    ("ImportError: /root/anaconda3/lib/libstdc++.so.6: version `GLIBCXX_3.4.29' not found (required by "
     "/root/.cache/torch_extensions/py39_cu117/cpu_adam/cpu_adam.so)", "extension_build_failed"),
    ("WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:\n"
     "    PyTorch 2.0.1+cu118 with CUDA 1108 (you have 2.0.1)", "dependency_version"),
    ("torch.version.hip: None\nCUDA available: False", "gpu_not_detected"),
    ("major, minor = map(int, torch.version.cuda.split(\".\"))\nAttributeError: 'NoneType' object has no attribute "
     "'split'", "unknown"),
    ("  File \"/x/site-packages/bitsandbytes/cuda_setup/main.py\", line 1, in get_cuda_version\n"
     "    major, minor = map(int, torch.version.cuda.split(\".\"))\nAttributeError: 'NoneType' object has no attribute "
     "'split'", "bitsandbytes_unavailable"),
    # CONFIG_MAPPING[model_type]: a model type this transformers does not know
    ("Traceback (most recent call last):\n  File \"/x/site-packages/transformers/models/auto/configuration_auto.py\", "
     "line 1022, in from_pretrained\n    config_class = CONFIG_MAPPING[config_dict[\"model_type\"]]\n"
     "  File \"/x/site-packages/transformers/models/auto/configuration_auto.py\", line 723, in __getitem__\n"
     "    raise KeyError(key)\nKeyError: 'qwen2'", "dependency_version"),
    # the kernel's OOM killer (mm/oom_kill.c): host RAM, not the GPU's
    ("[ 9001.123456] Out of memory: Killed process 4242 (python) total-vm:98765432kB, anon-rss:90123456kB",
     "killed_by_signal"),
    ("The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker "
     "unexpectedly exits with a connection error code 2. End of file.", "killed_by_signal"),
    (":1:hip_fatbin.cpp           :694 : 2500313198684 us:  No compatible code objects found for: gfx942:sramecc+:xnack-, "
     "value of HIP_FORCE_SPIRV_CODEOBJECT: 0", "hip_invalid_device_function"),
    ("WSL environment detected.\nCannot load librocdxg.so, failed:librocdxg.so: cannot open shared object file: No such "
     "file or directory", "gpu_not_detected"),
    ("(EngineCore_DP0 pid=5132) RuntimeError: invalid argument for fmha_v3_varlen_fwd", "flash_attn_failure"),
    ("AssertionError: Aiter MLA only supports 16 or 128 number of heads.\nProvided 32 number of heads.",
     "flash_attn_failure"),
    ("ERROR: Cannot install openrlhf and vllm==0.8.3 because these package versions have conflicting dependencies.\n"
     "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/",
     "dependency_version"),
    ("  /usr/bin/ld: cannot find /tmp/pip-install-1/build/temp.linux-x86_64-3.10/csrc/adam/fused_adam_frontend.o: No such "
     "file or directory\n  collect2: error: ld returned 1 exit status", "extension_build_failed"),
    ("  File \"/opt/conda/lib/python3.8/site-packages/deepspeed/runtime/zero/stage_1_and_2.py\", line 1896, in "
     "_update_scale\n    self.loss_scaler.update_scale(has_overflow)\n  File \"/opt/conda/lib/python3.8/site-packages/"
     "deepspeed/runtime/fp16/loss_scaler.py\", line 183, in update_scale\n    raise Exception(\nException: ",
     "nan_or_divergent_loss"),
    ("ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization` when initializing the engine.", "oom"),
    ("jinja2.exceptions.TemplateSyntaxError: Encountered unknown tag 'generation'. Jinja was looking for the following "
     "tags: 'elif' or 'else' or 'endif'.", "template_or_tokenizer"),
    ("Using eos_token, but it is not set yet.\nAttributeError: 'NoneType' object has no attribute 'join'",
     "template_or_tokenizer"),
    ("ValueError: No file with name: consolidated.00.pth found in /tmp/Meta-Llama-3-8B-Instruct.", "model_path_or_hub"),
    ("tune download: error: An error happened while trying to locate the file on the Hub and we cannot find the "
     "requested files in the local cache. Please check your connection and try again or make sure your Internet "
     "connection is on.", "model_path_or_hub"),
    ("Unable to determine the device handle for GPU0000:05:00.0: Unknown Error", "gpu_hw_fault"),
    ("[ 4711.2] pcieport 0000:00:01.1: AER: Uncorrected (Fatal) error received: 0000:03:00.0", "gpu_hw_fault"),
    ("[ 4711.2] pcieport 0000:00:03.0: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)",
     "unknown"),
    ("(gdb) bt\n#0  0x00007ffe69463051 in rocr::core::InterruptSignal::WaitRelaxed(hsa_signal_condition_t, long, "
     "unsigned long, hsa_wait_state_t) ()\n   from /venv/lib/python3.11/site-packages/torch/lib/libhsa-runtime64.so",
     "hang"),
    ("train.py: error: the following arguments are required: --model_name_or_path\n[INFO] [launch.py:315:sigkill_handler] "
     "Killing subprocess 2110657\n[ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=0']"
     " exits with return code = 2", "unknown"),
    ("labels\n[]\n\n**Killed**", "killed_by_signal"),
    ("Code error: No module named 'transformers.modeling_flash_attention_utils'", "dependency_version"),
    ("Code error: cannot import name ‘LlamaFlashAttention2’ from ‘transformers.models.llama.modeling_llama’.",
     "dependency_version"),
    ("ValueError: When using DeepSpeed `accelerate.prepare()` requires you to pass at least one of training or evaluation "
     "dataloaders or alternatively set an integer value in `train_micro_batch_size_per_gpu`", "deepspeed_config"),
    ("ValueError: You cannot perform fine-tuning on purely quantized models. Please attach trainable adapters on top of "
     "the quantized model to correctly perform fine-tuning.", "config_invalid"),
    ("ValueError: You are attempting to perform batched generation with padding_side='right' this may lead to unexpected "
     "behaviour for Flash Attention version of Mistral.", "flash_attn_failure"),
    ("the algorithm adopts DPO/KTO, and the obtained grad_norm is nan with a loss of 0", "nan_or_divergent_loss"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/models/VisualGLM-6B/model_config.json'", "model_path_or_hub"),
    ("LLVM ERROR: Cannot select: intrinsic %llvm.amdgcn.fdot2.bf16.bf16", "bf16_unsupported"),
    ("RuntimeError: Empty dataset!", "dataset_missing"),
    ("ValueError: Please use ranked datasets for reward modeling or DPO training.", "dataset_missing"),
    ("NotImplementedError: Unsloth: unsloth/gemma-3-1b-pt is not supported in your current Unsloth version! Please "
     "update Unsloth via:", "dependency_version"),
    ("deepspeed.runtime.zero.utils.ZeRORuntimeException: You are using ZeRO-Offload with a client provided optimizer "
     "(<class 'transformers.optimization.AdamW'>) which in most cases will yield poor performance.", "deepspeed_config"),
    ("libcusparse.so.11: cannot open shared object file: No such file or directory\nCUDA SETUP: Something unexpected "
     "happened. Please compile from source:", "bitsandbytes_unavailable"),
    ("ModuleNotFoundError: No module named 'torch._C._distributed_c10d'; 'torch._C' is not a package", "unknown"),
    ("TypeError: AsyncEngineArgs.__init__() got an unexpected keyword argument 'disable_log_requests'",
     "dependency_version"),
    ("  File \"/x/site-packages/peft/tuners/lora/torchao.py\", line 147, in dispatch_torchao\n    new_module = "
     "TorchaoLoraLinear(target, adapter_name, **kwargs)\nTypeError: TorchaoLoraLinear.__init__() missing 1 required "
     "keyword-only argument: 'get_apply_tensor_subclass'", "dependency_version"),
    ("ValueError: auto-awq kernels is needed to be installed to use .backward(). Make sure to install the auto-awq "
     "kernels", "extension_build_failed"),
    ("[ERROR] [axolotl.load_model:324] Found modules on cpu/disk. Using Exllama backend requires all the modules to be "
     "on GPU.You can deactivate exllama backend by setting `disable_exllama=True`", "config_invalid"),
    ("NotImplementedError: LlamaGPTQForCausalLM not support LORA peft type yet.", "config_invalid"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/data/ocr_vqa/images/782118577.jpg'", "dataset_missing"),
    ("ValueError: ZeRO inference only makes sense with ZeRO Stage 3 - please adjust your config", "deepspeed_config"),
    ("RuntimeError: The server socket has failed to listen on any local network address. The server socket has failed "
     "to bind to [::]:29500 (errno: 98 - Address already in use).", "network_or_rendezvous"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. "
     "See inner exception for details.", "network_or_rendezvous"),
    ("    store = TCPStore(\nRuntimeError: connect() timed out. Original timeout was 60000 ms.", "network_or_rendezvous"),
    ("node1:118:118 [0] NCCL INFO socketPollConnect: connect returned No route to host, retrying (34/34) after sleep",
     "network_or_rendezvous"),
    ("node1:1183:1184 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<47524> with error 12, opcode 0",
     "network_or_rendezvous"),
    ("ssh: connect to host worker-1 port 22: Connection refused", "network_or_rendezvous"),
    ("[1118468.87] nvidia 0000:0a:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT domain=0x000f address=0xea13a000 "
     "flags=0x0020]", "rccl_p2p_or_iommu"),
    ("Memory on the node (IP: 10.1.180.84, ID: ba65c80c8aec) where the task (task ID: d221d2, name=head, rank=0,, "
     "pid=4503, memory used=1000GB) was running was 1900GB / 2000GB (0.95), which exceeds the memory usage threshold",
     "killed_by_signal"),
    ("Running on local URL:  http://0.0.0.0:7860\nOSError: [Errno 98] Address already in use", "unknown"),
    ("Loading checkpoint shards:  38%|███▊      | 3/8 [00:02<00:03,  1.28it/s]Killed", "killed_by_signal"),
    ("E tensorflow/stream_executor/rocm/rocm_driver.cc:975] could not retrieve ROCM device count: HIP_ERROR_NoDevice",
     "gpu_not_detected"),
    ("    return [int(i) for i in gpu_ids_str.split(\",\")]\nValueError: invalid literal for int() with base 10: "
     "'NoDevFiles'", "gpu_not_detected"),
    ("unsupported embed per head: 512", "flash_attn_failure"),
    ("ValueError: 'Meta-Llama-3-8B-Instruct' is not a supported config name", "dependency_version"),
    ("(ActorModelRayActor pid=700388) AttributeError: 'LLMEngine' object has no attribute 'model_executor'",
     "dependency_version"),
    ("Filesystem      Size  Used Avail Use% Mounted on\ntmpfs            24G   23G  1.1G  96% /dev/shm",
     "shm_exhausted"),
    ("Filesystem      Size  Used Avail Use% Mounted on\ntmpfs            24G   2G   22G   8% /dev/shm", "unknown"),
    ("[aiter] start build [module_rocsolgemm] under /workspace/aiter/aiter/jit/build/module_rocsolgemm\n[aiter] failed build "
     "jit [module_rocsolgemm]", "extension_build_failed"),
    ("ValueError: Precision 'bf16-true' is invalid. Allowed precision values: ('16-mixed', 'bf16-mixed', '32-true')",
     "dependency_version"),
    ("| WARNING: overflow detected, setting loss scale to: 0.000244140625\n| WARNING: overflow detected, setting loss "
     "scale to: 0.0001220703125", "nan_or_divergent_loss"),
    ("| WARNING: overflow detected, setting loss scale to: 64.0", "unknown"),
    (":0:rocdevice.cpp :2991: 2317 us:  Callback: Queue 0x7f41cc300000 aborting with error : "
     "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory beyond the largest legal "
     "address. code: 0x29", "unknown"),
    ("vm2:15364:15376 [0] transport/net_ib.cc:1192 NCCL WARN NET/IB : Got completion from peer 192.168.0.12<60054> "
     "with error 4, opcode 32704, len 0, vendor err 81", "rccl_p2p_or_iommu"),
    ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, unhandled system error, NCCL version 2.7.8\nncclSystemError: "
     "System call (socket, malloc, munmap, etc) failed.", "shm_exhausted"),
    ("ValueError: torch.cuda.is_available() should be True but is False. xformers' memory efficient attention is only "
     "available for GPU", "gpu_not_detected"),
    ("Memory access fault by GPU node-1 (Agent handle: 0x5ed1141146a0) on address (nil). Reason: Page not present or "
     "supervisor privilege.\nCalling the function `at::_flash_attention_forward` on an RX 7900 XTX", "flash_attn_failure"),
    ("clang++: error: invalid target ID 'gfx1153'", "extension_build_failed"),
    ("      failed to execute:/opt/rocm-6.3.3/lib/llvm/bin/clang++  --offload-arch=gfx942  -I/opt/ds/csrc", "extension_build_failed"),
    ("requests.exceptions.HTTPError: 404 Client Error: Not Found for url: "
     "https://huggingface.co/datasets/json/resolve/main/data.jsonl", "dataset_missing"),
    ("TypeError: get_wsd_schedule() missing 2 required positional arguments: 'num_stable_steps' and 'num_decay_steps'",
     "config_invalid"),
    ("NameError: name 'str2optimizer8bit_blockwise' is not defined", "bitsandbytes_unavailable"),
    ("Could not load bitsandbytes native library: /x/libbitsandbytes_rocm64.so: undefined symbol: _Z36kOpt\n"
     "OSError: /x/libbitsandbytes_rocm64.so: undefined symbol: _Z36kOpt", "bitsandbytes_unavailable"),
    ("ValueError: When `padding_free=True` without packing, `max_length` is not enforced. Either enable packing",
     "config_invalid"),
    ("Unsloth: train_on_responses_only masked every label to -100 in train_dataset, so there is nothing to train on.",
     "template_or_tokenizer"),
    # the shared-memory limit of a Triton kernel, not the GPU's memory: a smaller batch does not help
    ("torch._inductor.exc.InductorError: OutOfMemoryError: out of resource: triton_tem_fused_flex_attention_backward_1\n"
     "Required: 114688 Hardware limit:101376 Reducing block sizes or `num_stages` may help.", "unknown"),
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 594.00 MiB. GPU 4 has a total capacity of 191.45 GiB "
     "of which 179.98 GiB is free.", "unknown"),
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 594.00 MiB. GPU 4 has a total capacity of 191.45 GiB "
     "of which 180.00 MiB is free.", "oom"),
    ("[2024-04-23 22:04:33,011] torch.distributed.elastic.agent.server.api: [WARNING] Received Signals.SIGINT death "
     "signal, shutting down workers", "hang"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "unknown"),
    ("W1229 16:43:25.650000 190834 torch/distributed/elastic/agent/server/api.py:723] Received 15 death signal, "
     "shutting down workers", "killed_by_signal"),
    ("出现错误：AttributeError: 'BaichuanTokenizer' object has no attribute 'sp_model'", "template_or_tokenizer"),
    ('rocblaslt error: Cannot read "TensileLibrary_lazy_gfx1101.dat": No error\n'
     'rocblaslt error: Could not load "TensileLibrary_lazy_gfx1101.dat"', "hip_invalid_device_function"),
    ("ConnectionError: Tried to launch distributed communication on port `29500`, but another process is utilizing "
     "it. Please specify a different port", "network_or_rendezvous"),
    ("TypeError: DataArgs.__init__() got an unexpected keyword argument 'no_eval'", "unknown_config_key"),
    ("eval_ppl=tensor(nan, device='cuda:0') eval_epoch_loss=tensor(nan, device='cuda:0')", "nan_or_divergent_loss"),
    ("NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:\n"
     "     query       : shape=(1, 32768, 32, 128) (torch.bfloat16)\n"
     "`flshattF@v2.3.6` is not supported because:\n"
     "    requires device with capability > (8, 0) but your GPU has capability (7, 0) (too old)\n"
     "    bf16 is only supported on A100+ GPUs", "bf16_unsupported"),
    ("NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:\n"
     "`fa2F@2.5.7-pt` is not supported because:\n    attn_bias type is <class 'torch.Tensor'>", "flash_attn_failure"),
    ("/envs/x/bitsandbytes/cuda_setup/main.py:149: UserWarning: /envs/x did not contain ['libcudart.so', "
     "'libcudart.so.11.0', 'libcudart.so.12.0'] as expected! Searching further paths...", "bitsandbytes_unavailable"),
    ("ValueError: Unsloth: You are using loftq init, yet load_in_4bit = True was set.", "config_invalid"),
    ("ValueError: You can't train a model that has been loaded with `device_map='auto'` in any distributed mode. "
     "Please rerun your script specifying `--num_processes=1`", "config_invalid"),
    ("Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 2.848094538889218e-306", "nan_or_divergent_loss"),
    ("172.17.0.2: mchorse@172.17.0.2: Permission denied (publickey,password).\n"
     "pdsh@6dca91c32bfd: 172.17.0.2: ssh exited with exit code 255", "network_or_rendezvous"),
    ("[2023-05-17 11:25:13,053] [INFO] [launch.py:318:sigkill_handler] Killing subprocess 2420\n"
     "[2023-05-17 11:25:13,146] [ERROR] [launch.py:324:sigkill_handler] ['python', '-u', 'train.py'] exits with return code = -7",
     "shm_exhausted"),
    ("NotImplementedError: Loading a dataset cached in a LocalFileSystem is not supported.", "dependency_version"),
    ("    FAILED: [code=1] CMakeFiles/cmTC_bd75d.dir/testHIPCompiler.hip.o ", "extension_build_failed"),
    ("Traceback (most recent call last):\n  File \"/v/transformers/trainer.py\", line 4127, in create_accelerator\n"
     "    self.accelerator = Accelerator(\nTypeError: __init__() got an unexpected keyword argument 'dispatch_batches'",
     "dependency_version"),
    ("10/24 18:04:14 - mmengine - WARNING - WARNING: command error: 'module 'torch.compiler' has no attribute "
     "'is_compiling''!", "dependency_version"),
    ("Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n    main()\nKeyError: 'qwen3'",
     "dependency_version"),
    ("AssertionError: FlashAttention maximum version 2.5.8 is supported.", "dependency_version"),
    ("[rank1]: RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This "
     "error indicates that your module has parameters that were not used in producing loss.", "ddp_unused_parameters"),
    ("RuntimeError: Expected to mark a variable ready only once. This error is caused by one of the following reasons: "
     "1) Use of a module parameter outside the `forward` function.", "ddp_unused_parameters"),
    ("Parameter indices which did not receive grad for rank 0: 0 1 2 3 4 5 6 7", "ddp_unused_parameters"),
    ("Exception: process 1 terminated with signal SIGKILL", "killed_by_signal"),
    ("Exception: process 0 terminated with signal SIGSEGV", "unknown"),
    ("W0712 21:41:30.388961 61592 site-packages/torch/distributed/elastic/agent/server/api.py:704] Received "
     "Signals.SIGHUP death signal, shutting down workers", "unknown"),
    ("2020-11-24 20:22:28.106 /bin/bash: line 27: 318 Killed sh start.sh", "killed_by_signal"),
    ("❌ Training failed with exit code -9", "killed_by_signal"),
    ("FileNotFoundError: Could not find module 'C:\\venv\\lib\\site-packages\\bitsandbytes\\libbitsandbytes_cuda116.dll'"
     " (or one of its dependencies). Try using the full path with constructor syntax.", "bitsandbytes_unavailable"),
    ("ImportError: No bitsandbytes / bitsandbytesがインストールされていないようです", "bitsandbytes_unavailable"),
    ("triton.compiler.errors.CompilationError: at 4:31:def _swiglu_forward_kernel(\n"
     "    program_id = tl.program_id(0).cast(tl.int64)\n                               ^\n"
     "AttributeError(\"'tensor' object has no attribute 'cast'\")", "dependency_version"),
    ("    × Failed to build `flash-attn==2.8.0.post2`\n    ├─▶ The build backend returned an error", "extension_build_failed"),
    ("<string>:106: UserWarning: flash_attn was requested, but\n      nvcc was not found.  Are you sure your environment "
     "has nvcc\n      available?", "extension_build_failed"),
    ("WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:\n"
     "    PyTorch 2.3.1+cu118 with CUDA 1108 (you have 2.5.1+cpu)", "gpu_not_detected"),
    ("TypeError: pad_sequence(): argument 'padding_value' (position 3) must be float, not NoneType",
     "template_or_tokenizer"),
    ('  File "/env/site-packages/transformers/trainer.py", line 1990, in _wrap_model\n'
     "    if self.accelerator.unwrap_model(model, keep_torch_compile=False) is not model:\n"
     "TypeError: Accelerator.unwrap_model() got an unexpected keyword argument 'keep_torch_compile'", "dependency_version"),
    ('  File "/me/train.py", line 9, in main\n    trainer.fit(model, foo=1)\n'
     "TypeError: Trainer.fit() got an unexpected keyword argument 'foo'", "unknown"),
    ('  File "/env/site-packages/torch/distributed/elastic/agent/server/api.py", line 556, in _rendezvous\n'
     "    self._set_master_addr_port(\nTypeError: _set_master_addr_port() takes 3 positional arguments but 4 were given",
     "dependency_version"),
    ('  File "/env/site-packages/torch/__init__.py", line 443, in <module>\n    from torch._C import *  # noqa: F403\n'
     "ImportError: librocprofiler-sdk.so.1: cannot open shared object file: No such file or directory", "dependency_version"),
    ("libc++abi: terminating due to uncaught exception of type std::runtime_error: [malloc_or_wait] Unable to allocate "
     "12 bytes.", "oom"),
    ("RuntimeError: **Expected is_sm80 || is_sm90 to be true, but got false**.  (Could this error message be improved?",
     "flash_attn_failure"),
    ("[rank5]: RuntimeError: call aclnnCast failed, detail:EZ1001: self not implemented for DT_BFLOAT16, should be in "
     "dtype support list [DT_FLOAT16,DT_FLOAT,]", "bf16_unsupported"),
    ("EE1002: 2024-09-26-16:06:40.565.510 Stream synchronize timeout. rtDeviceSynchronize execute failed, reason=[stream "
     "sync timeout]", "nccl_rccl_timeout"),
    ("UnicodeEncodeError: 'gbk' codec can't encode character '\\u2047' in position 12: illegal multibyte sequence",
     "unknown"),
    ("D:\\anaconda3\\envs\\llama_env\\python.exe: can't open file 'example_completion.py': [Errno 2] No such file or "
     "directory", "unknown"),
    ("AssertionError: You are using an untested ZeRO Optimizer. Please add <\"zero_allow_untested_optimizer\": true> in "
     "the configuration file to use it.", "deepspeed_config"),
    ("deepspeed.runtime.zero.utils.ZeRORuntimeException: The checkpoint being loaded used a DP world size of 256 but the "
     "current world size is 2.", "unknown"),
    ('  File "/env/site-packages/torch/distributed/elastic/rendezvous/c10d_rendezvous_backend.py", line 113, in '
     "_call_store\n    return getattr(self._store, store_op)(*args, **kwargs)\nRuntimeError: Broken pipe",
     "network_or_rendezvous"),
    ("Thread 46930 (idle): \"MainThread\"\n    wait (torch/utils/file_baton.py:42)\n"
     "    _jit_compile (torch/utils/cpp_extension.py:1522)\n    jit_load (deepspeed/ops/op_builder/builder.py:480)",
     "extension_build_failed"),
    ("FileNotFoundError: [Errno 2] No such file or directory: '/data/VOCdevkit/VOC2007/ImageSets/Main/trainval.txt'",
     "dataset_missing"),
    ("RuntimeError: Distributed package doesn't have NCCL built in\n  File \"/Users/me/Library/Python/3.9/lib/python/"
     "site-packages/torch/distributed/distributed_c10d.py\", line 895, in init_process_group", "unknown"),
    ("(raylet) node_manager.cc:3069: 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed "
     "due to other reasons at node", "killed_by_signal"),
    ("RuntimeError: use_libuv was requested but PyTorch was build without libuv support", "unknown"),
    ("FileNotFoundError: [Errno 2] No such file or directory: 'model/tmp-checkpoint-49' -> 'model/checkpoint-49'",
     "unknown"),
    # ncclSystemError alone: a system call failed, which one the lines around it do not say (shm or a socket)
    ("RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:784, unhandled system error, NCCL "
     "version 2.7.8", "unknown"),
    ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:784, unhandled system error, NCCL version 2.7.8\n"
     "host:1:2 [0] include/shm.h:28 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-x (size 9637888)",
     "shm_exhausted"),
    ("RuntimeError: 'weight' must be 2-D\nParameter containing:\ntensor([], device='cuda:1', dtype=torch.float16)",
     "deepspeed_config"),
    # hipErrorInvalidImage's own string (lemonade-sdk/llamacpp-rocm#92); the CUDA one beside a too-old driver is no arch
    ("ggml_cuda_compute_forward: SCALE failed\nROCm error: device kernel image is invalid", "hip_invalid_device_function"),
    ("RuntimeError: Triton Error [CUDA]: device kernel image is invalid", "unknown"),
    # amdgpu's MODE1 reset in dmesg (ROCm/ROCm#5508)
    ("kernel: amdgpu 0000:28:00.0: amdgpu: GPU mode1 reset\nkernel: [drm] VRAM is lost due to GPU reset!", "gpu_hw_fault"),
    # an extension built against a CUDA torch, loaded into a ROCm torch (pytorch/pytorch#139410)
    ('  File "/venv/lib/python3.10/site-packages/torch/_ops.py", line 1350, in load_library\n    ctypes.CDLL(path)\n'
     "OSError: libtorch_cuda.so: cannot open shared object file: No such file or directory", "dependency_version"),
    # torch's own warning is all a CUDA wheel on a machine without an NVIDIA driver leaves (microsoft/superbenchmark#520)
    ("/opt/conda/lib/python3.8/site-packages/torch/cuda/__init__.py:52: UserWarning: CUDA initialization: Found no NVIDIA "
     "driver on your system. Please check that you have an NVIDIA GPU and installed a driver", "gpu_not_detected"),
    ("UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found version 11000).", "unknown"),
    # a traceback from a GitHub Actions log, every line stamped (ROCm/TheRock#1119)
    ("2025-07-24T19:49:48.0372026Z Traceback (most recent call last):\n"
     '2025-07-24T19:49:48.0373089Z   File "/opt/python/lib/python3.11/site-packages/torch/__init__.py", line 424, in <module>\n'
     "2025-07-24T19:49:48.0374545Z     from torch._C import *  # noqa: F403\n"
     "2025-07-24T19:49:48.0375552Z ImportError: libamdhip64.so.7: cannot open shared object file: No such file or directory",
     "dependency_version"),
    # LLaVA's own warning when the conversation template does not fit the tokenizer (Victorwz/LLaVA-Llama-3#1)
    ("WARNING: tokenization mismatch: 55 vs. 54. (ignored)\nWARNING: tokenization mismatch: 60 vs. 59. (ignored)",
     "template_or_tokenizer"),
    # a traceback's last line set in Markdown bold in the issue (jingyaogong/minimind#85)
    ('  File "D:\\envs\\lib\\site-packages\\transformers\\utils\\deprecation.py", line 165, in wrapped_func\n'
     "    return func(*args, **kwargs)\n**TypeError: __init__() got an unexpected keyword argument 'beta'**",
     "dependency_version"),
    # a token id past the embedding table (huggingface/transformers#25503; inductor's form: gau-nernst/quantized-training#1)
    ("../aten/src/ATen/native/cuda/Indexing.cu:1146: indexSelectLargeIndex: block: [112,0,0], thread: [72,0,0] "
     "Assertion `srcIndex < srcSelectDimSize` failed.", "template_or_tokenizer"),
    ("unknown:0: unknown: block: [0,0,0], thread: [31,0,0] Assertion `index out of bounds: 0 <= tmp4 < 16000` failed.",
     "template_or_tokenizer"),
    # cuBLAS without a bf16 GEMM for this GPU (hiyouga/LlamaFactory#4856)
    ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasGemmStridedBatchedEx(handle, opa, opb, "
     "(int)m, (int)n, (int)k, (void*)&falpha, a, CUDA_R_16BF, (int)lda, stridea, b, CUDA_R_16BF`", "bf16_unsupported"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasSgemm(handle, opa, opb, m, n, k)`",
     "unknown"),
    # apex installed without its CUDA extensions, or built for another CUDA (facebookresearch/SpanBERT#43, NVIDIA/apex#228)
    ('  File "/envs/lib/python3.6/site-packages/apex/optimizers/fused_adam.py", line 40, in __init__\n'
     "ModuleNotFoundError: No module named 'fused_adam_cuda'", "extension_build_failed"),
    ('  File "/envs/lib/python3.6/site-packages/apex/optimizers/fused_adam.py", line 40, in __init__\n'
     '    fused_adam_cuda = importlib.import_module("fused_adam_cuda")\n'
     '  File "<frozen importlib._bootstrap>", line 219, in _call_with_frames_removed\n'
     "ImportError: libcudart.so.9.0: cannot open shared object file: No such file or directory", "extension_build_failed"),
    # torch's fuser compiling a kernel at run time (aim-uofa/AdelaiDet#345); MIOpen's own HIPRTC kernels are no such case
    ("RuntimeError: nvrtc: error: failed to load builtins for compute_75.\nnvrtc compilation failed:", "extension_build_failed"),
    ("MIOpen(HIP): Error [BuildHip] HIPRTC status = HIPRTC_ERROR_COMPILATION (6), source file: MIOpenBatchNormFwdTrainSpatialHIP.cpp",
     "unknown"),
    # Triton's own toolchain missing (pytorch/pytorch#95407)
    ("torch._dynamo.exc.BackendCompilerFailed: debug_wrapper raised RuntimeError: Cannot find ptxas", "dependency_version"),
    # the GPU faulted in a stock kernel and stays unusable until a reboot (fishaudio/fish-speech#390)
    ("RuntimeError: CUDA error: unspecified launch failure\nCUDA kernel errors might be asynchronously reported at some "
     "other API call, so the stacktrace below might be incorrect.", "gpu_hw_fault"),
    # LLaMA-Factory's own refusal of a stage it does not know (JingbiaoMei/RGCL#10)
    ('    raise ValueError(f"Unknown task: {finetuning_args.stage}.")\nValueError: Unknown task: sft_mm.', "config_invalid"),
    # a library's own code naming what a quietly failed optional import never bound (ali-vilab/ACE_plus#95)
    ('  File "/root/myenv/lib/python3.10/site-packages/swift/tuners/lora.py", line 70, in save_pretrained\n'
     "    super(peft.LoraConfig, self).save_pretrained(save_directory, **kwargs)\nNameError: name 'peft' is not defined",
     "dependency_version"),
    ('  File "/home/u/train.py", line 70, in main\n    run(cfg)\nNameError: name \'cfg\' is not defined', "unknown"),
    # the log stops, error-free, right after accelerate warned this kernel can hang (hiyouga/LlamaFactory#8118) ...
    ("[INFO|2025-05-20 09:42:14] llamafactory.model.loader:143 >> trainable params: 20,185,088 || all params: "
     "7,635,801,600 || trainable%: 0.2643\nDetected kernel version 4.18.0, which is below the recommended minimum of "
     "5.5.0; this can cause the process to hang", "hang"),
    # ... but a traceback after the same warning is the failure (hiyouga/LlamaFactory#5529)
    ("Detected kernel version 5.4.0, which is below the recommended minimum of 5.5.0; this can cause the process to "
     "hang.\nTraceback (most recent call last):\n  File \"/x/train.py\", line 3, in <module>\n"
     "RuntimeError: Something exploded here", "unknown"),
    # peft's adapter API of another release under LLaMA-Factory's PPO reward adapter (hiyouga/LlamaFactory#762, #1069)
    ('  File "/opt/conda/lib/python3.8/site-packages/peft/tuners/tuners_utils.py", line 192, in inject_adapter\n'
     "    peft_config = self.peft_config[adapter_name]\nKeyError: 'reward'", "dependency_version"),
    # torch elastic's teardown in its older [WARNING] record form is a rank that died, not a run that stalled
    ("\n".join(f"[2024-10-28 06:14:36,06{i}] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process "
               f"59858{i} closing signal SIGTERM" for i in range(4)), "unknown"),
    # torch's own launch-time messages (deepspeedai/DeepSpeed#1481, ultralytics/yolov5#4574, babylm/baseline-pretraining#2)
    ("RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!", "gpu_not_detected"),
    ("Waiting in store based barrier to initialize process group for rank: 0, key: store_based_barrier_key:1 "
     "(world_size=4, worker_count=8, timeout=0:30:00)", "network_or_rendezvous"),
    ("general_train.py: error: unrecognized arguments: --local-rank=0", "dependency_version"),
    # DeepSpeed started without a launcher falls back to MPI discovery (InternLM/xtuner#592)
    ('  File "/envs/lib/python3.10/site-packages/deepspeed/comm/comm.py", line 677, in mpi_discovery\n'
     "    from mpi4py import MPI\nModuleNotFoundError: No module named 'mpi4py'", "deepspeed_config"),
    ("ValueError: No slot '1' specified on host 'localhost'", "deepspeed_config"),
    # transformers converting a SentencePiece tokenizer without the package (songmzhang/DSKD#14)
    ("[rank0]: ValueError: Couldn't instantiate the backend tokenizer from one of: \n[rank0]: (1) a `tokenizers` library "
     "serialization file, \n[rank0]: You need to have sentencepiece installed to convert a slow tokenizer to a fast one.",
     "dependency_version"),
    # peft and bitsandbytes of releases that do not match (huggingface/peft#1209); peft refusing to merge into 4-bit
    # weights (bitsandbytes-foundation/bitsandbytes#430); autotrain without a GPU (huggingface/autotrain-advanced#382)
    ("AttributeError: 'Linear4bit' object has no attribute 'compute_dtype'", "dependency_version"),
    ('ValueError: Cannot merge LORA layers when the model is loaded in 8-bit mode', "config_invalid"),
    ('ValueError: No GPU/MPS device found. LLM training requires an accelerator', "gpu_not_detected"),
    # Ray's memory monitor in its longer form, with "out of memory" in it: host RAM, not the GPU (OpenRLHF/OpenRLHF#911)
    ("(ActorModelRayActor pid=8249) Refer to the documentation on how to address the out of memory issue: "
     "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html. Consider provisioning more memory on "
     "this node or reducing task parallelism by requesting more CPUs per task.", "killed_by_signal"),
    # torch's heartbeat monitor: a CUDA/NCCL call that never returned, a hang, though its advice names a timeout
    # variable (yflyzhang/simpleR1#1); the collective timeout beside it stays one
    ("[rank0]:[E608 14:09:10.210136079 ProcessGroupNCCL.cpp:1484] [PG ID 0 PG GUID 0(default_pg) Rank 0] "
     "ProcessGroupNCCL's watchdog got stuck for 480 seconds without making progress in monitoring enqueued "
     "collectives. This typically indicates a NCCL/CUDA API (e.g., CudaEventDestroy) hang blocking the watchdog. "
     "If you suspect the watchdog is not actually stuck and a longer timeout would help, you can either increase the "
     "timeout (TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC) to a larger value", "hang"),
    ("[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective operation timeout: "
     "WorkNCCL(SeqNum=4, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800470 milliseconds "
     "before timing out.", "nccl_rccl_timeout"),
    # a num_proc map worker of HF datasets died without an error of its own (unslothai/unsloth-zoo#88) ...
    ('  File "/venv/lib/python3.11/site-packages/datasets/utils/py_utils.py", line 711, in iflatmap_unordered\n'
     "    raise RuntimeError(\nRuntimeError: One of the subprocesses has abruptly died during map operation.To debug "
     "the error, disable multiprocessing.", "killed_by_signal"),
    # ... while a project's own datasets/ folder is no HF datasets frame (microsoft/SoftTeacher#105)
    ('  File "/workspace/mmdetection/mmdet/datasets/coco.py", line 59, in load_annotations\n'
     "    info['filename'] = info['file_name']\nKeyError: 'file_name'", "unknown"),
    ('  File "/opt/conda/lib/python3.10/site-packages/datasets/load.py", line 1810, in load_dataset\n'
     "    builder_instance = load_dataset_builder(\nKeyError: 'file_name'", "dataset_missing"),
    # resolvers that find no installable release: uv (Nerogar/OneTrainer#1381), pip's index search
    ("  × No solution found when resolving dependencies:\n  ╰─▶ Because torch==2.9.1+rocm6.3 has no wheels with a "
     "matching platform\n      tag (e.g., `win_amd64`) and you require torch==2.9.1+rocm6.3, we can\n      conclude "
     "that your requirements are unsatisfiable.", "dependency_version"),
    ("ERROR: Could not find a version that satisfies the requirement torch==2.3.0+rocm6.0 (from versions: 2.5.1)\n"
     "ERROR: No matching distribution found for torch==2.3.0+rocm6.0", "dependency_version"),
    # TensorFlow's allocator (tensorflow/tensorflow#1355); bitsandbytes' int8 matmul on a GPU without it
    # (broncotc/bitsandbytes-rocm#1)
    ("W tensorflow/core/common_runtime/executor.cc:1076] 0x18ef02bb0 Compute status: Resource exhausted: OOM when "
     "allocating tensor with shape[4096,4096]", "oom"),
    ("=============================================\nERROR: Your GPU does not support Int8 Matmul!\n"
     "=============================================\n\npython3: /dockerx/bitsandbytes-rocm/csrc/ops.cu:347: int "
     "igemmlt(cublasLtHandle_t, int, int, int): Assertion `false' failed.\nAborted (core dumped)",
     "bitsandbytes_unavailable"),
    # a label past the classes trips a device-side assert; NCCL's abort after it is fallout, not the cause
    # (huggingface/pytorch-image-models#1077)
    ("ScatterGatherKernel.cu:276: operator(): block: [0,0,0], thread: [26,0,0] Assertion `idx_dim >= 0 && idx_dim < "
     "index_size && \"index out of bounds\"` failed.\nRuntimeError: CUDA error: device-side assert triggered\n"
     "terminate called after throwing an instance of 'c10::Error'\n  what():  NCCL error in: "
     "../torch/csrc/distributed/c10d/NCCLUtils.hpp:181, unhandled cuda error, NCCL version 21.0.3", "unknown"),
    # xformers selected but not installed: attention without it (bmaltais/kohya_ss#3139)
    ('  File "/kohya_ss/library/train_util.py", line 2880, in replace_unet_cross_attn_to_xformers\n'
     "    import xformers.ops\nModuleNotFoundError: No module named 'xformers'", "flash_attn_failure"),
    # a torchvision of another torch build (meta-llama/llama-cookbook#710); a torch wheel without CUDA asked for a
    # GPU (OpenNMT/OpenNMT-py#2014)
    ("RuntimeError: Failed to import transformers.models.auto.processing_auto because of the following error (look up "
     "to see its traceback):\noperator torchvision::nms does not exist", "dependency_version"),
    ('  File "/Library/Python/3.7/site-packages/torch/cuda/__init__.py", line 281, in set_device\n'
     "    torch._C._cuda_setDevice(device)\nAttributeError: module 'torch._C' has no attribute '_cuda_setDevice'",
     "gpu_not_detected"),
    # xformers refusing the flash-attn beside it (unslothai/unsloth#2763); DeepSpeed given a ZeRO-2 config for a
    # model without an optimizer (huggingface/trl#825); a Hub 404 for a name that is no local folder
    # (HandsOnLLM/Hands-On-Large-Language-Models#31), a dataset's 404 staying a dataset's
    ("ImportError: Requires Flash-Attention version >=2.7.1,<=2.7.4 but got 2.8.0.post2.", "dependency_version"),
    ("AssertionError: zero stage 2 requires an optimizer", "deepspeed_config"),
    ("HTTPError: 404 Client Error: Not Found for url: https://huggingface.co/TinyLlama-1.1B-qlora/resolve/main/"
     "adapter_config.json", "model_path_or_hub"),
    ("HTTPError: 404 Client Error: Not Found for url: https://huggingface.co/datasets/foo/bar/resolve/main/x.json",
     "dataset_missing"),
    # DeepSpeed's launcher: password-less ssh to a hostfile entry failed (deepspeedai/DeepSpeed#4907); transformers
    # reaching into an accelerate of another release (huggingface/accelerate#2181); an extension's sources that do
    # not build (hipify left a CUDA type, deepspeedai/DeepSpeed#6795)
    ("subprocess.CalledProcessError: Command 'ssh -o PasswordAuthentication=no 192.168.3.100 hostname' returned "
     "non-zero exit status 255.", "network_or_rendezvous"),
    ("AttributeError: 'Accelerator' object has no attribute 'deepspeed_config'", "dependency_version"),
    ("csrc/quantization/quantize.cu:12:5: error: unknown type name 'cublasGemmAlgo_t'; did you mean "
     "'hipblasGemmAlgo_t'?", "extension_build_failed"),
    # Lightning's words for DDP's unused parameters (chemprop/chemprop#853)
    ("RuntimeError: It looks like your LightningModule has parameters that were not used in producing the loss "
     "returned by training_step. If this is intentional, you must enable the detection of unused parameters in DDP",
     "ddp_unused_parameters"),
    # a traceback pasted out of a JSON string keeps its frames (`File \\"...\\"`): the rendezvous backend raised
    # (meta-pytorch/torchx#540)
    ('  File \\"/opt/conda/lib/python3.9/site-packages/torch/distributed/elastic/rendezvous/'
     'c10d_rendezvous_backend.py\\", line 113, in _call_store\n'
     "    return getattr(self._store, store_op)(*args, **kwargs)\nRuntimeError: Broken pipe", "network_or_rendezvous"),
    # unsloth's trainer loop is exec'd from a string (`File <string>:262`): the frame that called it names the
    # package, so a call of another release's arity is a version mismatch (unslothai/notebooks#16)
    ("TypeError                                 Traceback (most recent call last)\n"
     "File ~/env/lib/python3.11/site-packages/transformers/trainer.py:2245, in Trainer.train(self)\n"
     "-> 2245     return inner_training_loop(\n\n"
     "File <string>:262, in _fast_inner_training_loop(self, batch_size, args)\n\n"
     "TypeError: _unsloth_get_batch_samples() takes 3 positional arguments but 4 were given", "dependency_version"),
]


def test_log_shapes_p2p_stall_exploding_loss_scale_warmup():
    """Verdicts from the log's shape: a stop while NCCL connects peers over P2P (the P2P hang, `hang` second), a
    logged loss climbing to many times its low, and the fp16 loss scale still settling from 2^32 (no failure)."""
    p2p = classify_text("\n".join(["host:1:2 [0] NCCL INFO Channel 00/02 :    0   1   2   3",
                                   "host:1:2 [0] NCCL INFO Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC",
                                   "host:1:2 [1] NCCL INFO Channel 00 : 1[1c000] -> 2[1d000] via P2P/IPC"]))
    assert p2p.category == "rccl_p2p_or_iommu" and p2p.playbook == "disable-p2p"
    assert p2p.alternatives[0]["category"] == "hang"
    done = classify_text("host:1:2 [0] NCCL INFO Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC\n"
                         "host:1:2 [0] NCCL INFO comm 0x55 rank 0 nranks 4 cudaDev 0 busId 1b000 - Init COMPLETE\n"
                         " 10%|█         | 10/100 [01:43<15:04, 10.05s/it]")
    assert done.category == "hang"
    rising = classify_text("{'loss': 2.1851, 'learning_rate': 0.0002, 'epoch': 0.14}\n"
                           "{'loss': 3.3851, 'learning_rate': 0.0002, 'epoch': 0.29}\n"
                           "{'loss': 9.2042, 'learning_rate': 0.0002, 'epoch': 0.43}\n"
                           "{'loss': 50.7927, 'learning_rate': 0.0002, 'epoch': 0.57}\n")
    assert rising.category == "nan_or_divergent_loss" and rising.signature == "hf-log-loss-exploding"
    steady = classify_text("{'loss': 2.1851, 'epoch': 0.14}\n{'loss': 1.3851, 'epoch': 0.29}\n{'loss': 1.2042, 'epoch': 0.43}\n")
    assert steady.category != "nan_or_divergent_loss"
    warm = "\n".join(f"[2024-09-11 17:52:18,030] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
                     f"Skipping step. Attempted loss scale: {2 ** k}, reducing to {2 ** (k - 1)}" for k in (32, 31, 30))
    assert classify_text(warm).category == "unknown"
    collapsed = ("[INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss "
                 "scale: 64, reducing to 32")
    assert classify_text(collapsed).category == "nan_or_divergent_loss"
    glued = ("Training Epochs:   1%|▌      | 11/2000 [00:57<2:54:28,  5.26s/itMemory access fault by GPU node-1 (Agent "
             "handle: 0x380a6dd0) on address 0x77f7e7600000. Reason: Page not present or supervisor privilege.51 "
             "[00:04<00:00, 30.92it/s]\nAborted (core dumped)")
    assert classify_text(glued).category == "gpu_hw_fault"


def test_ddp_parameter_usage_picks_its_remedy():
    """Unused parameters: let DDP find them; a gradient hook firing twice (reentrant checkpointing): non-reentrant."""
    unused = classify_text("RuntimeError: Expected to have finished reduction in the prior iteration before starting a new "
                           "one. This error indicates that your module has parameters that were not used in producing loss.")
    twice = classify_text("RuntimeError: Expected to mark a variable ready only once. Parameter at index 127 with name "
                          "base_model.model.lm_head.weight has been marked as ready twice.")
    assert (unused.playbook, unused.auto_fix) == ("ddp-find-unused", True)
    assert (twice.playbook, twice.auto_fix) == ("non-reentrant-gc", True)


def test_flash_attn_build_failure_trains_without_it():
    c = classify_text("/tmp/pip-req-build-x/csrc/flash_attn_rocm/composable_kernel/include/ck/utility/amd_buffer_addressing.hpp"
                      ":32:48: error: use of undeclared identifier 'CK_BUFFER_RESOURCE_3RD_DWORD'\n"
                      "2 errors generated when compiling for gfx1032.")
    assert (c.category, c.playbook, c.auto_fix) == ("extension_build_failed", "disable-flash-attn", True)
    other = classify_text("/tmp/ext/src/my_op.hip:12:5: error: use of undeclared identifier 'x'\n"
                          "1 error generated when compiling for gfx1032.")
    assert other.category == "extension_build_failed" and other.playbook != "disable-flash-attn"


@pytest.mark.parametrize(("log", "want"), LIBRARY_MESSAGES, ids=[f"{w}-{i}" for i, (_, w) in enumerate(LIBRARY_MESSAGES)])
def test_library_messages(log, want):
    c = classify_text(log)
    assert c.category == want, (log, c.category, c.signature)


def test_teardown_and_user_modules_are_no_cause():
    """torch elastic's SIGHUP teardown is no silent hang; a user module's missing name is no dependency version."""
    torn = ("[INFO] Running training\n  0%|          | 0/300 [00:00<?, ?it/s]\n  1%|          | 3/300 [00:09<15:10]\n"
            "W1221 17:13:59.243000 46660 torch/distributed/elastic/multiprocessing/api.py:897] Sending process 46809 "
            "closing signal SIGHUP\n")
    assert classify_text(torn).category != "hang"
    assert classify_text("ImportError: cannot import name 'helper' from 'utils' (/home/me/proj/utils.py)").category \
        != "dependency_version"


TEARDOWN = ("W0806 20:07:54.546301 148486 torch/distributed/elastic/multiprocessing/api.py:897] Sending process "
            "148593 closing signal SIGTERM\n")


@pytest.mark.parametrize(("log", "want"), [
    # a stuck run pasted as its last progress bar alone
    ("Running tokenizer on dataset (num_proc=16):   0%|          | 0/77976 [00:00<?, ? examples/s]\n", "hang"),
    # a bar, then one INFO record, then nothing (torchtune)
    ("1|15|Loss: 2.37: 100%|█████| 15/15 [01:25<00:00,  5.37s/it]\rINFO:torchtune.utils._logging:Starting "
     "checkpoint save...\n", "hang"),
    # a CI log with timestamps ending silently: `set -o pipefail` is no failure
    ("2023-02-02T21:28:36.05Z shell: /usr/bin/bash --noprofile --norc -e -o pipefail {0}\n"
     "2023-02-02T21:28:36.15Z GPU  Temp   AvgPwr  SCLK\n2023-02-02T21:28:36.16Z 0    33.0c  17.0W   925Mhz\n", "hang"),
    ("initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8\ninitializing ddp: GLOBAL_RANK: 3, MEMBER: 4/8\n"
     "initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8\n", "hang"),
    # the first all_reduce across nodes never returns; NCCL's INFO record of a missing net plugin ("cannot open
    # shared object file") is no error (pytorch/pytorch#131781)
    ("Running basic all-reduce on global rank 0.\n"
     "g046:23932:23932 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : libnccl-net.so: cannot "
     "open shared object file: No such file or directory\n"
     "g046:23932:23932 [0] NCCL INFO NET/Plugin : No plugin found, using internal implementation\n"
     "NCCL version 2.18.1+cuda12.1\ng046:23933:23933 [1] NCCL INFO cudaDriverVersion 12040\n", "hang"),
    # ... while an NCCL WARN record is one
    ("g046:23932:23932 [0] NCCL INFO cudaDriverVersion 12040\n"
     "g046:23932:23932 [0] NCCL INFO NET/Plugin : No plugin found, using internal implementation\n"
     "c76d92cccb6e:72:459 [3] enqueue.cc:58 NCCL WARN Cuda failure 'named symbol not found'\n", "not hang"),
    # one INFO line alone says nothing
    ("INFO 11-12 22:04:23 metrics.py:406] Avg prompt throughput: 0.0 tokens/s\n", "unknown"),
    # a rank died loading shards and printed nothing: killed, not a cause-less teardown
    ("Loading checkpoint shards:  47%|████▍     | 7/15 [03:24<03:59, 29.97s/it]" + TEARDOWN * 3, "killed_by_signal"),
    # the failing rank's own error is the cause, the teardown none
    ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n"
     "ValueError: Cannot find valid samples, check `data/README.md` for the data format.\n" + TEARDOWN, "dataset_missing"),
    # a teardown with nothing before it: no verdict
    (TEARDOWN * 2, "unknown"),
])
def test_silent_ends(log, want):
    """A log that just stops while the run was at work is a stall; torch elastic stopping the ranks right after a
    bar, with no Python error anywhere, is a rank that was killed."""
    got = classify_text(log)
    if want.startswith("not "):
        assert got.category != want[4:], got
    else:
        assert got.category == want, got


def test_explain_json_has_confidence_and_alternatives():
    r = run_cli("explain", "--json", "-", input="torch.OutOfMemoryError: HIP out of memory. Tried to allocate 4 GiB\n")
    out = json.loads(r.stdout)
    assert out["category"] == "oom" and out["confidence"] >= 0.9 and isinstance(out["alternatives"], list)
    assert out["signature"] and out["playbook"] == "reduce-memory" and out["auto_fix"] is True


def test_explain_list_and_category_docs_in_sync():
    r = run_cli("explain", "--list")
    assert r.returncode == 0 and "gpu_hw_fault" in r.stdout and "rccl_p2p_or_iommu" in r.stdout
    from doctor import classify

    assert (ROOT / "docs" / "categories.md").read_text().strip() == classify.markdown_page().strip()
    assert classify.markdown_table() in (ROOT / "README.md").read_text()


def test_site_signatures_file(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("signatures:\n  - {id: site-quota, category: disk_full_or_io, pattern: 'lustre quota exceeded',"
                    " confidence: 0.9, where: line, source: our cluster}\n")
    r = run_cli("explain", "--json", "-", input="write failed: lustre quota exceeded for /scratch\n",
                env={"ROCM_DOCTOR_SIGNATURES": str(site)})
    assert json.loads(r.stdout)["category"] == "disk_full_or_io"
    bad = tmp_path / "bad.yaml"
    bad.write_text("signatures:\n  - {id: x, category: no_such_category, pattern: 'a'}\n")
    r = run_cli("explain", "-", input="a\n", env={"ROCM_DOCTOR_SIGNATURES": str(bad)})
    assert r.returncode == 2 and "unknown category" in r.stderr and "Traceback" not in r.stderr


def test_collected_corpus_accuracy():
    """The project's own corpus of real logs (tests/data/failure-corpus.jsonl: 2198 issues, each with its URL and
    the fix its thread established; the blind sets among them, misses included). `other:*` entries are failures outside the
    taxonomy: `unknown` is right, and a confident category for one is the costly mistake, so few are allowed."""
    rows = [json.loads(x) for x in (DATA / "failure-corpus.jsonl").read_text().splitlines() if x.strip()]
    assert len(rows) >= 150 and len({r["url"] for r in rows}) == len(rows)  # each from a different issue
    good, wrong_other = 0, []
    for r in rows:
        c = classify_text(r["log"])
        want = "unknown" if r["category"].startswith("other:") else r["category"]
        good += c.category == want
        if r["category"].startswith("other:") and c.category != "unknown":
            wrong_other.append((r["id"], c.category))
    # a regression guard below today's 84.0 % (1846/2198): the blind sets joined with their misses, not tuned away
    assert good / len(rows) >= 0.835, f"{good}/{len(rows)}"
    n_other = sum(r["category"].startswith("other:") for r in rows)
    # 9 of 38: logs whose evidence is a known category's symptom (a stall at init, a GPU reset, an HSA hardware
    # exception, a corrupt weights file) while the thread found another cause behind it; a quarter at most
    assert len(wrong_other) <= max(3, n_other // 4), wrong_other


def test_every_builtin_signature_compiles_and_matches_its_own_message():
    """The catalog compiles its patterns lazily (a log meets a handful): compile them all here, and check each
    harvested pattern still matches the message it was made from."""
    import re

    from doctor.classify import catalog

    lib = {s["id"]: s for s in json.loads((ROOT / "playbooks" / "signatures-library.json").read_text())["signatures"]}
    for sig in catalog().signatures:
        assert sig.pattern  # compiles
        if sig.id in lib:
            assert sig.pattern.search(lib[sig.id]["message"].replace("{}", "X")), sig.id
        for near, _, _ in sig.refine:
            re.compile(near)


def test_anchors_cover_every_way_a_pattern_matches():
    """A pattern is only tried on texts holding one of its anchor words: with more ways to match than are
    followed, it gets none (always tried) rather than anchors that miss a way (bitsandbytes' `CUDA SETUP: ...
    not found` once went unmatched behind a long alternation)."""
    from doctor.classify import anchors

    alts = "|".join(f"word{i:02d}" for i in range(40))
    pattern = f"(?:{alts}) (?:alpha|beta|gamma)|CUDA SETUP:.*(?:not found|failed)"
    texts = ["word39 gamma", "word00 alpha", "CUDA SETUP: WARNING! libcuda.so not found!", "CUDA SETUP: Setup Failed"]
    def offered(entries: set[str], text: str) -> bool:  # some entry's words all in the text
        return any(all(w.lstrip("~") in text.lower() for w in e.split("&")) for e in entries)

    found = anchors(pattern)
    for text in texts:
        assert found is None or offered(found, text), (text, found)
    few = anchors("CUDA SETUP:.*(?:not found|failed)")
    assert few is not None and all(offered(few, t) for t in texts[2:])
    # every word a way needs is checked before its pattern is tried, not only the longest
    assert few == {"setup&~found", "setup&~failed"}
    assert not offered(few, "CUDA SETUP: loading")
    assert classify_text("CUDA SETUP: WARNING! libcuda.so not found! Do you have a CUDA driver installed?\n"
                         "CUDA SETUP: Loading binary /x/site-packages/bitsandbytes/libbitsandbytes_cpu.so...\n"
                         ).category == "bitsandbytes_unavailable"


@pytest.mark.parametrize(("log", "playbook"), [
    ("ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, using Ampere GPU with cuda>=11.0",
     "bf16-to-fp16"),
    ("ValueError: bf16 mixed precision requires PyTorch >= 1.10 and a supported device.", "bf16-to-fp16"),
    ("ptxas /tmp/x.ptx, line 1006; error   : Feature '.bf16' requires .target sm_80 or higher", "bf16-to-fp16"),
    ("ValueError: At most one of fp16 and bf16 can be True, but not both", "fix-precision"),
])
def test_bf16_refusals_train_in_fp16(log, playbook):
    """A refusal of bf16 itself answers with fp16; the two flags together with dropping fp16."""
    c = classify_text(log)
    assert c.category == "bf16_unsupported" and c.playbook == playbook and c.auto_fix, c


def test_anchors_never_hide_a_match_in_the_corpus():
    """Every signature whose pattern matches a corpus line is among the candidates the word index gives for that
    line (an anchor word that is only part of the text's word, `flash_attn` of `flash_attn_cuda.so`, once hid
    flash-attention's ABI signature behind a generic one)."""
    from doctor.classify import catalog

    cat = catalog()
    corpus = Path(__file__).parent / "data" / "failure-corpus.jsonl"
    lines = {ln for row in corpus.read_text(encoding="utf-8").splitlines() if row.strip()
             for ln in json.loads(row)["log"].splitlines() if ln.strip()}
    text = "\n".join(sorted(lines))
    hidden = []
    for sig in cat.signatures:
        if sig.anchors is None:
            continue
        for m in sig.pattern.finditer(text):
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            line = text[start:end if end >= 0 else len(text)]
            if "\n" in m.group(0) or sig.pattern.search(line) is None:
                continue  # a match across lines: the classifier never sees such a text
            if sig not in cat.candidates(line):
                hidden.append((sig.id, line[:120]))
            break
    assert not hidden, hidden[:10]


def test_nccl_shared_memory_is_no_dataloader_retry():
    """/dev/shm exhausted by NCCL's own segments: loading data in the main process would change nothing, so the
    verdict names the container's shm size and stops; a DataLoader worker's bus error still retries without
    workers."""
    nccl = classify_text("NCCL WARN Error while creating shared memory segment /dev/shm/nccl-ABC (size 9637888)\n"
                         "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1169, unhandled system error")
    assert nccl.category == "shm_exhausted" and nccl.playbook is None and not nccl.auto_fix, nccl
    assert "--shm-size" in nccl.summary
    loader = classify_text("RuntimeError: DataLoader worker (pid 729) is killed by signal: Bus error. It is possible "
                           "that dataloader's workers are out of shared memory.")
    assert loader.category == "shm_exhausted" and loader.playbook == "dataloader-no-workers" and loader.auto_fix
