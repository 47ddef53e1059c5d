#!/usr/bin/env bash
# The test command (README "make test", CI's .ci/run): lint, type check, then the whole pytest suite
# against a real Kafka broker, a real Airflow metadata DB and a real Kubernetes control plane, all
# started by the suite itself.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
# The real node's runtime for the `realnode` tests (Debian's containerd, runc and CNI plugins), when
# this machine can install packages; without them those tests skip and say what is missing.
if { ! command -v containerd >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1 || [ ! -x /usr/lib/cni/bridge ]; } \
  && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "test: installing containerd, runc and containernetworking-plugins (apt) for the real-node tests"
  pkgs="containerd runc containernetworking-plugins"
  apt-get install -y -q $pkgs >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q $pkgs >/dev/null; }
fi
# buildah and debootstrap build the project's own images (docker/Dockerfile) for the real-node tests.
if { ! command -v buildah >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; } \
  && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "test: installing buildah and debootstrap (apt) to build the project's images"
  pkgs="buildah debootstrap"
  apt-get install -y -q --no-install-recommends $pkgs >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends $pkgs >/dev/null; }
fi
# The Kubernetes control plane (kube-apiserver, kube-scheduler, etcd, kwok) for the kube tests: built
# from source with Go once into ~/.cache/airflow-provider-primus (minutes), a stamp check afterwards.
# Only the tests need it, so the demo's bootstrap does not build it.
if command -v go >/dev/null 2>&1; then
  # Plus the real node's kubelet and kube-controller-manager (same module, same release; ~1 min warm).
  .venv/bin/python -c 'import logging; logging.basicConfig(level=logging.INFO, format="test: %(message)s")
from airflow_provider_primus.embedded.kube.binaries import ensure_binaries, ensure_node_binaries
ensure_binaries(); ensure_node_binaries()'
  # SeaweedFS, the real S3-compatible server of the object-store tests: built once into the same cache.
  .venv/bin/python -c 'import logging; logging.basicConfig(level=logging.INFO, format="test: %(message)s")
from airflow_provider_primus.embedded.s3 import ensure_seaweedfs
ensure_seaweedfs()'
else
  echo "test: warning: no go on PATH; the Kubernetes control plane and the S3 server are not built and their tests skip (install Go >= 1.25)" >&2
fi
# Apicurio Registry, the real schema registry of the Avro wire-format tests: its server distribution
# fetched once from Maven Central into the same cache (~140 MB), a stamp check afterwards.
if command -v mvn >/dev/null 2>&1 && command -v java >/dev/null 2>&1; then
  .venv/bin/python -c 'import logging; logging.basicConfig(level=logging.INFO, format="test: %(message)s")
from airflow_provider_primus.embedded.registry import ensure_registry
ensure_registry()'
fi
# The project's images (data and trainer) as OCI archives in ~/.cache/airflow-provider-primus, keyed by a
# hash of what goes into them: minutes the first time (the trainer installs torch), a hash check after.
.venv/bin/python -c 'import logging, sys; logging.basicConfig(level=logging.INFO, format="test: %(message)s")
from airflow_provider_primus.embedded.kube.project_image import builder_missing, ensure_project_images
missing = builder_missing()
if missing: print("test: the project images are not built; their tests skip. Missing: " + "; ".join(missing), file=sys.stderr)
else: ensure_project_images()'
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# Most tests wait on a server, a process or a deadline rather than a core (the suite runs about half
# busy serially), so it is spread over one worker per core plus one, at most six: each worker starts
# its own broker, control plane and metadata DB; the machine's one real node, the YARN mini cluster
# and the schema registry each stay on one worker (tests/conftest.py). PRIMUS_TEST_WORKERS=0 runs it
# in this process alone.
workers="${PRIMUS_TEST_WORKERS:-$(( $(nproc) + 1 < 6 ? $(nproc) + 1 : 6 ))}"
if [ "$workers" = 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
# Then the `exclusive` tests alone: what they check (the demo's showcase) needs the cores to itself.
# Exit 5 is "nothing selected", e.g. when extra arguments leave a phase empty.
status=0
PRIMUS_EXCLUSIVE=skip .venv/bin/python -m pytest -n "$workers" --dist loadgroup "$@" || status=$?
[ "$status" = 5 ] && status=0
alone=0
PRIMUS_EXCLUSIVE=only .venv/bin/python -m pytest "$@" || alone=$?
[ "$alone" = 5 ] && alone=0
exit $(( status != 0 ? status : alone ))
