"""The project's imports point one way: no module cycles, and the core never imports the layers above it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"icebergsync": ROOT / "icebergsync", "spark_app": ROOT / "spark_app",
            "icebergsync_operator": ROOT / "operator" / "icebergsync_operator"}
# Which project packages each package may import; the core (icebergsync) is imported by both others.
ALLOWED_LAYERS = {"icebergsync": {"icebergsync"}, "spark_app": {"icebergsync", "spark_app"},
                  "icebergsync_operator": {"icebergsync", "icebergsync_operator"}}


def project_modules() -> dict[str, Path]:
    """Every module of the project packages by dotted name (a package by its own name)."""
    modules = {}
    for package, directory in PACKAGES.items():
        for path in directory.rglob("*.py"):
            parts = [package, *path.relative_to(directory).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imported_names(path: Path, module: str, is_package: bool) -> set[str]:
    """Dotted names a module imports anywhere in its body (inside functions too)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports (``from pkg import mod`` counts as importing ``pkg.mod``)."""
    modules = project_modules()
    graph = {}
    for module, path in modules.items():
        targets = {name for name in imported_names(path, module, path.name == "__init__.py") if name in modules}
        graph[module] = targets - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_the_project() -> None:
    graph = import_graph()
    assert {"icebergsync.spec", "spark_app.job", "icebergsync_operator.reconcile"} <= graph.keys()
    assert "icebergsync.spec" in graph["icebergsync.schema"]
    assert "icebergsync.errors" in graph["icebergsync.spec"]


def test_cycle_detection_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_each_package_imports_only_its_own_layer_and_below() -> None:
    violations = [
        f"{module} imports {target}"
        for module, targets in import_graph().items()
        for target in sorted(targets)
        if target.split(".")[0] not in ALLOWED_LAYERS[module.split(".")[0]]
    ]
    assert violations == []
