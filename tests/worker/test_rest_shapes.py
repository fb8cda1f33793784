"""The same requests to a real Apache Kafka Connect 4.1.2 worker (standalone, running the
stock FileStreamSink connector against the local broker) and to floeline's RestServer:
status codes, key sets and error bodies must agree, so tools written for Connect work
against floeline. The few places floeline answers differently on purpose (400 instead
of Connect's 500 for malformed JSON; unknown keys listed by validate) are asserted as
such, so a change on either side shows up here.

floeline's side runs over the herder contract: the real Herder when the worker package
has one (floeline.worker.herder), else InMemoryContractHerder (tests/unit), which the
merge of the worker branch replaces with the real one (see `floeline_herder`)."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from floeline.dev import kafka as devkafka
from floeline.dev.connect import ConnectWorker
from floeline.dev.services import free_port
from floeline.worker.rest import RestServer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from worker_contract_herder import InMemoryContractHerder  # noqa: E402

pytestmark = pytest.mark.integration

NAME = "shape-sink"
SNOWFLAKE = "com.snowflake.kafka.connector.SnowflakeStreamingSinkConnector"


# ---------------------------------------------------------------- the two workers

@pytest.fixture(scope="module")
def kafka(kafka):
    """The worker tests' broker (conftest.py), where topic shape-topic holds three records
    (so offset 1 is a valid position for both workers' offsets PATCH)."""
    from confluent_kafka import Producer

    devkafka.create_topic(kafka, "shape-topic")
    producer = Producer({"bootstrap.servers": kafka})
    for n in range(3):
        producer.produce("shape-topic", json.dumps({"n": n}).encode())
    assert producer.flush(30) == 0
    return kafka


@pytest.fixture(scope="module")
def connect(kafka, tmp_path_factory):
    """A real Connect worker; its jars are fetched once into floeline's cache (a missing
    java or mvn fails with how to install them)."""
    state = tmp_path_factory.mktemp("connect")
    worker = ConnectWorker(kafka, state, free_port()).start()
    yield Api(worker.url, {"connector.class": "FileStreamSink", "topics": "shape-topic",
                           "file": str(state / "sink.txt")}, "FileStreamSink")
    worker.stop()


def floeline_herder(kafka, warehouse: Path):
    """The herder behind floeline's RestServer here: the worker's real one (a Spark
    session, connectors as streaming queries), or the contract's stand-in when this
    tree has no floeline.worker.herder yet."""
    try:
        from floeline.worker.herder import Herder
        from floeline.worker.settings import worker_settings_from_dict
        from floeline.worker.store import ConnectorStore
    except ImportError:
        return InMemoryContractHerder()
    from floeline.spark import get_spark
    from floeline.warehouse.catalog import Warehouse

    settings = worker_settings_from_dict({"floeline.warehouse": str(warehouse), "bootstrap.servers": kafka})
    place = Warehouse(settings.warehouse, settings.warehouse_s3)
    return Herder(get_spark(settings.spark_master), settings, ConnectorStore(place.storage, place.location))


@pytest.fixture(scope="module")
def floeline(kafka, tmp_path_factory):
    warehouse = tmp_path_factory.mktemp("warehouse")
    herder = floeline_herder(kafka, warehouse)
    server = RestServer({"listeners": f"http://127.0.0.1:{free_port()}"}, herder).start()
    yield Api(server.url, {"connector.class": SNOWFLAKE, "topics": "shape-topic",
                           "buffer.flush.time": "1"}, "SnowflakeStreamingSink")
    server.close()
    herder.close()


class Api:
    """One worker's REST API: its URL, a valid config of its connector, its plugin alias."""

    def __init__(self, url: str, config: dict[str, str], plugin: str):
        self.url, self.config, self.plugin = url, config, plugin

    def call(self, method: str, path: str, body=None, raw: bytes | None = None):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                payload = answer.read()
                return answer.status, json.loads(payload) if payload else None
        except urllib.error.HTTPError as exc:
            payload = exc.read()
            return exc.code, json.loads(payload) if payload else None


def both(connect: Api, floeline: Api, method: str, path: str, body=None, raw=None):
    """(Connect's answer, floeline's answer); `body` may be a function of the Api."""
    return tuple(api.call(method, path, body(api) if callable(body) else body, raw)
                 for api in (connect, floeline))


def shape(value):
    """The key structure of a JSON value: dicts by their keys (recursively), lists by
    their first element, scalars by their JSON type."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return type(value).__name__


def keys(value) -> set:
    return set(value) if isinstance(value, dict) else set()


def assert_same(answers, compare=shape):
    (c_status, c_body), (f_status, f_body) = answers
    assert f_status == c_status, f"status: Connect {c_status} {c_body}, floeline {f_status} {f_body}"
    if c_body is not None or f_body is not None:
        assert compare(f_body) == compare(c_body), f"Connect: {c_body}\nfloeline: {f_body}"


def error_shape(body):
    assert set(body) == {"error_code", "message"}
    return body["error_code"]


def status_shape(body):
    """A ConnectorStateInfo's keys, its connector's and its tasks' (values differ)."""
    return (keys(body), keys(body["connector"]) - {"trace"},
            [keys(t) - {"trace"} for t in body["tasks"]][:1])


# ---------------------------------------------------------------- the requests

@pytest.fixture(scope="module")
def created(connect, floeline):
    answers = both(connect, floeline, "POST", "/connectors",
                   lambda api: {"name": NAME, "config": api.config})
    yield answers
    for api in (connect, floeline):
        api.call("DELETE", f"/connectors/{NAME}")


def _until_running(api: Api) -> None:
    deadline = time.monotonic() + 240  # a real connector's first query start, under load
    while time.monotonic() < deadline:
        status, body = api.call("GET", f"/connectors/{NAME}/status")
        if status == 200 and body["connector"]["state"] == "RUNNING" and body["tasks"] \
                and body["tasks"][0]["state"] == "RUNNING":
            return
        time.sleep(0.3)
    raise AssertionError(f"{api.url}: {NAME} is not RUNNING: {body}")


def test_root_and_health(connect, floeline):
    assert_same(both(connect, floeline, "GET", "/"), keys)
    assert_same(both(connect, floeline, "GET", "/health"))  # values too: the same words


def test_create_and_create_again(connect, floeline, created):
    (c_status, c_body), (f_status, f_body) = created
    assert (c_status, f_status) == (201, 201)
    assert keys(f_body) == keys(c_body) == {"name", "config", "tasks", "type"}
    assert f_body["config"]["name"] == c_body["config"]["name"] == NAME
    assert f_body["type"] == c_body["type"] == "sink"
    again = both(connect, floeline, "POST", "/connectors", lambda api: {"name": NAME, "config": api.config})
    assert_same(again, lambda body: body)  # identical: {"error_code": 409, "message": "Connector ... already exists"}


def test_list_and_expand(connect, floeline, created):
    for api in (connect, floeline):
        _until_running(api)
    assert_same(both(connect, floeline, "GET", "/connectors"), lambda body: body)
    answers = both(connect, floeline, "GET", "/connectors?expand=status&expand=info")
    assert_same(answers, lambda body: (keys(body), keys(body[NAME]), status_shape(body[NAME]["status"]),
                                       keys(body[NAME]["info"])))


def test_errors(connect, floeline, created):
    assert_same(both(connect, floeline, "GET", "/connectors/no-such"), lambda body: body)
    assert_same(both(connect, floeline, "GET", "/no/such/path"), lambda body: body)
    assert_same(both(connect, floeline, "DELETE", "/connectors"), lambda body: body)
    assert_same(both(connect, floeline, "POST", "/connectors",
                     {"name": "mismatch", "config": {"name": "other", "topics": "t"}}), lambda body: body)
    assert_same(both(connect, floeline, "PUT", f"/connectors/{NAME}/config",
                     lambda api: {**api.config, "name": "other"}), lambda body: body)


def test_malformed_and_empty_json_are_400_where_connect_says_500(connect, floeline):
    for raw in (b'{"name":', b""):
        (c_status, c_body), (f_status, f_body) = both(connect, floeline, "POST", "/connectors", raw=raw)
        assert (c_status, f_status) == (500, 400), (c_body, f_body)
        assert error_shape(c_body) == 500 and error_shape(f_body) == 400


def test_status_config_tasks_and_topics(connect, floeline, created):
    for api in (connect, floeline):
        _until_running(api)
    assert_same(both(connect, floeline, "GET", f"/connectors/{NAME}/status"), status_shape)
    assert_same(both(connect, floeline, "GET", f"/connectors/{NAME}"), keys)
    (c_status, c_config), (f_status, f_config) = both(connect, floeline, "GET", f"/connectors/{NAME}/config")
    assert (c_status, f_status) == (200, 200) and c_config["name"] == f_config["name"] == NAME
    assert_same(both(connect, floeline, "GET", f"/connectors/{NAME}/tasks"),
                lambda body: [(keys(t), keys(t["id"])) for t in body])
    assert_same(both(connect, floeline, "GET", f"/connectors/{NAME}/tasks/0/status"),
                lambda body: keys(body) - {"trace"})
    assert_same(both(connect, floeline, "GET", f"/connectors/{NAME}/tasks/7/status"), error_shape)
    assert_same(both(connect, floeline, "GET", f"/connectors/{NAME}/topics"),
                lambda body: (keys(body), keys(body[NAME])))
    assert_same(both(connect, floeline, "PUT", f"/connectors/{NAME}/topics/reset"))


def test_pause_resume_restart(connect, floeline, created):
    for action in ("pause", "resume"):
        assert_same(both(connect, floeline, "PUT", f"/connectors/{NAME}/{action}"))
    for api in (connect, floeline):
        _until_running(api)
    assert_same(both(connect, floeline, "POST", f"/connectors/{NAME}/restart"))
    for query in ("includeTasks=true", "onlyFailed=true", "includeTasks=true&onlyFailed=true"):
        assert_same(both(connect, floeline, "POST", f"/connectors/{NAME}/restart?{query}"), status_shape)
    assert_same(both(connect, floeline, "POST", f"/connectors/{NAME}/tasks/0/restart"))
    # (No restart of a task that does not exist: Connect 4.1.2 standalone answers 404 but then
    # lists a FAILED phantom task; floeline's 404 is in tests/unit/test_worker_rest.py.)
    assert_same(both(connect, floeline, "PUT", "/connectors/no-such/pause"), error_shape)


def test_offsets_and_stop(connect, floeline, created):
    for api in (connect, floeline):
        _until_running(api)
    assert_same(both(connect, floeline, "GET", f"/connectors/{NAME}/offsets"), keys)
    one = {"offsets": [{"partition": {"kafka_topic": "shape-topic", "kafka_partition": 0},
                        "offset": {"kafka_offset": 1}}]}
    assert_same(both(connect, floeline, "PATCH", f"/connectors/{NAME}/offsets", one), error_shape)
    assert_same(both(connect, floeline, "PATCH", f"/connectors/{NAME}/offsets", {"offsets": []}),
                lambda body: body)
    assert_same(both(connect, floeline, "PUT", f"/connectors/{NAME}/stop"))
    for api in (connect, floeline):  # stop is asynchronous on both
        deadline = time.monotonic() + 120
        while api.call("GET", f"/connectors/{NAME}/status")[1]["connector"]["state"] != "STOPPED":
            assert time.monotonic() < deadline
            time.sleep(0.3)
    assert_same(both(connect, floeline, "GET", f"/connectors/{NAME}/status"), status_shape)
    assert_same(both(connect, floeline, "PATCH", f"/connectors/{NAME}/offsets", one), lambda body: body)
    assert_same(both(connect, floeline, "DELETE", f"/connectors/{NAME}/offsets"), lambda body: body)
    assert_same(both(connect, floeline, "PUT", f"/connectors/{NAME}/resume"))


def test_plugins(connect, floeline):
    assert_same(both(connect, floeline, "GET", "/connector-plugins"),
                lambda body: {tuple(sorted(p)) for p in body})
    c_status, c_defs = connect.call("GET", f"/connector-plugins/{connect.plugin}/config")
    f_status, f_defs = floeline.call("GET", f"/connector-plugins/{floeline.plugin}/config")
    assert (c_status, f_status) == (200, 200)
    assert {tuple(sorted(d)) for d in f_defs} == {tuple(sorted(d)) for d in c_defs}
    assert_same(both(connect, floeline, "GET", "/connector-plugins/NoSuchPlugin/config"), lambda body: body)


def test_validate_with_a_bad_key_and_a_bad_value(connect, floeline):
    answers = [api.call("PUT", f"/connector-plugins/{api.plugin}/config/validate",
                        {**api.config, "tasks.max" if api is connect else "buffer.flush.time": "soon",
                         "no.such.key": "1"})
               for api in (connect, floeline)]
    (c_status, c_body), (f_status, f_body) = answers
    assert (c_status, f_status) == (200, 200)
    assert keys(f_body) == keys(c_body) == {"name", "error_count", "groups", "configs"}
    assert f_body["name"] == floeline.plugin and c_body["name"] == connect.plugin

    def entry_shape(entry):
        return tuple(tuple(sorted(keys(part))) for part in (entry, entry["definition"], entry["value"]))

    assert {entry_shape(e) for e in f_body["configs"] if e["definition"]} == \
        {entry_shape(e) for e in c_body["configs"]}
    c_errors = {e["value"]["name"] for e in c_body["configs"] if e["value"]["errors"]}
    f_errors = {e["value"]["name"] for e in f_body["configs"] if e["value"]["errors"]}
    assert {"name", "tasks.max"} <= c_errors and "no.such.key" not in c_errors  # Connect: unknown keys unseen
    assert {"name", "buffer.flush.time", "no.such.key"} <= f_errors  # floeline refuses them, so it says so
    unknown = next(e for e in f_body["configs"] if e["value"]["name"] == "no.such.key")
    assert unknown["definition"] is None and keys(unknown["value"]) == keys(c_body["configs"][0]["value"])
    other_plugin = {connect.url: "FileStreamSource", floeline.url: "SnowflakeSink"}
    mismatch = [api.call("PUT", f"/connector-plugins/{other_plugin[api.url]}/config/validate", api.config)
                for api in (connect, floeline)]
    assert_same(mismatch, error_shape)
    assert all(body["message"].startswith("Included connector type ") for _, body in mismatch)


def test_200_concurrent_requests_leave_the_connector_running(floeline, created):
    """Many clients at once (status, lists, configs, metrics) get their answers and the
    running connector keeps running."""
    from concurrent.futures import ThreadPoolExecutor

    _until_running(floeline)
    paths = [f"/connectors/{NAME}/status", "/connectors?expand=status&expand=info",
             f"/connectors/{NAME}/config", "/connector-plugins", "/health"]
    with ThreadPoolExecutor(max_workers=200) as pool:
        answers = list(pool.map(lambda i: floeline.call("GET", paths[i % len(paths)])[0], range(200)))
    assert answers == [200] * 200
    status = floeline.call("GET", f"/connectors/{NAME}/status")[1]
    assert status["connector"]["state"] == "RUNNING", status


def test_admin_loggers(connect, floeline):
    """Connect's LoggingResource: the listing's and one logger's shape, a namespace's
    level set (the changed names), the errors; on floeline a level set on a Spark
    namespace changes log4j2 in the session's JVM and one on floeline's a Python logger."""
    import logging

    from floeline.spark import get_spark

    def entry_shape(body):
        return {tuple(sorted(value)) for value in body.values()}, "root" in body, body == dict(sorted(body.items()))

    assert_same(both(connect, floeline, "GET", "/admin/loggers"), entry_shape)
    assert_same(both(connect, floeline, "GET", "/admin/loggers/root"), keys)
    assert_same(both(connect, floeline, "GET", "/admin/loggers/no.such.logger"), lambda body: body)
    assert_same(both(connect, floeline, "PUT", "/admin/loggers/org.example", {"level": "LOUD"}), lambda body: body)
    assert_same(both(connect, floeline, "PUT", "/admin/loggers/org.example", {"lvl": "INFO"}), lambda body: body)

    jvm = get_spark()._jvm
    spark_namespace, python_namespace = "org.apache.spark.deploy", "floeline.worker"
    # A namespace no class has logged under yet is Connect's 404: it then goes back to root's level.
    status, before = floeline.call("GET", f"/admin/loggers/{spark_namespace}")
    restore = before["level"] if status == 200 else floeline.call("GET", "/admin/loggers/root")[1]["level"]
    python_before = logging.getLogger(python_namespace).level
    namespaces = {connect.url: "org.apache.kafka.connect.file", floeline.url: spark_namespace}
    try:
        answers = [api.call("PUT", f"/admin/loggers/{namespaces[api.url]}", {"level": "TRACE"})
                   for api in (connect, floeline)]
        assert_same(answers)
        for api, (_, changed) in zip((connect, floeline), answers):
            assert namespaces[api.url] in changed and changed == sorted(changed)
            assert all(name.startswith(namespaces[api.url]) for name in changed)
        after = [api.call("GET", f"/admin/loggers/{namespaces[api.url]}") for api in (connect, floeline)]
        assert_same(after, lambda body: (body["level"], type(body["last_modified"]).__name__))
        assert after[1][1]["level"] == "TRACE"
        assert jvm.org.apache.logging.log4j.LogManager.getLogger(spark_namespace + ".Client").isTraceEnabled()
        # scope=cluster: Connect's standalone worker and floeline's (one worker) both answer so
        assert_same([api.call("PUT", f"/admin/loggers/{namespaces[api.url]}?scope=cluster", {"level": "WARN"})
                     for api in (connect, floeline)])
        assert not jvm.org.apache.logging.log4j.LogManager.getLogger(spark_namespace).isInfoEnabled()
        status, changed = floeline.call("PUT", f"/admin/loggers/{python_namespace}", {"level": "DEBUG"})
        assert status == 200 and python_namespace in changed
        assert logging.getLogger(python_namespace).isEnabledFor(logging.DEBUG)
    finally:
        floeline.call("PUT", f"/admin/loggers/{spark_namespace}", {"level": restore})
        logging.getLogger(python_namespace).setLevel(python_before)
