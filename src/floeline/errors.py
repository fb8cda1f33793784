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
    Carries the record's coordinates so the message can name it."""

    def __init__(self, message: str, topic: str | None = None, partition: int | None = None,
                 offset: int | None = None, stage: str | None = None):
        self.topic, self.partition, self.offset, self.stage = topic, partition, offset, stage
        where = ""
        if topic is not None:
            where = f"record topic={topic} partition={partition} offset={offset}"
            if stage:
                where += f" stage={stage}"
            where += ": "
        super().__init__(where + message)


class TableError(FloelineError):
    """A warehouse table cannot be created, evolved or written. Terminal."""


class ServiceUnavailable(FloelineError):
    """Kafka, Java or another service floeline needs cannot be reached. Transient."""
