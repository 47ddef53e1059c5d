"""``primus bench k8s --real`` at the size of the measured line (1,000,000 rows; at 300,000 the data
ran out before the second data executor was Ready): the same job on the local backend and in pods on
the real node, one JSON line whose figures are consistent (timings are not asserted)."""

from __future__ import annotations

import json

import pytest

from airflow_provider_primus.cli.main import main
from airflow_provider_primus.embedded.kube.project_image import builder_missing
from tests.embedded.conftest import real_node_unavailable

pytestmark = [
    pytest.mark.realnode,
    pytest.mark.timeout(2400),
]

KEYS = ("rows_per_s_local", "rows_per_s_pods", "pods_ratio", "pod_ready_p50_s", "pod_ready_p95_s",
        "scale_out_to_serving_s", "resize_applied_s")  # fmt: skip


def test_bench_k8s_real_prints_one_consistent_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    # No --workdir under pytest's long tmp_path: the kubelet's unix sockets live under the work dir
    # and must stay within 108 bytes (the benchmark's own temporary directory is short).
    reason = real_node_unavailable() or ("; ".join(builder_missing()) or None)
    if reason:
        pytest.skip(reason)
    code = main(["bench", "k8s", "--real", "--hours", "2", "--rows-per-hour", "500000"])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert set(KEYS) <= set(result)
    assert all(result[k] > 0 for k in KEYS)
    assert result["rows"] == 1_000_000
    assert result["pods_ratio"] == pytest.approx(
        result["rows_per_s_pods"] / result["rows_per_s_local"], rel=0.01
    )
    assert result["pod_ready_p50_s"] <= result["pod_ready_p95_s"]
    assert result["pods"] >= 4  # the master, two data executors, the trainer
