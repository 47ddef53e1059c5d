"""The job commands' tests run on the same files-only world as the master's."""

from tests.master.conftest import job_world

__all__ = ["job_world"]
