"""The options floeline gives Spark's Kafka source, and which reader a connector reads
Kafka with (sources/kafka.py)."""

import pytest

from floeline.errors import SetupMissing
from floeline.jvm import KAFKA_READER_CLASS
from floeline.sources.kafka import SPARK_SOURCE_OPTIONS, reader_format


def test_the_broker_does_not_hold_fetches_at_a_partitions_end():
    # Spark looks up a partition's offsets after every poll, and those lookups wait
    # behind a fetch the broker holds for fetch.max.wait.ms at the partition's end:
    # 0 read a 400-partition batch in 2.0-2.3 s against 3.7-4.1 s with 10 (RESULTS.md).
    assert SPARK_SOURCE_OPTIONS["kafka.fetch.max.wait.ms"] == "0"


def test_a_poll_hands_spark_about_a_fetch_of_records():
    # Each poll is followed by two offset lookups: Kafka's default of 500 records a poll
    # made a 100,000-record partition 200 polls; 5,000 read a connector's 1,000,000
    # records in 15.4 s against 17.4 s (RESULTS.md). Still a bound: Spark keeps the
    # rest of a partition's last poll between batches.
    assert SPARK_SOURCE_OPTIONS["kafka.max.poll.records"] == "5000"


def test_a_new_consumer_starts_without_jmx_metrics_or_telemetry():
    # A query's first read makes a consumer per partition: without these two start-up
    # steps a first batch over 400 partitions read in 7.5-8.2 s against 10.2-10.8 s.
    assert SPARK_SOURCE_OPTIONS["kafka.auto.include.jmx.reporter"] == "false"
    assert SPARK_SOURCE_OPTIONS["kafka.enable.metrics.push"] == "false"


def test_the_reader_is_floelines_when_its_jar_is_in_the_session():
    jars = "/c/spark-jars/floeline-jvm-1.jar,/c/spark-jars/floeline-kafka-reader-abc.jar"
    assert reader_format("grouped", True, jars) == KAFKA_READER_CLASS
    assert reader_format("grouped", False, jars) == KAFKA_READER_CLASS
    assert reader_format("spark", True, jars) == "kafka"


def test_without_the_jar_the_default_reads_with_spark_and_an_explicit_grouped_says_how_to_fix():
    jars = "/c/spark-jars/floeline-jvm-1.jar"
    assert reader_format("grouped", False, jars) == "kafka"
    with pytest.raises(SetupMissing, match="floeline setup.*floeline.kafka.reader=spark"):
        reader_format("grouped", True, jars)
