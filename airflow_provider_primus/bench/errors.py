"""The one error a benchmark stops on: it did not measure what it set out to measure."""

from __future__ import annotations

from airflow_provider_primus.errors import PrimusError

__all__ = ["BenchmarkError"]


class BenchmarkError(PrimusError):
    """A run delivered other output than planned, or its job did not reach the state it measures
    (ended, failed, not in time): its figures would be meaningless, so none are printed."""
