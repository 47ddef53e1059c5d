"""A real S3-compatible server (SeaweedFS, Apache-2.0) built from source, for tests and development."""

from airflow_provider_primus.embedded.s3.binary import (
    SEAWEEDFS_VERSION,
    GoNotFoundError,
    SeaweedBuildError,
    ensure_seaweedfs,
)
from airflow_provider_primus.embedded.s3.server import EmbeddedS3, S3ServerError, S3State

__all__ = [
    "SEAWEEDFS_VERSION",
    "EmbeddedS3",
    "GoNotFoundError",
    "S3ServerError",
    "S3State",
    "SeaweedBuildError",
    "ensure_seaweedfs",
]
