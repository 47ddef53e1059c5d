"""PrimusJob: what a job runs on — roles, their resources and bounds, failover, scaling, backend.

The data and training documents say *what* is read and trained; this one says with which executors.
Quantities are written the Kubernetes way (``cpu: 500m`` or ``0.5``; ``memory: 512Mi``) so the same
document becomes a custom resource unchanged (the Kubernetes backend's ``PrimusJob``). ``status`` belongs to
the master alone: a submitted document that carries one is refused rather than silently ignored.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)

from airflow_provider_primus.contracts.base import (
    BatchRows,
    Metadata,
    Name,
    NonEmptyStr,
    PositiveFloat,
    PositiveInt,
    StrictModel,
)
from airflow_provider_primus.contracts.errors import (
    SpecError,
    SpecIssue,
    issues_from_validation_error,
    raise_issues,
)
from airflow_provider_primus.contracts.versions import to_hub

RoleName = Literal["data", "trainer", "evaluator"]
ROLES: tuple[str, ...] = ("data", "trainer", "evaluator")
ScalingAction = Literal["scale_out", "scale_in", "resize_cpu", "resize_memory"]
ALL_ACTIONS: tuple[str, ...] = ("scale_out", "scale_in", "resize_cpu", "resize_memory")
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]
# Executors per role. A Kubernetes cluster is supported up to 5,000 nodes and 150,000 pods, and a
# job's master reconciles its executors in one loop (`primus bench k8s` measures 1,000 pods); a count
# beyond this is a typo or a unit mix-up, not a plan, and would launch until the machine gives out.
MAX_REPLICAS = 10_000
ReplicaCount = Annotated[int, Strict(), Field(ge=0, le=MAX_REPLICAS)]
StrictBool = Annotated[bool, Strict()]
Fraction = Annotated[float, Strict(), Field(gt=0, lt=1, allow_inf_nan=False)]

_CPU = re.compile(r"(?P<milli>[0-9]+)m|(?P<cores>[0-9]+(?:\.[0-9]+)?)")
_MEMORY = re.compile(r"(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<unit>Ki|Mi|Gi|Ti|k|K|M|G|T)?")
_UNITS = {
    None: 1,
    "k": 10**3,
    "K": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


def parse_cpu(value: Any) -> float:
    """Cores as a float: ``0.5``, ``2`` or Kubernetes millicores ``"500m"``."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number of cores or millicores like '500m' (got {value!r})")
    if isinstance(value, int | float):
        cores = float(value)
    elif isinstance(value, str) and (match := _CPU.fullmatch(value.strip())):
        cores = int(match["milli"]) / 1000 if match["milli"] else float(match["cores"])
    else:
        raise ValueError(f"must be a number of cores or millicores like '500m' (got {value!r})")
    if not 0 < cores <= 1024:
        raise ValueError(f"must be more than 0 cores and at most 1024 (got {value!r})")
    return round(cores, 3)


def parse_memory(value: Any) -> int:
    """Bytes as an int: ``536870912``, ``512Mi``, ``2Gi``, ``500M``."""
    if isinstance(value, bool):
        raise ValueError(f"must be bytes or a quantity like '512Mi' (got {value!r})")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str) and (match := _MEMORY.fullmatch(value.strip())):
        size = int(float(match["number"]) * _UNITS[match["unit"]])
    else:
        raise ValueError(f"must be bytes or a quantity like '512Mi', '2Gi' (got {value!r})")
    if size < 16 * 2**20:
        raise ValueError(f"must be at least 16Mi (got {value!r})")
    return size


def format_memory(size: int) -> str:
    for unit, factor in (("Gi", 2**30), ("Mi", 2**20)):
        if size >= factor and size % (factor // 16) == 0:
            return f"{size / factor:g}{unit}"
    return str(size)


Cpu = Annotated[
    float,
    BeforeValidator(parse_cpu),
    Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]
Memory = Annotated[
    int,
    BeforeValidator(parse_memory),
    Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]


class Replicas(StrictModel):
    """Executor count: the autoscaler moves it within [min, max]; ``initial`` is where it starts."""

    min: ReplicaCount = 1
    initial: ReplicaCount | None = None
    max: ReplicaCount | None = None

    @model_validator(mode="after")
    def _ordered(self) -> Replicas:
        initial = self.start
        top = self.top
        issues = []
        if initial < self.min:
            issues.append((("initial",), f"must be at least min ({self.min}), got {initial}"))
        if self.max is not None and top < max(self.min, initial):
            issues.append(
                (("max",), f"must be at least min and initial ({max(self.min, initial)}), got {top}")
            )
        if issues:
            raise_issues(issues)
        return self

    @property
    def start(self) -> int:
        return self.initial if self.initial is not None else self.min

    @property
    def top(self) -> int:
        return self.max if self.max is not None else self.start


class CpuBounds(StrictModel):
    min: Cpu | None = None
    max: Cpu | None = None


class MemoryBounds(StrictModel):
    min: Memory | None = None
    max: Memory | None = None


class Bounds(StrictModel):
    """Vertical bounds; an unset bound is the requested value (no vertical scaling that way)."""

    cpu: CpuBounds = Field(default_factory=CpuBounds)
    memory: MemoryBounds = Field(default_factory=MemoryBounds)


class Resources(StrictModel):
    cpu: Cpu = 1.0
    memory: Memory = 2**30
    bounds: Bounds = Field(default_factory=Bounds)

    @model_validator(mode="after")
    def _within_bounds(self) -> Resources:
        issues = []
        c, m = self.bounds.cpu, self.bounds.memory
        if c.min is not None and c.min > self.cpu:
            issues.append((("bounds", "cpu", "min"), f"must not exceed cpu ({self.cpu:g}), got {c.min:g}"))
        if c.max is not None and c.max < self.cpu:
            issues.append((("bounds", "cpu", "max"), f"must not be below cpu ({self.cpu:g}), got {c.max:g}"))
        if m.min is not None and m.min > self.memory:
            issues.append(
                (("bounds", "memory", "min"), f"must not exceed memory ({format_memory(self.memory)})")
            )
        if m.max is not None and m.max < self.memory:
            issues.append(
                (("bounds", "memory", "max"), f"must not be below memory ({format_memory(self.memory)})")
            )
        if issues:
            raise_issues(issues)
        return self

    @property
    def cpu_range(self) -> tuple[float, float]:
        c = self.bounds.cpu
        return (c.min if c.min is not None else self.cpu, c.max if c.max is not None else self.cpu)

    @property
    def memory_range(self) -> tuple[int, int]:
        m = self.bounds.memory
        return (m.min if m.min is not None else self.memory, m.max if m.max is not None else self.memory)


# How long an executor may show no progress before it is declared hung (seconds), when its role's
# ``failover.hang_timeout_s`` leaves it out: a data executor heartbeats every second and asks for work
# within milliseconds of running out, so 30 s of silence is no hiccup; a trainer reports every 0.5 s
# from its own thread, also during a step, but a checkpoint write or a first compile may hold it
# longer, so it gets 60 s. The longest allowed is a day: anything longer is a unit mix-up.
HANG_TIMEOUT_S: dict[str, float] = {"data": 30.0, "trainer": 60.0, "evaluator": 60.0}
HangTimeout = Annotated[float, Strict(), Field(ge=1, le=86_400, allow_inf_nan=False)]


class Failover(StrictModel):
    """A failed executor is restarted up to ``max_restarts`` times; then the job fails, or (``continue``)
    goes on without it while at least ``replicas.min`` executors of the role remain. An executor
    that shows no progress for ``hang_timeout_s`` seconds (default: 30 for data executors, 60 for
    trainers and evaluators) is hung: it is killed and restarted under the same budget."""

    max_restarts: NonNegativeInt = 3
    on_exhausted: Literal["fail", "continue"] = "fail"
    hang_timeout_s: HangTimeout | None = None

    def hang_timeout(self, role: str) -> float:
        """The hang timeout in force for ``role``: the one set, else the role's default."""
        return self.hang_timeout_s if self.hang_timeout_s is not None else HANG_TIMEOUT_S[role]


class Role(StrictModel):
    replicas: Replicas = Field(default_factory=Replicas)
    resources: Resources = Field(default_factory=Resources)
    failover: Failover = Field(default_factory=Failover)


TRAINER_MEMORY = 4 * 2**30


def _trainer() -> Role:
    return Role(resources=Resources(memory=TRAINER_MEMORY))


class Roles(StrictModel):
    data: Role = Field(default_factory=Role)
    # A trainer holds torch, the model and its optimizer state: 1Gi (the data executors' default)
    # is less than torch alone with a small DLRM (0.8 to 1 GiB measured), so it defaults to 4Gi.
    trainer: Role = Field(default_factory=_trainer)
    evaluator: Role | None = None

    @field_validator("trainer", mode="before")
    @classmethod
    def _trainer_memory(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            resources = value.get("resources", {})
            if isinstance(resources, Mapping) and "memory" not in resources:
                return {**value, "resources": {**resources, "memory": TRAINER_MEMORY}}
        return value

    @model_validator(mode="after")
    def _a_trainer(self) -> Roles:
        r = self.trainer.replicas
        if r.min < 1:
            raise_issues(
                [
                    (
                        ("trainer", "replicas", "min"),
                        f"a job trains with at least 1 trainer (got min={r.min}); data-parallel "
                        "trainers change count only at a checkpoint (primus scale --role trainer)",
                    )
                ]
            )
        return self

    def get(self, name: str) -> Role | None:
        role: Role | None = getattr(self, name)
        return role


class Targets(StrictModel):
    """Utilisation the autoscaler steers towards. ``starvation`` is the share of a trainer's time spent
    waiting for data above which it asks for more data executors."""

    cpu_utilization: Fraction = 0.8
    memory_utilization: Fraction = 0.75
    starvation: Fraction = 0.2


class MaxStep(StrictModel):
    """The most one decision may change: executors added or removed, cores, memory factor."""

    replicas: Annotated[int, Strict(), Field(gt=0, le=MAX_REPLICAS)] = 1
    cpu: Cpu = 1.0
    memory_factor: Annotated[float, Strict(), Field(gt=1, le=4, allow_inf_nan=False)] = 1.5


def _all_actions() -> list[ScalingAction]:
    return ["scale_out", "scale_in", "resize_cpu", "resize_memory"]


class Scaling(StrictModel):
    enabled: StrictBool = True
    actions: list[ScalingAction] = Field(default_factory=_all_actions)
    targets: Targets = Field(default_factory=Targets)
    # Decisions look at this much telemetry (and never at less); a decision is not reversed within it.
    window_s: PositiveFloat = 10.0
    # Quiet time after a decision on the same role (horizontal) or executor (vertical).
    cooldown_s: PositiveFloat = 15.0
    max_step: MaxStep = Field(default_factory=MaxStep)


def _cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except ValueError:
        raise ValueError(f"must be a network in CIDR form like '10.0.0.0/16' (got {value!r})") from None


Cidr = Annotated[str, AfterValidator(_cidr)]


POD_HOME = "/var/lib/primus"  # PRIMUS_HOME in every pod: job files, the trainer's checkpoints
PodRole = Literal["master", "data", "trainer", "evaluator"]
POD_ROLES: tuple[str, ...] = ("master", "data", "trainer", "evaluator")


def _absolute_path(value: str) -> str:
    if not value.startswith("/") or "\0" in value or any(p == ".." for p in value.split("/")):
        raise ValueError(f"must be an absolute path without '..' (got {value!r})")
    return value.rstrip("/") or "/"


AbsolutePath = Annotated[
    str, AfterValidator(_absolute_path), Field(json_schema_extra={"pattern": "^/", "minLength": 1})
]


class ClaimVolume(StrictModel):
    """A PersistentVolumeClaim of the job's namespace (made beforehand, by the platform)."""

    claim_name: Name
    read_only: StrictBool = False


class ConfigMapVolume(StrictModel):
    name: Name
    optional: StrictBool = False


class EmptyDirVolume(StrictModel):
    medium: Literal["", "Memory"] = ""
    size_limit: Memory | None = None


class Volume(StrictModel):
    """One volume a job's pods may mount: exactly one of a claim, a ConfigMap or an emptyDir (an
    emptyDir is per pod: it lives as long as that pod, not the job)."""

    name: Name
    persistent_volume_claim: ClaimVolume | None = None
    config_map: ConfigMapVolume | None = None
    empty_dir: EmptyDirVolume | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> Volume:
        kinds = [k for k in VOLUME_KINDS if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError(
                f"volume {self.name!r}: set exactly one of {', '.join(map(repr, VOLUME_KINDS))} "
                f"(got {', '.join(map(repr, kinds)) or 'none'})"
            )
        return self


VOLUME_KINDS = ("persistent_volume_claim", "config_map", "empty_dir")


class VolumeMount(StrictModel):
    volume: Name
    path: AbsolutePath
    read_only: StrictBool = False
    sub_path: NonEmptyStr | None = None


class RoleMounts(StrictModel):
    """Which volumes each kind of pod mounts, and where. Mounting a volume at ``/var/lib/primus``
    (PRIMUS_HOME in a pod) on the master and the trainer keeps the job's files and the trainer's
    checkpoints across pod restarts; without one, each pod has an emptyDir there."""

    master: list[VolumeMount] = Field(default_factory=list)
    data: list[VolumeMount] = Field(default_factory=list)
    trainer: list[VolumeMount] = Field(default_factory=list)
    evaluator: list[VolumeMount] = Field(default_factory=list)

    def of(self, role: str) -> list[VolumeMount]:
        mounts: list[VolumeMount] = getattr(self, role)
        return mounts


class RoleImages(StrictModel):
    """Per-role images; a role without one runs ``image``. The data image (master, data executors)
    needs no torch; the trainer's needs the ``[train]`` extra."""

    master: NonEmptyStr | None = None
    data: NonEmptyStr | None = None
    trainer: NonEmptyStr | None = None
    evaluator: NonEmptyStr | None = None


class KubernetesBackend(StrictModel):
    """Where and how executor pods run. ``image`` defaults to the provider's executor image
    (docker/Dockerfile), ``images`` overrides it per role; ``volumes`` are mounted per role by
    ``mounts``; ``on_resize_refused`` is the fallback when the cluster refuses an in-place
    resize: ``keep`` the allotment (the autoscaler may scale out instead) or ``recreate`` the pod."""

    namespace: NonEmptyStr = "default"
    image: NonEmptyStr | None = None
    images: RoleImages = Field(default_factory=RoleImages)
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    volumes: list[Volume] = Field(default_factory=list)
    mounts: RoleMounts = Field(default_factory=RoleMounts)
    context: NonEmptyStr | None = None
    executor_service_account: NonEmptyStr | None = None
    on_resize_refused: Literal["keep", "recreate"] = "keep"
    # Networks (CIDRs) besides pods labelled ``primus.dev/control-client: "true"`` from which the
    # job's NetworkPolicy lets the master's control API be called (an Airflow outside the cluster).
    control_from: list[Cidr] = Field(default_factory=list)

    def image_of(self, role: str) -> str | None:
        image: str | None = getattr(self.images, role)
        return image or self.image

    @model_validator(mode="after")
    def _mounts_name_volumes(self) -> KubernetesBackend:
        issues: list[tuple[tuple[str | int, ...], str]] = []
        names = [v.name for v in self.volumes]
        for name in sorted({n for n in names if names.count(n) > 1}):
            issues.append((("volumes",), f"volume name {name!r} is declared more than once"))
        for role in POD_ROLES:
            paths: set[str] = set()
            for i, mount in enumerate(self.mounts.of(role)):
                if mount.volume not in names:
                    known = ", ".join(map(repr, names)) or "none declared"
                    issues.append(
                        (
                            ("mounts", role, i, "volume"),
                            f"names no volume in 'volumes' ({mount.volume!r}; {known})",
                        )
                    )
                if mount.path in paths:
                    issues.append(
                        (("mounts", role, i, "path"), f"{mount.path} is mounted twice in the {role} pod")
                    )
                paths.add(mount.path)
        if issues:
            raise_issues(issues)
        return self


class YarnBackend(StrictModel):
    """Where and how executor containers run on YARN. The cluster is the one the Hadoop client
    configuration in ``conf_dir`` (default: ``$HADOOP_CONF_DIR``) names; ``resource_manager`` (a
    ``http://host:port``) overrides its web address. ``user`` is the YARN user under simple
    authentication (default: the master's); ``python`` the interpreter on the NodeManagers (default:
    the master's own, right on a one-machine cluster). ``staging_dir`` is where the application's
    files are staged on the default filesystem (default ``/user/<user>/.primus``).
    ``on_resize_refused`` as for Kubernetes: ``keep`` the allotment or ``recreate`` the container.
    On a Kerberized cluster (``hadoop.security.authentication: kerberos`` in the configuration)
    ``principal`` and ``keytab`` (a path on the master's machine) are the login the master uses and
    renews itself, as Spark's ``--principal``/``--keytab``; without them it uses the ticket cache
    (``kinit``) or ``KRB5_CLIENT_KTNAME``. ``user`` is then the principal's short name.
    ``wheels``: the user's pure-Python wheels (paths on the master's machine, relative to the job
    file), staged with the application and localized into every executor's container, ahead on its
    import path, as Spark's ``--py-files``: the user's model and transforms without installing
    anything on the NodeManagers."""

    conf_dir: NonEmptyStr | None = None
    resource_manager: NonEmptyStr | None = None
    queue: NonEmptyStr = "default"
    user: NonEmptyStr | None = None
    python: NonEmptyStr | None = None
    staging_dir: NonEmptyStr | None = None
    am_memory: Memory = 512 * 2**20
    max_attempts: Annotated[int, Strict(), Field(ge=1, le=100)] = 4
    on_resize_refused: Literal["keep", "recreate"] = "keep"
    principal: NonEmptyStr | None = None
    keytab: NonEmptyStr | None = None
    wheels: list[NonEmptyStr] = Field(default_factory=list)

    @model_validator(mode="after")
    def _keytab_needs_principal(self) -> YarnBackend:
        if self.keytab and not self.principal:
            raise ValueError("keytab needs principal: the Kerberos principal whose keys the keytab holds")
        return self


class LocalBackend(StrictModel):
    """The Python the executors of a local job run: ``python``, the interpreter of trainers and data
    executors (a virtual environment holding the user's packages and this provider; default: the
    master's own), and ``paths``, folders or pure-Python wheels put ahead on their import path (a
    user's source tree, as PYTHONPATH would). Relative paths are the job file's; both are checked
    at submit, with a python model built in that environment."""

    python: NonEmptyStr | None = None
    paths: list[NonEmptyStr] = Field(default_factory=list)


class Backend(StrictModel):
    """``local``, ``kubernetes``, ``yarn``: the settings of that backend.

    ``tls``: the control API, the dispatcher and every data executor serve TLS with a certificate
    authority made for this job when it is submitted, and every client verifies it (the token stays
    the authorisation). Unset: on for Kubernetes and for a local or YARN job that listens beyond
    loopback, off for a job on 127.0.0.1 (nothing leaves the machine)."""

    type: Literal["local", "kubernetes", "yarn"] = "local"
    local: LocalBackend | None = None
    kubernetes: KubernetesBackend | None = None
    yarn: YarnBackend | None = None
    tls: StrictBool | None = None


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


class Control(StrictModel):
    """Where the master's control API and dispatcher listen: loopback unless configured."""

    host: NonEmptyStr = "127.0.0.1"
    port: Annotated[int, Strict(), Field(ge=0, le=65535)] = 0


class DataService(StrictModel):
    window: Annotated[int, Strict(), Field(gt=0, le=1_024)] = 8
    batch_rows: BatchRows = 8192
    max_attempts: Annotated[int, Strict(), Field(gt=0, le=100)] = 3
    max_failed_share: Annotated[float, Strict(), Field(ge=0, le=1, allow_inf_nan=False)] = 0.0
    # How long executors and trainers keep retrying while the master is away (its restart).
    master_grace_s: PositiveFloat = 60.0


class JobSpec(StrictModel):
    # Paths are relative to the job document; ``training`` absent means the embedded defaults.
    data: NonEmptyStr
    training: NonEmptyStr | None = None
    roles: Roles = Field(default_factory=Roles)
    scaling: Scaling = Field(default_factory=Scaling)
    backend: Backend = Field(default_factory=Backend)
    control: Control = Field(default_factory=Control)
    data_service: DataService = Field(default_factory=DataService)
    # Keep consuming the stream after its current end (a long-running streaming trainer).
    follow: StrictBool = False
    max_steps: PositiveInt | None = None
    passthrough: list[NonEmptyStr] = Field(default_factory=list)

    @property
    def tls(self) -> bool:
        """Whether the job's servers speak TLS (``backend.tls``, else its default)."""
        if self.backend.tls is not None:
            return self.backend.tls
        return self.backend.type == "kubernetes" or not is_loopback(self.control.host)

    @model_validator(mode="after")
    def _backend_settings(self) -> JobSpec:
        issues: list[tuple[tuple[str, ...], str]] = []
        for kind in ("kubernetes", "yarn"):
            if self.backend.type != kind and getattr(self.backend, kind) is not None:
                issues.append((("backend", kind), f"only allowed with backend.type {kind!r}"))
        if issues:
            raise_issues(issues)
        return self


class PrimusJob(StrictModel):
    """The hub version (the newest): an older document is converted to it on load (contracts/versions.py)."""

    api_version: Literal["primus.dev/v1beta1"] = Field(alias="apiVersion")
    kind: Literal["PrimusJob"]
    metadata: Metadata
    spec: JobSpec


def validate_job_spec(document: Mapping[str, Any]) -> PrimusJob:
    """A validated PrimusJob; a ``status`` in a submitted document is an error (the master owns it)."""
    issues: list[SpecIssue] = []
    if isinstance(document, Mapping) and "status" in document:
        issues.append(SpecIssue("status", "is written by the master only; remove it from the document"))
        document = {k: v for k, v in document.items() if k != "status"}
    hub, refused = to_hub(document, "PrimusJob")
    issues.extend(refused)
    try:
        job = PrimusJob.model_validate(hub)
    except ValidationError as exc:
        raise SpecError(issues + issues_from_validation_error(exc, PrimusJob)) from None
    if issues:
        raise SpecError(issues)
    return job


def stored_job(document: Mapping[str, Any]) -> PrimusJob:
    """A job as a store holds it, of any served version: a store written before v1beta1 keeps its
    v1alpha1 records, and they are read through the same conversion a submitted document is."""
    return PrimusJob.model_validate(to_hub(document, "PrimusJob")[0])
