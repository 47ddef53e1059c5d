"""Re-pin the dependency set (``make constraints``): runtime pins and development pins, apart.

``constraints.txt`` holds what an installation of the provider runs with (its dependencies and the
``train`` extra's, transitively), in the style of Airflow's own constraints files: a deployment
installs ``airflow-provider-primus`` with it and gets no linter or test tool. ``constraints-dev.txt``
holds the rest of this virtualenv (pytest, ruff, mypy and what they pull in). Run with the
virtualenv's python after changing pyproject.toml's dependencies.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
SELF = "airflow-provider-primus"
RUNTIME_EXTRAS = ("train", "kerberos")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure(root: str, extras: tuple[str, ...]) -> set[str]:
    """The installed distributions ``root[extras]`` needs, transitively (markers evaluated here)."""
    visited: set[tuple[str, tuple[str, ...]]] = set()
    names: set[str] = set()
    todo: list[tuple[str, tuple[str, ...]]] = [(root, extras)]
    while todo:
        name, wanted = todo.pop()
        if (canonical(name), wanted) in visited:
            continue
        visited.add((canonical(name), wanted))
        names.add(canonical(name))
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (*wanted, "")):
                todo.append((req.name, tuple(sorted(req.extras))))
    names.discard(canonical(root))
    return names


def main() -> int:
    pins = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if canonical(name) in (canonical(SELF), "pip", "setuptools", "wheel"):
            continue
        pins[canonical(name)] = f"{name}=={dist.version}"
    runtime = closure(SELF, RUNTIME_EXTRAS)
    header = "# {what}. Regenerate with `make constraints` (scripts/constraints.py).\n"
    run_lines = sorted((p for k, p in pins.items() if k in runtime), key=str.lower)
    dev_lines = sorted((p for k, p in pins.items() if k not in runtime), key=str.lower)
    (ROOT / "constraints.txt").write_text(
        header.format(what="Runtime pins: the provider, its dependencies and the train and kerberos extras'")
        + "\n".join(run_lines)
        + "\n"
    )
    (ROOT / "constraints-dev.txt").write_text(
        header.format(what="Development pins: test, lint and type-check tools, over constraints.txt")
        + "\n".join(dev_lines)
        + "\n"
    )
    print(
        f"constraints.txt: {len(run_lines)} pins; constraints-dev.txt: {len(dev_lines)} pins", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
