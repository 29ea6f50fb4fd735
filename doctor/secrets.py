"""What counts as a secret, shared by ``report``'s redactor and everything else that prints config text.

``report`` redacts a whole bundle (plus host names, IPs and user names); ``fix`` and ``train`` show diffs
and change lists of the user's config on the terminal and in JSON/run.json, where a token must not
appear either: :func:`mask` and :func:`shown` serve them. The files they write keep the real values.
"""

from __future__ import annotations

import re
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


def mask(text: str) -> str:
    """Token-shaped strings, ``key=value`` secrets and YAML lines whose key names a secret, masked."""
    for _, rx in TOKEN_PATTERNS:
        text = rx.sub("<redacted:token>", text)
    text = KEY_VALUE.sub(lambda m: m.group(1) + "<redacted:token>", text)

    def line(m: re.Match[str]) -> str:
        return m.group(0) if not SECRET_NAME.search(m.group(2)) else m.group(1) + m.group(2) + m.group(3) + "<redacted>"

    return "\n".join(SECRET_LINE.sub(line, ln) for ln in text.split("\n"))


def shown(key: str, value: Any, fmt: Any = str) -> str:
    """A config value as a change list shows it: never the value of a secret-named key."""
    return "<redacted>" if SECRET_NAME.search(str(key)) else fmt(value)
