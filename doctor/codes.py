"""The registry of finding ids: one documented entry per id, like ruff's rule codes.

Every finding a check emits must have an entry here (a test enforces it), and the README table
and ``docs/codes.md`` are generated from this registry (``rocm-doctor codes --markdown``), so the
documentation cannot drift from the code.

Id scheme: ``<AREA><NNN>``; ``<AREA>000`` is the area's "all good" summary.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.findings import Severity

E, W, I, OK = Severity.ERROR, Severity.WARNING, Severity.INFO, Severity.OK  # noqa: E741


@dataclass(frozen=True)
class CodeDoc:
    id: str
    area: str
    severity: Severity
    title: str
    why: str
    fix: str
    playbook: str | None = None
    autofix: bool = False  # whether `fix`/`train` may apply the playbook without asking

    @property
    def fix_short(self) -> str:
        return self.fix.split("\n")[0]


_ENTRIES: list[CodeDoc] = [
    # ---------------------------------------------------------------- doctor itself
    CodeDoc("DOC001", "doctor", E, "A check crashed",
            "A bug in rocm-doctor or an unexpected environment made a check raise. The other checks still ran.",
            "Report it with `rocm-doctor report`; the evidence holds the traceback."),
    CodeDoc("DOC002", "doctor", E, "A probe crashed the isolated worker (signal)",
            "Probes that import torch or run GPU kernels run in a separate process. A segfault there "
            "(a broken HIP kernel, a bad extension) would have killed a training run the same way.",
            "Read the evidence (signal, last stderr lines); rerun with `--only` on that area and "
            "`AMD_LOG_LEVEL=3` to see the failing HIP call."),
    CodeDoc("DOC003", "doctor", E, "A probe hung past its timeout",
            "A hang at import or at the first kernel (a wedged GPU, a driver waiting on a lock) "
            "would hang training too.",
            "Check `dmesg` for amdgpu errors and that no other process holds the GPU; raise `--timeout` "
            "only if the machine is merely slow."),
    CodeDoc("DOC004", "doctor", E, "A probe could not import what it examines",
            "The module the probe needs (torch, transformers, llamafactory, ...) fails to import in "
            "the examined Python.",
            "Read the exception in the evidence; reinstall the failing package for this Python."),
    CodeDoc("DOC005", "doctor", W, "Examined Python could not be started",
            "`--python` names an interpreter that does not run.",
            "Pass the Python of the environment that runs `llamafactory-cli`."),
    # ---------------------------------------------------------------- torch build
    CodeDoc("TORCH000", "torch", OK, "torch build matches this machine",
            "torch imports, its backend matches the GPUs present and every GPU's arch is in the wheel.",
            "Nothing to do."),
    CodeDoc("TORCH001", "torch", E, "torch cannot be imported",
            "Without torch nothing trains. A broken `import torch` on ROCm is often a mismatched "
            "`amdsmi` package (torch imports it and only catches ImportError).",
            "Reinstall a ROCm torch wheel from the PyTorch ROCm index matching your ROCm; if the "
            "error mentions amdsmi, `pip uninstall amdsmi` or install the one in /opt/rocm/share/amd_smi."),
    CodeDoc("TORCH002", "torch", E, "torch build does not match the GPUs (CPU/CUDA torch on AMD GPUs)",
            "A CPU or CUDA wheel on a machine whose GPUs are AMD trains on the CPU (or not at all).",
            "Install the ROCm wheel: `pip install torch --index-url https://download.pytorch.org/whl/rocmX.Y`."),
    CodeDoc("TORCH003", "torch", E, "GPU architecture not compiled into this torch",
            "Each ROCm wheel ships kernels for a list of gfx targets (`torch.cuda.get_arch_list()`). "
            "A GPU outside it fails with `hipErrorNoBinaryForGpu` or `invalid device function`.",
            "Use a wheel that lists your arch (newer ROCm wheels add RDNA3/4); as a last resort set "
            "`HSA_OVERRIDE_GFX_VERSION` to a compatible listed arch (e.g. 11.0.0 for gfx1101/1102)."),
    CodeDoc("TORCH004", "torch", W, "torch's HIP version differs from the system ROCm",
            "A wheel built for another ROCm major.minor than /opt/rocm can fail to load kernels or "
            "libraries (rccl, hipblaslt) and makes bitsandbytes look for the wrong library.",
            "Install the torch wheel for the system ROCm (or upgrade ROCm to the wheel's)."),
    CodeDoc("TORCH005", "torch", E, "torchvision/torchaudio built for another backend than torch",
            "A CUDA torchaudio beside a ROCm torch (or any mixed pair) fails at import; LLaMA-Factory "
            "0.9.5 imports torchaudio at start-up.",
            "Reinstall torch, torchvision and torchaudio together from the same index URL."),
    CodeDoc("TORCH006", "torch", W, "HSA_OVERRIDE_GFX_VERSION set where it is not needed",
            "The override makes the runtime load kernels built for another arch. It helps only for "
            "archs missing from the wheel (e.g. gfx1101/1102 on old wheels) and is harmful on RDNA4 "
            "and Instinct GPUs.",
            "Unset HSA_OVERRIDE_GFX_VERSION."),
    CodeDoc("TORCH007", "torch", E, "GPU device files not accessible",
            "ROCm needs read/write access to /dev/kfd and /dev/dri/renderD*; without it torch sees no GPU. "
            "In containers they must be passed with `--device`.",
            "Add the user to the `render` and `video` groups (log in again), or run the container with "
            "`--device=/dev/kfd --device=/dev/dri`."),
    CodeDoc("TORCH008", "torch", W, "Visible-device variables are incoherent",
            "ROCR_VISIBLE_DEVICES filters first, then HIP_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES index into "
            "what is left. Contradicting or out-of-range values hide GPUs or crash torch at init.",
            "Set one of them (HIP_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES), with indices that exist."),
    CodeDoc("TORCH009", "torch", W, "Library version outside LLaMA-Factory's supported range",
            "LLaMA-Factory checks transformers/peft/trl/accelerate/datasets ranges at start-up and refuses "
            "to run outside them unless DISABLE_VERSION_CHECK=1; outside the range, behaviour is untested.",
            "Install the versions in the range shown, or set DISABLE_VERSION_CHECK=1 knowingly."),
    CodeDoc("TORCH010", "torch", I, "No GPU visible; CPU-only environment",
            "torch sees no GPU and no AMD or NVIDIA GPU was found on the machine. Training runs on the CPU.",
            "Nothing to do on a CPU machine; on a GPU machine see TORCH002/TORCH007."),
    # ---------------------------------------------------------------- config lint
    CodeDoc("CFG000", "config", OK, "LLaMA-Factory accepts the config",
            "The config parses with LLaMA-Factory's own argument parser.", "Nothing to do."),
    CodeDoc("CFG001", "config", E, "Key not accepted by LLaMA-Factory",
            "LLaMA-Factory stops with `Some keys are not used by the HfArgumentParser: [...]` before "
            "loading anything. `device_map` (from a widely shared ROCm guide) is derived by LLaMA-Factory "
            "itself and must not be specified; `evaluation_strategy` was renamed `eval_strategy`.",
            "Drop the key (or rename it where upstream renamed it).", "drop-unknown-keys", True),
    CodeDoc("CFG002", "config", E, "Invalid value for a choice field",
            "YAML values bypass argparse's `choices`, so a wrong value is not rejected at start-up: "
            "`quantization_method: bitsandbytes` silently disables quantization (the value is `bnb`).",
            "Use one of the listed values."),
    CodeDoc("CFG003", "config", E, "bf16 and fp16 both enabled",
            "transformers refuses it: `At most one of fp16 and bf16 can be True`.",
            "Keep `bf16: true` on MI200/MI300/RDNA3+ and drop `fp16`.", "fix-precision", True),
    CodeDoc("CFG004", "config", W, "model_name_or_path is a Hub id, not a local path",
            "Compute nodes are often offline; a Hub id downloads at start-up (or fails on a gated repo).",
            "Download the model once and point model_name_or_path at the absolute local directory."),
    CodeDoc("CFG005", "config", E, "A local path in the config does not exist",
            "model_name_or_path / adapter_name_or_path / dataset_dir / deepspeed point to a missing path.",
            "Fix the path (relative paths resolve from the directory you launch in)."),
    CodeDoc("CFG006", "config", E, "template missing or unknown",
            "LLaMA-Factory fails with `Template X does not exist.`; without a template it guesses from "
            "the tokenizer, which is wrong for base models.",
            "Set `template:` to the model family's template (e.g. llama3, qwen, qwen3)."),
    CodeDoc("CFG007", "config", E, "Dataset not found in dataset_info.json",
            "Each `dataset` name must be a key of `<dataset_dir>/dataset_info.json`; a relative "
            "dataset_dir resolves from the working directory, not the config's directory.",
            "Add the dataset to dataset_info.json or fix dataset_dir (use an absolute path)."),
    CodeDoc("CFG008", "config", E, "DeepSpeed config unreadable",
            "The `deepspeed:` JSON is missing or not valid JSON; the run fails after model loading.",
            "Fix the JSON (LLaMA-Factory ships examples/deepspeed/ds_z{0,2,3}_config.json)."),
    CodeDoc("CFG009", "config", W, "DeepSpeed config inconsistent with the training args",
            "Hard-coded fp16/bf16 or scheduler values that differ from the training args make "
            "transformers stop with `Please correct the following DeepSpeed config values`.",
            "Set those DeepSpeed values to \"auto\"."),
    CodeDoc("CFG010", "config", W, "DeepSpeed without FORCE_TORCHRUN",
            "On a single visible GPU, llamafactory-cli launches without torchrun and DeepSpeed refuses: "
            "`Please use FORCE_TORCHRUN=1 to launch DeepSpeed training.`",
            "Launch with `FORCE_TORCHRUN=1 llamafactory-cli train ...`."),
    CodeDoc("CFG011", "config", W, "overwrite_output_dir with existing checkpoints",
            "`overwrite_output_dir: true` makes LLaMA-Factory start from step 0 and delete its trainer log "
            "although checkpoints exist: the progress is discarded.",
            "Drop overwrite_output_dir to resume, or use a new output_dir.", "keep-progress", True),
    CodeDoc("CFG012", "config", I, "output_dir has checkpoints: the run will resume",
            "Without overwrite_output_dir, LLaMA-Factory silently resumes from the last checkpoint-N.",
            "Intended? Otherwise use a new output_dir."),
    CodeDoc("CFG013", "config", W, "ddp_timeout short for a multi-GPU run",
            "Rank 0 tokenises the dataset while the other ranks wait in a barrier; with the default "
            "30-minute timeout a large dataset kills the run with a collective timeout.",
            "Set `ddp_timeout: 180000000` (LLaMA-Factory's examples do).", "raise-ddp-timeout", True),
    CodeDoc("CFG014", "config", W, "OPTIM_TORCH will force expandable_segments on ROCm",
            "llamafactory-cli sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for torchrun launches "
            "unless OPTIM_TORCH=0; on ROCm this overrides PYTORCH_HIP_ALLOC_CONF and uses a feature that is "
            "unsupported or reported to crash/hang on several ROCm torch builds.",
            "Export OPTIM_TORCH=0 for multi-GPU ROCm runs.", "optim-torch-off", True),
    CodeDoc("CFG015", "config", E, "LLaMA-Factory's parser rejects the config",
            "LLaMA-Factory's own argument validation raised; the run would stop at start-up.",
            "Read the message in the detail; it is LLaMA-Factory's own."),
    CodeDoc("CFG016", "config", I, "Linted against a cached schema",
            "LLaMA-Factory could not be imported in the examined Python (or --quick was given), so the "
            "keys were checked against a cached schema of its fields.",
            "Install llamafactory in the examined Python for the full lint."),
    CodeDoc("CFG017", "config", E, "Value has the wrong type",
            "YAML 1.1 reads `1e-4` (no dot) as a string; a string learning rate or a non-integer batch "
            "size fails inside transformers.",
            "Write numbers as numbers, e.g. `1.0e-4`."),
    CodeDoc("CFG018", "config", E, "QLoRA settings LLaMA-Factory refuses",
            "Quantization works only with finetuning_type lora/oft, 4 or 8 bits for bnb, and not with resize_vocab.",
            "Use finetuning_type: lora and quantization_bit: 4 (or drop quantization).", "qlora-to-lora"),
    # ---------------------------------------------------------------- template tokens
    CodeDoc("TPL000", "template", OK, "Template tokens match the tokenizer",
            "Every special token the template emits or stops on is one id the tokenizer knows.",
            "Nothing to do."),
    CodeDoc("TPL001", "template", E, "Template token splits into several ids",
            "A role header or stop word the tokenizer does not know as one token is trained as plain "
            "text pieces; the model never learns to stop.",
            "Use the template of the model's family."),
    CodeDoc("TPL002", "template", E, "Template adds tokens the model has no embedding for",
            "LLaMA-Factory adds missing stop words as new special tokens; their ids fall outside the "
            "model's embedding matrix unless `resize_vocab: true`, which then trains untrained rows.",
            "Prefer the right template; otherwise set `resize_vocab: true`.", "resize-vocab", False),
    CodeDoc("TPL003", "template", E, "Template does not match the model family",
            "The template's tokens belong to another model family than the tokenizer's chat template.",
            "Set `template:` to the suggested one."),
    CodeDoc("TPL004", "template", W, "Tokenizer could not be loaded; template not checked",
            "The tokenizer files at model_name_or_path could not be loaded locally (no Hub access is attempted).",
            "Point model_name_or_path at a local directory with tokenizer files."),
    CodeDoc("TPL005", "template", I, "Tokenizer has no pad token",
            "LLaMA-Factory sets pad = eos; fine for SFT, but note eos is then masked in padding.",
            "Nothing required."),
    # ---------------------------------------------------------------- BF16
    CodeDoc("BF16000", "bf16", OK, "BF16 matrix cores healthy",
            "A bf16 GEMM matches the fp32 reference and runs at a plausible rate.", "Nothing to do."),
    CodeDoc("BF16001", "bf16", E, "bf16 requested on a GPU without BF16 matrix cores",
            "`torch.cuda.is_bf16_supported()` is hard-coded True on ROCm, so nothing upstream refuses "
            "`bf16: true` on gfx906 (MI50/MI60/Radeon VII): it emulates bf16 on the vector units, "
            "many times slower.",
            "Use `fp16: true` instead of bf16 on this GPU.", "bf16-to-fp16", True),
    CodeDoc("BF16002", "bf16", E, "bf16 GEMM gives wrong results",
            "The bf16 matrix product differs from the fp32 reference beyond bf16 rounding (or is NaN): "
            "a broken BLAS library or kernel.",
            "Try TORCH_BLAS_PREFER_HIPBLASLT=0 (hipBLAS) and report the evidence; train in fp16/fp32 meanwhile.",
            "bf16-to-fp16"),
    CodeDoc("BF16003", "bf16", W, "bf16 GEMM far below the GPU's peak",
            "Achieved TFLOP/s is a small fraction of the SKU's dense BF16 peak: a slow BLAS path "
            "(hipBLAS instead of hipBLASLt), a throttled or shared GPU.",
            "Check the BLAS backend in the evidence and that the GPU is idle; TORCH_BLAS_PREFER_HIPBLASLT=1 on MI200/MI300."),
    CodeDoc("BF16004", "bf16", I, "bf16 probed on the CPU only",
            "No GPU is visible; the bf16 numerics were checked on the CPU.", "Nothing to do."),
    # ---------------------------------------------------------------- attention
    CodeDoc("BF16005", "bf16", E, "Mixed precision requested but torch sees no GPU",
            "bf16/fp16 training needs a GPU; with none visible (a CPU torch wheel, no /dev/kfd access, "
            "HIP_VISIBLE_DEVICES=-1, a container started without the devices) transformers refuses the config.",
            "Fix GPU visibility first (the torch findings say why); to train on the CPU on purpose, set "
            "`use_cpu: true` and drop bf16/fp16."),
    CodeDoc("ATTN000", "attention", OK, "Attention kernels healthy",
            "The attention implementation LLaMA-Factory will use ran forward and backward within tolerance.",
            "Nothing to do."),
    CodeDoc("ATTN001", "attention", E, "FlashAttention-2 will be used with a broken flash-attn",
            "transformers' FlashAttention-2 gate only looks at the installed version, never imports the kernels "
            "or checks the arch; a broken or unsupported build (an ABI mismatch after a torch upgrade, a CK build "
            "without this gfx arch, head_dim > 256 on CK) fails at load or computes garbage. LLaMA-Factory picks "
            "FA2 for `flash_attn: fa2`, and by itself for Gemma-2 with `auto`. The detail names the ROCm backend "
            "(CK or Triton) and, for CK, the archs the build supports.",
            "Use `flash_attn: sdpa` (or disabled).", "disable-flash-attn", True),
    CodeDoc("ATTN002", "attention", E, "An SDPA backend gives wrong results or crashes",
            "A fused attention kernel (flash / mem-efficient / AOTriton) differs from the fp32 reference "
            "beyond flash-attn's own tolerance rule, or returns NaN/Inf.",
            "Disable it: `flash_attn: disabled` (eager attention).", "disable-flash-attn", True),
    CodeDoc("ATTN003", "attention", W, "Only the math SDPA kernel is available",
            "Without flash/mem-efficient kernels SDPA falls back to the O(N²)-memory math kernel; with a "
            "long cutoff_len this is an OOM risk.",
            "On gfx1100/1201 set TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1, or lower cutoff_len."),
    CodeDoc("ATTN004", "attention", W, "FLASH_ATTENTION_TRITON_AMD_ENABLE has an ignored value",
            "flash-attn compares it with the exact string `TRUE`; `1` or `true` do nothing.",
            "export FLASH_ATTENTION_TRITON_AMD_ENABLE=TRUE"),
    CodeDoc("ATTN005", "attention", I, "flash_attn: fa2 but FlashAttention-2 will not be used",
            "flash-attn is not installed, no GPU is visible, or transformers' gate rejects the installed version: "
            "LLaMA-Factory warns `FlashAttention-2 is not installed.` and falls back to the default attention "
            "(named in the finding).",
            "Set `flash_attn: sdpa` to say what you get."),
    CodeDoc("ATTN006", "attention", W, "Experimental AOTriton arch without the opt-in",
            "On experimental archs SDPA flash/mem-efficient are disabled unless "
            "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1, so SDPA falls back to the math kernel.",
            "export TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL=1 (the probe checks the kernels are correct)."),
    CodeDoc("ATTN007", "attention", E, "LLaMA-Factory cannot set up this flash_attn value for the model",
            "Its `configure_attn_implementation` raises at model load, e.g. `Unknown attention type: fa3` for "
            "`flash_attn: fa3` on any model but gpt-oss (LLaMA-Factory 0.9.5): the parser accepts the value, the "
            "run dies after loading the data.",
            "Use `flash_attn: sdpa`, `fa2` or `auto`.", "disable-flash-attn", True),
    # ---------------------------------------------------------------- bitsandbytes
    CodeDoc("BNB000", "bitsandbytes", OK, "bitsandbytes 4-bit works",
            "The native library loaded and an NF4 round trip and Linear4bit forward are correct.", "Nothing to do."),
    CodeDoc("BNB001", "bitsandbytes", E, "QLoRA requested but bitsandbytes is unusable",
            "`quantization_bit` needs a bitsandbytes whose GPU library loads; on ROCm the PyPI wheel "
            "ships ROCm binaries only from 0.49.0, and import succeeds even when the library failed to load.",
            "Fall back to 16-bit LoRA, or install bitsandbytes>=0.49 for your ROCm.", "qlora-to-lora", True),
    CodeDoc("BNB002", "bitsandbytes", W, "bitsandbytes installed but its GPU library did not load",
            "Import succeeds with an error mock; the first 4-bit op would fail.",
            "Install bitsandbytes>=0.49 (ROCm binaries) or build it with -DCOMPUTE_BACKEND=hip."),
    CodeDoc("BNB003", "bitsandbytes", E, "bitsandbytes 4-bit gives wrong results",
            "NF4 quantize/dequantize or a Linear4bit forward differs from the reference "
            "(bitsandbytes #2087: silently wrong on a prebuilt ROCm wheel).",
            "Fall back to 16-bit LoRA.", "qlora-to-lora", True),
    CodeDoc("BNB004", "bitsandbytes", I, "Pre-quantized checkpoint",
            "The model's config.json has a quantization_config: LLaMA-Factory takes the PTQ path and "
            "ignores quantization_bit; it cannot be un-quantized by a config change.",
            "To train 16-bit LoRA, point model_name_or_path at the unquantized base model."),
    CodeDoc("BNB005", "bitsandbytes", W, "bitsandbytes ROCm library version differs from torch's HIP",
            "bitsandbytes loads libbitsandbytes_rocmXY.so named after torch.version.hip; a different one "
            "is a fallback that may not match.",
            "Install the bitsandbytes build for torch's ROCm, or set BNB_ROCM_VERSION."),
    # ---------------------------------------------------------------- GPUs
    CodeDoc("GPU000", "gpus", OK, "GPUs present, idle and visible to torch", "", "Nothing to do."),
    CodeDoc("GPU001", "gpus", E, "torch sees fewer GPUs than the machine has",
            "The system tools list more GPUs than torch.cuda.device_count() (after visible-device filters): "
            "a CPU/CUDA torch on AMD GPUs, missing permissions, or a filter you forgot.",
            "See TORCH002/TORCH007; check *_VISIBLE_DEVICES."),
    CodeDoc("GPU002", "gpus", W, "A GPU is already busy",
            "Memory in use or processes on a GPU before the run leave less memory than planned and slow it.",
            "Stop the other processes, or exclude the GPU with HIP_VISIBLE_DEVICES."),
    CodeDoc("GPU003", "gpus", W, "GPUs imbalanced",
            "One GPU holds far more memory or work than the others: a device_map pile-up on GPU 0, or a "
            "stray process.",
            "Find the process on the heavy GPU; do not use device_map with LLaMA-Factory training."),
    CodeDoc("GPU004", "gpus", W, "amdsmi Python package unusable",
            "PyPI's amdsmi is a thin wrapper that needs the system libamd_smi.so of the same version; a "
            "mismatched one fails at import and can break `import torch` on ROCm.",
            "`pip uninstall amdsmi`, or `pip install /opt/rocm/share/amd_smi` (the matching one)."),
    CodeDoc("GPU005", "gpus", I, "No GPU found", "No AMD or NVIDIA GPU found by any source.", "Nothing to do on a CPU machine."),
    # ---------------------------------------------------------------- memory fit
    CodeDoc("MEM000", "memory", OK, "Estimated memory fits", "", "Nothing to do."),
    CodeDoc("MEM001", "memory", W, "Predicted out of memory",
            "The estimate of weights + optimizer + activations for this config exceeds a GPU's free memory.",
            "Lower per_device_train_batch_size (keep the effective batch with gradient_accumulation_steps), "
            "enable gradient checkpointing, or shorten cutoff_len.", "reduce-memory", True),
    CodeDoc("MEM002", "memory", I, "Memory estimate not possible",
            "The model's config.json is not available locally, so its size is unknown.", "Nothing to do."),
    # ---------------------------------------------------------------- distributed (check --distributed)
    CodeDoc("DIST000", "distributed", OK, "All ranks agree",
            "Every rank has the same versions, config and training environment, and the collectives complete.",
            "Nothing to do."),
    CodeDoc("DIST001", "distributed", E, "A version differs across ranks",
            "torch, HIP/CUDA, ROCm, the driver, transformers, llamafactory, bitsandbytes or flash_attn differ "
            "between ranks (one node upgraded, a different container image): kernels and numerics differ, "
            "RCCL versions may not interoperate, and LLaMA-Factory may behave differently per node.",
            "Install the same stack on every node (one container image); the evidence lists which ranks have "
            "which version."),
    CodeDoc("DIST002", "distributed", E, "The training config differs across ranks",
            "The YAML's hash differs between ranks (an edited copy on one node): ranks would train different "
            "things or fail at different points.",
            "Put the config on shared storage or copy the same file to every node."),
    CodeDoc("DIST003", "distributed", W, "A training-relevant environment variable differs across ranks",
            "HSA_OVERRIDE_GFX_VERSION, allocator settings, OPTIM_TORCH, flash-attention switches or NCCL/RCCL "
            "variables set on some ranks only change kernels, memory behaviour or the collective algorithm "
            "per node. Interface names (NCCL_SOCKET_IFNAME) may legitimately differ (reported as info).",
            "Export the same variables on every node (the launcher script or the scheduler's environment)."),
    CodeDoc("DIST004", "distributed", E, "A rank's local check found errors",
            "The per-rank check (probes on that rank's GPU) found an error on some ranks: the job would fail or "
            "diverge there.",
            "Read `ranks[].findings` of the listed ranks; fix that node (or exclude it)."),
    CodeDoc("DIST005", "distributed", E, "Process group init failed or timed out",
            "Not every rank joined the rendezvous within --dist-timeout: a node not started, MASTER_ADDR/PORT "
            "not reachable, a firewall, or the wrong network interface. Training would hang at start-up.",
            "Check MASTER_ADDR/MASTER_PORT reachability, the firewall, NCCL_SOCKET_IFNAME, then rerun with "
            "NCCL_DEBUG=INFO."),
    CodeDoc("DIST006", "distributed", E, "A collective failed or hung",
            "all_gather/all_reduce raised or did not finish in time (the probe was stopped): RCCL/NCCL cannot "
            "talk over the configured transport. Training would hang at its first collective.",
            "Check NCCL_SOCKET_IFNAME, NCCL_IB_HCA/NCCL_IB_DISABLE, NCCL_NET_GDR_LEVEL, HSA_FORCE_FINE_GRAIN_PCIE "
            "(RCCL) and rerun with NCCL_DEBUG=INFO."),
    CodeDoc("DIST007", "distributed", W, "A straggler rank",
            "One rank reaches the collective far later than the others after the same local work: a slower or "
            "throttled GPU, a busy CPU, or a GPU shared with another job. Every training step waits for it.",
            "Check that rank's GPU (clocks, temperature, other processes with `amd-smi`) and CPU load."),
    CodeDoc("DIST008", "distributed", W, "Bus bandwidth below the floor",
            "all_reduce bus bandwidth at the largest size is below --min-busbw: a slow or misconfigured "
            "interconnect (TCP instead of InfiniBand/RoCE, P2P disabled, a bad link).",
            "Compare with rccl-tests on the same nodes; check NCCL_IB_*, NCCL_P2P_DISABLE and the NIC."),
    CodeDoc("DIST009", "distributed", I, "Collective bandwidth",
            "all_reduce time, algbw and busbw (rccl-tests definition: busbw = algbw × 2(n-1)/n) per size, with "
            "the backend training will use.",
            "Nothing to do; compare across runs and nodes."),
]

CODES: dict[str, CodeDoc] = {c.id: c for c in _ENTRIES}
assert len(CODES) == len(_ENTRIES), "duplicate finding id"

AREAS: tuple[str, ...] = tuple(dict.fromkeys(c.area for c in _ENTRIES))


def markdown_table() -> str:
    """The README / docs table of ids, generated so it can never drift from the registry."""
    rows = ["| id | severity | title | playbook (auto) |", "|---|---|---|---|"]
    for c in _ENTRIES:
        pb = f"`{c.playbook}`{' (auto)' if c.autofix else ''}" if c.playbook else ""
        rows.append(f"| `{c.id}` | {c.severity.value} | {c.title} | {pb} |")
    return "\n".join(rows)


def markdown_page() -> str:
    """docs/codes.md: one section per id: why it matters, how it is fixed, whether it is auto-fixable."""
    out = ["# Finding ids", "", "Generated by `rocm-doctor codes --markdown`; do not edit by hand.", ""]
    for c in _ENTRIES:
        out += [f"## {c.id} — {c.title}", "",
                f"*Area:* `{c.area}` · *Severity:* {c.severity.value}"
                + (f" · *Playbook:* `{c.playbook}` ({'applied automatically' if c.autofix else 'asks first'})"
                   if c.playbook else ""), ""]
        if c.why:
            out += [f"**Why it matters.** {c.why}", ""]
        out += [f"**Fix.** {c.fix}", ""]
    return "\n".join(out)
