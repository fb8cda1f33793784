"""What a connector waits for (waits.py): said from the first failed try with the fix,
once until it answers or a reminder is due, readable for the worker's /status, and a
connector's log lines prefixed with its name (plain objects and threads, no services)."""

from __future__ import annotations

import logging
import threading

import pytest

from floeline import retry, waits
from floeline.errors import ServiceUnavailable

WHAT = "Kafka Metadata at bootstrap.servers=127.0.0.1:19092"
FIX = "Check that the broker is running and reachable (`floeline kafka start`)."


@pytest.fixture(autouse=True)
def _fresh():
    yield
    for name in ("orders", "payments"):
        waits.forget(name)


def said(caplog) -> list[str]:
    """The lines logged, without the `[orders] ` an entry point's ConnectorPrefix adds
    (cli.main installs it on floeline's logger, so earlier tests may have)."""
    return [r.getMessage().removeprefix("[orders] ") for r in caplog.records]


def test_the_first_failed_try_says_what_and_the_fix_later_ones_do_not(caplog):
    with caplog.at_level(logging.WARNING, logger="floeline"), waits.working_for("orders"):
        assert waits.failed(WHAT, "connection refused", FIX, "120 s: errors.retry.timeout=120000")
        assert waits.failed(WHAT, "connection refused", FIX, "120 s: errors.retry.timeout=120000")
    lines = said(caplog)
    assert len(lines) == 1
    assert lines[0].startswith(f"waiting for {WHAT}: connection refused. {FIX} (1 try over ")
    assert lines[0].endswith("retrying for 120 s: errors.retry.timeout=120000)")
    status = waits.waiting_for("orders")
    assert status.startswith(f"waiting for {WHAT}: connection refused. {FIX} (2 tries over ")
    assert waits.waiting_for("payments") is None


def test_an_answer_ends_the_wait_and_says_so(caplog):
    with caplog.at_level(logging.WARNING, logger="floeline"), waits.working_for("orders"):
        waits.failed(WHAT, "refused", FIX, "120 s")
        waits.answered(WHAT)
        waits.answered(WHAT)  # nothing waited for: nothing said
    assert waits.waiting_for("orders") is None
    assert [line.split(" over ")[0] for line in said(caplog)][1:] == [f"{WHAT} answered after 1 try"]


def test_outside_a_connector_nothing_is_recorded():
    assert threading.current_thread().name == "MainThread"
    assert not waits.failed(WHAT, "refused", FIX, "120 s")
    assert waits.current_connector() is None


def test_a_worker_connectors_thread_works_for_it():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(waits.current_connector()),
                              name="floeline-connector-payments")
    thread.start()
    thread.join()
    assert seen == ["payments"]


def test_retry_call_in_a_connector_reports_its_wait_and_its_answer(caplog):
    answers = iter([ServiceUnavailable("broker starting"), ServiceUnavailable("broker starting"), "ok"])

    def call():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    with caplog.at_level(logging.WARNING, logger="floeline"), waits.working_for("orders"):
        assert retry.call(call, what=WHAT, service="Kafka", fix=FIX, sleep=lambda s: None) == "ok"
    lines = said(caplog)
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"waiting for {WHAT}: broker starting. {FIX} (1 try")
    assert lines[1].startswith(f"{WHAT} answered after 2 tries")
    assert waits.waiting_for("orders") is None


def test_a_connectors_log_lines_carry_its_name_once():
    record = logging.LogRecord("floeline", logging.ERROR, __file__, 1, "connector %s failed: %s",
                               ("orders", "boom"), None)
    prefix = waits.ConnectorPrefix()
    with waits.working_for("orders"):
        prefix.filter(record)
        prefix.filter(record)
    assert record.getMessage() == "[orders] connector orders failed: boom"
    other = logging.LogRecord("floeline", logging.ERROR, __file__, 1, "worker: %s", ("up",), None)
    prefix.filter(other)
    assert other.getMessage() == "worker: up"


def test_retries_that_give_up_end_the_wait_without_an_answer(caplog):
    def down():
        raise ServiceUnavailable("refused")

    clock = iter(range(0, 1000, 50))
    with caplog.at_level(logging.WARNING, logger="floeline"), waits.working_for("orders"):
        with pytest.raises(Exception, match="still failing"):
            retry.call(down, what=WHAT, service="Kafka", fix=FIX, sleep=lambda s: None,
                       clock=lambda: next(clock))
    assert waits.waiting_for("orders") is None
    assert not [line for line in said(caplog) if "answered" in line]
