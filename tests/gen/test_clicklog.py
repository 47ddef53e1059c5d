import argparse
import hashlib
import io
import json
import re
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.json as pajson
import pyarrow.parquet as pq
import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient

from airflow_provider_primus.cli import gen as gen_cli
from airflow_provider_primus.cli.main import build_parser, main
from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.data.errors import CorruptFileError
from airflow_provider_primus.data.model import FileSlice, Task
from airflow_provider_primus.data.reader import read_task
from airflow_provider_primus.data.transforms import BatchTransformer
from airflow_provider_primus.gen import clicklog, files
from airflow_provider_primus.gen.clicklog import SCHEMA, World, generate_day, user_vectors
from airflow_provider_primus.gen.events import encode_events, iter_stream, produce_stream
from airflow_provider_primus.gen.files import hash_buckets, write_data_spec, write_history

START = datetime(2026, 2, 1, tzinfo=UTC)
SMALL = World(seed=7, start=START, history_days=3, stream_days=2, rows_per_day=2_000, users=400, items=150)


def day_ms(world: World, day: int) -> int:
    return int(world.day_start(day).timestamp() * 1000)


def ts_ms(table: pa.Table) -> np.ndarray:
    return table.column("ts").to_numpy().astype("datetime64[ms]").astype(np.int64)


def mean_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))))


def consume_all(bootstrap: str, topic: str, want: int, deadline_s: float = 60.0) -> list:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    records: list = []
    deadline = time.monotonic() + deadline_s
    try:
        while len(records) < want:
            assert time.monotonic() < deadline, f"only {len(records)} of {want} records before the deadline"
            for batch in consumer.poll(timeout_ms=500).values():
                records.extend(batch)
    finally:
        consumer.close()
    return records


# -- the world -----------------------------------------------------------------------------------


def test_same_seed_same_tables_regardless_of_cache_and_order() -> None:
    direct = generate_day(SMALL, 4)
    clicklog._CACHE.clear()
    in_order = [generate_day(SMALL, d) for d in range(SMALL.days)]
    assert in_order[4].equals(direct)
    clicklog._CACHE.clear()
    assert generate_day(replace(SMALL), 2).equals(in_order[2])  # an equal, separate World object
    other = generate_day(replace(SMALL, seed=8), 2)
    assert not other.equals(in_order[2])
    assert not np.array_equal(other.column("user_id").to_numpy(), in_order[2].column("user_id").to_numpy())


def test_schema_dtypes_and_value_ranges() -> None:
    tables = [generate_day(SMALL, d) for d in range(SMALL.days)]
    for day, t in enumerate(tables):
        assert t.schema == SCHEMA and t.num_rows == SMALL.rows_per_day
        ms = ts_ms(t)
        assert np.all(np.diff(ms) >= 0), "rows must be sorted by ts within a day"
        assert day_ms(SMALL, day) <= ms[0] and ms[-1] < day_ms(SMALL, day + 1)
        assert np.all(t.column("ts").to_numpy().astype(np.int64) % 1000 == 0), "whole milliseconds"
        hours = t.column("hour").to_numpy()
        assert hours.min() >= 0 and hours.max() <= 23
        assert np.array_equal(hours, (ms - day_ms(SMALL, day)) // 3_600_000)
        assert set(np.unique(t.column("clicked").to_numpy())) <= {0, 1}
        activity = t.column("user_activity").to_numpy()
        assert t.column("user_activity").null_count == 0 and np.all(np.isfinite(activity) & (activity >= 0))
        assert 0 < t.column("item_price").null_count < 0.03 * t.num_rows
        assert np.nanmin(t.column("item_price").to_numpy(zero_copy_only=False)) > 0
    ids = np.concatenate([t.column("sample_id").to_numpy() for t in tables])
    assert len(np.unique(ids)) == len(ids)


def test_user_activity_counts_past_impressions() -> None:
    day0, day1 = generate_day(SMALL, 0), generate_day(SMALL, 1)
    # Day 0: a user's k-th impression (0-based) has activity log1p(k).
    users = day0.column("user_id").to_numpy()
    first_seen = {}
    for pos, u in enumerate(users.tolist()):
        first_seen.setdefault(u, pos)
    activity0 = day0.column("user_activity").to_numpy()
    assert all(activity0[pos] == 0.0 for pos in first_seen.values())
    # Day 1: the first impression of a user carries all of day 0's impressions of that user.
    counts = np.bincount(users, minlength=SMALL.users_on(1))
    users1, activity1 = day1.column("user_id").to_numpy(), day1.column("user_activity").to_numpy()
    u = int(users1[0])
    assert activity1[0] == pytest.approx(np.log1p(counts[u]), rel=1e-6)


def test_new_users_and_items_appear_every_day_with_ids_after_the_previous_max() -> None:
    assert (SMALL.new_users_daily, SMALL.new_items_daily) == (12, 4)
    for day in range(SMALL.days):
        t = generate_day(SMALL, day)
        users, items = t.column("user_id").to_numpy(), t.column("item_id").to_numpy()
        assert users.min() >= 0 and users.max() < SMALL.users_on(day)
        assert items.min() >= 0 and items.max() < SMALL.items_on(day)
        if day > 0:
            born = (users >= SMALL.users_on(day - 1)).sum()
            assert born > 0, f"no new user had an impression on day {day}"
    seen_items = np.unique(
        np.concatenate([generate_day(SMALL, d).column("item_id").to_numpy() for d in range(5)])
    )
    assert (seen_items >= SMALL.items).any(), "no new item ever had an impression"


def test_drift_moves_interests_and_zero_drift_does_not() -> None:
    world = replace(SMALL, history_days=20, stream_days=0, rows_per_day=200)
    u0, u1, u19 = (user_vectors(world, d)[: world.users] for d in (0, 1, 19))
    adjacent, far = mean_cosine(u0, u1), mean_cosine(u0, u19)
    assert adjacent > 0.95
    assert far < adjacent - 0.1, (adjacent, far)
    assert far > 0.5, "0.15 drift should move interests, not replace them within 19 days"
    # Mean reversion keeps the scale stationary: vectors do not grow with time.
    norms = [np.linalg.norm(user_vectors(world, d), axis=1).mean() for d in (0, 19)]
    assert norms[1] == pytest.approx(norms[0], rel=0.1)
    still = replace(world, drift=0.0)
    assert np.array_equal(user_vectors(still, 0), user_vectors(still, 19)[: world.users])


def test_click_rate_is_plausible_and_driven_by_affinity() -> None:
    world = replace(SMALL, rows_per_day=20_000, users=2_000, items=500, history_days=1, stream_days=0)
    t = generate_day(world, 0)
    clicked = t.column("clicked").to_numpy()
    assert 0.02 < clicked.mean() < 0.30
    # The signal a model can learn: clicked pairs have higher latent affinity than unclicked ones.
    u, v = user_vectors(world, 0), clicklog.item_vectors(world, 0)
    affinity = np.sum(u[t.column("user_id").to_numpy()] * v[t.column("item_id").to_numpy()], axis=1)
    assert affinity[clicked == 1].mean() > affinity[clicked == 0].mean() + 0.5
    # Zipf-like popularity: the top 10% of items get a large share of impressions.
    counts = np.sort(np.bincount(t.column("item_id").to_numpy()))[::-1]
    assert counts[: len(counts) // 10].sum() > 0.4 * counts.sum()


def _digest(table: pa.Table) -> str:
    """A table's values (nulls included) as one hash, independent of how Arrow lays out buffers."""
    h = hashlib.sha256()
    for name in table.column_names:
        col = table.column(name).combine_chunks()
        h.update(name.encode())
        h.update(np.asarray(pc.is_null(col)).tobytes())
        if pa.types.is_timestamp(col.type):
            col = col.cast(pa.int64())
        h.update(np.ascontiguousarray(col.fill_null(0).to_numpy(zero_copy_only=False)).tobytes())
    return h.hexdigest()


# SMALL's five days in the stationary world, pinned row for row (recorded with numpy 2.4.6).
_STATIONARY_DIGESTS = [
    "58c2ee6474d2ff65349c3a9f01d50084c032fe1b71230eafe28d3dfd1ef33a87",
    "347004226e0479f2caa0dc336b3351c94dd7d72719825c19ebed8b79a80177bf",
    "b4c9d346bca0d06380331b1e84b225cd623492ad38c44f024f92cffc8a804bc6",
    "44da921cf5adf6858d2a6ca8b290acd6ffdb459c034d30af23d7eed92ab13ccf",
    "03284160c2fb8a24f0ecfa628f8325f2a2522a31f9fe3986395b980783345494",
]


def test_stationary_items_is_a_pinned_world_without_the_lifecycle() -> None:
    stationary = replace(SMALL, item_lifecycle=False)
    tables = [generate_day(stationary, d) for d in range(SMALL.days)]
    # The lifecycle's parameters cannot reach a stationary world's rows (it draws from its own stream).
    other = replace(stationary, novelty=3.0, trend_std=2.0, novelty_half_life_days=0.5)
    assert all(generate_day(other, d).equals(t) for d, t in enumerate(tables))
    assert not generate_day(SMALL, 2).equals(tables[2])  # the default world has the lifecycle
    if np.__version__ != "2.4.6":
        pytest.skip(
            f"digests recorded with numpy 2.4.6, whose Generator streams may differ in {np.__version__}"
        )
    assert [_digest(t) for t in tables] == _STATIONARY_DIGESTS


def test_item_lifecycle_new_and_trending_items_are_shown_and_clicked_more() -> None:
    """Newborn items take a far larger share of impressions than in the stationary world, and click
    better the younger they are; the click rate stays steady from day to day."""
    life = replace(SMALL, rows_per_day=20_000, users=2_000, items=2_000, history_days=12, stream_days=0)
    still = replace(life, item_lifecycle=False)
    young: dict[bool, list[float]] = {True: [], False: []}
    ctr_by_age: dict[str, list[np.ndarray]] = {"young": [], "old": []}
    rates = []
    for day in range(2, life.days):
        for world in (life, still):
            t = generate_day(world, day)
            items, clicked = t.column("item_id").to_numpy(), t.column("clicked").to_numpy()
            age = day - clicklog._state(world, day).item_birth[items]  # whole days since birth
            young[world.item_lifecycle].append(float((age <= 1).mean()))
            if world.item_lifecycle:
                rates.append(clicked.mean())
                ctr_by_age["young"].append(clicked[age <= 1])
                ctr_by_age["old"].append(clicked[age >= 8])
    assert np.mean(young[True]) > 2 * np.mean(young[False])
    assert np.concatenate(ctr_by_age["young"]).mean() > np.concatenate(ctr_by_age["old"]).mean() + 0.03
    assert min(rates) > 0.05 and max(rates) < 0.30 and max(rates) - min(rates) < 0.08
    # Seeded: the same world gives the same rows; another seed, others.
    clicklog._CACHE.clear()
    assert generate_day(life, 5).equals(generate_day(replace(life), 5))
    assert not generate_day(replace(life, seed=8), 5).equals(generate_day(life, 5))


def test_world_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="midnight"):
        replace(SMALL, start=START + timedelta(hours=1))
    with pytest.raises(ValueError, match="drift"):
        replace(SMALL, drift=1.0)
    with pytest.raises(TypeError, match="unknown World field"):
        World.from_defaults(user=5)
    with pytest.raises(ValueError, match="novelty_half_life_days"):
        replace(SMALL, novelty_half_life_days=0.0)
    with pytest.raises(ValueError, match="trend_std"):
        replace(SMALL, trend_std=-1.0)
    assert replace(SMALL, start=datetime(2026, 2, 1)).start == START  # naive is UTC
    with pytest.raises(ValueError, match="day must be"):
        generate_day(SMALL, SMALL.days)


def test_from_defaults_is_the_demo_world_and_the_cli_help_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    w = World.from_defaults()
    assert (w.history_days, w.stream_days, w.rows_per_day, w.users, w.items) == (20, 3, 20_000, 20_000, 5_000)
    with pytest.raises(SystemExit) as exc:
        main(["gen", "--help"])
    assert exc.value.code == 0 and capsys.readouterr().out.startswith("usage: primus gen")
    # The CLI repeats the defaults in its help (to keep `primus --help` free of numpy); keep them equal.
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    helps = {a.dest: a.help or "" for a in sub.choices["gen"]._actions}
    for name in gen_cli.WORLD_OPTIONS:
        value = getattr(w, name)
        shown = value.date().isoformat() if isinstance(value, datetime) else f"{value:g}"
        assert f"(default: {shown})" in helps[name].replace("%%", "%"), name


def test_live_start_makes_the_last_day_today_and_shifting_a_world_moves_only_its_times() -> None:
    now = datetime(2026, 12, 1, 22, 6, 51, tzinfo=UTC)
    start = clicklog.live_start(SMALL.days, now)
    assert start == datetime(2026, 11, 27, tzinfo=UTC)
    live = replace(SMALL, start=start)
    assert live.day_start(live.days - 1) <= now < live.day_start(live.days)  # the stream ends tonight
    assert clicklog.live_start(1, datetime(2026, 12, 1, 0, 0)) == datetime(
        2026, 12, 1, tzinfo=UTC
    )  # naive: UTC
    with pytest.raises(ValueError, match="days"):
        clicklog.live_start(0, now)
    # The same world years earlier (a backfill of old logs): the same rows, only the event times move.
    old = replace(live, start=live.start - timedelta(days=2192))
    for day in (0, live.days - 1):
        a, b = generate_day(live, day), generate_day(old, day)
        assert a.drop_columns(["ts"]).equals(b.drop_columns(["ts"]))
        assert (ts_ms(a) - ts_ms(b) == 2192 * 86_400_000).all()


# -- files and spec ---------------------------------------------------------------------------------


def test_write_history_writes_parquet_and_markers(tmp_path: Path) -> None:
    paths = write_history(SMALL, tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in paths] == [
        f"history/2026-02-0{d}/part-0.parquet" for d in (1, 2, 3)
    ]
    for day, path in enumerate(paths):
        marker = path.parent / "_SUCCESS"
        assert marker.is_file() and marker.stat().st_size == 0
        assert marker.stat().st_mtime_ns >= path.stat().st_mtime_ns
        assert pq.read_table(path).equals(generate_day(SMALL, day))
    whole = pads.dataset(tmp_path / "history", format="parquet").to_table()
    assert whole.num_rows == SMALL.history_days * SMALL.rows_per_day


@pytest.mark.parametrize("column", ["sample_id", "ts", "user_id", "clicked"])
def test_history_pages_carry_checksums_that_catch_flipped_bytes(tmp_path: Path, column: str) -> None:
    """200 bytes flipped in the middle of a data page: the executors' reader (which verifies page
    checksums) refuses the file by name instead of decoding plausible but wrong values."""
    [path] = write_history(replace(SMALL, history_days=1, rows_per_day=30_000), tmp_path)
    meta = pq.ParquetFile(path).metadata
    index = pq.ParquetFile(path).schema_arrow.get_field_index(column)
    chunk = meta.row_group(0).column(index)
    end = (chunk.dictionary_page_offset or chunk.data_page_offset) + chunk.total_compressed_size
    middle = (chunk.data_page_offset + end) // 2
    assert end - chunk.data_page_offset > 400  # the 200 bytes lie inside the chunk's data pages
    data = bytearray(path.read_bytes())
    for i in range(middle - 100, middle + 100):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    task = Task(
        "t", "history", "files", "g", rows=30_000, slices=(FileSlice(str(path), len(data), rows=30_000),)
    )
    with pytest.raises(
        CorruptFileError, match=rf"{re.escape(str(path))}: decoding .*CRC checksum verification"
    ):
        for _ in read_task(task, fmt="parquet", columns=[column], batch_rows=8192):
            pass


def test_write_data_spec_validates_and_matches_the_data(tmp_path: Path) -> None:
    path = write_data_spec(SMALL, tmp_path, bootstrap_servers="127.0.0.1:19092", topic="clicks-x")
    assert path == tmp_path / "primus-data.yaml"
    spec = load_data_spec(path).spec
    assert spec.window is not None
    assert (spec.window.start, spec.window.end) == (START, START + timedelta(days=3))
    assert spec.ordered
    history, events = spec.source("history"), spec.source("events")
    assert history.type == "files" and events.type == "kafka"
    assert history.uri == (tmp_path / "history").resolve().as_uri()
    assert (history.path_template, history.granularity, history.success_marker) == (
        "{date}",
        "day",
        "_SUCCESS",
    )
    assert history.missing.policy == "fail" and history.format == "parquet"
    assert (events.topic, events.bootstrap_servers, events.start.policy) == (
        "clicks-x",
        "127.0.0.1:19092",
        "earliest",
    )
    assert events.event_time_field == "ts"
    assert history.schema_ == events.schema_
    assert history.schema_.sparse == ["user_id", "item_id", "hour"]
    assert history.schema_.dense == ["user_activity", "item_price"]
    assert (history.schema_.label.column, history.schema_.event_time_column) == ("clicked", "ts")
    buckets = {t.column: t.hash_bucket for t in history.schema_.transforms if t.hash_bucket}
    assert (buckets["user_id"], buckets["item_id"]) == hash_buckets(SMALL)
    assert buckets["user_id"] >= 5 * SMALL.users_on(SMALL.days - 1)
    assert [(m.source, m.weight, m.priority) for m in spec.mixture] == [
        ("history", 0.5, 0),
        ("events", 0.5, 1),
    ]
    # The declared schema applies to the history file as written.
    history_day = generate_day(SMALL, 0)
    out = BatchTransformer(history.schema_)(history_day.to_batches()[0])
    assert out.num_rows == history_day.to_batches()[0].num_rows
    assert out.column("item_price").null_count == 0


def test_stream_events_decode_to_the_same_features_as_the_files() -> None:
    """Batch and stream of one day must train identically: JSON must round-trip every value."""
    spec_schema = (
        load_data_spec(
            {
                "apiVersion": "primus.dev/v1alpha1",
                "kind": "PrimusData",
                "metadata": {"name": "x"},
                "spec": {
                    "sources": [
                        {
                            "name": "s",
                            "type": "files",
                            "format": "parquet",
                            "uri": "/x",
                            "path_template": "{date}",
                            "granularity": "day",
                            "schema": files._schema_section(SMALL),
                        }
                    ]
                },
            }
        )
        .spec.sources[0]
        .schema_
    )
    table = generate_day(SMALL, 3)
    messages = encode_events(table)
    assert all(b"\n" not in m for m in messages)
    decoded = pajson.read_json(io.BytesIO(b"\n".join(messages)))
    assert decoded.column("ts").type == pa.string()
    transform = BatchTransformer(spec_schema, passthrough=["sample_id"])
    from_files = transform(table.combine_chunks().to_batches()[0])
    from_stream = transform(decoded.combine_chunks().to_batches()[0])
    assert from_stream.equals(from_files)
    first = json.loads(messages[0])
    assert list(first) == SCHEMA.names
    assert first["ts"].endswith("Z") and len(first["ts"]) == len("2026-02-04T00:00:00.000Z")


def test_stream_order_is_event_time_or_label_availability() -> None:
    plain = pa.concat_tables(iter_stream(SMALL))
    expected = pa.concat_tables([generate_day(SMALL, d) for d in (3, 4)])
    assert plain.equals(expected)

    delayed_world = replace(SMALL, label_delay_s=2 * 3600.0)
    delayed = pa.concat_tables(iter_stream(delayed_world))
    assert delayed.num_rows == expected.num_rows
    assert sorted(delayed.column("sample_id").to_pylist()) == expected.column("sample_id").to_pylist()
    clicked = delayed.column("clicked").to_numpy()
    available = ts_ms(delayed) + 2 * 3_600_000 * clicked
    assert np.all(np.diff(available) >= 0)
    assert not np.all(np.diff(ts_ms(delayed)) >= 0), "delayed clicks should arrive after later impressions"
    # A click from late on the first stream day is only known on the second, so it crosses the day.
    day4 = day_ms(SMALL, 4)
    first_day_chunk = next(iter(iter_stream(delayed_world)))
    assert np.all(
        ts_ms(first_day_chunk) + 2 * 3_600_000 * first_day_chunk.column("clicked").to_numpy() < day4
    )


# -- Kafka ------------------------------------------------------------------------------------------


def test_produce_stream_sends_every_row_in_order(kafka_broker, new_topic) -> None:
    topic = new_topic("gen")
    count = produce_stream(SMALL, kafka_broker.bootstrap_servers, topic)
    expected = pa.concat_tables(iter_stream(SMALL))
    assert count == expected.num_rows == SMALL.stream_days * SMALL.rows_per_day
    records = consume_all(kafka_broker.bootstrap_servers, topic, count)
    assert len(records) == count
    rows = [json.loads(r.value) for r in records]
    assert [r["sample_id"] for r in rows] == expected.column("sample_id").to_pylist()
    assert [r.key for r in records] == [str(u).encode() for u in expected.column("user_id").to_pylist()]
    assert [r.timestamp for r in records] == ts_ms(expected).tolist()
    assert rows[0] == json.loads(encode_events(expected.slice(0, 1))[0])


def test_produce_stream_dead_letters_every_nth(kafka_broker, new_topic) -> None:
    topic = new_topic("gen-dlq")
    world = replace(SMALL, stream_days=1, rows_per_day=300)
    count = produce_stream(world, kafka_broker.bootstrap_servers, topic, dead_letter_every=7)
    assert count == 300
    records = consume_all(kafka_broker.bootstrap_servers, topic, count)
    kinds = []
    for i, record in enumerate(records, start=1):
        try:
            value = json.loads(record.value)
        except json.JSONDecodeError:
            kinds.append("invalid")
            assert i % 7 == 0
            continue
        if i % 7 != 0:
            assert isinstance(value, dict) and set(value) == set(SCHEMA.names)
        elif isinstance(value, list):
            kinds.append("array")
        else:
            assert "user_id" not in value and "sample_id" in value
            kinds.append("no-user_id")
    assert kinds == ["invalid", "array", "no-user_id"] * 14  # 300 // 7 = 42 dead letters


def test_produce_stream_creates_the_topic_and_paces(kafka_broker) -> None:
    topic = f"gen-created-{time.monotonic_ns()}"
    world = replace(SMALL, stream_days=1, rows_per_day=200)
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap_servers, client_id="gen-tests")
    try:
        t0 = time.monotonic()
        count = produce_stream(world, kafka_broker.bootstrap_servers, topic, rate=1000.0, partitions=2)
        elapsed = time.monotonic() - t0
        assert count == 200
        assert elapsed >= 0.19, f"200 rows at 1000/s took only {elapsed:.3f}s"
        (described,) = admin.describe_topics([topic])
        assert len(described["partitions"]) == 2
        assert len(consume_all(kafka_broker.bootstrap_servers, topic, count)) == 200
    finally:
        admin.delete_topics([topic])
        admin.close()


def test_produce_stream_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="rate"):
        produce_stream(SMALL, "127.0.0.1:1", "t", rate=-1.0)
    with pytest.raises(ValueError, match="dead_letter_every"):
        produce_stream(SMALL, "127.0.0.1:1", "t", dead_letter_every=-1)


# -- CLI --------------------------------------------------------------------------------------------


# What SMALL_ARGS (with --seed 3 --start 2026-03-01) asks of ``primus gen``, as a World's arguments.
SMALL_WORLD: dict[str, Any] = {
    "seed": 3,
    "start": datetime(2026, 3, 1, tzinfo=UTC),
    "history_days": 2,
    "stream_days": 1,
    "rows_per_day": 500,
    "users": 100,
    "items": 50,
}
SMALL_ARGS = [
    "--history-days",
    "2",
    "--stream-days",
    "1",
    "--rows-per-day",
    "500",
    "--users",
    "100",
    "--items",
    "50",
]


def test_cli_gen_writes_history_and_spec(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "log"
    code = main(["gen", "--out", str(out), *SMALL_ARGS, "--seed", "3", "--start", "2026-03-01"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["history_files"] == 2 and summary["history_rows"] == 1000
    assert summary["stream_messages"] is None
    assert summary["spec"] == str(out / "primus-data.yaml")
    spec = load_data_spec(out / "primus-data.yaml").spec
    assert spec.source("events").bootstrap_servers == files.DEFAULT_BOOTSTRAP
    world = World.from_defaults(**SMALL_WORLD)
    assert pq.read_table(out / "history/2026-03-02/part-0.parquet").equals(generate_day(world, 1))


def test_cli_gen_stationary_items_writes_the_world_without_the_lifecycle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["gen", *SMALL_ARGS, "--seed", "3", "--start", "2026-03-01"]
    assert main([*args, "--out", str(tmp_path / "life")]) == 0
    assert json.loads(capsys.readouterr().out)["item_lifecycle"] is True
    assert main([*args, "--out", str(tmp_path / "still"), "--stationary-items"]) == 0
    assert json.loads(capsys.readouterr().out)["item_lifecycle"] is False
    world = World.from_defaults(**SMALL_WORLD, item_lifecycle=False)
    day = "history/2026-03-02/part-0.parquet"
    assert pq.read_table(tmp_path / "still" / day).equals(generate_day(world, 1))
    assert not pq.read_table(tmp_path / "life" / day).equals(generate_day(world, 1))


def test_cli_gen_produces_the_stream(
    kafka_broker, new_topic, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = new_topic("gen-cli")
    args = ["gen", "--out", str(tmp_path), *SMALL_ARGS, "--bootstrap-servers", kafka_broker.bootstrap_servers]
    assert main([*args, "--topic", topic, "--label-delay-s", "60"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["stream_messages"] == 500 and summary["topic"] == topic
    assert load_data_spec(Path(summary["spec"])).spec.source("events").topic == topic
    assert len(consume_all(kafka_broker.bootstrap_servers, topic, 500)) == 500


def test_cli_gen_start_live_puts_the_stream_days_up_to_today(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = datetime.now(UTC).date()
    assert main(["gen", "--out", str(tmp_path), *SMALL_ARGS, "--start", "live"]) == 0
    capsys.readouterr()
    after = datetime.now(UTC).date()
    spec = load_data_spec(tmp_path / "primus-data.yaml").spec
    assert spec.window is not None
    # 2 history days, then the stream day: today (or the day the command started on, at midnight).
    assert spec.window.end.date() in (before, after)
    assert sorted(p.name for p in (tmp_path / "history").iterdir()) == [
        (spec.window.end.date() - timedelta(days=d)).isoformat() for d in (2, 1)
    ]


def test_cli_gen_rejects_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["gen", "--out", str(tmp_path), "--start", "2026-13-01"])
    assert exc.value.code == 2 and "YYYY-MM-DD" in capsys.readouterr().err
    assert main(["gen", "--out", str(tmp_path), "--drift", "1.5"]) == 2
    assert "drift" in capsys.readouterr().err
    assert main(["gen", "--out", str(tmp_path), *SMALL_ARGS, "--topic", "bad topic"]) == 2
    assert "topic" in capsys.readouterr().err
