"""How a Kafka client reaches a secured cluster: protocol, SASL mechanism and user, TLS files — and
where the password is, never the password itself.

Pure data. A contract document is copied into task graphs, job records, logs and the UI, so it names
the environment variable that holds the password (or an Airflow connection, resolved by the
operators); building the kafka-python settings from it is ``data/sources/kafka_client.py``'s job.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from airflow_provider_primus.contracts.base import NonEmptyStr, StrictModel
from airflow_provider_primus.contracts.errors import raise_issues
from airflow_provider_primus.contracts.storage import EnvName, _env_name

__all__ = ["SASL_MECHANISMS", "SECURITY_PROTOCOLS", "KafkaSecurity"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
FilePath = Annotated[str, Field(min_length=1)]


class KafkaSecurity(StrictModel):
    """A client's security settings, as Kafka names them (``security.protocol``, ``sasl.mechanism``).

    ``password_env`` names the environment variable holding the SASL password in the process that
    connects (the trainer, an executor, ``primus gen``); ``ssl_*`` are PEM files on that machine."""

    protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None
    username: NonEmptyStr | None = None
    password_env: EnvName | None = None
    ssl_cafile: FilePath | None = None  # the CA that signed the brokers' certificates (else the system's)
    ssl_certfile: FilePath | None = None  # a client certificate, for clusters that authenticate by TLS
    ssl_keyfile: FilePath | None = None
    ssl_key_password_env: EnvName | None = None  # for an encrypted ``ssl_keyfile``
    # Verify that the broker's certificate names the host connected to. Only a test cluster whose
    # certificates name no host should turn this off.
    ssl_check_hostname: bool = True

    @field_validator("password_env", "ssl_key_password_env")
    @classmethod
    def _names(cls, value: str | None) -> str | None:
        return value if value is None else _env_name(value)

    @model_validator(mode="after")
    def _consistent(self) -> KafkaSecurity:
        issues: list[tuple[tuple[str, ...], str]] = []
        sasl = self.protocol.startswith("SASL_")
        tls = self.protocol.endswith("SSL")
        if sasl:
            for key in ("sasl_mechanism", "username", "password_env"):
                if getattr(self, key) is None:
                    issues.append(((key,), f"required with protocol {self.protocol}"))
        else:
            for key in ("sasl_mechanism", "username", "password_env"):
                if getattr(self, key) is not None:
                    issues.append(
                        (
                            (key,),
                            f"only allowed with a SASL protocol (protocol is {self.protocol}); "
                            "use SASL_SSL or SASL_PLAINTEXT",
                        )
                    )
        if not tls:
            for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_key_password_env"):
                if getattr(self, key) is not None:
                    issues.append(
                        ((key,), f"only allowed with protocol SSL or SASL_SSL (protocol is {self.protocol})")
                    )
            if not self.ssl_check_hostname:
                issues.append((("ssl_check_hostname",), "only allowed with protocol SSL or SASL_SSL"))
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            issues.append(
                (
                    ("ssl_keyfile" if self.ssl_keyfile is None else "ssl_certfile",),
                    "a client certificate needs both ssl_certfile and ssl_keyfile",
                )
            )
        if self.ssl_key_password_env is not None and self.ssl_keyfile is None:
            issues.append((("ssl_key_password_env",), "only allowed with ssl_keyfile"))
        if issues:
            raise_issues(issues)
        return self

    def describe(self) -> str:
        """What the settings are, for messages: never a secret, only where it comes from."""
        text: str = self.protocol
        if self.sasl_mechanism:
            text += f" {self.sasl_mechanism} as user {self.username!r} (password from ${self.password_env})"
        return text
