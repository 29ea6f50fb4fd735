"""One redaction engine: what counts as a secret, and how it is masked.

:class:`Redactor` is the full preset ``report`` applies to a whole bundle: secrets (values of secret-named
environment variables wherever they occur, token shapes, ``key=value`` secrets) plus this host's names,
non-loopback IP addresses and the user name. :func:`mask` is its narrow preset for what ``fix`` and
``train`` print of the user's config (diffs, change lists, recorded commands): secrets only, and YAML lines
whose key names a secret. The files they write keep the real values, as training needs them.
"""

from __future__ import annotations

import getpass
import ipaddress
import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# name segments that mark a secret: HF_TOKEN, WANDB_API_KEY, hf_hub_token, use_auth_token, DB_PASSWORD ...
# (segment-based so that `tokenizers` or `KEYBOARD` are not secrets)
SECRET_NAME = re.compile(r"(?:^|[_.-])(?:TOKEN|SECRET|PASSWORD|PASSWD|PASS|APIKEY|API_KEY|ACCESS_KEY|PRIVATE_KEY|"
                         r"CREDENTIALS?|AUTH|KEY)(?:$|[_.-])", re.IGNORECASE)

TOKEN_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("token", re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")),                              # Hugging Face
    ("token", re.compile(r"\b(?:sk|rk|pk)-[A-Za-z0-9_-]{20,}\b")),                  # OpenAI-style
    ("token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b")),                       # GitHub
    ("token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{30,}\b")),
    ("token", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),                        # AWS access key id
    ("token", re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b")),  # JWT
    ("token", re.compile(r"(?<![0-9a-f])[0-9a-f]{40}(?![0-9a-f])")),                 # W&B keys, 40 hex
]
# KEY=value / "api_key": "value" / token: value / Bearer value: keep the key, drop the value
KEY_VALUE = re.compile(r"(?i)((?:token|secret|passwd|password|api_key|apikey|access_key|bearer)[\"']?\s*[=:\s]\s*[\"']?)"
                       r"(?!<redacted)([^\s\"',}<]{8,})")
SECRET_LINE = re.compile(r"^([-+ ]?\s*[\"']?)([\w.-]+)([\"']?\s*:\s*)(\S.*)$")


def _tokens(text: str, count: Any = None) -> str:
    """Token shapes and ``key=value`` secrets → placeholders (the part both presets share)."""
    for _, rx in TOKEN_PATTERNS:
        text, n = rx.subn("<redacted:token>", text)
        if count:
            count("token-shaped strings", n)
    text, n = KEY_VALUE.subn(lambda m: m.group(1) + "<redacted:token>", text)
    if count:
        count("token-shaped strings", n)
    return text


def mask(text: str) -> str:
    """The narrow preset: token-shaped strings, ``key=value`` secrets and YAML lines whose key names a
    secret, masked; nothing else touched (paths and host names in a config diff are the user's own)."""
    text = _tokens(text)

    def line(m: re.Match[str]) -> str:
        return m.group(0) if not SECRET_NAME.search(m.group(2)) else m.group(1) + m.group(2) + m.group(3) + "<redacted>"

    return "\n".join(SECRET_LINE.sub(line, ln) for ln in text.split("\n"))


def shown(key: str, value: Any, fmt: Any = str) -> str:
    """A config value as a change list shows it: never the value of a secret-named key."""
    return "<redacted>" if SECRET_NAME.search(str(key)) else fmt(value)


COMMON_USERS = {"root", "user", "ubuntu", "admin", "test", "runner", "jovyan", "nobody", "guest", "default"}
IPV4 = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?![\d.])")
IPV6 = re.compile(r"(?<![\w:])([0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7})(?![\w:])")  # validated by ipaddress


@dataclass
class Redactor:
    """The full preset: secrets, host names, IPs and the user name replaced; counts what it replaced."""

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
        self.hosts = sorted({h for h in names if h and h not in ("localhost", "127.0.0.1")}, key=len, reverse=True)
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
        s = _tokens(s, self._count)
        for h in self.hosts:
            s, n = host_pattern(h).subn("<host>", s)
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


def host_pattern(host: str) -> re.Pattern[str]:
    """Where ``host`` stands as a host name. A long name (5+ characters) anywhere it is a whole word; a short
    one (``vm``, ``gpu``, ``n1``), which also spells ordinary words, only where it is used as a host: before a
    domain or a port (``vm.internal:29500``, ``vm:22``), after ``@`` (``alice@vm``) or ``://`` (a URL), with
    the domain labels after it redacted too."""
    h = re.escape(host)
    domain = r"(?:\.[A-Za-z][\w-]*)*"
    if len(host) >= 5:
        return re.compile(rf"(?<![\w.-]){h}{domain}(?![\w-])")
    not_a_file = r"(?!\.(?:py|pyc|log|txt|json|jsonl|ya?ml|sh|so|md|cfg|ini|csv|pth?|bin|safetensors|gz|tar|zip|out|err)\b)"
    return re.compile(rf"(?<![\w.-]){h}{not_a_file}(?:\.[A-Za-z][\w-]*)+(?![\w-])|(?<![\w.-]){h}(?=:\d)"
                      rf"|(?<=@){h}{domain}(?![\w-])|(?<=://){h}{domain}(?![\w-])")


def _keep_ip(s: str) -> bool:
    try:
        ip = ipaddress.ip_address(s)
    except ValueError:
        return True  # a version number like 1.2.3.4 that is not an address: keep
    return ip.is_loopback or ip.is_unspecified or str(ip).startswith("255.")
