"""Names of what rocm-doctor examines: the training stack's packages and environment variables.

One list each, shared by the torch check's version probe, the ``--distributed`` fingerprint, the
``report`` bundle and the cache fingerprint, so a package added here is seen everywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

# distribution names, as importlib.metadata knows them
PACKAGES: tuple[str, ...] = (
    "torch", "torchvision", "torchaudio", "transformers", "peft", "trl", "accelerate", "datasets",
    "llamafactory", "deepspeed", "bitsandbytes", "flash_attn", "amdsmi", "tokenizers", "triton",
    "pytorch-triton-rocm", "liger-kernel", "unsloth", "vllm", "galore-torch", "apollo-torch", "badam", "apex",
)

# versions that must agree across the ranks of a job (the fingerprint of ``check --distributed``)
RANK_VERSION_KEYS: tuple[str, ...] = ("python", "torch", "hip", "cuda", "rocm", "driver", "transformers", "peft",
                                      "trl", "accelerate", "datasets", "llamafactory", "deepspeed", "bitsandbytes",
                                      "flash_attn")

# environment variables a support engineer wants to see (``report``), by prefix or exact name
RELEVANT_ENV_PREFIXES: tuple[str, ...] = (
    "HIP_", "ROCR_", "ROCM_", "HSA_", "CUDA_", "NCCL_", "RCCL_", "TORCH_", "PYTORCH_", "AMD_", "MIOPEN_", "HF_",
    "TRANSFORMERS_", "WANDB_", "FORCE_TORCHRUN", "NNODES", "NODE_RANK", "NPROC_PER_NODE", "MASTER_ADDR",
    "MASTER_PORT", "OPTIM_TORCH", "LLAMAFACTORY_", "DISABLE_VERSION_CHECK", "ALLOW_EXTRA_ARGS", "USE_V1", "GPU_",
    "OMP_NUM_THREADS", "FLASH_ATTENTION_", "BNB_", "DS_", "SLURM_",
)

# ... and those that change what training does, so they must agree across ranks
TRAINING_ENV_KEYS: frozenset[str] = frozenset({
    "HSA_OVERRIDE_GFX_VERSION", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "OPTIM_TORCH",
    "FLASH_ATTENTION_TRITON_AMD_ENABLE", "TORCH_ROCM_AOTRITON_ENABLE_EXPERIMENTAL", "HIP_FORCE_DEV_KERNARG",
    "TORCH_BLAS_PREFER_HIPBLASLT", "DISABLE_VERSION_CHECK", "ALLOW_EXTRA_ARGS", "FORCE_TORCHRUN",
})
TRAINING_ENV_PREFIXES: tuple[str, ...] = ("NCCL_", "RCCL_")
PER_NODE_ENV: frozenset[str] = frozenset({"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_DEBUG_FILE"})

# torchrun's rendezvous: a local probe must never see it (transformers would join the process group)
DIST_VARS: frozenset[str] = frozenset({
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK",
    "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
})


def env_flag(env: dict[str, str], name: str, default: str = "0") -> bool:
    """LLaMA-Factory's own truthiness (``extras.misc.is_env_enabled``): ``true``, ``y`` or ``1``."""
    return str(env.get(name, default)).strip().lower() in ("true", "y", "1")


def relevant_env(env: dict[str, str], secret_name: object = None) -> dict[str, str]:
    """The variables ``report`` shows (plus any secret-named one, which the redactor then masks)."""
    return {k: v for k, v in sorted(env.items())
            if k.startswith(RELEVANT_ENV_PREFIXES) or (secret_name is not None and secret_name.search(k))}


def training_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k in TRAINING_ENV_KEYS or k.startswith(TRAINING_ENV_PREFIXES)}


_VERSIONS_SCRIPT = ("import importlib.metadata as m, json, sys\nout = {}\n"
                    "for n in json.loads(sys.argv[1]):\n"
                    "    try: out[n] = m.version(n)\n"
                    "    except Exception: out[n] = None\n"
                    "print(json.dumps(out))")


def is_this_python(python: str | None) -> bool:
    """``python`` is the interpreter running rocm-doctor. Compared as given, not resolved: every venv's
    ``bin/python`` is a symlink to the same base interpreter, yet each sees its own site-packages."""
    return python is None or os.path.abspath(python) == os.path.abspath(sys.executable)


def package_versions(python: str | None = None, names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Versions from package metadata in the examined Python; nothing is imported. {} when it cannot run."""
    if is_this_python(python):
        import importlib.metadata as md

        out: dict[str, str | None] = {}
        for n in names:
            try:
                out[n] = md.version(n)
            except md.PackageNotFoundError:
                out[n] = None
        return out
    try:
        p = subprocess.run([python, "-c", _VERSIONS_SCRIPT, json.dumps(list(names))], capture_output=True,
                           text=True, timeout=30)
        return json.loads(p.stdout) if p.returncode == 0 else {}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}
