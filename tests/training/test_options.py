"""A job trainer's command line, as the master builds it, parses back to the same options."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_primus.cli.main import build_parser
from airflow_provider_primus.training.options import TrainerExecutorOptions


def _round_trip(options: TrainerExecutorOptions) -> TrainerExecutorOptions:
    return TrainerExecutorOptions.from_namespace(build_parser().parse_args(options.argv()))


def test_every_option_survives_the_command_line() -> None:
    options = TrainerExecutorOptions(
        spec=Path("/data/primus-data.yaml"),
        workdir=Path("/jobs/j/train"),
        training=Path("/data/training.yaml"),
        follow=True,
        max_steps=1000,
        trace=Path("/jobs/j/trace.jsonl"),
        passthrough=("row_id",),
        json=True,
        dispatcher="grpc://127.0.0.1:5000",
        executor_name="trainer-0.2",
        open_graph=True,
        grace_s=60.0,
        trainers=3,
        rank=2,
        generation=4,
        host="10.0.0.7",
    )
    assert _round_trip(options) == options


def test_defaults_are_the_parsers_defaults() -> None:
    options = TrainerExecutorOptions(Path("d.yaml"))
    assert _round_trip(options) == options
