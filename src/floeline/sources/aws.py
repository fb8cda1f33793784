"""AWS clients (Kinesis and DynamoDB for the Kinesis source, S3 and SQS for stages and
pipes) and the one retry rule every call to them follows.

A call that fails with an error AWS calls retriable (throttling such as
ProvisionedThroughputExceededException, a 5xx, a connection that cannot be opened or
was dropped) is retried by floeline's one retry rule (floeline/retry.py: exponential
backoff and jitter until a time bound is spent, each retry logged once). Anything else
(a stream that does not exist, bad credentials, a malformed request) is raised at
once: retrying cannot fix it. botocore's own retries are off so that there is exactly
one retry policy."""

from __future__ import annotations

import functools
import threading
from dataclasses import replace
from typing import Any, Callable

from floeline import retry
from floeline.config.kinesis import AwsSettings
from floeline.errors import ConfigError, FloelineError, ServiceError

# Error codes AWS documents as retriable for Kinesis and DynamoDB.
RETRIABLE_CODES = frozenset({
    "ProvisionedThroughputExceededException", "LimitExceededException", "ThrottlingException",
    "Throttling", "ThrottledException", "RequestLimitExceeded", "KMSThrottlingException",
    "InternalFailure", "InternalServerError", "InternalFailureException", "ServiceUnavailable",
    "ServiceUnavailableException", "RequestTimeout", "RequestTimeoutException",
    "TransactionConflictException", "SlowDown",
})
# Codes that mean the settings are wrong, with the setting to check.
_SETTING_CODES = {
    "UnrecognizedClientException": "aws.access.key.id / aws.secret.access.key",
    "InvalidClientTokenId": "aws.access.key.id / aws.secret.access.key",
    "InvalidSignatureException": "aws.secret.access.key",
    "SignatureDoesNotMatch": "aws.secret.access.key",
    "AccessDeniedException": "the IAM policy of these credentials",
    "AccessDenied": "the IAM policy of these credentials",
}
DEFAULT_RETRY_BOUND_S = retry.DEFAULT_TIMEOUT_S


def client(service: str, aws: AwsSettings):
    """A boto3 client for `service` ("kinesis" or "dynamodb") with the settings'
    region, credentials and endpoint; botocore's retries off (see `call`)."""
    endpoint = {"kinesis": aws.kinesis_endpoint, "dynamodb": aws.dynamodb_endpoint}.get(service)
    return client_for(service, region=aws.region, access_key_id=aws.access_key_id,
                      secret_access_key=aws.secret_access_key, endpoint=endpoint)


def client_for(service: str, *, region: str | None, access_key_id: str | None,
               secret_access_key: str | None, session_token: str | None = None,
               endpoint: str | None = None):
    """A boto3 client for any AWS service (S3 and SQS for stages and pipes too);
    credentials None: boto3's default chain. botocore's retries off (see `call`).
    One client per set of arguments and process: making one loads the service's model
    (~0.1 s), which a pipe's per-file load would otherwise pay each time; boto3's
    clients are safe to share between threads."""
    with _CLIENTS_LOCK:
        return _client(service, region, access_key_id, secret_access_key, session_token, endpoint)


_CLIENTS_LOCK = threading.Lock()


@functools.lru_cache(maxsize=64)
def _client(service: str, region: str | None, access_key_id: str | None, secret_access_key: str | None,
            session_token: str | None, endpoint: str | None):
    import boto3
    import botocore.config

    session = boto3.session.Session(aws_access_key_id=access_key_id,
                                    aws_secret_access_key=secret_access_key,
                                    aws_session_token=session_token, region_name=region)
    if not session.region_name:
        raise ConfigError(f"no AWS region for {service}: set aws.region (e.g. us-east-1)")
    config = botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"},
                                    connect_timeout=5, read_timeout=30,
                                    max_pool_connections=32)
    return session.client(service, endpoint_url=endpoint, config=config)


def error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore ClientError, else None."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return response.get("Error", {}).get("Code")
    return None


def is_retriable(exc: BaseException) -> bool:
    """True for throttling, 5xx and connection problems (AWS's retriable errors)."""
    import botocore.exceptions as bex

    if isinstance(exc, (bex.EndpointConnectionError, bex.ConnectionClosedError,
                        bex.ReadTimeoutError, bex.ConnectTimeoutError, bex.ConnectionError)):
        return True
    code = error_code(exc)
    if code in RETRIABLE_CODES:
        return True
    status = getattr(exc, "response", {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0) \
        if isinstance(getattr(exc, "response", None), dict) else 0
    return status >= 500


def call(what: str, fn: Callable[..., Any], *, bound_s: float | None = None,
         policy: retry.RetryPolicy | None = None, endpoint: str | None = None,
         passthrough: frozenset[str] = frozenset(), **kwargs) -> Any:
    """`fn(**kwargs)`, retrying retriable errors with backoff (floeline/retry.py) for
    `policy`'s bound (`bound_s` overrides it). `what` names the call in messages
    ("Kinesis GetRecords on shard X"). Errors whose code is in `passthrough` (e.g.
    ExpiredIteratorException, ConditionalCheckFailedException) are raised as they
    are, for the caller to handle."""
    policy = policy or retry.DEFAULT
    if bound_s is not None:
        policy = replace(policy, timeout_s=bound_s)

    def terminal(exc: BaseException) -> BaseException:
        return exc if error_code(exc) in passthrough else terminal_error(what, exc, endpoint)

    return retry.call(lambda: fn(**kwargs), what=what, service="AWS", policy=policy,
                      transient=lambda exc: error_code(exc) not in passthrough and is_retriable(exc),
                      terminal=terminal, describe=_reason,
                      fix=f"Check that {endpoint or 'AWS'} is reachable and, when throttled, "
                          f"the service's limits (e.g. the stream's throughput).")


def terminal_error(what: str, exc: BaseException, endpoint: str | None) -> Exception:
    """The exception to raise for an error retrying cannot fix."""
    code = error_code(exc)
    if code in _SETTING_CODES:
        return ConfigError(f"{what} was refused ({code}): check {_SETTING_CODES[code]}")
    if isinstance(exc, FloelineError):
        return exc
    return ServiceError(f"{what} failed: {_reason(exc)}"
                        + (f" (endpoint {endpoint})" if endpoint else ""))


def _reason(exc: BaseException) -> str:
    code = error_code(exc)
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"{code}: {message}" if code and code not in message else message
