"""The warehouse's storage seam (locations, schemes, S3 settings) and the owner rule of
tables on S3 (warehouse/owners.py), checked on the local storage, whose
compare-and-swap is the same contract as S3's conditional writes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from floeline.config import config_from_dict, locations
from floeline.config.locations import S3Settings
from floeline.errors import ConfigError, TableError
from floeline.warehouse import owners, storage
from floeline.warehouse.catalog import Warehouse
from floeline.warehouse.owners import OwnershipLost, TableOwned, TableOwners
from floeline.warehouse.storage import LocalStorage, S3Storage

BASE = {"name": "orders-sink", "topics": "orders"}
S3_KEYS = {"floeline.warehouse.s3.endpoint": "http://127.0.0.1:5000",
           "floeline.warehouse.s3.access.key.id": "AKIDEXAMPLE",
           "floeline.warehouse.s3.secret.access.key": "very-secret-key"}


# ---- locations -----------------------------------------------------------------------


def test_locations_by_scheme(tmp_path):
    assert locations.normalize("s3a://bucket/wh/") == "s3a://bucket/wh"
    assert locations.normalize("s3://bucket/a/b") == "s3a://bucket/a/b"  # s3:// taken as s3a://
    assert locations.normalize("s3a://bucket") == "s3a://bucket"
    assert locations.normalize(f"file://{tmp_path}/wh") == str(tmp_path / "wh")
    assert locations.normalize("rel/wh") == os.path.abspath("rel/wh")
    with pytest.raises(ConfigError, match="has no bucket"):
        locations.normalize("s3a:///wh")
    with pytest.raises(ConfigError, match="gs:// is not supported"):
        locations.normalize("gs://bucket/wh")
    assert locations.join("s3a://b/wh", "DB", "S", "T") == "s3a://b/wh/DB/S/T"
    assert locations.join("s3a://b", "_checkpoints/x") == "s3a://b/_checkpoints/x"
    assert locations.join("/wh", "DB", "T") == "/wh/DB/T"
    assert locations.split_s3("s3a://b/wh/DB/x.json") == ("b", "wh/DB/x.json")
    assert locations.name_of("s3a://b/wh/T/") == "T"
    assert isinstance(storage.storage_for("/wh"), LocalStorage)
    assert isinstance(storage.storage_for("s3a://b/wh", S3Settings()), S3Storage)


def test_an_s3_warehouse_lays_tables_out_under_its_prefix():
    wh = Warehouse("s3://bucket/wh/", S3Settings(endpoint="http://127.0.0.1:1"))
    assert wh.location == "s3a://bucket/wh" and not wh.is_local
    assert wh.table("DB", "S", "T").path == "s3a://bucket/wh/DB/S/T"
    assert wh.storage.single_writer and owners.needed(wh)
    with pytest.raises(TableError, match="on S3: this needs a local warehouse"):
        wh.root


def test_a_local_warehouse_is_as_before(tmp_path):
    wh = Warehouse(tmp_path / "wh")
    assert wh.root == tmp_path / "wh" and wh.location == str(tmp_path / "wh")
    assert wh.table("DB", "S", "T").path == str(tmp_path / "wh" / "DB" / "S" / "T")
    assert not owners.needed(wh)
    (tmp_path / "wh" / "DB" / "S" / "T" / "_delta_log").mkdir(parents=True)
    (tmp_path / "wh" / "DB" / "S" / "_pipes").mkdir()
    assert [t.full_name for t in wh.list_tables()] == ["DB.S.T"]
    assert wh.schemas() == [("DB", "S")]


def test_s3_bucket_settings_for_s3a():
    settings = S3Storage(S3Settings(endpoint="http://127.0.0.1:5000", region="eu-west-1",
                                    access_key_id="AK", secret_access_key="SK")).hadoop_settings("b")
    assert settings == {
        "fs.s3a.bucket.b.endpoint.region": "eu-west-1", "fs.s3a.bucket.b.endpoint": "http://127.0.0.1:5000",
        "fs.s3a.bucket.b.path.style.access": "true", "fs.s3a.bucket.b.connection.ssl.enabled": "false",
        "fs.s3a.bucket.b.access.key": "AK", "fs.s3a.bucket.b.secret.key": "SK",
        "fs.s3a.bucket.b.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"}
    # Without keys or endpoint: AWS itself and s3a's default credential chain.
    assert S3Storage(S3Settings()).hadoop_settings("b") == {"fs.s3a.bucket.b.endpoint.region": "us-east-1"}


# ---- S3 settings ---------------------------------------------------------------------


def test_s3_settings_from_keys_then_the_aws_environment():
    env = {"AWS_ENDPOINT_URL": "http://env:1", "AWS_ACCESS_KEY_ID": "ENVKEY",
           "AWS_SECRET_ACCESS_KEY": "envsecret", "AWS_DEFAULT_REGION": "ap-south-1"}
    from_env = S3Settings.from_settings({}, env)
    assert (from_env.endpoint, from_env.access_key_id, from_env.region) == ("http://env:1", "ENVKEY", "ap-south-1")
    given = S3Settings.from_settings(S3_KEYS, env)
    assert (given.endpoint, given.access_key_id, given.secret_access_key) == (
        "http://127.0.0.1:5000", "AKIDEXAMPLE", "very-secret-key")
    assert S3Settings.from_settings({}, {"AWS_ENDPOINT_URL_S3": "http://s3:2",
                                         "AWS_ENDPOINT_URL": "http://other:3"}).endpoint == "http://s3:2"
    assert S3Settings.from_settings({}, {}) == S3Settings()  # the default chain, us-east-1
    with pytest.raises(ConfigError, match="set floeline.warehouse.s3.secret.access.key"):
        S3Settings.from_settings({"floeline.warehouse.s3.access.key.id": "AK"}, {})
    assert "very-secret-key" not in repr(given) + given.describe()


def test_connector_config_with_an_s3_warehouse(monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    c = config_from_dict({**BASE, "floeline.warehouse": "s3://bucket/wh/", **S3_KEYS})
    assert c.warehouse == "s3a://bucket/wh"
    assert c.checkpoint_dir == "s3a://bucket/wh/_checkpoints/orders-sink"
    assert c.warehouse_s3.endpoint == "http://127.0.0.1:5000"
    assert "very-secret-key" not in repr(c)
    local = config_from_dict(BASE)
    assert local.warehouse == "./warehouse" and local.warehouse_s3 is None
    # A local warehouse with an S3 checkpoint still needs the S3 settings.
    mixed = config_from_dict({**BASE, "floeline.checkpoint.dir": "s3a://b/cp", **S3_KEYS})
    assert mixed.warehouse_s3 is not None and mixed.checkpoint_dir == "s3a://b/cp"


@pytest.mark.parametrize("settings, message", [
    ({"floeline.warehouse": "gs://b/wh"}, "floeline.warehouse: warehouse location 'gs://b/wh': gs:// is not supported"),
    ({"floeline.warehouse.s3.endpoint": "http://x:1"}, "set for an S3 warehouse, but floeline.warehouse=./warehouse is local"),
    ({"floeline.warehouse": "s3a://b/wh", "snowflake.ingestion.method": "SNOWPIPE"},
     "snowflake.ingestion.method=SNOWPIPE keeps its staged files in a local warehouse"),
    ({"floeline.warehouse": "s3a://b/wh", "floeline.warehouse.s3.secret.access.key": "hidden-value"},
     "need both floeline.warehouse.s3.access.key.id and floeline.warehouse.s3.secret.access.key"),
])
def test_s3_warehouse_config_errors(settings, message, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    with pytest.raises(ConfigError) as info:
        config_from_dict({**BASE, **settings})
    assert message in str(info.value)
    assert "hidden-value" not in str(info.value)


# ---- the local storage's contract ----------------------------------------------------


def test_local_storage_compare_and_swap(tmp_path):
    files = LocalStorage()
    where = str(tmp_path / "a" / "rec.json")
    assert files.read_text(where) is None and files.version(where) is None
    first = files.put_if(where, "one", None)
    assert first is not None and files.read_text(where) == "one"
    assert files.put_if(where, "two", None) is None  # exists: not created twice
    second = files.put_if(where, "two", first)
    assert second is not None and files.read_text(where) == "two"
    assert files.put_if(where, "three", first) is None  # a stale version loses
    assert not files.delete_if(where, first) and files.delete_if(where, second)
    assert files.children(str(tmp_path / "a")) == ([], ["rec.json.lock"])


# ---- owners --------------------------------------------------------------------------


@pytest.fixture
def wh(tmp_path):
    return Warehouse(tmp_path / "wh")


def record(wh, ref):
    return json.loads(wh.storage.read_text(owners.record_location(wh, ref)))


def write_record(wh, ref, **fields):
    base = {"connector": "other", "host": socket.gethostname(), "pid": os.getpid(), "token": "t",
            "started_ms": 0, "heartbeat_ms": owners._now_ms(), "timeout_ms": 60000}
    wh.storage.write_text(owners.record_location(wh, ref), json.dumps({**base, **fields}))


def test_an_owner_takes_a_free_table_and_releases_it(wh):
    ref = wh.table("DB", "S", "T")
    mine = TableOwners(wh, "conn_a", timeout_ms=60000)
    mine.acquire(ref)
    mine.acquire(ref)  # again: already ours
    held = record(wh, ref)
    assert (held["connector"], held["host"], held["pid"]) == ("conn_a", socket.gethostname(), os.getpid())
    mine.check()
    mine.renew()
    assert record(wh, ref)["heartbeat_ms"] >= held["heartbeat_ms"]
    mine.release()
    assert wh.storage.read_text(owners.record_location(wh, ref)) is None


def test_another_live_connector_is_refused_naming_the_owner(wh):
    ref = wh.table("DB", "S", "T")
    write_record(wh, ref, connector="conn_a", host="node-7", pid=4242)
    with pytest.raises(TableOwned) as refused:
        TableOwners(wh, "conn_b").acquire(ref)
    message = str(refused.value)
    assert "table DB.S.T is being written by connector 'conn_a' (host node-7, pid 4242" in message
    assert "taken over after 60 s (floeline.warehouse.owner.timeout.ms)" in message


def test_a_stale_owner_is_taken_over(wh):
    ref = wh.table("DB", "S", "T")
    write_record(wh, ref, connector="conn_a", host="node-7", heartbeat_ms=owners._now_ms() - 61000)
    TableOwners(wh, "conn_b").acquire(ref)
    assert record(wh, ref)["connector"] == "conn_b"


def test_an_owner_whose_process_is_gone_on_this_host_is_taken_over_at_once(wh):
    ref = wh.table("DB", "S", "T")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    write_record(wh, ref, connector="conn_a", pid=gone.pid)
    TableOwners(wh, "conn_b").acquire(ref)
    assert record(wh, ref)["connector"] == "conn_b"


def test_an_earlier_run_of_the_same_connector_elsewhere_is_waited_for(wh):
    """A record of this connector from another host (a rescheduled run): taken once it
    stops renewing; refused when its heartbeat moves (a live second copy)."""
    ref = wh.table("DB", "S", "T")
    now = owners._now_ms()
    write_record(wh, ref, connector="conn_a", host="node-7", heartbeat_ms=now - 500, timeout_ms=1500)
    TableOwners(wh, "conn_a", poll_s=0.1).acquire(ref)  # went stale within its timeout
    assert record(wh, ref)["host"] == socket.gethostname()

    other = wh.table("DB", "S", "U")
    # Renewed now, not at `now`: its 1.5 s must not be spent by the wait above.
    write_record(wh, other, connector="conn_a", host="node-7", heartbeat_ms=owners._now_ms(), timeout_ms=1500)
    mover = TableOwners(wh, "conn_a", poll_s=0.2)
    location = owners.record_location(wh, other)

    def beat_once():
        time.sleep(0.5)
        data = json.loads(wh.storage.read_text(location))
        wh.storage.write_text(location, json.dumps({**data, "heartbeat_ms": owners._now_ms()}))

    threading.Thread(target=beat_once).start()
    with pytest.raises(TableOwned, match="connector 'conn_a' \\(host node-7"):
        mover.acquire(other)


def test_an_owner_that_lost_its_record_stops_before_committing(wh):
    ref = wh.table("DB", "S", "T")
    mine = TableOwners(wh, "conn_a", timeout_ms=60000)
    mine.acquire(ref)
    write_record(wh, ref, connector="conn_b", host="node-9", pid=1)  # taken over meanwhile
    mine.renew()
    with pytest.raises(OwnershipLost, match="no longer owns table DB.S.T: its owner record was "
                                            "taken over by connector 'conn_b' \\(host node-9"):
        mine.check()
    mine.release()  # leaves the new owner's record alone
    assert record(wh, ref)["connector"] == "conn_b"


def test_an_owner_not_renewed_in_time_stops_before_committing(wh):
    ref = wh.table("DB", "S", "T")
    mine = TableOwners(wh, "conn_a", timeout_ms=1000)
    mine.acquire(ref)
    mine._stop.set()  # the heartbeat thread stalls
    name, (r, version, _renewed) = next(iter(mine.held.items()))
    mine.held[name] = (r, version, owners._now_ms() - 2000)
    with pytest.raises(OwnershipLost, match="not renewed for 2 s"):
        mine.check()


def test_a_standby_waits_for_its_own_connectors_live_owner(wh):
    """A source with a standby mode (Kinesis): a second run of the connector waits while
    the first renews its record, and takes the table once it is released."""
    ref = wh.table("DB", "S", "T")
    first = TableOwners(wh, "conn_a", timeout_ms=1000)
    first.acquire(ref)  # renews every 0.25 s
    standby = TableOwners(wh, "conn_a", poll_s=0.1, standby=True)
    taken = threading.Event()
    threading.Thread(target=lambda: (standby.acquire(ref), taken.set()), daemon=True).start()
    assert not taken.wait(2.5)  # two and a half timeouts: still waiting, the first is alive
    first.release()
    assert taken.wait(5)
    assert record(wh, ref)["token"] == standby.token
    with pytest.raises(TableOwned):  # another connector is still refused
        TableOwners(wh, "conn_b", standby=True).acquire(ref)
    standby.release()
