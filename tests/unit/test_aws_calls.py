"""The one retry rule of AWS calls (sources/aws.py): retriable errors retried with
backoff until a bound, the rest raised at once with the setting to check."""

from __future__ import annotations

import socket
import time

import pytest
from botocore.exceptions import ClientError

from floeline.config.kinesis import AwsSettings
from floeline.errors import ConfigError, FloelineError, RetriesExhausted
from floeline.sources import aws


def client_error(code: str, status: int = 400) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} happened"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "GetRecords")


def test_throttling_and_server_errors_are_retried_then_succeed():
    failures = [client_error("ProvisionedThroughputExceededException"), client_error("InternalFailure", 500)]

    def flaky():
        if failures:
            raise failures.pop(0)
        return "ok"
    assert aws.call("Kinesis GetRecords", flaky, bound_s=10) == "ok"


def test_retries_stop_at_the_bound_with_a_clear_error():
    def throttled():
        raise client_error("ProvisionedThroughputExceededException")
    started = time.monotonic()
    with pytest.raises(RetriesExhausted, match="still failing after .* attempts"):
        aws.call("Kinesis GetRecords on shard X", throttled, bound_s=0.5)
    assert time.monotonic() - started < 10


def test_terminal_errors_are_raised_at_once_naming_the_setting():
    calls = []

    def refused():
        calls.append(1)
        raise client_error("UnrecognizedClientException")
    with pytest.raises(ConfigError, match="aws.access.key.id"):
        aws.call("Kinesis ListShards", refused)
    assert len(calls) == 1
    with pytest.raises(FloelineError, match="ValidationException"):
        aws.call("x", lambda: (_ for _ in ()).throw(client_error("ValidationException")))


def test_passthrough_codes_reach_the_caller():
    def expired():
        raise client_error("ExpiredIteratorException")
    with pytest.raises(ClientError):
        aws.call("x", expired, passthrough=frozenset({"ExpiredIteratorException"}))


def test_an_unreachable_endpoint_is_retried_then_reported():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    kinesis = aws.client("kinesis", AwsSettings(region="us-east-1", access_key_id="a",
                                                secret_access_key="b", kinesis_endpoint=endpoint))
    with pytest.raises(RetriesExhausted, match=f"Check that {endpoint} is reachable"):
        aws.call("Kinesis ListStreams", kinesis.list_streams, bound_s=1, endpoint=endpoint)


def test_a_client_needs_a_region():
    with pytest.raises(ConfigError, match="aws.region"):
        aws.client("kinesis", AwsSettings(region=None, access_key_id="a", secret_access_key="b"))
