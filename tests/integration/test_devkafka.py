"""The local dev broker: start, real produce/consume, idempotent start, stop.

Uses its own state dir and a free port, so it never touches the broker that other
integration tests share."""

import socket
import uuid

import pytest
from confluent_kafka import Consumer, Producer

from floeline.dev import kafka as devkafka
from floeline.dev.services import free_port
from floeline.errors import FloelineError, SetupError

pytestmark = pytest.mark.integration


def port_accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def state(tmp_path):
    yield tmp_path / "kafka"
    devkafka.stop(tmp_path / "kafka")  # never leak a broker, even when a test fails


def test_start_round_trip_restart_and_stop(state):
    port = free_port()

    bootstrap = devkafka.start(state, port=port)
    assert bootstrap == f"127.0.0.1:{port}"
    assert devkafka.running_bootstrap(state) == bootstrap
    pid = (state / "broker.pid").read_text().strip()

    topic = f"devkafka-{uuid.uuid4().hex[:8]}"
    devkafka.create_topic(bootstrap, topic)
    devkafka.create_topic(bootstrap, topic)  # existing topic, same partitions: no error
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=b"k1", value=b'{"order_id": 1}')
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        msg = None
        for _ in range(30):
            msg = consumer.poll(1.0)
            if msg is not None and msg.error() is None:
                break
        assert msg is not None and msg.error() is None
        assert (msg.key(), msg.value(), msg.offset()) == (b"k1", b'{"order_id": 1}', 0)
    finally:
        consumer.close()

    # a second start finds the running broker, even when asked for another port
    assert devkafka.start(state, port=port) == bootstrap
    assert devkafka.start(state, port=free_port()) == bootstrap
    assert (state / "broker.pid").read_text().strip() == pid

    assert devkafka.stop(state) is True
    assert not port_accepts(port)
    assert devkafka.running_bootstrap(state) is None
    assert devkafka.stop(state) is False


def test_restart_keeps_data(state):
    port = free_port()
    bootstrap = devkafka.start(state, port=port)
    topic = "kept"
    devkafka.create_topic(bootstrap, topic, partitions=2)
    devkafka.stop(state)

    assert devkafka.start(state, port=port) == bootstrap
    with pytest.raises(FloelineError, match="already exists with 2 partitions"):
        devkafka.create_topic(bootstrap, topic, partitions=3)


def test_port_taken_by_another_program(tmp_path):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(SetupError, match=f"port {port}.*FLOELINE_KAFKA_PORT"):
            devkafka.start(tmp_path / "kafka", port=port)
