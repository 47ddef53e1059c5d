"""The Kubernetes benchmark runs end to end at a small size on its own control plane (figures are not
asserted — not a timed test; the structure and the scaling it reports are)."""

import json
from pathlib import Path

import pytest

from airflow_provider_primus.cli.main import main

pytestmark = pytest.mark.timeout(300)


def test_bench_k8s_prints_one_json_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kube_binaries: object
) -> None:
    args = ["--nodes", "3", "--low", "2", "--high", "12", "--idle-passes", "4", "--settle-s", "0"]
    code = main(["bench", "k8s", *args, "--workdir", str(tmp_path)])
    assert code == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    result = json.loads(lines[-1])
    assert result["executors"] == 12 and result["nodes"] == 3 and result["kubernetes"] == "v1.35.4"
    for key in ("pass_s_at_1000", "pass_s_at_10", "time_to_1000_running_s", "time_to_10_s"):
        assert result[key] > 0
    assert result["requests_per_idle_pass"] >= 0 and result["requests_per_idle_s"] >= 0
    assert list(tmp_path.iterdir()) == []  # the cluster's files are removed
