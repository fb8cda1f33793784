"""Local AWS endpoints for the demo and the tests: Kinesis, DynamoDB, S3, SQS and
Firehose on 127.0.0.1.

Kinesis is kinesis-local (the npm build of kinesis-mock, run by node), installed at
set-up into `cache_dir()` by `install_kinesis_local`; starting it never runs npm.
kinesis-local always binds every interface, so node preloads resources/loopback-only.js,
which makes its listeners bind 127.0.0.1. DynamoDB (and any other AWS service floeline
needs: S3, SQS, Firehose) is moto's server, a Python package in the virtualenv: one
process serves every service on one port (Firehose delivers to its S3, S3 notifies its
SQS). Both keep their data in memory only: a
restart forgets the streams and tables.

As with the broker (dev/kafka.py), the services run detached and everything about them (pids, logs,
endpoints) lives in one state directory, which is how `start`, `stop` and
`running_endpoints` find them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable

from floeline.cache import cache_dir, install_once, installed_stamp
from floeline.dev.services import (
    HOST, launch, next_or_free_port, poll_until_serving, port_accepts, port_free, port_from_env,
    require_tools, start_lock, stop_process)
from floeline.errors import SetupError, missing_extra
from floeline.processes import command_line, last_lines, recorded_pid

KINESIS_LOCAL_VERSION = "0.6.2"
REGION = "us-east-1"
NODE_INSTALL_HINT = "install Node.js and npm, e.g. `apt-get install nodejs npm`"

_PRELOAD = "loopback-only.js"
# Both services accept any credentials; boto3 just needs some to sign with.
_DUMMY_CREDENTIALS = {"aws_access_key_id": "floeline", "aws_secret_access_key": "floeline"}


@dataclass(frozen=True)
class Service:
    """One local service process and how the CLI and the user name it."""

    name: str  # its files in the state dir: <name>.pid, <name>.log, <name>.endpoint
    labels: tuple[str, ...]  # the AWS services it serves: the CLI prints `<label>.endpoint=URL`
    port_option: str  # the CLI option that chooses its port ...
    port_env: str  # ... and the environment variable
    default_port: int
    boto3_service: str  # a boto3 client of this service ...
    probe: str  # ... answering this call (no arguments) proves the service is serving


KINESIS = Service("kinesis", ("kinesis",), "--kinesis-port", "FLOELINE_KINESIS_PORT", 4568,
                  "kinesis", "list_streams")
MOTO = Service("moto", ("dynamodb", "s3", "sqs", "firehose"), "--moto-port", "FLOELINE_MOTO_PORT", 5000,
               "dynamodb", "list_tables")
SERVICES = (KINESIS, MOTO)
LABELS = tuple(label for service in SERVICES for label in service.labels)
# moto first: its port is then taken, so kinesis-local's HTTPS listener (on port+1 if
# that is free, see `_kinesis_command`) cannot land on it.
_LAUNCH_ORDER = (MOTO, KINESIS)


def _state_dir(state_dir: Path | str | None) -> Path:
    """Absolute, because it ends up in kinesis-local's command line (see `_is_ours`)."""
    raw = state_dir or os.environ.get("FLOELINE_AWS_STATE") or Path(".floeline") / "aws"
    return Path(raw).expanduser().resolve()


# ---------------------------------------------------------------- set-up

def kinesis_local_dir() -> Path:
    return cache_dir() / f"kinesis-local-{KINESIS_LOCAL_VERSION}"


def _kinesis_local_package() -> Path:
    return kinesis_local_dir() / "node_modules" / "kinesis-local"


def kinesis_local_skipped(which=shutil.which) -> str | None:
    """The line set-up prints instead of installing kinesis-local when node or npm is
    missing (a Kafka-only user needs neither), None when both are there or it is
    installed already. `which` finds a tool on PATH (shutil.which)."""
    if installed_stamp(kinesis_local_dir()) == KINESIS_LOCAL_VERSION:
        return None
    missing = [tool for tool in ("node", "npm") if which(tool) is None]
    if not missing:
        return None
    return (f"kinesis-local: skipped, {' and '.join(missing)} not on PATH (Kafka needs neither; the "
            f"local Kinesis of `floeline aws start` and the Kinesis demo do): to add it, install "
            f"Node.js and npm (`apt-get install nodejs npm`), then run `floeline setup` again")


def install_kinesis_local() -> Path:
    """Install kinesis-local with npm into `kinesis_local_dir()` (set-up only; skipped
    when it is there; installed atomically, see cache.install_once)."""
    home = kinesis_local_dir()
    if installed_stamp(home) == KINESIS_LOCAL_VERSION:
        return home
    require_tools(("node", "npm"), "floeline's set-up installs the local Kinesis (kinesis-local) "
                  "with it", NODE_INSTALL_HINT)
    print(f"floeline: installing kinesis-local {KINESIS_LOCAL_VERSION} with npm into {home}...",
          file=sys.stderr, flush=True)

    def npm_install(tmp: Path) -> Path:
        staged = tmp / "kinesis-local"
        staged.mkdir()
        # its own package.json keeps npm from installing into a package.json further up
        (staged / "package.json").write_text(json.dumps({"name": "floeline-kinesis-local",
                                                         "private": True}) + "\n")
        cmd = ["npm", "install", "--no-audit", "--no-fund",
               f"kinesis-local@{KINESIS_LOCAL_VERSION}"]
        done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              cwd=staged)
        if done.returncode != 0 or not (staged / "node_modules/kinesis-local/main.js").exists():
            raise SetupError(
                f"npm could not install kinesis-local {KINESIS_LOCAL_VERSION} (`{' '.join(cmd)}` "
                f"exited {done.returncode}); check access to the npm registry and your ~/.npmrc. "
                f"npm said:\n{last_lines(done.stdout + done.stderr, 30)}")
        return staged

    return install_once(home, KINESIS_LOCAL_VERSION, npm_install)


# ---------------------------------------------------------------- start / stop

def start(state_dir: Path | str | None = None, kinesis_port: int | None = None,
          moto_port: int | None = None, timeout_s: float = 60) -> dict[str, str]:
    """Start the services of `state_dir` (or find them running) and return their
    endpoints by label, {"kinesis": "http://127.0.0.1:4568", "dynamodb": ..., "s3": ...}, once each
    answers a request. Idempotent: a running service is kept as is, on whatever port it
    has. All or nothing: if one cannot start, the ones this call started are stopped."""
    state = _state_dir(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    asked = {KINESIS: kinesis_port, MOTO: moto_port}
    with start_lock(state):
        running = {s: _running_pid(s, state) for s in SERVICES}
        ports = {s: asked[s] if asked[s] is not None else port_from_env(s.port_env, s.default_port)
                 for s in SERVICES if running[s] is None}
        for service, port in ports.items():  # check everything before starting anything
            _check_can_launch(service, state, port)
        endpoints, started = {}, []
        try:
            for service in _LAUNCH_ORDER:
                pid = running[service]
                if pid is None:
                    endpoints[service] = _launch(service, state, ports[service], timeout_s)
                    started.append(service)
                else:
                    endpoints[service] = _recorded_endpoint(service, state)
                    _wait_until_serving(service, endpoints[service], state,
                                        lambda: _is_ours(service, pid, state), timeout_s)
        except BaseException:
            for service in started:
                _stop(service, state, timeout_s=10)
            raise
    return {label: endpoints[s] for s in SERVICES for label in s.labels}


def stop(state_dir: Path | str | None = None, timeout_s: float = 30) -> bool:
    """Stop the state dir's services (SIGTERM, then SIGKILL). False if none ran."""
    state = _state_dir(state_dir)
    stopped = [_stop(service, state, timeout_s) for service in SERVICES]
    return any(stopped)


def running_endpoints(state_dir: Path | str | None = None) -> dict[str, str]:
    """The endpoints, by label, of the state dir's services that are alive and accept
    connections; {} when none is. Cheap: no AWS request is made."""
    state = _state_dir(state_dir)
    endpoints = {}
    for service in SERVICES:
        endpoint = _recorded_endpoint(service, state) if _running_pid(service, state) else None
        if endpoint and port_accepts(_port_of(endpoint)):
            endpoints.update({label: endpoint for label in service.labels})
    return endpoints


def endpoint_lines(endpoints: dict[str, str]) -> list[str]:
    """What the CLI prints: `kinesis.endpoint=http://127.0.0.1:4568`, one per service."""
    return [f"{label}.endpoint={url}" for label, url in endpoints.items()]


def _check_can_launch(service: Service, state: Path, port: int) -> None:
    if port_accepts(port) or not port_free(port):
        raise SetupError(
            f"port {port} on {HOST} is already in use by another program (not the local "
            f"{'/'.join(service.labels)} of {state}); stop that program or pick another port with "
            f"{service.port_option} <port> or {service.port_env}=<port>")
    if service is KINESIS:
        if installed_stamp(kinesis_local_dir()) != KINESIS_LOCAL_VERSION:
            raise SetupError(
                f"kinesis-local {KINESIS_LOCAL_VERSION} (the local Kinesis) is not installed in "
                f"{kinesis_local_dir()}; run `floeline setup` (or `make setup`)")
        if shutil.which("node") is None:
            raise SetupError(f"`node` is not on PATH; kinesis-local (the local Kinesis) "
                             f"runs on it: {NODE_INSTALL_HINT}")
    elif moto_missing():
        raise SetupError(moto_missing())


def _launch(service: Service, state: Path, port: int, timeout_s: float) -> str:
    endpoint = f"http://{HOST}:{port}"
    cmd, env = _kinesis_command(state, port) if service is KINESIS else _moto_command(port)
    launch(cmd, state, service.name, f"{service.name}.endpoint", endpoint,
           lambda alive: _wait_until_serving(service, endpoint, state, alive, timeout_s), env=env)
    return endpoint


def moto_missing() -> str | None:
    """What to install when moto's server (moto[server]: moto with Flask) is missing."""
    return missing_extra("moto", "aws-local", "the local DynamoDB, S3, SQS and Firehose (moto's "
                         "server)") or missing_extra("flask", "aws-local", "moto's server")


def _kinesis_command(state: Path, port: int) -> tuple[list[str], dict[str, str]]:
    """node with the loopback preload (copied into the state dir, which puts the state
    dir in the command line: see `_is_ours`) running kinesis-local's main.js."""
    package = _kinesis_local_package()
    preload = state / _PRELOAD
    preload.write_text(resources.files("floeline.resources").joinpath(_PRELOAD)
                       .read_text(encoding="utf-8"))
    env = {**os.environ,
           "KINESIS_MOCK_CERT_PATH": str(package / "server.json"),
           "KINESIS_MOCK_PLAIN_PORT": str(port),
           "KINESIS_MOCK_TLS_PORT": str(next_or_free_port(port)),  # HTTPS: unused, but it opens one
           "LOG_LEVEL": "WARN",
           "AWS_REGION": REGION}
    return ["node", "--require", str(preload), str(package / "main.js")], env


def _moto_command(port: int) -> tuple[list[str], None]:
    return [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)], None


def _wait_until_serving(service: Service, endpoint: str, state: Path, alive: Callable[[], bool],
                        timeout_s: float) -> None:
    """Wait until the service answers its probe call (an open port is not enough)."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    client = boto3.client(service.boto3_service, endpoint_url=endpoint, region_name=REGION,
                          config=Config(connect_timeout=1, read_timeout=5,
                                        retries={"max_attempts": 1}),
                          **_DUMMY_CREDENTIALS)

    def answers() -> bool:
        try:
            getattr(client, service.probe)()
            return True
        except (BotoCoreError, ClientError):
            return False

    poll_until_serving(f"the local {'/'.join(service.labels)} at {endpoint}", state / f"{service.name}.log",
                       answers, alive, timeout_s)


# ---------------------------------------------------------------- processes

# kinesis-local's graceful stop waits for clients' keep-alive connections to close
# (measured: 30 s with one idle boto3 client); its data is in memory only, so it gets
# a short grace period before SIGKILL.
_KINESIS_GRACE_S = 2.0


def _stop(service: Service, state: Path, timeout_s: float) -> bool:
    grace = min(timeout_s, _KINESIS_GRACE_S) if service is KINESIS else timeout_s
    return stop_process(state / f"{service.name}.pid", lambda pid: _is_ours(service, pid, state),
                        grace)


def _running_pid(service: Service, state: Path) -> int | None:
    pid = recorded_pid(state / f"{service.name}.pid")
    return pid if pid is not None and _is_ours(service, pid, state) else None


def _is_ours(service: Service, pid: int, state: Path) -> bool:
    """True if `pid` is alive and is this state dir's service. kinesis-local's command
    line names the state dir (its preload lives there); moto's names its port, which
    only one process can listen on."""
    cmdline = (command_line(pid) or "") + " "
    if service is KINESIS:
        return f"--require {state / _PRELOAD} " in cmdline and "kinesis-local" in cmdline
    endpoint = _recorded_endpoint(service, state)
    return endpoint is not None and f"-m moto.server -H {HOST} -p {_port_of(endpoint)} " in cmdline


def _recorded_endpoint(service: Service, state: Path) -> str | None:
    try:
        return (state / f"{service.name}.endpoint").read_text().strip()
    except FileNotFoundError:
        return None


def _port_of(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])
