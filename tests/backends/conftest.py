"""Backend tests run on the files-only job world of the master's tests."""

from tests.master.conftest import job_world

__all__ = ["job_world"]
