"""Run in the ApplicationMaster's container of a TLS job, just before its JVM: a certificate for the
host the AM serves its API on (``$NM_HOST``, the address it registers and the master dials), issued
by the job's CA localized beside it, as each executor issues its own. The AM (``Tls.java``) then
serves HTTPS and the master verifies it against the job's CA: the job token never crosses the
network in the clear.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from airflow_provider_primus.tls import JobCa, TlsError, write_private

__all__ = ["AM_CERT", "AM_KEY", "main"]

AM_CERT = "am.crt"
AM_KEY = "am.key"


def main() -> int:
    host = os.environ.get("NM_HOST")
    if not host:
        print("error: NM_HOST is not set: not in a YARN container", file=sys.stderr)
        return 2
    try:
        cert, key = JobCa.read(Path.cwd()).issue([host])
    except TlsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    write_private(Path(AM_KEY), key)
    write_private(Path(AM_CERT), cert)
    return 0


if __name__ == "__main__":
    sys.exit(main())
