"""The Kafka source: Spark's own Kafka source in the normalized layout, and what
floeline asks of the Kafka cluster itself outside it (which partitions the
subscription covers, where each partition starts and ends, and the connector's
consumer-group offsets, advanced after each commit so Kafka's own lag tools, e.g.
kafka-consumer-groups, show the connector's lag).

A channel is a topic partition, `topic/partition` (a topic name cannot hold `/`); a
position is the record's offset."""

from __future__ import annotations

import json
import logging
import re
import time
from functools import lru_cache

from floeline import retry
from floeline.errors import ServiceError, ServiceUnavailable, SetupMissing, SourceChanged
from floeline.jvm import KAFKA_READER_CLASS
from floeline.retry import RetryPolicy
from floeline.naming import table_for_topic
from floeline.records.content import sql_string
from floeline.records.metadata import kafka_metadata_sql
from floeline.sources.base import BatchEnd, Channel, Committed, Head, Lag, MirrorError
from floeline.sources.kafka_changes import changes_error, find_changes
from floeline.sources.kafka_clients import AuthFailures, client_config

log = logging.getLogger("floeline")

TIMEOUT_S = 15
# Mirroring offsets to the consumer group and reading the lag are best effort: their
# retries stop after this many seconds (a warning), so they never hold a batch long.
MIRROR_BOUND_S = 10.0
# Options for Spark's Kafka source. After every poll, Spark's reader asks the broker for
# the partition's earliest and latest offsets (two ListOffsets requests), and the broker
# answers one connection's requests in order: they wait behind the fetch the consumer
# sent ahead, which at the end of a partition (where a micro-batch ends) the broker holds
# for fetch.max.wait.ms. Measured in a plain stream over 400 partitions (4 read tasks):
# 3.7-4.1 s a batch with 10 ms, 2.0-2.3 s with 0 (500 ms, Spark's default, cost +1.0 s
# on one 4-partition batch). A fetch with data is answered at once whatever the wait,
# and a micro-batch never polls past the offsets it found, so 0 makes no busy loop.
# Each of those polls hands Spark at most max.poll.records records (Kafka's default: 500),
# so a batch's 100,000 records of a partition took 200 polls, each with its two lookups.
# 5,000 is about what one fetch (max.partition.fetch.bytes, 1 MB) holds of 200-byte
# records, and still bounds what Spark keeps of a partition between batches (its cache of
# fetched records holds the rest of the last poll). A connector reading 1,000,000 records
# of 4 partitions: best 15.4 s with 5,000 against 17.4 s with 500, alternating runs
# (bench/RESULTS.md).
# Spark makes a consumer per topic partition the first time a query reads it, so a
# connector's first batch over 100 topics x 4 partitions made 400 consumers (a warm batch
# then reads those 400 partitions in 0.5-1.5 s). Two of each consumer's start-up steps serve
# no one here: registering its metrics as JMX MBeans (auto.include.jmx.reporter; Spark
# does not show them, floeline reports its own) and asking the broker for a telemetry
# subscription (enable.metrics.push, KIP-714). A first batch over those 400 partitions
# read in 7.5-8.2 s without them against 10.2-10.8 s with them (bench/RESULTS.md).
# A reader never creates a topic: a consumer asking a broker with auto.create.topics.enable
# about a topic deleted under it would create it again, empty, under a new id.
SPARK_SOURCE_OPTIONS = {"kafka.fetch.max.wait.ms": "0", "kafka.max.poll.records": "5000",
                        "kafka.auto.include.jmx.reporter": "false", "kafka.enable.metrics.push": "false",
                        "kafka.allow.auto.create.topics": "false"}
# Spark's Kafka source never subscribes to the broker's internal topics.
_INTERNAL_TOPICS = {"__consumer_offsets", "__transaction_state", "__share_group_state"}


def channel_id(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


def topic_partition(channel: str) -> tuple[str, int]:
    topic, _, partition = channel.rpartition("/")
    return topic, int(partition)


class KafkaSource:
    """Topics of one connector, read with floeline's Kafka reader or Spark's Kafka source
    (floeline.kafka.reader; see sources/base.py)."""

    kind = "kafka"
    has_headers = True
    has_standby = False
    bounded_read_tasks = False  # (floeline's reader: set by `open`)

    def __init__(self, config):
        self.config = config
        self.cluster = KafkaCluster(config.bootstrap_servers, config.retry, config.kafka_security)
        self.group = group_id(config.name)
        self.next_offsets: dict[tuple[str, int], int] = {}  # next offset to read, for lag
        self.first_offsets: dict[tuple[str, int], int] = {}  # where the first batch starts
        self.record_bytes: float | None = None  # sampled mean record size at start
        # The id of each subscribed topic as this run reads it (Committed.epochs): set by
        # `changed` at start, committed with the positions, checked before each batch.
        self.epochs: dict[str, str] = {}

    def channels(self) -> list[Channel]:
        counts = self.cluster.partitions(self.config.topics, self.config.topics_regex)
        return [Channel(channel_id(t, p), t) for t, n in sorted(counts.items()) for p in range(n)]

    def named_routes(self) -> list[str]:
        return list(self.config.topics)

    def subscribed(self, topic: str) -> bool:
        """True for a topic the config reads (listed, or matching topics.regex)."""
        if self.config.topics_regex:
            return topic not in _INTERNAL_TOPICS and re.fullmatch(self.config.topics_regex, topic) is not None
        return topic in self.config.topics

    def table_name(self, route: str) -> str:
        return table_for_topic(route, self.config.topic_map, self.config.table_name_sanitization)

    def route_of(self, channel: str) -> str:
        return topic_partition(channel)[0]

    def start_offsets(self, committed: Committed) -> dict[tuple[str, int], int]:
        """Where each partition starts when there is no Spark checkpoint: after the
        offset its table holds; the earliest (-2) when an offsets change reset it there;
        else the consumer group's offset (Snowflake's rule when the offset token is
        NULL); else the earliest."""
        partitions = [topic_partition(c.id) for c in self.channels()]
        group = self.cluster.group_offsets(self.group, partitions)
        earliest = self.cluster.earliest(partitions)
        self.record_bytes = average_record_bytes(self.config.bootstrap_servers,
                                                 self.cluster.latest(partitions), earliest,
                                                 security=self.config.kafka_security)
        starts = {}
        for tp in partitions:
            position = committed.positions.get(channel_id(*tp))
            if position is not None:
                starts[tp] = int(position) + 1
            elif channel_id(*tp) in committed.earliest:
                starts[tp] = -2
            else:
                starts[tp] = group.get(tp, -2)
            self.next_offsets[tp] = starts[tp] if starts[tp] >= 0 else earliest[tp]
        self.first_offsets = dict(self.next_offsets)
        return starts

    def records_per_partition(self) -> int:
        """The per-partition batch bound: buffer.count.records, lowered so that a batch of
        records of the sampled mean size stays within buffer.size.bytes."""
        limit = self.config.count_records
        if self.record_bytes:
            limit = min(limit, max(1, int(self.config.size_bytes // self.record_bytes)))
        return limit

    def claim(self) -> None:
        """No standby: nothing to wait for. A new query: the last one's offsets and topic
        ids are forgotten (`changed` then checks what the tables hold)."""
        self.next_offsets, self.first_offsets, self.epochs = {}, {}, {}

    def open(self, spark, committed: Committed, has_checkpoint: bool):
        cfg = self.config
        starts = self.start_offsets(committed)
        source_format = self._reader_format(spark)
        reader = (spark.readStream.format(source_format)
                  .option("kafka.bootstrap.servers", cfg.bootstrap_servers)
                  .option("includeHeaders", "true")
                  .options(**SPARK_SOURCE_OPTIONS)
                  .options(**{f"kafka.{k}": v for k, v in cfg.kafka_security.java_options().items()})
                  .option("maxOffsetsPerTrigger",
                          str(self.records_per_partition() * max(1, len(starts)))))
        self.bounded_read_tasks = source_format == KAFKA_READER_CLASS
        if self.bounded_read_tasks:
            # Consumers per batch: as many as the tasks a micro-batch is read in at most
            # (ingest/read_tasks.read_task_limit); a batch is planned in no more.
            reader = reader.option("tasks", str(2 * max(1, spark.sparkContext.defaultParallelism)))
        if cfg.topics_regex:
            reader = reader.option("subscribePattern", cfg.topics_regex)
        else:
            reader = reader.option("subscribe", ",".join(cfg.topics))
        if starts and not has_checkpoint:
            reader = reader.option("startingOffsets", starting_offsets_json(starts))
        else:
            reader = reader.option("startingOffsets", "earliest")
        if starts and self.bounded_read_tasks:
            # floeline's reader: where a partition the checkpoint does not hold (a topic
            # subscribed since it was made) starts; else its earliest, which must be 0.
            reader = reader.option("newPartitionOffsets", starting_offsets_json(starts))
        return reader.load()

    def _reader_format(self, spark) -> str:
        conf = spark.sparkContext.getConf()  # a local session has its jars on the class path
        jars = ",".join((conf.get("spark.jars", ""), conf.get("spark.driver.extraClassPath", "")))
        return reader_format(self.config.kafka_reader, "floeline.kafka.reader" in self.config.raw, jars)

    def normalize(self, batch):
        return batch.selectExpr(*NORMALIZED_KAFKA)

    def batch_end(self, offset_json: str) -> BatchEnd | None:
        return batch_end_from_offsets(offset_json)

    def start_of_first_batch(self) -> BatchEnd | None:
        if not self.first_offsets:
            return None
        return BatchEnd({channel_id(*tp): str(o - 1) for tp, o in self.first_offsets.items() if o > 0})

    def metadata_sql(self, flags, push_time_sql, key_json=None, headers_json=None, extra=(),
                     function=None, as_json=False) -> str:
        return kafka_metadata_sql(flags, push_time_sql, key_json, headers_json, extra, function, as_json)

    def describe(self, fields: dict) -> str:
        return f"topic={fields.get('topic')} partition={fields.get('partition')} offset={fields.get('offset')}"

    def first_records_sql(self, start: BatchEnd, count: int) -> str | None:
        """Offsets count up within a partition, so the first `count` records after
        `start` are those below its position + 1 + count (a partition `start` does not
        hold starts at offset 0; fewer records where compaction or transactions left gaps)."""
        return first_offsets_sql(start, count)

    def changed(self, committed: Committed) -> SourceChanged | None:
        """The subscribed partitions the connector holds a place in (a committed offset,
        or where this run started one) that changed under it (sources/kafka_changes.py),
        against the topic ids the positions were read from (the tables', and this run's
        own); None when none did, and the ids now become this run's."""
        counts = self.cluster.partitions(self.config.topics, self.config.topics_regex)
        held = {topic_partition(c): int(p) + 1 for c, p in committed.positions.items()
                if self.subscribed(topic_partition(c)[0])}
        for tp, next_offset in self.next_offsets.items():
            if channel_id(*tp) not in committed.earliest:
                held.setdefault(tp, next_offset)
        ids_now = self.cluster.topic_ids(sorted(counts))
        there = [tp for tp in held if tp[1] < counts.get(tp[0], 0)]
        changes = find_changes(held, committed.positions, {**self.epochs, **committed.epochs}, ids_now,
                               counts, self.cluster.earliest(there), self.cluster.latest(there))
        if changes:
            return changes_error(self.config.name, changes)
        self.epochs = ids_now
        return None

    def before_batch(self) -> None:
        """The topics' ids are those this run started with: one DescribeTopics request
        a batch (1.3-1.9 ms on the local broker, about what the lag's ListOffsets after
        each batch costs). A topic deleted and created again since would otherwise be
        read from the old topic's offsets, skipping the new one's first records. A topic
        not listed is left to the readers' own checks (a deleted topic's partitions are
        gone to them), not taken for deleted on one answer."""
        if not self.epochs:
            return
        now = self.cluster.topic_ids(sorted(self.epochs))
        moved = sorted(t for t, epoch in self.epochs.items() if now.get(t, epoch) != epoch)
        if moved:
            raise SourceChanged(
                f"connector {self.config.name}: topic {', '.join(moved)} was deleted and created "
                f"again while the connector ran (topic ids "
                + ", ".join(f"{self.epochs[t]} -> {now[t]}" for t in moved) + ")")

    def before_commit(self) -> None:
        pass

    def epochs_of(self, channels) -> dict[str, str]:
        """The ids of the channels' topics this run reads; a topic first seen since the
        run started (topics.regex) is asked for once."""
        routes = {topic_partition(c)[0] for c in channels}
        unknown = sorted(routes - set(self.epochs))
        if unknown:
            self.epochs.update(self.cluster.topic_ids(unknown))
        return {r: self.epochs[r] for r in routes if r in self.epochs}

    def after_commit(self, positions: dict[str, str], finished: set[str]) -> None:
        """Advance the consumer group to the new positions (lag tooling only)."""
        nexts = {topic_partition(c): int(p) + 1 for c, p in positions.items()}
        if not nexts:
            return
        self.next_offsets.update(nexts)
        try:
            self.cluster.commit_group_offsets(self.group, nexts,
                                              self.config.retry.at_most(MIRROR_BOUND_S))
        except Exception as exc:
            raise MirrorError(f"could not advance consumer group {self.group}: {exc}") from exc

    def heads(self, committed: dict[str, str] | None = None) -> dict[str, Head]:
        """Per partition: the newest record's offset (the log end offset less one) and
        the records after the committed offset (the log end offset less the next offset
        to read, as kafka-consumer-groups counts lag). A partition with nothing
        committed counts from where the connector would start: the consumer group's
        offset, else the earliest."""
        if committed is None:
            nexts = dict(self.next_offsets)
        else:
            partitions = {topic_partition(c.id) for c in self.channels()}
            partitions |= {topic_partition(c) for c in committed}
            nexts = {tp: int(committed[channel_id(*tp)]) + 1 for tp in partitions
                     if channel_id(*tp) in committed}
            rest = partitions - set(nexts)
            group = self.cluster.group_offsets(self.group, rest) if rest else {}
            earliest = self.cluster.earliest(rest - set(group)) if rest - set(group) else {}
            nexts.update(group)
            nexts.update(earliest)
        ends = self.cluster.latest(nexts, self.config.retry.at_most(MIRROR_BOUND_S))
        return {channel_id(*tp): Head(str(ends[tp] - 1) if ends[tp] > 0 else None,
                                      Lag(max(0, ends[tp] - nexts[tp])))
                for tp in sorted(nexts) if tp in ends}

    def close(self) -> None:
        pass


def reader_format(reader: str, given: bool, session_jars: str) -> str:
    """The data source of floeline.kafka.reader (`reader`; `given`: set in the config):
    Spark's Kafka source (`spark`: a consumer per topic partition) or floeline's
    (`grouped`: a consumer per task, resources/java/GroupedKafka.java; the same columns and
    offsets). floeline's needs its jar in the session (`session_jars`: spark.jars and the
    driver's class path), which set-up compiles once Spark's packages are resolved:
    without it the default falls back to Spark's source, and an explicit `grouped` is an
    error saying how to get it."""
    if reader == "spark":
        return "kafka"
    if "floeline-kafka-reader-" in session_jars:
        return KAFKA_READER_CLASS
    if not given:
        log.warning("floeline's Kafka reader jar is not in this Spark session (`floeline setup` "
                    "builds it once Spark's packages are resolved): reading with Spark's source")
        return "kafka"
    raise SetupMissing("floeline.kafka.reader=grouped: this Spark session was started without "
                       "floeline's Kafka reader jar; run `floeline setup` (it compiles the jar once "
                       "Spark's packages are resolved), or set floeline.kafka.reader=spark")


def first_offsets_sql(start: BatchEnd, count: int) -> str:
    """KafkaSource.first_records_sql: the record's offset below its partition's bound."""
    bounds = ", ".join(f"{sql_string(ch)}, {int(p) + 1 + count}L" for ch, p in sorted(start.positions.items()))
    bound = f"coalesce(element_at(map({bounds}), channel), {count}L)" if bounds else f"{count}L"
    return f"source.offset < {bound}"


def batch_end_from_offsets(offset_json: str) -> BatchEnd | None:
    """Spark's Kafka offsets, {"topic": {"0": next_offset}}, as last positions."""
    try:
        source = json.loads(offset_json)
        nexts = {(t, int(p)): int(o) for t, parts in source.items() for p, o in parts.items()}
    except (ValueError, AttributeError, TypeError):
        return None
    return BatchEnd({channel_id(*tp): str(o - 1) for tp, o in nexts.items() if o > 0})


# The Kafka source's columns in the normalized layout (sources/base.py). Applied per
# micro-batch, Spark folds `source.<field>` back into the Kafka column and prunes what
# the batch does not use.
NORMALIZED_KAFKA = (
    "concat(topic, '/', CAST(partition AS STRING)) AS channel",
    "CAST(offset AS STRING) AS position",
    "topic AS route", "key", "value", "headers", "timestamp",
    "named_struct('topic', topic, 'partition', partition, 'offset', offset, "
    "'timestampType', timestampType) AS source",
)


def uuid_hex(uuid) -> str:
    """A confluent_kafka Uuid (a topic's id) as 32 lowercase hex digits."""
    mask = (1 << 64) - 1
    return f"{uuid.get_most_significant_bits() & mask:016x}{uuid.get_least_significant_bits() & mask:016x}"


def group_id(connector: str) -> str:
    """Kafka Connect names a sink connector's consumer group `connect-{name}`."""
    return f"connect-{connector}"


class KafkaCluster:
    """floeline's own calls to the Kafka cluster (an admin client), each through the
    retry rule (floeline/retry.py) with `policy`'s bound, connecting with the
    connector's security settings (`security`: a KafkaSecurity, None for PLAINTEXT)."""

    # How long the first connection of a secured client is watched for a refused login
    # before the call goes on as usual (a refusal shows within a second).
    LOGIN_CHECK_S = 5.0

    def __init__(self, bootstrap: str, policy: RetryPolicy = retry.DEFAULT, security=None):
        self.bootstrap, self.policy, self.security = bootstrap, policy, security
        self.auth_failures = AuthFailures()
        self._admin = None
        self._login_checked = security is None or security.protocol == "PLAINTEXT"

    def client_config(self, **extra) -> dict:
        """librdkafka settings for this cluster, reporting refused logins to self."""
        return client_config(self.bootstrap, self.security, error_cb=self.auth_failures, **extra)

    @property
    def admin(self):
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            self._admin = AdminClient(self.client_config(log_level=2))
            if not self._login_checked:
                self._login_checked = True
                self._check_login()
        return self._admin

    def _check_login(self) -> None:
        """Fail at once when the broker refuses the credentials or its certificate is not
        trusted: librdkafka only reports that to the error callback, and the request
        itself would wait for its whole timeout, then be retried as a network error."""
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + self.LOGIN_CHECK_S
        while time.monotonic() < deadline:
            try:
                self._admin.list_topics(timeout=1.0)
                return
            except KafkaException:
                self.raise_auth_failure()

    def raise_auth_failure(self) -> None:
        """Raise AuthenticationFailed if a client of this cluster was refused a login."""
        if self._admin is not None:
            self._admin.poll(0)
        self.auth_failures.raise_if_any(self.bootstrap, self.security)

    def _fresh_admin(self, _exc: BaseException) -> None:
        """Before a retry: a new admin client. librdkafka's admin client keeps the
        leader epochs it cached before a broker restart and then fails every
        ListOffsets with FENCED_LEADER_EPOCH, however often it is retried."""
        self._admin = None

    def call(self, what: str, fn, policy: RetryPolicy | None = None,
             also_transient: frozenset[int] = frozenset()):
        """`fn(timeout_s)` (which uses self.admin, each request waiting at most
        timeout_s), retried while Kafka's error is transient."""
        policy = policy or self.policy
        # One request waits at most TIMEOUT_S (librdkafka's own default is 60 s), and
        # at most half the bound, so a request that hangs on a client gone stale after
        # a broker restart is tried again on a fresh one within the bound.
        bound = policy.timeout_s if policy.timeout_s is not None else TIMEOUT_S
        timeout_s = max(1.0, min(TIMEOUT_S, bound / 2))
        from confluent_kafka import KafkaException

        def attempt():
            # A login this cluster's clients were refused fails every call at once:
            # otherwise each request would wait out its timeout before saying so.
            self.auth_failures.raise_if_any(self.bootstrap, self.security)
            try:
                return fn(timeout_s)
            except KafkaException:
                self.raise_auth_failure()  # a refused login, not a network error
                raise
        return kafka_call(f"Kafka {what} at bootstrap.servers={self.bootstrap}",
                          attempt, policy, before_retry=self._fresh_admin,
                          also_transient=also_transient)

    def partitions(self, topics: tuple[str, ...] = (), pattern: str | None = None
                   ) -> dict[str, int]:
        """Partition count per subscribed topic that exists now."""
        meta = self.call("Metadata", lambda timeout_s: self.admin.list_topics(timeout=timeout_s))
        regex = re.compile(pattern) if pattern else None
        found = {}
        for name, topic in meta.topics.items():
            if name in topics or (regex and regex.fullmatch(name) and name not in _INTERNAL_TOPICS):
                found[name] = len(topic.partitions)
        return found

    def topic_ids(self, topics, policy: RetryPolicy | None = None) -> dict[str, str]:
        """Each existing topic's id (Kafka's topic UUID) as 32 lowercase hex digits;
        a topic that does not exist is absent."""
        from confluent_kafka import KafkaError, KafkaException, TopicCollection

        topics = list(topics)
        if not topics:
            return {}

        def describe(timeout_s):
            futures = self.admin.describe_topics(TopicCollection(topics), request_timeout=timeout_s)
            found = {}
            for name, future in futures.items():
                try:
                    found[name] = uuid_hex(future.result().topic_id)
                except KafkaException as exc:
                    error = kafka_error(exc)
                    if error is None or error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise
            return found
        return self.call("DescribeTopics", describe, policy)

    def _list_offsets(self, tps: list[tuple[str, int]], spec,
                      policy: RetryPolicy | None = None) -> dict[tuple[str, int], int]:
        from confluent_kafka import KafkaError, TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if not tps:
            return {}

        def list_offsets(timeout_s):
            request = {TopicPartition(t, p): getattr(OffsetSpec, spec)() for t, p in tps}
            futures = self.admin.list_offsets(request, request_timeout=timeout_s)
            return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
        # _NOENT: "No leaders found", right after a broker start.
        return self.call(f"ListOffsets ({spec})", list_offsets, policy,
                         also_transient=frozenset({KafkaError._NOENT}))

    def earliest(self, tps):
        return self._list_offsets(list(tps), "earliest")

    def latest(self, tps, policy: RetryPolicy | None = None):
        return self._list_offsets(list(tps), "latest", policy)

    def group_offsets(self, group: str, tps) -> dict[tuple[str, int], int]:
        """The group's committed next-offset per partition (absent when none).

        Read by a consumer of the group (committed(), which joins nothing), not the
        admin client's ListConsumerGroupOffsets: librdkafka (2.16 here, unchanged in its
        newest source) crashes the process when an admin client's OffsetFetch is answered
        NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE, as a broker that is starting
        answers (it asks the absent consumer group to find the coordinator again)."""
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        tps = list(tps)
        if not tps:
            return {}

        def committed(timeout_s):
            consumer = Consumer(self.client_config(**{"group.id": group, "enable.auto.commit": False,
                                                      "log_level": 2}))
            try:
                found = consumer.committed([TopicPartition(t, p) for t, p in tps], timeout=timeout_s)
            finally:
                consumer.close()
            failed = [tp.error for tp in found if tp.error is not None]
            if failed:
                raise KafkaException(failed[0])
            return found
        result = self.call(f"OffsetFetch of group {group}", committed)
        return {(tp.topic, tp.partition): tp.offset for tp in result if tp.offset >= 0}

    def commit_group_offsets(self, group: str, next_offsets: dict[tuple[str, int], int],
                             policy: RetryPolicy | None = None) -> None:
        """Set the group's committed offsets (the next offset to read, Kafka's convention)."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        if not next_offsets:
            return

        def alter(timeout_s):
            request = ConsumerGroupTopicPartitions(
                group, [TopicPartition(t, p, o) for (t, p), o in sorted(next_offsets.items())])
            self.admin.alter_consumer_group_offsets([request], request_timeout=timeout_s)[group].result()
        self.call(f"AlterConsumerGroupOffsets of group {group}", alter, policy)


    def delete_group(self, group: str, policy: RetryPolicy | None = None) -> None:
        """Delete the group and its committed offsets (as Connect resets a stopped sink
        connector's offsets); a group that does not exist is already deleted."""
        from confluent_kafka import KafkaError, KafkaException

        def delete(timeout_s):
            try:
                self.admin.delete_consumer_groups([group], request_timeout=timeout_s)[group].result()
            except KafkaException as exc:
                error = kafka_error(exc)
                if error is None or error.code() != KafkaError.GROUP_ID_NOT_FOUND:
                    raise
        self.call(f"DeleteGroups of group {group}", delete, policy)


# Kafka errors that pass by themselves: a broker or coordinator starting or moving, a
# leader election, a connection that dropped. librdkafka flags many as retriable
# (KafkaError.retriable()), but not in every admin result (a loading coordinator is
# not flagged), so the codes are listed too.
TRANSIENT_KAFKA_ERRORS = (
    "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR",
    "LEADER_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION", "REPLICA_NOT_AVAILABLE",
    "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "OFFSET_NOT_AVAILABLE",
    "REQUEST_TIMED_OUT", "NETWORK_EXCEPTION", "KAFKA_STORAGE_ERROR", "NOT_ENOUGH_REPLICAS",
    "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "REBALANCE_IN_PROGRESS", "THROTTLING_QUOTA_EXCEEDED",
    "_TRANSPORT", "_TIMED_OUT", "_TIMED_OUT_QUEUE", "_ALL_BROKERS_DOWN", "_MSG_TIMED_OUT",
    "_WAIT_COORD", "_RESOLVE",
)


@lru_cache(maxsize=1)
def transient_kafka_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    return frozenset(getattr(KafkaError, n) for n in TRANSIENT_KAFKA_ERRORS if hasattr(KafkaError, n))


def kafka_error(exc: BaseException):
    """The KafkaError a confluent_kafka exception carries, else None."""
    from confluent_kafka import KafkaError, KafkaException

    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return error if isinstance(error, KafkaError) else None


def is_transient_kafka(exc_or_error, also: frozenset[int] = frozenset()) -> bool:
    """True for a Kafka error that passes by itself (see TRANSIENT_KAFKA_ERRORS), never
    for one librdkafka calls fatal. Takes a KafkaException or a KafkaError (a
    delivery report's)."""
    from confluent_kafka import KafkaError

    error = exc_or_error if isinstance(exc_or_error, KafkaError) else kafka_error(exc_or_error)
    if error is None or error.fatal():
        return False
    return error.retriable() or error.code() in transient_kafka_codes() or error.code() in also


def describe_kafka(exc: BaseException) -> str:
    error = kafka_error(exc)
    return f"{error.name()}: {error.str()}" if error is not None else retry.reason(exc)


def kafka_call(what: str, fn, policy: RetryPolicy = retry.DEFAULT, before_retry=None,
               also_transient: frozenset[int] = frozenset()):
    """`fn()`, retried while it raises a transient Kafka error (or a Transient one);
    another Kafka error is a terminal ServiceError naming the call."""
    def terminal(exc: BaseException) -> BaseException:
        if kafka_error(exc) is None:
            return exc
        return ServiceError(f"{what} failed: {describe_kafka(exc)}. Retrying cannot fix this "
                            f"error: check the broker's address, the topic and the client's "
                            f"permissions.")

    return retry.call(fn, what=what, service="Kafka", policy=policy,
                      transient=lambda exc: is_transient_kafka(exc, also_transient),
                      terminal=terminal, describe=describe_kafka, before_retry=before_retry,
                      fix="Check that the broker is running and reachable (`floeline kafka "
                          "start` for the local one) and bootstrap.servers.")


def average_record_bytes(bootstrap: str, latest: dict[tuple[str, int], int],
                         earliest: dict[tuple[str, int], int], per_partition: int = 20,
                         max_partitions: int = 16, timeout_s: float = 5.0,
                         security=None) -> float | None:
    """The mean key+value size of the newest records of a few partitions, or None when
    they are empty. Spark's Kafka source limits a micro-batch by record count only, so
    buffer.size.bytes is turned into a record count with this sample."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    tps = [tp for tp in sorted(latest) if latest[tp] > earliest.get(tp, 0)][:max_partitions]
    if not tps:
        return None
    consumer = Consumer(client_config(bootstrap, security, **{
        "group.id": "floeline-sampler", "enable.auto.commit": False, "enable.partition.eof": True,
        # The end of a partition shows after an empty fetch: do not let the broker hold
        # that fetch for its default 500 ms.
        "fetch.wait.max.ms": 10}))
    try:
        consumer.assign([TopicPartition(t, p, max(earliest.get((t, p), 0), latest[(t, p)] - per_partition))
                         for t, p in tps])
        sizes, finished, deadline = [], 0, time.time() + timeout_s
        while finished < len(tps) and time.time() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                finished += message.error().code() == KafkaError._PARTITION_EOF
                continue
            sizes.append(len(message.value() or b"") + len(message.key() or b""))
    finally:
        consumer.close()
    return sum(sizes) / len(sizes) if sizes else None


def starting_offsets_json(positions: dict[tuple[str, int], int]) -> str:
    """Spark's `startingOffsets` JSON: {"topic": {"0": next_offset, ...}}; -2 = earliest."""
    spec: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(positions.items()):
        spec.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(spec)


def produce(bootstrap: str, topic: str, records, partition: int | None = None,
            security=None) -> int:
    """Send records to `topic` and wait for every delivery. Each record is a value
    (bytes, str, a dict/list encoded as JSON, or None for a tombstone) or a dict with
    `value` and optional `key`, `headers` ([(k, v), ...]), `partition`, `timestamp`
    (epoch ms). Used by the demo, tests and benchmarks (`security`: a KafkaSecurity for
    a secured broker); returns the count sent."""
    from confluent_kafka import Producer

    producer = Producer(client_config(bootstrap, security, **{
        "linger.ms": 20, "batch.num.messages": 10000, "queue.buffering.max.messages": 500000,
        "message.max.bytes": 20971520,
        # Delivery failures surface through on_delivery below; librdkafka's own
        # reconnect chatter after a broker stops would only be noise.
        "log_level": 2}))
    failures, sent = [], 0

    def on_delivery(err, _msg):
        if err is not None:
            failures.append(err)

    for record in records:
        if not (isinstance(record, dict) and "value" in record and set(record) <= {
                "value", "key", "headers", "partition", "timestamp"}):
            record = {"value": record}
        value = record["value"]
        if isinstance(value, (dict, list)):
            value = json.dumps(value)
        kwargs = {"value": value, "on_delivery": on_delivery}
        for name in ("key", "headers", "timestamp"):
            if record.get(name) is not None:
                kwargs[name] = record[name]
        part = record.get("partition", partition)
        if part is not None:
            kwargs["partition"] = part
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        sent += 1
        producer.poll(0)
    producer.flush(60)
    if failures:
        raise ServiceUnavailable(f"{len(failures)} of {sent} records to {topic} failed: {failures[0]}")
    return sent
