"""Snowpipe Streaming's channels on the worker's REST listener, as an application uses
them: floeline.streaming's client (plain HTTP) opens channels on a table's pipe, appends
NDJSON rows with offset tokens and reads what is committed; the rows land in the Delta
table through the connector's own batch code. In-process listener over the session's
Spark for the API and its bad input; a real worker process SIGKILLed mid-stream for
exactly-once by offset tokens."""

from __future__ import annotations

import http.client
import os
import sys

import pytest

from floeline.streaming import StreamingIngestClient, StreamingIngestError
from floeline.worker.channels import ChannelService
from floeline.worker.rest import RestServer
from floeline.worker.settings import load_worker_settings
from floeline.warehouse.tables import read_declared
from test_worker_process import WorkerProcess
from worker_services import spark, table_committed, wait_for  # noqa: F401

pytestmark = pytest.mark.integration


@pytest.fixture
def listener(spark, tmp_path):
    """A REST listener serving channels over the session's Spark: (url, warehouse)."""
    warehouse = str(tmp_path / "warehouse")
    properties = tmp_path / "worker.properties"
    properties.write_text(f"listeners=http://127.0.0.1:0\nfloeline.warehouse={warehouse}\n"
                          f"floeline.streaming.buffer.flush.time=1\n")
    settings = load_worker_settings(str(properties))
    service = ChannelService(spark, settings, out=sys.stdout)
    server = RestServer(settings, None, service).start()
    try:
        yield server.url, warehouse
    finally:
        server.close()
        service.close()


def table(spark, warehouse: str, name: str):
    path = os.path.join(warehouse, "FLOELINE", "PUBLIC", name)
    assert table_committed(path), f"table {name} has no commit"
    return read_declared(spark, path)


def test_an_application_appends_rows_and_reads_its_committed_offset_token(listener, spark):
    url, warehouse = listener
    client = StreamingIngestClient("app", "floeline", "public", "ORDERS-STREAMING", {"url": url})
    one, status = client.open_channel("one")
    assert status.status_code == "SUCCESS" and status.last_committed_offset_token is None
    two, _ = client.open_channel("two")
    one.append_rows([{"id": i, "name": f"n{i}"} for i in range(50)], end_offset_token=49)
    one.append_rows([{"id": i, "name": f"n{i}"} for i in range(50, 100)], end_offset_token="99")
    for i in range(5):
        two.append_row({"id": 1000 + i, "name": "two", "extra": True}, offset_token=i)
    two.flush()

    status = one.wait_for_commit(timeout_seconds=120)
    assert status.last_committed_offset_token == "99"
    assert (status.rows_inserted_count, status.rows_parsed_count, status.rows_error_count) == (100, 100, 0)
    assert two.wait_for_commit(timeout_seconds=120).last_committed_offset_token == "4"
    rows = table(spark, warehouse, "ORDERS").selectExpr(
        "ID", "NAME", "EXTRA", "RECORD_METADATA:channel::string AS c",
        "RECORD_METADATA:offset_token::string AS t").collect()
    assert sorted(r["ID"] for r in rows) == list(range(100)) + [1000 + i for i in range(5)]
    assert {(r["ID"], r["c"], r["t"]) for r in rows if r["ID"] in (0, 49, 50, 1004)} == {
        (0, "one", "49"), (49, "one", "49"), (50, "one", "99"), (1004, "two", "4")}
    assert {r["EXTRA"] for r in rows if r["c"] == "two"} == {True}  # the column the second channel added

    # Reopened, the channel says what it committed; its old handle is stale.
    again, status = client.open_channel("one")
    assert status.last_committed_offset_token == "99"
    with pytest.raises(StreamingIngestError) as stale:
        one.append_rows([{"id": 100}], end_offset_token=100)
    assert stale.value.http_status == 409 and stale.value.must_reopen
    again.append_rows([{"id": 99, "name": "again"}], end_offset_token=99)  # the committed batch again: dropped
    again.append_rows([{"id": 100, "name": "n100"}], end_offset_token=100)
    assert again.wait_for_commit(timeout_seconds=120).last_committed_offset_token == "100"
    assert table(spark, warehouse, "ORDERS").where("ID IN (99, 100)").count() == 2
    assert client.get_latest_committed_offset_tokens(["one", "two", "nope"]) == {
        "one": "100", "two": "4", "nope": None}

    client.drop_channel("two")
    with pytest.raises(StreamingIngestError) as gone:  # a dropped channel takes no rows
        two.append_rows([{"id": 2000}], end_offset_token=5)
    assert gone.value.http_status == 404 and gone.value.must_reopen and "open it" in gone.value.message
    assert client.get_channel_statuses(["two"])["two"].status_code == \
        "ERR_CHANNEL_DOES_NOT_EXIST_OR_IS_NOT_AUTHORIZED"
    _, status = client.open_channel("two")  # its committed token stayed in the table
    assert status.last_committed_offset_token == "4"


def test_bad_input_is_refused_with_the_fix_and_disturbs_nothing_else(listener, spark):
    url, warehouse = listener
    client = StreamingIngestClient("app", "FLOELINE", "PUBLIC", "EVENTS-STREAMING", {"url": url, "max_retry_s": 5})
    good, _ = client.open_channel("good")
    bad, _ = client.open_channel("bad")
    good.append_rows([{"n": i, "v": i} for i in range(20)], end_offset_token=19)
    good.wait_for_commit(timeout_seconds=120)

    with pytest.raises(StreamingIngestError) as malformed:
        bad.append_ndjson(b'{"n": 100, "v": 1}\n{"n": \n', 5)
    assert malformed.value.http_status == 400 and "line 2 of the body is not JSON" in malformed.value.message
    assert bad.get_channel_status().rows_parsed_count == 0  # nothing of it was taken

    bad.append_rows([{"n": 101, "v": "not a number"}, {"n": 102, "v": 3}], end_offset_token=7)
    status = bad.wait_for_commit(timeout_seconds=120)
    assert (status.rows_inserted_count, status.rows_error_count) == (1, 1), status
    assert status.last_error_message and status.last_error_offset_token_upper_bound == "7"
    errors = table(spark, warehouse, "EVENTS_ERRORS").selectExpr("RECORD_CHANNEL", "ERROR").collect()
    assert [r["RECORD_CHANNEL"] for r in errors] == ["bad"]

    with pytest.raises(StreamingIngestError) as backwards:
        bad.append_rows([{"n": 103, "v": 4}], end_offset_token=6)
    assert backwards.value.http_status == 409 and "is not after its last one, 7" in backwards.value.message
    with pytest.raises(StreamingIngestError) as no_pipe:
        StreamingIngestClient("x", "FLOELINE", "PUBLIC", "NOPE", {"url": url}).open_channel("c")
    assert no_pipe.value.http_status == 404 and "NOPE-STREAMING" in no_pipe.value.message
    with pytest.raises(StreamingIngestError) as bad_token:
        bad.append_rows([{"n": 1}], end_offset_token="abc")
    assert bad_token.value.http_status == 400 and "non-negative integer" in bad_token.value.message

    # A body over the listener's limit is refused before it is read.
    host, port = url.split("//")[1].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.putrequest("POST", "/v2/streaming/data/databases/FLOELINE/schemas/PUBLIC/pipes/EVENTS-STREAMING"
                                  "/channels/good/rows?offsetToken=50")
    connection.putheader("Content-Length", str(16 * 1024 * 1024 + 1))
    connection.endheaders()
    answer = connection.getresponse()
    assert answer.status == 413 and b"larger than" in answer.read()
    connection.close()

    # The good channel goes on: every row once.
    good.append_rows([{"n": i, "v": i} for i in range(20, 40)], end_offset_token=39)
    assert good.wait_for_commit(timeout_seconds=120).rows_inserted_count == 40
    ns = [r["N"] for r in table(spark, warehouse, "EVENTS").select("N").collect()]
    assert sorted(ns) == list(range(40)) + [102]


def test_the_unknown_channel_answers_404_with_the_fix(listener):
    url, _ = listener
    client = StreamingIngestClient("x", "FLOELINE", "PUBLIC", "EVENTS-STREAMING", {"url": url})
    client.open_channel("known")
    status, body = client._http.request(
        "POST", "/v2/streaming/data/databases/FLOELINE/schemas/PUBLIC/pipes/EVENTS-STREAMING/channels/"
                "nope/rows?continuationToken=x&offsetToken=1", b'{"n": 1}\n', "application/x-ndjson")
    assert status == 404 and body["code"] == "ERR_CHANNEL_DOES_NOT_EXIST_OR_IS_NOT_AUTHORIZED"
    assert "open it" in body["message"]


def test_the_channel_demo_posts_the_firehose_demos_tweets_and_resumes_after_its_token(listener, spark, capsys):
    from floeline.demo import run_channel_demo

    url, warehouse = listener
    assert run_channel_demo(url=url, rounds=2) == 0
    assert run_channel_demo(url=url, rounds=3) == 0  # run again: rounds 1 and 2 are committed
    out = capsys.readouterr().out
    assert "round 1: already committed (offset token 1004), skipped" in out and "round 3: appended 5" in out
    path = os.path.join(warehouse, "TWITTER_STREAM", "PUBLIC", "TWEETS")
    ids = sorted(r["ID"] for r in spark.read.format("delta").load(path).select("ID").collect())
    assert ids == [r * 1000 + i for r in (1, 2, 3) for i in range(5)]


def test_sigkill_mid_stream_then_reopen_and_resend_lands_every_row_once(spark, tmp_path):
    """100,000 rows in batches of 2,000; the worker is SIGKILLed once 20,000 are
    committed and more are buffered; the application reopens its channel on the new
    worker, reads the committed token and sends from the row after it."""
    warehouse = str(tmp_path / "warehouse")
    properties = tmp_path / "worker.properties"
    properties.write_text(f"listeners=http://127.0.0.1:0\nfloeline.warehouse={warehouse}\n"
                          f"floeline.checkpoint.dir={tmp_path}/checkpoints\n"
                          f"floeline.streaming.buffer.flush.time=1\n")
    total, per = 100_000, 2_000

    def start():
        worker = WorkerProcess(properties)
        # Serving, and holding the warehouse's lease (a killed worker's is taken over).
        worker.wait_line("connectors restored", lambda: any("connector(s) restored" in l for l in worker.lines))
        url = next(l for l in worker.lines if l.startswith("rest.url=")).strip().split("=", 1)[1]
        return worker, StreamingIngestClient("app", "FLOELINE", "PUBLIC", "NUMBERS-STREAMING",
                                             {"url": url, "max_retry_s": 3})

    def batch(first: int) -> bytes:
        return "".join(f'{{"id": {i}, "pad": "{i:08d}"}}\n' for i in range(first, first + per)).encode()

    worker, client = start()
    workers = [worker]
    try:
        channel, status = client.open_channel("app")
        assert status.last_committed_offset_token is None
        next_row, killed = 0, None
        while next_row < total:
            channel.append_ndjson(batch(next_row), next_row + per - 1)
            next_row += per
            if killed is None and next_row >= 30_000:
                wait_for("20,000 rows committed", lambda: int(
                    channel.get_latest_committed_offset_token() or -1) >= 19_999, timeout=120)
                worker.kill()
                killed = next_row
                with pytest.raises(StreamingIngestError):  # the worker is gone: the append fails in its bound
                    channel.append_ndjson(batch(next_row), next_row + per - 1)
                worker, client = start()
                workers.append(worker)
                channel, status = client.open_channel("app")
                committed = int(status.last_committed_offset_token)
                assert 19_999 <= committed < killed and (committed + 1) % per == 0
                channel.append_ndjson(batch(committed + 1 - per), committed)  # the committed batch again: dropped
                next_row = committed + 1
        status = channel.wait_for_commit(timeout_seconds=180)
        assert status.last_committed_offset_token == str(total - 1)
        counts = table(spark, warehouse, "NUMBERS").selectExpr(
            "count(*) AS n", "count(DISTINCT ID) AS d", "min(ID) AS lo", "max(ID) AS hi").collect()[0]
        assert (counts["n"], counts["d"], counts["lo"], counts["hi"]) == (total, total, 0, total - 1)
    finally:
        for w in workers:
            w.kill()
