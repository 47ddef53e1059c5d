#!/usr/bin/env bash
# Idempotent set-up of a clone: a virtualenv in .venv, the package with its dev extra (pinned by
# constraints.txt and constraints-dev.txt), and the Kafka broker's jars in the shared cache. A second
# run only checks a stamp and the jar manifest, so it takes a second or two.
set -euo pipefail
cd "$(dirname "$0")/.."

pick_python() {
  for py in "${PYTHON:-}" python3.11 python3; do
    [ -n "$py" ] || continue
    if command -v "$py" >/dev/null 2>&1 &&
       "$py" -c 'import sys; sys.exit(0 if sys.version_info[:2] >= (3, 11) else 1)' 2>/dev/null; then
      echo "$py"; return 0
    fi
  done
  echo "error: Python 3.11+ is required (set PYTHON=/path/to/python3.11)" >&2
  return 1
}

if [ ! -x .venv/bin/python ]; then
  py=$(pick_python)
  echo "bootstrap: creating .venv with $("$py" --version)"
  "$py" -m venv .venv
fi

stamp=.venv/.primus-install-stamp
want=$(cat pyproject.toml setup.cfg constraints.txt constraints-dev.txt | sha256sum | cut -d' ' -f1)
# The kerberos extra (gssapi) builds against MIT Kerberos's headers: Debian's libkrb5-dev, when this
# machine can install packages; without them it is left out and the Kerberized YARN tests skip.
if ! command -v krb5-config >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "bootstrap: installing libkrb5-dev (apt) for the kerberos extra"
  apt-get install -y -q libkrb5-dev >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q libkrb5-dev >/dev/null; }
fi
extras=dev
if command -v krb5-config >/dev/null 2>&1; then extras=dev,kerberos; fi
want=$(printf '%s %s' "$want" "$extras" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
  echo "bootstrap: installing the package and its dependencies (first run downloads torch, ~3 GB)"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -c constraints.txt -c constraints-dev.txt -e ".[$extras]"
  echo "$want" > "$stamp"
fi

# Chromium for the UI test in a real headless browser (Debian's package), when this machine can
# install packages; `primus doctor` does not require it.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "bootstrap: installing chromium (apt) for the UI browser test"
  apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null; }
fi

# Kafka jars: resolved once with Maven into ~/.cache/airflow-provider-primus (offline afterwards).
.venv/bin/primus kafka fetch >/dev/null
# Everything a run needs except the Airflow DB, which each command sets up for itself.
if ! .venv/bin/primus doctor --skip-airflow-db >/tmp/primus-doctor.$$ 2>&1; then
  cat /tmp/primus-doctor.$$ >&2; rm -f /tmp/primus-doctor.$$; exit 1
fi
rm -f /tmp/primus-doctor.$$
