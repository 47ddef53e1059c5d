"""The stream decoder's path for decoded (Avro, Protobuf) records, without a broker: records of two
writer schemas in one block (a registry topic whose schema evolved) keep every value, a field the
first record lacks included, and each column is screened as JSON's are."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_primus.training.stream.deadletters import DeadLetters
from airflow_provider_primus.training.stream.decode import StreamDecoder
from tests.training.conftest import kafka_source
from tests.training.stream.formats_world import AVRO_SCHEMA, rows


@dataclass
class Record:
    offset: int
    value: bytes
    key: bytes | None = None


class Evolving:
    """Stands for a registry decoder whose records come from two schema versions: it gives the
    dicts fastavro would, the older version without ``price``."""

    def decode(self, value: bytes) -> dict[str, Any]:
        event: dict[str, Any] = json.loads(value)
        return event


def _decoder(tmp_path: Path) -> StreamDecoder:
    schema_file = tmp_path / "click.avsc"
    schema_file.write_text(json.dumps(AVRO_SCHEMA))
    source = kafka_source("127.0.0.1:9", "t", value_format="avro", avro={"schema_file": str(schema_file)})
    decoder = StreamDecoder(source, ("row_id",), DeadLetters(source, enabled=False))
    decoder._values = Evolving()
    return decoder


def test_a_block_mixing_writer_schemas_keeps_the_later_records_values(tmp_path: Path) -> None:
    events = rows(0, 4, seed=1)
    old = {k: v for k, v in events[0].items() if k != "price"}  # the first record: no price field
    block = [Record(i, json.dumps(e).encode()) for i, e in enumerate([old, *events[1:]])]
    batches, dead = _decoder(tmp_path).decode_block(0, block)
    assert dead == []
    [batch] = batches
    assert batch.dense[1:, 0].tolist() == pytest.approx([e["price"] for e in events[1:]], rel=1e-6)
    assert batch.extra["row_id"].tolist() == [0, 1, 2, 3]


def test_a_record_whose_id_changes_type_is_dead_lettered_not_coerced(tmp_path: Path) -> None:
    events = rows(0, 3, seed=2)
    events[1]["user_id"] = "u-17"  # the stream's IDs are integers; a string one lands in another bucket
    block = [Record(i, json.dumps(e).encode()) for i, e in enumerate(events)]
    batches, dead = _decoder(tmp_path).decode_block(0, block)
    assert dead == [1]
    assert sum(len(b) for b in batches) == 2


def test_the_per_event_path_keeps_a_field_its_first_event_lacks(tmp_path: Path) -> None:
    """JSON's per-message path too (taken here for the block's one message that is not JSON)."""
    events = rows(0, 3, seed=3)
    first = {k: v for k, v in events[0].items() if k != "price"}
    block = [Record(0, b"{not json")] + [
        Record(i + 1, json.dumps(e).encode()) for i, e in enumerate([first, *events[1:]])
    ]
    source = kafka_source("127.0.0.1:9", "t")
    batches, dead = StreamDecoder(source, ("row_id",), DeadLetters(source, enabled=False)).decode_block(
        0, block
    )
    assert dead == [0]
    [batch] = batches
    assert batch.dense[1:, 0].tolist() == pytest.approx([e["price"] for e in events[1:]], rel=1e-6)
