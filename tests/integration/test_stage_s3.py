"""S3 stages and auto-ingest pipes fed by S3 event notifications, against the local S3,
SQS and Firehose (moto's server) and Spark reading through s3a: the seed's
Firehose -> S3 -> SQS -> pipe path as a user sets it up."""

from __future__ import annotations

import gzip
import json
import uuid

import pytest

from floeline.errors import SqlError
from floeline.ingest.pipe_service import PipeService

pytestmark = pytest.mark.integration


@pytest.fixture
def bucket(aws):
    name = f"landing-{uuid.uuid4().hex[:12]}"
    aws.client("s3").create_bucket(Bucket=name)
    return name


def stage_sql(aws, bucket: str, prefix: str = "in/") -> str:
    return (f"CREATE STAGE s3s URL='s3://{bucket}/{prefix}' ENDPOINT='{aws.moto_endpoint}' "
            f"CREDENTIALS=(AWS_KEY_ID='{aws.access_key_id}' AWS_SECRET_KEY='{aws.secret_access_key}') "
            f"FILE_FORMAT=(TYPE=JSON)")


def values(spark, wh, table: str, field: str) -> list:
    frame = spark.read.format("delta").load(wh.resolve([table]).path)
    return sorted(json.loads(r[0].toJson())[field] for r in frame.select("V").collect())


def test_copy_from_an_s3_stage(spark, sql, wh, aws, bucket):
    s3 = aws.client("s3")
    s3.put_object(Bucket=bucket, Key="in/a b.json", Body=b'{"n":1}\n{"n":2}\n')
    packed = gzip.compress(b'{"n":3}{"n":4}')
    s3.put_object(Bucket=bucket, Key="in/sub/c.json.gz", Body=packed)
    s3.put_object(Bucket=bucket, Key="other/d.json", Body=b'{"n":99}\n')
    sql(f"CREATE TABLE nums (v VARIANT); {stage_sql(aws, bucket)}")
    assert [(r["name"], r["size"]) for r in sql("LIST @s3s")] == [("a b.json", 16), ("sub/c.json.gz", len(packed))]
    described = {r["property"]: r["property_value"] for r in sql("DESCRIBE STAGE s3s")}
    assert described["AWS_SECRET_KEY"] == "****" and described["URL"] == f"s3://{bucket}/in/"
    loaded = sql("COPY INTO nums FROM @s3s")  # small: read by the driver, with boto3
    assert sorted((r["file"], r["status"], r["rows_loaded"]) for r in loaded) == [
        ("a b.json", "LOADED", 2), ("sub/c.json.gz", "LOADED", 2)]
    assert sql("COPY INTO nums FROM @s3s") == [{"status": "Copy executed with 0 files processed."}]
    # Over 4 MB: read by Spark through s3a.
    big = "".join(json.dumps({"n": n, "pad": uuid.uuid4().hex * 120}) + "\n" for n in range(100, 1200))
    s3.put_object(Bucket=bucket, Key="in/big.json", Body=big.encode())
    assert [(r["file"], r["rows_loaded"]) for r in sql("COPY INTO nums FROM @s3s")] == [("big.json", 1100)]
    assert values(spark, wh, "NUMS", "n") == [1, 2, 3, 4, *range(100, 1200)]


def test_s3_stage_errors_name_the_bucket(sql, aws):
    sql(f"CREATE TABLE t (v VARIANT); {stage_sql(aws, 'no-such-bucket-here')}")
    with pytest.raises(SqlError, match="bucket no-such-bucket-here does not exist"):
        sql("COPY INTO t FROM @s3s")


def test_firehose_to_s3_to_notified_pipe(spark, sql, wh, aws, bucket):
    """The seed's scenario: Firehose delivers objects to the bucket, the bucket notifies
    the pipe's queue, the pipe loads each object once."""
    s3, sqs, firehose = aws.client("s3"), aws.client("sqs"), aws.client("firehose")
    s3.put_object(Bucket=bucket, Key="in/before.json", Body=b'{"n":0}')  # landed before the pipe
    sql(f"""CREATE TABLE events (v VARIANT); {stage_sql(aws, bucket)};
            CREATE PIPE events_pipe AUTO_INGEST=TRUE AS COPY INTO events FROM @s3s""")
    channel = next(r for r in sql("SHOW PIPES") if r["name"] == "EVENTS_PIPE")["notification_channel"]
    assert channel.startswith("arn:aws:sqs:us-east-1:") and channel.endswith(":floeline-floeline-public-events_pipe")
    queue = sqs.get_queue_url(QueueName=channel.rsplit(":", 1)[1])["QueueUrl"]
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={"QueueConfigurations": [
        {"QueueArn": channel, "Events": ["s3:ObjectCreated:*"],
         "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "in/"}]}}}]})
    stream = f"events-{bucket}"
    firehose.create_delivery_stream(
        DeliveryStreamName=stream, DeliveryStreamType="DirectPut",
        ExtendedS3DestinationConfiguration={"RoleARN": "arn:aws:iam::123456789012:role/firehose",
                                            "BucketARN": f"arn:aws:s3:::{bucket}", "Prefix": "in/"})
    lines = []
    service = PipeService(spark, wh, poll_s=0.2, report=lines.append)
    assert service.poll() == 1  # the first pass lists the stage: the file from before
    firehose.put_record_batch(DeliveryStreamName=stream, Records=[
        {"Data": json.dumps({"n": n}).encode()} for n in (1, 2, 3)])  # one object, no delimiters
    firehose.put_record(DeliveryStreamName=stream, Record={"Data": b'{"n":4}'})
    assert service.poll() == 2
    assert values(spark, wh, "EVENTS", "n") == [0, 1, 2, 3, 4]
    # Duplicate and stale notifications (a message sent twice, a file's event replayed)
    # load nothing again, and every message is deleted.
    key = next(o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="in/2")["Contents"])
    replay = {"Records": [{"eventName": "ObjectCreated:Put",
                           "s3": {"bucket": {"name": bucket}, "object": {"key": key.replace("/", "%2F")}}}]}
    for _ in range(2):
        sqs.send_message(QueueUrl=queue, MessageBody=json.dumps(replay))
    assert service.poll() == 0
    attributes = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert (attributes["ApproximateNumberOfMessages"], attributes["ApproximateNumberOfMessagesNotVisible"]) == ("0", "0")
    assert values(spark, wh, "EVENTS", "n") == [0, 1, 2, 3, 4]
    # A bad object is recorded as failed (SKIP_FILE) and its message deleted.
    s3.put_object(Bucket=bucket, Key="in/bad.json", Body=b'{"n":5}\n{"n": oops}\n')
    assert service.poll() == 1
    assert any("in/bad.json LOAD_FAILED" in line or "bad.json LOAD_FAILED" in line for line in lines), lines
    # A message whose load fails (the table is gone) stays in the queue for a retry.
    sql("DROP TABLE events")
    s3.put_object(Bucket=bucket, Key="in/late.json", Body=b'{"n":6}')
    assert service.poll() == 0
    assert any("EVENTS was dropped" in line for line in lines), lines
    attributes = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "1"
    # DROP PIPE deletes the pipe's queue.
    assert sql("DROP PIPE events_pipe") == [{"status": "EVENTS_PIPE successfully dropped."}]
    with pytest.raises(sqs.exceptions.QueueDoesNotExist):
        sqs.get_queue_url(QueueName=channel.rsplit(":", 1)[1])


def test_pipes_run_killed_mid_stream_loads_every_file_once(spark, sql, wh, aws, bucket, tmp_path):
    """`floeline pipes run` as a user starts it, with a listed directory pipe and an S3
    pipe fed by notifications (a streaming query each), SIGKILLed after its first loads
    while files keep landing in both, then run again with one pipe's checkpoint lost:
    every file's rows are in each table once, and the queue holds no message left to
    handle."""
    import signal
    import subprocess
    import sys
    import time

    s3, sqs = aws.client("s3"), aws.client("sqs")
    stage_dir = tmp_path / "landing"
    stage_dir.mkdir()
    sql(f"""CREATE TABLE k (n NUMBER, f VARCHAR); CREATE TABLE k3 (n NUMBER, f VARCHAR);
            CREATE STAGE s URL='file://{stage_dir}/' FILE_FORMAT=(TYPE=JSON);
            {stage_sql(aws, bucket)};
            CREATE PIPE kp AUTO_INGEST=TRUE AS COPY INTO k FROM (SELECT $1:n, METADATA$FILENAME FROM @s);
            CREATE PIPE kp3 AUTO_INGEST=TRUE AS COPY INTO k3 FROM (SELECT $1:n, METADATA$FILENAME FROM @s3s)""")
    channel = next(r for r in sql("SHOW PIPES") if r["name"] == "KP3")["notification_channel"]
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={"QueueConfigurations": [
        {"QueueArn": channel, "Events": ["s3:ObjectCreated:*"]}]})

    def land(i: int) -> None:
        body = json.dumps({"n": i}) + "\n"
        (stage_dir / f"f{i:03d}.json").write_text(body)
        s3.put_object(Bucket=bucket, Key=f"in/f{i:03d}.json", Body=body.encode())

    command = [sys.executable, "-m", "floeline.cli", "pipes", "run", "--warehouse", str(wh.root), "--poll", "0.2"]
    service = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        land(0)
        first = service.stdout.readline()  # blocks until the first load is committed
        assert "f000.json LOADED" in first, first
        for i in range(1, 25):
            land(i)
            time.sleep(0.05)
        service.send_signal(signal.SIGKILL)
    finally:
        service.kill()
        service.wait(30)
    # Started again (here in-process), one pipe with its Spark checkpoint, the other
    # having lost it: the load history in each table decides what is loaded.
    import shutil
    checkpoints = wh.root / "_checkpoints" / "_pipes"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["FLOELINE.PUBLIC.KP", "FLOELINE.PUBLIC.KP3"]
    shutil.rmtree(checkpoints / "FLOELINE.PUBLIC.KP")
    assert PipeService(spark, wh, report=lambda line: None).run(until_caught_up=True) == 0
    for table in ("K", "K3"):
        frame = spark.read.format("delta").load(wh.resolve([table]).path)
        assert sorted((r["N"], r["F"]) for r in frame.collect()) == [(i, f"f{i:03d}.json") for i in range(25)]
    # Every visible message was handled. (Those the killed process had taken come back
    # after the visibility timeout and find their files loaded: see the duplicates test.)
    queue = sqs.get_queue_url(QueueName=channel.rsplit(":", 1)[1])["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "0"
