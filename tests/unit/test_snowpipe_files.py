"""The SNOWPIPE method's object and file names (as Snowflake's Kafka connector names
them), without Spark."""

from __future__ import annotations

import pytest

from floeline.ingest import snowpipe_files as sf


def test_stage_and_pipe_names():
    assert sf.stage_name("my_conn", "ORDERS") == "SNOWFLAKE_KAFKA_CONNECTOR_MY_CONN_STAGE_ORDERS"
    assert sf.pipe_name("my-conn", "ORDERS") == "SNOWFLAKE_KAFKA_CONNECTOR_MY_CONN_PIPE_ORDERS"


def test_file_name_round_trip():
    name = sf.file_name("conn", "ORDERS", 3, "100", "199", 1700000000000)
    assert name == "conn/ORDERS/3/100_199_1700000000000.json.gz"
    parsed = sf.parse_file_name(name)
    assert parsed == sf.StagedRange("conn", "ORDERS", 3, "100", "199", 1700000000000)
    assert parsed.partition == 3 and parsed.is_for("orders", 3) and not parsed.is_for("orders", 4)


def test_names_of_other_files_are_not_parsed():
    for name in ("conn/ORDERS/3/100_199.json.gz", "conn/ORDERS/x/1_2_3.json.gz",
                 "ORDERS/3/1_2_3.json.gz", "conn/ORDERS/3/1_2_3.json", "a.json"):
        assert sf.parse_file_name(name) is None


def test_crc32c_matches_the_standard_check_value():
    assert sf.crc32c(b"123456789") == 0xE3069283


def test_partition_part_with_a_topic_says_topic_and_partition():
    part = sf.partition_part(7, "orders")
    assert part >= 0x8000 and part & 0x7FFF == 7
    parsed = sf.parse_file_name(sf.file_name("c", "T", part, "0", "9", 1))
    assert parsed.partition == 7
    assert parsed.is_for("orders", 7) and parsed.is_for("ORDERS", 7)  # hashed upper-case
    assert not parsed.is_for("payments", 7)
    assert sf.partition_part(7) == 7
    with pytest.raises(ValueError):
        sf.partition_part(0x8000)
