"""``PrimusDoctorOperator``: a DAG task that checks a worker can run Primus jobs.

It runs the same checks as ``primus doctor`` except the metadata DB (Airflow 3 tasks do not talk to
the DB directly; the scheduler already proves it) and fails the task naming what is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from airflow_provider_primus.buildcache.kafka import DEFAULT_KAFKA_VERSION
from airflow_provider_primus.diagnostics import healthy, run_checks
from airflow_provider_primus.errors import PrimusError


class PrimusWorkerNotReady(PrimusError):
    """The worker lacks something a Primus job needs."""


class PrimusDoctorOperator(BaseOperator):
    """Fail the task, naming what is missing, unless this worker can run Primus jobs; returns (XCom)
    each check's result.

    :param kafka_version: the Kafka distribution the embedded broker needs (templated).
    :param cache_dir: the shared jar cache to check (templated; default: ``$PRIMUS_CACHE_DIR``).
    """

    template_fields: Sequence[str] = ("kafka_version", "cache_dir")
    ui_color = "#d8e8f5"

    def __init__(
        self, *, kafka_version: str = DEFAULT_KAFKA_VERSION, cache_dir: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.kafka_version = kafka_version
        self.cache_dir = cache_dir

    def execute(self, context: Any) -> dict[str, Any]:
        cache = Path(self.cache_dir) if self.cache_dir else None
        checks = run_checks(kafka_version=self.kafka_version, cache=cache, airflow_db=False)
        for check in checks:
            self.log.info("%s %s: %s", "ok" if check.ok else "MISSING", check.name, check.detail)
        if not healthy(checks):
            missing = "; ".join(f"{c.name} ({c.fix})" for c in checks if not c.ok and c.required)
            raise PrimusWorkerNotReady(f"worker is missing: {missing}")
        return {c.name: c.ok for c in checks}
