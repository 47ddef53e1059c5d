from pathlib import Path

from tests.conftest import REPO


def test_dags_folder_imports_cleanly(airflow_db: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO / "dags"))
    assert bag.import_errors == {}
    assert "primus_worker_check" in bag.dag_ids


def test_worker_check_dag_runs_with_dag_test(airflow_db: Path, kafka_dist) -> None:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(REPO / "dags")).get_dag("primus_worker_check")
    run = dag.test()
    assert run.state == "success"
    [ti] = [ti for ti in run.get_task_instances() if ti.task_id == "doctor"]
    assert ti.state == "success"
