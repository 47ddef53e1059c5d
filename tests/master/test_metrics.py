"""The master's Prometheus endpoint: a live job scraped, its values checked against the job's own
status; no token, no metrics."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from airflow_provider_primus.contracts.status import TERMINAL
from airflow_provider_primus.master.jobs import read_token, submit, wait_for
from airflow_provider_primus.master.master import Master
from airflow_provider_primus.master.store import JobRecord
from tests.master.conftest import JobWorld

pytestmark = pytest.mark.timeout(240)


def scrape(url: str, token: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    reply = httpx.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    reply.raise_for_status()
    assert reply.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted({"job": "job", **labels}.items())))]


def test_a_running_job_is_scraped_and_its_metrics_match_its_status(job_world: JobWorld) -> None:
    # An open job (follow): it trains its window, then stays up to be scraped.
    submit(job_world.job(follow=True), store=job_world.store)
    master = Master("job", job_world.store, tick_s=0.2)
    thread = threading.Thread(target=master.run, daemon=True)
    thread.start()
    try:

        def trained(r: JobRecord) -> bool:
            progress = r.status.get("progress") or {}
            figures = progress.get("trainer_metrics") or {}
            done = (figures.get("rows_trained") or {}).get("history") == job_world.rows
            return done and progress.get("acked_rows") == job_world.rows

        record = wait_for(job_world.store, "job", trained, 180)
        url = record.status["master"]["metrics"]
        assert url == record.status["master"]["api"] + "/metrics"
        assert httpx.get(url, timeout=10).status_code == 401  # the job token guards it
        bad = httpx.get(url, headers={"Authorization": "Bearer nope"}, timeout=10)
        assert bad.status_code == 401

        token = read_token("job", job_world.home)
        samples = scrape(url, token)
        status: dict[str, Any] = job_world.store.get("job").status
        assert value(samples, "primus_job_phase", phase=status["phase"]) == 1.0
        assert sum(v for (name, _), v in samples.items() if name == "primus_job_phase") == 1.0
        progress = status["progress"]
        assert value(samples, "primus_rows_acknowledged_total") == progress["acked_rows"] == job_world.rows
        assert value(samples, "primus_rows_trained_total", source="history") == job_world.rows
        assert value(samples, "primus_tasks", state="done") == progress["tasks_done"]
        assert value(samples, "primus_task_queue_depth") == progress["tasks"] - progress["tasks_done"]
        for name, ex in status["executors"].items():
            if ex["state"] != "running":
                continue
            role = ex["handle"]["role"]
            allot = ex["handle"]["allotment"]
            assert (
                value(samples, "primus_executor_cpu_allotted_cores", role=role, executor=name) == allot["cpu"]
            )
            assert (
                value(samples, "primus_executor_memory_allotted_bytes", role=role, executor=name)
                == allot["memory"]
            )
        running = sum(1 for ex in status["executors"].values() if ex["state"] == "running")
        assert sum(v for (name, labels), v in samples.items() if name == "primus_executors" and
                   ("state", "running") in labels) == running  # fmt: skip
        launched = sum(1 for e in job_world.store.events("job") if e.type == "ExecutorLaunched")
        assert value(samples, "primus_events_total", type="ExecutorLaunched") == launched
        age = value(samples, "primus_checkpoint_age_seconds")
        assert 0 <= age < 600  # the trainer checkpointed during the pass
        assert value(samples, "primus_trainer_step") == progress["trainer_step"]
        assert status["history"] and status["history"][-1]["t"] <= status["updated"]  # the charts' series
        assert (
            "history"
            not in httpx.get(
                record.status["master"]["api"] + "/v1/status", headers={"Authorization": f"Bearer {token}"}
            ).json()
        )
    finally:
        master.request({"stop": True})
        thread.join(timeout=60)
    assert job_world.store.get("job").status["phase"] in TERMINAL


def test_the_trainers_figures_and_the_autoscalers_decisions_become_metrics() -> None:
    from airflow_provider_primus.master.metrics import JobMetrics, render

    status = {
        "phase": "Running",
        "executors": {},
        "progress": {
            "tasks": 5,
            "tasks_done": 2,
            "tasks_quarantined": 1,
            "trainer_step": 42,
            "trainer_metrics": {
                "rows_trained": {"history": 100, "events": 50},
                "rows_replayed": {"history": 7},
                "rows_scored": 50,
                "freshness_s": {"p50": 1.5, "p99": 4.0},
                "progressive": {"auc": 0.71, "window_auc": None},
                "stream": {"lag": {"0": 12, "1": 0}},
            },
            "trainer_report": {"checkpoint": {"step": 40, "time": 1000.0}},
        },
    }
    counts = {
        ("ScaleDecision", None): 3,
        ("ScaleDecision", "scale_out"): 2,
        ("ScaleDecision", "resize_cpu"): 1,
    }
    collector = JobMetrics(
        "job", lambda: status, lambda: {**counts, ("Resized", None): 1}, now=lambda: 1030.0
    )
    text = render(collector).decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert value(samples, "primus_task_queue_depth") == 2
    assert value(samples, "primus_rows_replayed_total", source="history") == 7
    assert value(samples, "primus_freshness_seconds", quantile="0.99") == 4.0
    assert value(samples, "primus_progressive_auc", window="all") == 0.71
    assert ("primus_progressive_auc", (("job", "job"), ("window", "recent"))) not in samples  # None: absent
    assert value(samples, "primus_stream_lag_records", partition="0") == 12
    assert value(samples, "primus_checkpoint_age_seconds") == 30.0
    assert value(samples, "primus_scaling_decisions_total", action="scale_out") == 2
    assert value(samples, "primus_scaling_decisions_total", action="scale_in") == 0
    assert value(samples, "primus_resizes_total") == 1
