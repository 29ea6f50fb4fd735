"""The hang watchdog, hardware-aware retries and throughput of `train`, end to end with stand-in launchers
(real subprocesses, real signals, a recorded machine tree for the GPU fault) — fast, no llamafactory. The real
LLaMA-Factory runs on CPU are in test_train.py."""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
import time
from pathlib import Path

from doctor.train.watch import Progress, Throughput, judge_stall, stall_limit
from tests.conftest import FIXTURES, run_cli


def standin(tmp: Path, body: str) -> str:
    """A launcher script: gets the attempt's YAML path, writes trainer_log.jsonl records like LLaMA-Factory."""
    script = tmp / "launcher.py"
    script.write_text(textwrap.dedent('''\
        import json, os, sys, time, pathlib
        cfg = pathlib.Path(sys.argv[1])
        out = pathlib.Path(os.environ["OUT_DIR"])
        out.mkdir(exist_ok=True)
        def record(n, loss=1.0):
            with open(out / "trainer_log.jsonl", "a") as f:
                f.write(json.dumps({"current_steps": n, "total_steps": 10, "loss": loss, "lr": 1e-3,
                                    "epoch": n / 10, "percentage": n * 10, "elapsed_time": "0:00:01",
                                    "remaining_time": "0:00:09"}) + "\\n")
            print(f"step {n}", flush=True)
        ''') + textwrap.dedent(body))
    return f"{sys.executable} {script}"


def config(tmp: Path) -> Path:
    (tmp / "cfg.yaml").write_text("model_name_or_path: /models/x\nstage: sft\noutput_dir: out\nlogging_steps: 1\n"
                                  "per_device_train_batch_size: 2\ngradient_accumulation_steps: 2\ncutoff_len: 512\n")
    return tmp / "cfg.yaml"


def run_train(tmp: Path, launcher: str, *args: str, env: dict | None = None, timeout: float = 120):
    e = {"OUT_DIR": str(tmp / "out"), **(env or {})}
    t0 = time.monotonic()
    r = run_cli("train", str(config(tmp)), "--run-dir", str(tmp / "run"), "--no-preflight", "-q",
                "--launcher", launcher, "--gpu-interval", "0.5", *args, cwd=tmp, env=e, timeout=timeout)
    return r, json.loads((tmp / "run" / "run.json").read_text()), time.monotonic() - t0


def test_a_launcher_that_blocks_after_three_steps_is_stopped_as_a_hang(tmp_path):
    launcher = standin(tmp_path, """
        for n in (1, 2, 3):
            record(n); time.sleep(0.2)
        time.sleep(600)   # blocked: no CPU, no output, like a rank waiting in a collective
        """)
    r, run, wall = run_train(tmp_path, launcher, "--stall-timeout", "3")
    assert r.returncode == 1, r.stdout[-2000:]
    att = run["attempts"]
    assert [a["category"] for a in att] == ["hang", "hang"]  # retried once, then stopped
    assert "hung twice" in run["stop_reason"]
    for a in att:
        h = a["hang"]
        assert 3 <= h["quiet_s"] <= 3 + 3, h  # within the stall timeout plus a few seconds
        assert a["duration_s"] < 3 + 0.6 + 10 and a["steps"]["end"] == 3
        text = Path(h["evidence"]).read_text()
        assert "## processes" in text and "launcher.py" in text and "step 3" in text  # tree and log tail
    assert wall < 60
    assert "Hang:" in r.stdout and "saving evidence" in r.stdout


def test_a_busy_silent_launcher_is_warm_up_not_a_hang(tmp_path):
    launcher = standin(tmp_path, """
        record(1)
        t = time.monotonic()
        while time.monotonic() - t < 6:   # tokenising / compiling: CPU busy, nothing printed
            sum(i * i for i in range(10000))
        for n in (2, 3):
            record(n)
        """)
    r, run, _ = run_train(tmp_path, launcher, "--stall-timeout", "2")
    assert r.returncode == 0, r.stdout[-2000:]
    assert run["outcome"] == "succeeded" and run["attempts"][0]["hang"] is None
    assert "busy: compiling or tuning?" in r.stdout


def test_watchdog_off_and_hard_cap():
    assert judge_stall(10_000, 0, 0.0, False).state == "ok"            # --stall-timeout 0
    assert judge_stall(5, 3, 0.0, None).state == "hang"                 # idle, GPUs unknown
    assert judge_stall(5, 3, 0.0, True).state == "busy"                 # a GPU busy: not idle
    assert judge_stall(5, 3, 1.5, False).state == "busy"
    assert judge_stall(12, 3, 1.5, False).state == "busy_cap"           # 4x the timeout, still no progress
    p = Progress(now=0.0)
    for t in (10.0, 20.0, 260.0):
        p.tick(now=t, step=True)
    assert stall_limit(None, p) == 2400.0                               # 10x the slowest step (240 s) > 30 min
    assert stall_limit(None, Progress(now=0.0)) == 1800.0
    p = Progress(now=0.0)
    p.line("Running tokenizer on dataset:  45%|####5     | 450/1000 [00:03<00:04]\r", now=5.0)
    p.line("Running tokenizer on dataset:  45%|####5     | 450/1000 [00:03<00:04]\r", now=9.0)
    assert p.last == 5.0 and p.last_step_at is None                     # a bar that moved; the same count is not


def test_throughput_median_estimate_and_drop():
    m = Throughput(samples_per_step=8, tokens_per_sample=512)
    t = 0.0
    for n in range(1, 12):
        t += 1.0 if n < 8 else 3.0                                       # from step 8 on, 3x slower
        m.feed({"current_steps": n}, t, 0.0)
    s = m.summary()
    assert s["events"] and s["events"][0]["drop_pct"] >= 60 and s["warmup_s"] == 1.0
    assert s["tokens_source"].startswith("estimated") and s["median_samples_per_s"] > 0
    real = Throughput()
    for n, tok in ((1, 900.0), (2, 1000.0), (3, 1100.0)):
        real.feed({"current_steps": n, "throughput": tok}, float(n), 0.0)
    assert real.summary()["median_tokens_per_s"] == 1000.0 and real.summary()["tokens_source"] == "trainer_log"


FAULT = """
    tree = pathlib.Path(os.environ["ROCM_DOCTOR_SYSROOT"])
    if os.environ.get("ROCR_VISIBLE_DEVICES"):      # the retry, moved off the faulty GPU
        for n in (1, 2):
            record(n)
        sys.exit(0)
    record(1)
    ras = list(tree.glob("sys/devices/*/*/{bdf}/ras/umc_err_count"))
    for f in ras:
        f.write_text("ue: 1\\nce: 0\\n")
    tools = json.loads((tree / "tools.json").read_text())
    tools["dmesg"]["stdout"] += "[ {t}] amdgpu {bdf}: amdgpu: GPU reset begin!\\n"
    (tree / "tools.json").write_text(json.dumps(tools))
    print("HW Exception by GPU node-{node} (Agent handle: 0x55d0c8a0) reason :GPU Hang", flush=True)
    sys.exit(134)
"""


def tree_copy(name: str, tmp: Path) -> Path:
    dest = tmp / "tree"
    shutil.copytree(FIXTURES / "hosts" / name, dest, symlinks=True)
    return dest


def test_a_gpu_fault_is_not_retried_on_that_gpu(tmp_path):
    tree = tree_copy("mi300x-healthy", tmp_path)
    launcher = standin(tmp_path, FAULT.format(bdf="0000:46:00.0", node=3, t="8999.500000"))
    env = {"ROCM_DOCTOR_SYSROOT": str(tree)}
    r, run, _ = run_train(tmp_path, launcher, env=env)
    assert r.returncode == 1
    att = run["attempts"]
    assert len(att) == 1 and att[0]["category"] == "gpu_hw_fault"   # never retried unchanged on that GPU
    bad = att[0]["gpu_fault"]["gpus"]
    assert [(g["index"], g["bdf"]) for g in bad] == [(2, "0000:46:00.0")]
    why = " ".join(bad[0]["why"])
    assert "uncorrectable errors 0 -> 1" in why and "reset" in why and "GPU node-3" in why
    assert "--apply exclude-gpu" in run["stop_reason"] and "ROCR_VISIBLE_DEVICES=0,1,3,4,5,6,7" in run["stop_reason"]


def test_a_gpu_fault_with_exclude_allowed_moves_the_run(tmp_path):
    tree = tree_copy("mi300x-healthy", tmp_path)
    launcher = standin(tmp_path, FAULT.format(bdf="0000:46:00.0", node=3, t="8999.500000"))
    r, run, _ = run_train(tmp_path, launcher, "--apply", "exclude-gpu", env={"ROCM_DOCTOR_SYSROOT": str(tree)})
    assert r.returncode == 0, r.stdout[-2000:]
    att = run["attempts"]
    assert att[1]["playbooks"] == ["exclude-gpu"] and att[1]["env"]["ROCR_VISIBLE_DEVICES"] == "0,1,3,4,5,6,7"


def test_a_gpu_fault_without_a_spare_stops_naming_the_gpu(tmp_path):
    tree = tree_copy("strix-halo-apu", tmp_path)
    launcher = standin(tmp_path, FAULT.format(bdf="0000:01:00.0", node=1, t="8999.500000"))
    r, run, _ = run_train(tmp_path, launcher, "--apply", "exclude-gpu", env={"ROCM_DOCTOR_SYSROOT": str(tree)})
    assert r.returncode == 1 and len(run["attempts"]) == 1
    assert "GPU 0 (0000:01:00.0)" in run["stop_reason"] and "no spare GPU" in run["stop_reason"]


def test_train_bad_input(tmp_path):
    cfg = config(tmp_path)
    for args in (["--stall-timeout", "-1"], ["--apply", "no-such-playbook"]):
        r = run_cli("train", str(cfg), "--run-dir", str(tmp_path / "r"), *args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr


# The kernel's own records of an OOM kill: mm/oom_kill.c prints "Out of memory: Killed process <pid> (<comm>)
# total-vm:...kB, anon-rss:...kB, ..." (Linux >= 5.0; "Memory cgroup out of memory: ..." for a cgroup's limit), and
# a cgroup v2 memory.events file counts "oom_kill" (Documentation/admin-guide/cgroup-v2.rst).
OOM_DMESG = ("[ 9001.123456] Out of memory: Killed process 4242 (python) total-vm:98765432kB, anon-rss:90123456kB, "
             "file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:180000kB oom_score_adj:0")
EVENTS = "low 0\nhigh 0\nmax 12\noom {n}\noom_kill {n}\noom_group_kill 0\n"

OOM_KILL = """
    import signal
    record(1)
    if os.environ.get("OOM_VIA") == "cgroup":
        ev = pathlib.Path(os.environ["ROCM_DOCTOR_SYSROOT"]) / "sys/fs/cgroup/user.slice/job-7/memory.events"
        ev.write_text(ev.read_text().replace("oom_kill 0", "oom_kill 1"))
    else:
        tree = pathlib.Path(os.environ["ROCM_DOCTOR_SYSROOT"])
        tools = json.loads((tree / "tools.json").read_text())
        tools["dmesg"]["stdout"] += os.environ["OOM_LINE"] + "\\n"
        (tree / "tools.json").write_text(json.dumps(tools))
    os.kill(os.getpid(), signal.SIGKILL)
"""


def oom_tree(tmp: Path) -> Path:
    tree = tree_copy("mi300x-healthy", tmp)
    (tree / "proc" / "self" / "cgroup").write_text("0::/user.slice/job-7\n")
    ev = tree / "sys" / "fs" / "cgroup" / "user.slice" / "job-7"
    ev.mkdir(parents=True)
    (ev / "memory.events").write_text(EVENTS.format(n=0))
    return tree


def test_oom_kill_records_parse():
    from doctor.train import faults

    assert faults.oom_kill_count(EVENTS.format(n=3)) == 3
    assert faults.oom_kill_count("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n") == 2  # cgroup v1 oom_control
    assert faults.oom_kill_count("low 0\nhigh 0\n") is None and faults.oom_kill_count(None) is None
    m = faults.OOM_LINE.search(OOM_DMESG)
    assert m and m.groups() == ("4242", "python")
    assert faults.OOM_LINE.search("Memory cgroup out of memory: Killed process 77 (pt_main_thread) total-vm:1kB")
    assert faults.OOM_LINE.search("Out of memory: Kill process 4242 (python) score 912 or sacrifice child")  # < 5.0
    before = {"cgroup": "/sys/fs/cgroup/x/memory.events", "oom_kill": 0, "dmesg": []}
    assert faults.host_oom(before, {**before, "oom_kill": 0}) == ""
    assert "oom_kill 0 -> 1" in faults.host_oom(before, {**before, "oom_kill": 1})
    assert "python (pid 4242)" in faults.host_oom(before, {**before, "dmesg": [OOM_DMESG]})
    assert faults.host_oom({**before, "dmesg": [OOM_DMESG]}, {**before, "dmesg": [OOM_DMESG]}) == ""  # an old kill
    other = OOM_DMESG.replace("(python)", "(postgres)")  # another job's process on a shared host
    assert faults.host_oom(before, {**before, "dmesg": [other]}) == ""


def test_a_kill_the_oom_killer_recorded_stops_instead_of_retrying(tmp_path):
    """A SIGKILL with the cgroup's oom_kill counter rising during the attempt: host RAM ran out, and the same
    run would be killed again, so train stops saying so (a kill with no such record is retried once)."""
    tree = oom_tree(tmp_path)
    r, run, _ = run_train(tmp_path, standin(tmp_path, OOM_KILL), env={"ROCM_DOCTOR_SYSROOT": str(tree),
                                                                      "OOM_VIA": "cgroup"})
    assert r.returncode == 1
    att = run["attempts"]
    assert len(att) == 1 and att[0]["category"] == "killed_by_signal" and att[0]["signal"] == "SIGKILL"
    assert "oom_kill 0 -> 1" in att[0]["host_oom"] and "job-7" in att[0]["host_oom"]
    assert "host RAM ran out" in run["stop_reason"] and "fewer ranks" in run["stop_reason"]


def test_a_kill_the_kernel_log_names_stops_too(tmp_path):
    tree = oom_tree(tmp_path)
    r, run, _ = run_train(tmp_path, standin(tmp_path, OOM_KILL), env={"ROCM_DOCTOR_SYSROOT": str(tree),
                                                                      "OOM_VIA": "dmesg", "OOM_LINE": OOM_DMESG})
    assert r.returncode == 1 and len(run["attempts"]) == 1
    assert "python (pid 4242)" in run["attempts"][0]["host_oom"] and "host RAM ran out" in run["stop_reason"]


def test_a_kill_without_an_oom_record_is_retried_once(tmp_path):
    tree = oom_tree(tmp_path)
    launcher = standin(tmp_path, """
        import signal
        record(1)
        os.kill(os.getpid(), signal.SIGKILL)
        """)
    r, run, _ = run_train(tmp_path, launcher, env={"ROCM_DOCTOR_SYSROOT": str(tree)})
    att = run["attempts"]
    assert len(att) == 2 and all(a["category"] == "killed_by_signal" and a["host_oom"] == "" for a in att)
    assert "killed by a signal twice" in run["stop_reason"]
