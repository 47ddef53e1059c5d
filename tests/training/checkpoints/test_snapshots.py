from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import torch

from airflow_provider_primus.training.checkpoints import snapshots as publish
from airflow_provider_primus.training.checkpoints.snapshots import (
    Publisher,
    SnapshotIntegrityError,
    latest_snapshot,
)

REPO = Path(__file__).resolve().parents[2]


def _model(i: int) -> dict[str, Any]:
    return {
        "embedding.weight": torch.full((8, 4), float(i)),
        "dense.bias": torch.arange(4, dtype=torch.float32) * i,
        "vocab": {"a": 0, "b": 1},
        "iteration": i,
    }


def test_versions_increase_and_round_trip(tmp_path: Path) -> None:
    publisher = Publisher(tmp_path / "models")
    assert latest_snapshot(tmp_path / "models") is None

    assert [publisher.publish(_model(i), {"run": "r1"}) for i in (1, 2, 3)] == [1, 2, 3]

    assert sorted(os.listdir(tmp_path / "models")) == ["v000001", "v000002", "v000003"]
    snap = latest_snapshot(tmp_path / "models")
    assert snap is not None
    assert snap.version == 3
    assert snap.path == tmp_path / "models" / "v000003"
    state = snap.load_state()
    assert torch.equal(state["embedding.weight"], torch.full((8, 4), 3.0))
    assert torch.equal(state["dense.bias"], torch.arange(4, dtype=torch.float32) * 3)
    assert state["vocab"] == {"a": 0, "b": 1}
    assert state["iteration"] == 3


def test_manifest_content(tmp_path: Path) -> None:
    before = datetime.now(UTC)
    Publisher(tmp_path).publish(_model(1), {"run": "r1", "auc": 0.75, "tags": ["daily"]})

    version_dir = tmp_path / "v000001"
    assert sorted(os.listdir(version_dir)) == ["manifest.json", "model.pt"]
    manifest = json.loads((version_dir / "manifest.json").read_text())
    model_bytes = (version_dir / "model.pt").read_bytes()
    assert manifest["run"] == "r1"
    assert manifest["auc"] == 0.75
    assert manifest["tags"] == ["daily"]
    assert manifest["version"] == 1
    assert manifest["files"] == {
        "model.pt": {"size": len(model_bytes), "sha256": hashlib.sha256(model_bytes).hexdigest()}
    }
    created = datetime.fromisoformat(manifest["created_at"])
    assert created.utcoffset() is not None
    assert created.utcoffset().total_seconds() == 0  # type: ignore[union-attr]
    assert before <= created <= datetime.now(UTC)
    snap = latest_snapshot(tmp_path)
    assert snap is not None
    assert snap.manifest == manifest


def test_reserved_and_unserializable_manifests_are_rejected_before_writing(tmp_path: Path) -> None:
    publisher = Publisher(tmp_path)
    with pytest.raises(ValueError, match="version"):
        publisher.publish(_model(1), {"version": 9})
    with pytest.raises(TypeError):
        publisher.publish(_model(1), {"when": datetime.now(UTC)})
    with pytest.raises(ValueError):
        publisher.publish(_model(1), {"auc": float("nan")})

    assert os.listdir(tmp_path) == []


def test_failure_mid_publish_leaves_nothing_visible(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    publisher = Publisher(tmp_path)
    publisher.publish(_model(1), {})

    def write_half_then_fail(obj: object, f: Any) -> None:
        f.write(b"PK\x03\x04 partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", write_half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        publisher.publish(_model(2), {})
    monkeypatch.undo()

    assert os.listdir(tmp_path) == ["v000001"]
    snap = latest_snapshot(tmp_path)
    assert snap is not None
    assert snap.version == 1


def test_half_written_and_damaged_versions_are_never_returned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    publisher = Publisher(tmp_path, keep=10)
    publisher.publish(_model(1), {})
    publisher.publish(_model(2), {})
    good = tmp_path / "v000002"
    # A publish killed before its rename: complete-looking content, but under a .tmp- name.
    crashed = tmp_path / ".tmp-v3-deadbeef"
    crashed.mkdir()
    for name in ("model.pt", "manifest.json"):
        (crashed / name).write_bytes((good / name).read_bytes())
    # Version directories damaged after publishing (or made by hand).
    (tmp_path / "v000004").mkdir()
    (tmp_path / "v000004" / "model.pt").write_bytes((good / "model.pt").read_bytes())
    (tmp_path / "v000005").mkdir()
    (tmp_path / "v000005" / "manifest.json").write_text('{"version": 5, "files": ')
    truncated = tmp_path / "v000006"
    truncated.mkdir()
    (truncated / "manifest.json").write_text(
        (good / "manifest.json").read_text().replace('"version": 2', '"version": 6')
    )
    (truncated / "model.pt").write_bytes((good / "model.pt").read_bytes()[:100])

    with caplog.at_level(logging.WARNING, logger=publish.__name__):
        snap = latest_snapshot(tmp_path)

    assert snap is not None
    assert snap.version == 2
    assert snap.load_state()["iteration"] == 2
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert "v000004" in messages
    assert "v000005" in messages
    assert "v000006" in messages
    assert "tmp" not in messages

    # The next version never reuses a number a damaged directory holds; the leftover is cleaned up.
    assert publisher.publish(_model(7), {}) == 7
    assert not crashed.exists()
    snap = latest_snapshot(tmp_path)
    assert snap is not None
    assert snap.version == 7


def test_sha_mismatch_raises(tmp_path: Path) -> None:
    Publisher(tmp_path).publish(_model(1), {})
    model_pt = tmp_path / "v000001" / "model.pt"
    data = bytearray(model_pt.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the hash can tell
    model_pt.write_bytes(bytes(data))

    snap = latest_snapshot(tmp_path)
    assert snap is not None
    with pytest.raises(SnapshotIntegrityError, match=r"sha256 .* version 1"):
        snap.load_state()


def test_prunes_oldest_versions_and_stale_tmp_dirs(tmp_path: Path) -> None:
    publisher = Publisher(tmp_path, keep=2)
    (tmp_path / ".tmp-v1-cafebabe").mkdir()
    (tmp_path / ".tmp-v1-cafebabe" / "model.pt").write_bytes(b"partial")

    for i in range(1, 5):
        publisher.publish(_model(i), {})

    assert sorted(os.listdir(tmp_path)) == ["v000003", "v000004"]
    snap = latest_snapshot(tmp_path)
    assert snap is not None
    assert snap.version == 4


@pytest.mark.parametrize("keep", [0, -3])
def test_keep_must_be_positive(tmp_path: Path, keep: int) -> None:
    with pytest.raises(ValueError, match="keep"):
        Publisher(tmp_path, keep=keep)


_WRITER = """
import sys
from pathlib import Path

import torch

from airflow_provider_primus.training.checkpoints.snapshots import Publisher

publisher = Publisher(Path(sys.argv[1]), keep=int(sys.argv[2]))
sys.stdin.readline()  # start only once the reader is polling, so the two really overlap
for i in range(1, int(sys.argv[3]) + 1):
    state = {"w": torch.full((256, 256), float(i)), "i": i}
    assert publisher.publish(state, {"i": i}) == i
"""


def test_concurrent_reader_sees_only_complete_snapshots(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A real second process publishes while this one polls: every snapshot seen must load intact.

    No warning may be logged either: ``latest_snapshot`` skips an incomplete version directory with a
    warning, so a reader that merely *survived* a torn snapshot would still fail this test.

    keep covers all versions so the check is about atomic publication; a version pruned between
    ``latest_snapshot`` and ``load_state`` is a documented FileNotFoundError, not a torn read.
    """
    versions = 20
    model_dir = tmp_path / "models"
    # stderr to a file, not a pipe: a pipe nobody drains while polling could block the writer.
    with open(tmp_path / "writer.err", "w+") as err:
        writer = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(model_dir), str(versions), str(versions)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        caplog.set_level(logging.WARNING, logger=publish.__name__)
        seen: list[int] = []
        deadline = time.monotonic() + 120
        try:
            assert writer.stdin is not None
            writer.stdin.write("go\n")
            writer.stdin.close()
            while True:
                done = writer.poll() is not None  # checked first: the last pass sees the final state
                snap = latest_snapshot(model_dir)
                if snap is not None:
                    state = snap.load_state()
                    assert state["i"] == snap.version == snap.manifest["i"]
                    assert torch.equal(state["w"], torch.full((256, 256), float(snap.version)))
                    assert not seen or snap.version >= seen[-1]
                    seen.append(snap.version)
                if done:
                    break
                assert time.monotonic() < deadline, "writer process did not finish"
        finally:
            if writer.poll() is None:
                writer.kill()
            writer.wait()
        err.seek(0)
        assert writer.returncode == 0, err.read()
    assert seen[-1] == versions
    assert caplog.records == []
    assert sorted(os.listdir(model_dir)) == [f"v{i:06d}" for i in range(1, versions + 1)]
