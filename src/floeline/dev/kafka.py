"""The local single-node Apache Kafka broker (KRaft mode) used by the demo, the tests
and the benchmarks.

It is the real broker: its jars come from Maven (a tiny pom in floeline/resources plus
`mvn dependency:copy-dependencies`), cached once under `cache_dir()`. The broker runs
detached from the process that started it, so `floeline kafka start` can return while
the broker keeps serving; everything about one broker (config, data, log, pid) lives
in its state directory, which is how `start`, `stop` and `running_bootstrap` find it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from importlib import resources
from pathlib import Path
from typing import Callable

from floeline.cache import cache_dir, install_once, installed_stamp
from floeline.dev.services import (
    HOST, launch, log_tail, port_accepts, port_free, require_tools, start_lock, stop_process)
from floeline.errors import FloelineError, SetupError
from floeline.processes import command_line, last_lines, recorded_pid

KAFKA_VERSION = "4.1.2"
DEFAULT_PORT = 19092
DEFAULT_SECURE_PORT = 19094  # `--secure`: its own state dir and ports, beside the plain broker

_INSTALL_HINT = ("install a Java 17 JDK and Maven, e.g. "
                 "`apt-get install openjdk-17-jdk-headless maven`")


# ---------------------------------------------------------------- locations

def _state_dir(state_dir: Path | str | None, secure: bool = False) -> Path:
    """Absolute, because the paths end up in server.properties and the pid file."""
    if secure:
        raw = state_dir or os.environ.get("FLOELINE_KAFKA_SECURE_STATE") or Path(".floeline") / "kafka-secure"
    else:
        raw = state_dir or os.environ.get("FLOELINE_KAFKA_STATE") or Path(".floeline") / "kafka"
    return Path(raw).expanduser().resolve()


def state_path(state_dir: Path | str | None = None, secure: bool = False) -> Path:
    """The broker's state directory as `start` resolves it."""
    return _state_dir(state_dir, secure)


def default_port(secure: bool = False) -> int:
    """The local broker's port: FLOELINE_KAFKA_PORT (or _SECURE_PORT), else 19092 (19094)."""
    raw = os.environ.get("FLOELINE_KAFKA_SECURE_PORT" if secure else "FLOELINE_KAFKA_PORT")
    if not raw:
        return DEFAULT_SECURE_PORT if secure else DEFAULT_PORT
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        variable = "FLOELINE_KAFKA_SECURE_PORT" if secure else "FLOELINE_KAFKA_PORT"
        raise FloelineError(f"{variable}={raw!r} is not a TCP port; set it to a number between "
                            f"1 and 65535 (default {DEFAULT_SECURE_PORT if secure else DEFAULT_PORT})")
    return port


# ---------------------------------------------------------------- jars

def fetch_broker_jars() -> Path:
    """The broker's classpath directory, downloaded with Maven on first use (installed
    atomically, see cache.install_once). Its stamp is a hash of the pom, so editing
    the pom fetches the jars again."""
    libs = cache_dir() / f"kafka-{KAFKA_VERSION}" / "libs"
    pom_text = _resource_text("kafka-pom.xml")
    stamp = hashlib.sha256(pom_text.encode()).hexdigest()[:16]
    if installed_stamp(libs) == stamp:
        return libs
    require_tools(("java", "mvn"), "the local Kafka broker needs it to download and run its jars",
                  _INSTALL_HINT)
    print(f"floeline: downloading the Apache Kafka {KAFKA_VERSION} broker jars with Maven "
          f"into {libs} (first run only)...", file=sys.stderr, flush=True)
    started = time.monotonic()

    download = maven_download(pom_text, "kafka_2.13-*.jar",
                              f"the Kafka {KAFKA_VERSION} broker jars")
    install_once(libs, stamp, download)
    print(f"floeline: Kafka broker jars ready ({time.monotonic() - started:.0f}s)",
          file=sys.stderr, flush=True)
    return libs


def maven_download(pom_text: str, marker_glob: str, what: str):
    """A cache.install_once download step: the runtime dependencies of the pom
    `pom_text` copied by Maven into <tmp>/libs, which must then hold a `marker_glob`
    jar; a failure is a SetupError naming `what` with Maven's last lines."""
    def download(tmp: Path) -> Path:
        pom = tmp / "pom.xml"
        pom.write_text(pom_text)
        staged = tmp / "libs"
        cmd = ["mvn", "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
               "-DincludeScope=runtime", f"-DoutputDirectory={staged}"]
        done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode != 0 or not any(staged.glob(marker_glob)):
            raise SetupError(
                f"Maven could not fetch {what} (`{' '.join(cmd)}` exited {done.returncode}); "
                f"check network access to Maven's repository and your ~/.m2/settings.xml. "
                f"Maven said:\n{last_lines(done.stdout + done.stderr, 30)}")
        return staged

    return download


def _resource_text(name: str) -> str:
    return resources.files("floeline.resources").joinpath(name).read_text(encoding="utf-8")


# ---------------------------------------------------------------- start / stop

def start(state_dir: Path | str | None = None, port: int | None = None,
          timeout_s: float = 60, secure: bool = False) -> str:
    """Start the broker for `state_dir` (or find it already running) and return its
    bootstrap servers, `127.0.0.1:PORT`, once it answers metadata requests.

    Idempotent: a live broker recorded in the state dir is returned as is, even if it
    listens on another port than the one asked for. `secure`: the broker listens with
    SASL_SSL only (see dev/kafka_secure.py; `secure_client_settings` gives a client's keys)."""
    state = _state_dir(state_dir, secure)
    state.mkdir(parents=True, exist_ok=True)
    with start_lock(state):
        pid = recorded_pid(state / "broker.pid")
        client = _readiness_client(state, secure)
        if pid is not None and _is_our_broker(pid, state):
            bootstrap = (state / "bootstrap").read_text().strip()
            _wait_until_serving(bootstrap, lambda: _is_our_broker(pid, state), state, timeout_s,
                                client(bootstrap))
            return bootstrap
        return _launch(state, port if port is not None else default_port(secure), timeout_s,
                       secure)


def secure_client_settings(state_dir: Path | str | None = None, mechanism: str = "SCRAM-SHA-512"
                           ) -> dict[str, str]:
    """The Kafka Connect keys (bootstrap.servers, security.protocol, sasl.*, ssl.truststore.*)
    that reach the secured broker of `state_dir` as its `floeline` user."""
    from floeline.dev import kafka_secure

    state = _state_dir(state_dir, secure=True)
    bootstrap = (state / "bootstrap").read_text().strip()
    return kafka_secure.client_settings(bootstrap, kafka_secure.ensure_secrets(state), mechanism)


def stop(state_dir: Path | str | None = None, timeout_s: float = 30, secure: bool = False) -> bool:
    """Stop the broker recorded in the state dir: SIGTERM for a clean shutdown, SIGKILL
    if it has not exited after `timeout_s`. Returns False if none was running."""
    state = _state_dir(state_dir, secure)
    return stop_process(state / "broker.pid", lambda pid: _is_our_broker(pid, state), timeout_s)


def running_bootstrap(state_dir: Path | str | None = None, secure: bool = False) -> str | None:
    """The bootstrap of the state dir's broker if it is alive and its port accepts
    connections, else None. Cheap: no Kafka request is made."""
    state = _state_dir(state_dir, secure)
    pid = recorded_pid(state / "broker.pid")
    if pid is None or not _is_our_broker(pid, state):
        return None
    try:
        bootstrap = (state / "bootstrap").read_text().strip()
    except FileNotFoundError:
        return None
    return bootstrap if port_accepts(int(bootstrap.rsplit(":", 1)[1])) else None


def _readiness_client(state: Path, secure: bool) -> Callable[[str], dict[str, str]]:
    """bootstrap -> the librdkafka settings `_wait_until_serving` connects with."""
    if not secure:
        return lambda bootstrap: {"bootstrap.servers": bootstrap}

    def secured(bootstrap: str) -> dict[str, str]:
        from floeline.config.kafka_security import read_security
        from floeline.sources.kafka_clients import client_config

        settings = secure_client_settings(state)
        settings["bootstrap.servers"] = bootstrap
        return client_config(bootstrap, read_security(settings))
    return secured


def _launch(state: Path, port: int, timeout_s: float, secure: bool = False) -> str:
    if port_accepts(port) or not port_free(port):
        raise SetupError(
            f"port {port} on {HOST} is already in use by another program (not the floeline "
            f"broker of {state}); stop that program or pick another port with "
            f"{'FLOELINE_KAFKA_SECURE_PORT' if secure else 'FLOELINE_KAFKA_PORT'}=<port> "
            f"(or `port=` / --port)")
    if shutil.which("java") is None:
        raise SetupError(f"`java` is not on PATH; the local Kafka broker needs it: "
                         f"{_INSTALL_HINT}")
    libs = fetch_broker_jars()
    controller_port = _pick_controller_port(port)
    props = state / "server.properties"
    secured = secure_settings = None
    format_extra: list[str] = []
    if secure:
        from floeline.dev import kafka_secure

        secured = kafka_secure.ensure_secrets(state)
        secure_settings = kafka_secure.listener_settings(secured, port, controller_port)
        format_extra = kafka_secure.scram_format_arguments(secured)
    text = _server_properties(state, port, controller_port, secure_settings)
    if secured is not None:
        kafka_secure.write_private(props, text)  # it holds the broker's passwords
    else:
        props.write_text(text)
    log4j = state / "log4j2.yaml"
    log4j.write_text(_resource_text("kafka-log4j2.yaml"))
    java = ["java", f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*"]

    if not (state / "data" / "meta.properties").exists():
        _format_storage(java, props, format_extra)

    bootstrap = f"{HOST}:{port}"
    client = _readiness_client(state, secure)
    if secured is not None:
        (state / "bootstrap").write_text(bootstrap)  # read by the readiness client
        from floeline.dev import kafka_secure

        kafka_secure.write_client_configs(state, bootstrap, secured)
    launch([*java, "-Xms256m", "-Xmx768m", "kafka.Kafka", str(props)], state, "broker",
           "bootstrap", bootstrap,
           lambda alive: _wait_until_serving(bootstrap, alive, state, timeout_s, client(bootstrap)))
    return bootstrap


def _format_storage(java: list[str], props: Path, extra: list[str] = ()) -> None:
    """One-time KRaft storage format; the broker refuses to start without it. `extra`
    (the secured broker's --add-scram, which holds a password) is left out of errors."""
    cmd = java + ["kafka.tools.StorageTool", "format", "--standalone",
                  "-t", _new_cluster_id(), "-c", str(props)]
    done = subprocess.run(cmd + list(extra), capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise SetupError(
            f"formatting the Kafka storage failed (exit {done.returncode}) with "
            f"`{' '.join(cmd)}`:\n{last_lines(done.stdout + done.stderr, 30)}")


def _new_cluster_id() -> str:
    """Kafka's own format: a random UUID, base64url without padding (22 chars). Like
    Kafka we avoid a leading '-', which the command line would take for an option."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _server_properties(state: Path, port: int, controller_port: int,
                       secure_settings: dict | None = None) -> str:
    """One node that is both broker and controller, with single-replica internal topics
    and limits large enough for the tests' 10 MB records. `secure_settings` replace the
    PLAINTEXT listener (kafka_secure.listener_settings)."""
    max_bytes = 20 * 1024 * 1024
    settings = {
        "process.roles": "broker,controller",
        "node.id": 1,
        "listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{port},CONTROLLER://{HOST}:{controller_port}",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.bootstrap.servers": f"{HOST}:{controller_port}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": state / "data",
        "num.partitions": 1,
        "offsets.topic.replication.factor": 1,
        "offsets.topic.num.partitions": 1,  # one node: fewer partitions, faster first group join
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "transaction.state.log.num.partitions": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "true",
        "log.retention.ms": -1,  # keep everything: tests and benchmarks replay from offset 0
        "message.max.bytes": max_bytes,
        "replica.fetch.max.bytes": max_bytes,
    }
    settings.update(secure_settings or {})
    lines = ["# Written by floeline.dev.kafka on every start; edits are overwritten."]
    lines += [f"{key}={value}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def _pick_controller_port(port: int) -> int:
    """port+1 if free, else any free port; the chosen one is recorded in server.properties."""
    if port + 1 < 65536 and port_free(port + 1):
        return port + 1
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------- readiness

def _wait_until_serving(bootstrap: str, alive: Callable[[], bool], state: Path,
                        timeout_s: float, client: dict[str, str] | None = None) -> None:
    """Wait until the broker answers a metadata request (an open port is not enough:
    KRaft opens it before the broker can serve)."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka import KafkaException

    port = int(bootstrap.rsplit(":", 1)[1])
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            raise SetupError(f"the Kafka broker at {bootstrap} exited during start; "
                             f"last lines of {state / 'broker.log'}:\n{_log_tail(state)}")
        if port_accepts(port):
            # log_level 0: librdkafka would otherwise print connection errors while we poll
            admin = AdminClient({**(client or {"bootstrap.servers": bootstrap}), "log_level": 0})
            try:
                if admin.list_topics(timeout=min(5.0, max(0.5, deadline - time.monotonic()))).brokers:
                    return
            except KafkaException:
                pass
        time.sleep(0.2)
    raise SetupError(
        f"the Kafka broker at {bootstrap} did not answer within {timeout_s:.0f}s; "
        f"{_data_hint(state)}last lines of {state / 'broker.log'}:\n{_log_tail(state)}")


def _data_hint(state: Path, large_bytes: int = 1 << 30) -> str:
    """Why a start can be slow: the dev broker keeps every record (tests replay from
    offset 0), and after an unclean stop it checks every log segment before serving."""
    data = state / "data"
    if not data.is_dir():
        return ""
    size = 0
    for folder, _dirs, files in os.walk(data):  # os.walk skips what vanishes meanwhile
        for name in files:
            with contextlib.suppress(OSError):  # the broker may be moving segments
                size += os.path.getsize(os.path.join(folder, name))
    if size < large_bytes:
        return ""
    partitions = sum(1 for name in next(os.walk(data), (None, [], []))[1] if "-" in name)
    return (f"its data directory {data} holds {size / (1 << 30):.1f} GiB in {partitions} "
            f"topic partitions, which it checks at start after an unclean stop; remove "
            f"that directory to start it empty (`make clean` removes all local state); ")


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    """Create a topic (with topic-level `config`, such as message.timestamp.type) and wait
    until every partition has a leader, so a producer can write to it right away. An
    existing topic with the same partition count is fine."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    future = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})],
                                operation_timeout=30)[name]
    try:
        future.result(timeout=60)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise SetupError(f"creating topic {name!r} on {bootstrap} failed: {exc}") from exc
    deadline = time.monotonic() + 30
    while True:
        topic = admin.list_topics(topic=name, timeout=10).topics.get(name)
        if topic is not None and topic.error is None and topic.partitions \
                and all(p.leader >= 0 for p in topic.partitions.values()):
            break
        if time.monotonic() > deadline:
            raise SetupError(f"topic {name!r} on {bootstrap} has no leader after 30s")
        time.sleep(0.1)
    if len(topic.partitions) != partitions:
        raise FloelineError(f"topic {name!r} on {bootstrap} already exists with "
                            f"{len(topic.partitions)} partitions, not {partitions}; "
                            f"delete it or use another topic name")


def topic_exists(bootstrap: str, name: str, timeout_s: float = 10) -> bool:
    """True when the broker lists topic `name`; a broker that does not answer is a
    FloelineError saying how to start the local one."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    try:
        return name in admin.list_topics(timeout=timeout_s).topics
    except KafkaException as exc:
        raise FloelineError(f"no Kafka broker answers at bootstrap.servers={bootstrap} ({exc}); "
                            f"start the local one with `floeline kafka start`, or name "
                            f"yours with --bootstrap-servers HOST:PORT") from None


def delete_topic(bootstrap: str, name: str, timeout_s: float = 30) -> None:
    """Delete a topic and wait until the broker no longer lists it, so that one created
    under the same name right after is a new topic (with a new topic id)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([name], operation_timeout=30)[name].result(timeout=60)
    deadline = time.monotonic() + timeout_s
    while name in admin.list_topics(timeout=10).topics:
        if time.monotonic() > deadline:
            raise SetupError(f"topic {name!r} on {bootstrap} is still listed {timeout_s:.0f}s after its deletion")
        time.sleep(0.1)


def add_partitions(bootstrap: str, name: str, total: int) -> None:
    """Grow a topic to `total` partitions and wait until each has a leader."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(name, total)], operation_timeout=30)[name].result(timeout=60)
    create_topic(bootstrap, name, total)  # waits for the leaders; the topic exists


# ---------------------------------------------------------------- processes

def _is_our_broker(pid: int, state: Path) -> bool:
    """True if `pid` is alive and is the Kafka broker of this state dir. Checking the
    command line guards against the pid having been reused by another process."""
    cmdline = command_line(pid) or ""
    return "kafka.Kafka" in cmdline and str(state / "server.properties") in cmdline


def _log_tail(state: Path) -> str:
    return log_tail(state / "broker.log")
