"""The main job on the embedded defaults, as one object the demo command and the end-to-end test share.

Brings up the embedded Kafka broker and Airflow (scheduler, dag-processor, triggerer, API server on
127.0.0.1, SQLite), generates a drifting click log (daily Parquet history with success markers and
a stream produced live: event time = now, a steady rate with one burst, ``gen/live.py``), starts the
streaming trainer DAG (the long-running mixed training job), backfills the daily DAG over several
days (each day's window appended to that job), runs a batch-only baseline beside it (same history,
the stream only scored) and reports what happened: windows consumed, stream rows trained, the
published model, both models' AUC on the stream, freshness, the autoscaler's decisions, and
whether the Primus UI page answers through Airflow's API server.

The burst is the load the autoscaler must answer. The stream is read by the trainer itself (data
executors serve history), and trainers form a fixed data-parallel world, so the honest answer to a
stream burst is vertical: the trainer starts small (``TRAINER_CPU``), the burst makes it
compute-bound and the autoscaler raises its CPU; once it has caught up it idles and the CPU is
given back.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import yaml

from airflow_provider_primus.contracts.status import is_terminal
from airflow_provider_primus.embedded.airflow_local import COMPONENTS, PRIVATE_UMASK, AirflowLocal
from airflow_provider_primus.embedded.kafka import broker
from airflow_provider_primus.embedded.kafka.distribution import DEFAULT_KAFKA_VERSION, ensure_distribution
from airflow_provider_primus.errors import PrimusError
from airflow_provider_primus.gen.live import Schedule
from airflow_provider_primus.process import stop_process_group, tied_to_launcher

JOB = "primus-streaming"
BASELINE = "primus-streaming-batch"
TOPIC = "clicks"
DAGS = ("primus_streaming_trainer", "primus_daily_backfill")
# The trainer's CPU: small enough that the burst saturates it, with room to grow.
TRAINER_CPU, TRAINER_CPU_MAX = 0.5, 1.5


class DemoError(PrimusError):
    pass


def page_windows(page: str) -> list[str]:
    """The day windows of the job page's data-progress table, in the order it lists them."""
    return re.findall(r"<tr><td>(\d{4}-\d{2}-\d{2})</td>", page)


def missing_from_showcase(summary: dict[str, Any], page: str, *, max_freshness_s: float = 60.0) -> list[str]:
    """What the demo is meant to show and ``summary`` does not yet: fresh training (p99 within
    ``max_freshness_s``), both models' AUC on the stream, a scaling decision undone once the
    burst is over, and on the job ``page`` the baseline and the windows in time order. Empty when
    everything is there."""
    missing = []
    p99 = summary.get("freshness_p99_s")
    if p99 is None or p99 > max_freshness_s:
        missing.append(f"freshness p99 {p99} s (want <= {max_freshness_s:g})")
    baseline = summary.get("baseline") or {}
    if summary.get("window_auc") is None or baseline.get("window_auc") is None:
        missing.append(f"AUCs: mixed {summary.get('window_auc')}, batch-only {baseline.get('window_auc')}")
    ups = [d for d in summary.get("scaling") or [] if (d.get("after") or 0) > (d.get("before") or 0)]
    if not ups or not any(
        d["t_s"] > ups[0]["t_s"] and (d.get("after") or 0) < (d.get("before") or 0)
        and (d.get("action"), d.get("executor")) == (ups[0].get("action"), ups[0].get("executor"))
        for d in summary.get("scaling") or []
    ):  # fmt: skip
        missing.append(f"a scale-up then a scale-down: {summary.get('scaling')}")
    listed = page_windows(page)
    if len(listed) < len(summary.get("windows") or []) or listed != sorted(listed):
        missing.append(f"the page's windows in time order: {listed}")
    if BASELINE not in page:
        missing.append("the baseline on the job page")
    return missing


class DemoStack:
    def __init__(
        self,
        home: Path,
        dags_folder: Path,
        *,
        port: int = 8080,
        history_days: int = 4,
        stream_days: int = 60,
        rows_per_day: int = 5000,
        rate: float = 100.0,
        burst_at_s: float | None = 90.0,
        burst_s: float = 30.0,
        burst_rate: float = 4000.0,
        baseline: bool = True,
        kafka_version: str = DEFAULT_KAFKA_VERSION,
    ) -> None:
        """``rate`` rows/s of stream, ``burst_rate`` from ``burst_at_s`` seconds after the stream
        starts for ``burst_s`` (None: no burst); ``stream_days`` bounds how long the stream lasts
        (``Schedule.day_s``, 60 s of wall time per world day). ``baseline``: run the batch-only job
        beside."""
        self.home = Path(home)
        self.dags_folder = Path(dags_folder)
        self.port = port
        self.history_days = history_days
        self.stream_days = stream_days
        self.rows_per_day = rows_per_day
        self.schedule = Schedule(rate=rate, burst_at_s=burst_at_s, burst_s=burst_s, burst_rate=burst_rate)
        self.baseline = baseline
        self.kafka_version = kafka_version
        self.primus_home = self.home / "primus"
        self.world_dir = self.home / "world"
        self.kafka: broker.EmbeddedKafka | None = None
        self.airflow: AirflowLocal | None = None
        self.bootstrap = ""
        self._producer: subprocess.Popen[str] | None = None
        self.stream_started: float | None = None  # wall clock

    # --- bring-up --------------------------------------------------------------------------------

    def start(self, log: Any = print) -> None:
        os.environ["PRIMUS_HOME"] = str(self.primus_home)  # this process's hook sees the jobs too
        self.kafka = broker.EmbeddedKafka(
            ensure_distribution(self.kafka_version), self.home / "kafka", instance="demo"
        )
        state = self.kafka.start()
        self.bootstrap = state.bootstrap_servers
        log(f"kafka      | broker ready at {self.bootstrap} ({state.startup_seconds}s)")
        self._generate(log)
        self.airflow = AirflowLocal(
            self.home / "airflow",
            self.dags_folder,
            port=self.port,
            extra_env={
                "PRIMUS_HOME": str(self.primus_home),
                "PRIMUS_DEMO_JOB": str(self.home / "streaming-job.yaml"),
                "PRIMUS_DEMO_DATA": str(self.world_dir / "primus-data.yaml"),
                "PRIMUS_KAFKA_BOOTSTRAP": self.bootstrap,
            },
        )
        # Everything but the scheduler first: the CLI commands that create DAG runs (trigger, backfill)
        # then cannot race the scheduler's SQLite writes; ``launch`` starts it.
        self.airflow.start(c for c in COMPONENTS if c != "scheduler")

    def _generate(self, log: Any) -> None:
        from airflow_provider_primus.gen.clicklog import World
        from airflow_provider_primus.gen.files import write_data_spec, write_history

        # History ends today, so the live stream carries today's events and freshness reads in seconds.
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        self.world_start = today - timedelta(days=self.history_days)
        world = World.from_defaults(
            history_days=self.history_days,
            stream_days=self.stream_days,
            rows_per_day=self.rows_per_day,
            start=self.world_start,
        )
        spec = write_data_spec(world, self.world_dir, bootstrap_servers=self.bootstrap, topic=TOPIC)
        files = write_history(world, self.world_dir)
        log(f"data       | {len(files)} history days in {self.world_dir}")
        sched = self.schedule
        burst = (
            f", {sched.burst_rate:g} rows/s from {sched.burst_at_s:g} s for {sched.burst_s:g} s"
            if sched.burst_at_s is not None
            else ""
        )
        log(f"data       | stream {TOPIC}: live (event time = now), {sched.rate:g} rows/s{burst}")
        self._write_job(spec)

        self.first_day = world.start

    def _write_job(self, data_spec: Path) -> None:
        """The streaming job reads the same sources as the daily DAG, without a window of its own:
        history arrives as the windows the daily runs append."""
        data = yaml.safe_load(data_spec.read_text())
        data["spec"].pop("window", None)
        data["metadata"]["name"] = "clicklog-stream"
        (self.home / "streaming-data.yaml").write_text(yaml.safe_dump(data))
        training: dict[str, Any] = {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusTraining",
            "metadata": {"name": "clicklog"},
            "spec": {
                "mode": "mixed",
                "batch_size": 512,
                # By time only: a live stream's steps are as small as what arrived, so counting
                # steps would checkpoint and publish many times a second.
                "checkpoint": {"every_steps": 0, "every_s": 30.0},
                "publish": {"every_steps": 0, "every_s": 20.0},
            },
        }
        (self.home / "streaming-training.yaml").write_text(yaml.safe_dump(training))
        batch_training = {**training, "metadata": {"name": "clicklog-batch"}}
        batch_training["spec"] = {**training["spec"], "mode": "batch"}
        (self.home / "baseline-training.yaml").write_text(yaml.safe_dump(batch_training))
        # The baseline reads the same history as its own window (the days the backfill appends to
        # the main job) and the same stream, which batch mode only scores.
        baseline = {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusJob",
            "metadata": {"name": BASELINE},
            "spec": {
                "data": str(data_spec),
                "training": "baseline-training.yaml",
                "follow": True,
                "scaling": {"enabled": False},
                "roles": {
                    "data": {"resources": {"cpu": 0.5, "memory": "1Gi"}},
                    "trainer": {"resources": {"cpu": 0.5, "memory": "2Gi"}},
                },
            },
        }
        (self.home / "baseline-job.yaml").write_text(yaml.safe_dump(baseline))
        job = {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusJob",
            "metadata": {"name": JOB},
            "spec": {
                "data": "streaming-data.yaml",
                "training": "streaming-training.yaml",
                "follow": True,
                "roles": {
                    "data": {"replicas": {"min": 1, "max": 2}, "resources": {"cpu": 1, "memory": "1Gi"}},
                    "trainer": {
                        "resources": {
                            "cpu": TRAINER_CPU,
                            "memory": "2Gi",
                            "bounds": {"cpu": {"min": TRAINER_CPU, "max": TRAINER_CPU_MAX}},
                        }
                    },
                },
            },
        }
        (self.home / "streaming-job.yaml").write_text(yaml.safe_dump(job))

    # --- Airflow -----------------------------------------------------------------------------------

    def airflow_cli(
        self, *args: str, timeout_s: float = 120.0, retry_locked: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """An Airflow CLI command; an idempotent one is retried while SQLite stays locked."""
        assert self.airflow is not None
        for _ in range(10 if retry_locked else 1):
            result = subprocess.run(
                self.airflow._airflow(*args),
                env=self.airflow.env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
                umask=PRIVATE_UMASK,  # like the components: what it writes in the home is owner-only
            )
            if result.returncode == 0 or "database is locked" not in result.stdout + result.stderr:
                return result
            time.sleep(2.0)
        return result

    def launch(self, days: int, log: Any = print) -> tuple[str, str]:
        """Unpause the DAGs, start the streaming trainer, create the backfill, then the scheduler."""
        assert self.airflow is not None
        self.unpause()
        self.trigger_streaming()
        if self.baseline:
            self.start_baseline()
        self.start_stream()
        first, last = self.backfill(days)
        self.airflow.start_component("scheduler")
        self.airflow.wait_ready()
        log(
            f"airflow    | ready at {self.airflow.url} (user admin, password in {self.airflow.password_file})"
        )
        return first, last

    def unpause(self, timeout_s: float = 180.0) -> None:
        """Once the dag-processor has parsed them (unpause fails until then)."""
        deadline = time.monotonic() + timeout_s
        while True:
            for dag_id in DAGS:
                self.airflow_cli("dags", "unpause", dag_id)
            listed = self.airflow_cli("dags", "list", "-o", "json")
            # Airflow's warnings share stdout with the JSON: take the line that is the list.
            rows = next((line for line in listed.stdout.splitlines() if line.startswith("[")), "[]")
            try:
                paused = {d["dag_id"]: d["is_paused"] for d in json.loads(rows)}
            except ValueError:
                paused = {}
            if all(paused.get(dag_id) in (False, "False") for dag_id in DAGS):
                return
            if time.monotonic() > deadline:
                raise DemoError(f"cannot unpause {DAGS}: {paused}; {listed.stderr[-1000:]}")
            time.sleep(2.0)

    def trigger_streaming(self) -> None:
        result = self.airflow_cli("dags", "trigger", "primus_streaming_trainer")
        if result.returncode != 0:
            raise DemoError(f"triggering the streaming trainer failed: {result.stderr[-2000:]}")

    def start_stream(self) -> None:
        """The live producer, in its own process group so stopping the demo stops it cleanly. Started
        with the jobs rather than with the data: what it sends before a trainer reads it only ages."""
        from airflow_provider_primus.gen.events import ensure_topic

        ensure_topic(self.bootstrap, TOPIC)  # before any trainer looks for it
        argument = {
            "world": {"history_days": self.history_days, "stream_days": self.stream_days,
                      "rows_per_day": self.rows_per_day, "start": self.world_start.isoformat()},
            "bootstrap": self.bootstrap,
            "topic": TOPIC,
            "schedule": self.schedule.to_dict(),
        }  # fmt: skip
        log_file = open(self.home / "stream-producer.log", "ab")  # noqa: SIM115 - the process owns it
        self._producer = subprocess.Popen(
            tied_to_launcher(
                [sys.executable, "-m", "airflow_provider_primus.gen.live", json.dumps(argument)]
            ),
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
            start_new_session=True,
        )
        log_file.close()
        self.stream_started = time.time()

    def start_baseline(self) -> None:
        """The batch-only shadow: submitted directly, since it is the demo's yardstick, not a model
        anyone deploys; its label puts its AUC on the main job's page."""
        from airflow_provider_primus.hooks.primus import PrimusHook
        from airflow_provider_primus.plugins.status import BASELINE_LABEL

        PrimusHook().submit_job(self.home / "baseline-job.yaml", labels={BASELINE_LABEL: JOB})

    def backfill(self, days: int) -> tuple[str, str]:
        first = self.first_day
        last = first + timedelta(days=days - 1)
        for _ in range(5):
            result = self.airflow_cli(
                "backfill", "create", "--dag-id", "primus_daily_backfill",
                "--from-date", first.date().isoformat(), "--to-date", last.date().isoformat(),
                retry_locked=False,  # retried here, knowing what a retry may find
            )  # fmt: skip
            out = result.stdout + result.stderr
            if result.returncode == 0 or "database is locked" not in out:
                break
            # The creation is one transaction, rolled back when SQLite stays locked (the
            # dag-processor writes meanwhile): try again; a backfill found running is ours.
            time.sleep(2.0)
            again = self.airflow_cli("dags", "list-runs", "primus_daily_backfill", "-o", "json")
            if "backfill__" in again.stdout:
                return first.isoformat(), last.isoformat()
        if result.returncode != 0:
            raise DemoError(f"backfill create failed: {result.stdout[-2000:]}{result.stderr[-2000:]}")
        return first.isoformat(), last.isoformat()

    def token(self) -> str:
        """An Airflow JWT for the admin user (SimpleAuthManager), as the UI would hold."""
        assert self.airflow is not None
        passwords = json.loads(self.airflow.password_file.read_text())
        response = httpx.post(
            f"{self.airflow.url}/auth/token",
            json={"username": "admin", "password": passwords["admin"]},
            timeout=10.0,
        )
        response.raise_for_status()
        token: str = response.json()["access_token"]
        return token

    def plugin_page(self, path: str = f"/primus/jobs/{JOB}") -> tuple[int, str]:
        assert self.airflow is not None
        response = httpx.get(
            f"{self.airflow.url}{path}", headers={"Authorization": f"Bearer {self.token()}"}, timeout=10.0
        )
        return response.status_code, response.text

    # --- watching the job ----------------------------------------------------------------------------

    def job_status(self, name: str = JOB) -> dict[str, Any]:
        from airflow_provider_primus.hooks.primus import PrimusHook

        record = PrimusHook().get_job(name)
        return record.status if record is not None else {}

    def snapshots(self) -> list[str]:
        model = self.primus_home / "jobs" / JOB / "train" / "model"
        return sorted(p.name for p in model.glob("v*")) if model.is_dir() else []

    def scaling(self) -> list[dict[str, Any]]:
        """The autoscaler's decisions for the main job, from its event log: seconds since the stream
        started, action, executor, before -> after."""
        from airflow_provider_primus.contracts.status import EventType
        from airflow_provider_primus.hooks.primus import PrimusHook

        t0 = self.stream_started or 0.0
        return [
            {
                "t_s": round(ev.t - t0, 1),
                **{k: ev.data.get(k) for k in ("action", "role", "executor", "before", "after")},
            }
            for ev in PrimusHook().store.events(JOB)
            if ev.type == EventType.SCALE_DECISION.value
        ]

    @staticmethod
    def _aucs(status: dict[str, Any]) -> dict[str, Any]:
        metrics = (status.get("progress") or {}).get("trainer_metrics") or {}
        progressive = metrics.get("progressive") or {}
        return {
            "auc": progressive.get("auc"),
            "window_auc": progressive.get("window_auc"),
            "rows_scored": metrics.get("rows_scored"),
        }

    def summary(self) -> dict[str, Any]:
        status = self.job_status()
        progress = status.get("progress") or {}
        metrics = progress.get("trainer_metrics") or {}
        freshness = metrics.get("freshness_s") or {}
        out = {
            "job": JOB,
            "phase": status.get("phase"),
            "windows": [
                {k: w.get(k) for k in ("start", "end", "tasks", "tasks_done", "consumed")}
                for w in status.get("windows") or []
            ],
            "acked_rows": progress.get("acked_rows"),
            "trainer_step": progress.get("trainer_step"),
            "rows_trained": metrics.get("rows_trained"),
            **self._aucs(status),
            "freshness_p50_s": freshness.get("p50"),
            "freshness_p99_s": freshness.get("p99"),
            "samples_per_s": metrics.get("samples_per_s"),
            "snapshots": self.snapshots(),
            "scaling": self.scaling(),
            "stream_s": round(time.time() - self.stream_started, 1) if self.stream_started else None,
            "stream_producer": "running" if self._producer and self._producer.poll() is None else "done",
        }
        if self.baseline:
            out["baseline"] = {"job": BASELINE, **self._aucs(self.job_status(BASELINE))}
        return out

    def wait(
        self, done: Any, timeout_s: float, what: str, log: Any = print, every_s: float = 15.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        last = 0.0
        while True:
            summary = self.summary()
            if done(summary):
                return summary
            assert self.airflow is not None
            if dead := self.airflow.exited():
                raise DemoError(f"Airflow component(s) exited: {dead}; see {self.airflow.log_dir}")
            if time.monotonic() > deadline:
                raise DemoError(f"timed out waiting for {what}; last: {json.dumps(summary)}")
            if time.monotonic() - last >= every_s:
                log(f"primus     | {what}: {json.dumps(summary)}")
                last = time.monotonic()
            time.sleep(2.0)

    # --- tear-down -----------------------------------------------------------------------------------

    def stop(self) -> None:
        from airflow_provider_primus.hooks.primus import PrimusError, PrimusHook

        try:
            running = [n for n in (JOB, BASELINE) if not is_terminal(self.job_status(n).get("phase"))]
            running = [n for n in running if self.job_status(n).get("phase") is not None]
            for name in running:
                try:
                    PrimusHook(retries=2).stop_job(name)
                except PrimusError:
                    PrimusHook().request_stop_offline(name)
            for name in running:
                self._wait_job_end(name, 60.0)
        finally:
            try:
                if self._producer is not None and self._producer.poll() is None:
                    stop_process_group(self._producer.pid, child=self._producer, grace_s=5)
                if self.airflow is not None:
                    self.airflow.stop()
            finally:
                if self.kafka is not None:
                    self.kafka.stop()

    def _wait_job_end(self, name: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if is_terminal(self.job_status(name).get("phase")):
                return
            time.sleep(1.0)
