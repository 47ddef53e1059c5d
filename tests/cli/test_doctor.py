import json
import os
import subprocess
from pathlib import Path

from tests.conftest import venv_bin


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [venv_bin("primus"), "doctor", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
    )


def test_doctor_passes_when_everything_is_present(kafka_dist, airflow_db: Path) -> None:
    proc = doctor("--cache-dir", str(kafka_dist.home.parent))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all required pieces present" in proc.stdout
    for name in ("python", "java", "kafka-jars", "airflow-db"):
        assert any(line.startswith("ok") and name in line for line in proc.stdout.splitlines()), name


def test_doctor_names_missing_kafka_jars_and_the_fix(tmp_path: Path, airflow_db: Path) -> None:
    proc = doctor("--cache-dir", str(tmp_path / "empty-cache"))
    assert proc.returncode == 1
    assert "MISSING  kafka-jars" in proc.stdout
    assert f"fix: primus kafka fetch --cache-dir {tmp_path / 'empty-cache'}" in proc.stdout
    assert proc.stdout.strip().endswith("missing: kafka-jars")
    # The Kubernetes control plane is optional (kube tests, bench k8s): reported, never required.
    kube = next(line for line in proc.stdout.splitlines() if "kube-control-plane" in line)
    assert "no Kubernetes v1.35.4 control-plane binaries" in kube


def test_doctor_names_missing_java_and_unmigrated_db(kafka_dist, tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PATH"] = str(Path(venv_bin("python")).parent)  # the venv only: no java, no mvn
    env.pop("JAVA_HOME", None)
    env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = f"sqlite:///{tmp_path / 'fresh.db'}"
    proc = doctor("--cache-dir", str(kafka_dist.home.parent), "--json", env=env)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    by_name = {c["name"]: c for c in report["checks"]}
    assert not by_name["java"]["ok"] and "Java 17" in by_name["java"]["fix"]
    assert not by_name["airflow-db"]["ok"] and by_name["airflow-db"]["fix"] == "airflow db migrate"
    assert by_name["kafka-jars"]["ok"]
    # Maven is only needed to fetch jars; with the jars present its absence is a warning.
    assert not by_name["maven"]["ok"] and not by_name["maven"]["required"]
