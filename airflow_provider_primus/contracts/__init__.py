"""The contracts as pure data: strict models, their loader and their errors.

Nothing here imports Airflow, Kafka clients or torch, so the CLI, the planner and the operators can
validate a spec cheaply and identically.
"""

from airflow_provider_primus.contracts.base import Metadata, StrictModel
from airflow_provider_primus.contracts.data import (
    API_VERSION,
    MixtureEntry,
    Planning,
    PrimusData,
    Source,
    Spec,
    Window,
    validate_data_spec,
)
from airflow_provider_primus.contracts.errors import SpecError, SpecIssue
from airflow_provider_primus.contracts.loader import data_spec_json_schema, load_data_spec, read_document
from airflow_provider_primus.contracts.schema import Label, SourceSchema, Transform
from airflow_provider_primus.contracts.sources import (
    EventTimePolicy,
    FileSource,
    KafkaSource,
    MissingPolicy,
    StartPolicy,
)
from airflow_provider_primus.contracts.tables import DeltaSource, IcebergCatalog, IcebergSource

__all__ = [
    "API_VERSION",
    "DeltaSource",
    "EventTimePolicy",
    "FileSource",
    "IcebergCatalog",
    "IcebergSource",
    "KafkaSource",
    "Label",
    "Metadata",
    "MissingPolicy",
    "MixtureEntry",
    "Planning",
    "PrimusData",
    "Source",
    "SourceSchema",
    "Spec",
    "SpecError",
    "SpecIssue",
    "StartPolicy",
    "StrictModel",
    "Transform",
    "Window",
    "data_spec_json_schema",
    "load_data_spec",
    "read_document",
    "validate_data_spec",
]
