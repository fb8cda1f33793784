"""A local Spark standalone cluster (one master, N workers) from PySpark's own jars, for
tests and for trying `floeline submit` on one machine. The wheel has no start-master.sh:
each daemon is started with its sbin/spark-daemon.sh (`start
org.apache.spark.deploy.master.Master` / `...worker.Worker`), all on 127.0.0.1, with
its pid files, logs, work directories and (empty) conf directory under the state
directory, so neither another cluster nor a stray spark-defaults.conf is touched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from floeline.dev.services import HOST, log_tail, stop_process
from floeline.errors import ServiceUnavailable
from floeline.processes import command_line, recorded_pid

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
IDENT = "floeline"  # spark-daemon.sh's SPARK_IDENT_STRING: part of the pid files' names


@dataclass
class LocalCluster:
    master_url: str  # spark://127.0.0.1:PORT
    master_ui: str  # http://127.0.0.1:PORT (its /json lists workers and applications)
    worker_uis: list[str]
    state: Path | None = None  # where its pid files, logs and work directories are
    cores: int = 1  # what each worker offers
    memory: str = "1g"

    def master_state(self) -> dict:
        return _get_json(self.master_ui + "/json/")

    def worker_state(self, i: int) -> dict:
        return _get_json(self.worker_uis[i] + "/json/")


def _get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _env(state: Path) -> dict[str, str]:
    (state / "conf").mkdir(parents=True, exist_ok=True)
    return {**os.environ, "SPARK_HOME": str(_spark_home()), "SPARK_CONF_DIR": str(state / "conf"),
            "SPARK_PID_DIR": str(state / "pids"), "SPARK_LOG_DIR": str(state / "logs"),
            "SPARK_IDENT_STRING": IDENT, "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_LOCAL_IP": HOST}


def _daemon(state: Path, action: str, cls: str, instance: int, *args: str) -> subprocess.Popen:
    return subprocess.Popen(["bash", str(_spark_home() / "sbin" / "spark-daemon.sh"), action, cls,
                             str(instance), *args],
                            env=_env(state), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _pid_file(state: Path, cls: str, instance: int) -> Path:
    return state / "pids" / f"spark-{IDENT}-{cls}-{instance}.pid"


def _daemons(workers: int) -> list[tuple[str, int]]:
    return [(MASTER, 1)] + [(WORKER, i) for i in range(1, workers + 1)]


def start(state: Path, master_port: int, ui_ports: list[int], workers: int = 2,
          cores: int = 1, memory: str = "1g", timeout_s: float = 60) -> LocalCluster:
    """Start a master on `master_port` (its web UI on ui_ports[0]) and `workers` workers
    (web UIs on ui_ports[1:]), each offering `cores` cores and `memory`; return once the
    master lists them all alive. On failure, whatever started is stopped."""
    state = Path(state).absolute()
    master_url = f"spark://{HOST}:{master_port}"
    launches = [_daemon(state, "start", MASTER, 1, "--host", HOST, "--port", str(master_port),
                        "--webui-port", str(ui_ports[0]))]
    cluster = LocalCluster(master_url, f"http://{HOST}:{ui_ports[0]}",
                           [f"http://{HOST}:{port}" for port in ui_ports[1:workers + 1]],
                           state, cores, memory)
    # Started together with the master (spark-daemon.sh waits ~2.5 s for each): a
    # worker retries its registration until the master answers.
    launches += [_launch_worker(cluster, i) for i in range(1, workers + 1)]
    try:
        for launch in launches:
            output, _ = launch.communicate(timeout=60)
            if launch.returncode != 0 or "failed to launch" in output:
                raise ServiceUnavailable(f"a Spark daemon did not start:\n{output}")
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                alive = [w for w in cluster.master_state()["workers"] if w["state"] == "ALIVE"]
                if len(alive) == workers:
                    return cluster
            except (OSError, ValueError):
                pass  # not listening yet, or its UI answering before its JSON is served
            if time.monotonic() > deadline:
                logs = "\n".join(f"{log.name}:\n{log_tail(log, 15)}"
                                 for log in sorted((state / "logs").glob("*.out")))
                raise ServiceUnavailable(f"the Spark master {master_url} did not list {workers} "
                                         f"live workers within {timeout_s:.0f}s; logs:\n{logs}")
            time.sleep(0.3)
    except BaseException:
        stop(state, workers)
        raise


def _launch_worker(cluster: LocalCluster, i: int) -> subprocess.Popen:
    """spark-daemon.sh starting worker `i` (1-based) of `cluster`."""
    work = cluster.state / f"work-{i}"
    work.mkdir(parents=True, exist_ok=True)
    port = cluster.worker_uis[i - 1].rsplit(":", 1)[1]
    return _daemon(cluster.state, "start", WORKER, i, "--host", HOST, "--cores", str(cluster.cores),
                   "--memory", cluster.memory, "--work-dir", str(work), "--webui-port", port,
                   cluster.master_url)


def _alive_ids(cluster: LocalCluster, ui: str | None = None) -> set[str]:
    """Ids of the workers the master lists ALIVE (those with web UI `ui` only, if given)."""
    try:
        workers = cluster.master_state()["workers"]
    except OSError:
        return set()
    return {w["id"] for w in workers if w["state"] == "ALIVE" and ui in (None, w.get("webuiaddress"))}


def kill_worker(cluster: LocalCluster, i: int) -> list[int]:
    """SIGKILL worker `i` (1-based) and every process it launched (its executors and
    their Python workers, which run in its work directory), as a host that dies does;
    the pids killed. The master drops the worker when its connection breaks."""
    pid = recorded_pid(_pid_file(cluster.state, WORKER, i))
    work = str(cluster.state / f"work-{i}")
    victims = [pid] if pid and WORKER in (command_line(pid) or "") else []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) not in victims:
            try:
                cwd = os.readlink(entry / "cwd")
            except OSError:
                continue
            if cwd == work or cwd.startswith(work + "/"):
                victims.append(int(entry.name))
    for victim in victims:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return victims


def restart_worker(cluster: LocalCluster, i: int, timeout_s: float = 60) -> None:
    """Start worker `i` again (after kill_worker); return once the master lists it
    alive (a new registration, not the killed one it has not dropped yet)."""
    ui = cluster.worker_uis[i - 1]
    before = _alive_ids(cluster, ui)
    output, _ = _launch_worker(cluster, i).communicate(timeout=60)
    if "failed to launch" in output:
        raise ServiceUnavailable(f"Spark worker {i} did not start again:\n{output}")
    deadline = time.monotonic() + timeout_s
    while not _alive_ids(cluster, ui) - before:
        if time.monotonic() > deadline:
            raise ServiceUnavailable(f"the Spark master {cluster.master_url} did not list worker {i} "
                                     f"alive again within {timeout_s:.0f}s; its log: "
                                     f"{log_tail(_worker_log(cluster.state, i), 15)}")
        time.sleep(0.3)


def _worker_log(state: Path, i: int) -> Path:
    logs = sorted((state / "logs").glob(f"*{WORKER}-{i}-*.out"))
    return logs[-1] if logs else state / "logs"


def stop(state: Path, workers: int = 2) -> list[int]:
    """Stop the workers, then the master (SIGTERM, SIGKILL after 20 s; a worker stopping
    kills its executors). Returns the pids that were running."""
    state = Path(state).absolute()
    stopped = []
    for cls, instance in reversed(_daemons(workers)):
        pid_file = _pid_file(state, cls, instance)

        def is_ours(pid: int, cls=cls) -> bool:
            line = command_line(pid)
            return bool(line) and cls in line and str(state) in line

        pid = pid_file.read_text().strip() if pid_file.exists() else None
        if stop_process(pid_file, is_ours, timeout_s=20) and pid:
            stopped.append(int(pid))
    return stopped


def leftover_processes(state: Path) -> list[int]:
    """Pids of live processes of this cluster: those whose command line names the state
    directory (the daemons, the executors their workers launched) or that run in it (the
    executors' Python workers). Linux only (/proc)."""
    state = str(Path(state).absolute())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
        except OSError:
            cwd = ""
        line = command_line(int(entry.name)) or ""
        if state in line or cwd == state or cwd.startswith(state + "/"):
            found.append(int(entry.name))
    return found


def stop_and_reap(state: Path, workers: int = 2) -> list[int]:
    """Stop the cluster, then SIGKILL any of its processes that outlived the stop (a
    test's clean-up); those pids, which a test expects to be none."""
    stop(state, workers)
    leftover = leftover_processes(state)
    for pid in leftover:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return leftover
