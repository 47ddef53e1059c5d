"""Checkpoints and published models on the session's real S3-compatible server: committed by a
manifest PUT after a uniquely named payload, so a half-written one is never picked, and pruned by
``keep``."""

from __future__ import annotations

import json
from typing import Any

import pyarrow.fs as pafs
import pytest
import torch

from airflow_provider_primus.contracts.storage import ObjectStorage
from airflow_provider_primus.embedded.s3 import S3State
from airflow_provider_primus.training.checkpoints.files import CheckpointStore
from airflow_provider_primus.training.checkpoints.objects import (
    ObjectCheckpointStore,
    ObjectPublisher,
    checkpoint_store_for,
    latest_object_snapshot,
    publisher_for,
)
from airflow_provider_primus.training.checkpoints.snapshots import Publisher, SnapshotIntegrityError
from tests.s3_helpers import KEY_ENV, SECRET_ENV, admin_fs, new_bucket, storage

pytestmark = pytest.mark.s3


@pytest.fixture
def settings(s3_server: S3State, monkeypatch: pytest.MonkeyPatch) -> ObjectStorage:
    monkeypatch.setenv(KEY_ENV, s3_server.access_key)
    monkeypatch.setenv(SECRET_ENV, s3_server.secret_key)
    return ObjectStorage.model_validate(storage(s3_server))


def names(fs: pafs.FileSystem, root: str) -> list[str]:
    return sorted(i.base_name for i in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)))


def state(step: int) -> dict[str, Any]:
    return {"step": step, "w": torch.full((3,), float(step))}


def test_local_paths_keep_their_stores(tmp_path: Any) -> None:
    assert isinstance(checkpoint_store_for(tmp_path / "c", 2), CheckpointStore)
    assert isinstance(publisher_for(str(tmp_path / "m"), 2), Publisher)


def test_checkpoints_resume_from_the_newest_committed_and_keep_the_newest(
    s3_server: S3State, settings: ObjectStorage
) -> None:
    bucket = new_bucket(s3_server)
    store = checkpoint_store_for(f"s3://{bucket}/run/ckpt", 2, settings)
    assert isinstance(store, ObjectCheckpointStore)
    assert store.latest() is None
    for step in (10, 20, 30):
        store.save(step, state(step))
    assert store.steps() == [20, 30]
    found = store.latest()
    assert found is not None and found[0] == 30 and torch.equal(found[1]["w"], torch.full((3,), 30.0))
    fs = admin_fs(s3_server)
    listed = names(fs, f"{bucket}/run/ckpt")
    assert [n for n in listed if n.endswith(".json")] == ["ckpt-000000000020.json", "ckpt-000000000030.json"]
    assert len([n for n in listed if n.endswith(".pt")]) == 2, "old payloads are deleted with their manifests"
    assert store.path_for(30).name == "ckpt-000000000030.json"


def test_a_half_written_checkpoint_is_never_picked(s3_server: S3State, settings: ObjectStorage) -> None:
    bucket = new_bucket(s3_server)
    store = checkpoint_store_for(f"s3://{bucket}/ckpt", 3, settings)
    store.save(5, state(5))
    fs = admin_fs(s3_server)
    # A trainer killed after its payload reached the store but before the manifest: an orphan.
    with fs.open_output_stream(f"{bucket}/ckpt/ckpt-000000000009-0123456789abcdef.pt") as out:
        out.write(b"half a checkpoint")
    found = store.latest()
    assert found is not None and found[0] == 5
    # A manifest whose payload is damaged (size/hash mismatch) falls back to the one before.
    store.save(7, state(7))
    manifest = json.loads(fs.open_input_stream(f"{bucket}/ckpt/ckpt-000000000007.json").readall())
    with fs.open_output_stream(f"{bucket}/ckpt/{manifest['object']}") as out:
        out.write(b"flipped")
    found = store.latest()
    assert found is not None and found[0] == 5
    store.save(8, state(8))  # the next save garbage-collects the orphan
    assert "ckpt-000000000009-0123456789abcdef.pt" not in names(fs, f"{bucket}/ckpt")


def test_published_models_are_versioned_verified_and_pruned(
    s3_server: S3State, settings: ObjectStorage
) -> None:
    bucket = new_bucket(s3_server)
    publisher = publisher_for(f"s3://{bucket}/model", 2, settings)
    assert isinstance(publisher, ObjectPublisher)
    fs = admin_fs(s3_server)
    for step in (1, 2):
        publisher.publish(state(step), {"step": step})
    # A publish that died before its manifest: version 3's payload with no manifest is invisible.
    with fs.open_output_stream(f"{bucket}/model/v000003/model-0123456789abcdef.pt") as out:
        out.write(b"partial")
    snap = latest_object_snapshot(publisher.fs, f"{bucket}/model")
    assert snap is not None and snap.version == 2 and snap.manifest["step"] == 2
    assert torch.equal(snap.load_state()["w"], torch.full((3,), 2.0))
    assert publisher.publish(state(4), {"step": 4}) == 4  # past the orphan's version
    assert names(fs, f"{bucket}/model") == ["v000002", "v000004"]
    snap = latest_object_snapshot(publisher.fs, f"{bucket}/model")
    assert snap is not None and snap.version == 4
    payload = snap.manifest["files"]["model.pt"]["object"]
    with fs.open_output_stream(f"{bucket}/model/v000004/{payload}") as out:
        out.write(b"bit rot")
    with pytest.raises(SnapshotIntegrityError, match="version 4"):
        snap.load_state()
