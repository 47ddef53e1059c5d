"""A data executor's command line, as the master builds it, parses back to the same options."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_primus.cli.main import build_parser
from airflow_provider_primus.data.service.options import DataExecutorOptions


def _round_trip(options: DataExecutorOptions) -> DataExecutorOptions:
    return DataExecutorOptions.from_namespace(build_parser().parse_args(options.argv()))


def test_every_option_survives_the_command_line() -> None:
    options = DataExecutorOptions(
        spec=Path("/data/primus-data.yaml"),
        dispatcher="grpc://127.0.0.1:5000",
        name="data-3.1",
        token_file=Path("/run/token"),
        host="10.1.2.3",
        port=7001,
        window=4,
        batch_rows=500,
        transform_threads=3,
        passthrough=("row_id", "ts"),
        heartbeat_s=0.5,
        master_grace_s=30.0,
    )
    assert _round_trip(options) == options


def test_defaults_are_the_parsers_defaults() -> None:
    options = DataExecutorOptions(Path("d.yaml"), "grpc://127.0.0.1:1", "data-0.0")
    assert _round_trip(options) == options
