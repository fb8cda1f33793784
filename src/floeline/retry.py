"""Retrying transient errors: the one rule for every call floeline makes to a service
(Kafka, Kinesis, DynamoDB, S3, SQS, the schema registry) and for restarting the
connector's streaming query.

A call that fails with a transient error (an instance of errors.Transient, or a
foreign error its service calls retriable: see `transient` of each caller) is retried
with exponential backoff and jitter (0.1 s, 0.2 s, 0.4 s, ... capped at
`errors.retry.delay.max.ms`) until `errors.retry.timeout` has passed since its first
failure. Each retry is logged once, naming the call and the error. When the bound is
spent, RetriesExhausted says which call, the last error, how to fix it and the setting
that bounds the wait. Any other error is terminal: raised at once. In a connector the
wait is said from the first failed try, with the fix (waits.py).

The two settings are Kafka Connect's names for its own retry bound. Connect's default
timeout is 0 (no retries); floeline's is 120 s, so a broker restart, a coordinator
still loading or a registry restart is ridden through without a setting."""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from floeline import waits
from floeline.errors import ConfigError, RetriesExhausted, Terminal, Transient

log = logging.getLogger("floeline")

TIMEOUT_KEY = "errors.retry.timeout"
DELAY_KEY = "errors.retry.delay.max.ms"
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_DELAY_S = 5.0
FIRST_DELAY_S = 0.1


@dataclass(frozen=True)
class RetryPolicy:
    """How long transient errors are retried. `timeout_s` None: forever."""

    timeout_s: float | None = DEFAULT_TIMEOUT_S  # errors.retry.timeout (ms there; -1: forever)
    max_delay_s: float = DEFAULT_MAX_DELAY_S  # errors.retry.delay.max.ms

    def delay_s(self, attempt: int) -> float:
        """The wait before retry number `attempt` (1, 2, ...): doubling from 0.1 s, at
        most max_delay_s, with jitter (half to all of it) so clients do not retry in step."""
        base = min(self.max_delay_s, FIRST_DELAY_S * 2 ** min(attempt - 1, 30))
        return base * random.uniform(0.5, 1.0)

    def spent(self, waited_s: float) -> bool:
        return self.timeout_s is not None and waited_s >= self.timeout_s

    def at_most(self, seconds: float) -> RetryPolicy:
        """This policy with its bound lowered to `seconds` (for best-effort calls, such
        as mirroring offsets to a consumer group, that must not hold a batch long)."""
        if self.timeout_s is not None and self.timeout_s <= seconds:
            return self
        return replace(self, timeout_s=seconds)

    def bound_text(self) -> str:
        """The setting as it would be written, e.g. errors.retry.timeout=120000."""
        return f"{TIMEOUT_KEY}={-1 if self.timeout_s is None else int(self.timeout_s * 1000)}"


DEFAULT = RetryPolicy()


def policy_from_settings(settings: Mapping[str, str]) -> RetryPolicy:
    """The policy of a connector's settings; a ConfigError names a bad value."""
    timeout = _milliseconds(settings, TIMEOUT_KEY, -1)
    delay = _milliseconds(settings, DELAY_KEY, 0)
    return RetryPolicy(
        timeout_s=DEFAULT_TIMEOUT_S if timeout is None else (None if timeout == -1 else timeout / 1000),
        max_delay_s=DEFAULT_MAX_DELAY_S if delay is None else max(delay, 1) / 1000)


def _milliseconds(settings: Mapping[str, str], key: str, minimum: int) -> int | None:
    raw = settings.get(key)
    if raw is None or not str(raw).strip():
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        accepted = "-1 (retry forever) or more" if minimum == -1 else f"{minimum} or more"
        example = 120000 if key == TIMEOUT_KEY else 5000
        raise ConfigError(f"{key}={raw!r} is not valid; accepted values: a whole number of "
                          f"milliseconds, {accepted}, e.g. {key}={example}")
    return value


def reason(exc: BaseException) -> str:
    """An error's first line, or its class name when it has no message."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def is_transient(exc: BaseException, transient: Callable[[BaseException], bool] | None = None) -> bool:
    """True for a Transient error, or a foreign one `transient` calls retriable; never
    for a Terminal one."""
    if isinstance(exc, Terminal):
        return False
    if isinstance(exc, Transient):
        return True
    return bool(transient and transient(exc))


def call(fn: Callable[[], Any], *, what: str, service: str, fix: str,
         transient: Callable[[BaseException], bool] | None = None,
         policy: RetryPolicy = DEFAULT,
         terminal: Callable[[BaseException], BaseException] | None = None,
         describe: Callable[[BaseException], str] = reason,
         before_retry: Callable[[BaseException], None] | None = None,
         sleep: Callable[[float], None] = time.sleep,
         clock: Callable[[], float] = time.monotonic) -> Any:
    """`fn()`, retried while it fails with a transient error (see the module doc).

    `what` names the call with its service and target ("Kafka ListOffsets at
    bootstrap.servers=..."); `fix` says what to check when the bound is spent.
    `terminal(exc)` turns a terminal error into the one to raise (return `exc` to
    raise it as it is); `before_retry(exc)` runs before each retry (e.g. to replace a
    client whose metadata is stale); `describe(exc)` is the error as the log shows it."""
    started, attempt = clock(), 0
    while True:
        try:
            result = fn()
        except Exception as exc:  # noqa: BLE001 - classified below
            if not is_transient(exc, transient):
                if attempt:
                    waits.gave_up(what)
                converted = terminal(exc) if terminal is not None else exc
                if converted is exc:
                    raise
                raise converted from exc
            attempt += 1
            waited = clock() - started
            if policy.spent(waited):
                waits.gave_up(what)  # no longer waited for: its error says why
                raise exhausted(what, service, describe(exc), fix, policy, attempt, waited) from exc
            delay = policy.delay_s(attempt)
            if policy.timeout_s is not None:  # never sleep past the bound
                delay = min(delay, max(0.0, policy.timeout_s - waited))
            # In a connector its waits say it (with the fix, from the first try);
            # elsewhere each retry is a line of its own.
            if not waits.failed(what, describe(exc), fix, f"{_bound(policy)}: {policy.bound_text()}"):
                log.warning("%s failed: %s; retry %d in %.1f s (%s)", what, describe(exc),
                            attempt, delay, limit_text(policy))
            if before_retry is not None:
                before_retry(exc)
            sleep(delay)
        else:
            if attempt:
                waits.answered(what)
            return result


def exhausted(what: str, service: str, last: str, fix: str, policy: RetryPolicy,
              attempts: int, waited_s: float) -> RetriesExhausted:
    """The terminal error of a transient one whose bound is spent."""
    return RetriesExhausted(
        f"{what} still failing after {attempts} attempt{'s' * (attempts != 1)} over "
        f"{waited_s:.0f} s: {last.rstrip('.')}. {fix} "
        f"Transient errors are retried for {_bound(policy)} ({policy.bound_text()}); set it "
        f"higher (milliseconds, -1: forever) to wait longer.".replace("  ", " "),
        service=service, attempts=attempts, waited_s=waited_s)


def limit_text(policy: RetryPolicy) -> str:
    """How long retries go on, for log lines."""
    return "no limit" if policy.timeout_s is None else f"gives up after {policy.timeout_s:g} s"


def _bound(policy: RetryPolicy) -> str:
    return "ever" if policy.timeout_s is None else f"{policy.timeout_s:g} s"
