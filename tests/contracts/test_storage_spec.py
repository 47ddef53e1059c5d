"""The ``storage`` section of files sources, checkpoints and publishing: pure data, validated."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_primus.contracts import SpecError, validate_data_spec
from tests.data.conftest import spec_doc


def source(uri: str = "s3://lake/clicks", **storage: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": "clicks",
        "type": "files",
        "format": "parquet",
        "uri": uri,
        "path_template": "{date}",
        "granularity": "day",
        "schema": {"sparse": ["user_id"], "label": {"column": "clicked"}},
    }
    if storage:
        out["storage"] = storage
    return out


def problems(document: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as err:
        validate_data_spec(document)
    return str(err.value)


def test_a_full_storage_section_validates() -> None:
    spec = validate_data_spec(
        spec_doc(
            [
                source(
                    endpoint="https://minio.internal:9000",
                    region="eu-west-1",
                    addressing="virtual",
                    credentials={"secret": {"name": "lake-creds"}},
                )
            ]
        )
    )
    storage = spec.spec.sources[0].storage
    assert storage.endpoint == "https://minio.internal:9000"
    assert storage.credentials.secret.env_names()[0] == "PRIMUS_S3_SECRET_LAKE_CREDS_ACCESS_KEY_ID"
    assert storage.credentials.describe() == "Kubernetes Secret 'lake-creds'"


def test_env_credentials_default_to_the_aws_names() -> None:
    spec = validate_data_spec(spec_doc([source(credentials={"env": {}})]))
    env = spec.spec.sources[0].storage.credentials.env
    assert (env.access_key_id, env.secret_access_key) == ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def test_exactly_one_credentials_origin() -> None:
    text = problems(spec_doc([source(credentials={"connection": "aws_default", "env": {}})]))
    assert "set exactly one of 'connection'" in text and "credentials" in text
    assert "got none" in problems(spec_doc([source(credentials={})])) or "exactly one" in problems(
        spec_doc([source(credentials={})])
    )


def test_storage_on_a_local_path_is_refused() -> None:
    text = problems(spec_doc([source(uri="/data/clicks", region="us-east-1")]))
    assert "'storage' applies to s3:// locations only" in text


@pytest.mark.parametrize(
    ("endpoint", "fragment"),
    [
        ("minio:9000", "must be http://host[:port]"),
        ("http://minio:9000/bucket", "no path"),
        ("http://minio:99999", "bad port"),
    ],
)
def test_bad_endpoints_say_what_is_expected(endpoint: str, fragment: str) -> None:
    assert fragment in problems(spec_doc([source(endpoint=endpoint)]))


def test_addressing_is_path_or_virtual() -> None:
    assert "addressing" in problems(spec_doc([source(addressing="dns")]))


def test_a_secret_value_cannot_be_written_into_the_contract() -> None:
    text = problems(spec_doc([source(credentials={"env": {"access_key_id": "AKIA…", "secret": "x"}})]))
    assert "secret" in text


def test_an_s3_uri_needs_a_bucket() -> None:
    assert "needs a bucket" in problems(spec_doc([source(uri="s3:///clicks")]))
