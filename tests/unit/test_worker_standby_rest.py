"""A standby worker's lease and REST answers (standby.py), and `floeline status
--worker`, without Spark: a real REST server on a free port, a real lease in a local
warehouse held by another WorkerLease of this process (alive: the same host and pid), a
real HTTP client that does not follow redirects."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from floeline.warehouse.storage import LocalStorage
from floeline.worker.rest import RestServer
from floeline.worker.standby import Standby
from floeline.worker.store import WorkerLease
from worker_contract_herder import InMemoryContractHerder


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_args, **_kwargs):
        return None  # the 307 itself is what the test reads


def call(url: str, method: str = "GET", body=None, headers=None):
    opener = urllib.request.build_opener(_NoRedirect)
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with opener.open(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read() or b"null"), dict(answer.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null"), dict(exc.headers)


@pytest.fixture
def active(tmp_path):
    """The active worker's lease, its REST URL recorded."""
    lease = WorkerLease(LocalStorage(), str(tmp_path), timeout_ms=30000, listener="http://10.0.0.7:8083")
    lease.acquire()
    yield lease
    lease.release()


@pytest.fixture
def standby_server(tmp_path, active):
    lease = WorkerLease(LocalStorage(), str(tmp_path), timeout_ms=30000)
    holder = lease.try_acquire()
    assert holder is not None and holder.listener == "http://10.0.0.7:8083"
    server = RestServer({"listeners": "http://127.0.0.1:0"}, InMemoryContractHerder())
    server.standby = Standby(lease, holder, poll_s=0.05)
    server.start()
    yield server
    server.close()


def test_a_standby_redirects_every_request_to_the_active_worker(standby_server):
    url = standby_server.url
    status, body, headers = call(f"{url}/connectors?expand=status")
    assert status == 307 and headers["Location"] == "http://10.0.0.7:8083/connectors?expand=status"
    assert body["error_code"] == 307 and "standby" in body["message"] and "http://10.0.0.7:8083" in body["message"]
    status, _, headers = call(f"{url}/connectors", "POST", {"name": "x", "config": {"topics": "t"}})
    assert status == 307 and headers["Location"] == "http://10.0.0.7:8083/connectors"
    assert call(f"{url}/connectors/x/pause", "PUT")[2]["Location"] == "http://10.0.0.7:8083/connectors/x/pause"
    assert call(f"{url}/health")[0] == 307
    assert call(f"{url}/")[0] == 200  # alive: the root is served by the standby itself


def test_a_standby_with_no_live_holder_answers_503_until_it_takes_over(standby_server, active):
    active._stop.set()  # the active worker stalls ...
    standby = standby_server.standby
    standby._seen(type(standby.holder)(**{**standby.holder.__dict__, "heartbeat_ms": 0}))  # ... long ago
    status, body, headers = call(f"{standby_server.url}/connectors")
    assert status == 503 and headers["Retry-After"] == "1" and "taking over" in body["message"]


def test_the_standby_takes_the_lease_once_the_active_worker_releases_it(tmp_path, active):
    lease = WorkerLease(LocalStorage(), str(tmp_path), timeout_ms=30000, listener="http://127.0.0.1:9")
    standby = Standby(lease, lease.try_acquire(), poll_s=0.05)
    stopping = threading.Event()
    result = []
    waiter = threading.Thread(target=lambda: result.append(standby.wait(stopping)))
    waiter.start()
    active.release()
    waiter.join(30)
    assert result == [True] and lease.version is not None
    assert WorkerLease(LocalStorage(), str(tmp_path)).holder().listener == "http://127.0.0.1:9"
    lease.release()


def test_a_stopped_standby_never_takes_the_lease(tmp_path, active):
    lease = WorkerLease(LocalStorage(), str(tmp_path))
    standby = Standby(lease, lease.try_acquire(), poll_s=0.05)
    stopping = threading.Event()
    stopping.set()
    assert standby.wait(stopping) is False and lease.version is None


def test_the_advertised_url_names_a_reachable_host(tmp_path):
    server = RestServer({"listeners": "http://0.0.0.0:0"}, InMemoryContractHerder()).start()
    try:
        import socket

        assert server.advertised_url == f"http://{socket.gethostname()}:{server.port}"
    finally:
        server.close()
    server = RestServer({"listeners": "http://127.0.0.1:0", "rest.advertised.host.name": "node-7",
                         "rest.advertised.port": "18083", "rest.advertised.listener": "https"},
                        InMemoryContractHerder()).start()
    try:
        assert server.advertised_url == "https://node-7:18083"
    finally:
        server.close()
    from floeline.errors import ConfigError
    from floeline.worker.rest import RestSettings

    with pytest.raises(ConfigError, match="rest.advertised.port='x'"):
        RestSettings.from_properties({"rest.advertised.port": "x"})


def test_floeline_status_names_the_active_worker_and_its_connectors(tmp_path, active, capsys):
    from floeline.cli import main as cli_main
    from floeline.worker.store import ConnectorStore

    store = ConnectorStore(LocalStorage(), str(tmp_path))
    store.save("orders", {"name": "orders", "topics": "o"}, "RUNNING")
    store.save("held", {"name": "held", "topics": "h"}, "PAUSED")
    properties = tmp_path / "worker.properties"
    properties.write_text(f"floeline.warehouse={tmp_path}\n")
    assert cli_main(["status", "--worker", str(properties)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("worker: http://10.0.0.7:8083 (active; host ") and "lease renewed" in lines[0]
    assert lines[1:] == [f"warehouse: {tmp_path}", "  CONNECTOR  TARGET", "  held       PAUSED",
                         "  orders     RUNNING"]
    assert cli_main(["status", "--worker", str(properties), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rest_url"] == "http://10.0.0.7:8083" and data["active"] is True
    assert data["connectors"] == {"held": "PAUSED", "orders": "RUNNING"}

    active.release()
    assert cli_main(["status", "--worker", str(properties)]) == 0
    assert capsys.readouterr().out.startswith("worker: none (no worker holds the warehouse's lease)")
    assert cli_main(["status"]) == 1
    assert "one of the two" in capsys.readouterr().err


def test_a_standby_says_when_the_active_worker_has_no_rest_url_yet(tmp_path):
    starting = WorkerLease(LocalStorage(), str(tmp_path))  # its listener not serving yet
    starting.acquire()
    try:
        lease = WorkerLease(LocalStorage(), str(tmp_path))
        server = RestServer({"listeners": "http://127.0.0.1:0"}, InMemoryContractHerder())
        server.standby = Standby(lease, lease.try_acquire())
        server.start()
        try:
            status, body, headers = call(f"{server.url}/connectors")
        finally:
            server.close()
        assert status == 503 and headers["Retry-After"] == "1"
        assert "is starting and has not recorded its REST URL yet" in body["message"]
    finally:
        starting.release()
