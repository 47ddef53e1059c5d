"""The job's status and events as typed models: the one definition every reader and the master share.

The master is the only writer of a job's status; the store, the control API, the CLI, the Airflow
hook, triggers, sensors and operators, and the UI read it. They exchange these models, serialised as
JSON at the edges (the store, HTTP, the custom resource), so the set of phases, the shape of an
executor's status or what a scaling event carries is written once, here. The CRD's ``status`` schema
is generated from ``JobStatus`` (contracts/crd.py).

Readers accept what they do not know (``extra="ignore"``): a status written by a newer master, or
one a master has not finished writing, still reads. Readers that show what they can (the pages)
``salvage`` a status that partly fails the model: the rest still reads, and they can say what not.
Free-form parts are the trainer's own figures (``progress.trainer_report``), which are the trainer's
business and grow with it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from enum import StrEnum
from types import NoneType, UnionType
from typing import Any, Literal, Self, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

__all__ = [
    "TERMINAL",
    "Event",
    "EventType",
    "ExecutorState",
    "ExecutorStatus",
    "JobStatus",
    "Phase",
    "TrainerMetrics",
    "payload_model",
]


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"

    @property
    def terminal(self) -> bool:
        """The job has ended: nothing runs and nothing will."""
        return self in TERMINAL


TERMINAL = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED})


def is_terminal(phase: Any) -> bool:
    """For a phase read from anywhere (a string, None, an unknown value from a newer master)."""
    return isinstance(phase, str) and phase in {p.value for p in TERMINAL}


class _Status(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class ExecutorState(StrEnum):
    RUNNING = "running"
    REMOVING = "removing"
    COMPLETED = "completed"
    FAILED = "failed"
    REMOVED = "removed"


class AllotmentStatus(_Status):
    cpu: float
    memory: int  # bytes


class HandleStatus(_Status):
    """Which executor, and where the backend keeps it (``ref``: a pid, a pod name and uid...)."""

    name: str
    role: str
    index: int
    allotment: AllotmentStatus
    ref: dict[str, Any] = Field(default_factory=dict)


class Usage(_Status):
    """An executor's usage over its last two samples: what it pushed with its heartbeats."""

    cpu_util: float
    rss: int
    mem_util: float
    rows_per_s: float
    read_bytes: int
    write_bytes: int
    wait_s: float
    busy_s: float


class ExecutorStatus(_Status):
    handle: HandleStatus
    incarnation: int = 0
    restarts: int = 0
    state: ExecutorState = ExecutorState.RUNNING
    exit_code: int | None = None
    reason: str | None = None
    error: str | None = None  # the exception it last ended on, one line
    telemetry: Usage | None = None


class MasterEndpoint(_Status):
    pid: int
    pid_created: float
    api: str
    api_port: int
    metrics: str | None = None  # the Prometheus scrape target (the job token as bearer)
    dispatcher: str
    dispatcher_port: int
    # The data-parallel trainers' rendezvous: where the current group's leader listens (host:port),
    # and the group's generation (one per start of the group).
    rendezvous: str | None = None
    trainer_generation: int = 0


def _no_rows() -> list[int | None]:
    return [None, None]


class QuarantinedTask(_Status):
    task: str
    source: str | None = None
    file: str | None = None
    files: list[str] = Field(default_factory=list)
    rows: list[int | None] = Field(default_factory=_no_rows)  # [first, end) not delivered
    rows_missing: int | None = None
    error: str = ""
    attempts: int | None = None


class SourceProgress(_Status):
    """One files source's part of the job's data service (a job reads several)."""

    tasks: int = 0
    tasks_done: int = 0
    tasks_quarantined: int = 0
    rows: int = 0  # the rows of its tasks, as far as known (planned, or counted once read)
    acked_rows: int = 0


class AucFigures(_Status):
    """Progressive validation on the stream: each row scored before the model could learn from it;
    ``window_auc`` over the most recent rows, where a model that stopped learning falls behind."""

    auc: float | None = None
    window_auc: float | None = None


class Freshness(_Status):
    """Seconds from an event's time to the step that trained on it."""

    p50: float | None = None
    p99: float | None = None


class TrainerMetrics(_Status):
    """The figures of the trainer's summary (``progress.trainer_metrics``) that the pages and the
    charts' history show. The summary itself stays free-form, the trainer's business, so this is a
    view read from it: a figure it lacks, or one of another type, reads as None and the rest still
    shows (``salvage``)."""

    mode: str | None = None  # mixed, batch, stream
    samples_per_s: float | None = None
    progressive: AucFigures = Field(default_factory=AucFigures)
    freshness_s: Freshness = Field(default_factory=Freshness)
    watermark: str | None = None  # ISO 8601: the newest event time trained

    @classmethod
    def salvage(cls, raw: Any) -> tuple[Self, tuple[str, ...]]:
        """What of ``raw`` fits, and the dotted paths of the parts dropped (see ``JobStatus.salvage``)."""
        return _salvage(cls, raw)


class Progress(_Status):
    tasks: int = 0
    tasks_done: int = 0
    tasks_quarantined: int = 0
    quarantine: list[QuarantinedTask] = Field(default_factory=list)
    rows_without_label: int = 0
    rows_without_label_by_task: dict[str, int] = Field(default_factory=dict)
    acked_rows: int = 0
    sources: list[str] = Field(default_factory=list)  # the files sources the data document plans
    by_source: dict[str, SourceProgress] = Field(default_factory=dict)  # each files source's rows
    data_finished: bool = False
    trainer_step: int | None = None
    trainer_rows: int | None = None
    trainer_metrics: dict[str, Any] | None = None  # the trainer's brief summary (AUC, freshness...)
    trainer_report: dict[str, Any] = Field(default_factory=dict)  # its last report, as it sent it

    def metrics(self) -> TrainerMetrics:
        """The figures of the trainer's summary the pages show; one the trainer sent in another
        shape is left out, not an error, since the summary is the trainer's own."""
        return TrainerMetrics.salvage(self.trainer_metrics)[0]


class WindowStatus(_Status):
    start: str
    end: str
    state: Literal["appended", "refused"] = "appended"
    reason: str | None = None
    tasks: int | None = None
    new_tasks: int | None = None
    rows: int | None = None
    task_ids: list[str] = Field(default_factory=list)
    source: str | None = None  # the files source it was appended for
    sources: list[str] = Field(default_factory=list)  # the sources its tasks read
    tasks_done: int | None = None
    consumed: bool | None = None


class SavepointStatus(_Status):
    state: Literal["requested", "done", "failed"]
    step: int | None = None
    checkpoint: str | None = None  # the checkpoint that covered it
    reason: str | None = None


class ScaleDecisionStatus(_Status):
    t: float
    action: Literal["scale_out", "scale_in", "resize_cpu", "resize_memory"]
    role: str
    executor: str | None = None
    before: float
    after: float
    reason: str
    signals: dict[str, float] = Field(default_factory=dict)


class EventType(StrEnum):
    SUBMITTED = "Submitted"
    MASTER_STARTED = "MasterStarted"
    EXECUTOR_LAUNCHED = "ExecutorLaunched"
    EXECUTOR_ADOPTED = "ExecutorAdopted"
    EXECUTOR_LOST = "ExecutorLost"
    EXECUTOR_FAILED = "ExecutorFailed"
    EXECUTOR_HUNG = "ExecutorHung"  # alive but no progress for its hang timeout: killed and replaced
    EXECUTOR_ABANDONED = "ExecutorAbandoned"
    EXECUTOR_STOPPING = "ExecutorStopping"
    EXECUTOR_REMOVED = "ExecutorRemoved"
    TRAINER_COMPLETED = "TrainerCompleted"
    TRAINERS_REGROUPED = "TrainersRegrouped"  # a new data-parallel group started (count, generation)
    MEMORY_PRESSURE = "MemoryPressure"
    MEMORY_LIMIT = "MemoryLimit"
    ORPHAN_DELETED = "OrphanDeleted"
    SCALE_DECISION = "ScaleDecision"
    SCALE_REQUESTED = "ScaleRequested"
    SCALE_REFUSED = "ScaleRefused"
    RESIZED = "Resized"
    RESIZE_REFUSED = "ResizeRefused"
    WINDOW_APPENDED = "WindowAppended"
    WINDOW_REFUSED = "WindowRefused"
    PARTITION_MISSING = "PartitionMissing"
    TASK_QUARANTINED = "TaskQuarantined"
    SAVEPOINT_REQUESTED = "SavepointRequested"
    SAVEPOINT_DONE = "SavepointDone"
    SAVEPOINT_FAILED = "SavepointFailed"
    STREAM_UNAVAILABLE = "StreamUnavailable"
    STREAM_RECOVERED = "StreamRecovered"
    STREAM_OFFSET_RESET = "StreamOffsetReset"
    EVENT_TIME_IMPLAUSIBLE = "EventTimeImplausible"
    CLOCK_SWITCHED = "ClockSwitched"
    SUSPENDED = "Suspended"
    RESUMED = "Resumed"
    STOPPED = "Stopped"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    RECONCILE_ERROR = "ReconcileError"
    STORE_RECREATED = "StoreRecreated"  # the local job store's file vanished; recreated from a copy
    STORE_RECOVERED = "StoreRecovered"  # the job store is written again after failing passes


class _Payload(_Status):
    """What an event carries beside its message; ``extra="allow"`` keeps what a backend adds (a
    pod's uid, a pid), since backends differ in what identifies an executor."""

    model_config = ConfigDict(frozen=True, extra="allow")


class NoPayload(_Payload):
    pass


class LaunchPayload(_Payload):
    cpu: float
    memory: int


class ExecutorEndPayload(_Payload):
    """``error``: the exception it ended on, one line; ``terminal``: no restart can fix it (the job
    failed at once)."""

    reason: str | None = None
    error: str | None = None
    terminal: bool | None = None


class HangPayload(_Payload):
    """A hung executor: why (``no heartbeat for 30 s``), how long it was silent, its incarnation."""

    reason: str
    silent_s: float
    incarnation: int


class MemoryPayload(_Payload):
    rss: int
    memory: int
    pid: int | None = None
    reason: str | None = None


class ScalePayload(_Payload):
    """A scaling decision (the autoscaler's, with its reason and signals) or a manual request."""

    manual: bool = False
    action: str | None = None
    role: str | None = None
    executor: str | None = None
    before: float | None = None
    after: float | None = None
    reason: str | None = None
    signals: dict[str, float] = Field(default_factory=dict)
    t: float | None = None


class RegroupPayload(_Payload):
    """A trainer group's start: its generation, its trainers and why (``start``, ``scale``, ``failure``)."""

    generation: int
    trainers: int
    reason: str


class ResizePayload(_Payload):
    manual: bool = False
    cpu: float
    memory: int


class QuarantinePayload(_Payload):
    task: str
    source: str | None = None
    file: str | None = None
    files: list[str] = Field(default_factory=list)
    rows: list[int | None] = Field(default_factory=_no_rows)
    rows_missing: int | None = None
    error: str = ""


class SavepointPayload(_Payload):
    ids: list[str] = Field(default_factory=list)
    step: int | None = None
    checkpoint: str | None = None


class StreamPayload(_Payload):
    source: str
    error: str | None = None
    outage_s: float | None = None
    partition: int | None = None
    offset: int | None = None
    resumed_at: int | None = None
    skipped: int | None = None
    reason: str | None = None
    log_replaced: bool | None = None


class ClockPayload(_Payload):
    """A trainer's ``clock: auto`` going from the replay clock to the wall clock: ``step`` steps were
    trained before; ``watermark`` (ISO 8601) is the newest event time trained then, ``lag_s`` how far
    it trailed the wall clock; ``reason`` is ``live`` (within ``live_lag_s``) or ``history_idle`` (the
    history had nothing more to train while the replay held stream records back)."""

    from_clock: str
    to_clock: str
    reason: str
    step: int | None = None
    watermark: str | None = None
    lag_s: float | None = None
    live_lag_s: float | None = None


class EventTimePayload(_Payload):
    """A plan found files whose event times are implausible in the declared unit (``unit`` None: no
    unit declared, integers read as milliseconds); ``fits`` names the units that would fit."""

    source: str
    column: str
    unit: str | None = None
    files: int = 0
    checked_files: int = 0
    fits: list[str] = Field(default_factory=list)


class EndPayload(_Payload):
    tasks_quarantined: int = 0


_PAYLOADS: dict[EventType, type[_Payload]] = {
    EventType.EXECUTOR_LAUNCHED: LaunchPayload,
    EventType.EXECUTOR_FAILED: ExecutorEndPayload,
    EventType.EXECUTOR_LOST: ExecutorEndPayload,
    EventType.EXECUTOR_HUNG: HangPayload,
    EventType.MEMORY_PRESSURE: MemoryPayload,
    EventType.MEMORY_LIMIT: MemoryPayload,
    EventType.SCALE_DECISION: ScalePayload,
    EventType.SCALE_REQUESTED: ScalePayload,
    EventType.RESIZED: ResizePayload,
    EventType.TRAINERS_REGROUPED: RegroupPayload,
    EventType.TASK_QUARANTINED: QuarantinePayload,
    EventType.SAVEPOINT_DONE: SavepointPayload,
    EventType.SAVEPOINT_FAILED: SavepointPayload,
    EventType.STREAM_UNAVAILABLE: StreamPayload,
    EventType.STREAM_RECOVERED: StreamPayload,
    EventType.STREAM_OFFSET_RESET: StreamPayload,
    EventType.EVENT_TIME_IMPLAUSIBLE: EventTimePayload,
    EventType.CLOCK_SWITCHED: ClockPayload,
    EventType.SUCCEEDED: EndPayload,
}


def payload_model(type_: str) -> type[_Payload]:
    """The payload model of an event type (``NoPayload`` for types that carry only a message)."""
    try:
        return _PAYLOADS.get(EventType(type_), NoPayload)
    except ValueError:  # a type a newer master or backend added: read it without a schema
        return NoPayload


class Event(_Status):
    seq: int
    time: float
    type: str  # an EventType value; unknown ones (from a newer master) are kept as they are
    executor: str | None = None
    message: str
    data: dict[str, Any] = Field(default_factory=dict)

    def payload(self) -> _Payload:
        """The structured payload of this event's type; a malformed one reads as no payload."""
        try:
            return payload_model(self.type).model_validate(self.data)
        except ValueError:
            return NoPayload.model_validate(self.data)


class JobStatus(_Status):
    """``status`` of a PrimusJob: written by its master only."""

    phase: Phase = Phase.PENDING
    message: str = ""
    suspended: bool = False
    master: MasterEndpoint | None = None
    replicas: dict[str, int] = Field(default_factory=dict)
    selector: str | None = None  # the scale subresource's label selector (data executors)
    roles: str | None = None  # "data 3/3, trainer 1/1", for kubectl get
    executors: dict[str, ExecutorStatus] = Field(default_factory=dict)
    progress: Progress = Field(default_factory=Progress)
    windows: list[WindowStatus] = Field(default_factory=list)
    savepoints: dict[str, SavepointStatus] = Field(default_factory=dict)
    decisions: list[ScaleDecisionStatus] = Field(default_factory=list)
    applied: dict[str, Any] = Field(default_factory=dict)  # the master's record of requests acted on
    events: list[Event] = Field(default_factory=list)  # the newest few
    data_progress: dict[str, list[list[int]]] = Field(default_factory=dict)  # acknowledged row ranges
    # The charts' durable history (master/history.py): bounded points, downsampled when old.
    history: list[dict[str, Any]] = Field(default_factory=list)
    updated: float | None = None  # the master's heartbeat (epoch seconds)

    @classmethod
    def read(cls, raw: Mapping[str, Any] | None) -> JobStatus:
        """A stored status as the model; an empty or missing one is a Pending job's."""
        return cls.model_validate(dict(raw or {}))

    @classmethod
    def salvage(cls, raw: Mapping[str, Any] | None) -> tuple[JobStatus, tuple[str, ...]]:
        """A stored status as the model, less the parts that do not fit it, and their dotted paths
        (``executors.data-0.telemetry``).

        For readers that show what they can (the pages): one executor's malformed telemetry, a
        window from a newer master, must not blank the whole page. The smallest part that fails goes,
        and nothing it leaves is made up: a field whose default means unknown (None, nothing listed)
        goes alone; a required one, or one whose default would claim something (a window's state),
        takes its record with it (an executor without a handle goes whole); a record in a list goes
        alone, a value in a list of values takes the list. The status's own fields, with no record
        above them, fall back to their defaults (a phase this version does not know reads Pending).
        The paths name parts, never their values (a status may hold what a log should not)."""
        return _salvage(cls, raw)

    def given(self, name: str) -> bool:
        """Whether the stored status had this part: a status a master has not written yet has no
        figures, which a page shows as unknown rather than as the model's zeros."""
        return name in self.model_fields_set

    def to_json(self) -> dict[str, Any]:
        """The stored form (JSON types; enums as their values)."""
        return self.model_dump(mode="json")


class _Gone:
    """Marks a part of a document being salvaged as dropped, until the sweep removes it."""


_GONE = _Gone()
_SALVAGE_PASSES = 64  # each pass drops at least one part; a document this broken is dropped whole
WHOLE = "(the whole document)"
_M = TypeVar("_M", bound=_Status)


def _salvage(model: type[_M], raw: Any) -> tuple[_M, tuple[str, ...]]:
    if raw is None:
        return model(), ()
    if not isinstance(raw, Mapping):
        return model(), (WHOLE,)
    doc: Any = copy.deepcopy(dict(raw))
    dropped: list[str] = []
    for _ in range(_SALVAGE_PASSES):
        try:
            return model.model_validate(doc), tuple(dropped)
        except ValidationError as exc:
            # include_input=False: what failed is named by its path, its value is not copied out.
            parts = {
                _record_or_field(model, _failing_part(doc, err["loc"]))
                for err in exc.errors(include_input=False, include_url=False)
            }
        if () in parts:
            break
        for path in sorted(parts, key=len):  # outer parts first: an inner one inside goes with it
            if _mark(doc, path):
                dropped.append(".".join(str(k) for k in path))
        doc = _sweep(doc)
    return model(), (WHOLE,)


def _failing_part(doc: Any, loc: Sequence[int | str]) -> tuple[int | str, ...]:
    """The part of ``doc`` to drop for an error at ``loc``: the deepest part the path reaches (for a
    missing field, the object lacking it; for a union's member name, the value itself)."""
    node: Any = doc
    path: list[int | str] = []
    parents: list[dict[str, Any] | list[Any]] = []
    for key in loc:
        in_dict = isinstance(node, dict) and isinstance(key, str) and key in node
        in_list = isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node)
        if not (in_dict or in_list):
            break
        parents.append(node)
        node = node[key]
        path.append(key)
    if parents and isinstance(parents[-1], list) and not any(isinstance(v, dict) for v in parents[-1]):
        path.pop()  # a value in a list of values (a row span, a list of files): the list is the value
    return tuple(path)


def _record_or_field(model: type[BaseModel], path: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """A field whose default means unknown (None, nothing listed) goes alone; one whose default
    would claim something (a window ``appended``, no restarts) takes its record with it, so that a
    value this version cannot read is not shown as one it made up. The status's own fields fall
    back to their defaults: there is no record above them but the whole document."""
    field = _field_at(model, path)
    if field is None or len(path) < 2:
        return path
    default = field.get_default(call_default_factory=True)
    unknown = default is None or (
        isinstance(default, list | dict) and not any(v is not None for v in default)
    )
    return path if unknown else path[:-1]


def _field_at(model: type[BaseModel], path: tuple[int | str, ...]) -> FieldInfo | None:
    """The model field a document path ends at; None where it ends at an entry of a list or a map."""
    kind: Any = model
    field: FieldInfo | None = None
    for key in path:
        field = None
        args = [a for a in get_args(kind) if a is not NoneType]
        if get_origin(kind) in (Union, UnionType) and len(args) == 1:
            kind = args[0]  # an optional part: the part's own type
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            field = kind.model_fields.get(str(key))
            if field is None:
                return None
            kind = field.annotation
        elif get_origin(kind) in (dict, list):
            kind = get_args(kind)[-1]
        else:
            return None
    return field


def _mark(doc: Any, path: tuple[int | str, ...]) -> bool:
    node = doc
    for key in path[:-1]:
        node = node[key]
        if node is _GONE:
            return False
    node[path[-1]] = _GONE
    return True


def _sweep(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _sweep(v) for k, v in node.items() if v is not _GONE}
    if isinstance(node, list):
        return [_sweep(v) for v in node if v is not _GONE]
    return node


# --- the job's runtime intent (``desired``) ----------------------------------------------------------
# Written by the control API, the CLI and the scale subresource (or by hand, kubectl patch), read by
# the master at every pass. Every field is optional: a job nobody asked anything of has ``{}``.


class ResizeWant(_Status):
    """An executor's requested allotment. Written by hand it may be a quantity (``"500m"``,
    ``"512Mi"``): the master parses it when it applies it and refuses, with an event, what does not
    parse, so a bad request costs that request and not every pass."""

    cpu: int | float | str | None = None
    memory: int | float | str | None = None


class WindowWant(_Status):
    """A window to append: its span as written, and its files source (left out: the data's only one)."""

    start: str
    end: str
    source: str | None = None


class Desired(_Status):
    """``desired`` of a job: requests not yet acted on are told apart from applied ones by the
    generations (``scale_gen``, ``resize_gen``) against the master's ``applied`` record."""

    scale: dict[str, int] = Field(default_factory=dict)
    scale_gen: int = 0
    resize: dict[str, ResizeWant] = Field(default_factory=dict)
    resize_gen: int = 0
    windows: list[WindowWant] = Field(default_factory=list)
    savepoints: list[str] = Field(default_factory=list)
    suspend: bool = False
    stop: bool = False

    @classmethod
    def read(cls, raw: Mapping[str, Any] | None) -> Desired:
        """A stored ``desired`` as the model; an empty or missing one asks for nothing."""
        return cls.model_validate(dict(raw or {}))
