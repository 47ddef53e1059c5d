"""``PrimusJobLink``: the task's "Primus job" button, to the job's page in the Primus UI plugin.

Operators push it as soon as the job exists (a deferred task shows it while it waits), and the
link is rebuilt from the job name on any later read.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

JOB_XCOM_KEY = "primus_job"


def job_url(name: str) -> str:
    from airflow.configuration import conf

    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    return f"{base}/primus/jobs/{quote(name)}"


class PrimusJobLink(BaseOperatorLink):
    name = "Primus job"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.sdk.bases.xcom import BaseXCom

        job = BaseXCom.get_value(ti_key=ti_key, key=JOB_XCOM_KEY)
        return job_url(str(job)) if job else ""
