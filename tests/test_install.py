"""Installing the provider into an existing Airflow, as a platform team would: the wheel and sdist
built like a release (PEP 517), installed into a fresh virtualenv with the runtime constraints only
(no test tools, and no torch: the ``train`` extra is the trainer's), then Airflow finds the provider
and a DAG that uses it parses."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.conftest import venv_bin

pytestmark = pytest.mark.timeout(900)

ROOT = Path(__file__).resolve().parents[1]
DAG = """
from datetime import datetime

from airflow.sdk import DAG

from airflow_provider_primus.operators.job import PrimusSubmitJobOperator
from airflow_provider_primus.sensors.job import PrimusJobSensor

with DAG("uses_primus", start_date=datetime(2026, 11, 1), schedule=None):
    submit = PrimusSubmitJobOperator(task_id="submit", job="job.yaml")
    submit >> PrimusJobSensor(task_id="wait", job="{{ ti.xcom_pull('submit') }}")
"""


def run(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    result = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=800, env=env, cwd=cwd, check=False
    )
    assert result.returncode == 0, f"{args}: {result.stdout[-3000:]}{result.stderr[-3000:]}"
    return result.stdout


def test_the_wheel_installs_into_a_fresh_airflow_with_runtime_constraints_only(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    run(venv_bin("python"), "-m", "build", "--no-isolation", "--wheel", "--sdist", "--outdir", dist, ROOT)
    [wheel] = dist.glob("airflow_provider_primus-*.whl")
    [sdist] = dist.glob("airflow_provider_primus-*.tar.gz")
    assert sdist.stat().st_size > 10_000

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", "-c", ROOT / "constraints.txt", wheel)
    installed = run(python, "-m", "pip", "list", "--format=freeze").lower()
    for tool in ("pytest", "ruff", "mypy", "torch"):
        assert f"\n{tool}==" not in f"\n{installed}", f"{tool} came with a runtime install"

    home = tmp_path / "airflow"
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "uses_primus.py").write_text(DAG)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTHON", "VIRTUAL_ENV"))},
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PATH": f"{env_dir / 'bin'}{os.pathsep}{os.environ['PATH']}",
    }
    providers = run(env_dir / "bin" / "airflow", "providers", "list", "-o", "json", env=env)
    assert '"package_name": "airflow-provider-primus"' in providers.replace("'", '"')
    parse = (
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(dags)!r})\n"
        "assert not bag.import_errors, bag.import_errors\n"
        "assert 'uses_primus' in bag.dag_ids, bag.dag_ids\n"
        "print('parsed', sorted(bag.dags['uses_primus'].task_ids))\n"
    )
    assert "parsed ['submit', 'wait']" in run(python, "-c", parse, env=env, cwd=tmp_path)
    # The operator side and the master run without torch; only training needs the extra.
    run(env_dir / "bin" / "primus", "--help", env=env)
    code = "import airflow_provider_primus.master.master, airflow_provider_primus.data.service.executor"
    run(python, "-c", f"{code}; import sys; assert 'torch' not in sys.modules", env=env)
    assert sys.executable  # the suite's own interpreter is untouched
