"""An Iceberg catalog as a document names it: the table sources and the feature tables of an as-of
join both find their tables through one. Pure data: secrets are only named (an Airflow connection)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from airflow_provider_primus.contracts.base import NonEmptyStr, StrictModel
from airflow_provider_primus.contracts.errors import raise_issues

__all__ = ["SECRET_PROPERTIES", "IcebergCatalog"]

# Property names a catalog document may not carry in clear: their values are secrets.
SECRET_PROPERTIES = ("credential", "token", "password", "secret", "s3.secret-access-key", "s3.session-token")


class IcebergCatalog(StrictModel):
    """Where the table's metadata lives, as pyiceberg's catalog properties name it.

    ``sql``: a SQL catalog (SQLite for the embedded default and the tests, or any SQLAlchemy URL);
    ``rest``, ``hive`` and ``glue``: the catalogs a lakehouse runs. ``properties`` are passed to the
    catalog as they are (``s3.endpoint``, ``client.region``, ...); a secret goes in ``connection``
    (an Airflow connection whose extra holds the properties, resolved by the operators), never here.
    """

    type: Literal["sql", "rest", "hive", "glue"]
    name: NonEmptyStr = "default"
    uri: NonEmptyStr | None = None
    warehouse: NonEmptyStr | None = None
    properties: dict[NonEmptyStr, str] = Field(default_factory=dict)
    connection: NonEmptyStr | None = None

    @field_validator("properties")
    @classmethod
    def _no_secrets(cls, value: dict[str, str]) -> dict[str, str]:
        # Documents are copied into graphs, job records and the UI: a secret here would leak there.
        leaked = sorted(k for k in value if any(s in k.lower() for s in SECRET_PROPERTIES))
        if leaked:
            raise ValueError(
                f"must not hold secrets ({', '.join(leaked)}): put them in the extra of an Airflow "
                "connection named by 'connection', or in the executors' environment"
            )
        return value

    @model_validator(mode="after")
    def _uri_where_needed(self) -> IcebergCatalog:
        if self.type in ("sql", "rest", "hive") and self.uri is None and self.connection is None:
            raise_issues(
                [(("uri",), f"required for a {self.type} catalog (or a 'connection' that gives it)")]
            )
        if self.type == "sql" and self.warehouse is None:
            raise_issues(
                [(("warehouse",), "required for a sql catalog: where its tables' files are written")]
            )
        return self
