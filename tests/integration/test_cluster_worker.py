"""floeline on a Spark standalone cluster (one master, two workers of 1 core each, from
PySpark's own jars, as test_cluster.py starts it), losing an executor host while it
lands records:

- `floeline submit --worker worker.properties`: the worker as the cluster's driver, its
  warehouse and checkpoints on the local S3 (moto), driven over REST only: two Kafka
  connectors and a Kinesis one land every record once; then a Spark worker and its
  executors are SIGKILLed mid-batch while all three land a second wave: Spark runs the
  lost tasks on the surviving executor, and every table still holds every record once.
- `floeline submit CONFIG` (one connector, a local warehouse every process of this
  machine sees): the same kill mid-batch, every record once.

Opt-in (FLOELINE_CLUSTER_TESTS=1, `make test-cluster`): the cluster, spark-submit and
the executors' cold start take minutes on a 2-core machine."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

import pytest

from floeline.config.locations import S3Settings
from floeline.dev import cluster as devcluster
from floeline.dev import kafka as devkafka
from floeline.dev.services import free_port
from floeline.sources.kafka import produce
from floeline.warehouse.catalog import Warehouse

from kinesis_io import create_stream, put, stream_name

pytestmark = pytest.mark.skipif(
    os.environ.get("FLOELINE_CLUSTER_TESTS") != "1",
    reason="starts a Spark standalone cluster (minutes): set FLOELINE_CLUSTER_TESTS=1")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("cluster")
    yield devcluster.start(state, free_port(), [free_port() for _ in range(3)])
    leftover = devcluster.stop_and_reap(state)
    assert not leftover, f"processes of the cluster outlived its stop: {leftover}"


class Driver:
    """`floeline submit ...` as a user runs it, its output (Spark's log included:
    FLOELINE_SPARK_STDERR=1) collected as it comes; Spark's UI on a free port (`ui`),
    whose REST API says which executor runs tasks."""

    def __init__(self, *args: str):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "FLOELINE_SPARK_STDERR": "1"}
        port = free_port()
        self.ui = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "floeline.cli", "submit", *args, "--",
                                      "--conf", "spark.ui.enabled=true", "--conf", f"spark.ui.port={port}"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines: list[str] = []
        self.arrived: list[float] = []  # when each line came (time.monotonic())
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.arrived.append(time.monotonic())
            self.lines.append(line)

    def batch_in_flight(self, moment: float) -> str | None:
        """A batch line of a batch that ran at `moment`: committed after it, started
        (its commit less its `took=`) before it."""
        for arrived, line in zip(self.arrived, self.lines):
            took = re.search(r"batch \d+: .* took=([0-9.]+)s", line)
            if took and arrived > moment > arrived - float(took[1]):
                return line.strip()
        return None

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def floeline_lines(self) -> str:
        """floeline's own lines and Spark's warnings and errors, without the rest of its
        log (for failure messages)."""
        return "".join(line for line in self.lines if not line[:2].isdigit()
                       or " WARN " in line or " ERROR " in line)

    def wait_for(self, what: str, predicate, timeout: float = 600):
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            assert self.proc.poll() is None, f"floeline submit exited waiting for {what}:\n" \
                                             f"{self.floeline_lines()[-6000:]}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}:\n{self.floeline_lines()[-6000:]}"
            time.sleep(0.5)

    def stop(self, timeout: float = 240) -> int:
        """SIGTERM, as Ctrl-C: every connector stops after its batch."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        """SIGKILL `floeline submit` and what it started: spark-submit runs in a session
        of its own, so it and the driver would outlive their parent."""
        for pid in [self.proc.pid, *descendants(self.proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(30)


def descendants(root: int) -> list[int]:
    """The processes below `root` (Linux's /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                children.setdefault(int(stat.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
        except (OSError, ValueError):
            continue
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def call(url: str, method: str = "GET", body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            payload = answer.read()
            return answer.status, json.loads(payload) if payload else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def states(url: str) -> dict[str, str]:
    status, body = call(f"{url}/connectors?expand=status")
    assert status == 200, body
    return {name: entry["status"]["connector"]["state"] for name, entry in body.items()}


def produce_numbered(kafka: str, topic: str, partitions: int, start: int, count: int) -> None:
    """Records {"n": i} for i in start..start+count, record i to partition i % partitions."""
    for first in range(start, start + count, 5000):
        produce(kafka, topic, [{"value": {"n": i}, "partition": i % partitions}
                               for i in range(first, min(first + 5000, start + count))])


def kafka_rows(spark, path: str) -> list[tuple[int, int, int]]:
    """(partition, offset, n) of every row; [] before the table's first commit."""
    try:
        df = spark.read.format("delta").load(path)
    except Exception:  # noqa: BLE001 - no table yet
        return []
    return [(r["p"], r["o"], r["n"]) for r in df.selectExpr(
        "RECORD_METADATA:partition::int AS p", "RECORD_METADATA:offset::bigint AS o", "N::bigint AS n").collect()]


def kinesis_rows(spark, path: str) -> list[tuple[str, str]]:
    """(shardId, sequenceNumber) of every row; [] before the table's first commit."""
    try:
        df = spark.read.format("delta").load(path)
    except Exception:  # noqa: BLE001
        return []
    return [(r["s"], r["q"]) for r in df.selectExpr(
        "RECORD_METADATA:shardId::string AS s", "RECORD_METADATA:sequenceNumber::string AS q").collect()]


def assert_kafka_exactly_once(rows: list[tuple[int, int, int]], total: int, partitions: int, table: str) -> None:
    assert len(rows) == len(set(rows)), f"{table}: {len(rows) - len(set(rows))} duplicated rows"
    want = {(n % partitions, n // partitions, n) for n in range(total)}
    assert set(rows) == want, f"{table}: {len(rows)} rows; missing {sorted(want - set(rows))[:5]}, " \
                              f"unexpected {sorted(set(rows) - want)[:5]}"


def landed(spark, tables: dict[str, str], total_a: int, total_b: int, kinesis: int) -> bool:
    """The worker test's three tables hold at least that many rows each."""
    return (len(kafka_rows(spark, tables["ka"])) >= total_a and len(kafka_rows(spark, tables["kb"])) >= total_b
            and len(kinesis_rows(spark, tables["kin"])) >= kinesis)


def failed_tasks(driver: Driver, app: str) -> int | str:
    """Tasks of `app` that failed, from the driver's UI (a task running on an executor
    that is lost fails with ExecutorLostFailure, which Spark logs at INFO only)."""
    try:
        with urllib.request.urlopen(f"{driver.ui}/api/v1/applications/{app}/stages", timeout=60) as answer:
            return sum(stage.get("numFailedTasks", 0) for stage in json.load(answer))
    except OSError as exc:
        return f"unknown (the driver's UI: {exc})"


class LostHost:
    """A Spark worker of the cluster, SIGKILLed with its executors by `kill` while its
    executor runs a task of the driver's application, started again on leaving the
    block: the next test has the whole cluster."""

    def __init__(self, cluster):
        self.cluster, self.killed = cluster, None

    def __enter__(self) -> LostHost:
        return self

    def kill(self, driver: Driver, app: str, timeout: float = 300) -> int:
        """Kill the first worker seen running a task of `app` (as the driver's UI says,
        a moment late); its number (1-based). `moment` is when."""
        executors = {i + 1: {str(e["id"]) for e in self.cluster.worker_state(i)["executors"] if e["appid"] == app}
                     for i in range(len(self.cluster.worker_uis))}

        def busy() -> int | None:
            try:
                with urllib.request.urlopen(f"{driver.ui}/api/v1/applications/{app}/executors",
                                            timeout=30) as r:
                    running = {e["id"] for e in json.load(r) if e["activeTasks"] > 0}
            except OSError:  # the driver's UI slow to answer on a loaded machine: ask again
                return None
            return next((i for i, ids in executors.items() if ids & running), None)
        worker = driver.wait_for("a task on a worker's executor", busy, timeout)
        assert devcluster.kill_worker(self.cluster, worker)
        self.killed, self.moment = worker, time.monotonic()
        return worker

    def assert_mid_batch(self, driver: Driver, app: str, timeout: float = 600) -> str:
        """The driver lost the executor, and a batch in flight at the kill committed
        after it; that batch's line, and how many tasks failed (ran there at the kill,
        and ran again on the other executor)."""
        driver.wait_for("the driver to lose the executor", lambda: "Lost executor" in driver.text, 120)
        line = driver.wait_for("the batch in flight at the kill to commit",
                               lambda: driver.batch_in_flight(self.moment), timeout)
        return f"in flight: {line}; tasks failed with the executor and run again: {failed_tasks(driver, app)}"

    def __exit__(self, *_exc) -> None:
        if self.killed:
            devcluster.restart_worker(self.cluster, self.killed)


def test_the_worker_on_a_cluster_lands_every_record_once_through_the_loss_of_an_executor_host(
        cluster, kafka, aws, spark, tmp_path, topic_name):
    bucket = f"wh-{uuid.uuid4().hex[:12]}"
    aws.client("s3").create_bucket(Bucket=bucket)
    warehouse = f"s3a://{bucket}/wh"
    s3 = {"floeline.warehouse.s3.endpoint": aws.moto_endpoint,
          "floeline.warehouse.s3.access.key.id": aws.access_key_id,
          "floeline.warehouse.s3.secret.access.key": aws.secret_access_key}
    Warehouse(warehouse, S3Settings.from_settings(s3)).storage.prepare_spark(spark, warehouse)
    a, b, stream = topic_name("cwa"), topic_name("cwb"), stream_name("cwk")
    devkafka.create_topic(kafka, a, partitions=4)
    devkafka.create_topic(kafka, b, partitions=2)
    create_stream(aws, stream, shards=2)
    properties = tmp_path / "worker.properties"
    properties.write_text("".join(f"{k}={v}\n" for k, v in {
        "listeners": "http://127.0.0.1:0", "floeline.warehouse": warehouse,
        "floeline.spark.master": cluster.master_url, "bootstrap.servers": kafka, **s3}.items()))
    tables = {name: f"{warehouse}/FLOELINE/PUBLIC/{table}"
              for name, table in (("ka", a.upper()), ("kb", b.upper()), ("kin", stream.upper()))}
    total_a, total_b = 2000, 1000
    produce_numbered(kafka, a, 4, 0, total_a)
    produce_numbered(kafka, b, 2, 0, total_b)
    placed = put(aws, stream, [{"n": i} for i in range(100)])

    driver = Driver("--worker", str(properties))
    with LostHost(cluster) as host:
        try:
            line = driver.wait_for("rest.url", lambda: next(
                (l for l in driver.lines if l.startswith("rest.url=")), None))
            url = line.strip().split("=", 1)[1]
            app = driver.text.split(" app=")[1].split()[0]
            kinesis = {"floeline.source": "kinesis", "kinesis.stream.name": stream,
                       "kinesis.application.name": f"app-{stream}", "aws.region": aws.region,
                       "aws.access.key.id": aws.access_key_id, "aws.secret.access.key": aws.secret_access_key,
                       "kinesis.endpoint": aws.kinesis_endpoint, "dynamodb.endpoint": aws.dynamodb_endpoint}
            connectors = {"ka": {"topics": a, "buffer.count.records": "1000"},
                          "kb": {"topics": b, "buffer.count.records": "1000"}, "kin": kinesis}
            for name, config in connectors.items():
                status, body = call(f"{url}/connectors", "POST",
                                    {"name": name, "config": {**config, "buffer.flush.time": "1"}})
                assert status == 201, body
            driver.wait_for("three connectors RUNNING",
                            lambda: states(url) == {"ka": "RUNNING", "kb": "RUNNING", "kin": "RUNNING"}, 300)

            driver.wait_for("the first wave in every table", lambda: landed(spark, tables, total_a, total_b,
                                                                             len(placed)), 600)
            assert_kafka_exactly_once(kafka_rows(spark, tables["ka"]), total_a, 4, "ka")
            assert_kafka_exactly_once(kafka_rows(spark, tables["kb"]), total_b, 2, "kb")
            assert sorted(kinesis_rows(spark, tables["kin"])) == sorted(placed)
            # The batches ran on the cluster: both workers run an executor of the worker's app.
            for i in range(2):
                assert any(e["appid"] == app for e in cluster.worker_state(i)["executors"])

            # A second wave, and a Spark worker host lost while the connectors land it.
            produce_numbered(kafka, a, 4, total_a, 20000)
            produce_numbered(kafka, b, 2, total_b, 6000)
            total_a, total_b = total_a + 20000, total_b + 6000
            placed += put(aws, stream, [{"n": i} for i in range(100, 200)])
            driver.wait_for("the second wave under way",
                            lambda: len(kafka_rows(spark, tables["ka"])) > 5000, 300)
            killed = host.kill(driver, app)
            rows_at_kill = len(kafka_rows(spark, tables["ka"]))
            assert rows_at_kill < total_a, "the second wave landed before the kill: make it larger"
            mid_batch = host.assert_mid_batch(driver, app)
            driver.wait_for("every record after the kill",
                            lambda: landed(spark, tables, total_a, total_b, len(placed)), 900)
            assert states(url) == {"ka": "RUNNING", "kb": "RUNNING", "kin": "RUNNING"}
            print(f"killed Spark worker {killed} at {rows_at_kill} of {total_a} rows of ka; {mid_batch}")
            assert driver.stop() == 0, driver.floeline_lines()[-6000:]
        finally:
            driver.kill()
    assert_kafka_exactly_once(kafka_rows(spark, tables["ka"]), total_a, 4, "ka")
    assert_kafka_exactly_once(kafka_rows(spark, tables["kb"]), total_b, 2, "kb")
    kin = kinesis_rows(spark, tables["kin"])
    assert len(kin) == len(set(kin)) and set(kin) == set(placed), "kin: not every record once"


def test_submit_lands_every_record_once_through_the_loss_of_an_executor_host(
        cluster, kafka, spark, tmp_path, topic_name):
    topic = topic_name("cluster_kill")
    devkafka.create_topic(kafka, topic, partitions=4)
    total = 30000
    produce_numbered(kafka, topic, 4, 0, total)
    warehouse = tmp_path / "wh"  # every process of this machine sees it: a shared file system
    config = tmp_path / "c.properties"
    config.write_text(f"name=killed_host\ntopics={topic}\nbootstrap.servers={kafka}\n"
                      f"floeline.warehouse={warehouse}\nbuffer.flush.time=1\nbuffer.count.records=1000\n")
    table = str(warehouse / "FLOELINE" / "PUBLIC" / topic.upper())

    driver = Driver(str(config), "--master", cluster.master_url, "--until-caught-up")
    with LostHost(cluster) as host:
        try:
            app = driver.wait_for("the application's id", lambda: " app=" in driver.text
                                  and driver.text.split(" app=")[1].split()[0], 300)
            driver.wait_for("a batch committed", lambda: any(l.startswith("batch ") for l in driver.lines), 300)
            killed = host.kill(driver, app)
            rows_at_kill = len(kafka_rows(spark, table))
            assert rows_at_kill < total, "every record landed before the kill: produce more"
            mid_batch = host.assert_mid_batch(driver, app)
            assert driver.proc.wait(900) == 0, driver.floeline_lines()[-6000:]
            print(f"killed Spark worker {killed} at {rows_at_kill} of {total} rows; {mid_batch}")
        finally:
            driver.kill()
    assert_kafka_exactly_once(kafka_rows(spark, table), total, 4, topic.upper())
