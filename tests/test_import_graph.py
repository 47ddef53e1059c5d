"""The package's shape holds: no import cycle between its modules (function-level imports count: a
lazy import that dodges a cycle is still a cycle), and nothing outside ``cli/`` imports ``cli/``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "airflow_provider_primus"
NAME = PACKAGE.name


def _modules() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its body."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                names = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            graph[module].update(n for n in names if n in modules and n != module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root, children_of_root in graph.items():
        if root in index:
            continue
        work = [(root, iter(sorted(children_of_root)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_only_cli_imports_cli() -> None:
    cli = f"{NAME}.cli"
    offenders = {
        module: sorted(d for d in deps if d == cli or d.startswith(cli + "."))
        for module, deps in import_graph().items()
        if not (module == cli or module.startswith(cli + "."))
    }
    assert {m: d for m, d in offenders.items() if d} == {}


def test_the_cycle_finder_finds_a_lazy_cycle() -> None:
    """The check itself can fail: two modules importing each other, one of them inside a function."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert cycles(graph) == [["a", "b"]]


# The core runs without Airflow (the CLI and the tests use it alone); the Airflow layer sits on top.
CORE = {
    "spec",
    "data",
    "training",
    "resources",
    "master",
    "kubernetes",
    "gen",
    "credentials",
    "process",
    "paths",
    "errors",
}
AIRFLOW_LAYER = {"hooks", "operators", "sensors", "triggers", "links", "plugins"}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _third_party(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_the_core_imports_neither_airflow_nor_the_layers_above_it() -> None:
    graph, modules = import_graph(), _modules()
    above = AIRFLOW_LAYER | {"cli", "bench", "embedded"}
    wrong = {
        module: sorted({_package(d) for d in deps} & above)
        for module, deps in graph.items()
        if _package(module) in CORE and {_package(d) for d in deps} & above
    }
    assert wrong == {}
    airflow = sorted(m for m, p in modules.items() if _package(m) in CORE and "airflow" in _third_party(p))
    assert airflow == []


def test_the_contracts_are_pure_data() -> None:
    """spec/ imports only spec/ and the error bases (``errors``, standard library only): no I/O layer,
    no service."""
    graph = import_graph()
    wrong = {
        m: sorted(d for d in deps if _package(d) not in {"spec", "errors"})
        for m, deps in graph.items()
        if _package(m) == "spec"
    }
    assert {m: d for m, d in wrong.items() if d} == {}
