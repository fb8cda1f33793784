"""`floeline demo` (the README's first command): start the local broker, produce the
spec's ORDERS events, run the connector until caught up, print the table.
`floeline demo kinesis` does the same through a local Kinesis stream (kinesis-local,
with the lease table in moto's DynamoDB)."""

from __future__ import annotations

import json
import time

from floeline.signals import stop_signals

DEMO_TOPIC = "orders"
CUSTOMERS = ["John", "Maria", "Wei", "Aiko", "Łukasz"]


def demo_events(count: int = 5) -> list[dict]:
    """ORDERS records shaped like the spec's example, keyed by order id."""
    base = int(time.time()) % 100000 * 100
    events = []
    for i in range(count):
        order_id = base + i
        value = {"order_id": order_id, "customer_name": CUSTOMERS[i % len(CUSTOMERS)],
                 "order_total": round(100.00 + i * 12.5, 2), "isPaid": i % 2 == 0}
        events.append({"value": value, "key": str(order_id),
                       "headers": [("source", "floeline-demo")]})
    return events


def run_demo(warehouse: str = "./warehouse") -> int:
    from floeline.dev import kafka as devkafka
    from floeline.config import config_from_dict
    from floeline.ingest import Connector
    from floeline.sources.kafka import produce
    from floeline.spark import get_spark
    from floeline.sql.results import format_rows
    from floeline.sql.script import run_sql
    from floeline.warehouse.catalog import Warehouse

    bootstrap = devkafka.start()
    print(f"kafka broker: bootstrap.servers={bootstrap}")
    devkafka.create_topic(bootstrap, DEMO_TOPIC, partitions=2)
    sent = produce(bootstrap, DEMO_TOPIC, demo_events())
    print(f"produced {sent} ORDERS events to topic '{DEMO_TOPIC}'")
    config = config_from_dict({
        "name": "orders_demo", "topics": DEMO_TOPIC, "bootstrap.servers": bootstrap,
        "floeline.warehouse": warehouse, "buffer.flush.time": "1"})
    spark = get_spark(config.spark_master)
    connector = Connector(config, spark)
    with stop_signals(connector.stop):
        connector.run(until_caught_up=True)
    wh = Warehouse(warehouse)
    print("\nSELECT * FROM ORDERS:")
    print(format_rows(run_sql(spark, "SELECT order_id, customer_name, order_total, ispaid "
                                     "FROM ORDERS ORDER BY order_id", wh)))
    print("\nSELECT RECORD_METADATA FROM ORDERS (one row):")
    print(format_rows(run_sql(spark, "SELECT RECORD_METADATA FROM ORDERS "
                                     "ORDER BY RECORD_METADATA:offset::bigint DESC LIMIT 1", wh), "json"))
    return 0


DEMO_STREAM = "kinesis_orders"  # its table: KINESIS_ORDERS


def run_kinesis_demo(warehouse: str = "./warehouse") -> int:
    import boto3

    from floeline.dev import aws as devaws
    from floeline.config import config_from_dict
    from floeline.ingest import Connector
    from floeline.spark import get_spark
    from floeline.sql.results import format_rows
    from floeline.sql.script import run_sql
    from floeline.warehouse.catalog import Warehouse

    endpoints = devaws.start()
    for line in devaws.endpoint_lines(endpoints):
        print(f"local aws: {line}")
    credentials = {"aws_access_key_id": "floeline", "aws_secret_access_key": "floeline"}
    kinesis = boto3.client("kinesis", endpoint_url=endpoints["kinesis"], region_name=devaws.REGION,
                           **credentials)
    if DEMO_STREAM not in kinesis.list_streams()["StreamNames"]:
        kinesis.create_stream(StreamName=DEMO_STREAM, ShardCount=2)
        kinesis.get_waiter("stream_exists").wait(StreamName=DEMO_STREAM,
                                                 WaiterConfig={"Delay": 1, "MaxAttempts": 30})
    events = demo_events()
    kinesis.put_records(StreamName=DEMO_STREAM, Records=[
        {"Data": json.dumps(e["value"]).encode(), "PartitionKey": e["key"]} for e in events])
    print(f"put {len(events)} ORDERS events into Kinesis stream '{DEMO_STREAM}'")
    config = config_from_dict({
        "name": "orders_kinesis_demo", "floeline.source": "kinesis",
        "kinesis.stream.name": DEMO_STREAM, "aws.region": devaws.REGION,
        "aws.access.key.id": credentials["aws_access_key_id"],
        "aws.secret.access.key": credentials["aws_secret_access_key"],
        "kinesis.endpoint": endpoints["kinesis"], "dynamodb.endpoint": endpoints["dynamodb"],
        "floeline.warehouse": warehouse, "buffer.flush.time": "1"})
    spark = get_spark(config.spark_master)
    connector = Connector(config, spark)
    with stop_signals(connector.stop):
        connector.run(until_caught_up=True)
    wh = Warehouse(warehouse)
    print("\nSELECT * FROM KINESIS_ORDERS:")
    print(format_rows(run_sql(spark, "SELECT order_id, customer_name, order_total, ispaid "
                                     "FROM KINESIS_ORDERS ORDER BY order_id", wh)))
    print("\nSELECT RECORD_METADATA FROM KINESIS_ORDERS (one row):")
    print(format_rows(run_sql(spark, "SELECT RECORD_METADATA FROM KINESIS_ORDERS "
                                     "ORDER BY order_id DESC LIMIT 1", wh), "json"))
    return 0


FIREHOSE_BUCKET = "floeline-demo"
FIREHOSE_STREAM = "tweets"


def demo_tweets(round_no: int, count: int) -> list[dict]:
    """Tweet-like JSON events, as the seed's Twitter listener puts them to Firehose."""
    return [{"id": round_no * 1000 + i, "user": CUSTOMERS[i % len(CUSTOMERS)],
             "text": f"floeline demo tweet {i} of round {round_no}", "lang": "en",
             "created_at": int(time.time() * 1000)} for i in range(count)]


def run_firehose_demo(warehouse: str = "./warehouse", rounds: int = 3) -> int:
    """The seed's Firehose -> S3 -> Snowpipe scenario on the local AWS: a delivery
    stream writes objects to a bucket, the bucket notifies the pipe's queue (its
    notification_channel from SHOW PIPES), and the pipe service loads each object
    into a VARIANT table while `SELECT count(*)` grows."""
    import boto3

    from floeline.dev import aws as devaws
    from floeline.ingest.pipe_service import PipeService
    from floeline.spark import get_spark
    from floeline.sql.results import format_rows
    from floeline.sql.script import run_script, run_sql
    from floeline.warehouse.catalog import Warehouse

    endpoints = devaws.start()
    for line in devaws.endpoint_lines(endpoints):
        print(f"local aws: {line}")
    credentials = {"aws_access_key_id": "floeline", "aws_secret_access_key": "floeline"}
    s3, firehose = (boto3.client(service, endpoint_url=endpoints[service], region_name=devaws.REGION,
                                 **credentials) for service in ("s3", "firehose"))
    if FIREHOSE_BUCKET not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        s3.create_bucket(Bucket=FIREHOSE_BUCKET)
    spark = get_spark()
    wh = Warehouse(warehouse)
    setup = f"""
        CREATE TABLE IF NOT EXISTS twitter_stream.public.tweets (tweet VARIANT);
        CREATE OR REPLACE STAGE twitter_stream.public.tweets_stage URL='s3://{FIREHOSE_BUCKET}/tweets/'
          ENDPOINT='{endpoints["s3"]}'
          CREDENTIALS=(AWS_KEY_ID='{credentials["aws_access_key_id"]}' AWS_SECRET_KEY='{credentials["aws_secret_access_key"]}')
          FILE_FORMAT=(TYPE=JSON);
        CREATE OR REPLACE PIPE twitter_stream.public.tweets_pipe AUTO_INGEST=TRUE AS
          COPY INTO twitter_stream.public.tweets FROM @twitter_stream.public.tweets_stage"""
    print(setup.replace(credentials["aws_secret_access_key"] + "'", "****'"))
    run_script(spark, setup, wh)
    pipes = run_sql(spark, "SHOW PIPES", wh).collect()
    channel = next(p["notification_channel"] for p in pipes if p["name"] == "TWEETS_PIPE")
    print(f"\nSHOW PIPES: TWEETS_PIPE notification_channel={channel}")
    s3.put_bucket_notification_configuration(Bucket=FIREHOSE_BUCKET, NotificationConfiguration={
        "QueueConfigurations": [{"Id": "tweets_pipe", "QueueArn": channel, "Events": ["s3:ObjectCreated:*"],
                                 "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "tweets/"}]}}}]})
    print(f"bucket {FIREHOSE_BUCKET}: ObjectCreated events under tweets/ -> {channel}")
    if FIREHOSE_STREAM not in firehose.list_delivery_streams()["DeliveryStreamNames"]:
        firehose.create_delivery_stream(
            DeliveryStreamName=FIREHOSE_STREAM, DeliveryStreamType="DirectPut",
            ExtendedS3DestinationConfiguration={"RoleARN": "arn:aws:iam::123456789012:role/firehose",
                                                "BucketARN": f"arn:aws:s3:::{FIREHOSE_BUCKET}",
                                                "Prefix": "tweets/"})
    service = PipeService(spark, wh, report=lambda line: print(f"  {line}"))
    service.poll()  # the first pass lists the stage (files from an earlier demo run)
    count = "SELECT count(*) AS tweets FROM twitter_stream.public.tweets"
    for round_no in range(1, rounds + 1):
        tweets = demo_tweets(round_no, 5)
        firehose.put_record_batch(DeliveryStreamName=FIREHOSE_STREAM,
                                  Records=[{"Data": json.dumps(t).encode()} for t in tweets])
        print(f"\nround {round_no}: put {len(tweets)} tweets to Firehose stream '{FIREHOSE_STREAM}'")
        service.poll()
        print(format_rows(run_sql(spark, count, wh)))
    print("\nSELECT tweet FROM twitter_stream.public.tweets (one row):")
    print(format_rows(run_sql(spark, "SELECT tweet FROM twitter_stream.public.tweets "
                                     "ORDER BY tweet:id::int DESC LIMIT 1", wh), "json"))
    service.stop()
    return 1 if service.failures else 0


def run_channel_demo(url: str = "http://127.0.0.1:8083", rounds: int = 3, count: int = 5,
                     user: str | None = None, password: str | None = None) -> int:
    """The Firehose demo's producer posting straight to a Snowpipe Streaming channel of
    a running `floeline worker` (no Firehose, bucket or pipe service): the same tweets,
    round by round, into TWITTER_STREAM.PUBLIC.TWEETS through its default pipe
    TWEETS-STREAMING, each round one append whose offset token is its last tweet's id.
    Run again, it resumes after the channel's committed token (a round already in is
    skipped), as an application does after a restart."""
    from floeline.streaming import StreamingIngestClient

    properties = {"url": url, **({"user": user, "password": password} if user else {})}
    client = StreamingIngestClient("tweets-demo", "TWITTER_STREAM", "PUBLIC", "TWEETS-STREAMING", properties)
    channel, status = client.open_channel("tweets")
    committed = status.last_committed_offset_token
    print(f"channel tweets on TWITTER_STREAM.PUBLIC.TWEETS-STREAMING at {url}: "
          f"last committed offset token {committed}")
    for round_no in range(1, rounds + 1):
        tweets = demo_tweets(round_no, count)
        last = tweets[-1]["id"]
        if committed is not None and last <= int(committed):
            print(f"round {round_no}: already committed (offset token {last}), skipped")
            continue
        channel.append_rows(tweets, end_offset_token=last)
        print(f"round {round_no}: appended {len(tweets)} tweets, offset token {last}")
    status = channel.wait_for_commit(timeout_seconds=120)
    print(f"committed: offset token {status.last_committed_offset_token}, "
          f"{status.rows_inserted_count} rows inserted, {status.rows_error_count} row errors "
          f"(since the worker started)")
    client.close()
    print('query: floeline sql "SELECT id, text FROM twitter_stream.public.tweets ORDER BY id"')
    return 0
