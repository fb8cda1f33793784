"""The worker's REST API over HTTP (a real server on a free port, a real HTTP client),
on the herder contract: routing, Connect's status codes and error body, masking of
secrets, validate's ConfigInfos, Basic auth, TLS and many requests at once. No Spark:
the herder is InMemoryContractHerder (worker_contract_herder.py); the same requests
against a real Kafka Connect worker are in tests/worker/test_rest_shapes.py."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from prometheus_client import Counter

from floeline.cli import main as cli_main
from floeline.errors import ConfigError
from floeline.worker.auth import load_users, user_line
from floeline.worker.masking import MASK
from floeline.worker.rest import RestServer, RestSettings
from worker_contract_herder import InMemoryContractHerder

SNOWFLAKE = "com.snowflake.kafka.connector.SnowflakeStreamingSinkConnector"


def config(**extra) -> dict[str, str]:
    return {"connector.class": SNOWFLAKE, "topics": "orders", **extra}


class Client:
    def __init__(self, url: str, auth: tuple[str, str] | None = None, context=None):
        self.url, self.auth, self.context = url, auth, context

    def call(self, method: str, path: str, body=None, raw: bytes | None = None, headers=None):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json", **(headers or {})})
        if self.auth:
            token = base64.b64encode(":".join(self.auth).encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as answer:
                return answer.status, _decoded(answer.read()), dict(answer.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, _decoded(exc.read()), dict(exc.headers)


def _decoded(payload: bytes):
    return json.loads(payload) if payload else None


@pytest.fixture
def server():
    rest = RestServer({"listeners": "http://127.0.0.1:0"}, InMemoryContractHerder()).start()
    yield rest
    rest.close()


@pytest.fixture
def client(server):
    return Client(server.url)


def create(client, name="orders-sink", **extra):
    status, body, headers = client.call("POST", "/connectors", {"name": name, "config": config(**extra)})
    assert status == 201, body
    return body, headers


# ---------------------------------------------------------------- routing and errors

def test_root_health_and_the_worker_id(server, client):
    status, body, _ = client.call("GET", "/")
    assert status == 200 and set(body) == {"version", "commit", "kafka_cluster_id"}
    assert client.call("GET", "/health")[:2] == (200, {
        "status": "healthy", "message": "Worker has completed startup and is ready to handle requests."})
    assert server.herder.worker_id == f"127.0.0.1:{server.port}"


@pytest.mark.parametrize("method, path, status, message", [
    ("GET", "/nope", 404, "HTTP 404 Not Found"),
    ("GET", "/connectors/x/tasks/notanumber/status", 404, "HTTP 404 Not Found"),
    ("DELETE", "/connectors", 405, "HTTP 405 Method Not Allowed"),
    ("POST", "/health", 405, "HTTP 405 Method Not Allowed"),
    ("GET", "/connectors/x/restart", 405, "HTTP 405 Method Not Allowed"),
    ("GET", "/connectors/missing", 404, "Connector missing not found"),
    ("PUT", "/connectors/missing/pause", 404, "Connector missing not found"),
    ("POST", "/connectors/missing/restart", 404, "Connector missing not found"),
    ("GET", "/connectors/missing/offsets", 404, "Connector missing not found"),
])
def test_errors_have_connects_body(client, method, path, status, message):
    assert client.call(method, path)[:2] == (status, {"error_code": status, "message": message})


@pytest.mark.parametrize("raw, says", [(b"{", "not valid JSON"), (b"", "empty"), (b"  ", "empty"),
                                       (b"[1]", "JSON object"), (b'{"config": {}}', '"name"')])
def test_malformed_bodies_are_400(client, raw, says):
    status, body, _ = client.call("POST", "/connectors", raw=raw)
    assert status == 400 and body["error_code"] == 400 and says in body["message"]
    assert client.call("GET", "/connectors")[1] == []


def test_create_answers_201_with_its_info_and_location_then_409(server, client):
    body, headers = create(client)
    assert body == {"name": "orders-sink", "config": {**config(), "name": "orders-sink"},
                    "tasks": [{"connector": "orders-sink", "task": 0}], "type": "sink"}
    assert headers["Location"] == f"{server.url}/connectors/orders-sink"
    status, body, _ = client.call("POST", "/connectors", {"name": "orders-sink", "config": config()})
    assert (status, body) == (409, {"error_code": 409, "message": "Connector orders-sink already exists"})


def test_an_invalid_config_is_refused_naming_each_key_and_nothing_is_created(client):
    status, body, _ = client.call("POST", "/connectors", {"name": "bad", "config": config(
        **{"buffer.flush.time": "soon", "bogus.key": "1"})})
    assert status == 400
    assert "buffer.flush.time" in body["message"] and "bogus.key" in body["message"]
    assert client.call("GET", "/connectors")[1] == []


@pytest.mark.parametrize("body, says", [
    ({"name": "a", "config": {"name": "b", "topics": "t"}},
     "Connector name configuration (b) doesn't match connector name in the URL (a)"),
    ({"name": "a", "config": {"topics": {"nested": 1}}}, "config key 'topics'"),
    ({"name": "a", "config": {"topics": "t"}, "initial_state": "SLEEPING"}, "initial_state"),
    ({"name": "a", "config": "topics=t"}, '"config" must be a JSON object'),
])
def test_bad_create_requests(client, body, says):
    status, answer, _ = client.call("POST", "/connectors", body)
    assert status == 400 and says in answer["message"]


def test_json_numbers_and_booleans_are_taken_as_their_text(client):
    create(client, **{"buffer.flush.time": 5, "snowflake.metadata.topic": False})
    got = client.call("GET", "/connectors/orders-sink/config")[1]
    assert got["buffer.flush.time"] == "5" and got["snowflake.metadata.topic"] == "false"


def test_names_are_url_decoded_and_a_trailing_slash_is_fine(client):
    create(client, name="my sink")
    assert client.call("GET", "/connectors/")[1] == ["my sink"]
    assert client.call("GET", "/connectors/my%20sink/status")[1]["name"] == "my sink"


def test_initial_state_and_offsets_reach_the_herder(server, client):
    offsets = [{"partition": {"kafka_topic": "orders", "kafka_partition": 0}, "offset": {"kafka_offset": 7}}]
    status, _, _ = client.call("POST", "/connectors", {"name": "s", "config": config(),
                                                        "initial_state": "stopped", "offsets": offsets})
    assert status == 201
    assert client.call("GET", "/connectors/s/status")[1]["connector"]["state"] == "STOPPED"
    assert client.call("GET", "/connectors/s/offsets")[1] == {"offsets": offsets}


# ---------------------------------------------------------------- the lifecycle

def test_list_with_expand(client):
    create(client)
    status, body, _ = client.call("GET", "/connectors?expand=status&expand=info")
    assert status == 200 and set(body) == {"orders-sink"}
    assert set(body["orders-sink"]) == {"status", "info"}
    assert set(body["orders-sink"]["status"]) == {"name", "connector", "tasks", "type"}
    assert set(body["orders-sink"]["status"]["connector"]) == {"state", "worker_id", "version"}
    assert set(client.call("GET", "/connectors?expand=status")[1]["orders-sink"]) == {"status"}
    assert client.call("GET", "/connectors?expand=other")[1] == ["orders-sink"]


def test_pause_resume_stop_restart_and_tasks(client):
    create(client)
    path = "/connectors/orders-sink"
    assert client.call("PUT", f"{path}/pause")[:2] == (202, None)
    assert client.call("GET", f"{path}/status")[1]["connector"]["state"] == "PAUSED"
    assert client.call("PUT", f"{path}/resume")[:2] == (202, None)
    assert client.call("POST", f"{path}/restart")[:2] == (204, None)
    status, body, _ = client.call("POST", f"{path}/restart?includeTasks=true&onlyFailed=false")
    assert status == 202 and body["connector"]["state"] == "RESTARTING"
    assert body["tasks"][0]["state"] == "RESTARTING"
    assert client.call("POST", f"{path}/tasks/0/restart")[:2] == (204, None)
    assert client.call("POST", f"{path}/tasks/3/restart")[:2] == (
        404, {"error_code": 404, "message": "Task orders-sink-3 not found"})
    status, body, _ = client.call("GET", f"{path}/tasks/0/status")
    assert status == 200 and set(body) == {"id", "state", "worker_id", "version"}
    assert client.call("GET", f"{path}/tasks/1/status")[:2] == (
        404, {"error_code": 404, "message": "No status found for task orders-sink-1"})
    assert client.call("GET", f"{path}/topics")[1] == {"orders-sink": {"topics": ["orders"]}}
    assert client.call("PUT", f"{path}/topics/reset")[:2] == (202, None)
    assert client.call("PUT", f"{path}/stop")[:2] == (204, None)
    assert client.call("DELETE", path)[:2] == (204, None)
    assert client.call("GET", "/connectors")[1] == []


def test_put_config_creates_then_updates_and_patch_merges(client):
    status, body, _ = client.call("PUT", "/connectors/p/config", config())
    assert status == 201 and body["name"] == "p"
    status, body, _ = client.call("PUT", "/connectors/p/config", config(topics="other"))
    assert status == 200 and body["config"]["topics"] == "other"
    status, body, _ = client.call("PUT", "/connectors/p/config", {**config(), "name": "q"})
    assert status == 400 and "doesn't match connector name in the URL (p)" in body["message"]
    status, body, _ = client.call("PATCH", "/connectors/p/config", {"buffer.flush.time": "3",
                                                                   "connector.class": None})
    assert status == 200 and body["config"]["buffer.flush.time"] == "3"
    assert "connector.class" not in body["config"]
    assert client.call("PATCH", "/connectors/nope/config", {"a": "b"})[0] == 404


def test_offsets_change_only_when_stopped(client):
    create(client)
    path = "/connectors/orders-sink/offsets"
    offsets = {"offsets": [{"partition": {"kafka_topic": "orders", "kafka_partition": 0},
                            "offset": {"kafka_offset": 3}}]}
    status, body, _ = client.call("PATCH", path, offsets)
    assert status == 400 and "STOPPED" in body["message"]
    client.call("PUT", "/connectors/orders-sink/stop")
    assert client.call("PATCH", path, {"offsets": []})[:2] == (400, {
        "error_code": 400, "message": "Partitions / offsets need to be provided for an alter offsets request"})
    assert client.call("PATCH", path, {"offsets": "x"})[0] == 400
    assert client.call("PATCH", path, offsets)[:2] == (
        200, {"message": "The offsets for this connector have been altered successfully"})
    assert client.call("GET", path)[1] == offsets
    assert client.call("DELETE", path)[:2] == (
        200, {"message": "The offsets for this connector have been reset successfully"})


def test_metrics_serve_the_process_registry(client):
    counter = Counter("floeline_rest_test_records", "records (a test's)", ["connector"])
    counter.labels(connector="orders-sink").inc(3)
    try:
        request = urllib.request.Request(client.url + "/metrics")
        with urllib.request.urlopen(request, timeout=10) as answer:
            text = answer.read().decode()
            assert answer.headers["Content-Type"].startswith("text/plain")
        assert 'floeline_rest_test_records_total{connector="orders-sink"} 3.0' in text
    finally:
        from prometheus_client import REGISTRY
        REGISTRY.unregister(counter)


# ---------------------------------------------------------------- masking

SECRETS = {"snowflake.private.key": "MIIEvQ-private", "snowflake.private.key.passphrase": "${env:PASSPHRASE}",
           "consumer.override.ssl.truststore.password": "store-pass"}


def _shown(client):
    path = "/connectors/orders-sink"
    return [client.call("GET", f"{path}/config")[1], client.call("GET", path)[1]["config"],
            client.call("GET", "/connectors?expand=info")[1]["orders-sink"]["info"]["config"],
            client.call("GET", f"{path}/tasks")[1][0]["config"]]


def test_no_endpoint_shows_a_secret_and_references_are_shown_as_written(client):
    body, _ = create(client, **SECRETS)
    for shown in [body["config"], *_shown(client)]:
        assert shown["snowflake.private.key"] == MASK
        assert shown["consumer.override.ssl.truststore.password"] == MASK
        assert shown["snowflake.private.key.passphrase"] == "${env:PASSPHRASE}"
        assert shown["topics"] == "orders"
    everything = json.dumps(_shown(client))
    assert "MIIEvQ-private" not in everything and "store-pass" not in everything
    status, body, _ = client.call("PUT", "/connector-plugins/SnowflakeStreamingSink/config/validate",
                                  config(**SECRETS))
    values = {c["value"]["name"]: c["value"]["value"] for c in body["configs"]}
    assert values["snowflake.private.key"] == MASK and "MIIEvQ" not in json.dumps(body)


def test_a_masked_value_sent_back_keeps_the_stored_secret(server, client):
    create(client, **SECRETS)
    shown = client.call("GET", "/connectors/orders-sink/config")[1]
    assert client.call("PUT", "/connectors/orders-sink/config", {**shown, "topics": "orders,more"})[0] == 200
    stored = server.herder.config("orders-sink")
    assert stored["snowflake.private.key"] == "MIIEvQ-private" and stored["topics"] == "orders,more"
    client.call("PATCH", "/connectors/orders-sink/config", {"consumer.override.ssl.truststore.password": MASK})
    assert server.herder.config("orders-sink")["consumer.override.ssl.truststore.password"] == "store-pass"
    client.call("PATCH", "/connectors/orders-sink/config", {"snowflake.private.key": "new-key"})
    assert server.herder.config("orders-sink")["snowflake.private.key"] == "new-key"


# ---------------------------------------------------------------- plugins and validate

def test_connector_plugins_and_their_definitions(client):
    status, plugins, _ = client.call("GET", "/connector-plugins")
    assert status == 200 and {p["class"] for p in plugins} == {
        SNOWFLAKE, "com.snowflake.kafka.connector.SnowflakeSinkConnector"}
    assert all(set(p) == {"class", "type", "version"} and p["type"] == "sink" for p in plugins)
    for alias in (SNOWFLAKE, "SnowflakeStreamingSinkConnector", "SnowflakeStreamingSink"):
        status, definitions, _ = client.call("GET", f"/connector-plugins/{alias}/config")
        assert status == 200
    by_name = {d["name"]: d for d in definitions}
    assert by_name["name"]["required"] is True and by_name["buffer.flush.time"]["type"] == "INT"
    assert by_name["buffer.flush.time"]["default_value"] == "10"
    assert set(by_name["topics"]) == {"name", "type", "required", "default_value", "importance",
                                      "documentation", "group", "width", "display_name",
                                      "dependents", "order"}
    assert client.call("GET", "/connector-plugins/Nope/config")[:2] == (
        404, {"error_code": 404, "message": "Unknown plugin Nope."})


def test_validate_lists_every_problem_per_key_in_connects_shape(client):
    status, body, _ = client.call("PUT", "/connector-plugins/SnowflakeStreamingSink/config/validate", {
        "connector.class": SNOWFLAKE, "topics": "orders", "buffer.flush.time": "soon",
        "errors.tolerance": "some", "bogus.key": "1", "sasl.mechanism": "NOPE"})
    assert status == 200 and set(body) == {"name", "error_count", "groups", "configs"}
    assert body["name"] == "SnowflakeStreamingSink"
    errors = {c["value"]["name"]: c["value"]["errors"] for c in body["configs"] if c["value"]["errors"]}
    assert set(errors) == {"name", "buffer.flush.time", "errors.tolerance", "bogus.key", "sasl.mechanism"}
    assert "missing required setting 'name'" in errors["name"][0]
    assert body["error_count"] == sum(len(e) for e in errors.values())
    unknown = next(c for c in body["configs"] if c["value"]["name"] == "bogus.key")
    assert unknown["definition"] is None and unknown["value"]["value"] == "1"
    tolerance = next(c for c in body["configs"] if c["value"]["name"] == "errors.tolerance")
    assert tolerance["value"]["recommended_values"] == ["none", "all"]
    assert set(tolerance["value"]) == {"name", "value", "recommended_values", "errors", "visible"}
    assert all(c["definition"]["group"] in body["groups"] for c in body["configs"] if c["definition"])


def test_a_valid_config_has_no_errors_and_defaults_as_values(client):
    status, body, _ = client.call("PUT", "/connector-plugins/SnowflakeStreamingSink/config/validate",
                                  {"name": "ok", **config()})
    assert status == 200 and body["error_count"] == 0
    values = {c["value"]["name"]: c["value"]["value"] for c in body["configs"]}
    assert values["topics"] == "orders" and values["buffer.count.records"] == "10000"


def test_validate_transform_options_and_a_mismatched_class(client):
    status, body, _ = client.call("PUT", "/connector-plugins/SnowflakeStreamingSink/config/validate",
                                  {"name": "t", **config(), "transforms": "c",
                                   "transforms.c.type": "org.apache.kafka.connect.transforms.Cast$Value"})
    assert status == 200 and body["error_count"] >= 1
    assert any(c["value"]["name"].startswith("transforms.c") and c["value"]["errors"] for c in body["configs"])
    status, body, _ = client.call("PUT", "/connector-plugins/SnowflakeSink/config/validate", config())
    assert (status, body["message"]) == (400, f"Included connector type {SNOWFLAKE} does not match "
                                               f"request type SnowflakeSink")
    assert client.call("PUT", "/connector-plugins/Nope/config/validate", {"topics": "t"})[0] == 404


# ---------------------------------------------------------------- auth and TLS

@pytest.fixture
def users_file(tmp_path):
    path = tmp_path / "users"
    path.write_text("# the worker's users\n" + user_line("alice", "wonder land") + "\n")
    return path


def test_basic_auth(users_file):
    rest = RestServer({"listeners": "http://127.0.0.1:0", "rest.auth.users.file": str(users_file)},
                      InMemoryContractHerder()).start()
    try:
        status, body, headers = Client(rest.url).call("GET", "/connectors")
        assert status == 401 and body["error_code"] == 401
        assert headers["WWW-Authenticate"].startswith('Basic realm="floeline"')
        assert Client(rest.url, ("alice", "wrong")).call("GET", "/connectors")[0] == 401
        assert Client(rest.url, ("bob", "wonder land")).call("GET", "/connectors")[0] == 401
        assert Client(rest.url, ("alice", "wonder land")).call("GET", "/connectors")[:2] == (200, [])
        assert Client(rest.url, ("alice", "wonder land")).call("GET", "/health")[0] == 200
    finally:
        rest.close()


def test_the_users_file_keeps_no_password_and_bad_lines_are_named(tmp_path, users_file):
    assert "wonder land" not in users_file.read_text()
    users = load_users(users_file)
    assert users.check("alice", "wonder land") and not users.check("alice", "Wonder land")
    bad = tmp_path / "bad"
    bad.write_text("alice:plaintext\n")
    with pytest.raises(ConfigError, match="line 1 .*floeline worker-passwd"):
        load_users(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_users(tmp_path / "absent")
    with pytest.raises(ConfigError, match="':'"):
        user_line("a:b", "x")


def test_the_passwd_command_prints_a_line_the_server_accepts(tmp_path, monkeypatch, capsys):
    import io
    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret\n"))
    assert cli_main(["worker-passwd", "carol"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("carol:scrypt$") and "s3cret" not in line
    (tmp_path / "users").write_text(line + "\n")
    assert load_users(tmp_path / "users").check("carol", "s3cret")


def _self_signed(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return key, cert


def test_tls_listener(tmp_path):
    key, cert = _self_signed(tmp_path)
    rest = RestServer({"listeners": "https://127.0.0.1:0",
                       "listeners.https.ssl.certificate.location": str(cert),
                       "listeners.https.ssl.key.location": str(key)}, InMemoryContractHerder()).start()
    try:
        assert rest.url.startswith("https://127.0.0.1:")
        trusted = ssl.create_default_context(cafile=str(cert))
        assert Client(rest.url, context=trusted).call("GET", "/health")[0] == 200
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            Client(rest.url, context=ssl.create_default_context()).call("GET", "/health")
        with socket.create_connection(("127.0.0.1", rest.port)) as plain:  # no TLS: refused, server lives
            plain.sendall(b"GET / HTTP/1.1\r\n\r\n")
            plain.settimeout(5)
            plain.recv(100)
        assert Client(rest.url, context=trusted).call("GET", "/")[0] == 200
    finally:
        rest.close()


@pytest.mark.parametrize("props, says", [
    ({"listeners": "ftp://x:1"}, "is not a listener"),
    ({"listeners": "http://a:1,http://b:2"}, "one listener"),
    ({"listeners": "https://127.0.0.1:0"}, "listeners.https.ssl.certificate.location"),
    ({"listeners": "http://127.0.0.1:0", "listeners.https.ssl.key.location": "k"}, "https://HOST:PORT"),
])
def test_listener_settings_errors(props, says):
    with pytest.raises(ConfigError, match=says):
        RestSettings.from_properties(props)


def test_default_listener_is_connects_port_on_loopback():
    settings = RestSettings.from_properties({})
    assert (settings.scheme, settings.host, settings.port) == ("http", "127.0.0.1", 8083)


# ---------------------------------------------------------------- many at once

def test_200_concurrent_requests_and_a_stalled_client_do_not_block_the_server(server, client):
    create(client)
    stalled = socket.create_connection(("127.0.0.1", server.port))  # sends half a request, then nothing
    stalled.sendall(b"POST /connectors HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
    paths = ["/connectors/orders-sink/status", "/connectors?expand=status&expand=info",
             "/connectors/orders-sink/config", "/health"]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=200) as pool:
        answers = list(pool.map(lambda i: client.call("GET", paths[i % len(paths)])[0], range(200)))
    assert answers == [200] * 200
    assert time.monotonic() - started < 30
    stalled.close()
    assert client.call("GET", "/connectors/orders-sink/status")[1]["connector"]["state"] == "RUNNING"


def test_requests_run_concurrently_with_a_slow_herder_call(server, client):
    """A herder call that takes long (a restart waiting on Spark) holds its own request
    only: others are answered meanwhile."""
    create(client)
    release = threading.Event()
    slow_status = server.herder.status

    def slow_restart(name, include_tasks=False, only_failed=False):
        release.wait(10)
        return None

    server.herder.restart = slow_restart
    pool = ThreadPoolExecutor(max_workers=1)
    pending = pool.submit(client.call, "POST", "/connectors/orders-sink/restart")
    time.sleep(0.2)
    assert client.call("GET", "/connectors/orders-sink/status")[1] == {
        **slow_status("orders-sink"), "connector": {**slow_status("orders-sink")["connector"], "version": "0.1.0"},
        "tasks": [{**t, "version": "0.1.0"} for t in slow_status("orders-sink")["tasks"]]}
    assert not pending.done()
    release.set()
    assert pending.result(timeout=10)[0] == 204
    pool.shutdown()


def test_a_status_trace_never_shows_a_secret(server, client):
    create(client, **SECRETS)
    plain_status = server.herder.status

    def failed(name):
        status = plain_status(name)
        status["connector"] = {**status["connector"], "state": "FAILED",
                               "trace": "login with key MIIEvQ-private refused"}
        return status

    server.herder.status = failed
    body = client.call("GET", "/connectors/orders-sink/status")[1]
    assert body["connector"]["state"] == "FAILED" and "MIIEvQ-private" not in json.dumps(body)


def test_validate_checks_the_config_as_create_runs_it_with_the_workers_defaults():
    """A connector that leaves its Kafka security to the worker is valid (as POST
    /connectors accepts it); the worker's values are never shown; a problem the worker's
    config causes is reported against the inherited key, saying so."""
    from floeline.worker.settings import worker_settings_from_dict

    herder = InMemoryContractHerder()
    herder.settings = worker_settings_from_dict({
        "bootstrap.servers": "broker:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})
    rest = RestServer({"listeners": "http://127.0.0.1:0"}, herder).start()
    try:
        client = Client(rest.url)
        jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
        status, body, _ = client.call("PUT", "/connector-plugins/SnowflakeStreamingSink/config/validate",
                                      {"name": "ok", **config(), "sasl.jaas.config": jaas})
        assert status == 200 and body["error_count"] == 0, body
        values = {c["value"]["name"]: c["value"]["value"] for c in body["configs"]}
        assert values["sasl.jaas.config"] == MASK
        assert values["bootstrap.servers"] != "broker:9093" and values["security.protocol"] != "SASL_SSL"

        status, body, _ = client.call("PUT", "/connector-plugins/SnowflakeStreamingSink/config/validate",
                                      {"name": "no-jaas", **config()})
        assert status == 200 and body["error_count"] == 1, body
        [problem] = [c["value"] for c in body["configs"] if c["value"]["errors"]]
        assert problem["name"] == "security.protocol" and "inherited from the worker" in problem["errors"][0]
        assert problem["value"] != "SASL_SSL"
    finally:
        rest.close()

    # Without the worker's defaults the same connector is invalid (what validate said before).
    status, body, _ = _validated_by_a_herder_without_settings(jaas)
    assert status == 200 and body["error_count"] >= 1


def _validated_by_a_herder_without_settings(jaas):
    rest = RestServer({"listeners": "http://127.0.0.1:0"}, InMemoryContractHerder()).start()
    try:
        return Client(rest.url).call("PUT", "/connector-plugins/SnowflakeStreamingSink/config/validate",
                                     {"name": "ok", **config(), "sasl.jaas.config": jaas})
    finally:
        rest.close()
