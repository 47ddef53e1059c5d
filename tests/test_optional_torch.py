"""torch is the ``[train]`` extra: everything that is not the trainer runs where torch cannot be
imported at all. The master, the data executors, the CLI and the Airflow side ship in an image
without it (``docker/Dockerfile`` target ``data``), so an import of torch on any of their paths would
only show up in a pod. Here a child interpreter refuses ``torch`` outright (a ``sys.meta_path``
finder that raises ImportError, as if the package were not installed) and runs those paths.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import yaml

from tests.data.conftest import T0, files_source, hour_dir, spec_doc, write

BLOCK_TORCH = textwrap.dedent(
    """
    import importlib.abc, sys

    class NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError(f"No module named {name!r} (refused by the test: torch is [train] only)")
            return None

    sys.meta_path.insert(0, NoTorch())
    """
)

# What the master, a data executor, the CLI and Airflow load.
MODULES = (
    "airflow_provider_primus.master.master",
    "airflow_provider_primus.master.api",
    "airflow_provider_primus.master.dataservice",
    "airflow_provider_primus.data.service.executor",
    "airflow_provider_primus.data.service.dispatcher",
    "airflow_provider_primus.data.service.launch",
    "airflow_provider_primus.data.planner",
    "airflow_provider_primus.cli.main",
    "airflow_provider_primus.cli.serve_data",
    "airflow_provider_primus.cli.plan",
    "airflow_provider_primus.cli.jobs",
    "airflow_provider_primus.resources.local",
    "airflow_provider_primus.kubernetes.pods",
    "airflow_provider_primus.kubernetes.store",
    "airflow_provider_primus.kubernetes.submission",
    "airflow_provider_primus.operators",
    "airflow_provider_primus.operators.job",
    "airflow_provider_primus.operators.plan",
    "airflow_provider_primus.hooks.primus",
    "airflow_provider_primus.sensors",
    "airflow_provider_primus.triggers",
    "airflow_provider_primus.plugins.plugin",
    "airflow_provider_primus.get_provider_info",
)


def _run_without_torch(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        check=False,
    )


def test_the_finder_really_refuses_torch(tmp_path: Path) -> None:
    proc = _run_without_torch("import torch\n", tmp_path)
    assert proc.returncode != 0
    assert "refused by the test" in proc.stderr


def test_master_data_executor_cli_and_airflow_import_without_torch(tmp_path: Path) -> None:
    proc = _run_without_torch(
        f"""
        import importlib, json, sys
        for name in {list(MODULES)!r}:
            importlib.import_module(name)
        heavy = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")
                       or m in ("airflow_provider_primus.data.tensors",
                                "airflow_provider_primus.data.service.loader"))
        print(json.dumps(heavy))
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout.splitlines()[-1]) == []


def test_primus_commands_other_than_train_run_without_torch(tmp_path: Path) -> None:
    for h in range(2):
        write(hour_dir(tmp_path / "store", T0 + timedelta(hours=h)) / "a.parquet", "parquet", 10)
    spec = tmp_path / "data.yaml"
    spec.write_text(yaml.safe_dump(spec_doc([files_source("s", tmp_path / "store")])))
    end = (T0 + timedelta(hours=2)).isoformat()
    proc = _run_without_torch(
        f"""
        import contextlib, io, json, sys
        from airflow_provider_primus.cli.main import main

        def run(*args):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                try:
                    code = main(list(args))
                except SystemExit as exc:
                    code = exc.code
            return code, out.getvalue()

        results = {{
            "help": run("--help")[0],
            "serve-data --help": run("serve-data", "--help")[0],
            "master --help": run("master", "--help")[0],
            "validate": run("validate", {str(spec)!r})[0],
        }}
        code, out = run("plan", {str(spec)!r}, "--start", {T0.isoformat()!r}, "--end", {end!r},
                        "--cache", {str(tmp_path / "cache.sqlite")!r})
        results["plan"] = code
        results["plan_rows"] = json.loads(out)["rows"]
        results["torch_loaded"] = "torch" in sys.modules
        print(json.dumps(results))
        """,
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(proc.stdout.splitlines()[-1])
    assert results == {
        "help": 0,
        "serve-data --help": 0,
        "master --help": 0,
        "validate": 0,
        "plan": 0,
        "plan_rows": 20,
        "torch_loaded": False,
    }


def test_primus_train_without_torch_names_the_extra(tmp_path: Path) -> None:
    """The trainer does need torch; without it the command says which extra brings it."""
    spec = tmp_path / "data.yaml"
    spec.write_text(yaml.safe_dump(spec_doc([files_source("s", tmp_path / "store")])))
    proc = _run_without_torch(
        f"""
        import sys
        from airflow_provider_primus.cli.main import main
        sys.exit(main(["train", {str(spec)!r}]))
        """,
        tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-4000:]
    assert "airflow-provider-primus[train]" in proc.stderr
