"""``primus kafka up | status | down`` on a detached broker, through the console script."""

import json
import subprocess
from pathlib import Path

from airflow_provider_primus.embedded.kafka.broker import broker_answers
from airflow_provider_primus.process import pid_alive
from tests.conftest import venv_bin


def kafka_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [venv_bin("primus"), "kafka", *args], capture_output=True, text=True, check=False, timeout=180
    )


def test_up_status_down(kafka_dist, tmp_path: Path) -> None:
    workdir = str(tmp_path / "dev-kafka")
    up = kafka_cli("up", "--workdir", workdir)
    assert up.returncode == 0, up.stderr
    state = json.loads(up.stdout)
    try:
        # The CLI has exited; the detached broker keeps serving.
        assert broker_answers(state["bootstrap_servers"])
        assert state["bootstrap_servers"].startswith("127.0.0.1:")
        again = kafka_cli("up", "--workdir", workdir)
        assert json.loads(again.stdout)["pid"] == state["pid"], "a second `up` must not start a duplicate"
        status = kafka_cli("status", "--workdir", workdir)
        assert status.returncode == 0 and json.loads(status.stdout)["pid"] == state["pid"]
    finally:
        down = kafka_cli("down", "--workdir", workdir)
    assert down.returncode == 0 and down.stdout.strip() == "stopped"
    assert not pid_alive(state["pid"])
    status = kafka_cli("status", "--workdir", workdir)
    assert status.returncode == 3 and status.stdout.strip() == "not running"
    assert kafka_cli("down", "--workdir", workdir).stdout.strip() == "not running"
