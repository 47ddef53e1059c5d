"""Plan and train a small window whose history, checkpoints and published model all live on the
session's real S3-compatible server, with credentials from the environment; the secret appears in
none of the run's logs, events, results or stored files."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import yaml

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.loader import load_training_spec
from airflow_provider_primus.embedded.s3 import S3State
from airflow_provider_primus.training.checkpoints.objects import latest_object_snapshot
from airflow_provider_primus.training.checkpoints.served import served_model
from airflow_provider_primus.training.runtime import Trainer, TrainOptions
from tests.s3_helpers import KEY_ENV, SECRET_ENV, admin_fs, new_bucket, storage
from tests.training.conftest import T0, events, history_source

pytestmark = pytest.mark.s3

HOURS, PER_FILE = 2, 3000


def test_train_a_window_from_s3_without_leaking_the_secret(
    s3_server: S3State,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: Any,
) -> None:
    monkeypatch.setenv(KEY_ENV, s3_server.access_key)
    monkeypatch.setenv(SECRET_ENV, s3_server.secret_key)
    root = new_bucket(s3_server)
    fs = admin_fs(s3_server)
    for h in range(HOURS):
        t = T0 + timedelta(hours=h)
        with fs.open_output_stream(f"{root}/store/{t:%Y-%m-%d}/{t:%H}/part-0.parquet") as out:
            pq.write_table(events(h * PER_FILE, PER_FILE, t, seed=h), out, row_group_size=1000)
    section = storage(s3_server)
    data = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusData",
        "metadata": {"name": "s3-history"},
        "spec": {
            "window": {"start": T0.isoformat(), "end": (T0 + timedelta(hours=HOURS)).isoformat()},
            "planning": {"target_rows_per_task": 2000, "min_rows_per_task": 1000},
            "sources": [history_source(tmp_path, uri=f"s3://{root}/store", storage=section)],
            "mixture": [{"source": "history", "weight": 1.0}],
        },
    }
    training = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusTraining",
        "metadata": {"name": "t"},
        "spec": {
            "mode": "batch",
            "batch_size": 256,
            "checkpoint": {"dir": f"s3://{root}/ckpt", "every_steps": 5, "keep": 2, "storage": section},
            "publish": {"dir": f"s3://{root}/model", "storage": section},
        },
    }
    (tmp_path / "data.yaml").write_text(yaml.safe_dump(data))
    (tmp_path / "training.yaml").write_text(yaml.safe_dump(training))
    got_events: list[tuple[str, str, dict[str, Any]]] = []
    caplog.set_level("DEBUG")
    result = Trainer(
        load_data_spec(tmp_path / "data.yaml"),
        load_training_spec(tmp_path / "training.yaml"),
        TrainOptions(workdir=tmp_path / "w", on_event=lambda *e: got_events.append(e)),
    ).run()
    assert result["rows_trained"] == {"history": HOURS * PER_FILE}

    ckpts = [i.base_name for i in fs.get_file_info(pafs.FileSelector(f"{root}/ckpt"))]
    assert len([n for n in ckpts if n.endswith(".json")]) == 2  # keep: 2
    snapshot = latest_object_snapshot(fs, f"{root}/model")
    assert snapshot is not None and snapshot.manifest["step"] == result["steps"]
    assert snapshot.load_state()
    assert served_model(snapshot).dense_transform == "log1p"  # served from the object store's manifest

    # Resuming finds the final checkpoint on the store: nothing left to train.
    again = Trainer(
        load_data_spec(tmp_path / "data.yaml"),
        load_training_spec(tmp_path / "training.yaml"),
        TrainOptions(workdir=tmp_path / "w2"),
    ).run()
    assert again["steps"] == result["steps"]

    secret = s3_server.secret_key
    out, err = capfd.readouterr()  # the data executors' output too: they inherit the descriptors
    written = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    for where, text in {
        "log": caplog.text,
        "events": json.dumps(got_events, default=str),
        "result": json.dumps(result, default=str),
        "stdout/stderr": out + err,
        "files": written,
    }.items():
        assert secret not in text, f"the secret leaked into the {where}"
