"""`/admin/loggers` on the worker's REST API, Python's side (no Spark here: the herder
is the contract's stand-in): Connect's bodies and status codes, a level set on a
namespace reaching its children and taking effect on the lines logged, and the
refusals. Spark's log4j2 loggers, and the shapes against a real Connect worker, are
in tests/worker/test_rest_shapes.py."""

from __future__ import annotations

import logging

import pytest

from floeline.worker.loggers import level_name
from test_worker_rest import Client  # noqa: F401 - the REST client of the worker's unit tests
from floeline.worker.rest import RestServer
from worker_contract_herder import InMemoryContractHerder


@pytest.fixture
def client():
    rest = RestServer({"listeners": "http://127.0.0.1:0"}, InMemoryContractHerder()).start()
    yield Client(rest.url)
    rest.close()


@pytest.fixture
def loggers():
    """Two floeline loggers; their levels and the root's are put back afterwards."""
    names = ("floeline.admintest", "floeline.admintest.child")
    saved = {n: logging.getLogger(n).level for n in names}
    root = logging.root.level
    yield [logging.getLogger(n) for n in names]
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)
    logging.root.setLevel(root)


def test_list_and_get_answer_levels_with_last_modified(client, loggers):
    status, body, _ = client.call("GET", "/admin/loggers")
    assert status == 200
    assert body["root"] == {"level": level_name(logging.root.getEffectiveLevel()), "last_modified": None}
    assert body["floeline.admintest.child"] == {
        "level": level_name(loggers[1].getEffectiveLevel()), "last_modified": None}
    assert all(set(v) == {"level", "last_modified"} and v["level"] != "OFF" for v in body.values())
    assert list(body) == sorted(body)
    assert client.call("GET", "/admin/loggers/floeline.admintest")[:2] == \
        (200, {"level": level_name(loggers[0].getEffectiveLevel()), "last_modified": None})
    assert client.call("GET", "/admin/loggers/no.such.logger")[:2] == \
        (404, {"error_code": 404, "message": "Logger no.such.logger not found."})


def test_a_level_set_on_a_namespace_reaches_its_children_and_the_lines_logged(
        client, loggers, caplog):
    loggers[0].setLevel(logging.WARNING)
    loggers[1].setLevel(logging.WARNING)
    status, body, _ = client.call("PUT", "/admin/loggers/floeline.admintest", {"level": "debug"})
    assert (status, body) == (200, ["floeline.admintest", "floeline.admintest.child"])
    assert [lg.level for lg in loggers] == [logging.DEBUG, logging.DEBUG]
    with caplog.at_level(logging.DEBUG, logger="floeline.admintest.child"):
        loggers[1].debug("a debug line")
    assert "a debug line" in caplog.text
    got = client.call("GET", "/admin/loggers/floeline.admintest.child")[1]
    assert got["level"] == "DEBUG" and isinstance(got["last_modified"], int)
    # the same level again changes nothing; scope=cluster answers 204 (one worker)
    assert client.call("PUT", "/admin/loggers/floeline.admintest", {"level": "DEBUG"})[:2] == (200, [])
    assert client.call("PUT", "/admin/loggers/floeline.admintest?scope=cluster",
                       {"level": "ERROR"})[:2] == (204, None)
    assert [lg.level for lg in loggers] == [logging.ERROR, logging.ERROR]


def test_bad_levels_and_bodies_are_connects_errors(client, loggers):
    assert client.call("PUT", "/admin/loggers/floeline.admintest", {"level": "LOUD"})[:2] == \
        (404, {"error_code": 404, "message": "invalid log level 'LOUD'."})
    assert client.call("PUT", "/admin/loggers/floeline.admintest", {"lvl": "INFO"})[:2] == \
        (400, {"error_code": 400, "message": "Desired 'level' parameter was not specified in request."})
    assert client.call("DELETE", "/admin/loggers/floeline.admintest")[0] == 405
    assert client.call("PUT", "/admin/loggers", {"level": "INFO"})[0] == 405


def test_level_names_follow_log4j():
    assert [level_name(v) for v in (logging.CRITICAL, logging.WARNING, 25, logging.DEBUG, 5, 1)] == \
        ["FATAL", "WARN", "INFO", "DEBUG", "TRACE", "ALL"]
