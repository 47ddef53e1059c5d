"""Python transform steps in BatchTransformer: run first, in order, on whole batches; their output
checked against the declared schema; a raise reported with the user's own frame."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_primus.contracts.schema import SourceSchema
from airflow_provider_primus.data.transforms import BatchTransformer
from airflow_provider_primus.data.user_transforms import (
    TransformFunctionError,
    TransformOutputError,
    UserTransformError,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "two_tower" / "src"
FUNCTIONS = "tests.data.transform_functions"
HOUR_MS = 3_600_000


@pytest.fixture(autouse=True)
def _example_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))


def python_step(function: str, **step: Any) -> dict[str, Any]:
    return {"type": "python", "function": function, **step}


def schema(*transforms: dict[str, Any], **kw: Any) -> SourceSchema:
    doc: dict[str, Any] = {
        "sparse": ["u"],
        "dense": ["p"],
        "label": {"column": "y"},
        "transforms": list(transforms),
    }
    doc.update(kw)
    return SourceSchema.model_validate(doc)


def raw(**extra: list[Any]) -> pa.RecordBatch:
    columns: dict[str, list[Any]] = {"u": [1, 2, 3], "p": [1.0, None, 3.0], "y": [1, 0, 1], **extra}
    return pa.RecordBatch.from_pydict(columns)


def test_the_example_function_derives_declared_features_from_raw_columns() -> None:
    transformer = BatchTransformer(
        schema(
            python_step(
                "two_tower.features:time_and_price",
                inputs=["ts", "price"],
                outputs=["hour_of_day", "log_price"],
            ),
            {"column": "hour_of_day", "hash_bucket": 24},
            sparse=["u", "hour_of_day"],
            dense=["log_price"],
        ),
        passthrough=["ts"],
    )
    # The reader fetches the raw columns: declared ones the function does not create, its inputs.
    assert transformer.input_columns() == ["u", "y", "ts", "price"]
    ts = [0, 5 * HOUR_MS + 1, 23 * HOUR_MS]
    batch = pa.RecordBatch.from_pydict({"u": [1, 2, 3], "y": [1, 0, 1], "ts": ts, "price": [0.0, 1.0, 9.0]})
    out = transformer(batch, "f.parquet")
    assert out.schema.names == ["u", "hour_of_day", "log_price", "label", "ts"]
    # hash_bucket ran on the function's output (hours 0, 5, 23), not on a raw column.
    unhashed = BatchTransformer(
        schema(
            python_step(
                "two_tower.features:time_and_price",
                inputs=["ts", "price"],
                outputs=["hour_of_day", "log_price"],
            ),
            sparse=["u", "hour_of_day"],
            dense=["log_price"],
        )
    )
    assert unhashed(batch).column("hour_of_day").to_pylist() == [0, 5, 23]
    assert len(set(out.column("hour_of_day").to_pylist())) == 3
    assert all(0 <= h < 24 for h in out.column("hour_of_day").to_pylist())
    logs = out.column("log_price").to_pylist()
    assert logs[0] == 0.0 and math.isclose(logs[2], math.log(10.0), rel_tol=1e-6)
    assert out.column("ts").to_pylist() == ts  # passthrough as read


def test_python_steps_run_first_in_order_with_their_options_then_the_column_steps() -> None:
    transformer = BatchTransformer(
        schema(
            {"column": "p", "fill": -1.0},  # listed first, runs after the python steps
            python_step(f"{FUNCTIONS}:scale", options={"factor": 10.0}),
            python_step(f"{FUNCTIONS}:scale", options={"factor": 0.5}),
        )
    )
    assert transformer(raw()).column("p").to_pylist() == [5.0, -1.0, 15.0]


def test_a_raise_names_the_function_the_input_and_the_users_frame() -> None:
    transformer = BatchTransformer(schema(python_step(f"{FUNCTIONS}:boom")))
    with pytest.raises(UserTransformError) as exc:
        transformer(raw(), "s3://bucket/day=1/part-0.parquet")
    assert str(exc.value).startswith(
        f"s3://bucket/day=1/part-0.parquet: transform {FUNCTIONS}:boom raised "
        "ValueError: cannot make features of 3 rows (at data/transform_functions.py:"
    )
    assert str(exc.value).endswith(" in boom)")
    assert exc.value.path == "s3://bucket/day=1/part-0.parquet"


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("drops_a_row", "transform {f}: returned 2 rows for 3: a transform keeps every row, in order"),
        ("drops_the_dense_column",
         "transform {f}: column 'p': declared column is not in the function's output (found: u, y)"),
        ("dense_as_timestamps",
         "transform {f}: column 'p': in the function's output: dense values must be numeric; found type "
         "timestamp[s]"),
        ("returns_a_dict", "transform {f}: returned dict, expected a pyarrow.RecordBatch"),
    ],
)  # fmt: skip
def test_output_that_breaks_the_schema_is_a_terminal_error_naming_function_and_column(
    function: str, message: str
) -> None:
    name = f"{FUNCTIONS}:{function}"
    transformer = BatchTransformer(schema(python_step(name)))
    with pytest.raises(TransformOutputError) as exc:
        transformer(raw(), "part-0.parquet")
    assert str(exc.value).startswith("part-0.parquet: " + message.format(f=name))


def test_the_output_is_checked_once_per_schema_not_per_batch() -> None:
    transformer = BatchTransformer(schema(python_step(f"{FUNCTIONS}:scale")))
    transformer(raw())
    checked = transformer._checked_output
    transformer(raw())
    assert transformer._checked_output is checked


@pytest.mark.parametrize(
    ("function", "message"),
    [
        ("acme.features:derive", "transform acme.features:derive: cannot import 'acme.features': "
         "ModuleNotFoundError: No module named 'acme'"),
        (f"{FUNCTIONS}:nope", f"transform {FUNCTIONS}:nope: '{FUNCTIONS}' has no attribute 'nope'"),
        (f"{FUNCTIONS}:NOT_CALLABLE", f"'{FUNCTIONS}:NOT_CALLABLE' is a int, not a callable"),
    ],
)  # fmt: skip
def test_a_function_that_does_not_import_fails_the_transformer_at_once(function: str, message: str) -> None:
    with pytest.raises(TransformFunctionError) as exc:
        BatchTransformer(schema(python_step(function)))
    assert message in str(exc.value)
