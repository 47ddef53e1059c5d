from pathlib import Path

import pytest

from airflow_provider_primus.operators.doctor import PrimusDoctorOperator, PrimusWorkerNotReady


def test_operator_reports_present_pieces(kafka_dist) -> None:
    result = PrimusDoctorOperator(task_id="doctor", cache_dir=str(kafka_dist.home.parent)).execute({})
    assert result["kafka-jars"] and result["java"] and result["python"]
    assert "airflow-db" not in result  # tasks never touch the metadata DB directly in Airflow 3


def test_operator_fails_naming_the_missing_piece(tmp_path: Path) -> None:
    op = PrimusDoctorOperator(task_id="doctor", cache_dir=str(tmp_path))
    with pytest.raises(PrimusWorkerNotReady, match=r"kafka-jars \(primus kafka fetch"):
        op.execute({})
