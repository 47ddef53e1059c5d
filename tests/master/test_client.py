"""The control client's reading of a server's answer (its retries run against real masters in
``tests/hooks/test_primus_hook_retries.py``)."""

from __future__ import annotations

import email.utils
import time

from airflow_provider_primus.master.client import retry_after_s


def test_retry_after_in_seconds_or_as_an_http_date() -> None:
    assert retry_after_s("3") == 3.0
    assert retry_after_s(None) is None and retry_after_s("soon") is None
    later = retry_after_s(email.utils.formatdate(time.time() + 30, usegmt=True))
    assert later is not None and 25 <= later <= 30
    assert retry_after_s(email.utils.formatdate(time.time() - 30, usegmt=True)) == 0.0
