import argparse
import subprocess

import pytest

from airflow_provider_primus import __version__
from airflow_provider_primus.cli.main import build_parser, main
from tests.conftest import venv_bin


def all_command_paths(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths.extend(all_command_paths(sub, (*prefix, name)))
    return paths


PATHS = all_command_paths(build_parser())


def test_known_subcommands_exist() -> None:
    assert {
        ("version",),
        ("doctor",),
        ("kafka", "up"),
        ("kafka", "down"),
        ("kafka", "status"),
        ("kafka", "fetch"),
        ("demo",),
        ("validate",),
        ("plan",),
        ("bench", "plan"),
    } <= set(PATHS)


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "primus")
def test_every_subcommand_has_help(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*path, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: primus")
    assert len(out.splitlines()) >= 3


def test_console_script_prints_version() -> None:
    proc = subprocess.run([venv_bin("primus"), "version"], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == __version__


def test_unknown_subcommand_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["kafak"])
    assert exc.value.code == 2
    assert "invalid choice: 'kafak'" in capsys.readouterr().err


def test_a_zero_store_delay_is_refused_before_any_work(capsys: pytest.CaptureFixture[str]) -> None:
    """The planning bench's ratios divide by the delayed round trips: 0 ms would be 0/0 at the end."""
    with pytest.raises(SystemExit) as exc:
        main(["bench", "plan", "--delay-ms", "0"])
    assert exc.value.code == 2
    assert "--delay-ms: must be above 0 (got 0)" in capsys.readouterr().err
