"""How the worker scales with executors (issue 54 goal 4): rows/s of one connector on a
64-partition topic and of --connectors connectors together, with 1, 2 and 4 executors
of one core each on a local Spark standalone cluster, against the same worker on
local[2] in the same run (the baseline); and the driver's own memory and CPU per
connector and per table, so a user can size a worker.

1. Produces, to the local broker, bench_ingest.py's ~236-byte records: --records to a
   64-partition topic (p64), --records in all over --connectors topics of 4 partitions
   (many), --records in all over --tables topics of 1 partition (tables), and a small
   warm-up topic.
2. For each setting (local[2] first, then each --executors count): a fresh standalone
   cluster of that many workers of 1 core (floeline's dev tooling, as the cluster tests
   start it; none for local), and `floeline submit --worker` on it, its warehouse and
   checkpoints in a local directory. Over REST:
   - warm-up: a connector on the warm-up topic until its rows land, deleted;
   - p64: one connector on the p64 topic, timed from its POST to its last row (rows/s);
   - many: the driver alone for --idle-s (its floor), then --connectors connectors
     POSTed together, timed until every table holds its records (aggregate rows/s);
     then --idle-s with all of them running and caught up (the driver's RSS, live heap
     and CPU per connector, over that floor); deleted;
   - tables: the floor again, then one connector on the --tables topics (one table
     each) until caught up, then --idle-s (the same per table).
   Connector names carry the setting (a new consumer group reads from the start).
   spark.default.parallelism is the executors' cores (2 on local[2]), as
   docs/operations.md advises. The driver is spark-submit's JVM and the worker's Python (the process tree under
   `floeline submit`, sampled from /proc every 0.2 s); its JVM's live heap is read with
   `jcmd GC.run` + `GC.heap_info` at the end of each idle window. The executors' CPU is
   sampled too (the cluster's CoarseGrainedExecutorBackend trees): while a case runs,
   driver CPU near one core with idle executors is the driver as the limit.
3. Each setting's figures are printed as they come; the last line sums them up:
   p64_rows_per_s_local=N p64_rows_per_s_e1=N ... many_rows_per_s_e4=N p64_ratio_e4=R
   many_ratio_e4=R (each against local[2]), then the driver per connector and per table
   over its idle floor, from the first cluster setting (its driver runs no task):
   driver_mb_per_connector=N driver_heap_mb_per_connector=N driver_cpu_pct_per_connector=N
   driver_mb_per_table=N driver_heap_mb_per_table=N driver_cpu_pct_per_table=N

    .venv/bin/python bench/bench_cluster.py [--records 400000] [--connectors 20] [--tables 20]
        [--executors 1,2,4] [--idle-s 30]

A smoke run (minutes): --records 20000 --connectors 4 --tables 4 --executors 1,2 --idle-s 5.
On a 2-core machine 4 executors of 1 core oversubscribe it: the point is the curve's
shape and where the driver becomes the limit, not absolute speed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from bench_cold import _cpu_and_rss, _tree  # noqa: E402
from bench_ingest import produce_records  # noqa: E402
from bench_scale import produce_spread  # noqa: E402
from bench_worker import committed_rows, rest, table_log  # noqa: E402

from floeline.dev import cluster as devcluster  # noqa: E402
from floeline.dev import kafka as devkafka  # noqa: E402
from floeline.dev.services import free_port  # noqa: E402


class Driver:
    """`floeline submit --worker` as a child process; its tree sampled every 0.2 s."""

    def __init__(self, work: str, bootstrap: str, master: str, log_path: str, parallelism: int):
        props = os.path.join(work, "worker.properties")
        with open(props, "w") as f:
            f.write(f"listeners=http://127.0.0.1:0\nfloeline.warehouse={work}/warehouse\n"
                    f"floeline.checkpoint.dir={work}/checkpoints\nbootstrap.servers={bootstrap}\n"
                    f"floeline.spark.master={master}\n")
        self.warehouse = f"{work}/warehouse"
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "floeline.cli", "submit", "--worker", props, "--",
             "--conf", "spark.ui.enabled=false", "--conf", f"spark.default.parallelism={parallelism}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        self.url = self._wait_line("rest.url=", 600).strip().split("=", 1)[1]

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            self.log.write(line)
            self.log.flush()

    def _wait_line(self, prefix: str, timeout_s: float) -> str:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            for line in self.lines:
                if line.startswith(prefix):
                    return line
            if self.proc.poll() is not None:
                raise SystemExit(f"the worker exited ({self.proc.returncode}); its log: {self.log.name}")
            time.sleep(0.2)
        raise SystemExit(f"no {prefix} line within {timeout_s:.0f} s; the worker's log: {self.log.name}")

    def pids(self) -> list[int]:
        """The driver: the tree under `floeline submit`, without that small wrapper."""
        return [p for p in _tree(self.proc.pid) if p != self.proc.pid]

    def jvm(self) -> int | None:
        for pid in self.pids():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"org.apache.spark.deploy.SparkSubmit" in f.read():
                        return pid
            except OSError:
                continue
        return None

    def live_heap_mb(self) -> float | None:
        """The driver JVM's heap in use after a full GC (jcmd), in MB."""
        pid = self.jvm()
        if pid is None or shutil.which("jcmd") is None:
            return None
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=60)
        info = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60)
        match = re.search(r"total \d+K, used (\d+)K", info.stdout)
        return int(match[1]) / 1024 if match else None

    def stop(self) -> None:
        """SIGTERM (every connector stops after its batch); SIGKILL of the whole tree
        after 240 s (spark-submit runs in a session of its own: it would outlive us)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(240)
        except subprocess.TimeoutExpired:
            for pid in [self.proc.pid, *self.pids()]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.wait()
        self.log.close()


def executor_pids() -> list[int]:
    """Every executor JVM of the local clusters and its Python workers."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if b"CoarseGrainedExecutorBackend" in f.read():
                        found += _tree(int(entry))
            except OSError:
                continue
    return found


class Sampler:
    """The driver's peak RSS, and both sides' CPU seconds, from start() to stop()."""

    def __init__(self, driver: Driver):
        self.driver = driver

    def __enter__(self) -> Sampler:
        self.cpu0 = _cpu_and_rss(self.driver.pids())[0]
        self.exec0 = _cpu_and_rss(executor_pids())[0]
        self.started, self.peak, self.last, self._stop = time.time(), 0, 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.last = _cpu_and_rss(self.driver.pids())[1]
            self.peak = max(self.peak, self.last)

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join(5)
        self.seconds = time.time() - self.started
        self.driver_cpu = _cpu_and_rss(self.driver.pids())[0] - self.cpu0
        self.executor_cpu = _cpu_and_rss(executor_pids())[0] - self.exec0

    def figures(self) -> dict:
        return {"seconds": round(self.seconds, 2), "driver_rss_mb": round(self.last / 2**20),
                "driver_peak_rss_mb": round(self.peak / 2**20),
                "driver_cpu_pct": round(100 * self.driver_cpu / self.seconds, 1),
                "executor_cpu_pct": round(100 * self.executor_cpu / self.seconds, 1)}


def wait_rows(warehouse: str, topics: list[str], wanted: int, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    logs = [table_log(warehouse, t) for t in topics]
    while sum(committed_rows(d) for d in logs) < wanted:
        if time.time() > deadline:
            got = sum(committed_rows(d) for d in logs)
            raise SystemExit(f"timed out: {got} of {wanted} rows in {len(topics)} table(s)")
        time.sleep(0.1)


def post(driver: Driver, name: str, topics: list[str]) -> None:
    body = {"name": name, "config": {"topics": ",".join(topics), "buffer.flush.time": "1",
                                     "buffer.count.records": "50000"}}
    status, answer = rest(driver.url, "POST", "/connectors", body)
    if status != 201:
        raise SystemExit(f"POST /connectors {name}: {status} {answer}")


def delete(driver: Driver, names: list[str]) -> None:
    # A DELETE waits for the connector's batch in flight (up to 180 s).
    threads = [threading.Thread(target=rest, args=(driver.url, "DELETE", f"/connectors/{n}", None, 300))
               for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)


def floor(driver: Driver, idle_s: float) -> dict:
    """The driver with no connector running for `idle_s`: RSS, CPU and live heap."""
    with Sampler(driver) as idle:
        time.sleep(idle_s)
    return {**idle.figures(), "heap_mb": driver.live_heap_mb()}


def run_setting(setting: str, master: str, topics: dict[str, list[str]], args, work: str) -> dict:
    """Every case of one setting (local, e1, e2, e4) in one worker; its figures.
    Connector names carry the setting: a new name is a new consumer group, which
    starts at the topic's start (the same name would resume from the group's offsets)."""
    # spark.default.parallelism: the executors' cores, as docs/operations.md advises (2 on local[2]).
    cores = 2 if setting == "local" else int(setting[1:])
    driver = Driver(work, args.bootstrap, master, os.path.join(work, "worker.log"), cores)
    out: dict = {"setting": setting}
    try:
        post(driver, f"{setting}_warm", topics["warm"])
        wait_rows(driver.warehouse, topics["warm"], args.warmup, 600)
        delete(driver, [f"{setting}_warm"])

        with Sampler(driver) as p64:
            post(driver, f"{setting}_p64", topics["p64"])
            wait_rows(driver.warehouse, topics["p64"], args.records, 3600)
        out["p64"] = {**p64.figures(), "rows_per_s": round(args.records / p64.seconds)}
        delete(driver, [f"{setting}_p64"])

        out["many_floor"] = floor(driver, args.idle_s)
        names = [f"{setting}_many{i:02d}" for i in range(len(topics["many"]))]
        with Sampler(driver) as many:
            for name, topic in zip(names, topics["many"]):
                post(driver, name, [topic])
            wait_rows(driver.warehouse, topics["many"], args.records, 3600)
        out["many"] = {**many.figures(), "rows_per_s": round(args.records / many.seconds)}
        out["many_idle"] = floor(driver, args.idle_s)  # every connector running, caught up
        delete(driver, names)

        out["tables_floor"] = floor(driver, args.idle_s)
        with Sampler(driver) as tables:
            post(driver, f"{setting}_tables", topics["tables"])
            wait_rows(driver.warehouse, topics["tables"], args.records, 3600)
        out["tables"] = {**tables.figures(), "rows_per_s": round(args.records / tables.seconds)}
        out["tables_idle"] = floor(driver, args.idle_s)
        delete(driver, [f"{setting}_tables"])
    finally:
        driver.stop()
    return out


def per_unit(result: dict, case: str, count: int) -> dict:
    """The driver's RSS, live heap and CPU with `count` connectors (or tables) running
    and caught up, over its floor just before them, per connector (or table)."""
    idle, held = result[f"{case}_floor"], result[f"{case}_idle"]
    heap = None if held["heap_mb"] is None or idle["heap_mb"] is None \
        else round((held["heap_mb"] - idle["heap_mb"]) / count, 1)
    return {"rss_mb": round((held["driver_rss_mb"] - idle["driver_rss_mb"]) / count, 1), "heap_mb": heap,
            "cpu_pct": round((held["driver_cpu_pct"] - idle["driver_cpu_pct"]) / count, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=400_000, help="records of each case")
    parser.add_argument("--connectors", type=int, default=20, help="connectors of the many case")
    parser.add_argument("--tables", type=int, default=20, help="tables of the tables case's one connector")
    parser.add_argument("--executors", default="1,2,4", help="executor counts (workers of 1 core)")
    parser.add_argument("--idle-s", type=float, default=30, help="each idle window")
    parser.add_argument("--warmup", type=int, default=20_000, help="records of the warm-up topic")
    args = parser.parse_args()
    counts = [int(c) for c in args.executors.split(",") if c]

    args.bootstrap = devkafka.start()
    stamp = f"{int(time.time())}_{random.randint(0, 999)}"
    topics = {"warm": [f"cl_warm_{stamp}"], "p64": [f"cl_p64_{stamp}"],
              "many": [f"cl_many_{stamp}_{i:02d}" for i in range(args.connectors)],
              "tables": [f"cl_tables_{stamp}_{i:02d}" for i in range(args.tables)]}
    partitions = {"warm": 4, "p64": 64, "many": 4, "tables": 1}
    for case, names in topics.items():
        for topic in names:
            devkafka.create_topic(args.bootstrap, topic, partitions=partitions[case])
    produce_records(args.bootstrap, topics["warm"][0], args.warmup)
    for case in ("p64", "many", "tables"):
        seconds = produce_spread(args.bootstrap, topics[case], args.records)
        print(f"{case}: {args.records} records to {len(topics[case])} topic(s) x {partitions[case]} "
              f"partitions in {seconds:.1f} s", flush=True)

    root = tempfile.mkdtemp(prefix="floeline-bench-cluster-")
    results: dict[str, dict] = {}
    for setting in ["local"] + [f"e{c}" for c in counts]:
        work = os.path.join(root, setting)
        os.makedirs(work)
        load = os.getloadavg()[0]
        state = None
        if setting == "local":
            master = "local[2]"
        else:
            workers = int(setting[1:])
            state = os.path.join(work, "cluster")
            cluster = devcluster.start(state, free_port(), [free_port() for _ in range(workers + 1)],
                                       workers=workers, cores=1, memory="1g")
            master = cluster.master_url
        try:
            results[setting] = result = run_setting(setting, master, topics, args, work)
        finally:
            if state is not None:
                devcluster.stop(state, workers)
        print(f"{setting} (load average {load:.1f} at start): {json.dumps(result)}", flush=True)

    base = results["local"]
    summary = {}
    for setting, result in results.items():
        summary[f"p64_rows_per_s_{setting}"] = result["p64"]["rows_per_s"]
        summary[f"many_rows_per_s_{setting}"] = result["many"]["rows_per_s"]
        if setting != "local":
            summary[f"p64_ratio_{setting}"] = round(result["p64"]["rows_per_s"] / base["p64"]["rows_per_s"], 2)
            summary[f"many_ratio_{setting}"] = round(result["many"]["rows_per_s"] / base["many"]["rows_per_s"], 2)
        connector = per_unit(result, "many", args.connectors)
        table = per_unit(result, "tables", args.tables)
        print(f"{setting}: the driver per connector {connector}, per table {table}", flush=True)
    # The sizing figures from the first cluster setting: its driver runs no tasks.
    sized = results[f"e{counts[0]}"] if counts else base
    connector = per_unit(sized, "many", args.connectors)
    table = per_unit(sized, "tables", args.tables)
    summary.update({"driver_mb_per_connector": connector["rss_mb"], "driver_heap_mb_per_connector": connector["heap_mb"],
                    "driver_cpu_pct_per_connector": connector["cpu_pct"], "driver_mb_per_table": table["rss_mb"],
                    "driver_heap_mb_per_table": table["heap_mb"], "driver_cpu_pct_per_table": table["cpu_pct"]})
    print(f"logs and tables: {root}")
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
