"""What may go on the executors' import path as a wheel: only a pure-Python one (zipimport cannot
load compiled code), said by name when it is anything else."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from airflow_provider_primus.master.user_code import wheel_issue


def _wheel(path: Path, purelib: str) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("acme/__init__.py", "")
        archive.writestr(
            "acme-1.0.dist-info/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: {purelib}\nTag: py3-none-any\n"
        )
    return path


def test_a_pure_python_wheel_may_go_on_the_import_path(tmp_path: Path) -> None:
    assert wheel_issue(_wheel(tmp_path / "acme-1.0-py3-none-any.whl", "true")) is None


@pytest.mark.parametrize(
    ("name", "make", "says"),
    [
        ("missing.whl", None, "'{path}' is not a file"),
        ("acme.zip", "pure", "'acme.zip' is not a wheel (.whl)"),
        ("acme-1.0-py3-none-any.whl", "garbage", "'acme-1.0-py3-none-any.whl' is not a readable wheel"),
        (
            "acme-1.0-cp311-cp311-linux_x86_64.whl",
            "compiled",
            "holds compiled code (Root-Is-Purelib is not true)",
        ),
    ],
)
def test_anything_else_is_refused_by_name(tmp_path: Path, name: str, make: str | None, says: str) -> None:
    path = tmp_path / name
    if make == "pure":
        _wheel(path, "true")
    elif make == "compiled":
        _wheel(path, "false")
    elif make == "garbage":
        path.write_bytes(b"not a zip")
    reason = wheel_issue(path)
    assert reason is not None and says.format(path=path) in reason
