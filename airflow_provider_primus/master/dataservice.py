"""The job's data: planning its windows and hosting the data service that hands tasks out.

The master plans the data document's window over every files source and every window appended since
(a restarted master re-plans them; the planner's cache makes that cheap), and resumes the dispatcher
from the progress its predecessor persisted. One data service serves all the files sources: one task
graph (task IDs are content-derived and name their source, so they never collide), one set of data
executors, one ledger of acknowledged rows; the trainers keep each source's rows apart. A window
appended while the job runs names the files source it belongs to and joins the graph once; Kafka
sources are never planned here (each trainer reads its share of their partitions itself).
Quarantined tasks are reported as they happen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_primus.contracts.data import (
    HistorySource,
    PrimusData,
    Window,
    files_subset,
    is_history,
    window_source,
)
from airflow_provider_primus.contracts.errors import SpecError
from airflow_provider_primus.contracts.job import PrimusJob
from airflow_provider_primus.contracts.status import EventType
from airflow_provider_primus.data.model import Task
from airflow_provider_primus.data.planner import plan
from airflow_provider_primus.data.service.auth import bind_host
from airflow_provider_primus.data.service.dispatcher import Dispatcher
from airflow_provider_primus.data.service.dispatcher_server import DispatcherServer
from airflow_provider_primus.master.events import EventLog
from airflow_provider_primus.tls import JobCa

__all__ = ["JobData"]


class JobData:
    def __init__(
        self,
        job: PrimusJob,
        data: PrimusData,
        events: EventLog,
        *,
        windows: list[dict[str, Any]],
        progress: Mapping[str, Any],
    ) -> None:
        self.job, self.data, self.events = job, data, events
        self.windows = windows
        self._progress = {t: [tuple(r) for r in rs] for t, rs in progress.items()}
        self._quarantine_reported: set[str] = set()  # tasks whose TaskQuarantined event is written
        self.server: DispatcherServer | None = None

    @property
    def files_sources(self) -> list[HistorySource]:
        return [s for s in self.data.spec.sources if is_history(s)]

    @property
    def dispatcher(self) -> Dispatcher:
        """The server's current dispatcher (a restarted trainer rewinds it to its checkpoint)."""
        assert self.server is not None
        return self.server.dispatcher

    def _plan(
        self, start: Any, end: Any, sources: list[str] | None = None
    ) -> tuple[list[Task], list[tuple[str, str]]]:
        """The tasks of the files sources (``sources``: those only) in [start, end)."""
        if not self.files_sources:
            return [], []
        graph = plan(files_subset(self.data, sources), start, end)
        for missing in graph.missing:
            self.events.emit(EventType.PARTITION_MISSING, f"missing partition {missing.path}")
        for finding in graph.event_times:  # a unit mix-up, most often: said once per plan
            self.events.emit(
                EventType.EVENT_TIME_IMPLAUSIBLE,
                finding.message(),
                data={
                    "source": finding.source,
                    "column": finding.column,
                    "unit": finding.unit,
                    "files": finding.implausible,
                    "checked_files": finding.checked,
                    "fits": list(finding.fits),
                },
            )
        return list(graph.tasks), list(graph.edges)

    def planning_failure(self, exc: BaseException) -> str:
        """The job's failure message for a plan that could not be made, naming what was planned."""
        files = self.files_sources
        where = ", ".join(f"source {s.name!r} ({s.where()})" for s in files) if files else "the job's data"
        return f"planning {where} failed: {type(exc).__name__}: {exc}"

    def start(self, token: str, port: int, ca: JobCa | None = None) -> DispatcherServer:
        """Plan everything the job has been given and serve it (raises when planning fails)."""
        spec = self.job.spec
        window = self.data.spec.window
        tasks, edges = self._plan(window.start, window.end) if window is not None else ([], [])
        for w in self.windows:
            more, more_edges = self._plan(w["start"], w["end"])
            tasks += more
            edges += more_edges
        ds = spec.data_service
        dispatcher = Dispatcher(
            tasks,
            edges,
            progress=self._progress,
            max_attempts=ds.max_attempts,
            max_failed_share=ds.max_failed_share,
            sealed=not spec.follow,
        )
        host = bind_host(spec.control.host)
        self.server = DispatcherServer(dispatcher, token, host=host, port=port, ca=ca).start()
        return self.server

    def _key(self, window: Mapping[str, Any]) -> tuple[str, str, str | None]:
        """A window's identity: its span and its source (left out: the only files source, as a
        window recorded before windows named their source)."""
        source = window.get("source")
        if source is None and len(self.files_sources) == 1:
            source = self.files_sources[0].name
        return (str(window["start"]), str(window["end"]), source)

    def append(self, desired_windows: list[Mapping[str, Any]]) -> None:
        """Windows requested since the last pass join the task graph once each."""
        known = {self._key(w) for w in self.windows}
        for window in desired_windows:
            if self._key(window) not in known:
                self._append(window)
                known.add(self._key(window))

    def _append(self, window: Mapping[str, Any]) -> None:
        record: dict[str, Any] = {"start": window["start"], "end": window["end"]}
        span = f"window {window['start']}..{window['end']}"
        try:  # the API checked it; a request recorded before the data document changed may not fit
            source: str | None = window_source(self.data, window.get("source"))
        except SpecError as exc:
            source = None
            record.update(source=window.get("source"), state="refused", reason=exc.issues[0].message)
        if source is not None:
            record["source"] = source
            span = f"window {window['start']}..{window['end']} of source {source!r}"
        if source is None:
            self.events.emit(EventType.WINDOW_REFUSED, f"{span}: {record['reason']}")
        elif self.dispatcher.finished():
            record.update(state="refused", reason="the job's data service has finished its pass")
            self.events.emit(EventType.WINDOW_REFUSED, f"{span}: {record['reason']}")
        else:
            w = Window.model_validate({"start": window["start"], "end": window["end"]})
            tasks, edges = self._plan(w.start, w.end, [source])
            added = self.dispatcher.add_tasks(tasks, edges)
            record.update(
                state="appended",
                tasks=len(tasks),
                new_tasks=added,
                rows=sum(t.rows or 0 for t in tasks),
                task_ids=[t.task_id for t in tasks],
                sources=sorted({t.source for t in tasks}),
            )
            self.events.emit(EventType.WINDOW_APPENDED, f"{span}: {len(tasks)} tasks ({added} new)")
        self.windows.append(record)

    def succeeded(self) -> str:
        """The job's message when it succeeds, with its event: quarantined tasks' rows were not
        trained, and the end must say so rather than read as a full pass."""
        quarantined = len(self.dispatcher.quarantine())
        if not quarantined:
            self.events.emit(EventType.SUCCEEDED, "job succeeded")
            return "the trainer finished"
        tasks = f"{quarantined} task{'s' if quarantined != 1 else ''}"
        self.events.emit(
            EventType.SUCCEEDED,
            f"job succeeded with {tasks} quarantined",
            None,
            {"tasks_quarantined": quarantined},
        )
        return f"Succeeded with {tasks} quarantined"

    def report_quarantine(self) -> None:
        """One ``TaskQuarantined`` event per task as it is quarantined, with its source, file, the rows
        not trained ([start, end); end None when the task's length is unknown) and the error."""
        for task_id, info in self.dispatcher.quarantine().items():
            if task_id in self._quarantine_reported:
                continue
            self._quarantine_reported.add(task_id)
            start, end = info["rows"]
            rows = f"rows {start}..{end if end is not None else 'end'}"
            where = info.get("file") or ", ".join(info.get("files") or ()) or "no file"
            self.events.emit(
                EventType.TASK_QUARANTINED,
                f"task {task_id} of source {info.get('source')} quarantined, {rows} of {where} not trained: "
                f"{info['error']}",
                None,
                info,
            )

    def progress(self, trainer_report: Mapping[str, Any]) -> dict[str, Any]:
        d = self.dispatcher.status()
        return {
            "tasks": d["tasks"],
            "tasks_done": d["done"],
            "tasks_quarantined": len(d["quarantined"]),
            # What was not trained and why, for people and operators: each quarantined task's source,
            # file, row range and error; and the rows left out for having no label.
            "quarantine": list(d["quarantine"].values()),
            "rows_without_label": sum(d["rows_without_label"].values()),
            "rows_without_label_by_task": d["rows_without_label"],
            "acked_rows": d["acked_rows"],
            "sources": [s.name for s in self.files_sources],
            "by_source": self.dispatcher.by_source(),
            "data_finished": d["finished"],
            "trainer_step": trainer_report.get("step"),
            "trainer_rows": trainer_report.get("rows"),
            "trainer_metrics": trainer_report.get("metrics"),
            "trainer_report": dict(trainer_report),
        }

    def window_views(self) -> list[dict[str, Any]]:
        views = []
        for window in self.windows:
            view = dict(window)
            if window.get("state") == "appended":
                ids = window.get("task_ids", [])
                view["tasks_done"] = self.dispatcher.tasks_done(ids)
                view["consumed"] = view["tasks_done"] == len(ids)
            views.append(view)
        return views

    def endpoint(self) -> dict[str, Any]:
        """Where the data service listens, for the status (a restarted master takes the same port)."""
        assert self.server is not None
        return {"dispatcher": self.server.location, "dispatcher_port": self.server.port}

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
