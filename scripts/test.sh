#!/usr/bin/env bash
# The test command (README "make test", CI's .ci/run): lint, type check, then the whole pytest suite
# against a real Kafka broker and a real Airflow metadata DB, both started by the suite itself.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
