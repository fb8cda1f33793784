"""The herder's config handling, no Spark: what a connector runs with inside a worker,
and configs it refuses before anything is stored or started."""

from __future__ import annotations

import logging

import pytest

from floeline.warehouse.storage import LocalStorage
from floeline.worker.errors import BadRequest, NotFound
from floeline.worker.herder import Herder, LinePrefixer
from floeline.worker.settings import worker_settings_from_dict
from floeline.worker.store import ConnectorStore


@pytest.fixture
def herder(tmp_path):
    settings = worker_settings_from_dict({"floeline.warehouse": str(tmp_path), "bootstrap.servers": "b:9092",
                                          "floeline.checkpoint.dir": str(tmp_path / "ck")})
    return Herder(None, settings, ConnectorStore(LocalStorage(), str(tmp_path)))


def test_a_connector_runs_with_the_worker_defaults_and_its_name(herder, tmp_path):
    cfg = herder.connector_config("orders", {"topics": "orders"})
    assert (cfg.name, cfg.bootstrap_servers, cfg.warehouse) == ("orders", "b:9092", str(tmp_path))
    assert cfg.checkpoint_dir == str(tmp_path / "ck" / "orders")


def test_a_connector_metrics_port_is_ignored_with_a_notice(herder, caplog):
    with caplog.at_level(logging.WARNING, logger="floeline"):
        cfg = herder.connector_config("m", {"topics": "t", "floeline.metrics.port": "9100"})
    assert cfg.metrics.port is None
    assert "floeline.metrics.port is ignored in a worker" in caplog.text


def test_references_are_resolved_when_it_starts_and_a_missing_one_is_named(herder, monkeypatch):
    monkeypatch.setenv("FLOELINE_TEST_TOPICS", "from_env")
    assert herder.connector_config("r", {"topics": "${env:FLOELINE_TEST_TOPICS}"}).topics == ("from_env",)
    monkeypatch.delenv("FLOELINE_TEST_TOPICS")
    with pytest.raises(BadRequest, match="FLOELINE_TEST_TOPICS"):
        herder.create("r", {"topics": "${env:FLOELINE_TEST_TOPICS}"})


def test_invalid_configs_are_refused_with_every_problem_and_nothing_is_stored(herder):
    with pytest.raises(BadRequest) as err:
        herder.create("bad", {"topics": "t", "buffer.count.records": "0", "errors.tolerance": "some"})
    assert "buffer.count.records=0" in str(err.value) and "errors.tolerance='some'" in str(err.value)
    with pytest.raises(BadRequest, match=r"Connector name configuration \(y\) doesn't match"):
        herder.put_config("x", {"name": "y", "topics": "t"})
    with pytest.raises(BadRequest, match="initial_state 'SLEEPING'"):
        herder.create("z", {"topics": "t"}, initial_state="SLEEPING")
    assert herder.connectors() == [] and herder.store.load_all() == []


def test_every_method_naming_an_unknown_connector_says_not_found(herder):
    for call in (herder.config, herder.status, herder.info, herder.tasks, herder.topics, herder.pause,
                 herder.resume, herder.stop, herder.restart, herder.delete, herder.offsets):
        with pytest.raises(NotFound, match="^Connector ghost not found$"):
            call("ghost")
    with pytest.raises(NotFound):
        herder.patch_config("ghost", {"a": "b"})


def test_output_lines_carry_the_connector_name():
    import io
    import threading

    out = io.StringIO()
    lines = LinePrefixer("orders", out, threading.Lock())
    print("batch 0: 10 records", file=lines, flush=True)
    lines.write("half ")
    lines.write("line\n")
    assert out.getvalue() == "[orders] batch 0: 10 records\n[orders] half line\n"


def test_connectors_share_the_worker_batch_slots_and_zero_means_no_limit(tmp_path):
    def herder_with(slots: str) -> Herder:
        settings = worker_settings_from_dict({"floeline.warehouse": str(tmp_path),
                                              "floeline.worker.batch.slots": slots})
        return Herder(None, settings, ConnectorStore(LocalStorage(), str(tmp_path)))

    three = herder_with("3")
    slots = three.batch_slots()
    assert slots is three.batch_slots()  # one for every connector of the worker
    assert [slots.acquire(blocking=False) for _ in range(4)] == [True, True, True, False]
    assert herder_with("0").batch_slots() is None
