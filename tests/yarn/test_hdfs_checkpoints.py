"""Checkpoints on the mini cluster's HDFS: the manifest-committed store of ``s3://``, its manifest
renamed into place, and a YARN job whose trainer is killed and resumes from the checkpoint there."""

from __future__ import annotations

import contextlib
import json
import signal
import time
import uuid

import pyarrow.fs as pafs
import pytest
import torch
import yaml

from airflow_provider_primus.data.sources.files import open_filesystem
from airflow_provider_primus.embedded.yarn import MiniYarnCluster
from airflow_provider_primus.master.jobs import submit
from airflow_provider_primus.training.checkpoints.objects import (
    ObjectCheckpointStore,
    _commit,
    checkpoint_store_for,
    latest_object_snapshot,
    publisher_for,
)
from tests.master.conftest import JobWorld
from tests.master.test_master import assert_exactly_once, ended, executor
from tests.yarn.test_job import YARN_JOB, container_process, running, until

pytestmark = [pytest.mark.yarn, pytest.mark.timeout(600)]


def hdfs_dir(cluster: MiniYarnCluster, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HADOOP_CONF_DIR", str(cluster.conf_dir))
    return f"{cluster.fs_default}/primus-tests/{uuid.uuid4().hex}"


def names(fs: pafs.FileSystem, root: str) -> list[str]:
    return sorted(i.base_name for i in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)))


def test_hdfs_checkpoints_commit_by_renaming_the_manifest(
    yarn_cluster: MiniYarnCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = hdfs_dir(yarn_cluster, monkeypatch)
    store = checkpoint_store_for(f"{uri}/ckpt", 2)
    assert isinstance(store, ObjectCheckpointStore) and store.rename
    for step in (10, 20, 30):
        store.save(step, {"w": torch.full((2,), float(step))})
    fs, root = open_filesystem(f"{uri}/ckpt")
    listed = names(fs, root)
    assert [n for n in listed if n.endswith(".json")] == ["ckpt-000000000020.json", "ckpt-000000000030.json"]
    assert len([n for n in listed if n.endswith(".pt")]) == 2
    assert not any(n.startswith("_tmp-") for n in listed)
    found = store.latest()
    assert found is not None and found[0] == 30 and torch.equal(found[1]["w"], torch.full((2,), 30.0))
    # Saving a step again (a pass's last step) replaces its manifest in one rename.
    _commit(fs, str(store.path_for(30)), b'{"again": true}', rename=True)
    assert json.loads(fs.open_input_stream(str(store.path_for(30))).readall()) == {"again": True}
    assert not any(n.startswith("_tmp-") for n in names(fs, root))

    publisher = publisher_for(f"{uri}/model", 2)
    for step in (1, 2):
        publisher.publish({"w": torch.zeros(1)}, {"step": step})
    snapshot = latest_object_snapshot(*open_filesystem(f"{uri}/model"))
    assert snapshot is not None and snapshot.version == 2 and snapshot.load_state()


def test_a_killed_trainer_resumes_from_its_checkpoint_on_hdfs_exactly(
    yarn_world: JobWorld, yarn_cluster: MiniYarnCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = hdfs_dir(yarn_cluster, monkeypatch)
    training = yaml.safe_load(yarn_world.training_path.read_text())
    training["spec"]["checkpoint"]["dir"] = f"{uri}/ckpt"
    yarn_world.training_path.write_text(yaml.safe_dump(training))
    yarn = {"am_memory": "256Mi", "conf_dir": str(yarn_cluster.conf_dir)}
    submit(yarn_world.job(**{**YARN_JOB, "backend": {"type": "yarn", "yarn": yarn}}), store=yarn_world.store)
    with running(yarn_world):
        # Past step 50: its checkpoint is committed on HDFS.
        before = until(yarn_world, lambda r: ((r.status.get("progress") or {}).get("trainer_step") or 0) > 60)
        trainer = executor(before, "trainer-0")["handle"]["ref"]["container"]
        container_process(trainer).send_signal(signal.SIGKILL)
        killed_at = time.time()
        until(yarn_world, lambda r: executor(r, "trainer-0")["incarnation"] == 1)
        record = until(yarn_world, ended)
    assert record.status["phase"] == "Succeeded", record.status["message"]
    assert executor(record, "trainer-0")["restarts"] == 1
    # The second trainer went on from a checkpoint (step 50 or later), not from the start: one it could
    # only have read from HDFS, as no checkpoint was written anywhere else.
    lines = []
    for line in (yarn_world.home / "jobs" / "job" / "trace.jsonl").read_text().splitlines():
        with contextlib.suppress(ValueError):  # the killed trainer's torn last line
            lines.append(json.loads(line))
    first_after = next(e for e in lines if e["t"] > killed_at)
    assert first_after["step"] > 50, first_after["step"]
    fs, root = open_filesystem(f"{uri}/ckpt")
    manifests = [n for n in names(fs, root) if n.endswith(".json")]
    assert manifests and len(manifests) <= 3  # keep: 3
    assert not list((yarn_world.home / "jobs" / "job").rglob("ckpt-*"))
    assert_exactly_once(yarn_world)
