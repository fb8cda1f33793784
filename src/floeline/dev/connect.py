"""A real Apache Kafka Connect worker (standalone mode), the reference the floeline
worker's REST API is checked against: tests send the same requests to it and to
floeline's RestServer and compare status codes, key sets and error bodies.

Its jars (connect-runtime, the stock FileStream connectors, the JSON converter) come
from Maven like the local broker's (floeline/resources/connect-pom.xml and
`mvn dependency:copy-dependencies`), cached once under `cache_dir()`. The worker is a
child of the process that starts it, listens on a free port of 127.0.0.1 and keeps its
offsets file and log in a state directory of the caller's choosing.

The same worker runs Debezium's PostgreSQL source connector for change data capture
(the CDC integration test, the demo rig, the fixture recorder): its jars come from
floeline/resources/debezium-postgres-pom.xml into a plug-in directory of their own
(`fetch_debezium_postgres_plugin`), given to the worker as `plugin_path`."""

from __future__ import annotations

import atexit
import hashlib
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from floeline.cache import cache_dir, install_once, installed_stamp
from floeline.dev.kafka import KAFKA_VERSION, maven_download
from floeline.dev.services import HOST, log_tail, require_tools
from floeline.errors import SetupError

_INSTALL_HINT = ("install a Java 17 JDK and Maven, e.g. "
                 "`apt-get install openjdk-17-jdk-headless maven`")

# WARN and above to stdout, which goes to <state>/connect.log. Properties, not YAML:
# Connect's classpath has no YAML parser for log4j2.
_LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = STDOUT
"""


def fetch_connect_jars() -> Path:
    """The Connect worker's classpath directory, downloaded with Maven on first use and
    installed atomically (cache.install_once); the stamp is a hash of the pom."""
    from importlib import resources

    libs = cache_dir() / f"kafka-connect-{KAFKA_VERSION}" / "libs"
    pom_text = resources.files("floeline.resources").joinpath("connect-pom.xml").read_text("utf-8")
    stamp = hashlib.sha256(pom_text.encode()).hexdigest()[:16]
    if installed_stamp(libs) == stamp:
        return libs
    require_tools(("java", "mvn"), "the reference Kafka Connect worker needs it to download and "
                  "run its jars", _INSTALL_HINT)
    print(f"floeline: downloading the Apache Kafka Connect {KAFKA_VERSION} jars with Maven into "
          f"{libs} (first run only)...", file=sys.stderr, flush=True)

    download = maven_download(pom_text, "connect-runtime-*.jar",
                              f"the Kafka Connect {KAFKA_VERSION} jars")
    return install_once(libs, stamp, download)


DEBEZIUM_VERSION = "3.6.1.Final"


def fetch_debezium_postgres_plugin() -> Path:
    """A Connect `plugin.path` entry holding Debezium's PostgreSQL connector as one
    plug-in (its own class loader), downloaded with Maven on first use like the worker's
    jars; `floeline setup` fetches it so tests never run Maven."""
    from importlib import resources

    plugins = cache_dir() / f"connect-plugins-debezium-{DEBEZIUM_VERSION}"
    home = plugins / "debezium-connector-postgres"
    pom_text = resources.files("floeline.resources").joinpath(
        "debezium-postgres-pom.xml").read_text("utf-8")
    stamp = hashlib.sha256(pom_text.encode()).hexdigest()[:16]
    if installed_stamp(home) == stamp:
        return plugins
    require_tools(("java", "mvn"), "Debezium's PostgreSQL connector is downloaded with it",
                  _INSTALL_HINT)
    print(f"floeline: downloading Debezium's PostgreSQL connector {DEBEZIUM_VERSION} with Maven "
          f"into {home} (first run only)...", file=sys.stderr, flush=True)
    download = maven_download(pom_text, "debezium-connector-postgres-*.jar",
                              f"Debezium's PostgreSQL connector {DEBEZIUM_VERSION}")
    install_once(home, stamp, download)
    return plugins


class ConnectWorker:
    """A standalone Connect worker on `bootstrap`, its REST API on a free port.
    `start()` returns once GET / answers; `url` is http://127.0.0.1:PORT.
    `plugin_path`: directories of plug-ins to load besides the classpath's (e.g.
    `fetch_debezium_postgres_plugin()`); none by default, so the reference worker's
    plug-in list stays Kafka's stock one."""

    def __init__(self, bootstrap: str, state_dir: Path, port: int,
                 plugin_path: tuple[Path, ...] = ()):
        self.bootstrap, self.state, self.port = bootstrap, Path(state_dir), port
        self.plugin_path = tuple(plugin_path)
        self.url = f"http://{HOST}:{port}"
        self._process: subprocess.Popen | None = None

    def start(self, timeout_s: float = 120) -> ConnectWorker:
        require_tools(("java",), "the reference Kafka Connect worker runs on it", _INSTALL_HINT)
        libs = fetch_connect_jars()
        self.state.mkdir(parents=True, exist_ok=True)
        props = self.state / "worker.properties"
        settings = {
            "bootstrap.servers": self.bootstrap,
            "listeners": self.url,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "offset.storage.file.filename": self.state / "connect.offsets",
            "offset.flush.interval.ms": 1000,
            "plugin.discovery": "only_scan",
        }
        if self.plugin_path:
            settings["plugin.path"] = ",".join(str(p) for p in self.plugin_path)
        props.write_text("\n".join(f"{k}={v}" for k, v in settings.items()) + "\n")
        log4j = self.state / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        log = open(self.state / "connect.log", "ab")  # noqa: SIM115 - the child keeps it
        cmd = ["java", "-Xms128m", "-Xmx512m", f"-Dlog4j2.configurationFile={log4j}",
               "-cp", f"{libs}/*", "org.apache.kafka.connect.cli.ConnectStandalone", str(props)]
        self._process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        log.close()
        atexit.register(self.stop)  # never outlive the process that started it
        self._wait_until_serving(timeout_s)
        return self

    def _wait_until_serving(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise SetupError(f"the Kafka Connect worker exited ({self._process.returncode}) "
                                 f"during start; last lines of {self.state / 'connect.log'}:\n"
                                 f"{log_tail(self.state / 'connect.log')}")
            try:
                with urllib.request.urlopen(self.url + "/connectors", timeout=2) as answer:
                    json.load(answer)
                    return
            except (OSError, urllib.error.URLError, ValueError):
                time.sleep(0.3)
        self.stop()
        raise SetupError(f"the Kafka Connect worker at {self.url} did not answer within "
                         f"{timeout_s:.0f}s; last lines of {self.state / 'connect.log'}:\n"
                         f"{log_tail(self.state / 'connect.log')}")

    def stop(self) -> None:
        if self._process is None or self._process.poll() is not None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=10)
