"""The layering rule, enforced: modules import downwards only, the import graph has no cycle, and the code
that runs inside the examined Python imports nothing of rocm-doctor. Every import counts, including the
ones inside functions (import-linter's ``layers`` contract, as a small AST walk with no dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("doctor", "checks", "playbooks")

# highest first. A set: members may import each other (no cycle); a tuple: independent siblings.
LAYERS: list[set[str] | tuple[str, ...]] = [
    {"doctor.cli", "doctor.__main__"},
    {"doctor.commands"},
    ("doctor.train", "doctor.distributed", "doctor.bundle"),
    {"doctor.preflight", "doctor.runner", "doctor.codes", "doctor.render"},
    ("checks", "playbooks"),
    {"doctor.registry", "doctor.findings", "doctor.context", "doctor.worker"},
    {"doctor.config", "doctor.redact", "doctor.checkpoints", "doctor.machine", "doctor.gpuinfo", "doctor.lfschema",
     "doctor.classify", "doctor.procs", "doctor.stack", "doctor.cache", "doctor.warm", "doctor.archs", "doctor.logparse",
     "doctor.term", "doctor.host", "doctor.hostinfo", "doctor.health", "doctor.slurm", "doctor"},
]
WORKER_SIDE = ("doctor.probes", "doctor._worker_main", "doctor._warm_main", "doctor.demo_model")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """Project modules ``path`` imports, wherever the import statement is."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        else:
            continue
        for n in names:
            while n and n not in modules:
                n = n.rpartition(".")[0]
            if n:
                out.add(n)
    return out


def _member(mod: str, entry: str) -> bool:
    return mod == entry or mod.startswith(entry + ".")


def layer_of(mod: str) -> tuple[int, str]:
    """(layer index, the layer entry it belongs to), by the longest matching entry."""
    best = None
    for i, layer in enumerate(LAYERS):
        for entry in layer:
            if _member(mod, entry) and (best is None or len(entry) > len(best[1])):
                best = (i, entry)
    assert best is not None, f"{mod} is in no layer: add it to LAYERS in tests/test_layers.py"
    return best


def graph() -> dict[str, set[str]]:
    mods = project_modules()
    return {m: imports_of(p, set(mods)) - {m} for m, p in mods.items()}


def test_every_module_has_a_layer():
    for m in project_modules():
        if not any(_member(m, w) for w in WORKER_SIDE):
            layer_of(m)


def test_imports_go_downwards_only():
    bad = []
    for mod, deps in graph().items():
        if any(_member(mod, w) for w in WORKER_SIDE):
            continue
        li, entry = layer_of(mod)
        for dep in deps:
            if any(_member(dep, w) for w in WORKER_SIDE):
                continue  # named by string in a ProbeSpec, or a script's own import
            lj, dep_entry = layer_of(dep)
            if lj < li:
                bad.append(f"{mod} (layer {li}) imports {dep} (layer {lj}, above it)")
            elif lj == li and isinstance(LAYERS[li], tuple) and dep_entry != entry:
                bad.append(f"{mod} imports its independent sibling {dep}")
    assert not bad, "\n".join(sorted(bad))


def test_no_import_cycle():
    g = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(g.get(m, ())):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)


def test_worker_side_code_imports_nothing_of_the_project():
    """Probes run in the examined Python, where rocm-doctor's own dependencies may be missing: worker-side code
    imports only worker-side code (the warm server runs the worker's main)."""
    for mod, deps in graph().items():
        if any(_member(mod, w) for w in WORKER_SIDE):
            outside = {d for d in deps if not any(_member(d, w) for w in WORKER_SIDE)}
            assert not outside, f"{mod} imports {sorted(outside)}"


def test_check_packages_have_no_import_side_effects():
    """``checks`` and ``doctor.probes`` import nothing at package level; the runner names the modules."""
    for pkg in ("checks", "doctor/probes"):
        tree = ast.parse((ROOT / pkg / "__init__.py").read_text())
        assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))], pkg


def test_the_rule_can_fail(tmp_path):
    """The walk sees a function-level import of an upper layer (the kind that hid the old cycles)."""
    p = tmp_path / "x.py"
    p.write_text("def f():\n    from doctor.cli import main\n    return main\n")
    assert imports_of(p, set(project_modules())) == {"doctor.cli"}
    assert layer_of("doctor.cli")[0] < layer_of("checks.torch")[0]
