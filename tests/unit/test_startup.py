"""The first-commit line: the wait from launch split into its parts, printed once."""

from __future__ import annotations

import time

import pytest

from floeline import startup


@pytest.fixture
def launched():
    launched = startup.process_started_at()
    assert launched is not None and launched <= time.time()
    return launched


def test_the_parts_add_up_to_the_time_from_launch_and_print_once(launched):
    clock = startup.StartupClock()
    clock.mark("spark start", launched + 1.0)
    clock.mark("spark start", launched + 5.0)  # only the first time counts
    clock.note("jars", "listed, Ivy skipped")
    clock.mark("spark ready", launched + 7.5)
    clock.mark("query start", launched + 8.0)
    clock.mark("first batch", launched + 10.0)
    with clock.span("table creation"):
        pass
    clock.spans["table creation"] += 1.2
    line = clock.summary(launched + 14.0)
    assert line.startswith("first commit 14.0 s after launch: before Spark 1.0 s, "
                           "Spark start 6.5 s (jars: listed, Ivy skipped), connector set-up 0.5 s, "
                           "source planning 2.0 s, first batch 4.0 s (table creation 1.2 s)"), line
    assert clock.summary(launched + 20.0) is None


def test_nothing_is_printed_for_a_session_started_elsewhere(launched):
    # a spark-submitted or test session: the connector's marks alone say nothing true
    clock = startup.StartupClock()
    clock.mark("query start")
    clock.mark("first batch")
    assert clock.summary(time.time()) is None


def test_the_module_functions_mark_the_process_clock():
    assert startup.mark.__self__ is startup.PROCESS and startup.span.__self__ is startup.PROCESS


def test_an_idle_source_is_waiting_for_records_not_planning():
    # a connector in a warm process whose topic got its first record 20 s after its query started
    clock = startup.StartupClock(launched_at=1000.0)
    clock.mark("query start", 1001.0)
    clock.mark("records arrived", 1021.0)
    clock.mark("first batch", 1021.5)
    assert clock.summary(1022.0) == ("first commit 22.0 s after the connector started: connector "
                                     "set-up 1.0 s, source planning 0.5 s, waiting for records "
                                     "20.0 s, first batch 0.5 s")
    # records that were there before the query started: all of it was planning
    clock = startup.StartupClock(launched_at=1000.0)
    clock.mark("query start", 1001.0)
    clock.mark("records arrived", 900.0)
    clock.mark("first batch", 1003.0)
    assert "source planning 2.0 s, first batch" in clock.summary(1004.0)
