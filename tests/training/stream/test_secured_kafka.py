"""Training from a secured cluster: the session's second broker serves SASL_SSL with SCRAM-SHA-256 and
a certificate from a CA made for the run. The trainer reads its stream there with the password from
an environment variable; a wrong password stops it with an error naming the source within a bounded
time; the password shows in no log, event, result, error or file."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_primus.contracts import load_data_spec
from airflow_provider_primus.contracts.loader import load_training_spec
from airflow_provider_primus.data.sources.kafka import ensure_topic, produce
from airflow_provider_primus.data.sources.kafka_client import KafkaAuthError, client_config
from airflow_provider_primus.embedded.kafka import EmbeddedKafka
from airflow_provider_primus.training.runtime import Trainer, TrainOptions
from tests.training.conftest import T0, events, to_json
from tests.training.stream.formats_world import training_doc, write_world

PASSWORD_ENV = "PRIMUS_TEST_KAFKA_PASSWORD"
HISTORY_ROWS, STREAM_ROWS = 2000, 1500


def _world(root: Path, broker: EmbeddedKafka, topic: str) -> Path:
    """One hour of history beside a topic on the secured listener; the data document's path."""
    assert broker.state is not None and broker.secured is not None
    security = {
        "protocol": "SASL_SSL",
        "sasl_mechanism": broker.secured.mechanism,
        "username": broker.secured.username,
        "password_env": PASSWORD_ENV,
        "ssl_cafile": broker.state.ca_file,
    }
    bootstrap = broker.state.secured_bootstrap_servers
    assert bootstrap is not None
    return write_world(
        root, bootstrap, topic, HISTORY_ROWS, security=security, client_id="primus-secured-test"
    )


def test_the_trainer_trains_from_the_secured_listener_without_leaking_the_password(
    secured_kafka_broker: EmbeddedKafka,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capfd: Any,
) -> None:
    broker = secured_kafka_broker
    assert broker.secured is not None
    password = broker.secured.password
    monkeypatch.setenv(PASSWORD_ENV, password)
    topic = f"secured-{time.monotonic_ns()}"
    data_path = _world(tmp_path, broker, topic)
    data = load_data_spec(data_path)
    source = data.spec.source("events")
    client = client_config(source)  # type: ignore[arg-type]
    assert password not in repr(client) and password not in str(data.model_dump())
    ensure_topic(client, topic, partitions=2)
    produce(client, topic, to_json(events(HISTORY_ROWS, STREAM_ROWS, T0 + timedelta(hours=1), seed=2)))

    caplog.set_level("DEBUG")
    got_events: list[tuple[str, str, dict[str, Any]]] = []
    result = Trainer(
        data,
        load_training_spec(training_doc(tmp_path)),
        TrainOptions(workdir=tmp_path / "w", spec_path=data_path, on_event=lambda *e: got_events.append(e)),
    ).run()
    assert result["rows_trained"] == {"history": HISTORY_ROWS, "events": STREAM_ROWS}

    assert broker.state is not None
    assert password not in (Path(broker.state.workdir) / "state.json").read_text()
    out, err = capfd.readouterr()
    written = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    for where, text in {
        "log": caplog.text,
        "events": json.dumps(got_events, default=str),
        "result": json.dumps(result, default=str),
        "stdout/stderr": out + err,
        "files": written,
    }.items():
        assert password not in text, f"the password leaked into the {where}"


def test_a_wrong_password_is_a_clear_error_naming_the_source_not_a_hang(
    secured_kafka_broker: EmbeddedKafka,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    wrong = "not-the-password-7d1c"
    monkeypatch.setenv(PASSWORD_ENV, wrong)
    topic = f"refused-{time.monotonic_ns()}"
    data_path = _world(tmp_path, secured_kafka_broker, topic)
    caplog.set_level("DEBUG")
    started = time.monotonic()
    with pytest.raises(KafkaAuthError) as raised:
        Trainer(
            load_data_spec(data_path),
            load_training_spec(training_doc(tmp_path)),
            TrainOptions(workdir=tmp_path / "w", spec_path=data_path),
        ).run()
    elapsed = time.monotonic() - started
    assert elapsed < 60, f"a refused client took {elapsed:.0f}s to report"
    message = str(raised.value)
    assert "source 'events'" in message and "SCRAM-SHA-256" in message and PASSWORD_ENV in message
    assert wrong not in message and wrong not in caplog.text


def test_an_unset_password_variable_names_the_source_and_the_variable(
    secured_kafka_broker: EmbeddedKafka, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    data = load_data_spec(_world(tmp_path, secured_kafka_broker, "unset"))
    with pytest.raises(
        ValueError, match=rf"source 'events': the SASL password is read from \${PASSWORD_ENV}"
    ):
        client_config(data.spec.source("events"))  # type: ignore[arg-type]
