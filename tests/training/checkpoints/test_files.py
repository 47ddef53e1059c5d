from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from airflow_provider_primus.training.checkpoints import files as checkpoint
from airflow_provider_primus.training.checkpoints.files import (
    CheckpointError,
    CheckpointStore,
    atomic_write_bytes,
)


def _state(step: int) -> dict[str, Any]:
    return {
        "model": {"w": torch.full((4, 3), float(step)), "b": torch.arange(3, dtype=torch.int64)},
        "optimizer": {"lr": 0.01, "betas": (0.9, 0.999)},
        "step": step,
        "note": f"step {step}",
        "seen": [1, 2, None],
    }


def _assert_state(loaded: dict[str, Any], step: int) -> None:
    expected = _state(step)
    assert torch.equal(loaded["model"]["w"], expected["model"]["w"])
    assert torch.equal(loaded["model"]["b"], expected["model"]["b"])
    assert {k: v for k, v in loaded.items() if k != "model"} == {
        k: v for k, v in expected.items() if k != "model"
    }


def test_round_trip_tensors_and_plain_python(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path / "ckpt")
    assert store.latest() is None
    assert store.steps() == []

    path = store.save(7, _state(7))

    assert path == tmp_path / "ckpt" / "ckpt-000000000007.pt"
    assert store.steps() == [7]
    latest = store.latest()
    assert latest is not None
    step, loaded = latest
    assert step == 7
    _assert_state(loaded, 7)
    assert os.listdir(tmp_path / "ckpt") == ["ckpt-000000000007.pt"]


def test_keeps_only_the_newest_by_step(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, keep=2)
    for step in (10, 20, 30, 40):
        store.save(step, _state(step))

    assert store.steps() == [30, 40]
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000000030.pt", "ckpt-000000000040.pt"]
    latest = store.latest()
    assert latest is not None
    assert latest[0] == 40


def test_truncated_newest_falls_back_to_previous_with_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = CheckpointStore(tmp_path)
    store.save(1, _state(1))
    newest = store.save(2, _state(2))
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])

    with caplog.at_level(logging.WARNING, logger=checkpoint.__name__):
        latest = store.latest()

    assert latest is not None
    step, loaded = latest
    assert step == 1
    _assert_state(loaded, 1)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "ckpt-000000000002.pt" in warnings[0].getMessage()


def test_all_checkpoints_unreadable_raises_instead_of_pretending_none(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(1, _state(1)).write_bytes(b"not a checkpoint")

    with pytest.raises(CheckpointError, match="none of the 1 checkpoints"):
        store.latest()


def test_stray_tmp_files_are_ignored_and_removed_on_next_save(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(5, _state(5))
    # What a save killed after creating its temporary file leaves: bytes under a .tmp- name only.
    stray = tmp_path / ".tmp-0123456789abcdef-ckpt-000000000006.pt"
    stray.write_bytes(b"half a checkpoint")

    assert store.steps() == [5]
    latest = store.latest()
    assert latest is not None
    assert latest[0] == 5

    store.save(6, _state(6))
    assert not stray.exists()
    assert sorted(os.listdir(tmp_path)) == ["ckpt-000000000005.pt", "ckpt-000000000006.pt"]


def test_failure_mid_save_leaves_no_final_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = CheckpointStore(tmp_path)
    store.save(1, _state(1))

    def write_half_then_fail(obj: object, f: Any) -> None:
        f.write(b"PK\x03\x04 partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", write_half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        store.save(2, _state(2))
    monkeypatch.undo()

    assert os.listdir(tmp_path) == ["ckpt-000000000001.pt"]
    latest = store.latest()
    assert latest is not None
    assert latest[0] == 1


def test_resave_of_a_step_replaces_it_atomically(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path)
    store.save(3, _state(3))
    store.save(3, _state(4))

    latest = store.latest()
    assert latest is not None
    assert latest[0] == 3
    _assert_state(latest[1], 4)


def test_atomic_write_bytes_replaces_whole_content(tmp_path: Path) -> None:
    target = tmp_path / "file.json"
    atomic_write_bytes(target, b"old")
    atomic_write_bytes(target, b"new content")

    assert target.read_bytes() == b"new content"
    assert os.listdir(tmp_path) == ["file.json"]


@pytest.mark.parametrize("keep", [0, -1])
def test_keep_must_be_positive(tmp_path: Path, keep: int) -> None:
    with pytest.raises(ValueError, match="keep"):
        CheckpointStore(tmp_path, keep=keep)
