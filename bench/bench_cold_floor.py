"""Where a cold `check CONFIG` cannot go below (issue #17): the stack worker's chain, step by step, against
`llamafactory-cli env`, in fresh processes on the realistic config's model (a tiny Llama with the real Llama-3.1
tokenizer, built here).

The template check needs LLaMA-Factory's template applied to the model's own tokenizer, loaded the way
LLaMA-Factory loads it (`AutoTokenizer.from_pretrained`). Its chain is
  torch (+ torchvision, torchaudio, which transformers and LLaMA-Factory import) -> transformers' tokenizer
  classes -> { the tokenizer load | LLaMA-Factory's template module } -> the fix
so the shortest a cold stack worker can be is the imports `llamafactory-cli env` also pays plus the tokenizer
load. The two middle steps are independent, but the fix needs both in one process: overlapping them in two
processes saves at most the shorter one (the template import) minus moving a tokenizer between processes
(pickling it: the Rust tokenizer's JSON out and in). This script measures each step and that transfer, and
profiles the load inside transformers (where its time goes is transformers' own code: a stdlib json.load of
tokenizer.json for the added tokens, `Tokenizer.from_file`, and a deepcopy of the backend). The template probe
loads it without that deepcopy (``doctor.probes.llamafactory._load_tokenizer``); the floor counts its load.

Usage: python bench/bench_cold_floor.py [--n 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import build_tiny_model  # noqa: E402

CHAIN = r"""
import json, sys, time, pickle, cProfile, pstats, io
t = time.perf_counter(); out = {}
def step(name):
    global t
    now = time.perf_counter(); out[name] = now - t; t = now
import torch, torchvision, torchaudio
step("torch + torchvision + torchaudio")
from transformers import AutoTokenizer
import transformers.models.auto.tokenization_auto
step("transformers tokenizer classes")
pr = cProfile.Profile(); pr.enable()
tok = AutoTokenizer.from_pretrained(sys.argv[1], local_files_only=True)
pr.disable()
step("tokenizer load")
from doctor.probes.llamafactory import _load_tokenizer
_load_tokenizer(sys.argv[1])
step("tokenizer load as the template probe does it")
blob = pickle.dumps(tok); step("tokenizer pickled (to move it)")
pickle.loads(blob); step("tokenizer unpickled")
from llamafactory.data.template import TEMPLATES, get_template_and_fix_tokenizer
step("LLaMA-Factory template module")
import llamafactory.hparams
step("LLaMA-Factory hparams (after the template module)")
st = pstats.Stats(pr)
inside = {}
parts = {"raw_decode": "json decode of tokenizer.json (transformers' added-tokens read)",
         "from_file": "tokenizers.Tokenizer.from_file", "__setstate__": "deepcopy of the backend",
         "__reduce_ex__": "deepcopy of the backend"}
for (fn, _, name), (_, _, tt, ct, _) in st.stats.items():
    for part, key in parts.items():
        if name == part or f" {part}" in name or f"'{part}'" in name:
            inside[key] = inside.get(key, 0.0) + tt
print(json.dumps({"steps": out, "inside_load": inside}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    model = build_tiny_model(work / "model", tokenizer="llama3_1")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", HIP_VISIBLE_DEVICES="-1", DISABLE_VERSION_CHECK="1",
               PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # compiled bytecode on both sides, as installed
    py = sys.executable
    lf = shutil.which("llamafactory-cli") or str(Path(py).with_name("llamafactory-cli"))
    envs: list[float] = []
    runs: list[dict] = []
    for _ in range(a.n):
        t0 = time.perf_counter()
        subprocess.run([lf, "env"], cwd=work, capture_output=True, check=True)
        envs.append(time.perf_counter() - t0)
        p = subprocess.run([py, "-c", CHAIN, str(model)], cwd=work, env=env, capture_output=True, text=True)
        if p.returncode:
            sys.exit(p.stderr[-800:])
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    e = statistics.median(envs)
    med = {k: statistics.median(r["steps"][k] for r in runs) for k in runs[0]["steps"]}
    print(f"llamafactory-cli env: median {e:.2f} s ({', '.join(f'{x:.2f}' for x in envs)})")
    for k, v in med.items():
        print(f"  {k:52} {v:5.2f} s")
    imports = med["torch + torchvision + torchaudio"] + med["transformers tokenizer classes"] + \
        med["LLaMA-Factory template module"] + med["LLaMA-Factory hparams (after the template module)"]
    plain, load = med["tokenizer load"], med["tokenizer load as the template probe does it"]
    print(f"stack imports {imports:.2f} s ({imports / e:.2f}x env) + tokenizer load {load:.2f} s (the probe's; "
          f"plain from_pretrained {plain:.2f} s) = {imports + load:.2f} s ({(imports + load) / e:.2f}x env): the "
          "serial floor of a cold stack worker")
    save = med["LLaMA-Factory template module"] - med["tokenizer pickled (to move it)"] - med["tokenizer unpickled"]
    print(f"overlapping the load with the template import in a second process saves at most {save:.2f} s "
          f"(template import {med['LLaMA-Factory template module']:.2f} s minus the tokenizer's move "
          f"{med['tokenizer pickled (to move it)'] + med['tokenizer unpickled']:.2f} s), with a free core")
    inside = {k: statistics.median(r["inside_load"].get(k, 0.0) for r in runs) for k in runs[0]["inside_load"]}
    print("inside transformers' load (profiled): " + ", ".join(f"{k} {v:.2f} s" for k, v in inside.items()))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
