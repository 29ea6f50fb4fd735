"""The engine of ``rocm-doctor report``: one shareable, redacted bundle for a support engineer.

The bundle (a ``.tar.gz`` or a directory) holds ``report.md`` (read first), ``report.json``
(schema ``rocm-doctor.report/1``: check findings, environment, explain of each log), the config
and the log tails. Everything that goes in passes one :class:`~doctor.redact.Redactor`. What was
redacted is reported as counts, never values.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from pathlib import Path
from typing import Any

from doctor import runner
from doctor.classify import classify_text, read_log, read_log_tail
from doctor.config import InputError
from doctor.preflight import environment_summary, run_check, skipped_areas
from doctor.redact import SECRET_NAME, Redactor
from doctor.stack import PACKAGES, package_versions, relevant_env

SCHEMA = "rocm-doctor.report/1"
HOST_AREAS = ("gpus", "platform", "health")  # what `check --replay` re-runs from the bundle's sysroot/
LOG_TAIL_BYTES = 256 * 1024


def read_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    return read_log_tail(str(path), limit)


def build(config: str | None, logs: list[str], *, quick: bool, redactor: Redactor, python: str | None = None,
          timeout: float = 120.0) -> tuple[dict[str, Any], dict[str, str]]:
    """(report.json content, extra files by name). Raises InputError for unreadable inputs."""
    for lg in logs:  # fail fast on bad input, before any probe runs
        if not os.path.isfile(lg):
            raise InputError(f"log not found: {lg}" if not os.path.exists(lg) else f"log is not a file: {lg}")
    texts = {lg: read_log(lg) for lg in logs}
    checked = run_check(config, quick=quick, python=python, timeout=timeout, record=True)
    ctx, findings = checked.ctx, checked.findings
    skipped = skipped_areas(ctx)
    if quick:  # the host areas import nothing: a bundle always carries them (and what --replay needs)
        extra = [c for c in runner.load_all()[0] if c.area in HOST_AREAS]
        findings = findings + runner.run(ctx, checks=extra)
        skipped = [a for a in skipped if a not in HOST_AREAS]
    host_files = host_extras(ctx)
    env_summary = environment_summary(ctx)
    sysf = ctx.system()
    env_summary.setdefault("rocm_version", sysf.get("rocm_version"))
    env_summary.setdefault("gpus", sysf.get("gpus", []))
    env_summary["packages"] = package_versions(ctx.python)
    env_vars = redactor.env_vars(relevant_env(ctx.env, SECRET_NAME))
    files: dict[str, str] = dict(host_files)
    files.update(sysroot_files(ctx))
    if ctx.config_path:
        files["config/" + ctx.config_path.name] = ctx.config_text
    explained = []
    for lg in logs:
        c = classify_text(texts[lg])
        name = f"logs/{len(explained) + 1:02d}-{Path(lg).name}.tail.log"
        files[name] = read_tail(Path(lg))
        explained.append({"log": lg, "file": name, **c.to_dict()})
    rep = {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "rocm_doctor": _version(), "config": str(ctx.config_path) if ctx.config_path else None,
           "findings": [f.to_dict() for f in findings], "environment": env_summary, "logs": explained,
           "skipped": skipped, "host_files": sorted(host_files),
           "replay": "rocm-doctor check --replay BUNDLE re-runs the gpus, platform and health checks on sysroot/"}
    rep = redactor.obj(rep)
    rep["environment"]["env"] = env_vars
    files = {k: redactor.text(v) for k, v in files.items()}
    rep["redaction"] = {"enabled": redactor.enabled, "counts": dict(redactor.counts)}
    return rep, files


# what support engineers ask for first, run through the recording host (so a replay sees them too)
HOST_TOOLS: dict[str, list[str]] = {
    "rocminfo.txt": ["rocminfo"],
    "amd-smi-static.json": ["amd-smi", "static", "--json"],
    "amd-smi-firmware.json": ["amd-smi", "firmware", "--json"],
    "amd-smi-metric.json": ["amd-smi", "metric", "--json"],
    "amd-smi-bad-pages.json": ["amd-smi", "bad-pages", "--json"],
    "uname-r.txt": ["uname", "-r"],
}
HOST_FILES = {"os-release.txt": "/etc/os-release", "cmdline.txt": "/proc/cmdline",
              "amdgpu-version.txt": "/sys/module/amdgpu/version"}
ROCMINFO_KEEP = 400  # lines: the agents' names, archs, marketing names and pools; not every ISA attribute
DMESG_TAIL = 300


def host_extras(ctx: Any) -> dict[str, str]:
    """``host/*``: rocminfo (trimmed), amd-smi static/firmware/metric/bad-pages, uname -r, /etc/os-release,
    /proc/cmdline, the amdgpu driver version, the amdgpu lines of dmesg (tail) and
    ``python -m torch.utils.collect_env`` of the examined Python. A tool that is missing or refuses is
    noted in ``host/missing.txt``, never an error."""
    host = ctx.host()
    out: dict[str, str] = {}
    missing: list[str] = []
    for name, cmd in HOST_TOOLS.items():
        if not host.which(cmd[0]):
            missing.append(f"{' '.join(cmd)}: not installed")
            continue
        r = host.run(cmd, timeout=30.0)
        if r.ok:
            text = r.stdout
            if name == "rocminfo.txt":
                text = "\n".join(trim_rocminfo(text.splitlines())) + "\n"
            out["host/" + name] = text
        else:
            missing.append(f"{' '.join(cmd)}: exit {r.rc}: {(r.stderr or r.stdout).strip()[-200:]}")
    for name, path in HOST_FILES.items():
        text = host.read(path)
        if text is not None:
            out["host/" + name] = text
    if host.which("dmesg"):
        r = host.run(["dmesg"])
        if r.ok and not r.denied:
            lines = [ln for ln in r.stdout.splitlines() if "amdgpu" in ln.lower() or "kfd" in ln.lower()]
            out["host/dmesg-amdgpu.txt"] = "\n".join(lines[-DMESG_TAIL:]) + "\n"
        else:
            missing.append("dmesg: not readable without privileges (sudo rocm-doctor report)")
    if not host.rooted:
        env_text = collect_env(ctx.python, ctx.env)
        if env_text:
            out["host/collect_env.txt"] = env_text
    if missing:
        out["host/missing.txt"] = "\n".join(missing) + "\n"
    return out


def trim_rocminfo(lines: list[str]) -> list[str]:
    """rocminfo without the per-ISA attribute blocks (hundreds of lines per agent): every agent's header,
    name, marketing name, node, device type, compute units and pool sizes stay."""
    out, skip = [], False
    for ln in lines:
        s = ln.strip()
        if s.startswith("ISA Info:"):
            skip = True
        elif s.startswith("*******") or s.startswith("Agent "):
            skip = False
        if not skip:
            out.append(ln)
    return out[:ROCMINFO_KEEP * 4]


def collect_env(python: str, env: dict[str, str], timeout: float = 60.0) -> str | None:
    """``python -m torch.utils.collect_env`` of the examined Python, in its own process (it imports torch)."""
    import subprocess

    try:
        p = subprocess.run([python, "-m", "torch.utils.collect_env"], capture_output=True, text=True,
                           timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"collect_env did not finish: {e}\n"
    return p.stdout if p.returncode == 0 else f"collect_env exited {p.returncode}:\n{p.stderr[-2000:]}"


def sysroot_files(ctx: Any) -> dict[str, str]:
    """``sysroot/``: every host file the checks read, how paths resolved and the tool outputs, so
    ``rocm-doctor check --replay BUNDLE`` re-runs the inventory, platform and health checks offline."""
    import tempfile

    from doctor.host import write_tree

    rec = ctx.host().recorder
    if rec is None:
        return {}
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as d:
        write_tree(Path(d), rec)
        for p in sorted(Path(d).rglob("*")):
            rel = p.relative_to(d).as_posix()
            if p.is_file():
                out["sysroot/" + rel] = p.read_text(encoding="utf-8", errors="replace")
            elif p.is_dir() and not any(p.iterdir()):
                out["sysroot/" + rel + "/.keep"] = ""
    return out


def _version() -> str:
    try:
        import importlib.metadata as md

        return md.version("rocm-doctor")
    except Exception:
        return "unknown"


def markdown(rep: dict[str, Any]) -> str:
    env = rep["environment"]
    pk = env.get("packages") or {}
    t = env.get("torch") or {}
    out = ["# rocm-doctor report", "", f"Created {rep['created']} by rocm-doctor {rep['rocm_doctor']}.", ""]
    errors = [f for f in rep["findings"] if f["severity"] == "error"]
    warns = [f for f in rep["findings"] if f["severity"] == "warning"]
    ran = f"{len(errors)} error(s), {len(warns)} warning(s) from `rocm-doctor check`" + (
        f" on `{Path(rep['config']).name}`" if rep.get("config") else "")
    out += ["## Summary", "", f"- {ran}."]
    if rep.get("skipped"):
        out.append(f"- **Not checked:** {', '.join(rep['skipped'])} (`--quick` or no config): these areas "
                   "found nothing because they did not run.")
    for lg in rep["logs"]:
        out.append(f"- log `{Path(lg['log']).name}`: **{lg['category']}**"
                   + (f" → playbook `{lg['playbook']}`" if lg.get("playbook") else ""))
    out += ["", "## Environment", "", "| component | version |", "|---|---|",
            f"| python | {env.get('python')} |", f"| platform | {env.get('platform')} |",
            f"| ROCm (system) | {env.get('rocm_version') or 'not found'} |",
            f"| torch HIP / CUDA | {t.get('hip')} / {t.get('cuda')} |" if t else
            "| torch build | not examined (`--quick`: torch was not imported) |"]
    for k in PACKAGES:
        if pk.get(k):
            out.append(f"| {k} | {pk[k]} |")
    gpus = env.get("gpus") or []
    if gpus:
        out += ["", "| GPU | name | arch | VRAM used / total (MiB) | driver | source |", "|---|---|---|---|---|---|"]
        for g in gpus:
            out.append(f"| {g.get('index')} | {g.get('name')} | {g.get('arch')} | {g.get('vram_used_mib')} / "
                       f"{g.get('vram_total_mib')} | {g.get('driver', '')} | {g.get('source')} |")
    else:
        out += ["", "No GPU found."]
    out += ["", "## Findings", ""]
    for f in sorted(rep["findings"], key=lambda f: ["error", "warning", "info", "ok"].index(f["severity"])):
        out.append(f"- **{f['id']}** [{f['severity']}] {f['title']}"
                   + (f" — playbook `{f['playbook']}`" if f.get("playbook") else ""))
    for lg in rep["logs"]:
        out += ["", f"## Log `{Path(lg['log']).name}` → {lg['category']}", "", lg["summary"], "", "```"]
        out += [e for e in lg["evidence"]] + ["```", f"Tail: `{lg['file']}`"]
    if rep.get("host_files"):
        out += ["", "## Host", "", "Tool outputs and files of the examined machine (`host/`): "
                + ", ".join(f"`{Path(f).name}`" for f in rep["host_files"]) + ".",
                "`sysroot/` holds every host file the checks read and each tool's output: "
                "`rocm-doctor check --replay BUNDLE` re-runs the inventory, platform and health checks offline."]
    env_vars = env.get("env") or {}
    if env_vars:
        out += ["", "## Environment variables", "", "```"] + [f"{k}={v}" for k, v in env_vars.items()] + ["```"]
    red = rep["redaction"]
    out += ["", "## Redaction", ""]
    if red["enabled"]:
        out.append("Redacted: " + (", ".join(f"{n} {k}" for k, n in red["counts"].items()) or "nothing found") + ".")
    else:
        out.append("**Not redacted** (`--no-redact`): review before sharing.")
    return "\n".join(out) + "\n"


def write_bundle(dest: Path, rep: dict[str, Any], files: dict[str, str]) -> Path:
    items = {"report.md": markdown(rep), "report.json": json.dumps(rep, indent=2, default=str), **files}
    name = dest.name
    if name.endswith((".tar.gz", ".tgz")):
        root = name[:-7] if name.endswith(".tar.gz") else name[:-4]
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        with tarfile.open(tmp, "w:gz") as tf:
            for rel, text in items.items():
                data = text.encode("utf-8")
                info = tarfile.TarInfo(f"{root}/{rel}")
                info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
                tf.addfile(info, io.BytesIO(data))
        tmp.replace(dest)
        return dest
    if dest.exists() and any(dest.iterdir()):
        raise InputError(f"{dest} exists and is not empty; choose a new -o path")
    for rel, text in items.items():
        p = dest / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return dest


def sysroot_of(path: str, tmp: str) -> Path:
    """The ``sysroot/`` of a report bundle (a directory, or a .tar.gz unpacked under ``tmp``). Raises
    InputError for anything else."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"bundle not found: {path}")
    if p.is_file():
        try:
            with tarfile.open(p, "r:*") as tf:
                members = [m for m in tf.getmembers() if (m.isfile() or m.isdir()) and "/sysroot/" in f"/{m.name}"
                           and not m.name.startswith("/") and ".." not in Path(m.name).parts]
                try:
                    tf.extractall(tmp, members=members, filter="data")
                except TypeError:  # a Python without extraction filters; the members are vetted above
                    tf.extractall(tmp, members=members)  # noqa: S202
        except (tarfile.TarError, OSError) as e:
            why = str(e).splitlines()[0].rstrip(":") if str(e) else type(e).__name__
            raise InputError(f"{path} is not a rocm-doctor report bundle ({why})") from None
        p = Path(tmp)
    hits = [d for d in [p / "sysroot", *p.glob("*/sysroot")] if d.is_dir()]
    if not hits:
        raise InputError(f"{path} has no sysroot/: it was not written by `rocm-doctor report` of this version")
    return hits[0]
