"""The package's shape holds: no import cycle between its modules (function-level imports count: a
lazy import that dodges a cycle is still a cycle), every package imports only the layers its row of
``LAYERS`` names (docs/development.md has the same table), ``embedded/`` is a leaf, no layer below
the backends imports one, and nothing outside ``cli/`` imports ``cli/``. The checker is tested too: it
fails on violations planted in a synthetic graph and in a copy of the package tree."""

from __future__ import annotations

import ast
import functools
import shutil
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "airflow_provider_primus"
NAME = PACKAGE.name


def _modules(package: Path = PACKAGE) -> dict[str, Path]:
    modules = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its body. ``package``: a tree named like
    the package (a planted copy in the tests below)."""
    modules = _modules(package)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        package_name = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    levels = package_name.split(".")
                    anchor = levels[: len(levels) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                names = [base, *(f"{base}.{a.name}" for a in node.names)]
            else:
                continue
            graph[module].update(n for n in names if n in modules and n != module)
    return graph


@functools.cache
def _real_graph() -> dict[str, frozenset[str]]:
    return {m: frozenset(d) for m, d in import_graph().items()}


def real_graph() -> dict[str, set[str]]:
    """Today's tree, parsed once per session (a fresh copy each call: tests plant into it)."""
    return {m: set(d) for m, d in _real_graph().items()}


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
    assert cycles(real_graph()) == []


def test_only_cli_imports_cli() -> None:
    cli = f"{NAME}.cli"
    offenders = {
        module: sorted(d for d in deps if d == cli or d.startswith(cli + "."))
        for module, deps in real_graph().items()
        if not (module == cli or module.startswith(cli + "."))
    }
    assert {m: d for m, d in offenders.items() if d} == {}


def test_the_cycle_finder_finds_a_lazy_cycle() -> None:
    """The check itself can fail: two modules importing each other, one of them inside a function."""
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert cycles(graph) == [["a", "b"]]


# The modules every layer may use: stdlib-only helpers with no package imports but errors.py, and the
# package root (its version).
BASE = {"", "errors", "paths", "process", "credentials", "tls", "lookup", "imports"}
CONTRACTS = {"contracts"}
# Kept importable for one release (a DeprecationWarning); nothing in the package may import it.
DEPRECATED = {"spec"}
# The core, bottom up: runs without Airflow (the CLI and the tests use it alone).
BOTTOM = {"hadoop", "buildcache"}
ENGINE = {"resources", "data", "training", "gen", "master"}
BACKENDS = {"kubernetes", "yarn", "backends"}
CORE = BASE | CONTRACTS | BOTTOM | ENGINE | BACKENDS
AIRFLOW_LAYER = {"hooks", "operators", "sensors", "triggers", "links", "plugins"}
EVERYTHING = CORE | AIRFLOW_LAYER | {"diagnostics", "embedded", "bench", "cli", "get_provider_info"}

# package -> the packages (besides itself) it may import; a package missing here fails the test.
LAYERS: dict[str, set[str]] = {
    "": set(),
    "_affinity_exec": set(),
    "_orphan_guard": set(),
    "errors": set(),
    "paths": set(),
    "lookup": set(),
    "credentials": set(),
    "tls": {"errors"},
    "process": {"errors"},
    "imports": {"errors"},
    "contracts": {"errors"},
    "spec": {"", "contracts"},
    "hadoop": {"errors"},
    "buildcache": {"errors", "paths"},
    "resources": BASE | CONTRACTS,
    "data": BASE | CONTRACTS | {"resources", "hadoop"},
    "training": BASE | CONTRACTS | {"resources", "data", "hadoop"},
    "gen": BASE | CONTRACTS | {"data"},
    "master": BASE | CONTRACTS | {"resources", "data", "training"},
    "kubernetes": BASE | CONTRACTS | {"resources", "data", "master"},
    "yarn": BASE | CONTRACTS | {"resources", "data", "master", "hadoop", "buildcache"},
    "backends": BASE | CONTRACTS | ENGINE | BOTTOM | {"kubernetes", "yarn"},
    "diagnostics": BASE | {"buildcache"},
    "get_provider_info": {""},
    **{layer: CORE | AIRFLOW_LAYER | {"diagnostics"} for layer in AIRFLOW_LAYER},
    "embedded": EVERYTHING - {"cli", "bench"},
    "bench": EVERYTHING - {"cli"},
    "cli": EVERYTHING,
}
# Modules no layer below the backends may import: a backend kind (the local one lives in resources/
# beside the executor contract that every layer shares).
BACKEND_MODULES = {f"{NAME}.{b}" for b in BACKENDS} | {f"{NAME}.resources.local"}
BELOW_BACKENDS = CONTRACTS | BOTTOM | {"resources", "data", "training", "gen"}
LEAF = "embedded"
LEAF_IMPORTERS = {"cli", "bench", LEAF}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def layer_violations(
    graph: dict[str, set[str]], layers: dict[str, set[str]] = LAYERS
) -> dict[str, list[str]]:
    """Module -> the imports its package's row does not allow; a package without a row is itself a
    violation (every package is placed in a layer on purpose)."""
    found: dict[str, list[str]] = {}
    for module, deps in graph.items():
        own = _package(module)
        if own not in layers:
            found[module] = [f"(package {own!r} has no row in LAYERS)"]
            continue
        wrong = sorted(d for d in deps if _package(d) != own and _package(d) not in layers[own])
        if wrong:
            found[module] = wrong
    return found


def leaf_violations(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Importers of ``embedded/`` (the demo's and the tests' real servers) outside cli/ and bench/."""
    leaf = f"{NAME}.{LEAF}"
    found = {
        module: sorted(d for d in deps if _within(d, leaf))
        for module, deps in graph.items()
        if _package(module) not in LEAF_IMPORTERS
    }
    return {m: d for m, d in found.items() if d}


def backend_violations(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Imports of a backend kind from the layers below the backends, or of one backend by another."""
    found: dict[str, list[str]] = {}
    for module, deps in graph.items():
        own = _package(module)
        if own in BELOW_BACKENDS:
            wrong = [d for d in deps if any(_within(d, b) for b in BACKEND_MODULES)]
        elif own in BACKENDS - {"backends"}:
            # One backend never reaches into another (what they share lives below them).
            wrong = [d for d in deps if _package(d) in BACKENDS and _package(d) != own]
        else:
            continue
        if wrong:
            found[module] = sorted(wrong)
    return found


def deprecated_violations(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Imports of a deprecated alias (``spec`` for ``contracts``) from inside the package."""
    found = {
        module: sorted(d for d in deps if _package(d) in DEPRECATED)
        for module, deps in graph.items()
        if _package(module) not in DEPRECATED
    }
    return {m: d for m, d in found.items() if d}


def all_violations(graph: dict[str, set[str]]) -> dict[str, dict[str, list[str]]]:
    checks = {
        "layers": layer_violations,
        "leaf": leaf_violations,
        "backends": backend_violations,
        "deprecated": deprecated_violations,
    }
    found = {name: check(graph) for name, check in checks.items()}
    if cycles(graph):
        found["cycles"] = {" <-> ".join(c): c for c in cycles(graph)}
    return {name: v for name, v in found.items() if v}


def _third_party(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_every_package_imports_only_its_layers() -> None:
    assert layer_violations(real_graph()) == {}


def test_embedded_is_a_leaf() -> None:
    """Product code never imports the real servers the demo and the tests start."""
    assert leaf_violations(real_graph()) == {}


def test_nothing_imports_a_deprecated_alias() -> None:
    assert deprecated_violations(real_graph()) == {}


def test_no_layer_below_the_backends_imports_one() -> None:
    assert backend_violations(real_graph()) == {}


def test_every_package_has_a_row() -> None:
    packages = {_package(m) for m in real_graph()}
    assert packages - LAYERS.keys() == set()


def test_the_core_imports_neither_airflow_nor_the_layers_above_it() -> None:
    graph, modules = real_graph(), _modules()
    above = AIRFLOW_LAYER | {"cli", "bench", "embedded", "diagnostics"}
    wrong = {
        module: sorted({_package(d) for d in deps} & above)
        for module, deps in graph.items()
        if _package(module) in CORE and {_package(d) for d in deps} & above
    }
    assert wrong == {}
    airflow = sorted(m for m, p in modules.items() if _package(m) in CORE and "airflow" in _third_party(p))
    assert airflow == []


def test_the_contracts_are_pure_data() -> None:
    """contracts/ imports only contracts/ (and errors.py, the base of every error): no I/O, no service."""
    graph = real_graph()
    wrong = {
        m: sorted(d for d in deps if _package(d) not in {"contracts", "errors"})
        for m, deps in graph.items()
        if _package(m) == "contracts"
    }
    assert {m: d for m, d in wrong.items() if d} == {}


# The checker itself can fail: each rule on a synthetic graph, then on files planted in a copy of
# the package tree (so the ast walk, relative and function-level imports included, is exercised too).
P = NAME


@pytest.mark.parametrize(
    ("planted", "rule"),
    [
        ({f"{P}.data.reader": {f"{P}.embedded.kafka.broker"}}, "leaf"),
        ({f"{P}.operators.doctor": {f"{P}.embedded.kafka.distribution"}}, "leaf"),
        ({f"{P}.data.sources.files": {f"{P}.yarn.config"}}, "backends"),
        ({f"{P}.training.runtime": {f"{P}.resources.local"}}, "backends"),
        ({f"{P}.yarn.submission": {f"{P}.kubernetes.manifests"}}, "backends"),
        # The door sits above the backend kinds: none of them, nor the master, reaches up to it.
        ({f"{P}.kubernetes.store": {f"{P}.backends.base"}}, "backends"),
        ({f"{P}.resources.autoscaler": {f"{P}.backends"}}, "backends"),
        ({f"{P}.master.jobs": {f"{P}.backends.local"}}, "layers"),
        # ... and below the Airflow layer and the CLI, with the real servers out of its reach.
        ({f"{P}.backends.local": {f"{P}.hooks.primus"}}, "layers"),
        ({f"{P}.backends.kubernetes": {f"{P}.embedded.kube.cluster"}}, "leaf"),
        ({f"{P}.hadoop.config": {f"{P}.yarn.build"}}, "layers"),
        ({f"{P}.contracts.job": {f"{P}.data.model"}}, "layers"),
        ({f"{P}.data.model": {f"{P}.spec.job"}}, "deprecated"),
        ({f"{P}.newpackage.thing": set()}, "layers"),
        ({f"{P}.data.a": {f"{P}.data.b"}, f"{P}.data.b": {f"{P}.data.a"}}, "cycles"),
    ],
)
def test_the_checker_fails_on_a_planted_violation(planted: dict[str, set[str]], rule: str) -> None:
    graph = real_graph()
    for module, deps in planted.items():
        graph.setdefault(module, set()).update(deps)
        for dep in deps:
            graph.setdefault(dep, set())
    found = all_violations(graph)
    assert rule in found
    assert set(planted) & set(found[rule]) or rule == "cycles"


def _planted_tree(tmp_path: Path, files: dict[str, str]) -> Path:
    copy = tmp_path / NAME

    def not_python(directory: str, names: list[str]) -> set[str]:
        return {n for n in names if not n.endswith(".py") and not Path(directory, n).is_dir()}

    shutil.copytree(PACKAGE, copy, ignore=not_python)
    for relative, source in files.items():
        (copy / relative).write_text(source, encoding="utf-8")
    return copy


@pytest.mark.parametrize(
    ("relative", "source", "rule", "target"),
    [
        # A lazy import from the data layer of the real servers.
        ("data/planted.py", "def f():\n    from airflow_provider_primus.embedded import kafka\n", "leaf",
         f"{P}.embedded.kafka"),
        # A relative import of a backend from the Hadoop package.
        ("hadoop/planted.py", "from ..yarn import build\n", "layers", f"{P}.yarn.build"),
        # An operator reaching for the cluster whose binaries the doctor checks.
        ("operators/planted.py", "import airflow_provider_primus.embedded.kube.binaries\n", "leaf",
         f"{P}.embedded.kube.binaries"),
        # A backend class starting the embedded cluster, lazily.
        ("backends/planted.py", "def f():\n    from ..embedded.kube import cluster\n", "leaf",
         f"{P}.embedded.kube.cluster"),
        # A backend kind reaching up to the door that resolves it.
        ("yarn/planted.py", "from airflow_provider_primus.backends import base\n", "backends",
         f"{P}.backends.base"),
    ],
)  # fmt: skip
def test_the_checker_fails_on_a_planted_module(
    tmp_path: Path, relative: str, source: str, rule: str, target: str
) -> None:
    tree = _planted_tree(tmp_path, {relative: source})
    found = all_violations(import_graph(tree))[rule]
    module = f"{P}." + relative.removesuffix(".py").replace("/", ".")
    assert target in found[module]
    # Only the planted module is wrong: the copy of today's tree is clean.
    assert set(found) == {module}
