"""One SeaweedFS server (master, volume, filer and S3 gateway in one process) on loopback.

A real S3-compatible store for tests and development: real ranged reads, ETags, listings, multipart
uploads and signature checks, so object-store code is tested against what a store does rather than
what a mock assumes. Guarantees:

* every listener binds 127.0.0.1, on free ports chosen at start, gRPC ports included (SeaweedFS
  would otherwise put them at port + 10000); the optional Iceberg and Lance servers are off and the
  local sockets live in the work dir, not in ``/tmp``;
* telemetry is off (``-master.telemetry=false``; it is on by default and would call a public server)
  and the master does not wait for peers (``-master.peers=none``: a restart would otherwise spend
  ~13 s electing a leader);
* ready means the master reports a registered volume server *and* the S3 port answers HTTP;
* one identity with a generated access key and secret (``s3.json`` in the work dir, mode 0600);
  :class:`S3State` never shows the secret in its ``repr``;
* an attached server receives SIGTERM when its launching thread dies (PR_SET_PDEATHSIG), so a killed
  pytest leaves no server behind; ``stop`` sends SIGTERM to its process group, then SIGKILL.
"""

from __future__ import annotations

import json
import os
import secrets
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from airflow_provider_primus.embedded.server_process import LOOPBACK, ServerProcess, free_ports
from airflow_provider_primus.errors import PrimusError

REGION = "us-east-1"
ACTIONS = ("Admin", "Read", "List", "Tagging", "Write")


class S3ServerError(PrimusError):
    """The server could not start; the message carries the tail of its log."""


@dataclass(frozen=True)
class S3State:
    """A running server: where its S3 API is and the identity that may use it."""

    pid: int
    endpoint: str  # http://127.0.0.1:<port>
    access_key: str
    secret_key: str = field(repr=False)
    region: str
    workdir: str
    master_port: int
    startup_seconds: float

    @property
    def s3_port(self) -> int:
        return int(self.endpoint.rsplit(":", 1)[1])


def identities_config(identities: dict[str, tuple[str, str, tuple[str, ...]]]) -> str:
    """SeaweedFS's ``-s3.config`` document: name -> (access key, secret, actions)."""
    return json.dumps(
        {
            "identities": [
                {
                    "name": name,
                    "credentials": [{"accessKey": key, "secretKey": secret}],
                    "actions": list(actions),
                }
                for name, (key, secret, actions) in identities.items()
            ]
        },
        indent=2,
    )


class EmbeddedS3(ServerProcess[S3State]):
    """``weed server`` with S3 on loopback, data kept in ``workdir/data`` across restarts."""

    log_name = "weed.log"

    def __init__(
        self,
        weed: Path,
        workdir: Path,
        *,
        access_key: str | None = None,
        secret_key: str | None = None,
        extra_identities: dict[str, tuple[str, str, tuple[str, ...]]] | None = None,
    ) -> None:
        super().__init__(workdir)
        self.weed = weed
        self.access_key = access_key or "PRIMUS" + secrets.token_hex(7).upper()
        self.secret_key = secret_key or secrets.token_urlsafe(30)
        self.extra_identities = dict(extra_identities or {})

    def start(self, timeout_s: float = 90.0) -> S3State:
        if self.running():
            raise S3ServerError("already running")
        started = time.monotonic()
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "s3.json"
        config.unlink(missing_ok=True)
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(
                identities_config(
                    {"primus": (self.access_key, self.secret_key, ACTIONS), **self.extra_identities}
                )
            )
        master, volume, filer, s3, *grpc = free_ports(8)
        command = [
            str(self.weed),
            "server",
            f"-dir={data}",
            f"-ip={LOOPBACK}",
            f"-ip.bind={LOOPBACK}",
            f"-master.port={master}",
            f"-master.port.grpc={grpc[0]}",
            f"-volume.port={volume}",
            f"-volume.port.grpc={grpc[1]}",
            f"-filer.port={filer}",
            f"-filer.port.grpc={grpc[2]}",
            f"-filer.localSocket={self.workdir / 'filer.sock'}",
            "-s3",
            f"-s3.port={s3}",
            f"-s3.port.grpc={grpc[3]}",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.localSocket={self.workdir / 's3.sock'}",
            f"-s3.config={config}",
            "-master.peers=none",
            "-master.telemetry=false",
            # Every bucket is a collection that grows several volumes at once: many small volumes
            # (files grow as written, nothing is preallocated) so a test session's buckets fit.
            "-volume.max=200",
            "-master.volumeSizeLimitMB=64",
        ]
        process = self.spawn(command)
        deadline = started + timeout_s
        try:
            self._wait_ready(master, s3, deadline)
        except BaseException:
            self.stop()
            raise
        self.state = S3State(
            pid=process.pid,
            endpoint=f"http://{LOOPBACK}:{s3}",
            access_key=self.access_key,
            secret_key=self.secret_key,
            region=REGION,
            workdir=str(self.workdir),
            master_port=master,
            startup_seconds=round(time.monotonic() - started, 2),
        )
        return self.state

    def _wait_ready(self, master: int, s3: int, deadline: float) -> None:
        delay = 0.05
        volume_ready = False
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise S3ServerError(f"weed exited with {self.process.returncode}:\n{self._log_tail()}")
            if not volume_ready:
                volume_ready = _volume_registered(master)
            if volume_ready and _http_answers(s3):
                return
            if time.monotonic() > deadline:
                raise S3ServerError(
                    f"SeaweedFS not ready within the deadline (volume server registered: {volume_ready}):\n"
                    f"{self._log_tail()}"
                )
            # No notification to block on: poll with a growing interval, bounded by the deadline.
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)


def _volume_registered(master: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{master}/dir/status", timeout=2) as resp:
            status = json.loads(resp.read())
    except (OSError, ValueError):
        return False
    topology = status.get("Topology") or {}
    return bool(topology.get("DataCenters")) and int(topology.get("Max") or 0) > 0


def _http_answers(port: int) -> bool:
    """Any HTTP answer (an anonymous request is refused with 403) means the gateway serves."""
    try:
        with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/", timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
