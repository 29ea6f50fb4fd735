"""The retry policy of ``train``, table-driven: a failed attempt + history -> Retry | Stop, in milliseconds
(no llamafactory, no process). The end-to-end runs are in test_train.py."""

from __future__ import annotations

from pathlib import Path

import pytest

import playbooks as pbs
from doctor.classify import classify_text
from doctor.config import dump_config, yaml_rt
from doctor.train.policy import Failure, Retry, Stop, next_attempt

CFG = """\
### model
model_name_or_path: /models/llama3
flash_attn: fa2
quantization_bit: 4
### train
output_dir: out
overwrite_output_dir: true
per_device_train_batch_size: 4
gradient_accumulation_steps: 2
learning_rate: 1.0e-3
"""


def cfg(text: str = CFG):
    return yaml_rt().load(text)


def ck(*steps: int, incomplete: tuple[int, ...] = ()) -> list[tuple[int, Path, bool]]:
    return [(s, Path(f"/run/out/checkpoint-{s}"), s not in incomplete) for s in steps]


BAD = ({"index": 2, "bdf": "0000:46:00.0", "why": ["uncorrectable errors 0 -> 1"]},)
EXCL = {"ROCR_VISIBLE_DEVICES": "0,1,3"}


def decide(category: str, *, history=None, applied=(), checkpoints=None, diverged_at=None, resumed=False,
           log: str = "", config=None, faulty=(), exclude_env=None, allowed=frozenset(), suspect="", bf16_ok=False):
    failure = Failure(category=category, summary="s", classification=classify_text(log) if log else None,
                      diverged_at=diverged_at, resumed=resumed, faulty=tuple(faulty), exclude_env=exclude_env,
                      allowed=frozenset(allowed), suspect=suspect, bf16_ok=bf16_ok)
    return next_attempt(failure, config if config is not None else cfg(),
                        history=list(history if history is not None else [category]), applied=list(applied),
                        playbooks=pbs.for_category(category), checkpoints=checkpoints)


CASES = [
    # (id, category, kwargs, expected type, playbooks, resume_from step)
    ("deterministic-dataset", "dataset_missing", {}, Stop, None, None),
    ("deterministic-template", "template_or_tokenizer", {}, Stop, None, None),
    ("killed-once-retries-unchanged", "killed_by_signal", {"checkpoints": ck(2, 4)}, Retry, ["keep-progress"], 4),
    ("killed-twice-stops", "killed_by_signal", {"history": ["killed_by_signal", "killed_by_signal"]}, Stop, None, None),
    ("oom-reduces-memory", "oom", {"checkpoints": ck(5)}, Retry, ["reduce-memory", "keep-progress"], 5),
    ("bnb-falls-back-to-lora", "bitsandbytes_unavailable", {}, Retry, ["qlora-to-lora"], None),
    ("flash-attn-off", "flash_attn_failure", {}, Retry, ["disable-flash-attn"], None),
    ("divergence-first-rules-out-attention", "nan_or_divergent_loss", {"checkpoints": ck(2, 4, 6), "diverged_at": 5},
     Retry, ["disable-flash-attn", "keep-progress"], 4),
    ("divergence-then-lower-lr-starts-fresh", "nan_or_divergent_loss",
     {"applied": ["disable-flash-attn"], "checkpoints": ck(2, 4)}, Retry, ["lower-lr"], None),
    ("reduce-memory-is-repeatable", "oom", {"applied": ["reduce-memory"]}, Retry, ["reduce-memory"], None),
    ("no-playbook-left", "flash_attn_failure", {"applied": ["disable-flash-attn"]}, Stop, None, None),
    ("unknown-stops", "unknown", {}, Stop, None, None),
    ("network-stops", "network_or_rendezvous", {"checkpoints": ck(2, 4)}, Stop, None, None),
    ("incomplete-checkpoint-skipped", "oom", {"checkpoints": ck(2, 4, incomplete=(4,))}, Retry,
     ["reduce-memory", "keep-progress"], 2),
    ("hang-once-retries-resuming", "hang", {"checkpoints": ck(2, 4)}, Retry, ["keep-progress"], 4),
    ("hang-twice-stops", "hang", {"history": ["hang", "hang"], "suspect": "collective"}, Stop, None, None),
    ("gpu-fault-unidentified-stops", "gpu_hw_fault", {}, Stop, None, None),
    ("gpu-fault-no-spare-stops", "gpu_hw_fault", {"faulty": BAD}, Stop, None, None),
    ("gpu-fault-spare-asks-first", "gpu_hw_fault", {"faulty": BAD, "exclude_env": EXCL}, Stop, None, None),
    ("gpu-fault-spare-allowed-moves", "gpu_hw_fault", {"faulty": BAD, "exclude_env": EXCL, "allowed": {"exclude-gpu"},
                                                       "checkpoints": ck(3)}, Retry, ["exclude-gpu", "keep-progress"], 3),
    ("killed-after-a-hang-still-retries", "killed_by_signal", {"history": ["hang", "killed_by_signal"]}, Retry,
     [], None),
    # a GPU without bf16 (a V100, a T4) refuses it: fp16 is the run that can go ahead
    ("bf16-refused-trains-in-fp16", "bf16_unsupported", {"config": cfg(CFG + "bf16: true\n")}, Retry,
     ["bf16-to-fp16"], None),
    # both flags set: drop fp16, keep bf16
    ("both-precisions-drop-fp16", "bf16_unsupported", {"config": cfg(CFG + "bf16: true\nfp16: true\n")}, Retry,
     ["fix-precision"], None),
    # the preflight ran bf16 on this GPU: a library's check refused it, fp16 would hide that
    ("bf16-refused-on-a-bf16-gpu-stops", "bf16_unsupported", {"config": cfg(CFG + "bf16: true\n"), "bf16_ok": True},
     Stop, None, None),
    ("bf16-refused-on-a-bf16-gpu-allowed", "bf16_unsupported",
     {"config": cfg(CFG + "bf16: true\n"), "bf16_ok": True, "allowed": {"bf16-to-fp16"}}, Retry, ["bf16-to-fp16"], None),
]


@pytest.mark.parametrize("category, kw, kind, names, step", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_next_attempt(category, kw, kind, names, step):
    d = decide(category, **kw)
    assert isinstance(d, kind), d
    if kind is Retry:
        assert d.playbooks == names, d.changes
        assert (d.resume_from is None) if step is None else d.resume_from.endswith(f"checkpoint-{step}")


def test_resume_removes_overwrite_output_dir_and_keeps_the_original():
    original = cfg()
    d = decide("oom", checkpoints=ck(3), config=original)
    text = dump_config(d.config)
    assert "overwrite_output_dir" not in text and "resume_from_checkpoint: /run/out/checkpoint-3" in text
    assert "overwrite_output_dir: true" in dump_config(original)  # the policy never edits what it was given
    assert "### train" in text  # comments survive the clone


def test_only_poisoned_checkpoints_start_fresh():
    d = decide("nan_or_divergent_loss", checkpoints=ck(4, 6), diverged_at=3)
    assert isinstance(d, Retry) and d.resume_from is None
    assert d.config["overwrite_output_dir"] is True and any("NaN weights" in c for c in d.changes)


def test_previous_resume_is_dropped_before_choosing_again():
    c = cfg(CFG + "resume_from_checkpoint: /run/out/checkpoint-2\n")
    d = decide("killed_by_signal", config=c, resumed=True, checkpoints=None)
    assert isinstance(d, Retry) and "resume_from_checkpoint" not in d.config


def test_unknown_keys_from_the_log_are_dropped():
    c = cfg(CFG + "device_map: auto\n")
    d = decide("unknown_config_key", config=c,
               log="ValueError: Some keys are not used by the HfArgumentParser: ['device_map']")
    assert isinstance(d, Retry) and d.playbooks == ["drop-unknown-keys"] and "device_map" not in d.config


def test_a_pre_quantized_model_stops_qlora_fallback():
    failure = Failure(category="bitsandbytes_unavailable")
    d = next_attempt(failure, cfg(), history=["bitsandbytes_unavailable"], applied=[],
                     playbooks=pbs.for_category("bitsandbytes_unavailable"), checkpoints=None,
                     model_config={"quantization_config": {"quant_method": "gptq"}})
    assert isinstance(d, Stop) and "pre-quantized" in d.reason


def test_hang_and_gpu_fault_reasons_name_what_to_do():
    d = decide("hang", history=["hang", "hang"], suspect="collective")
    assert isinstance(d, Stop) and "RCCL" in d.reason and "NCCL_P2P_DISABLE" in d.reason
    d = decide("hang", history=["hang", "hang"], suspect="dataloader")
    assert "dataloader_num_workers" in d.reason
    d = decide("gpu_hw_fault", faulty=BAD, exclude_env=EXCL)
    assert "GPU 2 (0000:46:00.0)" in d.reason and "--apply exclude-gpu" in d.reason and "ROCR_VISIBLE_DEVICES=0,1,3" in d.reason
    d = decide("gpu_hw_fault", faulty=BAD)
    assert "no spare GPU" in d.reason and "uncorrectable errors 0 -> 1" in d.reason
    d = decide("gpu_hw_fault", faulty=BAD, exclude_env=EXCL, allowed={"exclude-gpu"})
    assert isinstance(d, Retry) and d.env == EXCL
    assert dump_config(d.config) == dump_config(cfg())  # the move is the environment; the YAML is unchanged


def test_bf16_refused_on_a_bf16_gpu_says_upgrade():
    d = decide("bf16_unsupported", config=cfg(CFG + "bf16: true\n"), bf16_ok=True)
    assert isinstance(d, Stop) and "BF16000" in d.reason and "--apply bf16-to-fp16" in d.reason


def test_a_kill_by_the_oom_killer_stops_at_once():
    failure = Failure(category="killed_by_signal", summary="s",
                      host_oom="the OOM killer killed 1 process(es) of this job's cgroup (oom_kill 0 -> 1)")
    d = next_attempt(failure, cfg(), history=["killed_by_signal"], applied=[],
                     playbooks=pbs.for_category("killed_by_signal"), checkpoints=ck(2))
    assert isinstance(d, Stop) and "host RAM ran out" in d.reason and "oom_kill 0 -> 1" in d.reason

    logged = decide("killed_by_signal", log="[ 9001.1] Out of memory: Killed process 4242 (python) total-vm:9876kB\n")
    assert isinstance(logged, Stop) and "OOM-killer line" in logged.reason


DL_KILLED = ("Traceback (most recent call last):\n"
             '  File "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py", line 1130, in _try_get_data\n'
             "    data = self._data_queue.get(timeout=timeout)\n"
             "RuntimeError: DataLoader worker (pid 2637) is killed by signal: Killed.\n")


def test_a_killed_dataloader_worker_loads_in_the_main_process():
    """The OOM killer taking a DataLoader worker names its remedy (no workers), ahead of a blind retry and even
    where the kill was recorded; with no workers left to remove, the kill rules decide as for any other kill."""
    c = cfg(CFG + "dataloader_num_workers: 8\npreprocessing_num_workers: 16\n")
    d = decide("killed_by_signal", log=DL_KILLED, config=c, checkpoints=ck(2))
    assert isinstance(d, Retry) and d.playbooks[0] == "dataloader-no-workers"
    assert d.config["dataloader_num_workers"] == 0 and d.config["preprocessing_num_workers"] == 1
    assert d.resume_from == "/run/out/checkpoint-2" and c["dataloader_num_workers"] == 8  # the input is untouched
    again = decide("killed_by_signal", log=DL_KILLED, config=d.config, applied=["dataloader-no-workers"],
                   history=["killed_by_signal", "killed_by_signal"])
    assert isinstance(again, Stop) and "twice" in again.reason
    none_left = decide("killed_by_signal", log=DL_KILLED)
    assert isinstance(none_left, Retry) and none_left.playbooks in ([], ["keep-progress"]) and "unchanged" in none_left.note


def test_deepspeeds_loss_scaler_raising_moves_fp16_to_bf16():
    """A traceback ending in DeepSpeed's loss scaler (its exception line cut off) is the fp16 scale collapsing: the
    frame rule names fp16-to-bf16, which the policy applies before any other divergence remedy."""
    log = ('  File "/opt/conda/lib/python3.8/site-packages/deepspeed/runtime/zero/stage_1_and_2.py", line 1896, in '
           '_update_scale\n    self.loss_scaler.update_scale(has_overflow)\n  File "/opt/conda/lib/python3.8/'
           'site-packages/deepspeed/runtime/fp16/loss_scaler.py", line 183, in update_scale\n    raise Exception(\n'
           'Exception: \n')
    d = decide("nan_or_divergent_loss", log=log, config=cfg(CFG + "fp16: true\n"))
    assert isinstance(d, Retry) and d.playbooks == ["fp16-to-bf16"], d
    assert d.config["bf16"] is True and "fp16" not in d.config
