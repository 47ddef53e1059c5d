"""Kerberos for Hadoop's HTTP endpoints: SPNEGO (``Authorization: Negotiate``) on the
ResourceManager's REST API and on WebHDFS, from the credentials any MIT Kerberos client uses.

Where the credentials come from, in this order: a principal and keytab the job (or the Airflow
connection) names, which this process then logs in with by itself and renews from the keytab as
tickets expire (as Spark's ``--principal``/``--keytab``); else the standard places of a Kerberos
client: the ticket cache of ``kinit`` (``KRB5CCNAME``) or a client keytab (``KRB5_CLIENT_KTNAME``).
The realm and KDC come from ``krb5.conf`` (``KRB5_CONFIG``). A named login is also exported to this
process's environment (``PRIMUS_KERBEROS_PRINCIPAL``/``_KEYTAB``) so whatever else in it opens an
``hdfs://`` URI (the planner) authenticates the same way.

The executors in containers hold no Kerberos credentials: they use the HDFS delegation token the
submission obtained (``PRIMUS_HDFS_TOKEN_FILE``), as every YARN application's containers do.

Needs the ``gssapi`` package (the ``kerberos`` extra), imported only when a cluster is Kerberized.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import httpx

from airflow_provider_primus.errors import PrimusError

if TYPE_CHECKING:
    import requests

__all__ = [
    "HDFS_TOKEN_FILE_ENV",
    "KerberosError",
    "KerberosLogin",
    "RequestsSpnegoAuth",
    "SpnegoAuth",
    "short_name",
]

PRINCIPAL_ENV = "PRIMUS_KERBEROS_PRINCIPAL"
KEYTAB_ENV = "PRIMUS_KERBEROS_KEYTAB"
# Where a container finds the application's HDFS delegation token (URL-safe encoded).
HDFS_TOKEN_FILE_ENV = "PRIMUS_HDFS_TOKEN_FILE"
SPNEGO_OID = b"\x2b\x06\x01\x05\x05\x02"  # 1.3.6.1.5.5.2


class KerberosError(PrimusError):
    """No usable Kerberos credentials, or the server's SPNEGO answer did not verify; the message
    says which and how to fix it (never a ticket or key)."""


def _gssapi() -> Any:
    try:
        import gssapi
    except ImportError as exc:
        raise KerberosError(
            "the gssapi package is missing (hadoop.security.authentication=kerberos needs it); install "
            "it: pip install 'airflow-provider-primus[kerberos]' (it builds against MIT Kerberos: "
            "apt-get install libkrb5-dev)"
        ) from exc
    return gssapi


def short_name(principal: str) -> str:
    """A principal's short name as Hadoop's default ``auth_to_local`` rule maps it
    (``alice/host@REALM`` -> ``alice``): the user HDFS and YARN see."""
    return principal.split("@", 1)[0].split("/", 1)[0]


@dataclass(frozen=True)
class KerberosLogin:
    """Whose Kerberos credentials to use: a principal (optional: the cache's or keytab's default)
    and a keytab (optional: else the ticket cache)."""

    principal: str | None = None
    keytab: str | None = None

    @classmethod
    def from_environment(cls) -> KerberosLogin:
        return cls(os.environ.get(PRINCIPAL_ENV) or None, os.environ.get(KEYTAB_ENV) or None)

    def export(self) -> None:
        """Make this login the process's (and its children's) default for ``hdfs://`` access."""
        for key, value in ((PRINCIPAL_ENV, self.principal), (KEYTAB_ENV, self.keytab)):
            if value:
                os.environ[key] = value

    def credentials(self) -> Any:
        """Initiator credentials; raises :class:`KerberosError` saying what is missing."""
        gssapi = _gssapi()
        name = gssapi.Name(self.principal, gssapi.NameType.kerberos_principal) if self.principal else None
        try:
            if self.keytab:
                if not os.path.isfile(self.keytab):
                    raise KerberosError(f"Kerberos keytab {self.keytab} does not exist")
                # A private in-memory cache: tickets are fetched from the keytab, and again when
                # they expire, without touching the user's own cache.
                tag = hashlib.sha256(f"{self.principal}\0{self.keytab}".encode()).hexdigest()[:12]
                store = {"client_keytab": self.keytab, "ccache": f"MEMORY:primus-{tag}"}
                creds = gssapi.Credentials(name=name, usage="initiate", store=store)
            else:
                creds = gssapi.Credentials(name=name, usage="initiate")
            creds.lifetime  # noqa: B018 - inquiring fails now, not at the first request, when none exist
        except gssapi.exceptions.GSSError as exc:
            where = (
                f"keytab {self.keytab}" if self.keytab else "the ticket cache (kinit) or KRB5_CLIENT_KTNAME"
            )
            who = self.principal or "the default principal"
            raise KerberosError(
                f"no Kerberos credentials for {who} from {where}: {_gss_reason(exc)}"
            ) from exc
        return creds

    def principal_name(self) -> str:
        """The principal the credentials are for (the keytab's or cache's when none was named);
        raises :class:`KerberosError` when there are none, before any request is made."""
        creds = self.credentials()
        return self.principal or str(creds.name)


RELOGIN_S = 300  # log in again when the tickets have less than this left


def _expiring(creds: Any) -> bool:
    try:
        left = creds.lifetime
    except Exception:  # expired credentials cannot even be inquired
        return True
    return left is not None and left < RELOGIN_S


def _gss_reason(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text[:300]


class _Negotiator:
    """One SPNEGO exchange per request: the initial token for ``HTTP@host`` and, when the server
    sends its own token back (mutual authentication), its verification."""

    def __init__(self, login: KerberosLogin) -> None:
        self.login = login
        self._creds: Any = None

    def start(self, host: str) -> tuple[str, Any]:
        gssapi = _gssapi()
        if self._creds is None or _expiring(self._creds):
            # Again from the keytab (or the cache a renewing kinit keeps fresh): a master of a
            # streaming job outlives any ticket.
            self._creds = self.login.credentials()
        target = gssapi.Name(f"HTTP@{host}", gssapi.NameType.hostbased_service)
        ctx = gssapi.SecurityContext(
            name=target,
            creds=self._creds,
            usage="initiate",
            mech=gssapi.OID(elements=SPNEGO_OID),
            flags=gssapi.RequirementFlag.mutual_authentication,
        )
        try:
            token = ctx.step()
        except gssapi.exceptions.GSSError as exc:
            raise KerberosError(
                f"Kerberos: no service ticket for HTTP/{host} ({_gss_reason(exc)}); check krb5.conf "
                "(KRB5_CONFIG) names the cluster's realm and that the credentials are valid"
            ) from exc
        return "Negotiate " + base64.b64encode(token).decode(), ctx

    @staticmethod
    def verify(ctx: Any, status: int, header: str | None) -> None:
        if status == 401 or not header:
            return  # refused (the caller reports the HTTP error) or no mutual token sent
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "negotiate" or not value.strip():
            return
        gssapi = _gssapi()
        try:
            ctx.step(base64.b64decode(value.strip()))
        except (gssapi.exceptions.GSSError, ValueError) as exc:
            raise KerberosError(f"the server's SPNEGO answer did not verify: {_gss_reason(exc)}") from exc


def _has_delegation(params: Any) -> bool:
    return "delegation" in params  # a WebHDFS redirect carries a delegation token: no SPNEGO


class SpnegoAuth(httpx.Auth):
    """SPNEGO for httpx clients (the ResourceManager's REST API, WebHDFS staging)."""

    def __init__(self, login: KerberosLogin) -> None:
        self._negotiator = _Negotiator(login)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if _has_delegation(request.url.params):
            yield request
            return
        header, ctx = self._negotiator.start(request.url.host)
        request.headers["Authorization"] = header
        response = yield request
        self._negotiator.verify(ctx, response.status_code, response.headers.get("WWW-Authenticate"))


class RequestsSpnegoAuth:
    """The same for requests sessions (fsspec's WebHDFS reads ``hdfs://`` data with requests)."""

    def __init__(self, login: KerberosLogin) -> None:
        self._negotiator = _Negotiator(login)

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        url = urlsplit(request.url or "")
        if _has_delegation(parse_qs(url.query)):
            return request
        header, ctx = self._negotiator.start(url.hostname or "")
        request.headers["Authorization"] = header

        def verify(response: requests.Response, *args: Any, **kwargs: Any) -> requests.Response:
            self._negotiator.verify(ctx, response.status_code, response.headers.get("WWW-Authenticate"))
            return response

        request.register_hook("response", verify)
        return request
