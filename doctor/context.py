"""What a run examines: the config (if any), the environment, and the probe results.

Checks read from a :class:`Context`; they never read ``os.environ`` or the file system around the
config directly, so tests can hand them a prepared context. Data that several checks share (the
machine's facts, LLaMA-Factory's schema, the model's config.json) is reached through memoised accessors,
never through the order the checks run in.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from doctor import health, hostinfo, lfschema, machine
from doctor.config import load_config, to_plain
from doctor.host import Host, Recorder
from doctor.worker import ProbeResult


@dataclass
class Options:
    config: str | None = None
    quick: bool = False
    only: set[str] | None = None
    verbose: bool = False
    python: str | None = None
    timeout: float = 120.0
    record: bool = False           # keep what the host reads returned (``report`` stores them)
    replay: bool = False           # a recorded machine (``check --replay``): no probe runs in this Python
    no_cache: bool = False         # neither read nor write kept probe results (``check --no-cache``)
    warm_start: bool = True        # may leave a warm stack worker behind (``train`` uses one, starts none)


@dataclass
class Context:
    options: Options = field(default_factory=Options)
    config: dict[str, Any] | None = None       # plain dict of the YAML
    config_rt: Any = None                      # ruamel round-trip mapping (for patches)
    config_text: str = ""
    config_path: Path | None = None
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    cwd: Path = field(default_factory=Path.cwd)
    probes: dict[str, ProbeResult] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)  # parent-side facts shared between checks

    @classmethod
    def build(cls, options: Options, env: dict[str, str] | None = None) -> Context:
        ctx = cls(options=options)
        if env is not None:
            ctx.env = env
        if options.config:
            rt, text = load_config(options.config)
            ctx.config_rt, ctx.config_text = rt, text
            ctx.config = to_plain(rt)
            ctx.config_path = Path(options.config).resolve()
        return ctx

    @property
    def python(self) -> str:
        return self.options.python or sys.executable

    def cfg(self, key: str, default: Any = None) -> Any:
        return (self.config or {}).get(key, default)

    def resolve_path(self, value: str) -> Path:
        return resolve_path(value, self.cwd)

    def model_dir(self) -> Path | None:
        m = self.cfg("model_name_or_path")
        if not isinstance(m, str):
            return None
        p = self.resolve_path(m)
        return p if p.is_dir() else None

    def config_inputs(self) -> list[str]:
        """Every file or directory the config names (model, adapters, dataset_dir, DeepSpeed JSON, output_dir
        whether it exists or not): what LLaMA-Factory's parser may read, so a kept verdict is reused only while
        they are unchanged."""
        out: list[str] = []
        for key, value in (self.config or {}).items():
            for v in value if isinstance(value, list) else [value]:
                if not isinstance(v, str) or not v or len(v) > 4096 or "\n" in v:
                    continue
                p = self.resolve_path(v)
                try:
                    if key in ("output_dir", "dataset_dir", "resume_from_checkpoint") or p.exists():
                        out.append(str(p))
                except (OSError, ValueError):
                    continue
        if self.cfg("dataset") and not self.cfg("dataset_dir"):
            out.append(str(self.resolve_path("data")))  # LLaMA-Factory's default dataset_dir
        return sorted(set(out))

    def model_config(self) -> dict[str, Any] | None:
        """The model's config.json (plain JSON: no torch needed), when the model is local."""
        if "model_config" not in self.facts:
            self.facts["model_config"] = read_model_config(self.cfg("model_name_or_path"), self.cwd)
        return self.facts["model_config"]

    def host(self) -> Host:
        """The machine under examination: live, or a recorded tree (``ROCM_DOCTOR_SYSROOT``, ``--replay``)."""
        if "host" not in self.facts:
            self.facts["host"] = Host.from_env(self.env, Recorder() if self.options.record else None)
        return self.facts["host"]

    def system(self) -> dict[str, Any]:
        """The machine's facts (GPU inventory, ROCm version, device files), read once per run; tests may
        pre-seed ``facts["system"]`` with recorded data. ``--quick`` skips the amdsmi library (it needs
        an extra interpreter)."""
        if "system" not in self.facts:
            self.facts["system"] = machine.gather(self.env, use_library=not self.options.quick, host=self.host())
        return self.facts["system"]

    def used_gpus(self) -> list[dict[str, Any]]:
        """The inventory entries of the GPUs this run will use (the visible-device variables applied)."""
        from doctor.gpuinfo import visible_gpus

        return visible_gpus(self.env, self.system().get("gpus") or [])

    def platform(self) -> dict[str, Any]:
        """Host platform facts (kernel command line, /dev/shm, limits, PCIe links, ACS, container)."""
        if "platform" not in self.facts:
            bdfs = [g.get("bdf") for g in self.used_gpus() if g.get("vendor") == "amd" and g.get("bdf")]
            self.facts["platform"] = hostinfo.gather(self.host(), bdfs).to_dict()
        return self.facts["platform"]

    def health(self) -> dict[str, Any]:
        """GPU health (ECC/RAS, recent amdgpu events, partitions, firmware) of every AMD GPU found."""
        if "health" not in self.facts:
            self.facts["health"] = health.gather(self.host(), self.system().get("gpus") or [],
                                                 use_amd_smi=not self.options.quick).to_dict()
        return self.facts["health"]

    def lf_schema(self) -> tuple[dict[str, Any] | None, str]:
        """LLaMA-Factory's schema (fields, dependency pins, templates) and where it came from: the live
        one when the ``lf_schema`` probe ran (it also refreshes the user cache), else the cached or bundled
        one for the installed version."""
        if "lf_schema" not in self.facts:
            res = self.probes.get("lf_schema")
            if res is not None and res.ok:
                schema, src = res.data, f"llamafactory {res.data.get('llamafactory')}"
                lfschema.save_cache(schema)
            else:
                libs = self.probes.get("libs")
                version = (libs.data or {}).get("llamafactory") if libs is not None and libs.ok else \
                    lfschema.installed_version(self.python)
                schema, src = lfschema.load(version)
            self.facts["lf_schema"] = (schema, src)
        return self.facts["lf_schema"]


def resolve_path(value: str, cwd: Path) -> Path:
    """LLaMA-Factory resolves relative paths from the working directory, not the config's dir."""
    p = Path(os.path.expanduser(value))
    return p if p.is_absolute() else cwd / p


def read_model_config(model: Any, cwd: Path) -> dict[str, Any] | None:
    """``model_name_or_path``'s config.json when it is a local directory (a Hub id gives None)."""
    if not isinstance(model, str):
        return None
    f = resolve_path(model, cwd) / "config.json"
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
