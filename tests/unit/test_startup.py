"""The first-commit line: the wait from launch split into its parts, printed once."""

from __future__ import annotations

import time

import pytest

from floeline import startup


@pytest.fixture
def clock(monkeypatch):
    for name in ("_marks", "_spans", "_notes"):
        monkeypatch.setattr(startup, name, {})
    monkeypatch.setattr(startup, "_printed", False)
    launched = startup.process_started_at()
    assert launched is not None and launched <= time.time()
    return launched


def test_the_parts_add_up_to_the_time_from_launch_and_print_once(clock):
    startup.mark("spark start", clock + 1.0)
    startup.mark("spark start", clock + 5.0)  # only the first time counts
    startup.note("jars", "listed, Ivy skipped")
    startup.mark("spark ready", clock + 7.5)
    startup.mark("query start", clock + 8.0)
    startup.mark("first batch", clock + 10.0)
    with startup.span("table creation"):
        pass
    startup._spans["table creation"] += 1.2
    line = startup.summary(clock + 14.0)
    assert line.startswith("first commit 14.0 s after launch: before Spark 1.0 s, "
                           "Spark start 6.5 s (jars: listed, Ivy skipped), connector set-up 0.5 s, "
                           "source planning 2.0 s, first batch 4.0 s (table creation 1.2 s)"), line
    assert startup.summary(clock + 20.0) is None


def test_nothing_is_printed_for_a_session_started_elsewhere(clock):
    # a spark-submitted or test session: the connector's marks alone say nothing true
    startup.mark("query start")
    startup.mark("first batch")
    assert startup.summary(time.time()) is None
