"""Golden documents of every released contract version validate and convert, on every run, forever.

``golden/<version>/`` holds documents written against that version (the examples the repo shipped
with it, and documents exercising many fields). Each one must validate, convert to every version of
its kind and back to exactly itself, and mean the same model at every version. Adding a version adds
a folder; a version's folder is never edited (a document that stops validating is a broken promise).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_primus.contracts.loader import read_document, validate_document
from airflow_provider_primus.contracts.versions import VERSIONS, api_version, convert, hub_version
from airflow_provider_primus.master.jobs import load_job

GOLDEN = Path(__file__).parent / "golden"
DOCUMENTS = sorted(GOLDEN.glob("*/*.yaml"))


def _id(path: Path) -> str:
    return f"{path.parent.name}/{path.name}"


def test_every_released_version_has_golden_documents() -> None:
    released = {version for versions in VERSIONS.values() for version in versions}
    assert {p.name for p in GOLDEN.iterdir() if p.is_dir()} == released
    for kind, versions in VERSIONS.items():
        for version in versions:
            found = [p for p in GOLDEN.glob(f"{version}/*.yaml") if read_document(p)["kind"] == kind]
            assert found, f"no golden {kind} of {version}"


@pytest.mark.parametrize("path", DOCUMENTS, ids=_id)
def test_golden_document_validates_at_its_version(path: Path) -> None:
    document = read_document(path)
    assert document["apiVersion"] == api_version(path.parent.name)
    validated = validate_document(document)
    assert validated.api_version == api_version(hub_version(document["kind"]))
    if document["kind"] == "PrimusJob":  # with the documents it references, as a submit checks it
        _job, stored = load_job(document, path.parent)
        assert stored["apiVersion"] == api_version(hub_version("PrimusJob"))  # the newest is stored


@pytest.mark.parametrize("path", DOCUMENTS, ids=_id)
def test_golden_document_converts_losslessly(path: Path) -> None:
    document = read_document(path)
    own = path.parent.name
    meaning = _meaning(document)
    for version in VERSIONS[document["kind"]]:
        there = convert(document, version)
        assert there["apiVersion"] == api_version(version)
        assert _meaning(there) == meaning, f"{version} means another document"
        assert convert(there, own) == document, f"the round trip through {version} changed it"


def _meaning(document: dict[str, Any]) -> dict[str, Any]:
    """What a document means: its hub model, all defaults filled in."""
    return validate_document(document).model_dump(mode="json", by_alias=True)
