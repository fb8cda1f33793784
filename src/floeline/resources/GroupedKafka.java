package floeline.kafka;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicLong;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetOutOfRangeException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * floeline's micro-batch Kafka reader (sources/kafka.py, `floeline.kafka.reader=grouped`):
 * the rows of Spark's Kafka source (same columns, same offset JSON in the checkpoint), read
 * by one consumer per Spark task, each assigned several topic partitions.
 *
 * Why: Spark's source makes a consumer, and generates a row converter, for every topic
 * partition of a batch; a connector reading 100 topics x 4 partitions paid that 400 times
 * (bench/bench_kafka_reader.py: the first batch over 400 partitions 6.9-10.6 s against
 * 0.5-1.0 s here, a small warm batch 3.5 s against 0.25 s). Consumers are kept between
 * batches per (query, task) and closed after IDLE_MS unused.
 *
 * Options (as Spark's source names them): kafka.* (the consumer's settings), subscribe or
 * subscribePattern, startingOffsets ("earliest" or Spark's JSON, -2 for earliest),
 * maxOffsetsPerTrigger, tasks (consumers per batch; default 4), pollTimeoutMs (default
 * 120000: a fetch that gets nothing for this long fails the batch with a TimeoutException,
 * as Spark's does). Records missing below a batch's start (deleted by retention) fail the
 * batch, as Spark's source does with failOnDataLoss=true (its default).
 */
public final class GroupedKafka implements TableProvider {
    static final StructType SCHEMA = new StructType(new StructField[] {
        DataTypes.createStructField("key", DataTypes.BinaryType, true),
        DataTypes.createStructField("value", DataTypes.BinaryType, true),
        DataTypes.createStructField("topic", DataTypes.StringType, true),
        DataTypes.createStructField("partition", DataTypes.IntegerType, true),
        DataTypes.createStructField("offset", DataTypes.LongType, true),
        DataTypes.createStructField("timestamp", DataTypes.TimestampType, true),
        DataTypes.createStructField("timestampType", DataTypes.IntegerType, true),
        DataTypes.createStructField("headers", DataTypes.createArrayType(new StructType(new StructField[] {
            DataTypes.createStructField("key", DataTypes.StringType, true),
            DataTypes.createStructField("value", DataTypes.BinaryType, true)})), true)});

    // The broker's own topics, never read by a pattern (as Spark's source).
    static final Set<String> INTERNAL_TOPICS = Set.of("__consumer_offsets", "__transaction_state", "__share_group_state");

    // A kept consumer unused this long is closed (Spark's source: 5 minutes too).
    static final long IDLE_MS = 5 * 60 * 1000L;
    static final AtomicLong CONSUMERS_MADE = new AtomicLong();

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        return SCHEMA;
    }

    @Override
    public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
        return new KafkaTable();
    }

    static final class KafkaTable implements Table, SupportsRead {
        @Override
        public String name() {
            return "floeline-grouped-kafka";
        }

        @Override
        public StructType schema() {
            return SCHEMA;
        }

        @Override
        public Set<TableCapability> capabilities() {
            return EnumSet.of(TableCapability.MICRO_BATCH_READ);
        }

        @Override
        public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
            Map<String, String> copy = new HashMap<>(options.asCaseSensitiveMap());
            return () -> new Scan() {
                @Override
                public StructType readSchema() {
                    return SCHEMA;
                }

                @Override
                public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
                    return new Stream(copy);
                }
            };
        }
    }

    /** The consumer's settings: the kafka.* options, and what this reader needs. */
    static Map<String, String> consumerSettings(Map<String, String> options) {
        Map<String, String> settings = new HashMap<>();
        options.forEach((k, v) -> {
            if (k.toLowerCase().startsWith("kafka.")) {
                settings.put(k.substring("kafka.".length()), v);
            }
        });
        settings.put("key.deserializer", ByteArrayDeserializer.class.getName());
        settings.put("value.deserializer", ByteArrayDeserializer.class.getName());
        settings.put("enable.auto.commit", "false");
        settings.put("auto.offset.reset", "none");  // a missing position is an error, never a jump
        settings.remove("group.id");  // assigned partitions, no group membership or commits
        return settings;
    }

    static KafkaConsumer<byte[], byte[]> newConsumer(Map<String, String> settings) {
        Properties props = new Properties();
        props.putAll(settings);
        // Named for the broker's logs and quotas and for JMX (a test counts them open).
        props.putIfAbsent("client.id", "floeline-kafka-reader-" + CONSUMERS_MADE.incrementAndGet());
        return new KafkaConsumer<>(props);
    }

    /** Positions per topic partition, in Spark's Kafka offset JSON: {"topic":{"0":5}}. */
    static final class Positions extends Offset {
        private static final ObjectMapper JSON = new ObjectMapper();
        final Map<TopicPartition, Long> offsets;

        Positions(Map<TopicPartition, Long> offsets) {
            this.offsets = offsets;
        }

        static Positions parse(String json) {
            try {
                Map<TopicPartition, Long> offsets = new HashMap<>();
                Iterator<Map.Entry<String, JsonNode>> topics = JSON.readTree(json).fields();
                while (topics.hasNext()) {
                    Map.Entry<String, JsonNode> t = topics.next();
                    t.getValue().fields().forEachRemaining(p -> offsets.put(
                        new TopicPartition(t.getKey(), Integer.parseInt(p.getKey())), p.getValue().asLong()));
                }
                return new Positions(offsets);
            } catch (IOException | RuntimeException e) {
                throw new IllegalArgumentException("not Kafka offsets (Spark's JSON, {\"topic\":{\"0\":5}}): " + json, e);
            }
        }

        @Override
        public String json() {
            TreeMap<String, TreeMap<Integer, Long>> byTopic = new TreeMap<>();
            offsets.forEach((tp, o) -> byTopic.computeIfAbsent(tp.topic(), t -> new TreeMap<>()).put(tp.partition(), o));
            ObjectNode root = JSON.createObjectNode();
            byTopic.forEach((t, parts) -> {
                ObjectNode node = root.putObject(t);
                parts.forEach((p, o) -> node.put(Integer.toString(p), o));
            });
            return root.toString();
        }
    }

    /** One task's share of a batch: topic partitions and their [from, until) ranges. */
    static final class Share implements InputPartition {
        final Map<String, String> settings;
        final String pool;
        final long pollTimeoutMs;
        final String[] topics;
        final int[] partitions;
        final long[] from;
        final long[] until;

        Share(Map<String, String> settings, String pool, long pollTimeoutMs, List<TopicPartition> tps,
              List<long[]> spans) {
            this.settings = settings;
            this.pool = pool;
            this.pollTimeoutMs = pollTimeoutMs;
            topics = new String[tps.size()];
            partitions = new int[tps.size()];
            from = new long[tps.size()];
            until = new long[tps.size()];
            for (int i = 0; i < tps.size(); i++) {
                topics[i] = tps.get(i).topic();
                partitions[i] = tps.get(i).partition();
                from[i] = spans.get(i)[0];
                until[i] = spans.get(i)[1];
            }
        }
    }

    /**
     * How long a listing of the topics' partitions serves latestOffset, which runs before
     * every micro-batch (every 100 ms while idle at buffer.flush.time=0): a listing asks
     * the broker for every topic's metadata, 20-50 ms of the driver's time on a broker
     * with 2,800 topics. A partition or topic created meanwhile is found this much later
     * and read from its start, as Kafka Connect's consumers find them after
     * metadata.max.age.ms (5 minutes by default).
     */
    static final long TOPICS_MAX_AGE_MS = 10_000;

    /**
     * The fewest records a read task gets: a micro-batch of fewer is read in fewer tasks
     * than the "tasks" option allows. Each task of a Delta write has a fixed cost beside
     * its records (its Parquet file, the statistics tracker Delta generates code for): in
     * a 5,000-record batch of 4 partitions read in 4 tasks, a fifth of the tasks' time.
     * Option "minRecordsPerTask".
     */
    static final long MIN_RECORDS_PER_TASK = 10_000;

    static final class Stream implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow {
        private final Map<String, String> settings;
        private final List<String> topics;
        private final Pattern pattern;
        private final String startingOffsets;
        private final long maxOffsetsPerTrigger;
        private final int tasks;
        private final long recordsPerTask;
        private final long pollTimeoutMs;
        private final String pool = UUID.randomUUID().toString();
        private final KafkaConsumer<byte[], byte[]> driver;
        private Map<TopicPartition, Long> availableNowEnd;
        private Set<TopicPartition> listed;  // topicPartitions(), as listed at listedAtMs
        private long listedAtMs;

        Stream(Map<String, String> options) {
            CaseInsensitiveStringMap o = new CaseInsensitiveStringMap(options);
            settings = consumerSettings(options);
            String subscribe = o.get("subscribe");
            String subscribePattern = o.get("subscribePattern");
            if ((subscribe == null) == (subscribePattern == null)) {
                throw new IllegalArgumentException("give one of the options subscribe or subscribePattern");
            }
            topics = subscribe == null ? List.of() : List.of(subscribe.split(","));
            pattern = subscribePattern == null ? null : Pattern.compile(subscribePattern);
            startingOffsets = o.getOrDefault("startingOffsets", "earliest").trim();
            maxOffsetsPerTrigger = o.getLong("maxOffsetsPerTrigger", Long.MAX_VALUE);
            tasks = o.getInt("tasks", 4);
            recordsPerTask = Math.max(1, o.getLong("minRecordsPerTask", MIN_RECORDS_PER_TASK));
            pollTimeoutMs = o.getLong("pollTimeoutMs", 120_000L);
            driver = newConsumer(settings);
        }

        /** The partitions of the topics read, listed again once TOPICS_MAX_AGE_MS passed. */
        private Set<TopicPartition> topicPartitions() {
            long now = System.currentTimeMillis();
            if (listed == null || now - listedAtMs >= TOPICS_MAX_AGE_MS) {
                listed = listTopicPartitions();
                listedAtMs = now;
            }
            return listed;
        }

        /** Where the partitions end now; a failure lists the topics again next time (a topic deleted meanwhile). */
        private Map<TopicPartition, Long> endOffsets() {
            try {
                return driver.endOffsets(topicPartitions(), Duration.ofMillis(pollTimeoutMs));
            } catch (RuntimeException e) {
                listed = null;
                throw e;
            }
        }

        private Set<TopicPartition> listTopicPartitions() {
            Set<TopicPartition> tps = new HashSet<>();
            for (Map.Entry<String, List<PartitionInfo>> t : driver.listTopics(Duration.ofMillis(pollTimeoutMs)).entrySet()) {
                boolean wanted = pattern == null ? topics.contains(t.getKey())
                    : pattern.matcher(t.getKey()).matches() && !INTERNAL_TOPICS.contains(t.getKey());
                if (wanted) {
                    for (PartitionInfo info : t.getValue()) {
                        tps.add(new TopicPartition(t.getKey(), info.partition()));
                    }
                }
            }
            return tps;
        }

        private Map<TopicPartition, Long> earliest(Set<TopicPartition> tps) {
            return tps.isEmpty() ? Map.of() : driver.beginningOffsets(tps, Duration.ofMillis(pollTimeoutMs));
        }

        @Override
        public Offset initialOffset() {
            listed = null;  // listed now
            Set<TopicPartition> tps = topicPartitions();
            Map<TopicPartition, Long> start = new HashMap<>(earliest(tps));
            if (!startingOffsets.equalsIgnoreCase("earliest")) {
                if (startingOffsets.equalsIgnoreCase("latest")) {
                    start.putAll(driver.endOffsets(tps, Duration.ofMillis(pollTimeoutMs)));
                } else {
                    Positions given = Positions.parse(startingOffsets);
                    given.offsets.forEach((tp, o) -> {
                        if (o >= 0 && start.containsKey(tp)) {
                            start.put(tp, o);
                        }
                    });
                }
            }
            return new Positions(start);
        }

        @Override
        public Offset latestOffset() {
            throw new UnsupportedOperationException("latestOffset(Offset, ReadLimit) is this source's");
        }

        @Override
        public ReadLimit getDefaultReadLimit() {
            return maxOffsetsPerTrigger == Long.MAX_VALUE ? ReadLimit.allAvailable() : ReadLimit.maxRows(maxOffsetsPerTrigger);
        }

        @Override
        public void prepareForTriggerAvailableNow() {
            listed = null;  // what is there now
            availableNowEnd = endOffsets();
        }

        @Override
        public Offset latestOffset(Offset startOffset, ReadLimit limit) {
            Map<TopicPartition, Long> start = new HashMap<>(((Positions) startOffset).offsets);
            Map<TopicPartition, Long> end = availableNowEnd != null ? availableNowEnd : endOffsets();
            Set<TopicPartition> added = new HashSet<>(end.keySet());
            added.removeAll(start.keySet());
            start.putAll(earliest(added));  // a new partition is read from its start
            Map<TopicPartition, Long> next = new HashMap<>();
            long total = 0;
            for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
                total += Math.max(0, e.getValue() - start.get(e.getKey()));
            }
            long max = limit instanceof ReadMaxRows ? ((ReadMaxRows) limit).maxRows() : Long.MAX_VALUE;
            for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
                long from = start.get(e.getKey());
                long size = Math.max(0, e.getValue() - from);
                if (total > max) {  // each partition its share of the limit, as Spark's source does
                    double share = (double) max * size / total;
                    size = Math.min(size, share < 1 ? (long) Math.ceil(share) : (long) Math.floor(share));
                }
                next.put(e.getKey(), from + size);
            }
            return new Positions(next);
        }

        @Override
        public Offset deserializeOffset(String json) {
            return Positions.parse(json);
        }

        @Override
        public InputPartition[] planInputPartitions(Offset start, Offset end) {
            Map<TopicPartition, Long> from = ((Positions) start).offsets;
            List<TopicPartition> ranges = new ArrayList<>();
            Map<TopicPartition, long[]> spans = new HashMap<>();
            ((Positions) end).offsets.forEach((tp, until) -> {
                long first = from.getOrDefault(tp, 0L);
                if (until > first) {
                    ranges.add(tp);
                    spans.put(tp, new long[] {first, until});
                }
            });
            // Largest first, each to the least loaded task (sorted by name among equals,
            // so a batch planned twice gives each task the same partitions).
            ranges.sort((a, b) -> {
                long sa = spans.get(a)[1] - spans.get(a)[0];
                long sb = spans.get(b)[1] - spans.get(b)[0];
                return sa != sb ? Long.compare(sb, sa) : a.toString().compareTo(b.toString());
            });
            long records = 0;
            for (long[] span : spans.values()) {
                records += span[1] - span[0];
            }
            long wanted = (records + recordsPerTask - 1) / recordsPerTask;  // a small batch: fewer tasks
            int n = (int) Math.max(1, Math.min(Math.min(tasks, ranges.size()), wanted));
            List<List<TopicPartition>> shares = new ArrayList<>();
            long[] load = new long[n];
            for (int i = 0; i < n; i++) {
                shares.add(new ArrayList<>());
            }
            for (TopicPartition tp : ranges) {
                int least = 0;
                for (int i = 1; i < n; i++) {
                    if (load[i] < load[least]) {
                        least = i;
                    }
                }
                shares.get(least).add(tp);
                load[least] += spans.get(tp)[1] - spans.get(tp)[0];
            }
            List<InputPartition> planned = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                List<TopicPartition> tps = shares.get(i);
                if (!tps.isEmpty()) {
                    List<long[]> s = new ArrayList<>();
                    tps.forEach(tp -> s.add(spans.get(tp)));
                    planned.add(new Share(settings, pool + "#" + i, pollTimeoutMs, tps, s));
                }
            }
            return planned.toArray(new InputPartition[0]);
        }

        @Override
        public PartitionReaderFactory createReaderFactory() {
            return partition -> new Reader((Share) partition);
        }

        @Override
        public void commit(Offset end) {
        }

        @Override
        public void stop() {
            Kept.closeAll(pool);
            driver.close(Duration.ofSeconds(5));
        }
    }

    /** Consumers kept between batches, one per (query, task), closed when idle. */
    static final class Kept {
        private static final Map<String, KafkaConsumer<byte[], byte[]>> CONSUMERS = new ConcurrentHashMap<>();
        private static final Map<String, Long> LAST_USED = new ConcurrentHashMap<>();
        // Queries stopped (and when): a reader of theirs still running closes its consumer
        // at its end. Forgotten after IDLE_MS, so a long-lived worker does not collect them.
        private static final Map<String, Long> STOPPED = new ConcurrentHashMap<>();

        static KafkaConsumer<byte[], byte[]> take(String key, Map<String, String> settings) {
            closeIdle();
            KafkaConsumer<byte[], byte[]> kept = CONSUMERS.remove(key);
            LAST_USED.remove(key);
            return kept != null ? kept : newConsumer(settings);
        }

        static void give(String key, KafkaConsumer<byte[], byte[]> consumer) {
            if (STOPPED.containsKey(key.substring(0, key.lastIndexOf('#')))) {
                consumer.close(Duration.ofSeconds(5));
                return;
            }
            consumer.unsubscribe();
            KafkaConsumer<byte[], byte[]> other = CONSUMERS.put(key, consumer);
            // After the consumer: a take() in between leaves at most a time without one.
            LAST_USED.put(key, System.currentTimeMillis());
            if (other != null) {  // a retried task's reader returned first
                other.close(Duration.ofSeconds(5));
            }
        }

        static void closeAll(String pool) {
            STOPPED.put(pool, System.currentTimeMillis());
            for (String key : new ArrayList<>(CONSUMERS.keySet())) {
                if (key.startsWith(pool + "#")) {
                    close(key);
                }
            }
        }

        private static void closeIdle() {
            long now = System.currentTimeMillis();
            for (Map.Entry<String, Long> e : new ArrayList<>(LAST_USED.entrySet())) {
                if (now - e.getValue() > IDLE_MS) {
                    close(e.getKey());
                }
            }
            STOPPED.values().removeIf(at -> now - at > IDLE_MS);
        }

        private static void close(String key) {
            LAST_USED.remove(key);
            KafkaConsumer<byte[], byte[]> consumer = CONSUMERS.remove(key);
            if (consumer != null) {
                consumer.close(Duration.ofSeconds(5));
            }
        }
    }

    /** Records a batch starts from are gone from the topic (retention deleted them). */
    public static final class RecordsLost extends IllegalStateException {
        RecordsLost(OffsetOutOfRangeException e) {
            super("Kafka no longer has the records this batch starts from (topic-partition=offset: "
                + e.offsetOutOfRangePartitions() + "): the topic's retention deleted them before they "
                + "were read, so they are lost to the table. Restore them to the topic, or move the "
                + "connector on to the earliest records the topic still has with the worker's offsets "
                + "API (PATCH /connectors/<name>/offsets, docs/worker-offsets.md)", e);
        }
    }

    static final class Reader implements PartitionReader<InternalRow> {
        private final Share share;
        private final KafkaConsumer<byte[], byte[]> consumer;
        private final Map<TopicPartition, Long> until = new HashMap<>();
        private final Set<TopicPartition> open = new HashSet<>();
        private final Map<String, UTF8String> topicNames = new HashMap<>();
        // A poll's records are read a partition at a time: the partition's end offset and
        // topic name are looked up once per partition, not once per record (a map lookup
        // and a UTF-8 encoding per record were a few percent of a task's time).
        private ConsumerRecords<byte[], byte[]> polled = ConsumerRecords.empty();
        private Iterator<TopicPartition> pending = Collections.emptyIterator();
        private Iterator<ConsumerRecord<byte[], byte[]>> current = Collections.emptyIterator();
        private long currentEnd;
        private UTF8String currentTopic;
        private InternalRow row;
        private long emptySince = -1;
        private boolean failed;

        Reader(Share share) {
            this.share = share;
            consumer = Kept.take(share.pool, share.settings);
            List<TopicPartition> tps = new ArrayList<>();
            for (int i = 0; i < share.topics.length; i++) {
                TopicPartition tp = new TopicPartition(share.topics[i], share.partitions[i]);
                tps.add(tp);
                until.put(tp, share.until[i]);
                open.add(tp);
            }
            consumer.assign(tps);
            for (int i = 0; i < tps.size(); i++) {
                consumer.seek(tps.get(i), share.from[i]);
            }
        }

        @Override
        public boolean next() throws IOException {
            while (true) {
                while (current.hasNext()) {
                    ConsumerRecord<byte[], byte[]> r = current.next();
                    if (r.offset() < currentEnd) {
                        row = toRow(r, currentTopic);
                        return true;
                    }
                }
                if (pending.hasNext()) {
                    TopicPartition tp = pending.next();
                    Long end = until.get(tp);
                    currentEnd = end == null ? Long.MIN_VALUE : end;  // not ours: none read
                    currentTopic = topicNames.computeIfAbsent(tp.topic(), UTF8String::fromString);
                    current = polled.records(tp).iterator();
                    continue;
                }
                if (!pauseFinished()) {
                    return false;
                }
                poll();
            }
        }

        private void poll() throws IOException {
            try {
                polled = consumer.poll(Duration.ofMillis(Math.min(500, share.pollTimeoutMs)));
            } catch (OffsetOutOfRangeException e) {
                failed = true;
                throw new RecordsLost(e);
            }
            pending = polled.partitions().iterator();
            long now = System.currentTimeMillis();
            if (!polled.isEmpty()) {
                emptySince = -1;
            } else if (emptySince < 0) {
                emptySince = now;
            } else if (now - emptySince > share.pollTimeoutMs) {
                failed = true;
                throw new IOException(new TimeoutException("no records from " + open + " for "
                    + share.pollTimeoutMs + " ms, before the batch's end offsets " + until));
            }
        }

        /** Pause the partitions read to their batch's end; true while some are still open. */
        private boolean pauseFinished() {
            List<TopicPartition> done = new ArrayList<>();
            for (TopicPartition tp : open) {
                if (consumer.position(tp) >= until.get(tp)) {
                    done.add(tp);
                }
            }
            if (!done.isEmpty()) {
                consumer.pause(done);
                open.removeAll(done);
            }
            return !open.isEmpty();
        }

        private static InternalRow toRow(ConsumerRecord<byte[], byte[]> r, UTF8String topic) {
            Header[] headers = r.headers().toArray();
            Object[] hs = new Object[headers.length];
            for (int i = 0; i < headers.length; i++) {
                hs[i] = new GenericInternalRow(new Object[] {UTF8String.fromString(headers[i].key()), headers[i].value()});
            }
            return new GenericInternalRow(new Object[] {
                r.key(), r.value(), topic, r.partition(), r.offset(),
                r.timestamp() * 1000L, r.timestampType().id, new GenericArrayData(hs)});
        }

        @Override
        public InternalRow get() {
            return row;
        }

        @Override
        public void close() {
            if (failed) {  // its state is unknown: a new consumer for the next try
                consumer.close(Duration.ofSeconds(5));
            } else {
                Kept.give(share.pool, consumer);
            }
        }
    }
}
