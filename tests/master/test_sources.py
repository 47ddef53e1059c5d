"""A job reading several sources: two files sources through the job's one data service and two
Kafka topics, mixed by their weights and priorities, every row trained once, through a trainer's
kill and resume; windows appended to a running job name the files source they belong to."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml

from airflow_provider_primus.data.sources.kafka import produce
from airflow_provider_primus.master.client import ControlClient, ControlError
from airflow_provider_primus.master.jobs import read_token, submit
from tests.master.conftest import JobWorld
from tests.master.test_master import SLOW_DATA, ended, executor, running, slowed, until
from tests.master.test_trainers import group
from tests.training.conftest import SCHEMA, T0, events, history_source, to_json

pytestmark = pytest.mark.timeout(300)

HISTORY_ROWS = 5000  # the world's first hour: row ids 0..4999
RECENT = 100_000  # the second files source's row ids start here
RECENT_ROWS = 2000
TOPIC_ROWS = {"clicks": (200_000, 1000), "views": (300_000, 600)}  # first id, records


def write_recent(root: Path, hours: range) -> None:
    """The second files source, ``recent``: hourly Parquet under ``root/recent``."""
    for h in hours:
        t = T0 + timedelta(hours=h)
        part = root / "recent" / t.strftime("%Y-%m-%d") / t.strftime("%H")
        part.mkdir(parents=True)
        table = events(RECENT + h * RECENT_ROWS, RECENT_ROWS, t, seed=50 + h)
        pq.write_table(table, part / "part-0.parquet", row_group_size=500)


def several_sources(world: JobWorld, bootstrap: str | None, new_topic: Callable[..., str] | None) -> None:
    """The world's data as two files sources (``history``'s first hour, ``recent``) and, with a
    broker, two topics (``clicks``, ``views``), each with its weight and priority; mixed training."""
    write_recent(world.root, range(1))
    data: dict[str, Any] = yaml.safe_load(world.data_path.read_text())
    data["spec"]["window"]["end"] = (T0 + timedelta(hours=1)).isoformat()
    data["spec"]["sources"] = [
        history_source(world.root),
        {**history_source(world.root), "name": "recent", "uri": f"file://{world.root}/recent"},
    ]
    data["spec"]["mixture"] = [
        {"source": "history", "weight": 0.4, "priority": 0},
        {"source": "recent", "weight": 0.3, "priority": 1},
    ]
    if bootstrap is not None and new_topic is not None:
        for name, (first, rows) in TOPIC_ROWS.items():
            topic = new_topic(name, partitions=2)
            produce(bootstrap, topic, to_json(events(first, rows, T0, seed=len(name))))
            data["spec"]["sources"].append(
                {
                    "name": name,
                    "type": "kafka",
                    "bootstrap_servers": bootstrap,
                    "topic": topic,
                    "event_time_field": "ts",
                    "start": {"policy": "earliest"},
                    "group_id": f"{topic}-trainer",
                    "schema": SCHEMA,
                }
            )
        data["spec"]["mixture"] += [
            {"source": "clicks", "weight": 0.2, "priority": 2},
            {"source": "views", "weight": 0.1, "priority": 0},
        ]
    world.data_path.write_text(yaml.safe_dump(data))
    training = yaml.safe_load(world.training_path.read_text())
    training["spec"]["mode"] = "mixed" if bootstrap is not None else "batch"
    # Per source, rows of this one step at a time: the four mix in every step.
    training["spec"]["batch_size"] = 40
    world.training_path.write_text(yaml.safe_dump(training))


def planned() -> dict[str, set[int]]:
    ranges = {
        "history": range(HISTORY_ROWS),
        "recent": range(RECENT, RECENT + RECENT_ROWS),
        **{name: range(first, first + rows) for name, (first, rows) in TOPIC_ROWS.items()},
    }
    return {name: set(r) for name, r in ranges.items()}


def trained_by_source(trace: Path) -> dict[str, list[int]]:
    """Each source's rows as the job's model holds them (the trace's last record of each step)."""
    steps: dict[int, list[list[Any]]] = {}
    for line in trace.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # the torn last line of a killed trainer
        steps[entry["step"]] = entry["rows"]
    out: dict[str, list[int]] = {}
    for step in sorted(steps):
        for row in steps[step]:
            out.setdefault(row[0], []).append(row[3])
    return out


def assert_each_source_once(trained: dict[str, list[int]]) -> None:
    """The multiset of sample IDs of each source equals its planned rows (or produced records)."""
    want = planned()
    assert set(trained) == set(want)
    for name, rows in trained.items():
        duplicates = [r for r, n in Counter(rows).items() if n > 1]
        assert not duplicates, f"{name}: {len(duplicates)} rows trained twice"
        assert set(rows) == want[name], f"{name}: {len(rows)} rows trained, {len(want[name])} planned"


def test_two_files_sources_and_two_topics_train_every_row_once_through_a_kill(
    job_world: JobWorld, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    several_sources(job_world, kafka_broker.bootstrap_servers, new_topic)
    submit(job_world.job(**SLOW_DATA), store=job_world.store)
    with running(job_world) as master:
        with slowed(job_world, master):
            until(job_world, lambda r: (r.status["progress"].get("trainer_step") or 0) > 60)
            os.kill(executor(job_world.store.get("job"), "trainer-0")["handle"]["ref"]["pid"], signal.SIGKILL)
            until(job_world, lambda r: executor(r, "trainer-0")["incarnation"] == 1)
        record = until(job_world, ended, timeout_s=240)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert executor(record, "trainer-0")["restarts"] == 1
    assert_each_source_once(trained_by_source(job_world.home / "jobs" / "job" / "trace.jsonl"))
    want = planned()
    progress = record.status["progress"]
    assert progress["sources"] == ["history", "recent"]
    assert {n: (s["rows"], s["acked_rows"]) for n, s in progress["by_source"].items()} == {
        "history": (HISTORY_ROWS, HISTORY_ROWS),
        "recent": (RECENT_ROWS, RECENT_ROWS),
    }
    assert progress["acked_rows"] == HISTORY_ROWS + RECENT_ROWS  # the topics are not the data service's
    rows_trained = progress["trainer_metrics"]["rows_trained"]
    assert rows_trained == {name: len(rows) for name, rows in want.items()}


def test_a_window_names_its_files_source_and_an_unknown_one_is_refused(job_world: JobWorld) -> None:
    several_sources(job_world, None, None)
    write_recent(job_world.root, range(1, 2))  # recent's second hour: ids 102000..103999
    submit(job_world.job(follow=True), store=job_world.store)
    with running(job_world) as master:
        first = HISTORY_ROWS + RECENT_ROWS
        until(job_world, lambda r: r.status.get("progress", {}).get("acked_rows") == first)
        client = ControlClient(master.api.url, read_token("job"))
        span = {"start": (T0 + timedelta(hours=1)).isoformat(), "end": (T0 + timedelta(hours=2)).isoformat()}
        for source, words in [
            ("recnt", "source: no files source named 'recnt' in data 'history'; did you mean 'recent'?"),
            (None, "source: name the files source this window belongs to (data 'history' has 2: "),
        ]:
            with pytest.raises(ControlError) as exc:
                client.append_window(span["start"], span["end"], source)
            assert exc.value.status == 422 and words in str(exc.value), str(exc.value)
        answer = client.append_window(span["start"], span["end"], "recent")
        assert answer["request"]["window"] == {**span, "source": "recent"}
        record = until(job_world, lambda r: r.status["progress"]["acked_rows"] == first + RECENT_ROWS)
        (window,) = record.status["windows"]
        assert (window["source"], window["sources"], window["rows"]) == ("recent", ["recent"], RECENT_ROWS)
        assert record.status["progress"]["by_source"]["recent"]["acked_rows"] == 2 * RECENT_ROWS

        def trained(r: Any) -> dict[str, int]:  # the trainer's figures (rows handed over may still wait)
            return dict(((r.status["progress"].get("trainer_metrics") or {}).get("rows_trained")) or {})

        until(job_world, lambda r: trained(r).get("recent") == 2 * RECENT_ROWS)
        master.request({"stop": True})
        record = until(job_world, ended)
    assert record.status["phase"] == "Stopped"
    rows = trained_by_source(job_world.home / "jobs" / "job" / "trace.jsonl")
    assert sorted(rows["recent"]) == list(range(RECENT, RECENT + 2 * RECENT_ROWS))
    assert sorted(rows["history"]) == list(range(HISTORY_ROWS))


def test_two_trainers_share_every_source_exactly_once(
    job_world: JobWorld, kafka_broker: Any, new_topic: Callable[..., str]
) -> None:
    """Two trainers: the files sources' rows claimed through the one data service, each topic's two
    partitions one per trainer; every source's rows trained once by the two together."""
    several_sources(job_world, kafka_broker.bootstrap_servers, new_topic)
    submit(job_world.job(**group(2)), store=job_world.store)
    with running(job_world):
        record = until(job_world, ended, timeout_s=240)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    trained: dict[str, list[int]] = {}
    root = job_world.home / "jobs" / "job"
    for rank in (0, 1):
        for name, rows in trained_by_source(root / f"trace.jsonl.rank{rank}").items():
            trained.setdefault(name, []).extend(rows)
    assert_each_source_once(trained)
