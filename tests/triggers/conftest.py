"""Trigger tests: a files source on local disk whose partitions a test makes ready one by one (the
partition trigger and sensor), and the files-only job world of the master's tests (the job trigger)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.data.conftest import T0, files_source, hour_dir, spec_doc, write
from tests.master.conftest import job_world

__all__ = ["Lake", "job_world", "lake", "make_lake"]


@dataclass
class Lake:
    root: Path
    spec_path: Path
    hours: list[datetime]

    @property
    def start(self) -> str:
        return self.hours[0].isoformat()

    @property
    def end(self) -> str:
        return (self.hours[-1] + timedelta(hours=1)).isoformat()

    def path(self, t: datetime) -> str:
        return str(hour_dir(self.root, t))

    def paths(self) -> list[str]:
        return [self.path(t) for t in self.hours]

    def land(self, t: datetime, *, marker: bool = True) -> None:
        """A writer's output for hour ``t``: the data file, then (last, as writers do) the marker."""
        write(hour_dir(self.root, t) / "part-0.parquet", "parquet", rows=10)
        if marker:
            (hour_dir(self.root, t) / "_SUCCESS").touch()


def make_lake(tmp_path: Path, hours: int = 3, **source: Any) -> Lake:
    root = tmp_path / "lake"
    doc = spec_doc(
        [
            files_source("clicks", root, **source),
            {
                "name": "stream",
                "type": "kafka",
                "bootstrap_servers": "127.0.0.1:9092",
                "topic": "events",
                "event_time_field": "ts",
                "start": {"policy": "earliest"},
                "schema": {"sparse": ["user_id"], "label": {"column": "clicked"}},
            },
        ]
    )
    spec_path = tmp_path / "data.yaml"
    spec_path.write_text(yaml.safe_dump(doc))
    return Lake(root, spec_path, [T0 + timedelta(hours=h) for h in range(hours)])


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    """Three hourly Parquet partitions, ready when their ``_SUCCESS`` marker is written."""
    return make_lake(tmp_path, success_marker="_SUCCESS")
