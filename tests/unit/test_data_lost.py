"""data_lost: which query failures say that reading on would skip records, so the
connector asks the source what changed (ingest/connector.py)."""

from __future__ import annotations

from floeline.errors import RecordError, SourceChanged, TableError
from floeline.ingest.connector import data_lost


def _from(error: BaseException, cause: BaseException) -> BaseException:
    error.__cause__ = cause
    return error


def test_the_check_before_a_batch_and_sparks_data_loss_errors():
    assert data_lost(SourceChanged("topic t was deleted and created again"))
    spark = Exception("[STREAM_FAILED] Query terminated with exception: Some data may have been lost "
                      "because they are not available in Kafka any more; ... Partition t-0 offset "
                      "was changed from 10 to 2.")
    assert data_lost(spark)
    assert data_lost(Exception("Some of partitions in Kafka topic(s) have been lost during running "
                               "query with Trigger.AvailableNow. ..."))


def test_a_commit_that_wraps_the_read_of_its_records_is_seen_through():
    lost = Exception("Some data may have been lost because they are not available in Kafka any more")
    assert data_lost(_from(TableError("writing to table T failed: ..."), lost))


def test_other_failures_are_not_data_loss():
    assert not data_lost(Exception("org.apache.kafka.common.errors.TimeoutException: Timed out"))
    assert not data_lost(RecordError("not valid JSON", "t", 0, 5))
    assert not data_lost(TableError("writing to table T failed: disk"))
