"""A local Confluent-compatible schema registry for the tests and the demo.

It is Apicurio Registry (an independent, Apache-licensed registry) in its in-memory
mode, which serves Confluent's REST API under /apis/ccompat/v7: the URL `start`
returns is what a connector config puts in `value.converter.schema.registry.url`, and
Confluent serializers and clients talk to it unchanged (POST
/subjects/{subject}/versions, GET /schemas/ids/{id}, ...). Its runnable distribution
(`io.apicurio:apicurio-registry-app:<version>:tar.gz:all`) comes from Maven Central,
fetched once with `mvn dependency:copy` and unpacked under `cache_dir()`. Schemas live
in memory, so a restart forgets them, unless it is started `persistent`: then they are
kept in an H2 file in its state directory, as a production registry keeps them in its
own storage, and a restart (the fault tests stop it mid-stream) serves the same ids.

As with the broker (dev/kafka.py), everything about one registry (pid, port, log) lives in its state
directory, which is how `start`, `stop` and `running_url` find it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from floeline.cache import cache_dir, install_once, installed_stamp
from floeline.dev.services import (
    HOST, launch, log_tail, port_free, require_tools, start_lock, stop_process)
from floeline.errors import SetupError
from floeline.processes import command_line, last_lines, recorded_pid

APICURIO_VERSION = "2.6.13.Final"
ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
RUNNER_JAR = f"apicurio-registry-app-{APICURIO_VERSION}-runner.jar"
CCOMPAT_PATH = "/apis/ccompat/v7"
DEFAULT_PORT = 18081

_INSTALL_HINT = ("install a Java 17 JDK and Maven, e.g. "
                 "`apt-get install openjdk-17-jdk-headless maven`")


def _state_dir(state_dir: Path | str | None) -> Path:
    raw = state_dir or os.environ.get("FLOELINE_REGISTRY_STATE") or Path(".floeline") / "registry"
    return Path(raw).expanduser().resolve()


# ---------------------------------------------------------------- distribution

def fetch_registry() -> Path:
    """The unpacked Apicurio Registry distribution (holding RUNNER_JAR and lib/),
    downloaded with Maven on first use (installed atomically, cache.install_once)."""
    home = cache_dir() / f"apicurio-registry-{APICURIO_VERSION}"
    if installed_stamp(home) == APICURIO_VERSION:
        return home
    require_tools(("java", "mvn"), "the local schema registry needs it to download and run",
                  _INSTALL_HINT)
    print(f"floeline: downloading Apicurio Registry {APICURIO_VERSION} (~140 MB) with Maven "
          f"into {home} (first run only)...", file=sys.stderr, flush=True)

    def download(tmp: Path) -> Path:
        cmd = ["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={ARTIFACT}",
               f"-DoutputDirectory={tmp}"]
        done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              cwd=tmp)
        archives = list(tmp.glob("*.tar.gz"))
        if done.returncode != 0 or not archives:
            raise SetupError(
                f"Maven could not fetch {ARTIFACT} (`{' '.join(cmd)}` exited "
                f"{done.returncode}); check access to Maven's repository. Maven said:\n"
                f"{last_lines(done.stdout + done.stderr, 30)}")
        staged = tmp / "dist"
        with tarfile.open(archives[0]) as archive:
            archive.extractall(staged, filter="data")
        if not (staged / RUNNER_JAR).exists():
            raise SetupError(f"{ARTIFACT} has no {RUNNER_JAR}")
        return staged

    return install_once(home, APICURIO_VERSION, download)


# ---------------------------------------------------------------- start / stop

def start(state_dir: Path | str | None = None, port: int | None = None,
          timeout_s: float = 120, persistent: bool = False) -> str:
    """Start the registry for `state_dir` (or find it running) and return its
    Confluent-compatible base URL, http://127.0.0.1:PORT/apis/ccompat/v7, once it
    answers GET /subjects. Idempotent, like dev.kafka.start. `persistent`: keep the
    schemas in the state directory across restarts (see the module doc)."""
    state = _state_dir(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    with start_lock(state):
        pid = recorded_pid(state / "registry.pid")
        if pid is not None and _is_our_registry(pid, state):
            url = (state / "url").read_text().strip()
            _wait_until_serving(url, lambda: _is_our_registry(pid, state), state, timeout_s)
            return url
        return _launch(state, port if port is not None else DEFAULT_PORT, timeout_s, persistent)


def stop(state_dir: Path | str | None = None, timeout_s: float = 30) -> bool:
    """Stop the state dir's registry (SIGTERM, then SIGKILL). False if none ran."""
    state = _state_dir(state_dir)
    return stop_process(state / "registry.pid", lambda pid: _is_our_registry(pid, state),
                        timeout_s)


def running_url(state_dir: Path | str | None = None) -> str | None:
    """The base URL of the state dir's registry if it is alive, else None."""
    state = _state_dir(state_dir)
    pid = recorded_pid(state / "registry.pid")
    if pid is None or not _is_our_registry(pid, state):
        return None
    try:
        return (state / "url").read_text().strip()
    except FileNotFoundError:
        return None


def _launch(state: Path, port: int, timeout_s: float, persistent: bool = False) -> str:
    if not port_free(port):
        raise SetupError(f"port {port} on {HOST} is already in use; stop that program "
                         f"or start the registry on another port")
    if shutil.which("java") is None:
        raise SetupError(f"`java` is not on PATH; the schema registry needs it: "
                         f"{_INSTALL_HINT}")
    home = fetch_registry()
    url = f"http://{HOST}:{port}{CCOMPAT_PATH}"
    cmd = ["java", "-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           f"-Dfloeline.registry.state={state}",  # identifies the process as ours
           f"-Dquarkus.http.port={port}", f"-Dquarkus.http.host={HOST}",
           "-Dquarkus.log.console.color=false",
           *([f"-Dquarkus.datasource.jdbc.url=jdbc:h2:file:{state / 'schemas' / 'registry'}"]
             if persistent else []),
           "-jar", str(home / RUNNER_JAR)]
    launch(cmd, state, "registry", "url", url,
           lambda alive: _wait_until_serving(url, alive, state, timeout_s))
    return url


def _wait_until_serving(url: str, alive, state: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            raise SetupError(f"the schema registry at {url} exited during start; last "
                             f"lines of {state / 'registry.log'}:\n{_log_tail(state)}")
        try:
            with urllib.request.urlopen(url + "/subjects", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    raise SetupError(f"the schema registry at {url} did not answer within {timeout_s:.0f}s; "
                     f"last lines of {state / 'registry.log'}:\n{_log_tail(state)}")


# ---------------------------------------------------------------- processes

def _is_our_registry(pid: int, state: Path) -> bool:
    cmdline = command_line(pid) or ""
    return RUNNER_JAR in cmdline and f"-Dfloeline.registry.state={state} " in cmdline + " "


def _log_tail(state: Path) -> str:
    return log_tail(state / "registry.log")
