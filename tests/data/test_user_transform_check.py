"""A data document's python transforms imported in a child process, in the executors' environment:
each one that does not import, or is not callable, reported under its field."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from airflow_provider_primus.data.user_transform_check import check_in_child

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "two_tower" / "src"
FIELD = "spec.sources[0].schema.transforms[{}].function"


def test_every_bad_function_is_named_by_its_field_and_a_good_one_passes(tmp_path: Path) -> None:
    found = check_in_child(
        [
            (FIELD.format(0), "two_tower.features:time_and_price"),
            (FIELD.format(1), "acme.features:derive"),
            (FIELD.format(2), "two_tower.features:nope"),
            (FIELD.format(3), "tests.data.transform_functions:NOT_CALLABLE"),
        ],
        paths=[str(EXAMPLE)],
    )
    assert found == [
        (FIELD.format(1), "cannot import 'acme.features': ModuleNotFoundError: No module named 'acme'"),
        (FIELD.format(2), "'two_tower.features' has no attribute 'nope'"),
        (FIELD.format(3), "'tests.data.transform_functions:NOT_CALLABLE' is a int, not a callable"),
    ]


def test_the_check_uses_the_given_paths_not_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not any(Path(p) == EXAMPLE for p in sys.path)
    [(field, reason)] = check_in_child([(FIELD.format(0), "two_tower.features:time_and_price")])
    assert field == FIELD.format(0)
    assert reason == "cannot import 'two_tower.features': ModuleNotFoundError: No module named 'two_tower'"


def test_a_module_that_exits_while_importing_is_reported_not_obeyed(tmp_path: Path) -> None:
    (tmp_path / "quits.py").write_text("import sys\nsys.exit(3)\n")
    [(field, reason)] = check_in_child([(FIELD.format(1), "quits:fn")], paths=[str(tmp_path)])
    assert field == FIELD.format(1)
    assert reason == "checking the transform functions ended without an answer: exit code 3"


def test_an_interpreter_that_does_not_start_is_reported() -> None:
    [(field, reason)] = check_in_child([(FIELD.format(0), "acme:fn")], python="/no/such/python")
    assert field == FIELD.format(0)
    assert reason.startswith("cannot start the interpreter '/no/such/python': ")
