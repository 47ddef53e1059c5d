"""The hybrid runtime on the real broker, real executor processes and real files.

- exact resume: a trainer process SIGKILLed at several points and restarted trains the same rows in
  the same order as an uninterrupted run;
- the freshness guard: a burst raises the stream's share to the cap and back, and every batch row it
  deferred is trained later, once;
- malformed events are dead-lettered with their reason and never stop training;
- the published snapshot serves the trained model, dense transform included, and a checkpoint is
  resumed only with the dense transform it was trained with.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from kafka import KafkaConsumer

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.loader import load_training_spec
from airflow_provider_primus.data.tensors import TensorBatch
from airflow_provider_primus.training.checkpoints.files import CheckpointStore
from airflow_provider_primus.training.checkpoints.served import served_model
from airflow_provider_primus.training.feeds.feed import StreamFeed
from airflow_provider_primus.training.runtime import Trainer, TrainOptions
from tests.training.conftest import World

PRIMUS = str(Path(sys.executable).parent / "primus")
MALFORMED = [
    b"{not json",
    b"[1, 2, 3]",
    json.dumps({"item_id": 3, "price": 1.0, "clicked": 1, "ts": "2026-05-01T04:00:00+00:00"}).encode(),
    json.dumps({"user_id": {"a": 1}, "item_id": 3, "clicked": 1, "ts": "2026-05-01T04:00:00+00:00"}).encode(),
    b"",
]


def run_trainer(world: World, workdir: Path, training: Path, kill_at: int | None = None) -> dict[str, Any]:
    """``primus train`` as its own process; its trace (stdout) tells when to kill it."""
    command = [PRIMUS, "train", str(world.spec_path), "--training", str(training), "--workdir", str(workdir)]
    command += ["--trace", "-", "--passthrough", "row_id", "--json"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    steps: list[dict[str, Any]] = []
    result: dict[str, Any] | None = None
    killed = False
    try:
        # Read to the end even after the kill: the trainer may have traced (and checkpointed) a step
        # or two more before the signal landed, and a step's trace line is written before its
        # checkpoint, so every checkpointed step's line is still in the pipe.
        for line in proc.stdout:
            if killed and not line.endswith("\n"):
                break  # the line the kill cut short: its step was never checkpointed
            entry = json.loads(line)
            if "rows" in entry and "step" in entry:
                steps.append(entry)
                if kill_at is not None and entry["step"] >= kill_at and not killed:
                    proc.send_signal(signal.SIGKILL)
                    killed = True
            else:
                result = entry
    finally:
        proc.stdout.close()
        code = proc.wait(timeout=120)
    if kill_at is None:
        assert code == 0 and result is not None
    return {
        "steps": steps,
        "result": result,
        "checkpoint": max(CheckpointStore(workdir / "checkpoints").steps()),
    }


def test_killed_trainer_resumes_with_the_same_sequence_of_trained_rows(world: World, tmp_path: Path) -> None:
    world.produce_events(3000, seed=10)
    world.produce(MALFORMED[:2])
    world.produce_events(3000, seed=11)
    training = world.training(
        tmp_path / "training.yaml",
        batch_size=256,
        mixing={
            "window_steps": 10,
            # The wall clock: the guard's decisions over this old data are part of what must repeat.
            "freshness": {"max_lag_records": 3000, "max_event_age_s": None, "clock": "wall"},
        },
        checkpoint={"every_steps": 5, "every_s": 0},
        publish={"every_s": 0},
    )
    reference = run_trainer(world, tmp_path / "uninterrupted", training)
    assert reference["result"]["rows_trained"] == {"history": world.history_rows, "events": 6000}
    assert reference["result"]["guard_steps"] > 0  # the guard's decisions are part of what must repeat

    workdir = tmp_path / "crashing"
    combined: list[dict[str, Any]] = []
    for kill_at in (7, 33, 61):
        segment = run_trainer(world, workdir, training, kill_at=kill_at)
        resumed_from = combined[-1]["step"] if combined else 0
        assert segment["steps"][0]["step"] == resumed_from + 1
        combined += [s for s in segment["steps"] if s["step"] <= segment["checkpoint"]]
    last = run_trainer(world, workdir, training)
    combined += last["steps"]

    assert [s["step"] for s in combined] == [s["step"] for s in reference["steps"]]
    assert [s["rows"] for s in combined] == [s["rows"] for s in reference["steps"]]
    for key in ("rows_trained", "rows_scored", "dead_lettered", "steps", "deferred"):
        assert last["result"][key] == reference["result"][key], key
    assert abs(last["result"]["progressive"]["auc"] - reference["result"]["progressive"]["auc"]) < 1e-6


def test_freshness_guard_raises_the_stream_share_to_its_cap_then_back(world: World, tmp_path: Path) -> None:
    data = load_data_spec(world.spec_path)
    training = load_training_spec(
        world.training(
            tmp_path / "training.yaml",
            batch_size=256,
            mixing={
                "window_steps": 5,
                "freshness": {
                    "max_lag_records": 500,
                    "max_event_age_s": None,
                    "max_share": 0.75,
                    "clock": "wall",  # old data: auto would replay it, holding the burst back
                },
            },
            checkpoint={"every_steps": 0, "every_s": 0},
            publish={"every_s": 0},
        )
    )
    produced: list[int] = []
    trained: Counter[int] = Counter()
    per_step: list[dict[str, int]] = []

    def trace(step: int, parts: list[tuple[str, TensorBatch]]) -> None:
        rows: Counter[str] = Counter()
        for name, batch in parts:
            rows[name] += len(batch)
            trained.update(int(x) for x in batch.extra["row_id"])
        per_step.append(dict(rows))
        if step < 60:  # a steady trickle near the stream's weight (0.25 x 256)...
            produced.extend(world.produce_events(64, seed=1000 + step))
        if step == 15:  # ...and a burst while consumption is paused inside this callback
            produced.extend(world.produce_events(3000, seed=7))

    def until(trainer: Trainer) -> bool:
        stream = trainer.feeds["events"]
        assert isinstance(stream, StreamFeed)
        return (
            trainer.step > 60
            and trainer.feeds["history"].exhausted()
            and trainer.metrics.rows_trained.get("events", 0) == len(produced)
        )

    options = TrainOptions(
        workdir=tmp_path / "w", follow=True, trace=trace, until=until, passthrough=("row_id",)
    )
    result = Trainer(data, training, options).run()

    share = [s.get("events", 0) / sum(s.values()) for s in per_step]
    burst = share[16:40]
    assert max(burst) >= 0.74  # the guard lifted the stream to its cap (0.75)...
    assert result["guard_steps"] >= 5
    after = [i for i in range(16, 60) if share[i] <= 0.4]
    assert after, "the stream's share never fell back after it caught up"
    assert result["deferred"].get("history", 0) > 0  # ...while batch rows were deferred,
    history = Counter({i: 1 for i in range(world.history_rows)})
    assert Counter({k: v for k, v in trained.items() if k < world.history_rows}) == history  # not dropped
    assert sorted(k for k in trained if k >= world.history_rows) == sorted(produced)
    assert all(v == 1 for v in trained.values())
    assert any(w["guard_steps"] for w in result["windows"]) or result["guard_steps"]


def test_malformed_events_are_dead_lettered_and_training_goes_on(world: World, tmp_path: Path) -> None:
    good = world.produce_events(300, seed=3)
    pretty = json.dumps(
        {
            "row_id": 10**6,
            "user_id": 1,
            "item_id": 2,
            "price": 0.5,
            "clicked": 1,
            "ts": "2026-05-01T05:00:00Z",
        },
        indent=2,
    ).encode()  # valid JSON across several lines: must be trained, not rejected
    world.produce([*MALFORMED, pretty])
    good += world.produce_events(200, seed=4)
    data = load_data_spec(world.spec_path)
    training = load_training_spec(world.training(tmp_path / "t.yaml", mode="stream", batch_size=128))
    seen: list[int] = []
    options = TrainOptions(
        workdir=tmp_path / "w",
        passthrough=("row_id",),
        trace=lambda _s, parts: seen.extend(int(x) for _, b in parts for x in b.extra["row_id"]),
    )
    result = Trainer(data, training, options).run()
    assert result["dead_lettered"] == len(MALFORMED)
    assert sorted(seen) == sorted([*good, 10**6])
    assert result["rows_trained"] == {"events": len(good) + 1}

    consumer = KafkaConsumer(
        f"{world.topic}.dlq",
        bootstrap_servers=world.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
    )
    try:
        letters = [m for _, m in zip(range(len(MALFORMED)), consumer, strict=False)]
    finally:
        consumer.close()
    letters.sort(key=lambda m: int(dict(m.headers)["primus.offset"]))  # order of detection may differ
    assert [m.value for m in letters] == MALFORMED
    reasons = [dict(m.headers)["primus.error"].decode() for m in letters]
    assert "not valid JSON" in reasons[0] and "expected a JSON object" in reasons[1]
    assert "user_id" in reasons[2] and "schema" in reasons[3]
    assert {dict(m.headers)["primus.topic"].decode() for m in letters} == {world.topic}


def test_two_trainers_train_every_row_once_and_stay_identical(
    world: World, tmp_path: Path, new_topic: Any
) -> None:
    topic = new_topic("clicks2", partitions=2)  # one partition per trainer
    doc = yaml.safe_load(world.spec_path.read_text())
    doc["spec"]["sources"][1]["topic"] = topic
    world.spec_path.write_text(yaml.safe_dump(doc))
    world.topic = topic
    produced = world.produce_events(4000, seed=21)
    trace = tmp_path / "trace"
    command = [PRIMUS, "train", str(world.spec_path), "--workdir", str(tmp_path / "w"), "--trainers", "2"]
    command += ["--trace", str(trace), "--passthrough", "row_id", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["trainers"] == 2
    assert result["replicas_identical"]  # every replica applied the same summed gradients
    assert result["rows_trained"] == {"history": world.history_rows, "events": len(produced)}
    seen: Counter[int] = Counter()
    per_rank = []
    for rank in (0, 1):
        rows = [
            row
            for line in (tmp_path / f"trace.rank{rank}").read_text().splitlines()
            for row in json.loads(line)["rows"]
        ]
        per_rank.append(len(rows))
        seen.update(int(row[3]) for row in rows)
    assert seen == Counter(range(world.history_rows)) + Counter(produced)  # each row once, on one trainer
    assert min(per_rank) > 0.3 * sum(per_rank)  # and the work was shared


def test_holdout_window_is_evaluated_at_the_end_and_a_snapshot_is_published(
    world: World, tmp_path: Path
) -> None:
    from datetime import timedelta

    import pyarrow.parquet as pq

    from airflow_provider_primus.training.checkpoints.snapshots import latest_snapshot
    from tests.training.conftest import T0, events

    hour = T0 + timedelta(hours=4)  # just after the training window
    part = world.root / "store" / hour.strftime("%Y-%m-%d") / hour.strftime("%H")
    part.mkdir(parents=True)
    pq.write_table(events(10**7, 3000, hour, seed=99), part / "part-0.parquet")
    data = load_data_spec(world.spec_path)
    holdout = {"start": hour.isoformat(), "end": (hour + timedelta(hours=1)).isoformat()}
    training = load_training_spec(
        world.training(tmp_path / "t.yaml", mode="batch", batch_size=256, evaluation={"holdout": holdout})
    )
    trainer = Trainer(data, training, TrainOptions(workdir=tmp_path / "w"))
    result = trainer.run()
    assert result["rows_trained"] == {"history": world.history_rows}
    assert result["holdout"]["rows"] == 3000
    assert 0.5 < result["holdout"]["auc"] < 1.0  # the labels follow the IDs: a trained model ranks them
    snapshot = latest_snapshot(tmp_path / "w" / "model")
    assert snapshot is not None and snapshot.manifest["step"] == result["steps"]
    assert set(snapshot.load_state()) == set(
        Trainer(data, training, TrainOptions(workdir=tmp_path / "x")).model.state_dict()
    )
    # The snapshot describes its model, dense transform included: served from it alone, it scores
    # raw rows (heavy values, nulls) exactly as the trainer's own model does.
    assert snapshot.manifest["model"] == {
        "num_embeddings": [1009, 503],
        "num_dense": 1,
        "embedding_dim": 16,
        "bottom_mlp": [64, 16],
        "top_mlp": [64, 32],
        "dense_transform": "log1p",
        "type": "dlrm",
        "sparse": ["user_id", "item_id"],
        "dense": ["price"],
    }
    served = served_model(snapshot)
    assert served.dense_transform == "log1p"
    g = torch.Generator().manual_seed(5)
    ids = torch.stack(
        [torch.randint(0, 1009, (64,), generator=g), torch.randint(0, 503, (64,), generator=g)], 1
    )
    prices = torch.rand(64, 1, generator=g) * 10.0 ** torch.randint(0, 7, (64, 1), generator=g)
    prices[0, 0] = float("nan")
    with torch.no_grad():
        assert torch.equal(served(ids, prices), trainer.model.eval()(ids, prices))
    # A checkpoint is resumed only with the transform it was trained with.
    other = load_training_spec(
        world.training(
            tmp_path / "none.yaml",
            mode="batch",
            batch_size=256,
            evaluation={"holdout": holdout},
            model={"dense_transform": "none"},
        )
    )
    resumed = Trainer(data, other, TrainOptions(workdir=tmp_path / "w"))
    try:
        with pytest.raises(
            RuntimeError, match=r"trained with model.dense_transform: log1p; .* set it to log1p"
        ):
            resumed.restore()
    finally:
        resumed.close()


def test_a_dcn_v2_job_trains_resumes_and_is_served_as_the_published_model(
    world: World, tmp_path: Path
) -> None:
    """``model.type: dcn_v2`` trains the cross network through the same runtime: checkpointed,
    resumed from its checkpoint, and published with a record that rebuilds it for serving."""
    from airflow_provider_primus.training.checkpoints.snapshots import latest_snapshot
    from airflow_provider_primus.training.dcn_v2 import DCNv2

    data = load_data_spec(world.spec_path)
    model = {"type": "dcn_v2", "cross_layers": 2, "cross_rank": 8}
    training = load_training_spec(
        world.training(tmp_path / "t.yaml", mode="batch", batch_size=256, model=model)
    )
    trainer = Trainer(data, training, TrainOptions(workdir=tmp_path / "w", max_steps=3))
    assert isinstance(trainer.model, DCNv2) and len(trainer.model.cross.bias) == 2
    assert trainer.run()["steps"] == 3
    result = Trainer(data, training, TrainOptions(workdir=tmp_path / "w")).run()  # resumed at step 3
    assert result["rows_trained"] == {"history": world.history_rows}
    snapshot = latest_snapshot(tmp_path / "w" / "model")
    assert snapshot is not None
    record = snapshot.manifest["model"]
    assert (record["type"], record["cross_layers"], record["cross_rank"]) == ("dcn_v2", 2, 8)
    served = served_model(snapshot)
    assert isinstance(served, DCNv2)
    g = torch.Generator().manual_seed(5)
    ids = torch.stack(
        [torch.randint(0, 1009, (32,), generator=g), torch.randint(0, 503, (32,), generator=g)], 1
    )
    prices = torch.rand(32, 1, generator=g) * 100.0
    fresh = Trainer(data, training, TrainOptions(workdir=tmp_path / "w"))
    fresh.restore()
    with torch.no_grad():
        assert torch.equal(served(ids, prices), fresh.model.eval()(ids, prices))
    fresh.close()


def test_savepoints_are_acknowledged_cumulatively_one_checkpoint_for_many(tmp_path: Path) -> None:
    """A job's trainer against a real dispatcher service: every savepoint waiting when it checkpoints
    is covered by that one checkpoint; its reports repeat the newest SAVEPOINTS_REPORTED ids (so a
    lost report costs nothing) and no more; a re-sent id already covered costs no checkpoint."""
    from datetime import timedelta

    from airflow_provider_primus.data.service.dispatcher import Dispatcher
    from airflow_provider_primus.data.service.dispatcher_server import DispatcherServer
    from airflow_provider_primus.training.checkpoints.savepoints import SAVEPOINTS_REPORTED
    from airflow_provider_primus.training.feeds.mixer import MixPolicy, SourcePolicy
    from tests.training.conftest import T0, history_source

    data = load_data_spec(
        {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusData",
            "metadata": {"name": "history"},
            "spec": {
                "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=1)).isoformat()},
                "sources": [history_source(tmp_path)],
            },
        }
    )
    training = load_training_spec(
        {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusTraining",
            "metadata": {"name": "t"},
            "spec": {"mode": "batch", "batch_size": 20},
        }
    )
    server = DispatcherServer(Dispatcher([], []), "token").start()
    options = TrainOptions(workdir=tmp_path / "w", dispatcher=server.location, token="token")
    trainer = Trainer(data, training, options)
    policy = MixPolicy([SourcePolicy("history", 1.0)], batch_size=20, window_steps=10, max_stream_share=0.5)
    assert trainer.reporter is not None
    reporter = trainer.reporter

    def deliver(ids: list[str]) -> None:
        for sp in ids:
            server.send_command("trainer-0", {"type": "savepoint", "id": sp})
        want = reporter.commands.qsize() + len(ids)
        deadline = time.monotonic() + 30
        reporter.report()  # its own thread may be the one that picks them up: wait for them
        while reporter.commands.qsize() < want:
            assert time.monotonic() < deadline, "the commands never reached the trainer"
            time.sleep(0.01)

    def acknowledged() -> list[dict[str, Any]]:
        groups: list[dict[str, Any]] = server.take_reports()["trainer-0"][1]["savepoints_done"]
        return groups

    try:
        burst = [f"a{i}" for i in range(SAVEPOINTS_REPORTED + 500)]
        deliver(burst)
        trainer._between_steps(policy)
        assert trainer.checkpoints.steps() == [0]
        (group,) = acknowledged()
        assert (group["checkpoint"], group["step"]) == ("ckpt-000000000000.pt", 0)
        assert group["ids"] == burst[-SAVEPOINTS_REPORTED:]  # the newest, within the bound
        trainer.step = 7
        # The master re-sends what it did not see acknowledged (a0); a1499 is covered already.
        deliver(["a0", "b", burst[-1]])
        trainer._between_steps(policy)
        assert trainer.checkpoints.steps() == [0, 7]
        groups = acknowledged()
        assert [(g["step"], len(g["ids"])) for g in groups] == [(0, SAVEPOINTS_REPORTED - 2), (7, 2)]
        assert groups[1]["ids"] == ["a0", "b"]
        deliver([burst[-1]])
        trainer._between_steps(policy)
        assert trainer.checkpoints.steps() == [0, 7]  # nothing new to cover: no checkpoint
    finally:
        trainer.close()
        server.stop()
