"""A local Spark standalone cluster (one master, N workers) from PySpark's own jars, for
tests and for trying `floeline submit` on one machine. The wheel has no start-master.sh:
each daemon is started with its sbin/spark-daemon.sh (`start
org.apache.spark.deploy.master.Master` / `...worker.Worker`), all on 127.0.0.1, with
its pid files, logs, work directories and (empty) conf directory under the state
directory, so neither another cluster nor a stray spark-defaults.conf is touched."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from floeline.dev.services import HOST, log_tail, stop_process
from floeline.errors import ServiceUnavailable
from floeline.processes import command_line

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
IDENT = "floeline"  # spark-daemon.sh's SPARK_IDENT_STRING: part of the pid files' names


@dataclass
class LocalCluster:
    master_url: str  # spark://127.0.0.1:PORT
    master_ui: str  # http://127.0.0.1:PORT (its /json lists workers and applications)
    worker_uis: list[str]

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
    for i in range(1, workers + 1):
        work = state / f"work-{i}"
        work.mkdir(parents=True, exist_ok=True)
        # Started together with the master (spark-daemon.sh waits ~2.5 s for each): a
        # worker retries its registration until the master answers.
        launches.append(_daemon(state, "start", WORKER, i, "--host", HOST, "--cores", str(cores),
                                "--memory", memory, "--work-dir", str(work),
                                "--webui-port", str(ui_ports[i]), master_url))
    cluster = LocalCluster(master_url, f"http://{HOST}:{ui_ports[0]}",
                           [f"http://{HOST}:{port}" for port in ui_ports[1:workers + 1]])
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
            except OSError:
                pass
            if time.monotonic() > deadline:
                logs = "\n".join(f"{log.name}:\n{log_tail(log, 15)}"
                                 for log in sorted((state / "logs").glob("*.out")))
                raise ServiceUnavailable(f"the Spark master {master_url} did not list {workers} "
                                         f"live workers within {timeout_s:.0f}s; logs:\n{logs}")
            time.sleep(0.3)
    except BaseException:
        stop(state, workers)
        raise


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
