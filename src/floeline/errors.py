"""The exceptions a user can meet. Flat on purpose: callers catch FloelineError, and
each subclass says where the problem came from. Every message says what is wrong,
where, and how to fix it.

Terminal vs transient follows dlt: a ConfigError or a RecordError will not go away
by retrying; a ServiceUnavailable (broker down) may."""


class FloelineError(Exception):
    """Base of every error floeline raises on purpose."""


class ConfigError(FloelineError):
    """A connector setting is missing, unknown or invalid. Terminal."""


class NamingError(ConfigError):
    """A topic, table or topic2table.map entry cannot be turned into a table name."""


class RecordError(FloelineError):
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


class TableError(FloelineError):
    """A warehouse table cannot be created, evolved or written. Terminal."""


class ServiceUnavailable(FloelineError):
    """Kafka, Java or another service floeline needs cannot be reached. Transient."""


class SetupMissing(FloelineError):
    """Something floeline's set-up builds or fetches (its jars) is not there, and the
    command must not build it itself (`floeline submit` never runs mvn or javac)."""


class SqlError(FloelineError):
    """A `floeline sql` statement cannot be parsed, translated or run. The message
    names the statement, the position (line/col) when known, and the problem."""
