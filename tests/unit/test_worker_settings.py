"""The worker's settings (worker.properties): keys, defaults, what connectors inherit."""

from __future__ import annotations

import os

import pytest

from floeline.errors import ConfigError
from floeline.worker.settings import load_worker_settings, worker_settings_from_dict


def test_defaults_listen_on_loopback_8083_and_use_the_environment_warehouse(monkeypatch, tmp_path):
    monkeypatch.setenv("FLOELINE_WAREHOUSE", str(tmp_path / "wh"))
    settings = load_worker_settings(None)
    assert (settings.listener.scheme, settings.listener.host, settings.listener.port) == ("http", "127.0.0.1", 8083)
    assert settings.warehouse == str(tmp_path / "wh")
    assert settings.spark_master == "local[2]"
    assert settings.checkpoint_root is None and settings.pipes is False


def test_without_the_environment_the_warehouse_is_dot_warehouse_made_absolute(monkeypatch):
    monkeypatch.delenv("FLOELINE_WAREHOUSE", raising=False)
    assert worker_settings_from_dict({}).warehouse == os.path.abspath("./warehouse")


def test_properties_file_is_read_with_its_keys(tmp_path):
    path = tmp_path / "worker.properties"
    path.write_text("listeners = http://0.0.0.0:0\nfloeline.warehouse=/data/wh\nfloeline.pipes=true\n"
                    "floeline.spark.master=local[4]\nfloeline.checkpoint.dir=/data/ck\n"
                    "rest.auth.users.file=/etc/users\nlisteners.https.ssl.key.password=x\n")
    settings = load_worker_settings(path)
    assert (settings.listener.host, settings.listener.port) == ("0.0.0.0", 0)
    assert settings.warehouse == "/data/wh" and settings.pipes and settings.spark_master == "local[4]"
    assert dict(settings.rest_settings) == {"rest.auth.users.file": "/etc/users",
                                            "listeners.https.ssl.key.password": "x"}
    assert settings.properties["listeners"] == "http://0.0.0.0:0"


def test_a_blank_listener_host_is_loopback_never_all_interfaces():
    assert worker_settings_from_dict({"listeners": "http://:9000"}).listener.host == "127.0.0.1"


def test_unknown_keys_and_bad_values_are_each_named_with_the_closest_key():
    with pytest.raises(ConfigError) as err:
        worker_settings_from_dict({"listener": "http://127.0.0.1:1", "floeline.pipes": "yes",
                                   "listeners": "tcp://x", "floeline.warehous": "/w"})
    text = str(err.value)
    assert "4 problems" in text
    assert "'listener' (did you mean 'listeners'?)" in text
    assert "'floeline.warehous' (did you mean 'floeline.warehouse'?)" in text
    assert "floeline.pipes='yes' is not a boolean" in text
    assert "listeners='tcp://x' is not a listener" in text


def test_errors_name_the_file(tmp_path):
    path = tmp_path / "w.properties"
    path.write_text("nope=1\n")
    with pytest.raises(ConfigError, match=r"(?s)w.properties: invalid worker config.*'nope'"):
        load_worker_settings(path)


def test_connect_worker_keys_are_accepted_and_listed_as_ignored():
    settings = worker_settings_from_dict({"group.id": "connect", "offset.storage.topic": "o",
                                          "plugin.path": "/p", "metrics.sample.window.ms": "1"})
    assert settings.ignored_keys == ("group.id", "metrics.sample.window.ms", "offset.storage.topic",
                                      "plugin.path")


def _worker(**props):
    base = {"floeline.warehouse": "/wh"}
    base.update({k.replace("__", "."): v for k, v in props.items()})
    return worker_settings_from_dict(base)


def test_connectors_inherit_the_worker_defaults_unless_they_set_their_own():
    worker = _worker(**{"bootstrap.servers": "b:9092", "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                        "value.converter.schemas.enable": "false", "key.converter": "K",
                        "consumer.max.poll.records": "500", "floeline.metrics.ready.max.lag": "7",
                        "security.protocol": "SASL_SSL"})
    merged = worker.connector_settings({"name": "a", "topics": "t", "key.converter": "Mine",
                                        "consumer.override.max.poll.records": "9"})
    assert merged["bootstrap.servers"] == "b:9092"
    assert merged["value.converter"] == "org.apache.kafka.connect.json.JsonConverter"
    assert merged["value.converter.schemas.enable"] == "false"
    assert merged["key.converter"] == "Mine"
    assert merged["consumer.override.max.poll.records"] == "9"
    assert merged["floeline.metrics.ready.max.lag"] == "7"
    assert merged["security.protocol"] == "SASL_SSL"
    assert "consumer.max.poll.records" not in merged
    assert merged["floeline.warehouse"] == "/wh"


def test_consumer_keys_become_consumer_overrides():
    merged = _worker(**{"consumer.fetch.min.bytes": "10"}).connector_settings({"name": "a"})
    assert merged["consumer.override.fetch.min.bytes"] == "10"


def test_a_connector_naming_its_own_converter_does_not_get_the_worker_converters_options():
    worker = _worker(**{"value.converter": "W", "value.converter.schemas.enable": "true",
                        "value.converter.schema.registry.url": "http://r"})
    merged = worker.connector_settings({"name": "a", "value.converter": "Mine"})
    assert merged["value.converter"] == "Mine"
    assert "value.converter.schemas.enable" not in merged
    assert "value.converter.schema.registry.url" not in merged


def test_the_connector_warehouse_and_checkpoint_win_and_the_worker_root_names_each_checkpoint():
    worker = _worker(**{"floeline.checkpoint.dir": "/ck"})
    assert worker.connector_settings({"name": "orders"})["floeline.checkpoint.dir"] == "/ck/orders"
    own = worker.connector_settings({"name": "orders", "floeline.warehouse": "/other",
                                     "floeline.checkpoint.dir": "/mine"})
    assert (own["floeline.warehouse"], own["floeline.checkpoint.dir"]) == ("/other", "/mine")
    assert "floeline.checkpoint.dir" not in _worker().connector_settings({"name": "orders"})


def test_the_merged_settings_make_a_valid_connector_config():
    from floeline.config import config_from_dict

    worker = _worker(**{"bootstrap.servers": "b:9092", "floeline.checkpoint.dir": "/ck"})
    cfg = config_from_dict(worker.connector_settings({"name": "orders", "topics": "orders"}))
    assert (cfg.bootstrap_servers, cfg.warehouse, cfg.checkpoint_dir) == ("b:9092", "/wh", "/ck/orders")


def test_batch_slots_default_to_spark_and_take_a_whole_number_or_zero_for_no_limit():
    assert worker_settings_from_dict({}).batch_slots is None
    assert worker_settings_from_dict({"floeline.worker.batch.slots": "3"}).batch_slots == 3
    assert worker_settings_from_dict({"floeline.worker.batch.slots": "0"}).batch_slots == 0
    with pytest.raises(ConfigError, match=r"floeline.worker.batch.slots='two': accepted values: a whole number"):
        worker_settings_from_dict({"floeline.worker.batch.slots": "two"})
