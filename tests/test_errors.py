"""The error bases: every error the product defines is a ``PrimusError``; the terminal marker is found
on the error or on what it was raised from."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from pathlib import Path

import pytest

from airflow_provider_primus.errors import PrimusError, TerminalError, is_terminal, one_line
from airflow_provider_primus.resources.backend import BackendUnusableError

PACKAGE = Path(__file__).resolve().parents[1] / "airflow_provider_primus"


def _module_names() -> list[str]:
    """Every module of the package, namespace packages (``master/``) included, which ``pkgutil``
    would not walk into."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _defined_exceptions() -> list[type[BaseException]]:
    found = []
    for name in _module_names():
        module = importlib.import_module(name)
        found += [
            obj
            for obj in vars(module).values()
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name
        ]
    return found


def test_every_error_the_package_defines_is_a_primus_error() -> None:
    """One ``except PrimusError`` catches whatever the product raises on purpose; builtin bases stay
    beside it where callers catch those (``SpecError`` is a ``ValueError``)."""
    defined = _defined_exceptions()
    assert len(defined) > 50  # the walk reached the whole package
    assert sorted(f"{e.__module__}.{e.__qualname__}" for e in defined if not issubclass(e, PrimusError)) == []


def test_builtin_bases_are_kept_beside_the_product_base() -> None:
    from airflow_provider_primus.contracts.errors import SpecError, SpecIssue
    from airflow_provider_primus.data.objectstore import MissingObjectError, ObjectStoreError
    from airflow_provider_primus.master.store import JobNotFound

    missing = MissingObjectError(2, "No such object", "s3://bucket/key")
    assert isinstance(missing, FileNotFoundError) and isinstance(missing, PrimusError)
    assert (missing.errno, missing.filename) == (2, "s3://bucket/key")  # OSError's own constructor
    assert issubclass(ObjectStoreError, OSError)
    assert isinstance(SpecError([SpecIssue("spec.sources", "required")]), ValueError)
    assert isinstance(JobNotFound("job"), KeyError)


def test_terminal_is_found_through_the_cause() -> None:
    class Lost(TerminalError):
        pass

    assert is_terminal(Lost("gone"))
    assert not is_terminal(PrimusError("try again"))
    assert not is_terminal(OSError(28, "No space left on device"))
    try:
        try:
            raise Lost("offset 5 is gone")
        except Lost as exc:
            raise RuntimeError("ingest failed") from exc
    except RuntimeError as wrapped:
        assert is_terminal(wrapped)


def test_a_backend_that_cannot_go_on_is_terminal() -> None:
    from airflow_provider_primus.yarn.application import (
        YarnApplicationEndedError,
        YarnApplicationError,
        YarnUnsupportedError,
    )

    assert is_terminal(BackendUnusableError("the YARN application ended"))
    for error in (YarnApplicationEndedError("ended (KILLED)"), YarnUnsupportedError("no gssapi")):
        assert is_terminal(error) and isinstance(error, YarnApplicationError)
        with pytest.raises(BackendUnusableError):  # the name backends raise still catches them
            raise error


def test_the_error_bases_import_nothing_of_the_package() -> None:
    """Every layer imports ``errors``, the contracts included: it must not import any of them back."""
    tree = ast.parse((PACKAGE / "errors.py").read_text(encoding="utf-8"))
    imported = [
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    ]
    # The standard library only (as its docstring says): nothing of the package, nothing installed.
    assert [name for name in imported if name.split(".")[0] not in sys.stdlib_module_names] == []


def test_one_line_names_the_type_and_keeps_to_one_line() -> None:
    assert one_line(OSError("No space\n left on device")) == "OSError: No space left on device"
    assert len(one_line(ValueError("x" * 2000), limit=100)) == 100
    assert one_line(KeyError()) == "KeyError: (no message)"
