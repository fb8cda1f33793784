"""One real Kafka broker and one Spark session for the whole test run."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from floeline.dev import kafka as devkafka
from floeline.dev.services import free_port


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """bootstrap.servers of a broker started for this run (stopped at the end)."""
    state = tmp_path_factory.mktemp("kafka")
    bootstrap = devkafka.start(state, free_port())
    yield bootstrap
    devkafka.stop(state)


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory):
    """The state dir of a SASL_SSL broker (PLAIN and SCRAM-SHA-512, TLS) started for
    this run on ports of its own, for the security tests only (stopped at the end);
    `devkafka.secure_client_settings(state)` gives a client's keys."""
    state = tmp_path_factory.mktemp("kafka-secure")
    devkafka.start(state, free_port(), secure=True)
    yield state
    devkafka.stop(state, secure=True)


@pytest.fixture(scope="session")
def spark():
    """This run's Spark session: local[2], or the cluster FLOELINE_TEST_SPARK_MASTER names
    (spark://HOST:PORT: test_cluster.py runs floeline's Kafka reader's tests so)."""
    from floeline.spark import get_spark

    return get_spark(os.environ.get("FLOELINE_TEST_SPARK_MASTER", "local[2]"))


@pytest.fixture(autouse=True)
def _no_query_outlives_its_test(request):
    """Streaming queries a test left running (a pipe service it did not stop) are
    stopped after it, so they do not poll a deleted stage for the rest of the run."""
    yield
    if "spark" in request.fixturenames:
        for query in request.getfixturevalue("spark").streams.active:
            query.stop()


_counter = itertools.count()


@pytest.fixture
def topic_name():
    """A fresh topic name per call: tests never see each other's records."""
    def make(prefix: str = "t") -> str:
        return f"{prefix}_{uuid.uuid4().hex[:8]}_{next(_counter)}"
    return make


@pytest.fixture
def warehouse(tmp_path):
    return str(tmp_path / "warehouse")


@pytest.fixture
def make_config(kafka, warehouse):
    """A ConnectorConfig for the test broker and warehouse, with overrides."""
    from floeline.config import config_from_dict

    def make(**settings):
        base = {"name": f"c{uuid.uuid4().hex[:6]}", "bootstrap.servers": kafka,
                "floeline.warehouse": warehouse, "buffer.flush.time": "1"}
        if os.environ.get("FLOELINE_TEST_KAFKA_READER"):
            # The whole suite over another Kafka reader (floeline.kafka.reader).
            base["floeline.kafka.reader"] = os.environ["FLOELINE_TEST_KAFKA_READER"]
        base.update({k.replace("__", "."): str(v) for k, v in settings.items()})
        return config_from_dict(base)
    return make


@pytest.fixture
def run_connector(spark):
    """Run a connector until caught up, in this process's Spark session."""
    from floeline.ingest import Connector

    def run(config):
        connector = Connector(config, spark)
        connector.run(until_caught_up=True)
        return connector
    return run


@pytest.fixture
def read_table(spark, warehouse):
    def read(name, database="FLOELINE", schema="PUBLIC", where=None):
        from floeline.warehouse.tables import read_declared

        df = read_declared(spark, os.path.join(warehouse, database, schema, name))
        return df.where(where) if where else df
    return read


@pytest.fixture
def wait_for_rows(read_table):
    """Waits until a running connector's table holds `count` rows; once the connector's
    run has ended, raises its failure at once rather than waiting out the timeout. A
    batch's failure while the run goes on (a transient error restarted, a recreated
    topic followed under fail.on.data.loss=false) is the connector's to handle."""
    def wait(table: str, count: int, connector, timeout_s: float = 180):
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            try:
                if read_table(table).count() >= count:
                    return
            except Exception:  # noqa: BLE001 - the first batch creates the table
                pass
            running, state = connector.health()
            if not running:
                if connector.failure is not None:
                    raise connector.failure
                raise AssertionError(f"connector {state} before {table} reached {count} rows")
            time.sleep(0.5)
        raise AssertionError(f"{table} did not reach {count} rows in {timeout_s} s")
    return wait


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory):
    """Base URL of a Confluent-compatible schema registry (Apicurio Registry, in
    memory) started for this run, e.g. http://127.0.0.1:PORT/apis/ccompat/v7."""
    from floeline.dev import registry as devregistry

    state = tmp_path_factory.mktemp("registry")
    url = devregistry.start(state, free_port())
    yield url
    devregistry.stop(state)


@pytest.fixture(scope="session")
def cdc_rig(kafka):
    """A real PostgreSQL (wal_level=logical) and a Kafka Connect worker with Debezium's
    PostgreSQL connector on the test broker, for the change data capture tests (stopped
    at the end). `floeline.dev.debezium.capture` adds a connector to it."""
    from floeline.dev.debezium import start_rig

    # Not under pytest's temporary directory: PostgreSQL runs as another user, which
    # needs o+x on every parent, and a second pytest session on the machine resets
    # pytest-of-<user> to 0700 (the server then PANICs on its own pg_control).
    state = Path(tempfile.mkdtemp(prefix="floeline-cdc-"))
    rig = start_rig(kafka, state)
    yield rig
    rig.stop()
    shutil.rmtree(state, ignore_errors=True)


class LocalAws:
    """The `aws` fixture: endpoints and dummy credentials of the local AWS services."""

    region = "us-east-1"
    access_key_id = "floeline-test"
    secret_access_key = "floeline-test"

    def __init__(self, kinesis_endpoint: str, dynamodb_endpoint: str):
        self.kinesis_endpoint = kinesis_endpoint
        self.dynamodb_endpoint = dynamodb_endpoint
        self.moto_endpoint = dynamodb_endpoint  # moto also serves S3, SQS and Firehose

    def client(self, service: str):
        """A boto3 client of the local `service` (kinesis, dynamodb, s3, sqs, firehose)."""
        import boto3

        endpoint = self.kinesis_endpoint if service == "kinesis" else self.moto_endpoint
        return boto3.client(service, endpoint_url=endpoint, region_name=self.region,
                            aws_access_key_id=self.access_key_id,
                            aws_secret_access_key=self.secret_access_key)

    def settings(self):
        from floeline.config.kinesis import AwsSettings

        return AwsSettings(region=self.region, access_key_id=self.access_key_id,
                           secret_access_key=self.secret_access_key,
                           kinesis_endpoint=self.kinesis_endpoint,
                           dynamodb_endpoint=self.dynamodb_endpoint)


@pytest.fixture(scope="session")
def aws(tmp_path_factory):
    """Local Kinesis (kinesis-local) and DynamoDB, S3, SQS, Firehose (moto) started for
    this run (stopped at the end)."""
    from floeline.dev import aws as devaws

    state = tmp_path_factory.mktemp("aws")
    endpoints = devaws.start(state, kinesis_port=free_port(), moto_port=free_port())
    yield LocalAws(endpoints["kinesis"], endpoints["dynamodb"])
    devaws.stop(state)


# ---- stages and COPY INTO through `floeline sql` (test_stage_*.py)


@pytest.fixture
def wh(tmp_path):
    """A warehouse of this test's own."""
    from floeline.warehouse.catalog import Warehouse

    return Warehouse(tmp_path / "warehouse")


@pytest.fixture
def stage_dir(tmp_path):
    """A directory for a file:// stage."""
    path = tmp_path / "landing"
    path.mkdir()
    return path


@pytest.fixture
def sql(spark, wh):
    """Run a script in `wh`; the last statement's rows as dicts."""
    from floeline.sql.script import run_script

    def run(script: str):
        results = run_script(spark, script, wh)
        return [r.asDict() for r in results[-1][1].collect()]
    return run
