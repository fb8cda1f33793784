"""The local services floeline's dev tooling runs (Kafka broker, schema registry, local
AWS endpoints, a Spark standalone cluster): the bookkeeping they share. Each service
keeps a state directory holding its pid file and log; a process counts as the
service's only while its command line still says so (floeline/processes.py), and
start-up is serialised per state directory. Their installs go to floeline's cache
(floeline/cache.py)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable

from floeline.errors import FloelineError, SetupError
from floeline.processes import last_lines, recorded_pid

HOST = "127.0.0.1"


def stop_process(pid_file: Path, is_ours: Callable[[int], bool], timeout_s: float) -> bool:
    """SIGTERM for a clean shutdown, SIGKILL if it has not exited after `timeout_s`.
    Returns False if the pid file names no live process of this service."""
    pid = recorded_pid(pid_file)
    if pid is None or not is_ours(pid):
        pid_file.unlink(missing_ok=True)
        return False
    _signal(pid, signal.SIGTERM)
    if not _wait_for_exit(pid, is_ours, timeout_s):
        _signal(pid, signal.SIGKILL)
        _wait_for_exit(pid, is_ours, 10)
    pid_file.unlink(missing_ok=True)
    return True


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_for_exit(pid: int, is_ours: Callable[[int], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it if this process started it
        if not is_ours(pid):  # a zombie has an empty cmdline: gone
            return True
        time.sleep(0.1)
    return False


_children: list[subprocess.Popen] = []  # keeps each Popen alive: no "still running" ResourceWarning


def launch(cmd: list[str], state: Path, name: str, address_file: str, address: str,
           wait_until_serving: Callable[[Callable[[], bool]], None],
           env: dict[str, str] | None = None) -> None:
    """Start a dev service in its own session (it outlives the CLI and its terminal),
    its output in `state/<name>.log`; record its address and pid (`state/<name>.pid`);
    return once `wait_until_serving(alive)` does, or kill it, forget it and re-raise.
    `env`, when given, is the service's whole environment."""
    with open(state / f"{name}.log", "w") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=state, start_new_session=True, env=env)
    _children.append(proc)
    (state / address_file).write_text(address + "\n")
    (state / f"{name}.pid").write_text(f"{proc.pid}\n")
    try:
        # poll(), not command_line(): right after exec /proc/<pid>/cmdline can read empty
        wait_until_serving(lambda: proc.poll() is None)
    except BaseException:
        proc.kill()
        proc.wait()
        (state / f"{name}.pid").unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def start_lock(state: Path):
    """Serialise start() across processes (e.g. parallel test workers) per state dir."""
    with open(state / "start.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def port_accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((HOST, port)) == 0


def port_free(port: int) -> bool:
    """Bindable the way the JVM binds (SO_REUSEADDR, so TIME_WAIT does not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port free on the loopback address now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def next_or_free_port(port: int) -> int:
    """A port for a service's second listener: port+1 if free, else any free port."""
    if port + 1 < 65536 and port_free(port + 1):
        return port + 1
    return free_port()


def port_from_env(variable: str, default: int) -> int:
    """The TCP port in $variable, `default` when it is unset or empty."""
    raw = os.environ.get(variable)
    if not raw:
        return default
    try:
        port = int(raw)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise FloelineError(f"{variable}={raw!r} is not a TCP port; set it to a number "
                            f"between 1 and 65535 (default {default})")
    return port


def poll_until_serving(what: str, log: Path, answers: Callable[[], bool],
                       alive: Callable[[], bool], timeout_s: float) -> None:
    """Poll `answers()` until it is true; a clear error with the log's tail if the
    process dies first (`alive()` false) or `timeout_s` passes. `what` names the service
    and its address in those errors."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not alive():
            raise SetupError(f"{what} exited during start; last lines of {log}:\n"
                             f"{log_tail(log)}")
        if answers():
            return
        time.sleep(0.2)
    raise SetupError(f"{what} did not answer within {timeout_s:.0f}s; last lines of "
                     f"{log}:\n{log_tail(log)}")


def log_tail(log: Path, n: int = 30) -> str:
    try:
        return last_lines(log.read_text(errors="replace"), n)
    except FileNotFoundError:
        return f"(no {log.name})"


# ---------------------------------------------------------------- set-up tools

def require_tools(tools, needed_for: str, hint: str) -> None:
    """Fail with the install hint when a set-up tool (java, mvn, node, npm) is missing."""
    for tool in tools:
        if shutil.which(tool) is None:
            raise SetupError(f"`{tool}` is not on PATH; {needed_for}: {hint}")
