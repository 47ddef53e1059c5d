"""The main job on the embedded defaults, as one object the demo command and the end-to-end test share.

Brings up the embedded Kafka broker and Airflow (scheduler, dag-processor, triggerer, API server on
127.0.0.1, SQLite), generates a drifting click log (daily Parquet history with success markers and
a live stream produced at a fixed rate), starts the streaming trainer DAG (the long-running mixed
training job), backfills the daily DAG over several days (each day's window appended to that job)
and reports what happened: windows consumed, stream rows trained, the published model, AUC and
freshness, and whether the Primus UI page answers through Airflow's API server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import yaml

from airflow_provider_primus.embedded.airflow_local import COMPONENTS, PRIVATE_UMASK, AirflowLocal
from airflow_provider_primus.embedded.kafka import broker
from airflow_provider_primus.embedded.kafka.distribution import DEFAULT_KAFKA_VERSION, ensure_distribution
from airflow_provider_primus.process import stop_process_group, tied_to_launcher
from airflow_provider_primus.spec.status import is_terminal

JOB = "primus-streaming"
TOPIC = "clicks"
DAGS = ("primus_streaming_trainer", "primus_daily_backfill")


class DemoError(RuntimeError):
    pass


class DemoStack:
    def __init__(
        self,
        home: Path,
        dags_folder: Path,
        *,
        port: int = 8080,
        history_days: int = 4,
        stream_days: int = 2,
        rows_per_day: int = 5000,
        rate: float = 250.0,
        kafka_version: str = DEFAULT_KAFKA_VERSION,
    ) -> None:
        self.home = Path(home)
        self.dags_folder = Path(dags_folder)
        self.port = port
        self.history_days = history_days
        self.stream_days = stream_days
        self.rows_per_day = rows_per_day
        self.rate = rate
        self.kafka_version = kafka_version
        self.primus_home = self.home / "primus"
        self.world_dir = self.home / "world"
        self.kafka: broker.EmbeddedKafka | None = None
        self.airflow: AirflowLocal | None = None
        self.bootstrap = ""
        self._producer: subprocess.Popen[str] | None = None

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
        log(f"data       | stream {TOPIC}: {self.stream_days} days at {self.rate:g} rows/s")
        self._write_job(spec)

        # The live stream comes from its own process, so stopping the demo stops it cleanly too.
        code = (
            "import json, sys; from datetime import datetime; "
            "from airflow_provider_primus.gen.clicklog import World; "
            "from airflow_provider_primus.gen.events import produce_stream; "
            "a = json.loads(sys.argv[1]); a['world']['start'] = datetime.fromisoformat(a['world']['start']); "
            "world = World.from_defaults(**a['world']); "
            "print(produce_stream(world, a['bootstrap'], a['topic'], rate=a['rate']), flush=True)"
        )
        argument = {
            "world": {"history_days": self.history_days, "stream_days": self.stream_days,
                      "rows_per_day": self.rows_per_day, "start": self.world_start.isoformat()},
            "bootstrap": self.bootstrap,
            "topic": TOPIC,
            "rate": self.rate,
        }  # fmt: skip
        log_file = open(self.home / "stream-producer.log", "ab")  # noqa: SIM115 - the process owns it
        self._producer = subprocess.Popen(
            tied_to_launcher([sys.executable, "-c", code, json.dumps(argument)]),
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
            start_new_session=True,
        )
        log_file.close()
        self.first_day = world.start

    def _write_job(self, data_spec: Path) -> None:
        """The streaming job reads the same sources as the daily DAG, without a window of its own:
        history arrives as the windows the daily runs append."""
        data = yaml.safe_load(data_spec.read_text())
        data["spec"].pop("window", None)
        data["metadata"]["name"] = "clicklog-stream"
        (self.home / "streaming-data.yaml").write_text(yaml.safe_dump(data))
        training = {
            "apiVersion": "primus.dev/v1alpha1",
            "kind": "PrimusTraining",
            "metadata": {"name": "clicklog"},
            "spec": {
                "mode": "mixed",
                "batch_size": 512,
                "checkpoint": {"every_steps": 50, "every_s": 30.0},
                "publish": {"every_steps": 20, "every_s": 60.0},
            },
        }
        (self.home / "streaming-training.yaml").write_text(yaml.safe_dump(training))
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
                    "trainer": {"resources": {"cpu": 1, "memory": "2Gi"}},
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

    def backfill(self, days: int) -> tuple[str, str]:
        first = self.first_day
        last = first + timedelta(days=days - 1)
        result = self.airflow_cli(
            "backfill", "create", "--dag-id", "primus_daily_backfill",
            "--from-date", first.date().isoformat(), "--to-date", last.date().isoformat(),
            retry_locked=False,  # not idempotent (and no scheduler writes yet: see ``launch``)
        )  # fmt: skip
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

    def job_status(self) -> dict[str, Any]:
        from airflow_provider_primus.hooks.primus import PrimusHook

        record = PrimusHook().get_job(JOB)
        return record.status if record is not None else {}

    def snapshots(self) -> list[str]:
        model = self.primus_home / "jobs" / JOB / "train" / "model"
        return sorted(p.name for p in model.glob("v*")) if model.is_dir() else []

    def summary(self) -> dict[str, Any]:
        status = self.job_status()
        progress = status.get("progress") or {}
        metrics = progress.get("trainer_metrics") or {}
        return {
            "job": JOB,
            "phase": status.get("phase"),
            "windows": [
                {k: w.get(k) for k in ("start", "end", "tasks", "tasks_done", "consumed")}
                for w in status.get("windows") or []
            ],
            "acked_rows": progress.get("acked_rows"),
            "trainer_step": progress.get("trainer_step"),
            "rows_trained": metrics.get("rows_trained"),
            "auc": (metrics.get("progressive") or {}).get("window_auc"),
            "freshness_p50_s": (metrics.get("freshness_s") or {}).get("p50"),
            "samples_per_s": metrics.get("samples_per_s"),
            "snapshots": self.snapshots(),
            "stream_producer": "running" if self._producer and self._producer.poll() is None else "done",
        }

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
            if self.job_status().get("phase") is not None and not is_terminal(self.job_status().get("phase")):
                try:
                    PrimusHook(retries=2).stop_job(JOB)
                except PrimusError:
                    PrimusHook().request_stop_offline(JOB)
                self._wait_job_end(60.0)
        finally:
            try:
                if self._producer is not None and self._producer.poll() is None:
                    stop_process_group(self._producer.pid, child=self._producer, grace_s=5)
                if self.airflow is not None:
                    self.airflow.stop()
            finally:
                if self.kafka is not None:
                    self.kafka.stop()

    def _wait_job_end(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if is_terminal(self.job_status().get("phase")):
                return
            time.sleep(1.0)
