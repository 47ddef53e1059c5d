"""``primus bench faults``: a mixed follow-mode job under injected faults, accounted row by row.

Each trial builds its own world (a real broker on its own work dir, a click log's history as
Parquet and its stream in Kafka), runs a PrimusJob (history + stream, following) under a master with
local executors, and injects faults while it trains:

* a broker outage in the middle of the history pass: the broker is stopped and started again on
  the same port and data after ``outage_s`` (what ``primus kafka down`` / ``up`` does), or paused
  (SIGSTOP, then SIGCONT: a hung broker whose connections stay open);
* a kill: the trainer or a data executor is SIGKILLed once the stream trains, before the outage
  (its restart is awaited);
* a changed file: once the job has planned, the last history day's file is rewritten in place with
  the same schema and row count but other rows (sample ids never planned). Its task must be
  quarantined with the reason, none of its new rows trained, every other row trained once.
* a hang (the ``hung-executor`` trial): the only data executor is stopped with SIGSTOP, alive for
  the backend and serving nothing, with history left to train; the master must declare it hung
  (``ExecutorHung``, after the data role's ``hang_timeout_s``, ``HANG_TIMEOUT_S`` here), kill and
  replace it. ``hang_detected_s`` is the time from the SIGSTOP to that event (the timeout runs from
  the last heartbeat, up to a second before the SIGSTOP), ``recovery_s`` the time from the event to
  the first history step trained after it.

Stream records are produced in two halves, before the outage and right after the broker returns, so
``recovery_s`` is the time from the broker's return to the first step that trained a record of the
second half. The trainer's trace names every row of every step; a step re-trained after a restart
counts once (the model kept its last version), so what the trace holds is what the model learned:
``rows_lost`` and ``rows_duplicated`` compare it with the planned history and the produced stream.
A trainer restart that no kill caused is a crash.

The test suite runs single trials of this (tests/bench/test_bench_faults.py); the benchmark runs
several seeded ones and prints the totals.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import random
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from airflow_provider_primus.bench.errors import BenchmarkError
from airflow_provider_primus.contracts.status import TERMINAL
from airflow_provider_primus.data.sources.kafka import produce
from airflow_provider_primus.embedded.kafka import EmbeddedKafka, ensure_distribution
from airflow_provider_primus.embedded.kafka.broker import free_port
from airflow_provider_primus.gen.clicklog import World
from airflow_provider_primus.gen.events import encode_events, ensure_topic, iter_stream
from airflow_provider_primus.gen.files import write_data_spec, write_history
from airflow_provider_primus.master.jobs import submit
from airflow_provider_primus.master.master import Master
from airflow_provider_primus.master.store import JobRecord, SqliteJobStore, modify

# A stage per INFO record: `primus bench` shows the latest beside its progress on a terminal.
log = logging.getLogger(__name__)

JOB = "faults"
KILLS = ("trainer", "data")
HANG_TIMEOUT_S = 10.0  # the hung-executor trial's data ``hang_timeout_s`` (30 s by default)


@dataclass(frozen=True)
class Trial:
    seed: int
    outage_s: float = 0.0  # 0: no outage
    pause: bool = False  # the outage is SIGSTOP/SIGCONT of the broker instead of a stop and start
    kill: str | None = None  # "trainer" | "data" | None
    hang: bool = False  # SIGSTOP the only data executor (the hung-executor trial)
    history_days: int = 2
    rows_per_day: int = 12_000
    stream_rows: int = 4_000
    change_file: bool = False  # rewrite a planned history file while the job runs


@dataclass
class TrialResult:
    trial: Trial
    history_rows: int = 0
    stream_rows: int = 0
    rows_trained: int = 0
    rows_lost: int = 0
    rows_duplicated: int = 0
    trainer_crashes: int = 0
    recovery_s: float | None = None
    history_rows_during_outage: int = 0
    history_left_at_outage: int = 0
    stream_events: list[str] = field(default_factory=list)
    # The changed-file trial: the file rewritten, its task's quarantine (the planned rows it holds
    # are not lost: they are accounted here), and rows trained that no plan and no producer made.
    file_changed: str | None = None
    tasks_quarantined: int = 0
    quarantine_reasons: list[str] = field(default_factory=list)
    rows_quarantined: int = 0
    rows_unplanned: int = 0
    phase: str = ""
    elapsed_s: float = 0.0
    hang_detected_s: float | None = None  # SIGSTOP to the ExecutorHung event (hung-executor trial)
    history_left_at_hang: int = 0


class TrialError(BenchmarkError):
    """The job did not get where the trial needs it to (the message says where it stopped)."""


def _write_documents(
    root: Path, world: World, bootstrap: str, topic: str, *, hang: bool = False, failed_share: float = 0.0
) -> Path:
    data_path = write_data_spec(world, root, bootstrap_servers=bootstrap, topic=topic)
    training = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusTraining",
        "metadata": {"name": "faults"},
        "spec": {
            "mode": "mixed",
            "batch_size": 64,
            "checkpoint": {"every_steps": 25, "every_s": 0.0},
            "mixing": {"freshness": {"clock": "wall"}},
        },
    }
    (root / "training.yaml").write_text(yaml.safe_dump(training))
    data_role: dict[str, Any] = {
        "resources": {"cpu": "500m", "memory": "1Gi"},
        "failover": {"max_restarts": 5},
    }
    if hang:  # a whole core: a fractional one is throttled with SIGSTOP/SIGCONT, waking the victim
        data_role = {
            "resources": {"cpu": 1, "memory": "1Gi"},
            "failover": {"max_restarts": 5, "hang_timeout_s": HANG_TIMEOUT_S},
        }
    job = {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusJob",
        "metadata": {"name": JOB},
        "spec": {
            "data": str(data_path),
            "training": str(root / "training.yaml"),
            "follow": True,
            "passthrough": ["sample_id"],
            "data_service": {"batch_rows": 500, "window": 2, "max_failed_share": failed_share},
            "roles": {
                "data": data_role,
                "trainer": {"resources": {"cpu": 1, "memory": "2Gi"}, "failover": {"max_restarts": 5}},
            },
            "scaling": {"enabled": False},
        },
    }
    path = root / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


class _Trace:
    """The job's trace, read incrementally: per step the last version of its rows and its time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self.steps: dict[int, tuple[float, list[list[Any]]]] = {}

    def refresh(self) -> None:
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8") as f:
            f.seek(self._offset)
            for line in f:
                if not line.endswith("\n"):
                    break  # a step still being written
                self._offset += len(line.encode())
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    self.steps[int(entry["step"])] = (float(entry.get("t", 0.0)), entry["rows"])

    def ids(self, source: str | None = None) -> list[int]:
        return [
            int(r[3]) for _, rows in self.steps.values() for r in rows if source is None or r[0] == source
        ]

    def first_time(self, predicate: Callable[[list[Any]], bool], after: float) -> float | None:
        times = [t for t, rows in self.steps.values() if t >= after and any(predicate(r) for r in rows)]
        return min(times) if times else None


def _until(
    store: SqliteJobStore, trace: _Trace, predicate: Callable[[JobRecord], bool], timeout_s: float, what: str
) -> JobRecord:
    deadline = time.monotonic() + timeout_s
    while True:
        record = store.get(JOB)
        trace.refresh()
        if predicate(record):
            return record
        phase = record.status.get("phase")
        if phase in TERMINAL:
            raise TrialError(f"job ended ({phase}: {record.status.get('message')}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise TrialError(f"timed out after {timeout_s:.0f}s waiting for {what}; phase {phase}")
        time.sleep(0.1)  # polling another process's trace and the store: nothing to block on


UNPLANNED_IDS = 10**12  # added to a rewritten file's sample ids: rows no plan counted


def _rewrite(path: Path) -> tuple[list[int], list[int]]:
    """Rewrite ``path`` in place as a writer re-running a day would: same schema and row count, other
    rows. Returns (the planned sample ids it held, the unplanned ones it holds now)."""
    table = pq.read_table(path)
    planned = table.column("sample_id").to_pylist()
    unplanned = [i + UNPLANNED_IDS for i in planned]
    index = table.schema.get_field_index("sample_id")
    column = pa.array(unplanned, table.schema.field(index).type)
    pq.write_table(table.set_column(index, "sample_id", column), path, write_page_checksum=True)
    return planned, unplanned


def _pid(record: JobRecord, executor: str) -> int:
    return int(record.status["executors"][executor]["handle"]["ref"]["pid"])


@contextlib.contextmanager
def _running_master(store: SqliteJobStore, home: Path) -> Iterator[Master]:
    master = Master(JOB, store, home=home, tick_s=0.2)
    thread = threading.Thread(target=master.run, name="primus-bench-master", daemon=True)
    thread.start()
    try:
        yield master
    finally:
        if thread.is_alive():
            master.request({"stop": True})
        thread.join(timeout=90)


def run_trial(trial: Trial, root: Path, *, timeout_s: float = 300.0) -> TrialResult:
    """One job under the trial's faults; the result accounts for every row."""
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    world = World.from_defaults(
        seed=trial.seed,
        history_days=trial.history_days,
        stream_days=1,
        rows_per_day=trial.rows_per_day,
        users=2000,
        items=500,
    )
    paths = write_history(world, root)
    history_ids = pq.read_table(paths, columns=["sample_id"]).column("sample_id").to_pylist()
    stream = next(iter_stream(world)).slice(0, trial.stream_rows)
    messages = encode_events(stream)
    stream_ids = stream.column("sample_id").to_pylist()
    half = len(messages) // 2
    result = TrialResult(trial, history_rows=len(history_ids), stream_rows=len(stream_ids))
    kafka = EmbeddedKafka(
        ensure_distribution(), root / "kafka", port=free_port(), instance=f"faults-{os.getpid()}"
    )
    state = kafka.start()
    store = SqliteJobStore(root / "home" / "jobs.sqlite")
    try:
        topic = "clicks"
        ensure_topic(state.bootstrap_servers, topic)
        # The changed file's task is one of the history's two: let the job go on without it.
        failed_share = 0.5 if trial.change_file else 0.0
        job_path = _write_documents(
            root, world, state.bootstrap_servers, topic, hang=trial.hang, failed_share=failed_share
        )
        produce(state.bootstrap_servers, topic, messages[:half])
        submit(job_path, store=store, home=root / "home")
        trace = _Trace(root / "home" / "jobs" / JOB / "trace.jsonl")
        second_half = set(stream_ids[half:])
        changed_planned: list[int] = []
        unplanned: set[int] = set()
        with _running_master(store, root / "home") as master:
            if trial.change_file:
                # As soon as the plan is made: tasks are leased in time order, so the last day's
                # file is opened only after the first day's rows are read, well after this.
                _until(
                    store,
                    trace,
                    lambda r: int((r.status.get("progress") or {}).get("tasks") or 0) > 0,
                    timeout_s,
                    "the job to plan",
                )
                changed_planned, now = _rewrite(paths[-1])
                unplanned = set(now)
                result.file_changed = str(paths[-1])
            # Faults start once the stream trains and history is under way, mid-pass: first the kill
            # (its restart observed, and training going on), then the outage.
            record = _until(
                store, trace, lambda r: len(trace.ids("events")) > 0, timeout_s, "the stream to train"
            )
            if trial.kill is not None:
                victim = "trainer-0" if trial.kill == "trainer" else "data-0"
                os.kill(_pid(record, victim), signal.SIGKILL)
                steps = len(trace.steps)
                _until(
                    store,
                    trace,
                    lambda r: (
                        r.status["executors"][victim]["incarnation"] >= 1 and len(trace.steps) > steps + 5
                    ),
                    timeout_s,
                    f"{victim} to be restarted",
                )
            if trial.hang:
                _hang_data_executor(
                    store,
                    trace,
                    master,
                    record,
                    result=result,
                    history_rows=len(history_ids),
                    timeout_s=timeout_s,
                )
            if trial.outage_s > 0:
                # A quarter core for the trainer while the broker is away: the history pass then
                # outlasts any outage, so "history keeps training" is observed, not assumed.
                master.request({"resize": {"trainer-0": {"cpu": 0.25}}})
                result.history_left_at_outage = len(history_ids) - len(set(trace.ids("history")))
                down = time.time()
                if trial.pause:  # a hung broker: connections stay open, nothing answers
                    os.kill(state.pid, signal.SIGSTOP)
                    time.sleep(trial.outage_s)  # the outage itself: wall time is what is injected
                    os.kill(state.pid, signal.SIGCONT)
                else:  # `primus kafka down`, then `up` on the same port and data
                    kafka.stop()
                    time.sleep(trial.outage_s)
                    port = int(state.bootstrap_servers.rsplit(":", 1)[1])
                    kafka = EmbeddedKafka(ensure_distribution(), root / "kafka", port=port)
                    kafka.start()
                up = time.time()
                master.request({"resize": {"trainer-0": {"cpu": 1.0}}})
                trace.refresh()
                result.history_rows_during_outage = sum(
                    1
                    for t, rows in trace.steps.values()
                    if down <= t <= up
                    for r in rows
                    if r[0] == "history"
                )
            else:
                up = time.time()
            produce(state.bootstrap_servers, topic, messages[half:])
            record = _until(
                store,
                trace,
                lambda r: (
                    trace.first_time(lambda row: row[0] == "events" and int(row[3]) in second_half, up)
                    is not None
                ),
                timeout_s,
                "the stream to train again",
            )
            at = trace.first_time(lambda row: row[0] == "events" and int(row[3]) in second_half, up)
            if not trial.hang:  # the hung-executor trial's recovery is the one after the hang
                result.recovery_s = round(at - up, 3) if at is not None else None
            wanted = collections.Counter(history_ids) + collections.Counter(stream_ids)
            # The changed file's planned rows are not to be trained (its task is quarantined).
            expected = wanted - collections.Counter(changed_planned)

            def complete(r: JobRecord) -> bool:
                if not set(trace.ids()) >= set(expected):
                    return False
                if trial.change_file and not int(
                    (r.status.get("progress") or {}).get("tasks_quarantined") or 0
                ):
                    return False
                # The recovery reaches the job's events with the trainer's next report.
                return trial.outage_s == 0 or any(e.type == "StreamRecovered" for e in store.events(JOB))

            _until(store, trace, complete, timeout_s, "every row to be trained")
            master.request({"stop": True})
            record = _until(store, trace, lambda r: r.status.get("phase") in TERMINAL, 90, "the job to stop")
        trace.refresh()
        trained = collections.Counter(trace.ids())
        result.rows_trained = sum(trained.values())
        result.rows_lost = sum((expected - trained).values())
        extra = trained - wanted
        result.rows_unplanned = sum(n for i, n in extra.items() if i in unplanned)
        result.rows_duplicated = sum(extra.values()) - result.rows_unplanned
        quarantine = list((record.status.get("progress") or {}).get("quarantine") or [])
        result.tasks_quarantined = len(quarantine)
        result.quarantine_reasons = [str(q.get("error")) for q in quarantine]
        result.rows_quarantined = sum(int(q.get("rows_missing") or 0) for q in quarantine)
        result.phase = str(record.status.get("phase"))
        restarts = int(record.status["executors"]["trainer-0"]["restarts"])
        result.trainer_crashes = restarts - (1 if trial.kill == "trainer" else 0)
        result.stream_events = [e.type for e in store.events(JOB) if e.type.startswith("Stream")]
    finally:
        with contextlib.suppress(Exception):
            modify(store, JOB, lambda r: {**r.desired, "stop": True})
        kafka.stop()
        store.close()
    result.elapsed_s = round(time.monotonic() - started, 2)
    return result


def _hang_data_executor(
    store: SqliteJobStore,
    trace: _Trace,
    master: Master,
    record: JobRecord,
    *,
    result: TrialResult,
    history_rows: int,
    timeout_s: float,
) -> None:
    """SIGSTOP the only data executor with history left (the trainer slowed to a quarter core
    meanwhile, so some is), await its ``ExecutorHung`` event and replacement, and time both."""
    master.request({"resize": {"trainer-0": {"cpu": 0.25}}})
    result.history_left_at_hang = history_rows - len(set(trace.ids("history")))
    stopped = time.time()
    os.kill(_pid(record, "data-0"), signal.SIGSTOP)

    def hung_at() -> float | None:
        return next((e.t for e in store.events(JOB) if e.type == "ExecutorHung"), None)

    _until(
        store,
        trace,
        lambda r: hung_at() is not None and r.status["executors"]["data-0"]["incarnation"] >= 1,
        timeout_s,
        "the stopped data-0 to be declared hung and replaced",
    )
    declared = hung_at()
    assert declared is not None
    result.hang_detected_s = round(declared - stopped, 3)
    master.request({"resize": {"trainer-0": {"cpu": 1.0}}})
    if result.history_left_at_hang > 0:
        _until(
            store,
            trace,
            lambda r: trace.first_time(lambda row: row[0] == "history", declared) is not None,
            timeout_s,
            "history to train again after the hang",
        )
        at = trace.first_time(lambda row: row[0] == "history", declared)
        result.recovery_s = round(at - declared, 3) if at is not None else None


def trials_for(seeds: list[int], *, min_outage_s: float, max_outage_s: float) -> list[Trial]:
    """One trial per seed: an outage of a seeded length in [min, max] seconds, then a seeded kill."""
    out = []
    for seed in seeds:
        rng = random.Random(seed)
        out.append(
            Trial(
                seed=seed,
                outage_s=round(rng.uniform(min_outage_s, max_outage_s), 1),
                pause=rng.random() < 0.5,
                kill=rng.choice(KILLS),
            )
        )
    return out


def run(
    *,
    trials: int = 3,
    seed: int = 0,
    min_outage_s: float = 3.0,
    max_outage_s: float = 15.0,
    file_changed: bool = True,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """The outage trials, then (``file_changed``) one changed-file trial; ``trials`` and the outage
    figures count the former, ``rows_lost`` / ``rows_duplicated`` / ``trainer_crashes`` all."""
    plans = trials_for(list(range(seed, seed + trials)), min_outage_s=min_outage_s, max_outage_s=max_outage_s)
    results = []
    base = Path(tempfile.mkdtemp(prefix="primus-bench-faults-", dir=workdir))
    total = len(plans) + int(file_changed) + 1  # the hung-executor trial runs last
    for i, plan in enumerate(plans):
        log.info("trial %d/%d", i + 1, total)
        results.append(run_trial(plan, base / f"trial-{i}"))
    changed: list[TrialResult] = []
    if file_changed:
        log.info("trial %d/%d: a planned file rewritten", total - 1, total)
        changed.append(run_trial(Trial(seed=seed, change_file=True), base / "trial-file-changed"))
    log.info("trial %d/%d: the only data executor hung", total, total)
    hung = run_trial(Trial(seed=seed, hang=True), base / "trial-hung-executor")
    everything = [*results, *changed, hung]
    recoveries = [r.recovery_s for r in results if r.recovery_s is not None]
    return {
        "trials": len(results),
        "rows_lost": sum(r.rows_lost for r in everything),
        "rows_duplicated": sum(r.rows_duplicated for r in everything),
        "trainer_crashes": sum(r.trainer_crashes for r in everything),
        "recovery_s": max(recoveries) if recoveries else None,
        "rows_trained": sum(r.rows_trained for r in results),
        "outages_s": [r.trial.outage_s for r in results],
        "outage_kinds": ["pause" if r.trial.pause else "restart" for r in results],
        "kills": [r.trial.kill for r in results],
        "history_rows_during_outage_min": min(r.history_rows_during_outage for r in results),
        "phases": sorted({r.phase for r in results}),
        "elapsed_s": round(sum(r.elapsed_s for r in everything), 1),
        # The changed-file trial (null without it): its task quarantined with the reason, and the
        # rows trained that no plan counted (must be 0).
        "file_changed": (
            None
            if not changed
            else {
                "phase": changed[0].phase,
                "tasks_quarantined": changed[0].tasks_quarantined,
                "rows_quarantined": changed[0].rows_quarantined,
                "rows_unplanned": changed[0].rows_unplanned,
                "rows_lost": changed[0].rows_lost,
                "rows_duplicated": changed[0].rows_duplicated,
                "reasons": changed[0].quarantine_reasons,
            }
        ),
        # The hung-executor trial, beside the seeded ones (``trials`` counts those): its own
        # accounting; its losses, duplicates and crashes are in the totals above too.
        "hung_executor": {
            "rows_lost": hung.rows_lost,
            "rows_duplicated": hung.rows_duplicated,
            "trainer_crashes": hung.trainer_crashes,
            "recovery_s": hung.recovery_s,
            "hang_detected_s": hung.hang_detected_s,
            "hang_timeout_s": HANG_TIMEOUT_S,
            "history_left_at_hang": hung.history_left_at_hang,
            "phase": hung.phase,
            "elapsed_s": hung.elapsed_s,
        },
    }


def describe(result: TrialResult) -> dict[str, Any]:
    out = asdict(result)
    out["trial"] = asdict(result.trial)
    return out
