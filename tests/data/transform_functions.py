"""Python transform functions that break the contract, one way each, for the transforms' tests
(named as ``tests.data.transform_functions:<name>``)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

NOT_CALLABLE = 42


def scale(batch: pa.RecordBatch, *, column: str = "p", factor: float = 2.0) -> pa.RecordBatch:
    """``column`` times ``factor``, nulls kept (so a ``fill`` after it has work to do)."""
    index = batch.schema.get_field_index(column)
    return batch.set_column(index, column, pc.multiply(pc.cast(batch.column(column), pa.float64()), factor))


def boom(batch: pa.RecordBatch) -> pa.RecordBatch:
    raise ValueError(f"cannot make features of {batch.num_rows} rows")


def drops_a_row(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.slice(1)


def drops_the_dense_column(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.drop_columns(["p"])


def dense_as_timestamps(batch: pa.RecordBatch) -> pa.RecordBatch:
    index = batch.schema.get_field_index("p")
    return batch.set_column(index, "p", pc.cast(pc.cast(batch.column("p"), pa.int64()), pa.timestamp("s")))


def returns_a_dict(batch: pa.RecordBatch) -> dict[str, int]:
    return {"rows": batch.num_rows}


def refuses_negative_prices(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``price`` doubled; a batch holding a negative price raises (a row the function cannot use)."""
    price = pc.cast(batch.column("price"), pa.float64())
    negative = pc.less(price, 0.0)
    if pc.any(negative).as_py():
        ids = batch.column("row_id").filter(negative).to_pylist() if "row_id" in batch.schema.names else []
        raise ValueError(f"negative price in row(s) {ids}")
    return batch.set_column(batch.schema.get_field_index("price"), "price", pc.multiply(price, 2.0))


BATCH_SIZES: list[int] = []  # the rows of each call of ``counted``, for tests that count calls


def counted(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch unchanged, its size recorded: how a test sees how often a function is called."""
    BATCH_SIZES.append(batch.num_rows)
    return batch


def drops(batch: pa.RecordBatch, *, column: str) -> pa.RecordBatch:
    """The batch without ``column``: an output that breaks a schema declaring it."""
    return batch.drop_columns([column])
