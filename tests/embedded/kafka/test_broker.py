"""The embedded broker is a real Kafka: group offsets, resume and lag behave as in production."""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from airflow_provider_primus.data.sources.kafka import produce
from airflow_provider_primus.embedded.kafka.broker import (
    INSTANCE_PROPERTY,
    BrokerState,
    EmbeddedKafka,
    new_cluster_id,
)
from airflow_provider_primus.process import pid_alive

N_MESSAGES = 10_000


def consume(consumer: KafkaConsumer, want: int, deadline_s: float = 60.0) -> list[int]:
    """Poll whole batches until at least ``want`` records arrived (positions then cover them all)."""
    got: list[int] = []
    deadline = time.monotonic() + deadline_s
    while len(got) < want:
        assert time.monotonic() < deadline, f"only {len(got)} of {want} records before the deadline"
        for records in consumer.poll(timeout_ms=1000).values():
            got.extend(json.loads(r.value)["id"] for r in records)
    return got


def group_consumer(bootstrap: str, topic: str, group: str) -> KafkaConsumer:
    return KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=500,
    )


def test_group_resumes_from_committed_offsets_with_nothing_lost_or_repeated(
    kafka_broker: BrokerState, new_topic
) -> None:
    topic = new_topic("resume", partitions=4)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers, linger_ms=5)
    for i in range(N_MESSAGES):
        producer.send(topic, key=str(i).encode(), value=json.dumps({"id": i}).encode())
    producer.flush()
    producer.close()
    partitions = [TopicPartition(topic, p) for p in range(4)]

    group = f"g-{topic}"
    first = group_consumer(kafka_broker.bootstrap_servers, topic, group)
    part_one = consume(first, N_MESSAGES // 2)
    first.commit()
    committed_after_first = sum(first.committed(tp) or 0 for tp in partitions)
    first.close()
    assert committed_after_first == len(part_one) < N_MESSAGES

    second = group_consumer(kafka_broker.bootstrap_servers, topic, group)
    part_two = consume(second, N_MESSAGES - len(part_one))
    second.commit()

    seen = part_one + part_two
    assert len(seen) == N_MESSAGES, "a record was repeated or lost across the restart"
    assert sorted(seen) == list(range(N_MESSAGES))
    # All four partitions carried data, and lag (end - committed) is zero everywhere.
    end = second.end_offsets(partitions)
    assert all(end[tp] > 0 for tp in partitions)
    lag = {tp.partition: end[tp] - (second.committed(tp) or 0) for tp in partitions}
    assert lag == {0: 0, 1: 0, 2: 0, 3: 0}
    assert sum(end.values()) == N_MESSAGES
    second.close()


def test_broker_listens_on_loopback_only(kafka_broker: BrokerState) -> None:
    listening = [
        c.laddr
        for c in psutil.Process(kafka_broker.pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    ]
    ports = {addr.port for addr in listening}
    assert {int(kafka_broker.bootstrap_servers.rsplit(":", 1)[1]), kafka_broker.controller_port} <= ports
    # Loopback only: 127.0.0.1 (or its IPv4-mapped IPv6 form), never a wildcard or external address.
    for addr in listening:
        ip = ipaddress.ip_address(addr.ip)
        ip = getattr(ip, "ipv4_mapped", None) or ip
        assert ip == ipaddress.ip_address("127.0.0.1"), addr


def test_cluster_id_is_unpadded_base64url_of_16_bytes() -> None:
    for _ in range(200):
        cid = new_cluster_id()
        assert len(cid) == 22 and not cid.startswith("-") and "=" not in cid
        assert len(base64.urlsafe_b64decode(cid + "==")) == 16


def test_stop_leaves_no_jvm(kafka_dist, tmp_path: Path) -> None:
    broker = EmbeddedKafka(kafka_dist, tmp_path / "k", instance="pytest-stop")
    with broker:
        pid = broker.state.pid  # type: ignore[union-attr]
        assert pid_alive(pid)
    assert not pid_alive(pid)
    assert not (tmp_path / "k" / "state.json").exists()


LAUNCHER = """
import sys, pathlib
from airflow_provider_primus.embedded.kafka import EmbeddedKafka, ensure_distribution
k = EmbeddedKafka(ensure_distribution(), pathlib.Path(sys.argv[1]), instance="pytest-orphan")
print(k.start().pid, flush=True)
sys.stdin.read()  # wait to be killed
"""


def test_broker_dies_with_a_killed_launcher(tmp_path: Path) -> None:
    """A SIGKILLed test process (no finalizers run) must not leave its broker JVM behind."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, str(tmp_path / "k")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert launcher.stdout is not None
    jvm = int(launcher.stdout.readline())
    assert f"-D{INSTANCE_PROPERTY}=pytest-orphan" in psutil.Process(jvm).cmdline()
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    with contextlib.suppress(psutil.NoSuchProcess):
        psutil.Process(jvm).wait(timeout=60)
    assert not pid_alive(jvm)


def _end_offset(bootstrap: str, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="primus-tests")
    try:
        tp = TopicPartition(topic, 0)
        return int(consumer.end_offsets([tp])[tp])
    finally:
        consumer.close()


def test_data_survive_down_and_up_and_reset_wipes_them(kafka_dist, tmp_path: Path) -> None:
    """`primus kafka down` then `up` is a restart, not a new cluster: a checkpoint's offsets must still
    name the same records. Only `--reset` starts from nothing."""
    workdir = tmp_path / "kafka"
    first = EmbeddedKafka(kafka_dist, workdir)
    state = first.start()
    produce(state.bootstrap_servers, "kept", (json.dumps({"id": i}).encode() for i in range(25)))
    first.stop()

    again = EmbeddedKafka(kafka_dist, workdir)
    restarted = again.start()
    try:
        assert restarted.cluster_id == state.cluster_id
        assert restarted.bootstrap_servers == state.bootstrap_servers  # the same port, free again
        assert _end_offset(restarted.bootstrap_servers, "kept") == 25
    finally:
        again.stop()

    wiped = EmbeddedKafka(kafka_dist, workdir, reset=True)
    fresh = wiped.start()
    try:
        assert fresh.cluster_id != state.cluster_id
        assert _end_offset(fresh.bootstrap_servers, "kept") == 0
    finally:
        wiped.stop()
