"""BatchTransformer on real Arrow batches: hashing pinned to fixed values, fills, casts, labels, errors."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from airflow_provider_primus.contracts.schema import SourceSchema
from airflow_provider_primus.data import transforms
from airflow_provider_primus.data.transforms import (
    BatchTransformer,
    MissingLabelError,
    SchemaMismatchError,
    hash_ids,
)

MASK = (1 << 64) - 1


def splitmix64_reference(x: int) -> int:
    """An independent, pure-Python splitmix64 finalizer on the two's-complement value."""
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def blake_reference(value: str, buckets: int) -> int:
    return int.from_bytes(hashlib.blake2b(value.encode(), digest_size=8).digest(), "little") % buckets


def schema(**kw: Any) -> SourceSchema:
    doc: dict[str, Any] = {"sparse": ["u"], "dense": ["p"], "label": {"column": "y"}}
    doc.update(kw)
    return SourceSchema.model_validate(doc)


def batch(**columns: Any) -> pa.RecordBatch:
    return pa.record_batch({k: v if isinstance(v, pa.Array) else pa.array(v) for k, v in columns.items()})


# -- hash_bucket ----------------------------------------------------------------------------------------


def test_hash_integers_pinned_values() -> None:
    # Computed once and pinned: a change here re-buckets every embedding table of every model.
    got = hash_ids(pa.array([0, 1, 2, -1, 2**40, 123456789], pa.int64()), 1000003).to_pylist()
    assert got == [4995, 745530, 320279, 55612, 661465, 441745]
    # splitmix64 seeded with 0 first returns 0xE220A8397B1DCDAF (the published reference output).
    assert splitmix64_reference(0) == 0xE220A8397B1DCDAF
    assert got[0] == 0xE220A8397B1DCDAF % 1000003


def test_hash_integers_match_reference_and_ignore_integer_width() -> None:
    ids = [0, 1, -1, 7, 2**31 - 1, -(2**31), 2**62, -(2**63), 2**63 - 1, 987654321012]
    got = hash_ids(pa.array(ids, pa.int64()), 97).to_pylist()
    assert got == [splitmix64_reference(x & MASK) % 97 for x in ids]
    small = [x for x in ids if -(2**31) <= x < 2**31]
    assert hash_ids(pa.array(small, pa.int32()), 97) == hash_ids(pa.array(small, pa.int64()), 97)
    big = [2**64 - 1, 2**63]
    assert hash_ids(pa.array(big, pa.uint64()), 97).to_pylist() == [splitmix64_reference(x) % 97 for x in big]


def test_hash_id_width_follows_the_bucket_count() -> None:
    ids = pa.array([0, 1, -1, 2**40, None], pa.int64())
    narrow = hash_ids(ids, 2**31 - 1)
    wide = hash_ids(ids, 2**31)
    assert narrow.type == pa.int32() and wide.type == pa.int64()
    values = [0, 1, -1, 2**40]
    assert narrow.to_pylist() == [splitmix64_reference(x & MASK) % (2**31 - 1) for x in values] + [0]
    assert wide.to_pylist() == [splitmix64_reference(x & MASK) % 2**31 for x in values] + [0]
    # Strings take the dictionary path: same width rule.
    assert hash_ids(pa.array(["a", None, "a"]), 1000).type == pa.int32()
    assert hash_ids(pa.array(["a", None, "a"]), 2**40).type == pa.int64()


def test_hash_in_range_and_spread() -> None:
    out = hash_ids(pa.array(range(200_000), pa.int64()), 1000).to_numpy()
    assert out.min() >= 0 and out.max() < 1000
    # Sequential IDs must spread over (nearly) every bucket, not cluster.
    assert len(set(out.tolist())) == 1000


def test_hash_strings_pinned_and_by_unique_value(monkeypatch: pytest.MonkeyPatch) -> None:
    values = ["a", "b", "a", "user-42", "ü", "b"]
    got = hash_ids(pa.array(values), 100).to_pylist()
    assert got == [28, 68, 28, 23, 25, 68]
    assert got == [blake_reference(v, 100) for v in values]
    # Same buckets whatever the string layout: large_string and dictionary-encoded.
    assert hash_ids(pa.array(values, pa.large_string()), 100).to_pylist() == got
    assert hash_ids(pa.array(values).dictionary_encode(), 100).to_pylist() == got
    # Hashing is per distinct value, never per row.
    calls = []
    real = hashlib.blake2b

    def counting(data: bytes, **kw: Any) -> Any:
        calls.append(data)
        return real(data, **kw)

    monkeypatch.setattr(transforms.hashlib, "blake2b", counting)
    hash_ids(pa.array(["x", "y", "z"] * 10_000), 1000)
    assert sorted(calls) == [b"x", b"y", b"z"]


def test_hash_nulls_go_to_bucket_zero_unless_filled() -> None:
    assert hash_ids(pa.array([5, None, 6], pa.int64()), 1000003).to_pylist()[1] == 0
    assert hash_ids(pa.array(["q", None]), 1000).to_pylist() == [blake_reference("q", 1000), 0]
    assert hash_ids(pa.array([None, None], pa.string()), 10).to_pylist() == [0, 0]
    assert hash_ids(pa.nulls(3), 10).to_pylist() == [0, 0, 0]
    t = BatchTransformer(
        schema(transforms=[{"column": "u", "fill": -1}, {"column": "u", "hash_bucket": 1000003}])
    )
    out = t(batch(u=pa.array([None, 1], pa.int64()), p=[1.0, 2.0], y=[0, 1]))
    assert out.column("u").to_pylist() == [55612, 745530]  # null filled with -1, then hashed


def test_hash_bucket_through_transformer_and_wrong_type() -> None:
    t = BatchTransformer(schema(sparse=["u", "s"], transforms=[{"column": "s", "hash_bucket": 100}]))
    out = t(batch(u=[1, 2], s=["a", "b"], p=[0.5, 1.5], y=[1, 0]))
    assert out.column("s").to_pylist() == [28, 68]
    assert out.column("s").type == pa.int32()  # bucket IDs fit: half the bytes on the wire
    with pytest.raises(SchemaMismatchError, match=r"'s'.*hash_bucket.*double"):
        t(batch(u=[1], s=[1.5], p=[0.5], y=[1]))


# -- fill and cast --------------------------------------------------------------------------------------


def test_fill_nulls_and_nan() -> None:
    t = BatchTransformer(
        schema(
            dense=["p", "q"],
            transforms=[
                {"column": "p", "fill": 0.25},
                {"column": "u", "fill": 9},
                {"column": "q", "fill": 3},
            ],
        )
    )
    out = t(batch(u=[None, 4], p=[None, float("nan")], q=pa.array([None, 2], pa.int64()), y=[0, 1]))
    assert out.column("u").to_pylist() == [9, 4]
    assert out.column("p").to_pylist() == [0.25, 0.25]
    assert out.column("q").to_pylist() == [3.0, 2.0]
    assert out.column("q").type == pa.float32()


def test_fill_of_an_all_null_column_and_unfit_fill_value() -> None:
    t = BatchTransformer(schema(transforms=[{"column": "p", "fill": 1.5}]))
    out = t(batch(u=[1, 2], p=pa.nulls(2), y=[0, 1]))
    assert out.column("p").to_pylist() == [1.5, 1.5]
    # 2.5 does not fit an integer column: an error, not a silent 2.
    bad = BatchTransformer(schema(transforms=[{"column": "u", "fill": 2.5}]))
    with pytest.raises(SchemaMismatchError, match=r"'u'.*fill value 2.5"):
        bad(batch(u=[None, 1], p=[1.0, 2.0], y=[0, 1]))


def test_nulls_without_fill() -> None:
    out = BatchTransformer(schema())(batch(u=pa.array([None, 3], pa.int64()), p=[None, 1.0], y=[1, 0]))
    assert out.column("u").to_pylist() == [0, 3]
    assert out.column("p").to_pylist() == [None, 1.0]


def test_cast_steps_and_implicit_casts() -> None:
    t = BatchTransformer(
        schema(
            sparse=["u", "s"],
            dense=["p"],
            transforms=[
                {"column": "s", "cast": "string"},
                {"column": "s", "hash_bucket": 100},
                {"column": "p", "cast": "int32"},
            ],
        )
    )
    out = t(batch(u=["12", "13"], s=pa.array([1, 2], pa.int16()), p=[3.0, 4.0], y=[True, False]))
    assert out.column("u").to_pylist() == [12, 13]  # a string sparse column cast to int64
    assert out.column("s").to_pylist() == [blake_reference("1", 100), blake_reference("2", 100)]
    assert out.column("p").to_pylist() == [3.0, 4.0]
    assert out.column("label").to_pylist() == [1.0, 0.0]
    with pytest.raises(SchemaMismatchError, match=r"'p'.*double.*int32"):
        t(batch(u=["1"], s=[1], p=[3.5], y=[1]))  # fractional value: a lossy cast is refused


def test_dense_string_that_is_not_a_number() -> None:
    t = BatchTransformer(schema())
    assert t(batch(u=[1], p=["2.5"], y=[1])).column("p").to_pylist() == [2.5]
    with pytest.raises(SchemaMismatchError, match=r"<stream>: column 'p': found type string") as exc:
        t(batch(u=[1], p=["abc"], y=[1]))
    assert exc.value.column == "p" and exc.value.path == "<stream>"


# -- labels ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (">=", [0.0, 1.0, 1.0]),
        (">", [0.0, 0.0, 1.0]),
        ("<=", [1.0, 1.0, 0.0]),
        ("<", [1.0, 0.0, 0.0]),
        ("==", [0.0, 1.0, 0.0]),
        ("!=", [1.0, 0.0, 1.0]),
    ],
)
def test_label_rule_every_op(op: str, expected: list[float]) -> None:
    t = BatchTransformer(schema(label={"rule": f"r {op} 4"}))
    out = t.transform(batch(u=[1, 2, 3, 4], p=[0.0] * 4, r=pa.array([3, 4, 5, None], pa.int64())))
    assert out.batch.column("label").to_pylist() == expected  # null input: no label, not a negative
    assert out.batch.column("u").to_pylist() == [1, 2, 3] and out.unlabelled.tolist() == [3]
    assert out.batch.column("label").type == pa.float32()


def test_label_rule_on_floats_and_booleans() -> None:
    t = BatchTransformer(schema(label={"rule": "r > 0.5"}))
    assert t(batch(u=[1, 2], p=[0.0, 0.0], r=[0.4, 0.6])).column("label").to_pylist() == [0.0, 1.0]
    assert t(batch(u=[1, 2], p=[0.0, 0.0], r=[False, True])).column("label").to_pylist() == [0.0, 1.0]
    with pytest.raises(SchemaMismatchError, match=r"'r'.*label rule.*string"):
        t(batch(u=[1], p=[0.0], r=["x"]))


def test_rows_without_a_label_are_dropped_and_reported_never_trained_as_negatives() -> None:
    t = BatchTransformer(schema(), passthrough=("row_id",))
    raw = batch(
        u=[1, 2, 3, 4, 5], p=[0.0] * 5, y=[1.0, None, float("nan"), 0.0, None], row_id=[0, 1, 2, 3, 4]
    )
    out = t.transform(raw)
    assert out.batch.column("label").to_pylist() == [1.0, 0.0]
    assert out.batch.column("row_id").to_pylist() == [0, 3]
    assert out.unlabelled.tolist() == [1, 2, 4]
    assert t(raw).equals(out.batch)  # the plain call leaves them out too
    rule = BatchTransformer(schema(label={"rule": "r > 0.5"}))
    got = rule.transform(batch(u=[1, 2, 3], p=[0.0] * 3, r=[0.9, float("nan"), 0.1]))
    assert got.batch.column("label").to_pylist() == [1.0, 0.0] and got.unlabelled.tolist() == [1]
    absent = BatchTransformer(schema()).transform(batch(u=[1, 2], p=[0.0, 0.0], y=pa.nulls(2)))
    assert absent.batch.num_rows == 0 and absent.unlabelled.tolist() == [0, 1]


def test_missing_label_fail_raises_naming_the_input() -> None:
    t = BatchTransformer(schema(missing_label="fail"))
    assert t(batch(u=[1], p=[0.0], y=[1])).column("label").to_pylist() == [1.0]
    with pytest.raises(
        MissingLabelError, match=r"part-3\.parquet: column 'y': 2 of 3 rows have no label"
    ) as exc:
        t(batch(u=[1, 2, 3], p=[0.0] * 3, y=[1.0, None, None]), "/data/part-3.parquet")
    assert isinstance(exc.value, SchemaMismatchError) and exc.value.path == "/data/part-3.parquet"


def test_a_declared_label_fill_is_a_value_not_a_missing_label() -> None:
    t = BatchTransformer(schema(missing_label="fail", transforms=[{"column": "y", "fill": 0}]))
    out = t.transform(batch(u=[1, 2, 3], p=[0.0] * 3, y=[1.0, None, float("nan")]))
    assert out.batch.column("label").to_pylist() == [1.0, 0.0, 0.0] and not len(out.unlabelled)


# -- event time, passthrough, layout --------------------------------------------------------------------


def test_event_time_forms() -> None:
    t = BatchTransformer(schema(event_time="ts"))
    when = datetime(2026, 3, 1, 5, tzinfo=UTC)
    ms = int(when.timestamp() * 1000)
    forms = [
        pa.array([ms], pa.int64()),
        pa.array([int(when.timestamp())], pa.timestamp("s")),
        pa.array([when], pa.timestamp("ns", tz="Europe/Paris")),
        pa.array(["2026-03-01T06:00:00+01:00"]),
        pa.array(["2026-03-01 05:00:00"]),
    ]
    for ts in forms:
        out = t(batch(u=[1], p=[0.0], y=[1], ts=ts))
        assert out.column("event_time").type == pa.timestamp("us", tz="UTC")
        assert out.column("event_time").to_pylist() == [when], ts.type
    with pytest.raises(SchemaMismatchError, match=r"'ts'.*event time.*double"):
        t(batch(u=[1], p=[0.0], y=[1], ts=[1.5]))


def test_integer_event_times_are_read_in_the_declared_unit() -> None:
    when = datetime(1997, 9, 1, 12, 30, tzinfo=UTC)  # a 1997 log: read as ms it would be 1970-01-11
    seconds = int(when.timestamp())
    counts = {"s": seconds, "ms": seconds * 1000, "us": seconds * 10**6, "ns": seconds * 10**9}
    for unit, value in counts.items():
        t = BatchTransformer(schema(event_time={"column": "ts", "unit": unit}))
        for typ in (pa.int64(), pa.uint64(), *([pa.int32()] if unit == "s" else [])):
            out = t(batch(u=[1], p=[0.0], y=[1], ts=pa.array([value], typ)))
            assert out.column("event_time").to_pylist() == [when], (unit, typ)
    # No unit: milliseconds, as before units could be declared (plausibility is judged elsewhere).
    out = BatchTransformer(schema(event_time="ts"))(batch(u=[1], p=[0.0], y=[1], ts=[seconds]))
    assert out.column("event_time").to_pylist() == [datetime.fromtimestamp(seconds / 1000, tz=UTC)]


def test_a_declared_unit_leaves_timestamps_and_iso_strings_alone() -> None:
    when = datetime(2026, 3, 1, 5, tzinfo=UTC)
    t = BatchTransformer(schema(event_time={"column": "ts", "unit": "s"}))
    for ts in (pa.array([when], pa.timestamp("ms", tz="UTC")), pa.array(["2026-03-01T06:00:00+01:00"])):
        assert t(batch(u=[1], p=[0.0], y=[1], ts=ts)).column("event_time").to_pylist() == [when]


def test_an_integer_overflow_names_the_unit_that_fits() -> None:
    nanos = int(datetime(2026, 3, 1, tzinfo=UTC).timestamp()) * 10**9
    t = BatchTransformer(schema(event_time="ts"))
    with pytest.raises(SchemaMismatchError, match=r"'ts'.*overflow when read as epoch milliseconds.*unit ns"):
        t(batch(u=[1], p=[0.0], y=[1], ts=pa.array([nanos], pa.int64())))


def test_output_layout_and_passthrough() -> None:
    s = schema(sparse=["u", "v"], dense=["p", "y"], label={"column": "y"}, event_time="ts")
    t = BatchTransformer(s, passthrough=("row_id", "key"))
    assert t.input_columns() == ["u", "v", "p", "y", "ts", "row_id", "key"]
    out = t(
        batch(
            key=["k1", "k2"],
            ts=pa.array([0, 1], pa.int64()),
            y=pa.array([1, 0], pa.int8()),
            p=[1.0, 2.0],
            v=pa.array([3, 4], pa.int32()),
            u=pa.array([5, 6], pa.uint16()),
            row_id=pa.array([10, 11], pa.int64()),
        )
    )
    assert out.schema.names == ["u", "v", "p", "y", "label", "event_time", "row_id", "key"]
    assert [f.type for f in out.schema] == [
        pa.int64(),
        pa.int32(),  # int32 IDs stay narrow; other integers widen
        pa.float32(),
        pa.float32(),
        pa.float32(),
        pa.timestamp("us", tz="UTC"),
        pa.int64(),
        pa.string(),
    ]
    assert out.column("row_id").to_pylist() == [10, 11] and out.column("key").to_pylist() == ["k1", "k2"]
    assert out.column("y").to_pylist() == [1.0, 0.0] and out.column("label").to_pylist() == [1.0, 0.0]


def test_reserved_and_clashing_output_names() -> None:
    with pytest.raises(ValueError, match="label"):
        BatchTransformer(schema(dense=["label"], label={"rule": "r > 1"}))
    with pytest.raises(ValueError, match="passthrough"):
        BatchTransformer(schema(), passthrough=("u",))


# -- errors ---------------------------------------------------------------------------------------------


def test_missing_column_named_up_front() -> None:
    t = BatchTransformer(schema(sparse=["u", "item"]), passthrough=("row_id",))
    file_schema = pa.schema(
        [("u", pa.int64()), ("p", pa.float64()), ("y", pa.int64()), ("row_id", pa.int64())]
    )
    with pytest.raises(
        SchemaMismatchError, match=r"/data/x\.parquet: column 'item': is not in the data"
    ) as exc:
        t.check_schema(file_schema, "/data/x.parquet")
    assert exc.value.column == "item" and exc.value.path == "/data/x.parquet"
    with pytest.raises(SchemaMismatchError, match="'row_id'"):
        BatchTransformer(schema(), passthrough=("row_id",))(batch(u=[1], p=[1.0], y=[1]))


def test_unusable_types_named_with_their_type() -> None:
    t = BatchTransformer(schema())
    with pytest.raises(SchemaMismatchError, match=r"'p'.*dense.*timestamp"):
        t.check_schema(pa.schema([("u", pa.int64()), ("p", pa.timestamp("s")), ("y", pa.int64())]), "f")
    with pytest.raises(SchemaMismatchError, match=r"'u'.*sparse.*list<item: int64>"):
        t.check_schema(pa.schema([("u", pa.list_(pa.int64())), ("p", pa.float64()), ("y", pa.int64())]), "f")
    with pytest.raises(SchemaMismatchError, match=r"'u'.*cannot cast type list"):
        BatchTransformer(schema(transforms=[{"column": "u", "cast": "int64"}])).check_schema(
            pa.schema([("u", pa.list_(pa.int64())), ("p", pa.float64()), ("y", pa.int64())]), "f"
        )


def test_a_new_schema_is_checked_again() -> None:
    t = BatchTransformer(schema())
    t(batch(u=[1], p=[1.0], y=[1]))
    with pytest.raises(SchemaMismatchError, match="'y'"):
        t(batch(u=[1], p=[1.0]))
