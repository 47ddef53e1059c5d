"""Row-wise tables through the trainer runtime: ``primus train --trainers 2`` with ``model.sharding``
trains on the same rows as the replicated model, in the same order, to the same model; it checkpoints
one file per shard, publishes the whole tables, and resumes from its shards."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import torch
import yaml

from airflow_provider_primus.training.checkpoints.shards import shard_path
from airflow_provider_primus.training.checkpoints.snapshots import latest_snapshot
from tests.training.conftest import T0, events, history_source

PRIMUS = str(Path(sys.executable).parent / "primus")
HOURS, PER_FILE = 2, 1500
HOLDOUT = {
    "start": (T0 + timedelta(hours=HOURS)).isoformat(),
    "end": (T0 + timedelta(hours=HOURS + 1)).isoformat(),
}


@pytest.fixture
def files_world(tmp_path: Path) -> Path:
    for h in range(HOURS + 1):  # the last hour is the held-out window
        t = T0 + timedelta(hours=h)
        part = tmp_path / "store" / t.strftime("%Y-%m-%d") / t.strftime("%H")
        part.mkdir(parents=True)
        pq.write_table(events(h * PER_FILE, PER_FILE, t, seed=h), part / "part-0.parquet", row_group_size=500)
    data = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "history"},
        "spec": {
            "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=HOURS)).isoformat()},
            "planning": {"target_rows_per_task": 500, "min_rows_per_task": 250},
            "sources": [history_source(tmp_path)],
        },
    }
    path = tmp_path / "data.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def train(data: Path, workdir: Path, sharding: dict[str, str]) -> dict[str, Any]:
    training = workdir.parent / f"{workdir.name}.yaml"
    training.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "primus.dev/v1alpha1",
                "kind": "PrimusTraining",
                "metadata": {"name": "t"},
                "spec": {
                    "mode": "batch",
                    "batch_size": 100,
                    "device": "cpu",
                    "model": {"sharding": sharding},
                    "mixing": {"shuffle": {"buffer_rows": 0}},
                    # Evaluated by every trainer: the row-wise forward is collective.
                    "evaluation": {"holdout": HOLDOUT},
                },
            }
        )
    )
    command = [PRIMUS, "train", str(data), "--training", str(training), "--workdir", str(workdir)]
    command += ["--trainers", "2", "--trace", str(workdir.parent / f"{workdir.name}.trace")]
    command += ["--passthrough", "row_id", "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=400, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def trace(root: Path, name: str, rank: int) -> list[Any]:
    return [json.loads(line)["rows"] for line in (root / f"{name}.trace.rank{rank}").read_text().splitlines()]


def test_two_row_wise_trainers_train_the_replicated_model_checkpoint_per_shard_and_resume(
    files_world: Path, tmp_path: Path
) -> None:
    row_wise = train(files_world, tmp_path / "row_wise", {"user_id": "row_wise", "item_id": "row_wise"})
    replicated = train(files_world, tmp_path / "replicated", {})
    for result in (row_wise, replicated):
        assert result["trainers"] == 2 and result["rows_trained"] == {"history": HOURS * PER_FILE}
        assert result["replicas_identical"]  # everything but the row-wise shards
    assert row_wise["holdout"]["rows"] == replicated["holdout"]["rows"] == PER_FILE
    assert row_wise["holdout"]["auc"] == pytest.approx(replicated["holdout"]["auc"], abs=1e-4)
    # The same rows on the same trainer at the same step: then the models must agree.
    for rank in (0, 1):
        assert trace(tmp_path, "row_wise", rank) == trace(tmp_path, "replicated", rank)
    got = latest_snapshot(tmp_path / "row_wise" / "model")
    want = latest_snapshot(tmp_path / "replicated" / "model")
    assert got is not None and want is not None
    got_state, want_state = got.load_state(), want.load_state()
    assert got_state.keys() == want_state.keys()
    assert got_state["embeddings.0.weight"].shape == (1009, 16)  # published whole
    for key, value in want_state.items():
        torch.testing.assert_close(got_state[key], value, rtol=1e-4, atol=1e-5)

    checkpoints = tmp_path / "row_wise" / "checkpoints"
    step = row_wise["steps"]
    for rank in (0, 1):
        assert shard_path(checkpoints, step, rank, 2).exists()
    # A rerun resumes from the shards: nothing left to train, the same model published again.
    again = train(files_world, tmp_path / "row_wise", {"user_id": "row_wise", "item_id": "row_wise"})
    assert again["steps"] == step
    last = latest_snapshot(tmp_path / "row_wise" / "model")
    assert last is not None and last.version > got.version
    for key, value in got_state.items():
        assert torch.equal(last.load_state()[key], value)
