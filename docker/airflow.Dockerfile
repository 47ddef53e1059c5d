# Airflow with the Primus provider: Airflow's own image plus the provider's wheel, runtime pins only.
# Build from the repository root after `python -m build --wheel --outdir dist .`:
#   docker build -f docker/airflow.Dockerfile --build-arg BASE=apache/airflow:3.3.2-python3.11 -t airflow-primus .
# The base is a build argument: keep the Airflow image (and version) your deployment runs.
ARG BASE=apache/airflow:3.3.2-python3.11
FROM ${BASE}
COPY dist/airflow_provider_primus-*.whl /tmp/dist/
COPY constraints.txt /tmp/primus-constraints.txt
# No torch: the Airflow side (operators, sensors, triggers, hook, UI plugin) never imports it; trainers
# run in their own image (docker/Dockerfile's trainer target).
RUN pip install --no-cache-dir -c /tmp/primus-constraints.txt /tmp/dist/airflow_provider_primus-*.whl \
    && rm -rf /tmp/dist /tmp/primus-constraints.txt
