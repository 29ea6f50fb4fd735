"""``rocm-doctor report``: one shareable, redacted bundle for a support engineer.

The bundle (a ``.tar.gz`` or a directory) holds ``report.md`` (read first), ``report.json``
(schema ``rocm-doctor.report/1``: check findings, environment, explain of each log), the config
and the log tails. Everything that goes in passes one :class:`Redactor`: the values of secret-named
environment variables wherever they appear, token-shaped strings (Hugging Face, W&B, OpenAI-style,
GitHub, AWS, JWT, ``Bearer``), secret-named config keys, this host's names and non-loopback IP
addresses, and the user name in paths. What was redacted is reported as counts, never values.
"""

from __future__ import annotations

import argparse
import getpass
import io
import ipaddress
import json
import os
import re
import socket
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor.config import InputError
from doctor.secrets import KEY_VALUE, SECRET_NAME, TOKEN_PATTERNS

SCHEMA = "rocm-doctor.report/1"
LOG_TAIL_BYTES = 256 * 1024
PACKAGES = ("torch", "torchvision", "torchaudio", "transformers", "peft", "trl", "accelerate", "datasets",
            "llamafactory", "deepspeed", "bitsandbytes", "flash_attn", "amdsmi", "tokenizers", "triton",
            "pytorch-triton-rocm")
ENV_PREFIXES = ("HIP_", "ROCR_", "ROCM_", "HSA_", "CUDA_", "NCCL_", "RCCL_", "TORCH_", "PYTORCH_", "AMD_",
                "MIOPEN_", "HF_", "TRANSFORMERS_", "WANDB_", "FORCE_TORCHRUN", "NNODES", "NODE_RANK",
                "NPROC_PER_NODE", "MASTER_ADDR", "MASTER_PORT", "OPTIM_TORCH", "LLAMAFACTORY_", "DISABLE_VERSION_CHECK",
                "ALLOW_EXTRA_ARGS", "USE_V1", "GPU_", "OMP_NUM_THREADS", "FLASH_ATTENTION_", "BNB_", "DS_")
COMMON_USERS = {"root", "user", "ubuntu", "admin", "test", "runner", "jovyan", "nobody", "guest", "default"}
IPV4 = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?![\d.])")
IPV6 = re.compile(r"(?<![\w:])([0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7})(?![\w:])")  # validated by ipaddress


@dataclass
class Redactor:
    """Replaces secrets, host names, IPs and the user name; counts what it replaced."""

    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    enabled: bool = True
    counts: dict[str, int] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.secrets = sorted({v for k, v in self.env.items() if SECRET_NAME.search(k) and len(v) >= 6},
                              key=len, reverse=True)
        names = {socket.gethostname()}
        try:
            names.add(socket.getfqdn())
        except OSError:
            pass
        for k in ("HOSTNAME", "MASTER_ADDR", "SLURM_NODELIST", "SLURMD_NODENAME"):
            if self.env.get(k):
                names.add(self.env[k])
        self.hosts = sorted({h for h in names if h and len(h) >= 3 and h not in ("localhost", "127.0.0.1")},
                            key=len, reverse=True)
        users = {self.env.get("USER", ""), self.env.get("LOGNAME", "")}
        try:
            users.add(getpass.getuser())
        except Exception:
            pass
        users.add(Path.home().name)
        self.users = sorted({u for u in users if u and len(u) >= 4 and u not in COMMON_USERS},
                            key=len, reverse=True)

    def _count(self, kind: str, n: int) -> None:
        if n:
            self.counts[kind] = self.counts.get(kind, 0) + n

    def text(self, s: str) -> str:
        if not self.enabled or not s:
            return s
        for v in self.secrets:
            n = s.count(v)
            if n:
                s = s.replace(v, "<redacted:secret>")
                self._count("secret values from the environment", n)
        for _, rx in TOKEN_PATTERNS:
            s, n = rx.subn("<redacted:token>", s)
            self._count("token-shaped strings", n)
        s, n = KEY_VALUE.subn(lambda m: m.group(1) + "<redacted:token>", s)
        self._count("token-shaped strings", n)
        for h in self.hosts:
            s, n = re.subn(rf"(?<![\w.-]){re.escape(h)}(?![\w-])", "<host>", s)
            self._count("host names", n)

        def ip(m: re.Match[str]) -> str:
            if _keep_ip(m.group(1)):
                return m.group(1)
            self._count("IP addresses", 1)
            return "<ip>"

        s = IPV4.sub(ip, s)
        s = IPV6.sub(ip, s)
        for u in self.users:
            s, n = re.subn(rf"(?<=[/\\]){re.escape(u)}(?=[/\\]|\b)", "<user>", s)
            self._count("user names in paths", n)
            s, n = re.subn(rf"(?<![\w.-]){re.escape(u)}(?![\w-])", "<user>", s)  # alice@host, alice's
            self._count("user names", n)
        return s

    def obj(self, o: Any) -> Any:
        """Redact every string of a JSON-able object."""
        if isinstance(o, dict):
            return {k: self.obj(v) for k, v in o.items()}
        if isinstance(o, list):
            return [self.obj(v) for v in o]
        return self.text(o) if isinstance(o, str) else o

    def env_vars(self, env: dict[str, str]) -> dict[str, str]:
        """Environment variables: a secret-named variable loses its whole value."""
        out = {}
        for k, v in env.items():
            if self.enabled and SECRET_NAME.search(k) and v:
                self._count("secret-named variables", 1)
                out[k] = "<redacted:secret>"
            else:
                out[k] = self.text(v)
        return out


def _keep_ip(s: str) -> bool:
    try:
        ip = ipaddress.ip_address(s)
    except ValueError:
        return True  # a version number like 1.2.3.4 that is not an address: keep
    return ip.is_loopback or ip.is_unspecified or str(ip).startswith("255.")


def package_versions(python: str) -> dict[str, str | None]:
    """Versions from metadata in the examined Python; nothing imported."""
    code = ("import importlib.metadata as m, json\nout = {}\n"
            f"for n in {list(PACKAGES)!r}:\n"
            "    try: out[n] = m.version(n)\n"
            "    except Exception: out[n] = None\n"
            "print(json.dumps(out))")
    try:
        p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=30)
        return json.loads(p.stdout) if p.returncode == 0 else {}
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return {}


def relevant_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES) or SECRET_NAME.search(k)}


def read_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    from doctor.classify import read_log_tail

    return read_log_tail(str(path), limit)


def build(config: str | None, logs: list[str], *, quick: bool, redactor: Redactor, python: str | None = None,
          timeout: float = 120.0) -> tuple[dict[str, Any], dict[str, str]]:
    """(report.json content, extra files by name). Raises InputError for unreadable inputs."""
    from doctor import system
    from doctor.classify import classify_text
    from doctor.cli import environment_summary, run_check
    from doctor.explain import load as load_log

    for lg in logs:  # fail fast on bad input, before any probe runs
        if not os.path.isfile(lg):
            raise InputError(f"log not found: {lg}" if not os.path.exists(lg) else f"log is not a file: {lg}")
    ctx, findings = run_check(config, quick=quick, python=python, timeout=timeout)
    env_summary = environment_summary(ctx)
    sysf = ctx.facts.get("system") or system.facts(ctx)
    env_summary.setdefault("rocm_version", sysf.get("rocm_version"))
    env_summary.setdefault("gpus", sysf.get("gpus", []))
    env_summary["packages"] = package_versions(ctx.python)
    env_vars = redactor.env_vars(relevant_env(ctx.env))
    files: dict[str, str] = {}
    if ctx.config_path:
        files["config/" + ctx.config_path.name] = ctx.config_text
    explained = []
    for lg in logs:
        text = load_log(lg)
        c = classify_text(text)
        name = f"logs/{len(explained) + 1:02d}-{Path(lg).name}.tail.log"
        files[name] = read_tail(Path(lg))
        explained.append({"log": lg, "file": name, **c.to_dict()})
    rep = {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "rocm_doctor": _version(), "config": str(ctx.config_path) if ctx.config_path else None,
           "findings": [f.to_dict() for f in findings], "environment": env_summary, "logs": explained}
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
    out += ["## Summary", "", f"- {len(errors)} error(s), {len(warns)} warning(s) from `rocm-doctor check`"
            + (f" on `{Path(rep['config']).name}`" if rep.get("config") else "") + "."]
    for lg in rep["logs"]:
        out.append(f"- log `{Path(lg['log']).name}`: **{lg['category']}**"
                   + (f" → playbook `{lg['playbook']}`" if lg.get("playbook") else ""))
    out += ["", "## Environment", "", "| component | version |", "|---|---|",
            f"| python | {env.get('python')} |", f"| platform | {env.get('platform')} |",
            f"| ROCm (system) | {env.get('rocm_version')} |",
            f"| torch HIP / CUDA | {t.get('hip')} / {t.get('cuda')} |"]
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


def cmd_report(args: argparse.Namespace) -> int:
    from doctor.cli import _console

    red = Redactor(enabled=not args.no_redact)
    rep, files = build(args.config, args.log or [], quick=args.quick, redactor=red, python=args.python,
                       timeout=args.timeout)
    dest = Path(args.output or f"rocm-doctor-report-{time.strftime('%Y%m%d-%H%M%S')}.tar.gz")
    try:
        out = write_bundle(dest, rep, files)
    except OSError as e:
        raise InputError(f"cannot write {dest}: {e.strerror or e}") from None
    con = _console(stderr=args.json)
    con.print(f"Wrote [bold]{out}[/] (report.md, report.json, {len(files)} file(s)).")
    counts = rep["redaction"]["counts"]
    if red.enabled:
        con.print("Redacted: " + (", ".join(f"{n} {k}" for k, n in counts.items()) or "nothing found")
                  + ". Review report.md before sharing; `--no-redact` turns this off.")
    else:
        con.print("[yellow]Not redacted[/] (--no-redact): it may contain tokens, host names and user names.")
    if args.json:
        print(json.dumps({"schema": SCHEMA, "output": str(out), "redaction": rep["redaction"]}))
    return 0


def register(sub: Any) -> None:
    r = sub.add_parser("report", help="a redacted bundle (check + environment + config + explained logs) "
                       "for a support engineer")
    r.add_argument("config", nargs="?", help="LLaMA-Factory training YAML")
    r.add_argument("--log", action="append", metavar="FILE", help="a failure log to explain and include (repeatable)")
    r.add_argument("-o", "--output", help="bundle path: *.tar.gz (default) or a directory")
    r.add_argument("--no-redact", action="store_true", help="keep secrets, host names, IPs and user names")
    r.add_argument("--quick", action="store_true", help="no torch import (config lint from the cached schema)")
    r.add_argument("--python", help="the Python of the environment to examine (default: this one)")
    r.add_argument("--timeout", type=float, default=120.0, help="seconds per probe (default 120)")
    r.add_argument("--json", action="store_true", help="print {schema, output, redaction} as JSON on stdout")
    r.set_defaults(func=cmd_report)

