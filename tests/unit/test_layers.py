"""The runner's layers import one way, and no modules import each other in a circle.

Data flows spec -> plan -> Spark job -> files -> commit; so do the imports, from the CLI
down to the errors. A module may import from its own package or from a lower layer, never
from a peer package of its layer or from above. Read from the source, no JVM.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

RUNNER = Path(__file__).resolve().parents[2] / "runner"

# Lowest first. Peers share a layer and may not import each other.
LAYERS: list[tuple[str, ...]] = [
    ("runner", "runner.errors"),
    ("runner.faults", "runner.hudi", "runner.jvm.maven", "runner.user_code"),
    ("runner.spec",),
    ("runner.jvm.s3_connector",),
    ("runner.jvm.spark_connectors",),
    ("runner.jvm.java_cds", "runner.jvm.java_warmup"),
    (
        "runner.logs",
        "runner.jvm.session",
        "runner.progress",
        "runner.fields",
        "runner.jvm.worker_daemon",
        "runner.summary",
    ),
    ("runner.keygen", "runner.index"),
    ("runner.storage",),
    ("runner.delta",),
    ("runner.write", "runner.sources", "runner.catalog"),
    ("runner.actions",),
    ("runner.pipeline",),
    ("runner.observe",),
    ("runner.commands", "runner.k8s", "runner.table"),
    ("runner.cli",),
    ("runner.__main__", "runner.driver"),  # entry points
]


def _modules() -> dict[str, Path]:
    found = {}
    for path in RUNNER.rglob("*.py"):
        parts = path.relative_to(RUNNER.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _package(module: str) -> str:
    """The most specific entry of LAYERS that holds `module`."""
    best = ""
    for layer in LAYERS:
        for package in layer:
            if (module == package or module.startswith(package + ".")) and len(package) > len(best):
                best = package
    return best


def _rank(module: str) -> int:
    package = _package(module)
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def _imports(module: str) -> set[str]:
    """The runner modules `module` imports, anywhere in it (a lazy import is a dependency
    too); `from runner.x import y` counts as runner.x.y when y is a module."""
    tree = ast.parse(MODULES[module].read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("runner")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not node.module.startswith("runner"):
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in MODULES else node.module)
    return found - {module}


def test_every_module_has_a_layer():
    assert not [m for m in MODULES if not _package(m)]


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_go_down_the_layers(module):
    mine = _package(module)
    wrong = []
    for imported in sorted(_imports(module)):
        theirs = _package(imported)
        if theirs == mine or (imported.startswith(mine + ".") and mine != "runner"):
            continue
        if _rank(imported) >= _rank(module):
            wrong.append(f"{imported} ({theirs})")
    assert not wrong, f"{module} ({mine}) imports from its layer's peers or above: {wrong}"


def test_no_modules_import_each_other_in_a_circle():
    graph = {m: _imports(m) & set(MODULES) for m in MODULES}
    cycles = []
    state: dict[str, int] = {}  # 1 visiting, 2 done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, cycles
