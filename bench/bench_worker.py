"""The floeline worker's figures (issue 25 item 7): many connectors in one warm Spark,
driven over Kafka Connect's REST API, against `floeline run` and plain Spark queries
of the same run.

1. Produces, to the local broker, bench_ingest.py's ~236-byte records: --start-records
   to each of 1 + --connectors + --bare start topics (1 partition), and --records in all
   over the throughput topics (one topic of them all for the single case, and
   --connectors topics of records / connectors each).
2. `floeline run CONFIG --until-caught-up` on one start topic, as a fresh process (a
   new user's path): time from launch to its first committed row and the tree's peak RSS.
3. The worker, as a child process of this one (`--child`; the parent samples the whole
   process tree's RSS every 0.2 s): it starts Spark and the worker (Herder + REST
   server on a free port, what `floeline worker` starts), then:
   - warm-up: POST /connectors for one start topic, wait for its first row;
   - start latency: --bare plain Spark queries (Kafka -> Delta, 1 s trigger, the same
     session), then --connectors connectors POSTed one after another, each timed from
     the POST to the first committed row (watched in the table's _delta_log); all stay
     running (the RSS peak with every one of them running);
   - they are deleted; throughput: one connector alone on the single topic, until its
     table holds every record, then --connectors connectors POSTed together on the
     other topics, until every table holds its records: aggregate rows/s against the
     single connector's.

Last line: post_to_first_row_median_s=N post_to_first_row_max_s=N bare_first_row_median_s=N
run_first_row_s=N worker_peak_rss_mb=N worker_peak_pss_mb=N run_rss_mb=N single_rows_per_s=N
many_connectors_rows_per_s=N many_ratio=R

    .venv/bin/python bench/bench_worker.py [--connectors 20] [--records 400000] [--batch-slots N]

--batch-slots: the worker's floeline.worker.batch.slots (default: the worker's default).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
sys.path.insert(0, os.path.dirname(__file__))

from bench_cold import _cpu_and_rss, _tree, kcmp_works, own_address_spaces, timed_tree  # noqa: E402
from bench_ingest import BARE_SCHEMA, produce_records  # noqa: E402
from bench_scale import produce_spread  # noqa: E402

from floeline.dev import kafka as devkafka  # noqa: E402

RESULT_MARK = "bench_worker result: "
PHASE_MARK = "bench_worker phase: "  # the child's phases: the parent keeps a peak RSS for each


def table_log(warehouse: str, topic: str) -> str:
    return os.path.join(warehouse, "FLOELINE", "PUBLIC", topic.upper(), "_delta_log")


def committed_rows(log_dir: str) -> int:
    """Rows the table's commits added so far (append only), from the add actions' stats."""
    rows = 0
    if not os.path.isdir(log_dir):
        return 0
    for name in sorted(os.listdir(log_dir)):
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(log_dir, name)) as f:
                for line in f:
                    add = json.loads(line).get("add")
                    if add and add.get("stats"):
                        rows += json.loads(add["stats"]).get("numRecords", 0)
        except (OSError, ValueError):  # a commit being written: counted on the next look
            continue
    return rows


def wait_for_rows(log_dirs: list[str], wanted: int, timeout_s: float = 600) -> float:
    """Seconds until the tables of `log_dirs` hold `wanted` rows in all."""
    started = time.time()
    while sum(committed_rows(d) for d in log_dirs) < wanted:
        if time.time() - started > timeout_s:
            raise SystemExit(f"timed out waiting for {wanted} rows in {log_dirs[:3]}...")
        time.sleep(0.05)
    return time.time() - started


def rest(base: str, method: str, path: str, body: dict | None = None,
         timeout_s: float = 60) -> tuple[int, object]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            text = response.read().decode()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read().decode() or "null")


# ---------------------------------------------------------------- the worker process

def start_worker(spark, work: str, bootstrap: str, batch_slots: str | None = None):
    """What `floeline worker` starts (worker/process.py), in this process and its Spark
    session: (REST base URL, closer)."""
    from floeline.warehouse.catalog import Warehouse
    from floeline.worker.herder import Herder
    from floeline.worker.process import rest_server
    from floeline.worker.settings import load_worker_settings
    from floeline.worker.store import ConnectorStore

    props = os.path.join(work, "worker.properties")
    with open(props, "w") as f:
        f.write(f"listeners=http://127.0.0.1:0\nfloeline.warehouse={work}/warehouse\n"
                f"floeline.checkpoint.dir={work}/checkpoints\nbootstrap.servers={bootstrap}\n")
        if batch_slots is not None:
            f.write(f"floeline.worker.batch.slots={batch_slots}\n")
    settings = load_worker_settings(props)
    warehouse = Warehouse(settings.warehouse, settings.warehouse_s3)
    herder = Herder(spark, settings, ConnectorStore(warehouse.storage, warehouse.location), out=sys.stderr)
    server = rest_server(settings, herder).start()
    herder.start()

    def close() -> None:
        server.close()
        herder.close()

    return server.url, close


def bare_query(spark, bootstrap: str, topic: str, out: str):
    """A plain Spark Kafka -> Delta query with a 1 s trigger: the floor a warm session sets."""
    from pyspark.sql import functions as F

    stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").load())
    parsed = stream.select(F.from_json(F.col("value").cast("string"), BARE_SCHEMA).alias("r")).select("r.*")
    return (parsed.writeStream.format("delta").option("checkpointLocation", out + "_ckpt")
            .trigger(processingTime="1 second").start(out))


def connector_body(name: str, topics: list[str]) -> dict:
    return {"name": name, "config": {"topics": ",".join(topics), "buffer.flush.time": "1",
                                     "buffer.count.records": "50000"}}


def post(base: str, name: str, topics: list[str]) -> None:
    status, body = rest(base, "POST", "/connectors", connector_body(name, topics))
    if status != 201:
        raise SystemExit(f"POST /connectors {name}: {status} {body}")


def phase(name: str) -> None:
    """Tell the parent the child's phase (start, single, many): its RSS peaks per phase."""
    print(PHASE_MARK + name, flush=True)


def child(args) -> int:
    from floeline.spark import WORKER_DRIVER_MEMORY, get_spark

    phase("start")
    spark = get_spark("local[2]", WORKER_DRIVER_MEMORY)  # as `floeline worker` starts it
    base, close = start_worker(spark, args.work, args.bootstrap, args.batch_slots)
    warehouse = os.path.join(args.work, "warehouse")
    start_topics = args.start_topics.split(",")
    warm, bare_topics = start_topics[0], start_topics[1:1 + args.bare]
    connector_topics = start_topics[1 + args.bare:]
    result: dict = {}

    post(base, "warm", [warm])
    result["warm_first_row_s"] = wait_for_rows([table_log(warehouse, warm)], 1)

    bare, queries = [], []
    for topic in bare_topics:
        out = os.path.join(args.work, "bare", topic)
        started = time.time()
        queries.append(bare_query(spark, args.bootstrap, topic, out))
        wait_for_rows([os.path.join(out, "_delta_log")], 1)
        bare.append(time.time() - started)
    for query in queries:
        query.stop()
    result["bare_first_row_s"] = bare

    firsts = []
    for i, topic in enumerate(connector_topics):
        started = time.time()
        post(base, f"start_{i:02d}", [topic])
        wait_for_rows([table_log(warehouse, topic)], 1)
        firsts.append(time.time() - started)
    result["post_to_first_row_s"] = firsts
    wait_for_rows([table_log(warehouse, t) for t in connector_topics],
                  args.start_records * len(connector_topics))
    print("all start connectors caught up", file=sys.stderr, flush=True)
    time.sleep(3)  # every connector running: the parent's RSS sample sees them all
    for name in ["warm"] + [f"start_{i:02d}" for i in range(len(connector_topics))]:
        rest(base, "DELETE", f"/connectors/{name}")

    def cpu_s() -> float:  # this process tree's CPU seconds (the JVM is its child)
        return _cpu_and_rss(_tree(os.getpid()))[0]

    single = args.single_topic
    phase("single")
    started, cpu = time.time(), cpu_s()
    post(base, "single", [single])
    wait_for_rows([table_log(warehouse, single)], args.records)
    result["single_s"], result["single_cpu_s"] = time.time() - started, cpu_s() - cpu
    rest(base, "DELETE", "/connectors/single")

    many = args.many_topics.split(",")
    phase("many")
    started, cpu = time.time(), cpu_s()
    for i, topic in enumerate(many):
        post(base, f"many_{i:02d}", [topic])
    wait_for_rows([table_log(warehouse, t) for t in many], args.records)
    result["many_s"], result["many_cpu_s"] = time.time() - started, cpu_s() - cpu
    for i in range(len(many)):
        rest(base, "DELETE", f"/connectors/many_{i:02d}")
    close()
    print(RESULT_MARK + json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------- the parent

def tree_pss(pids: list[int]) -> tuple[int, dict[str, int]]:
    """The tree's proportional set size (bytes): pages shared between its processes
    counted once, and a process that runs in another's address space (a JVM's
    posix_spawn child before its exec: bench_cold.own_address_spaces) not at all. Also the
    PSS by kind of process (the first word of its command line and, for Python, its
    module), so the peak says which members hold the memory."""
    total, by_kind = 0, {}
    for pid in own_address_spaces(pids):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                pss = next((int(line.split()[1]) * 1024 for line in f if line.startswith("Pss:")), 0)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        total += pss
        kind = _process_kind(argv)
        by_kind[kind] = by_kind.get(kind, 0) + pss
    return total, by_kind


def _process_kind(argv: list[str]) -> str:
    """A short name for a process of the worker's tree: java, the worker child, a
    PySpark daemon or worker (`python -m pyspark.daemon`), ..."""
    name = os.path.basename(argv[0]) if argv and argv[0] else "?"
    if "-m" in argv[:-1]:
        return f"{name} -m {argv[argv.index('-m') + 1]}"
    if "--child" in argv:
        return f"{name} (worker child)"
    return name


def run_child(command: list[str], log_path: str) -> dict:
    """Run the worker child; its result with the tree's peak RSS and PSS (bytes), and
    its peak RSS in each of its phases (phase_rss)."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True)
        lines: list[str] = []
        phases: dict[str, int] = {}

        def read() -> None:
            for line in proc.stdout:
                lines.append(line)
                if line.startswith(PHASE_MARK):
                    phases[line[len(PHASE_MARK):].strip()] = 0

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        peak = peak_pss = 0
        pss_by_kind: dict[str, int] = {}
        while proc.poll() is None:
            tree = _tree(proc.pid)
            rss = _cpu_and_rss(tree)[1]
            peak = max(peak, rss)
            if phases:
                current = list(phases)[-1]
                phases[current] = max(phases[current], rss)
            pss, by_kind = tree_pss(tree)
            if pss > peak_pss:
                peak_pss, pss_by_kind = pss, by_kind
            time.sleep(0.2)
        reader.join(10)
    results = [json.loads(line[len(RESULT_MARK):]) for line in lines if line.startswith(RESULT_MARK)]
    if proc.returncode != 0 or not results:
        with open(log_path) as f:
            tail = f.read()[-4000:]
        raise SystemExit(f"the worker child failed ({proc.returncode}); its log {log_path}:\n{tail}")
    return dict(results[0], rss=peak, pss=peak_pss, pss_by_kind=pss_by_kind, phase_rss=phases)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connectors", type=int, default=20)
    parser.add_argument("--bare", type=int, default=5, help="plain Spark queries timed to their first row")
    parser.add_argument("--start-records", type=int, default=1000, help="records per start topic")
    parser.add_argument("--records", type=int, default=400_000, help="records of each throughput case")
    parser.add_argument("--batch-slots", help="the worker's floeline.worker.batch.slots")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for hidden in ("--bootstrap", "--work", "--start-topics", "--single-topic", "--many-topics"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    if not kcmp_works():
        print("warning: kcmp is refused here, so RSS and PSS may count the JVM twice while it "
              "spawns a process (bench_cold.own_address_spaces)", flush=True)

    bootstrap = devkafka.start()
    stamp = f"{int(time.time())}_{random.randint(0, 999)}"
    start_topics = [f"wstart_{stamp}_{i:02d}" for i in range(2 + args.bare + args.connectors)]
    single = f"wsingle_{stamp}"
    many = [f"wmany_{stamp}_{i:02d}" for i in range(args.connectors)]
    started = time.time()
    for topic in start_topics:
        devkafka.create_topic(bootstrap, topic, partitions=1)
        produce_records(bootstrap, topic, args.start_records)
    devkafka.create_topic(bootstrap, single, partitions=4)
    produce_spread(bootstrap, [single], args.records)
    for topic in many:
        devkafka.create_topic(bootstrap, topic, partitions=1)
    produce_spread(bootstrap, many, args.records)
    print(f"set-up {time.time() - started:.1f} s", flush=True)
    work = tempfile.mkdtemp(prefix="floeline-worker-bench-")
    load_before = os.getloadavg()[0]

    run_topic = start_topics[-1]
    run_warehouse = os.path.join(work, "run_warehouse")
    config = os.path.join(work, "run.properties")
    with open(config, "w") as f:
        f.write(f"name=run_alone\ntopics={run_topic}\nbootstrap.servers={bootstrap}\n"
                f"floeline.warehouse={run_warehouse}\nbuffer.flush.time=1\n")
    run = timed_tree([sys.executable, "-m", "floeline.cli", "run", config, "--until-caught-up"],
                     lambda: table_log(run_warehouse, run_topic))

    command = [sys.executable, os.path.abspath(__file__), "--child", "--bootstrap", bootstrap,
               "--work", work, "--start-topics", ",".join(start_topics[:-1]),
               "--single-topic", single, "--many-topics", ",".join(many),
               "--connectors", str(args.connectors), "--bare", str(args.bare),
               "--start-records", str(args.start_records), "--records", str(args.records)]
    if args.batch_slots is not None:
        command += ["--batch-slots", args.batch_slots]
    worker = run_child(command, os.path.join(work, "worker.log"))
    load_after = os.getloadavg()[0]

    firsts, bare = worker["post_to_first_row_s"], worker["bare_first_row_s"]
    single_rate, many_rate = args.records / worker["single_s"], args.records / worker["many_s"]
    print(f"load average {load_before:.1f} before, {load_after:.1f} after; logs and tables: {work}")
    print(f"floeline run: first row {run['first']['s']:.1f} s after launch, peak RSS "
          f"{run['rss'] / 2**20:.0f} MB")
    print(f"worker: warm-up connector's first row {worker['warm_first_row_s']:.1f} s after its POST")
    print(f"plain Spark queries, same session: first row after start() {[round(s, 2) for s in bare]}")
    print(f"connectors: first row after POST {[round(s, 2) for s in firsts]}")
    print(f"throughput: one connector {single_rate:,.0f} rows/s; {args.connectors} connectors "
          f"together {many_rate:,.0f} rows/s ({args.records} records each case); CPU seconds of the "
          f"worker's tree: one connector {worker['single_cpu_s']:.1f}, {args.connectors} connectors "
          f"{worker['many_cpu_s']:.1f}")
    kinds = sorted(worker["pss_by_kind"].items(), key=lambda kv: -kv[1])
    print("worker's tree at its PSS peak: " + ", ".join(f"{k} {v / 2**20:.0f} MB" for k, v in kinds))
    print("worker's tree, peak RSS by phase (start: the start connectors and plain queries; single: "
          "one connector's throughput; many: the connectors' together): "
          + ", ".join(f"{k} {v / 2**20:.0f} MB" for k, v in worker["phase_rss"].items()))
    print(f"post_to_first_row_median_s={statistics.median(firsts):.2f} "
          f"post_to_first_row_max_s={max(firsts):.2f} "
          f"bare_first_row_median_s={statistics.median(bare):.2f} "
          f"run_first_row_s={run['first']['s']:.1f} worker_peak_rss_mb={worker['rss'] / 2**20:.0f} "
          f"worker_peak_pss_mb={worker['pss'] / 2**20:.0f} "
          f"run_rss_mb={run['rss'] / 2**20:.0f} single_rows_per_s={single_rate:.0f} "
          f"many_connectors_rows_per_s={many_rate:.0f} many_ratio={many_rate / single_rate:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
