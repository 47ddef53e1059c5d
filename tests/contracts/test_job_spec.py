"""The PrimusJob contract: strict like the data contract, quantities written the Kubernetes way, and
every problem reported at its document path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_primus.contracts.errors import SpecError
from airflow_provider_primus.contracts.job import (
    MAX_REPLICAS,
    PrimusJob,
    parse_cpu,
    parse_memory,
    validate_job_spec,
)
from airflow_provider_primus.contracts.loader import read_document
from airflow_provider_primus.master.jobs import load_job

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
EXAMPLE = EXAMPLES / "primus-job.yaml"

Doc = dict[str, Any]
Mi, Gi = 2**20, 2**30


def job(**spec: Any) -> Doc:
    """A minimal job (``spec.data`` only) with ``spec`` fields overridden."""
    return {
        "apiVersion": "primus.dev/v1alpha1",
        "kind": "PrimusJob",
        "metadata": {"name": "j"},
        "spec": {"data": "data.yaml", **spec},
    }


def data_role(**role: Any) -> Doc:
    return {"roles": {"data": role}}


def resources(**res: Any) -> Doc:
    return data_role(resources=res)


def issues(document: Doc) -> dict[str, str]:
    """path → message for every issue; fails the test if the document validates."""
    with pytest.raises(SpecError) as exc:
        validate_job_spec(document)
    found = {i.path: i.message for i in exc.value.issues}
    assert len(found) == len(exc.value.issues), f"two issues share a path: {exc.value}"
    return found


def only_issue(document: Doc) -> tuple[str, str]:
    found = issues(document)
    assert len(found) == 1, found
    return next(iter(found.items()))


# --- defaults ------------------------------------------------------------------------------------


def test_a_minimal_job_takes_every_default() -> None:
    spec = validate_job_spec(job()).spec
    assert (spec.data, spec.training, spec.follow, spec.max_steps, spec.passthrough) == (
        "data.yaml",
        None,
        False,
        None,
        [],
    )
    for role, memory in ((spec.roles.data, Gi), (spec.roles.trainer, 4 * Gi)):  # torch needs room
        assert (role.replicas.min, role.replicas.initial, role.replicas.max) == (1, None, None)
        assert (role.replicas.start, role.replicas.top) == (1, 1)
        assert (role.resources.cpu, role.resources.memory) == (1.0, memory)
        assert role.resources.cpu_range == (1.0, 1.0)  # unset bounds: no vertical scaling
        assert role.resources.memory_range == (memory, memory)
        assert (role.failover.max_restarts, role.failover.on_exhausted) == (3, "fail")
    # The trainer's default memory holds when only other fields of it are written.
    partial = validate_job_spec(job(roles={"trainer": {"resources": {"cpu": 2}}}))
    assert partial.spec.roles.trainer.resources.memory == 4 * Gi
    assert spec.roles.evaluator is None
    scaling = spec.scaling
    assert scaling.enabled is True
    assert scaling.actions == ["scale_out", "scale_in", "resize_cpu", "resize_memory"]
    assert (
        scaling.targets.cpu_utilization,
        scaling.targets.memory_utilization,
        scaling.targets.starvation,
    ) == (0.8, 0.75, 0.2)
    assert (scaling.window_s, scaling.cooldown_s) == (10.0, 15.0)
    assert (scaling.max_step.replicas, scaling.max_step.cpu, scaling.max_step.memory_factor) == (1, 1.0, 1.5)
    assert (spec.backend.type, spec.backend.kubernetes) == ("local", None)
    assert (spec.control.host, spec.control.port) == ("127.0.0.1", 0)
    ds = spec.data_service
    assert (ds.window, ds.batch_rows, ds.max_attempts, ds.max_failed_share, ds.master_grace_s) == (
        8,
        8192,
        3,
        0.0,
        60.0,
    )


def test_spec_data_is_required() -> None:
    document = job()
    del document["spec"]["data"]
    assert only_issue(document) == ("spec.data", "required field is missing")


def test_replicas_default_to_min_and_initial() -> None:
    replicas = validate_job_spec(job(**data_role(replicas={"min": 2, "max": 5}))).spec.roles.data.replicas
    assert (replicas.start, replicas.top) == (2, 5)
    replicas = validate_job_spec(job(**data_role(replicas={"min": 1, "initial": 3}))).spec.roles.data.replicas
    assert (replicas.start, replicas.top) == (3, 3)


def test_the_stored_form_validates_again() -> None:
    first = validate_job_spec(job(**resources(cpu="500m", memory="512Mi")))
    again = validate_job_spec(first.model_dump(mode="json", by_alias=True, exclude_none=True))
    assert again == first


# --- quantities ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "cores"),
    [(0.5, 0.5), (2, 2.0), ("500m", 0.5), ("2", 2.0), ("1.5", 1.5), ("250m", 0.25), (" 2 ", 2.0)],
)
def test_cpu_quantities(written: Any, cores: float) -> None:
    assert parse_cpu(written) == cores
    assert validate_job_spec(job(**resources(cpu=written))).spec.roles.data.resources.cpu == cores


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("x", "must be a number of cores or millicores like '500m' (got 'x')"),
        (True, "must be a number of cores or millicores like '500m' (got True)"),
        (0, "must be more than 0 cores and at most 1024 (got 0)"),
        ("0m", "must be more than 0 cores and at most 1024 (got '0m')"),
        ("-1", "must be a number of cores or millicores like '500m' (got '-1')"),
        (2048, "must be more than 0 cores and at most 1024 (got 2048)"),
    ],
)
def test_bad_cpu_quantities_are_named(written: Any, message: str) -> None:
    with pytest.raises(ValueError, match="must be"):
        parse_cpu(written)
    assert only_issue(job(**resources(cpu=written))) == ("spec.roles.data.resources.cpu", message)


@pytest.mark.parametrize(
    ("written", "size"),
    [
        ("512Mi", 512 * Mi),
        ("2Gi", 2 * Gi),
        ("500M", 500 * 10**6),
        ("1.5Gi", 3 * Gi // 2),
        (64 * Mi, 64 * Mi),
        (str(32 * Mi), 32 * Mi),
        ("16Mi", 16 * Mi),
    ],
)
def test_memory_quantities(written: Any, size: int) -> None:
    assert parse_memory(written) == size
    assert validate_job_spec(job(**resources(memory=written))).spec.roles.data.resources.memory == size


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("15Mi", "must be at least 16Mi (got '15Mi')"),
        (1024, "must be at least 16Mi (got 1024)"),
        ("1Gb", "must be bytes or a quantity like '512Mi', '2Gi' (got '1Gb')"),
        ("2 GiB", "must be bytes or a quantity like '512Mi', '2Gi' (got '2 GiB')"),
        (True, "must be bytes or a quantity like '512Mi' (got True)"),
    ],
)
def test_bad_memory_quantities_are_named(written: Any, message: str) -> None:
    with pytest.raises(ValueError, match="must be"):
        parse_memory(written)
    assert only_issue(job(**resources(memory=written))) == ("spec.roles.data.resources.memory", message)


def test_bounds_take_quantities_too() -> None:
    res = validate_job_spec(
        job(
            **resources(
                cpu="1",
                memory="1Gi",
                bounds={"cpu": {"min": "500m", "max": 4}, "memory": {"min": "512Mi", "max": "4Gi"}},
            )
        )
    ).spec.roles.data.resources
    assert res.cpu_range == (0.5, 4.0)
    assert res.memory_range == (512 * Mi, 4 * Gi)


# --- unknown fields ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "path", "hint"),
    [
        ({"rols": {}}, "spec.rols", "roles"),
        (data_role(replica={}), "spec.roles.data.replica", "replicas"),
        (resources(memroy="1Gi"), "spec.roles.data.resources.memroy", "memory"),
        (resources(bounds={"cpu": {"maximum": 2}}), "spec.roles.data.resources.bounds.cpu.maximum", "max"),
        ({"scaling": {"cooldown": 3}}, "spec.scaling.cooldown", "cooldown_s"),
        ({"scaling": {"targets": {"starvaton": 0.1}}}, "spec.scaling.targets.starvaton", "starvation"),
        ({"data_servce": {}}, "spec.data_servce", "data_service"),
    ],
)
def test_unknown_fields_name_the_path_and_the_closest_field(spec: Doc, path: str, hint: str) -> None:
    assert only_issue(job(**spec)) == (path, f"unknown field; did you mean {hint!r}?")


def test_unknown_top_level_field_and_role() -> None:
    document = job(roles={"worker": {}})
    document["metdata"] = document.pop("metadata")
    found = issues(document)
    assert found["metdata"] == "unknown field; did you mean 'metadata'?"
    assert found["metadata"] == "required field is missing"
    assert found["spec.roles.worker"].startswith("unknown field")


# --- cross-field checks --------------------------------------------------------------------------


def test_initial_below_min_is_named() -> None:
    found = issues(job(**data_role(replicas={"min": 3, "initial": 2, "max": 4})))
    assert found == {"spec.roles.data.replicas.initial": "must be at least min (3), got 2"}


def test_max_below_initial_is_named() -> None:
    found = issues(job(**data_role(replicas={"min": 1, "initial": 3, "max": 2})))
    assert found == {"spec.roles.data.replicas.max": "must be at least min and initial (3), got 2"}


def test_max_below_min_is_named() -> None:
    found = issues(job(**data_role(replicas={"min": 4, "max": 2})))
    assert found == {"spec.roles.data.replicas.max": "must be at least min and initial (4), got 2"}


@pytest.mark.parametrize(
    ("replicas", "field", "message"),
    [
        ({"max": 10**30}, "max", f"must be at most {MAX_REPLICAS}"),
        ({"max": MAX_REPLICAS + 1}, "max", f"must be at most {MAX_REPLICAS}"),
        ({"min": 1, "initial": 20_000}, "initial", f"must be at most {MAX_REPLICAS}"),
        ({"min": 50_000}, "min", f"must be at most {MAX_REPLICAS}"),
        ({"max": 1e30}, "max", "must be an integer"),
        ({"max": 4.0}, "max", "must be an integer"),
        ({"max": "1e30"}, "max", "must be an integer"),
    ],
)
def test_replica_counts_are_bounded_integers(replicas: Doc, field: str, message: str) -> None:
    path, found = only_issue(job(**data_role(replicas=replicas)))
    assert (path, found) == (f"spec.roles.data.replicas.{field}", message)


def test_replica_counts_up_to_the_bound_pass() -> None:
    replicas = validate_job_spec(job(**data_role(replicas={"max": MAX_REPLICAS}))).spec.roles.data.replicas
    assert replicas.top == MAX_REPLICAS


@pytest.mark.parametrize(
    ("res", "path", "message"),
    [
        ({"cpu": 2, "bounds": {"cpu": {"min": 3}}}, "bounds.cpu.min", "must not exceed cpu (2), got 3"),
        (
            {"cpu": 2, "bounds": {"cpu": {"max": "1500m"}}},
            "bounds.cpu.max",
            "must not be below cpu (2), got 1.5",
        ),
        (
            {"memory": "1Gi", "bounds": {"memory": {"min": "2Gi"}}},
            "bounds.memory.min",
            "must not exceed memory (1Gi)",
        ),
        (
            {"memory": "1Gi", "bounds": {"memory": {"max": "512Mi"}}},
            "bounds.memory.max",
            "must not be below memory (1Gi)",
        ),
    ],
)
def test_bounds_that_exclude_the_requested_value_are_named(res: Doc, path: str, message: str) -> None:
    assert only_issue(job(**resources(**res))) == (f"spec.roles.data.resources.{path}", message)


def test_a_job_needs_a_trainer() -> None:
    path, message = only_issue(job(roles={"trainer": {"replicas": {"min": 0}}}))
    assert path == "spec.roles.trainer.replicas.min"
    assert "at least 1 trainer" in message


def test_trainer_replicas_may_range_for_elastic_regrouping() -> None:
    spec = validate_job_spec(job(roles={"trainer": {"replicas": {"min": 1, "initial": 2, "max": 4}}})).spec
    assert (spec.roles.trainer.replicas.start, spec.roles.trainer.replicas.top) == (2, 4)


def test_a_scaling_action_typo_is_named_with_a_suggestion() -> None:
    path, message = only_issue(job(scaling={"actions": ["scale_out", "scale_ot"]}))
    assert path == "spec.scaling.actions[1]"
    assert message.startswith("must be one of 'scale_out', 'scale_in', 'resize_cpu', 'resize_memory'")
    assert message.endswith("(got 'scale_ot'); did you mean 'scale_out'?")


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"scaling": {"targets": {"cpu_utilization": 1}}}, "spec.scaling.targets.cpu_utilization"),
        ({"scaling": {"window_s": 0}}, "spec.scaling.window_s"),
        ({"scaling": {"max_step": {"memory_factor": 1}}}, "spec.scaling.max_step.memory_factor"),
        ({"data_service": {"max_failed_share": 1.5}}, "spec.data_service.max_failed_share"),
        (data_role(replicas={"min": True}), "spec.roles.data.replicas.min"),
        (data_role(failover={"on_exhausted": "retry"}), "spec.roles.data.failover.on_exhausted"),
        ({"backend": {"type": "k8s"}}, "spec.backend.type"),
        ({"control": {"port": -1}}, "spec.control.port"),
        ({"max_steps": 0}, "spec.max_steps"),
    ],
)
def test_bad_values_name_their_field(spec: Doc, path: str) -> None:
    assert only_issue(job(**spec))[0] == path


@pytest.mark.parametrize("spec", [{"follow": "yes"}, {"follow": 1}, {"scaling": {"enabled": "true"}}])
def test_booleans_are_not_coerced(spec: Doc) -> None:
    assert only_issue(job(**spec))[1] == "must be true or false"


def test_status_in_a_submitted_document_is_refused() -> None:
    document = job()
    document["status"] = {"phase": "Running"}
    assert only_issue(document) == ("status", "is written by the master only; remove it from the document")


def test_kubernetes_settings_with_the_local_backend_are_refused() -> None:
    assert only_issue(job(backend={"type": "local", "kubernetes": {"namespace": "ml"}})) == (
        "spec.backend.kubernetes",
        "only allowed with backend.type 'kubernetes'",
    )
    spec = validate_job_spec(job(backend={"type": "kubernetes", "kubernetes": {"namespace": "ml"}})).spec
    assert spec.backend.kubernetes is not None and spec.backend.kubernetes.namespace == "ml"


def test_several_problems_are_reported_at_once() -> None:
    document = job(
        rols={},
        roles={"data": {"replicas": {"min": 2, "initial": 1, "max": 3}, "resources": {"cpu": "x"}}},
        scaling={"cooldown": 3, "actions": ["scale_ot"]},
        control={"hots": "0.0.0.0"},
    )
    document["status"] = {}
    found = issues(document)
    assert set(found) == {
        "status",
        "spec.rols",
        "spec.roles.data.replicas.initial",
        "spec.roles.data.resources.cpu",
        "spec.scaling.cooldown",
        "spec.scaling.actions[0]",
        "spec.control.hots",
    }
    with pytest.raises(SpecError) as exc:
        validate_job_spec(document)
    assert (
        str(exc.value).splitlines()[0] == "status: is written by the master only; remove it from the document"
    )


# --- the example ---------------------------------------------------------------------------------


def test_the_example_validates_with_its_references() -> None:
    job_, stored = load_job(read_document(EXAMPLE), EXAMPLE.parent)
    assert isinstance(job_, PrimusJob)
    assert job_.metadata.name == "movielens"
    assert stored["spec"]["data"] == str((EXAMPLES / "primus-data.yaml").resolve())
    assert stored["spec"]["training"] == str((EXAMPLES / "primus-training.yaml").resolve())
    spec = job_.spec
    data = spec.roles.data
    assert (data.replicas.min, data.replicas.start, data.replicas.top) == (1, 2, 4)
    assert data.resources.cpu_range == (0.5, 2.0)
    assert data.resources.memory_range == (512 * Mi, 2 * Gi)
    assert data.failover.on_exhausted == "continue"
    assert spec.roles.trainer.replicas.top == 1
    assert spec.scaling.enabled and spec.scaling.window_s == 10.0 and spec.scaling.cooldown_s == 15.0
    assert spec.backend.type == "local"


# --- Kubernetes: images, volumes and mounts ------------------------------------------------------


def kube(**settings: Any) -> Doc:
    return job(backend={"type": "kubernetes", "kubernetes": settings})


def test_volumes_mounts_and_role_images_are_read() -> None:
    spec = validate_job_spec(
        kube(
            image="data:1",
            images={"trainer": "trainer:1"},
            volumes=[
                {"name": "work", "persistent_volume_claim": {"claim_name": "primus-work"}},
                {"name": "conf", "config_map": {"name": "conf"}},
                {"name": "scratch", "empty_dir": {"size_limit": "1Gi", "medium": "Memory"}},
            ],
            mounts={
                "master": [{"volume": "work", "path": "/var/lib/primus", "sub_path": "home"}],
                "trainer": [
                    {"volume": "work", "path": "/var/lib/primus/"},
                    {"volume": "scratch", "path": "/s"},
                ],
            },
        )
    ).spec.backend.kubernetes
    assert spec is not None
    assert (spec.image_of("master"), spec.image_of("data"), spec.image_of("trainer")) == (
        "data:1",
        "data:1",
        "trainer:1",
    )
    assert spec.volumes[2].empty_dir is not None and spec.volumes[2].empty_dir.size_limit == Gi
    assert [m.path for m in spec.mounts.trainer] == ["/var/lib/primus", "/s"]
    assert spec.mounts.data == []


def test_a_volume_is_exactly_one_kind() -> None:
    path, message = only_issue(kube(volumes=[{"name": "v"}]))
    assert path == "spec.backend.kubernetes.volumes[0]"
    assert (
        "exactly one of 'persistent_volume_claim', 'config_map', 'empty_dir'" in message and "none" in message
    )
    both = {"name": "v", "empty_dir": {}, "config_map": {"name": "c"}}
    assert "got 'config_map', 'empty_dir'" in only_issue(kube(volumes=[both]))[1]


def test_mounts_name_declared_volumes_at_absolute_paths_once() -> None:
    found = issues(
        kube(
            volumes=[{"name": "work", "empty_dir": {}}, {"name": "work", "empty_dir": {}}],
            mounts={"data": [{"volume": "wrk", "path": "/a"}, {"volume": "work", "path": "/a"}]},
        )
    )
    assert "'work' is declared more than once" in found["spec.backend.kubernetes.volumes"]
    assert "names no volume in 'volumes' ('wrk'" in found["spec.backend.kubernetes.mounts.data[0].volume"]
    assert "/a is mounted twice in the data pod" in found["spec.backend.kubernetes.mounts.data[1].path"]
    path, message = only_issue(kube(volumes=[{"name": "w", "empty_dir": {}}],
                                    mounts={"trainer": [{"volume": "w", "path": "../x"}]}))  # fmt: skip
    assert path == "spec.backend.kubernetes.mounts.trainer[0].path" and "absolute path" in message
    path, _ = only_issue(kube(volumes=[{"name": "Bad_Name", "empty_dir": {}}]))
    assert path == "spec.backend.kubernetes.volumes[0].name"
