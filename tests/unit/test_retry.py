"""Transient vs terminal errors (errors.py) and the one retry rule (retry.py): which
errors are retried, the bound, one log line per retry, and the final message. A fake
clock and sleep keep these in milliseconds; the registry tests talk HTTP to a small
local server."""

from __future__ import annotations

import http.server
import json
import logging
import threading

import pytest
from confluent_kafka import KafkaError, KafkaException

from floeline import errors, retry
from floeline.config import config_from_dict
from floeline.errors import (
    ConfigError, FloelineError, QueryError, RecordError, RetriesExhausted, ServiceError, TransformError,
    ServiceUnavailable, SetupError, SqlError, TableError, Terminal, Transient)
from floeline.records.converters.base import ConverterError, RegistryUnavailable
from floeline.records.converters.schema_registry import SchemaRegistryClient
from floeline.sources.kafka import is_transient_kafka, kafka_call


class FakeTime:
    """A clock that moves only when slept on."""

    def __init__(self):
        self.now, self.sleeps = 0.0, []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def failing(errors_to_raise, result="ok"):
    calls = []

    def fn():
        calls.append(1)
        if errors_to_raise:
            raise errors_to_raise.pop(0)
        return result
    fn.calls = calls
    return fn


# ---- the types --------------------------------------------------------------------


@pytest.mark.parametrize("cls", [ServiceUnavailable, RegistryUnavailable])
def test_transient_types(cls):
    assert issubclass(cls, Transient) and not issubclass(cls, Terminal)
    assert issubclass(cls, FloelineError)


@pytest.mark.parametrize("cls", [ConfigError, RecordError, ConverterError, TransformError, TableError,
                                 SqlError, RetriesExhausted, ServiceError, QueryError, SetupError])
def test_terminal_types(cls):
    assert issubclass(cls, Terminal) and not issubclass(cls, Transient)


def test_what_fails_a_batch_and_how():
    assert errors.batch_failure_kind(ConverterError("bad bytes")) is None  # the record's fault
    assert errors.batch_failure_kind(ValueError("a decoder's own error")) is None
    assert errors.batch_failure_kind(RegistryUnavailable("down")) == "transient"
    assert errors.batch_failure_kind(RetriesExhausted("spent")) == "terminal"
    assert errors.batch_failure_kind(ConfigError("401")) == "terminal"
    assert isinstance(errors.batch_failure("transient", "down"), Transient)
    assert isinstance(errors.batch_failure("terminal", "spent"), Terminal)


def test_retries_exhausted_keeps_its_fields_when_pickled():
    import pickle

    copy = pickle.loads(pickle.dumps(RetriesExhausted("m", "Kafka", 7, 12.5)))
    assert (str(copy), copy.service, copy.attempts, copy.waited_s) == ("m", "Kafka", 7, 12.5)


# ---- the retry rule ---------------------------------------------------------------


def test_transient_errors_are_retried_each_logged_once(caplog):
    fake = FakeTime()
    fn = failing([ServiceUnavailable("broker starting"), ServiceUnavailable("still starting")])
    with caplog.at_level(logging.WARNING, logger="floeline"):
        got = retry.call(fn, what="Kafka ListOffsets at x", service="Kafka", fix="Check it.",
                         sleep=fake.sleep, clock=fake.clock)
    assert got == "ok" and len(fn.calls) == 3
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert lines[0].startswith("Kafka ListOffsets at x failed: broker starting; retry 1 in ")
    assert "retry 2 in" in lines[1] and "gives up after 120 s" in lines[1]


def test_backoff_doubles_up_to_the_cap_and_stops_at_the_bound():
    fake = FakeTime()
    policy = retry.RetryPolicy(timeout_s=30, max_delay_s=2)

    def down():
        raise ServiceUnavailable("connection refused")
    with pytest.raises(RetriesExhausted) as caught:
        retry.call(down, what="schema registry GET schema id 3 at http://r", service="schema registry",
                   fix="Check that the registry is running.", policy=policy,
                   sleep=fake.sleep, clock=fake.clock)
    bases = [0.1, 0.2, 0.4, 0.8, 1.6, 2, 2, 2]
    for slept, base in zip(fake.sleeps, bases):
        assert base * 0.5 <= slept <= base  # jitter: half to all of it
    assert fake.now == pytest.approx(30)  # the last sleep ends at the bound, not past it
    error = caught.value
    assert error.attempts == len(fake.sleeps) + 1 and error.service == "schema registry"
    message = str(error)
    assert message.startswith(f"schema registry GET schema id 3 at http://r still failing after "
                              f"{error.attempts} attempts over 30 s: connection refused.")
    assert "Check that the registry is running." in message
    assert message.endswith("Transient errors are retried for 30 s (errors.retry.timeout=30000); "
                            "set it higher (milliseconds, -1: forever) to wait longer.")
    assert isinstance(error.__cause__, ServiceUnavailable)


def test_terminal_errors_are_raised_at_once():
    fake = FakeTime()
    fn = failing([ConfigError("bad setting")])
    with pytest.raises(ConfigError):
        retry.call(fn, what="x", service="x", fix="", sleep=fake.sleep, clock=fake.clock)
    assert len(fn.calls) == 1 and fake.sleeps == []
    # A foreign error is terminal unless the caller's classifier says otherwise ...
    fn = failing([OSError("refused"), OSError("refused")])
    assert retry.call(fn, what="x", service="x", fix="", transient=lambda e: isinstance(e, OSError),
                      sleep=fake.sleep, clock=fake.clock) == "ok"
    # ... and a Terminal error stays terminal whatever the classifier says.
    fn = failing([RecordError("bad record")])
    with pytest.raises(RecordError):
        retry.call(fn, what="x", service="x", fix="", transient=lambda e: True,
                   sleep=fake.sleep, clock=fake.clock)
    # `terminal` turns a foreign terminal error into floeline's.
    with pytest.raises(ServiceError, match="denied"):
        retry.call(failing([PermissionError("denied")]), what="x", service="x", fix="",
                   terminal=lambda e: ServiceError(str(e)), sleep=fake.sleep, clock=fake.clock)


def test_before_retry_runs_before_each_retry():
    fake, seen = FakeTime(), []
    fn = failing([ServiceUnavailable("a"), ServiceUnavailable("b")])
    retry.call(fn, what="x", service="x", fix="", before_retry=lambda e: seen.append(str(e)),
               sleep=fake.sleep, clock=fake.clock)
    assert seen == ["a", "b"]


def test_no_retries_with_a_zero_timeout_and_forever_with_minus_one():
    fake = FakeTime()
    with pytest.raises(RetriesExhausted, match="after 1 attempt over"):
        retry.call(failing([ServiceUnavailable("down")]), what="x", service="x", fix="",
                   policy=retry.RetryPolicy(timeout_s=0), sleep=fake.sleep, clock=fake.clock)
    forever = retry.RetryPolicy(timeout_s=None)
    fn = failing([ServiceUnavailable("down")] * 50)
    assert retry.call(fn, what="x", service="x", fix="", policy=forever,
                      sleep=fake.sleep, clock=fake.clock) == "ok"
    assert fake.now > 120  # past the default bound


def test_settings():
    assert retry.policy_from_settings({}) == retry.RetryPolicy(120.0, 5.0)
    assert retry.policy_from_settings({"errors.retry.timeout": "-1"}).timeout_s is None
    assert retry.policy_from_settings({"errors.retry.timeout": "30000",
                                       "errors.retry.delay.max.ms": "250"}) == retry.RetryPolicy(30.0, 0.25)
    assert config_from_dict({"name": "c", "topics": "t", "errors.retry.timeout": "5000"}).retry.timeout_s == 5
    with pytest.raises(ConfigError, match=r"errors.retry.timeout='soon' is not valid.*-1 \(retry forever\)"):
        config_from_dict({"name": "c", "topics": "t", "errors.retry.timeout": "soon"})
    with pytest.raises(ConfigError, match="errors.retry.delay.max.ms='-5' is not valid"):
        retry.policy_from_settings({"errors.retry.delay.max.ms": "-5"})
    assert retry.RetryPolicy(120).at_most(10).timeout_s == 10
    assert retry.RetryPolicy(None).at_most(10).timeout_s == 10
    assert retry.RetryPolicy(3).at_most(10).timeout_s == 3


# ---- Kafka ------------------------------------------------------------------------


@pytest.mark.parametrize("code", [
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR, KafkaError._TRANSPORT,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.FENCED_LEADER_EPOCH, KafkaError._ALL_BROKERS_DOWN,
    KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError.NOT_LEADER_FOR_PARTITION])
def test_kafka_errors_that_pass_by_themselves(code):
    assert is_transient_kafka(KafkaException(KafkaError(code)))
    assert is_transient_kafka(KafkaError(code))  # a delivery report's error


def test_kafka_errors_that_do_not():
    assert not is_transient_kafka(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
    assert not is_transient_kafka(KafkaException(KafkaError(KafkaError._TRANSPORT, fatal=True)))
    assert not is_transient_kafka(ValueError("not Kafka's"))
    # librdkafka's own flag counts for codes not listed
    assert is_transient_kafka(KafkaException(KafkaError(KafkaError.UNKNOWN, retriable=True)))


def test_kafka_calls_retry_then_name_the_call():
    fake = FakeTime()
    loading = KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS))
    fn = failing([loading, loading], result={"g": 5})
    got = retry.call(fn, what="w", service="Kafka", fix="", transient=is_transient_kafka,
                     sleep=fake.sleep, clock=fake.clock)
    assert got == {"g": 5} and len(fn.calls) == 3
    denied = KafkaException(KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED, "no access"))
    with pytest.raises(ServiceError, match="Kafka ListConsumerGroupOffsets of group g failed: "
                                           "GROUP_AUTHORIZATION_FAILED: no access"):
        kafka_call("Kafka ListConsumerGroupOffsets of group g", failing([denied]))
    with pytest.raises(RetriesExhausted, match="(?s)_TRANSPORT.*Check that the broker is running"):
        kafka_call("Kafka Metadata at bootstrap.servers=b", failing([KafkaException(
            KafkaError(KafkaError._TRANSPORT))] * 100), retry.RetryPolicy(timeout_s=0.3))


# ---- the schema registry over HTTP ----------------------------------------------


class Registry:
    """A local HTTP server answering GET /schemas/ids/N with queued statuses, then 200."""

    def __init__(self):
        self.statuses: list[int] = []
        self.requests = 0
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                registry.requests += 1
                status = registry.statuses.pop(0) if registry.statuses else 200
                body = json.dumps({"schema": '"string"'} if status == 200
                                  else {"error_code": status, "message": "nope"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def registry():
    server = Registry()
    yield server
    server.close()


def client(url: str, timeout_s: float = 10) -> SchemaRegistryClient:
    return SchemaRegistryClient(url, policy=retry.RetryPolicy(timeout_s, 0.05))


def test_registry_5xx_and_429_are_retried(registry):
    registry.statuses = [503, 500, 429]
    assert client(registry.url).by_id(1) == {"schema": '"string"'}
    assert registry.requests == 4


def test_registry_4xx_is_the_records_fault_at_once(registry):
    registry.statuses = [404]
    with pytest.raises(ConverterError, match="unknown schema id 1 at .*404 nope"):
        client(registry.url).by_id(1)
    assert registry.requests == 1


def test_registry_refusing_credentials_names_the_setting(registry):
    registry.statuses = [401]
    with pytest.raises(ConfigError, match="basic.auth.user.info"):
        client(registry.url).by_id(1)
    assert registry.requests == 1


def test_registry_down_longer_than_the_bound(registry):
    registry.statuses = [503] * 1000
    c = client(registry.url, timeout_s=0.3)
    with pytest.raises(RetriesExhausted, match="(?s)schema registry GET schema id 1 .*HTTP 503"):
        c.by_id(1)
    tried = registry.requests
    assert tried > 1
    with pytest.raises(RetriesExhausted):  # within the bound after giving up: one try, no wait
        c.by_id(2)
    assert registry.requests == tried + 1
    registry.statuses = []
    assert c.by_id(3) == {"schema": '"string"'}  # back: answers again at once
