"""The exceptions a user can meet. Flat on purpose: callers catch FloelineError, and
each subclass says where the problem came from. Every message says what is wrong,
where, and how to fix it.

Terminal vs transient follows dlt's split, as two mixin types: an error that is a
`Transient` may go away by itself (a broker still starting, a leader election, a
registry restart, throttling), so floeline retries it with backoff and a bound
(floeline/retry.py); a `Terminal` one will not (a bad setting, a bad record, access
denied), so it stops at once with its message. Code asks `isinstance(exc, Transient)`,
never a class name. An error that is neither is treated as terminal.

A transient error that outlasts its bound is raised as RetriesExhausted, a terminal
error: the bound is spent, so nothing retries it again and the connector stops with
a message naming the service, the call, the fix and the setting that bounds retries."""


class Transient(Exception):
    """Mixin: retrying later may succeed."""


class Terminal(Exception):
    """Mixin: retrying cannot fix it; stop with the message."""


class FloelineError(Exception):
    """Base of every error floeline raises on purpose."""


class ConfigError(FloelineError, Terminal):
    """A connector setting is missing, unknown or invalid. Terminal."""


class NamingError(ConfigError):
    """A topic, table or topic2table.map entry cannot be turned into a table name."""


class RecordError(FloelineError, Terminal):
    """A source record cannot be ingested (bad JSON, wrong shape, wrong type).
    Carries the record's coordinates so the message can name it: `where` as its source
    describes it (`topic=orders partition=0 offset=5`, `stream=s shardId=... ...`), or
    Kafka's topic/partition/offset; `channel` and `position` as the pipeline knows it."""

    def __init__(self, message: str, topic: str | None = None, partition: int | None = None,
                 offset: int | None = None, stage: str | None = None, *,
                 where: str | None = None, channel: str | None = None, position: str | None = None):
        self.topic, self.partition, self.offset, self.stage = topic, partition, offset, stage
        self.channel, self.position = channel, position
        if where is None and topic is not None:
            where = f"topic={topic} partition={partition} offset={offset}"
        prefix = ""
        if where is not None:
            prefix = f"record {where}" + (f" stage={stage}" if stage else "") + ": "
        super().__init__(prefix + message)


class TransformError(RecordError):
    """A Single Message Transform (transforms.<alias>) failed on a record. The message
    names the alias, the transform class and the reason; `alias`, `transform` (the short
    class name, e.g. "Cast$Value") and `reason` (the message without the record's
    coordinates) are kept for callers that build their own message."""

    def __init__(self, message: str, topic: str | None = None, partition: int | None = None,
                 offset: int | None = None, stage: str | None = "transform",
                 alias: str | None = None, transform: str | None = None):
        super().__init__(message, topic, partition, offset, stage)
        self.alias, self.transform, self.reason = alias, transform, message

    def __reduce__(self):  # keep the coordinates when pickled (Spark ships errors between processes)
        return (type(self), (self.reason, self.topic, self.partition, self.offset, self.stage,
                             self.alias, self.transform))


class TableError(FloelineError, Terminal):
    """A warehouse table cannot be created, evolved or written. Terminal."""


class StorageFull(TableError):
    """The filesystem under the warehouse (or the checkpoint) has no space left.
    Terminal: nothing of the batch was committed (a Delta commit is one atomic file
    written last), and a restart after space is freed resumes after the last commit."""


# How a full disk or quota reads in Java's IOException and Python's OSError.
_NO_SPACE = ("No space left on device", "Disk quota exceeded")


def storage_full(exc: BaseException, what: str, where: str) -> StorageFull | None:
    """A StorageFull naming `what` was being written and `where`, when `exc` (or a
    cause in its text: Spark's errors carry the Java chain) is a full disk; else None."""
    text = str(exc)
    found = next((mark for mark in _NO_SPACE if mark in text), None)
    if found is None:
        return None
    return StorageFull(f"{what} failed: the storage is full ({found}) at {where}. Nothing of this "
                       f"batch was committed. Free space there (or point floeline.warehouse at a larger "
                       f"disk) and run again: the connector resumes after the last commit.")


class ServiceUnavailable(FloelineError, Transient):
    """A service floeline calls (Kafka, Kinesis, DynamoDB, S3, SQS, the schema
    registry) cannot be reached right now or answered with an error it calls
    retriable. Transient: retried with backoff until the bound (retry.py)."""


class RetriesExhausted(FloelineError, Terminal):
    """A transient error that was retried until its bound was spent. The message names
    the service, the call, the last error, how to fix it and the setting that bounds
    the retries. Terminal: nothing retries it again, the connector stops."""

    def __init__(self, message: str, service: str = "", attempts: int = 0, waited_s: float = 0.0):
        super().__init__(message)
        self.service, self.attempts, self.waited_s = service, attempts, waited_s

    def __reduce__(self):  # keep the fields when pickled (Spark ships errors between processes)
        return (type(self), (str(self), self.service, self.attempts, self.waited_s))


class ServiceError(FloelineError, Terminal):
    """A service refused a call in a way retrying cannot fix (access denied, a topic
    that does not exist, a malformed request). Terminal."""


class QueryError(FloelineError, Terminal):
    """The connector's streaming query failed with an error retrying cannot fix, or
    Spark itself ended under it. Terminal."""


class SourceChanged(FloelineError, Terminal):
    """The source changed under the connector so that reading on from the committed
    positions would skip or misread records (a Kafka topic deleted and created again, a
    partition gone or now ending before its committed offset, records deleted before
    they were read). The message names each channel, its committed and available
    positions and the fix; `changes` are the sources/base.ChannelChange to follow when
    the connector is told to go on (floeline.kafka.fail.on.data.loss=false). Terminal:
    nothing past the committed positions was committed."""

    def __init__(self, message: str, changes=()):
        super().__init__(message)
        self.changes = tuple(changes)

    def __reduce__(self):  # keep the changes when pickled
        return (type(self), (str(self), self.changes))


class SetupError(FloelineError, Terminal):
    """A tool or local service floeline's set-up needs (java, mvn, npm, a free port, a
    dev broker that would not start) is missing or failed. Terminal: fix the machine."""


class SetupMissing(SetupError):
    """Something floeline's set-up builds or fetches (its jars) is not there, and the
    command must not build it itself (`floeline submit` never runs mvn or javac)."""


class SqlError(FloelineError, Terminal):
    """A `floeline sql` statement cannot be parsed, translated or run. The message
    names the statement, the position (line/col) when known, and the problem."""


# ---- errors that cross from a Spark worker to the driver -------------------------------
# A record's decode error travels as text in its row. Whether it is the record's fault
# or fails the whole batch, and then whether a retry may help, is decided where the
# exception is, by its type, and travels as one of these words.

BATCH_TRANSIENT = "transient"
BATCH_TERMINAL = "terminal"


def batch_failure_kind(exc: BaseException) -> str | None:
    """None when `exc` is a record's own fault (a RecordError, or an error a decoder
    raised on the record's bytes), for the error rules to route; else how it fails
    the batch: BATCH_TRANSIENT (a service that may come back) or BATCH_TERMINAL (a
    bound spent, a setting wrong)."""
    if isinstance(exc, RecordError) or not isinstance(exc, FloelineError):
        return None
    return BATCH_TRANSIENT if isinstance(exc, Transient) else BATCH_TERMINAL


def batch_failure(kind: str, message: str) -> FloelineError:
    """The driver's exception for a row whose error failed the batch (see above)."""
    return ServiceUnavailable(message) if kind == BATCH_TRANSIENT else ServiceError(message)


def first_lines(message: str, n: int = 6) -> str:
    """A Spark error without its JVM stack trace."""
    message = message.split("\n\nJVM stacktrace")[0]
    return "\n".join(message.splitlines()[:n])


def missing_extra(module: str, extra: str, needed_for: str) -> str | None:
    """None when `module` imports; else a message naming what needs it and floeline's
    optional dependency group that installs it (`pip install 'floeline[EXTRA]'`). The
    package alone installs what running a connector needs; the extras add the rest."""
    import importlib.util

    try:  # found, not imported (moto takes a while to import)
        if importlib.util.find_spec(module) is not None:
            return None
    except (ImportError, ValueError):  # ValueError: a module blocked in sys.modules
        pass
    return (f"{needed_for} needs the Python package of floeline's [{extra}] extra, which is not "
            f"installed (no module {module!r}): pip install 'floeline[{extra}]' (`make setup` "
            f"installs every extra)")
