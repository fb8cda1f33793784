"""Change data capture end to end (issue 27): a real PostgreSQL, Debezium's PostgreSQL
connector in a real Kafka Connect worker, the local broker and `floeline run` with
insert.mode=upsert. A snapshot (op=r) then streamed inserts, updates (one of the key),
deletes with their tombstones, a column added with ALTER TABLE, a SIGKILL of
floeline mid-stream and a TRUNCATE (truncate.enabled=true); after each phase the Delta table equals the PostgreSQL table row
for row, column for column, its values compared with types normalized (`same`): the
columns must have the types Debezium's logical types stand for (Date -> DATE,
MicroTimestamp -> TIMESTAMP_NTZ, ZonedTimestamp -> TIMESTAMP, Decimal -> NUMBER or its
exact text), which the converters' handling of those types provides."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from decimal import Decimal, InvalidOperation

import pytest
from records_io import consume_all

from floeline.dev.debezium import capture, connector_config, delete_connector
from floeline.dev.postgres import LocalPostgres
from floeline.errors import SetupError

pytestmark = pytest.mark.integration

TABLE = "CUSTOMERS"
SETTLE_TIMEOUT_S = 420  # a MERGE batch takes a minute on a loaded 2-core machine

CREATE = """create table {t} (
    id integer primary key,
    account bigint not null,
    name text not null,
    balance numeric(10,2),
    born date,
    updated_at timestamp,
    created_at timestamptz,
    active boolean,
    attrs jsonb,
    ref uuid)"""

SNAPSHOT_ROWS = """insert into {t} values
    (1, 9000000001, 'Ada', 1234.50, '1990-03-01', '2026-01-02 03:04:05.123456',
     '2026-01-02 03:04:05.123456+00', true, '{{"tier": "gold"}}', '6f1c1d2e-0000-4000-8000-000000000001'),
    (2, 9000000002, 'Grace', -0.01, '1906-12-09', '1999-12-31 23:59:59',
     '1999-12-31 23:59:59-05', false, '{{}}', '6f1c1d2e-0000-4000-8000-000000000002'),
    (3, 9000000003, 'Linus', 0.00, '1969-12-28', '1970-01-01 00:00:00',
     '1970-01-01 00:00:00+00', null, null, null),
    (4, 9000000004, 'Barbara', 99999999.99, '2000-02-29', null, null, true,
     '{{"nested": {{"k": [1, 2]}}}}', null)"""

STREAMED_CHANGES = [
    "insert into {t} values (5, 9000000005, 'Edsger', 5.05, '1930-05-11', '2026-06-30 12:00:00.5', "
    "'2026-06-30 12:00:00.5+02', true, '[1, \"two\"]', '6f1c1d2e-0000-4000-8000-000000000005'), "
    "(6, 9000000006, 'Frances', null, null, null, null, null, null, null)",
    "update {t} set name = 'Ada L.', balance = balance + 10.25, active = false where id = 1",
    "update {t} set id = 20 where id = 2",  # the key itself: the old key must go
    "delete from {t} where id = 3",
    "begin; update {t} set balance = 1 where id = 4; update {t} set balance = 2 where id = 4; commit",
    "insert into {t} (id, account, name) values (7, 9000000007, 'Tony')",
    "delete from {t} where id = 7",
    "insert into {t} (id, account, name) values (7, 9000000077, 'Tony H.')",
]

BURST_ROWS = 200  # inserted and updated while floeline runs (batches of 50), then SIGKILL


def after_kill_changes(t: str) -> list[str]:
    return [
        f"alter table {t} add column email text",
        f"update {t} set email = 'ada@example.com' where id = 1",
        f"insert into {t} (id, account, name, email) values (8, 9000000008, 'Barbara L.', 'bl@example.com')",
        f"delete from {t} where id between 1000 and 1049",
        f"update {t} set email = 'n' || id || '@example.com', balance = balance * 2 where id between 1050 and 1099",
        f"update {t} set id = id + 10000 where id between 1100 and 1109",
    ]


@pytest.fixture
def source(cdc_rig, kafka):
    """A fresh PostgreSQL table captured by a Debezium connector of its own (JSON with
    schemas, so the types travel with the values); yields (table, topic)."""
    suffix = uuid.uuid4().hex[:8]
    table, prefix = f"customers_{suffix}", f"cdc_{suffix}"
    pg = cdc_rig.postgres
    pg.execute(CREATE.format(t=table), SNAPSHOT_ROWS.format(t=table))
    # skipped.operations=none: Debezium also captures TRUNCATE (it skips them by default)
    capture(cdc_rig.worker, prefix, connector_config(pg, prefix, [f"public.{table}"], schemas_enable=True,
                                                     **{"skipped.operations": "none"}))
    yield table, f"{prefix}.public.{table}"
    delete_connector(cdc_rig.worker, prefix)


def test_the_rig_captures_a_snapshot_then_each_change(cdc_rig, kafka):
    """The source alone (no floeline): Debezium reads the real PostgreSQL's rows (op=r),
    then its inserts, updates and deletes (op=d and a tombstone) from the WAL."""
    suffix = uuid.uuid4().hex[:8]
    table, prefix = f"rig_{suffix}", f"rig_{suffix}"
    pg = cdc_rig.postgres
    pg.execute(f"create table {table} (id bigint primary key, v text)",
               f"insert into {table} values (1, 'a'), (2, 'b')")
    capture(cdc_rig.worker, prefix, connector_config(pg, prefix, [f"public.{table}"],
                                                     schemas_enable=False))
    try:
        pg.execute(f"insert into {table} values (3, 'c')", f"update {table} set v = 'B' where id = 2",
                   f"delete from {table} where id = 1")
        records = consume_all(kafka, f"{prefix}.public.{table}", expected=6, timeout_s=90)
    finally:
        delete_connector(cdc_rig.worker, prefix)
    seen = [(json.loads(m.key())["id"], m.value() and json.loads(m.value())["op"]) for m in records]
    assert seen == [(1, "r"), (2, "r"), (3, "c"), (2, "u"), (1, "d"), (1, None)]
    update = json.loads(records[3].value())
    assert update["after"] == {"id": 2, "v": "B"} and update["source"]["table"] == table


def test_postgres_that_cannot_start_is_a_clear_error(tmp_path):
    """A port already taken: the server exits during start, and the error says so with
    its log's last lines."""
    import socket

    # Bound, so the server's bind fails; not listening, so the start's "select 1" probe
    # is refused at once instead of waiting out psycopg's 5 s connect timeout against a
    # socket that accepts the connection and never answers.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        with pytest.raises(SetupError, match=r"(?s)exited .* during start.*postgres\.log.*"
                                             r"could not (bind|create listen)"):
            LocalPostgres(tmp_path / "pg", port).start()


def test_postgres_changes_land_as_the_same_table(cdc_rig, source, kafka, tmp_path, warehouse, spark):
    table, topic = source
    pg = cdc_rig.postgres
    config = tmp_path / "cdc.properties"
    settings = [
        "name=cdc_postgres", f"topics={topic}", f"bootstrap.servers={kafka}",
        f"floeline.warehouse={warehouse}", f"snowflake.topic2table.map={topic}:{TABLE}",
        "snowflake.enable.schematization=true",
        "insert.mode=upsert", "primary.key.mode=record_key", "delete.enabled=true", "truncate.enabled=true",
        "key.converter=org.apache.kafka.connect.json.JsonConverter", "key.converter.schemas.enable=true",
        "value.converter=org.apache.kafka.connect.json.JsonConverter", "value.converter.schemas.enable=true",
        "buffer.flush.time=1"]
    # Small batches while it runs, so the SIGKILL lands mid-stream; one large catch-up
    # batch after the restart (the buffer settings are not part of its checkpoint).
    config.write_text("\n".join(settings + ["buffer.count.records=50"]) + "\n")
    table_path = os.path.join(warehouse, "FLOELINE", "PUBLIC", TABLE)

    run = FloelineRun(config)
    try:
        # 1. The snapshot (op=r) of the rows already there.
        settle(spark, pg, table, table_path, run, "the snapshot")
        # 2. Streamed inserts, updates (one of the key), deletes and their tombstones.
        for statement in STREAMED_CHANGES:
            pg_script(pg, statement.format(t=table))
        settle(spark, pg, table, table_path, run, "the streamed changes")
        # 3. A burst of changes, and floeline killed while it writes them.
        batches_before = run.batches()
        for start in range(1000, 1000 + BURST_ROWS, 50):
            pg_script(pg, f"insert into {table} (id, account, name, balance) select g, g * 10, "
                          f"'n' || g, g / 100.0 from generate_series({start}, {start + 49}) g")
            pg_script(pg, f"update {table} set active = true where id between {start} and {start + 24}")
        run.wait_for_batches(batches_before + 2)
        run.kill()
    finally:
        run.stop()
    # 4. Changes while it is down, a column added among them; then a restart.
    for statement in after_kill_changes(table):
        pg_script(pg, statement)
    config.write_text("\n".join(settings + ["buffer.count.records=10000"]) + "\n")
    restarted = FloelineRun(config)
    try:
        settle(spark, pg, table, table_path, restarted, "the restart after SIGKILL")
        # 5. TRUNCATE in one transaction with the rows after it: only those are left.
        pg_script(pg, f"begin; truncate {table}; insert into {table} (id, account, name) values "
                      f"(1, 9000000001, 'Ada again'), (30, 9000000030, 'New'); commit")
        settle(spark, pg, table, table_path, restarted, "a TRUNCATE and the rows inserted after it")
    finally:
        restarted.stop()
    assert restarted.returncode == 0, restarted.output()


# ---------------------------------------------------------------- floeline run

class FloelineRun:
    """`floeline run CONFIG` as a user starts it, its output collected."""

    def __init__(self, config):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "floeline.cli", "run", str(config)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                                     text=True)
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()
        self.returncode: int | None = None

    def output(self) -> str:
        return "".join(self.lines[-80:])

    def batches(self) -> int:
        return sum(line.startswith("batch ") for line in self.lines)

    def assert_alive(self) -> None:
        assert self.proc.poll() is None, f"floeline run exited ({self.proc.returncode}):\n{self.output()}"

    def wait_for_batches(self, count: int, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while self.batches() < count and time.monotonic() < deadline:
            self.assert_alive()
            time.sleep(0.2)
        assert self.batches() >= count, f"fewer than {count} batches:\n{self.output()}"

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        """SIGTERM (a clean stop) if still running; its exit code in `returncode`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(120)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        self.returncode = self.proc.returncode


# ---------------------------------------------------------------- the comparison

def settle(spark, pg, table, table_path, run: FloelineRun, phase: str) -> None:
    """Wait until the Delta table equals the PostgreSQL table (floeline running all the
    while); fail with the difference if it does not within SETTLE_TIMEOUT_S."""
    expected = postgres_rows(pg, table)
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    actual, compared = None, None
    while time.monotonic() < deadline:
        run.assert_alive()
        # The table changes only by a commit: it is read (a Spark job, beside floeline's
        # own on two cores) once per new version, the log listed every 0.2 s meanwhile.
        version = delta_version(table_path)
        if version is not None and version != compared:
            actual, compared = delta_rows(spark, table_path), version
            if actual is not None and not differences(expected, actual):
                return
        time.sleep(0.2)
    assert actual is not None, f"after {phase}: no table at {table_path}:\n{run.output()}"
    raise AssertionError(f"after {phase} the Delta table differs from PostgreSQL:\n"
                         f"{describe_difference(expected, actual)}\nfloeline said:\n{run.output()}")


def postgres_rows(pg, table) -> dict[tuple, dict]:
    """{primary key: {column: normalized value}} of the PostgreSQL table."""
    with pg.connect() as conn:
        cursor = conn.execute(f"select * from {table}")
        names = [c.name.lower() for c in cursor.description]
        rows = [dict(zip(names, row)) for row in cursor.fetchall()]
    return {(row["id"],): {k: normalized(v) for k, v in row.items()} for row in rows}


def delta_version(table_path) -> int | None:
    """The table's latest committed version (its newest _delta_log/NNN.json), None
    before its first commit."""
    try:
        names = os.listdir(os.path.join(table_path, "_delta_log"))
    except FileNotFoundError:
        return None
    versions = [int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()]
    return max(versions) if versions else None


def delta_rows(spark, table_path) -> dict[tuple, dict] | None:
    """The same of the Delta table, None before its first commit: its columns but
    RECORD_METADATA (and any other RECORD_* column floeline keeps), names compared
    lower-case. A key seen twice shows as (id, "duplicate", n), so it differs."""
    if not os.path.exists(os.path.join(table_path, "_delta_log", "00000000000000000000.json")):
        return None
    df = spark.read.format("delta").load(table_path)
    columns = [c for c in df.columns if not c.upper().startswith("RECORD_")]
    keyed: dict[tuple, dict] = {}
    for row in df.select(*columns).collect():
        values = {c.lower(): normalized(row[c]) for c in columns}
        key = (values.get("id"),)
        while key in keyed:
            key = (values.get("id"), "duplicate", len(key))
        keyed[key] = values
    return keyed


def normalized(value):
    """One form per value whichever side it came from: a timestamp with a zone as UTC
    without one (floeline's Spark session and this machine run in UTC), JSON text
    parsed (jsonb), a UUID as text, bytes as bytes. Decimals compare as numbers
    (10.50 == 10.5); dates, naive timestamps, ints, text and booleans as they are."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)
    if isinstance(value, uuid.UUID):
        return str(value)
    if hasattr(value, "toJson"):  # a Spark VARIANT
        return json.loads(value.toJson())
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


def same(pg, delta) -> bool:
    """A PostgreSQL value and the Delta table's, both `normalized`, are the same value of
    a fitting type: numeric as DECIMAL, or as its exact text (Snowflake's connector makes
    Connect's Decimal a VARCHAR), never a DOUBLE; an integer as an integral NUMBER; a
    boolean as a BOOLEAN; a date as a DATE; a timestamp as a TIMESTAMP (not ISO text)."""
    if pg is None or delta is None:
        return pg is None and delta is None
    if isinstance(pg, bool) or isinstance(delta, bool):
        return type(pg) is type(delta) and pg == delta
    if isinstance(pg, Decimal):
        if isinstance(delta, str):
            try:
                return Decimal(delta) == pg
            except InvalidOperation:
                return False
        return isinstance(delta, (Decimal, int)) and pg == delta
    if isinstance(pg, int):
        return isinstance(delta, (int, Decimal)) and pg == delta
    if type(pg) in (dt.date, dt.datetime):
        return type(delta) is type(pg) and pg == delta
    return pg == delta


def differences(expected: dict, actual: dict, limit: int = 10) -> list[str]:
    """What differs between the two tables, row by row and column by column."""
    lines = []
    for key in sorted(set(expected) - set(actual), key=repr)[:limit]:
        lines.append(f"  missing in Delta: {key} {expected[key]}")
    for key in sorted(set(actual) - set(expected), key=repr)[:limit]:
        lines.append(f"  not in PostgreSQL: {key} {actual[key]}")
    missing = "<no column>"
    for key in sorted(set(expected) & set(actual), key=repr):
        row, other = expected[key], actual[key]
        diff = {c: (row.get(c, missing), other.get(c, missing)) for c in sorted(set(row) | set(other))
                if c not in row or c not in other or not same(row[c], other[c])}
        if diff and len(lines) < 3 * limit:
            lines.append(f"  {key}: (PostgreSQL, Delta) {diff}")
        elif diff:
            lines.append("  ...")
            break
    return lines


def describe_difference(expected: dict, actual: dict) -> str:
    return "\n".join(differences(expected, actual)) or "  (no difference)"


def pg_script(pg, script: str) -> None:
    """One statement or a `begin; ...; commit` script, autocommitted."""
    with pg.connect() as conn:
        conn.execute(script)
