"""The project's imports point one way: no module cycles, the core never imports the layers above it, every
package's floors import only the floors below them, and no two folders import each other, directly or around a
circle."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"icebergsync": ROOT / "icebergsync", "spark_app": ROOT / "spark_app",
            "icebergsync_operator": ROOT / "operator" / "icebergsync_operator"}
# Which project packages each package may import; the core (icebergsync) is imported by both others.
ALLOWED_LAYERS = {"icebergsync": {"icebergsync"}, "spark_app": {"icebergsync", "spark_app"},
                  "icebergsync_operator": {"icebergsync", "icebergsync_operator"}}
# Each package's floors, bottom first: the folders and modules at its top level, each importing only its own
# floor and those below (docs/dataplane.md says what lives on each of spark_app's floors).
FLOORS = {
    "spark_app": ["faults", "iceberg", "decoding", "sources", "staging", "commit", "upkeep", "job",
                  "worker_daemon", "cli", "main"],
    # the core: words and values first (errors, units, column types, metric names, the protocol, the fault
    # policy), then the spec and what reads it, catalog access, table status, and the generators and CLI on top
    "icebergsync": ["errors", "resource_status", "units", "types", "metrics", "protocol", "transient",
                    "table_routing", "source_settings", "storage", "spec", "sink_state", "spark_conf",
                    "field_descriptions", "cel_rules", "schema", "catalog", "tables", "structural_schema",
                    "launch_check", "crd", "cli", "catalogs", "docs_reference", "generate"],
    # the operator: its small parts (metrics, kube access, bounded readers, settings), rendering and policy, the
    # catalog readers, the context, then reconcile, launch and lifecycle, the kopf handlers and main
    "icebergsync_operator": ["catalog_memory", "endpoints", "metrics", "constants", "secret_refs", "status_update",
                             "deadline", "liveness", "s3_read", "applications", "kube", "bounded_http", "cleanup",
                             "catalog_access", "catalog_scope", "settings", "read_bounds", "render",
                             "catalog_reads", "policy", "peering", "rest_read", "metadata_file", "context",
                             "sql_read", "table", "catalogs", "reconcile", "launch", "lifecycle", "handlers", "main"],
}


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


def top_level(package: str, module: str) -> str | None:
    """The folder or module at ``package``'s top level that ``module`` lives in (None: not inside it)."""
    return module[len(package) + 1:].split(".")[0] if module.startswith(package + ".") else None


def folder_graph(graph: dict[str, set[str]], package: str) -> dict[str, set[str]]:
    """The imports between the folders and modules at ``package``'s top level (within one: not counted)."""
    folders: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = top_level(package, module)
        if source is None:
            continue
        folders.setdefault(source, set()).update(
            target for target in map(functools.partial(top_level, package), targets)
            if target is not None and target != source)
    return folders


def packages(graph: dict[str, set[str]]) -> set[str]:
    """Every package (a module some other module lives in), at every depth."""
    return {module.rsplit(".", 1)[0] for module in graph if "." in module}


def floor_violations(graph: dict[str, set[str]], package: str, floors: list[str]) -> list[str]:
    """The imports of ``package``'s modules that reach a floor above their own, and its undeclared floors."""
    folders = folder_graph(graph, package)
    undeclared = [f"{package}.{name} is on no floor" for name in sorted(folders.keys() - set(floors))]
    return undeclared + [
        f"{package}.{source} imports {package}.{target}, a floor above it"
        for source in sorted(folders.keys() & set(floors))
        for target in sorted(folders[source])
        if target in floors and floors.index(target) > floors.index(source)
    ]


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


def test_floor_checks_find_an_import_upwards_and_a_folder_circle() -> None:
    graph = {"p.low.a": {"p.high.b"}, "p.high.b": set(), "p.high.c": {"p.low.a"}, "p.loose": set()}
    assert floor_violations(graph, "p", ["low", "high"]) == ["p.loose is on no floor",
                                                              "p.low imports p.high, a floor above it"]
    assert cycles(folder_graph(graph, "p")) == [["high", "low"]]
    assert cycles(graph) == []  # no module cycle: only the folders import each other


def test_the_graph_sees_the_project() -> None:
    graph = import_graph()
    assert {"icebergsync.spec", "spark_app.job.loop", "icebergsync_operator.reconcile"} <= graph.keys()
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


def test_each_floor_imports_only_the_floors_below_it() -> None:
    graph = import_graph()
    assert [violation for package, floors in FLOORS.items()
            for violation in floor_violations(graph, package, floors)] == []


def test_no_two_folders_import_each_other() -> None:
    graph = import_graph()
    circles = {package: cycles(folder_graph(graph, package)) for package in sorted(packages(graph))}
    assert {package: found for package, found in circles.items() if found} == {}
