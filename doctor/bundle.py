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

from doctor.classify import classify_text, read_log, read_log_tail
from doctor.config import InputError
from doctor.preflight import environment_summary, run_check, skipped_areas
from doctor.redact import SECRET_NAME, Redactor
from doctor.stack import PACKAGES, package_versions, relevant_env

SCHEMA = "rocm-doctor.report/1"
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
    checked = run_check(config, quick=quick, python=python, timeout=timeout)
    ctx, findings = checked.ctx, checked.findings
    env_summary = environment_summary(ctx)
    sysf = ctx.system()
    env_summary.setdefault("rocm_version", sysf.get("rocm_version"))
    env_summary.setdefault("gpus", sysf.get("gpus", []))
    env_summary["packages"] = package_versions(ctx.python)
    env_vars = redactor.env_vars(relevant_env(ctx.env, SECRET_NAME))
    files: dict[str, str] = {}
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
           "skipped": skipped_areas(ctx)}
    rep = redactor.obj(rep)
    rep["environment"]["env"] = env_vars
    files = {k: redactor.text(v) for k, v in files.items()}
    rep["redaction"] = {"enabled": redactor.enabled, "counts": dict(redactor.counts)}
    return rep, files


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
