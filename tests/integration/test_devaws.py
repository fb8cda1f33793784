"""The local AWS endpoints: `floeline aws start|status|stop` from the command line, real
Kinesis and DynamoDB calls with boto3, and the 127.0.0.1-only listeners.

The CLI test uses its own state dir and free ports; the round trips use the session's
`aws` fixture (conftest.py)."""

import json
import socket
import subprocess
import sys
import uuid
from importlib import resources
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError

from floeline.dev.services import free_port
from floeline.dev import aws as devaws
from floeline.errors import SetupError

pytestmark = pytest.mark.integration


def port_accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def floeline_aws(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "floeline.cli", "aws", *args],
                          capture_output=True, text=True, timeout=120)


def listening_addresses(pid: int) -> list[tuple[str, int]]:
    """(address, port) of each TCP socket process `pid` listens on, from /proc: its
    socket inodes matched against /proc/net/tcp and tcp6."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().name
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                address, port = local.split(":")
                found.append((_address(address), int(port, 16)))
    return found


def _address(hex_address: str) -> str:
    if len(hex_address) == 8:  # IPv4, little-endian
        return socket.inet_ntop(socket.AF_INET, bytes.fromhex(hex_address)[::-1])
    words = [bytes.fromhex(hex_address[i:i + 8])[::-1] for i in range(0, 32, 8)]
    return socket.inet_ntop(socket.AF_INET6, b"".join(words))


@pytest.fixture
def state(tmp_path):
    yield tmp_path / "aws"
    devaws.stop(tmp_path / "aws")  # never leak a service, even when a test fails


def test_cli_start_status_stop(state):
    kinesis_port, moto_port = free_port(), free_port()
    expected = (f"kinesis.endpoint=http://127.0.0.1:{kinesis_port}\n"
                + "".join(f"{service}.endpoint=http://127.0.0.1:{moto_port}\n"
                          for service in ("dynamodb", "s3", "sqs", "firehose")))
    ports = ["--state-dir", str(state), "--kinesis-port", str(kinesis_port),
             "--moto-port", str(moto_port)]

    started = floeline_aws("start", *ports)
    assert (started.returncode, started.stdout) == (0, expected), started.stderr
    pids = {name: (state / f"{name}.pid").read_text() for name in ("kinesis", "moto")}

    again = floeline_aws("start", "--state-dir", str(state), "--kinesis-port", str(free_port()))
    assert (again.returncode, again.stdout) == (0, expected), again.stderr
    assert {name: (state / f"{name}.pid").read_text() for name in pids} == pids

    status = floeline_aws("status", "--state-dir", str(state))
    assert (status.returncode, status.stdout) == (0, expected)
    assert (state / "kinesis.log").exists() and (state / "moto.log").exists()

    # Both services listen on 127.0.0.1 only (kinesis-local also opens an HTTPS port)
    if Path("/proc/self/fd").exists():
        for name in pids:
            addresses = listening_addresses(int(pids[name]))
            assert addresses and {address for address, _ in addresses} == {"127.0.0.1"}, addresses
            assert (kinesis_port if name == "kinesis" else moto_port) in {p for _, p in addresses}

    stopped = floeline_aws("stop", "--state-dir", str(state))
    assert (stopped.returncode, stopped.stdout) == (0, "stopped\n")
    assert not port_accepts(kinesis_port) and not port_accepts(moto_port)
    status = floeline_aws("status", "--state-dir", str(state))
    assert (status.returncode, status.stdout) == (1, "not running\n")
    stopped = floeline_aws("stop", "--state-dir", str(state))
    assert (stopped.returncode, stopped.stdout) == (0, "not running\n")


def test_port_taken_by_another_program(state):
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        taken = floeline_aws("start", "--state-dir", str(state), "--kinesis-port", str(free_port()),
                             "--moto-port", str(port))
    assert taken.returncode == 1
    assert f"port {port}" in taken.stderr and "--moto-port" in taken.stderr \
        and "FLOELINE_MOTO_PORT" in taken.stderr
    assert devaws.running_endpoints(state) == {}  # nothing was left running


def test_a_service_that_dies_is_reported_with_its_log(state, monkeypatch):
    monkeypatch.setattr(devaws, "_moto_command", lambda port: (
        [sys.executable, "-c", "import sys; sys.exit('moto cannot start: simulated')"], None))
    with pytest.raises(SetupError, match="(?s)dynamodb.*exited during start.*simulated"):
        devaws.start(state, kinesis_port=free_port(), moto_port=free_port())
    assert devaws.running_endpoints(state) == {}


def test_kinesis_round_trip(aws):
    kinesis = boto3.client("kinesis", endpoint_url=aws.kinesis_endpoint, region_name=aws.region,
                           aws_access_key_id=aws.access_key_id,
                           aws_secret_access_key=aws.secret_access_key)
    stream = f"devaws-{uuid.uuid4().hex[:8]}"
    kinesis.create_stream(StreamName=stream, ShardCount=1)
    kinesis.get_waiter("stream_exists").wait(StreamName=stream,
                                             WaiterConfig={"Delay": 0.2, "MaxAttempts": 50})
    put = kinesis.put_record(StreamName=stream, Data=b'{"order_id": 1}', PartitionKey="k1")

    iterator = kinesis.get_shard_iterator(StreamName=stream, ShardId=put["ShardId"],
                                          ShardIteratorType="TRIM_HORIZON")["ShardIterator"]
    records = kinesis.get_records(ShardIterator=iterator)["Records"]
    assert [(r["Data"], r["PartitionKey"], r["SequenceNumber"]) for r in records] == \
        [(b'{"order_id": 1}', "k1", put["SequenceNumber"])]


def test_dynamodb_round_trip(aws):
    dynamodb = boto3.client("dynamodb", endpoint_url=aws.dynamodb_endpoint, region_name=aws.region,
                            aws_access_key_id=aws.access_key_id,
                            aws_secret_access_key=aws.secret_access_key)
    table = f"devaws-{uuid.uuid4().hex[:8]}"
    dynamodb.create_table(TableName=table, BillingMode="PAY_PER_REQUEST",
                          KeySchema=[{"AttributeName": "leaseKey", "KeyType": "HASH"}],
                          AttributeDefinitions=[{"AttributeName": "leaseKey",
                                                 "AttributeType": "S"}])
    dynamodb.get_waiter("table_exists").wait(TableName=table,
                                             WaiterConfig={"Delay": 0.2, "MaxAttempts": 50})
    lease = {"leaseKey": {"S": "shardId-000000000000"}, "owner": {"S": "worker-1"}}
    dynamodb.put_item(TableName=table, Item=lease)
    got = dynamodb.get_item(TableName=table, Key={"leaseKey": lease["leaseKey"]},
                            ConsistentRead=True)
    assert got["Item"] == lease

    with pytest.raises(ClientError) as failed:  # a lease taken only if nobody holds it
        dynamodb.put_item(TableName=table, Item={**lease, "owner": {"S": "worker-2"}},
                          ConditionExpression="attribute_not_exists(leaseKey)")
    assert failed.value.response["Error"]["Code"] == "ConditionalCheckFailedException"


def test_aws_fixture_settings(aws):
    settings = aws.settings()
    assert (settings.region, settings.kinesis_endpoint, settings.dynamodb_endpoint) == \
        ("us-east-1", aws.kinesis_endpoint, aws.dynamodb_endpoint)
    assert settings.access_key_id and settings.secret_access_key


def test_loopback_preload_covers_every_listen_form(tmp_path):
    """resources/loopback-only.js turns each form of net.Server.listen to 127.0.0.1."""
    preload = tmp_path / "loopback-only.js"
    preload.write_text(resources.files("floeline.resources").joinpath(preload.name).read_text())
    script = """
const net = require('net');
const forms = [
  (s, done) => s.listen(0, done),
  (s, done) => s.listen('0', done),
  (s, done) => s.listen(0, '0.0.0.0', done),
  (s, done) => s.listen(0, '::', 511, done),
  (s, done) => s.listen(0, 511, done),
  (s, done) => s.listen({port: 0, host: '0.0.0.0'}, done),
  (s, done) => s.listen({port: 0}, done),
  (s, done) => s.listen(done),
];
Promise.all(forms.map((form) => new Promise((resolve) => {
  const server = net.createServer();
  form(server, () => {
    const address = server.address().address;
    server.close();
    resolve(address);
  });
}))).then((addresses) => console.log(JSON.stringify(addresses)));
"""
    done = subprocess.run(["node", "--require", str(preload), "-e", script],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["127.0.0.1"] * 8
