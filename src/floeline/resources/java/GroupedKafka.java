package floeline.kafka;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
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
import org.apache.spark.SparkEnv;
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
 * subscribePattern, startingOffsets ("earliest", "latest" or Spark's JSON, -2 for earliest and
 * -1 for latest), maxOffsetsPerTrigger, includeHeaders (true only),
 * failOnDataLoss (true only), kafkaConsumer.pollTimeoutMs (or pollTimeoutMs; default 120000: a
 * fetch that gets nothing for this long fails the batch with a TimeoutException, as Spark's
 * does), and this reader's own: tasks (consumers per batch; default 4), minRecordsPerTask,
 * newPartitionOffsets (Spark's JSON: where a partition the query has not read yet starts,
 * e.g. one its checkpoint does not hold; else at its earliest record, which must be 0),
 * consumerIdleMs (how long a kept consumer may sit unused; default Spark's
 * spark.kafka.consumer.cache.timeout, 5 minutes). Every other option, Spark's included
 * (assign, startingOffsetsByTimestamp, minPartitions, maxTriggerDelay, ...), is refused when
 * the stream is loaded: ignored, it would read something else than asked.
 *
 * Data loss fails the batch as Spark's source does with failOnDataLoss=true (its default),
 * with a DataLoss: a partition's end below the batch's start (the topic deleted and created
 * again, or truncated), a partition gone, a partition added while the query ran that no
 * longer starts at offset 0, records missing below a batch's start (RecordsLost: deleted by
 * retention). floeline's connector turns each into its own error, or into an offsets change
 * under floeline.kafka.fail.on.data.loss=false (sources/kafka_changes.py).
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

    // A kept consumer unused this long is closed (Spark's source: 5 minutes too), unless the
    // option consumerIdleMs or Spark's spark.kafka.consumer.cache.timeout says otherwise.
    static final long IDLE_MS = 5 * 60 * 1000L;
    static final AtomicLong CONSUMERS_MADE = new AtomicLong();

    @Override
    public StructType inferSchema(CaseInsensitiveStringMap options) {
        checkOptions(options.asCaseSensitiveMap());
        return SCHEMA;
    }

    // The options this reader implements (lower case), beside kafka.*.
    static final Set<String> OPTIONS = Set.of("subscribe", "subscribepattern", "startingoffsets", "newpartitionoffsets",
        "maxoffsetspertrigger", "includeheaders", "failondataloss", "kafkaconsumer.polltimeoutms",
        "polltimeoutms", "tasks", "minrecordspertask", "consumeridlems");
    // Spark's Kafka source options this reader does not implement (lower case).
    static final Set<String> SPARKS_OWN = Set.of("assign", "startingoffsetsbytimestamp",
        "startingtimestamp", "startingoffsetsbytimestampstrategy", "endingoffsets",
        "endingoffsetsbytimestamp", "endingtimestamp", "minpartitions", "maxtriggerdelay",
        "minoffsetspertrigger", "maxrecordsperpartition", "groupidprefix", "fetchoffset.numretries",
        "fetchoffset.retryintervalms", "topic");
    // Consumer settings this reader sets itself (Spark's source refuses all but group.id).
    static final Set<String> OWN_CONSUMER_SETTINGS = Set.of("group.id", "auto.offset.reset",
        "enable.auto.commit", "key.deserializer", "value.deserializer", "interceptor.classes");

    /** Refuse what this reader does not do: ignored, it would read something else than asked. */
    static void checkOptions(Map<String, String> options) {
        String use = "; read with Spark's Kafka source (floeline.kafka.reader=spark) to use it";
        for (Map.Entry<String, String> e : options.entrySet()) {
            String key = e.getKey().toLowerCase();
            String value = e.getValue() == null ? "" : e.getValue().trim();
            if (key.startsWith("kafka.")) {
                if (OWN_CONSUMER_SETTINGS.contains(key.substring("kafka.".length()))) {
                    throw new IllegalArgumentException("floeline's Kafka reader (floeline.kafka.reader=grouped) "
                        + "sets the consumer's " + key.substring("kafka.".length()) + " itself: remove the option "
                        + e.getKey() + use);
                }
            } else if (SPARKS_OWN.contains(key)) {
                throw new IllegalArgumentException("floeline's Kafka reader (floeline.kafka.reader=grouped) "
                    + "does not implement Spark's Kafka option " + e.getKey() + use);
            } else if (!OPTIONS.contains(key)) {
                throw new IllegalArgumentException("floeline's Kafka reader (floeline.kafka.reader=grouped) "
                    + "has no option " + e.getKey() + " (it takes kafka.* and " + new TreeSet<>(OPTIONS) + ")");
            } else if ((key.equals("failondataloss") || key.equals("includeheaders"))
                    && !value.equalsIgnoreCase("true")) {
                throw new IllegalArgumentException("floeline's Kafka reader (floeline.kafka.reader=grouped) "
                    + "does not implement " + e.getKey() + "=" + value + " (only true)" + use
                    + (key.equals("failondataloss") ? ", or let floeline's connector follow "
                        + "floeline.kafka.fail.on.data.loss=false" : ""));
            }
        }
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
        // A reader never creates a topic: asking a broker with auto.create.topics.enable for a
        // deleted topic would create it again, empty, under a new id.
        settings.put("allow.auto.create.topics", "false");
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
        final long idleMs;
        final String[] topics;
        final int[] partitions;
        final long[] from;
        final long[] until;

        Share(Map<String, String> settings, String pool, long pollTimeoutMs, long idleMs,
              List<TopicPartition> tps, List<long[]> spans) {
            this.settings = settings;
            this.pool = pool;
            this.pollTimeoutMs = pollTimeoutMs;
            this.idleMs = idleMs;
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

    /**
     * How long the first ask for the partitions' end offsets may take before the topics are
     * listed again and it is asked once more (with the full pollTimeoutMs): a partition of a
     * topic deleted since the last listing is never answered, and the consumer waits out its
     * whole timeout on it.
     */
    static final long END_OFFSETS_FIRST_TRY_MS = 5_000;

    static final class Stream implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow {
        private final Map<String, String> settings;
        private final List<String> topics;
        private final Pattern pattern;
        private final String startingOffsets;
        private final String newPartitionOffsets;
        private final long maxOffsetsPerTrigger;
        private final int tasks;
        private final long recordsPerTask;
        private final long pollTimeoutMs;
        private final long idleMs;
        private final String pool = UUID.randomUUID().toString();
        private final KafkaConsumer<byte[], byte[]> driver;
        private Map<TopicPartition, Long> availableNowEnd;
        private Set<TopicPartition> listed;  // topicPartitions(), as listed at listedAtMs
        private long listedAtMs;

        Stream(Map<String, String> options) {
            checkOptions(options);
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
            newPartitionOffsets = o.getOrDefault("newPartitionOffsets", "").trim();
            maxOffsetsPerTrigger = o.getLong("maxOffsetsPerTrigger", Long.MAX_VALUE);
            tasks = o.getInt("tasks", 4);
            recordsPerTask = Math.max(1, o.getLong("minRecordsPerTask", MIN_RECORDS_PER_TASK));
            pollTimeoutMs = o.getLong("kafkaConsumer.pollTimeoutMs", o.getLong("pollTimeoutMs", 120_000L));
            SparkEnv env = SparkEnv.get();
            long sparks = env == null ? IDLE_MS : env.conf().getTimeAsMs("spark.kafka.consumer.cache.timeout", "5m");
            idleMs = o.getLong("consumerIdleMs", sparks);
            driver = newConsumer(settings);
        }

        private boolean subscribed(String topic) {
            return pattern == null ? topics.contains(topic)
                : pattern.matcher(topic).matches() && !INTERNAL_TOPICS.contains(topic);
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

        /**
         * Where the partitions end now. A partition of a topic deleted since the listing is
         * never answered: after END_OFFSETS_FIRST_TRY_MS the topics are listed again and asked
         * once more (a failure then lists them again next time).
         */
        private Map<TopicPartition, Long> endOffsets() {
            try {
                return driver.endOffsets(topicPartitions(),
                    Duration.ofMillis(Math.min(pollTimeoutMs, END_OFFSETS_FIRST_TRY_MS)));
            } catch (org.apache.kafka.common.errors.TimeoutException first) {
                listed = null;
            }
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
                if (subscribed(t.getKey())) {
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

        /**
         * The offsets of Spark's offset JSON `json` (startingOffsets, newPartitionOffsets),
         * -1 (latest) and -2 (earliest) resolved, for the partitions among `tps` it names
         * (none when it is no JSON: "earliest", "latest", ""). With `all`: `tps` are all the
         * partitions there are, and one the JSON gives an offset to that is not among them is
         * gone (DataLoss).
         */
        private Map<TopicPartition, Long> givenStart(String json, Set<TopicPartition> tps, boolean all) {
            Map<TopicPartition, Long> given = new HashMap<>();
            if (!json.startsWith("{")) {
                return given;
            }
            Set<TopicPartition> gone = new TreeSet<>(Comparator.comparing(TopicPartition::toString));
            Set<TopicPartition> latest = new HashSet<>();
            Set<TopicPartition> first = new HashSet<>();
            Positions.parse(json).offsets.forEach((tp, o) -> {
                if (!tps.contains(tp)) {
                    if (all && o >= 0) {
                        gone.add(tp);
                    }
                } else if (o == -1) {
                    latest.add(tp);
                } else if (o == -2) {
                    first.add(tp);
                } else if (o >= 0) {
                    given.put(tp, o);
                } else {
                    throw new IllegalArgumentException("offset " + o + " of " + tp + " in " + json
                        + " is none of an offset, -1 (latest) or -2 (earliest)");
                }
            });
            if (!gone.isEmpty()) {
                throw new DataLoss("partitions " + gone + " to start from " + json
                    + " are gone: their topic was deleted, or it has fewer partitions now");
            }
            given.putAll(latest.isEmpty() ? Map.of() : driver.endOffsets(latest, Duration.ofMillis(pollTimeoutMs)));
            given.putAll(earliest(first));
            return given;
        }

        @Override
        public Offset initialOffset() {
            listed = null;  // listed now
            Set<TopicPartition> tps = topicPartitions();
            Map<TopicPartition, Long> start = new HashMap<>(earliest(tps));
            if (startingOffsets.equalsIgnoreCase("latest")) {
                start.putAll(driver.endOffsets(tps, Duration.ofMillis(pollTimeoutMs)));
            } else if (!startingOffsets.equalsIgnoreCase("earliest")) {
                start.putAll(givenStart(startingOffsets, tps, true));
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
            start.putAll(addedStart(added));
            checkNothingLost(start, end);
            start.keySet().retainAll(end.keySet());  // a topic no longer subscribed is no longer read
            Map<TopicPartition, Long> next = new HashMap<>();
            long total = 0;
            for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
                total += e.getValue() - start.get(e.getKey());
            }
            long max = limit instanceof ReadMaxRows ? ((ReadMaxRows) limit).maxRows() : Long.MAX_VALUE;
            for (Map.Entry<TopicPartition, Long> e : end.entrySet()) {
                long from = start.get(e.getKey());
                long size = e.getValue() - from;
                if (total > max) {  // each partition its share of the limit, as Spark's source does
                    double share = (double) max * size / total;
                    size = Math.min(size, share < 1 ? (long) Math.ceil(share) : (long) Math.floor(share));
                }
                next.put(e.getKey(), from + size);
            }
            return new Positions(next);
        }

        /**
         * Spark's data-loss checks (its source with failOnDataLoss=true): a partition read
         * before that is gone while its topic is still subscribed, or whose end is now below
         * where the next batch starts (the topic deleted and created again, or truncated).
         */
        private void checkNothingLost(Map<TopicPartition, Long> start, Map<TopicPartition, Long> end) {
            Set<TopicPartition> gone = new TreeSet<>(Comparator.comparing(TopicPartition::toString));
            for (Map.Entry<TopicPartition, Long> e : start.entrySet()) {
                TopicPartition tp = e.getKey();
                Long until = end.get(tp);
                if (until == null && subscribed(tp.topic())) {
                    gone.add(tp);
                } else if (until != null && until < e.getValue()) {
                    throw new DataLoss("the end offset of " + tp + " went back from " + e.getValue()
                        + " to " + until + ": the topic was deleted and created again, or the partition "
                        + "was truncated; reading on from " + e.getValue() + " would skip the records below it");
                }
            }
            if (!gone.isEmpty()) {
                throw new DataLoss("partitions " + gone + " are gone: their topic was deleted, or it has "
                    + "fewer partitions now");
            }
        }

        /**
         * Where partitions the query had not read start: where the newPartitionOffsets JSON
         * says (floeline gives each partition it knew when the query started its place: a
         * topic subscribed since the checkpoint was made starts where its table says), else
         * at their earliest record, which must then be offset 0: a partition added while the
         * query ran whose first records are already gone lost them (Spark's check).
         */
        private Map<TopicPartition, Long> addedStart(Set<TopicPartition> added) {
            if (added.isEmpty()) {
                return Map.of();
            }
            Map<TopicPartition, Long> starts = new HashMap<>(givenStart(newPartitionOffsets, added, false));
            Set<TopicPartition> rest = new HashSet<>(added);
            rest.removeAll(starts.keySet());
            for (Map.Entry<TopicPartition, Long> e : earliest(rest).entrySet()) {
                if (e.getValue() != 0) {
                    throw new DataLoss("partition " + e.getKey() + ", added while the query ran, starts at offset "
                        + e.getValue() + ", not 0: its first records were deleted before they were read");
                }
                starts.put(e.getKey(), e.getValue());
            }
            return starts;
        }

        @Override
        public Offset deserializeOffset(String json) {
            return Positions.parse(json);
        }

        @Override
        public InputPartition[] planInputPartitions(Offset start, Offset end) {
            // A partition the batch starts is read from where latestOffset started it (also
            // when a restart plans the batch again from the offset log).
            Map<TopicPartition, Long> from = new HashMap<>(((Positions) start).offsets);
            Set<TopicPartition> added = new HashSet<>(((Positions) end).offsets.keySet());
            added.removeAll(from.keySet());
            from.putAll(addedStart(added));
            List<TopicPartition> ranges = new ArrayList<>();
            Map<TopicPartition, long[]> spans = new HashMap<>();
            ((Positions) end).offsets.forEach((tp, until) -> {
                long first = from.get(tp);
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
                    planned.add(new Share(settings, pool + "#" + i, pollTimeoutMs, idleMs, tps, s));
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

    /**
     * Consumers kept between batches, one per (query, task), in each JVM that runs tasks.
     * A thread of the pool's own closes those unused past their query's consumerIdleMs
     * (checked every SWEEP_MS): on a cluster, a stopped query's consumers on the executors
     * are closed so (its stop reaches only the driver's JVM), as Spark's consumer pool
     * evicts idle consumers on each executor.
     */
    static final class Kept {
        static final long SWEEP_MS = 1_000;
        private static final Map<String, KafkaConsumer<byte[], byte[]>> CONSUMERS = new ConcurrentHashMap<>();
        private static final Map<String, Long> IDLE_UNTIL = new ConcurrentHashMap<>();
        // Queries stopped (and when): a reader of theirs still running closes its consumer
        // at its end. Forgotten after IDLE_MS, so a long-lived worker does not collect them.
        private static final Map<String, Long> STOPPED = new ConcurrentHashMap<>();
        private static ScheduledExecutorService sweeper;

        static KafkaConsumer<byte[], byte[]> take(String key, Map<String, String> settings) {
            KafkaConsumer<byte[], byte[]> kept = CONSUMERS.remove(key);
            IDLE_UNTIL.remove(key);
            return kept != null ? kept : newConsumer(settings);
        }

        static void give(String key, KafkaConsumer<byte[], byte[]> consumer, long idleMs) {
            if (STOPPED.containsKey(key.substring(0, key.lastIndexOf('#')))) {
                consumer.close(Duration.ofSeconds(5));
                return;
            }
            consumer.unsubscribe();
            KafkaConsumer<byte[], byte[]> other = CONSUMERS.put(key, consumer);
            // After the consumer: a take() in between leaves at most a time without one.
            IDLE_UNTIL.put(key, System.currentTimeMillis() + idleMs);
            if (other != null) {  // a retried task's reader returned first
                other.close(Duration.ofSeconds(5));
            }
            startSweeper();
        }

        static void closeAll(String pool) {
            STOPPED.put(pool, System.currentTimeMillis());
            for (String key : new ArrayList<>(CONSUMERS.keySet())) {
                if (key.startsWith(pool + "#")) {
                    close(key);
                }
            }
        }

        /** The consumers kept in this JVM now (tests count them). */
        public static int kept() {
            return CONSUMERS.size();
        }

        private static synchronized void startSweeper() {
            if (sweeper == null) {
                sweeper = Executors.newSingleThreadScheduledExecutor(run -> {
                    Thread thread = new Thread(run, "floeline-kafka-reader-idle-consumers");
                    thread.setDaemon(true);
                    return thread;
                });
                sweeper.scheduleWithFixedDelay(Kept::closeIdle, SWEEP_MS, SWEEP_MS, TimeUnit.MILLISECONDS);
            }
        }

        private static void closeIdle() {
            try {
                long now = System.currentTimeMillis();
                for (Map.Entry<String, Long> e : new ArrayList<>(IDLE_UNTIL.entrySet())) {
                    if (now > e.getValue()) {
                        close(e.getKey());
                    }
                }
                STOPPED.values().removeIf(at -> now - at > IDLE_MS);
            } catch (RuntimeException e) {  // a scheduled task that throws is never run again
                System.err.println("floeline's Kafka reader could not close an idle consumer: " + e);
            }
        }

        private static void close(String key) {
            IDLE_UNTIL.remove(key);
            KafkaConsumer<byte[], byte[]> consumer = CONSUMERS.remove(key);
            if (consumer != null) {
                consumer.close(Duration.ofSeconds(5));
            }
        }
    }

    /**
     * Reading on would skip records (Spark's source fails on the same with failOnDataLoss=true,
     * its default): the connector (ingest/connector.py) turns it into an error that names the
     * partitions, their committed and available offsets and the fix.
     */
    public static class DataLoss extends IllegalStateException {
        DataLoss(String reason) {
            this(reason, null);
        }

        DataLoss(String reason, Throwable cause) {
            super("Kafka data loss: " + reason + ". Restore the records, or move the connector on with "
                + "the worker's offsets API (PATCH /connectors/<name>/offsets, docs/worker-offsets.md), "
                + "or set floeline.kafka.fail.on.data.loss=false (docs/kafka.md)", cause);
        }
    }

    /** Records a batch starts from are gone from the topic (retention deleted them). */
    public static final class RecordsLost extends DataLoss {
        RecordsLost(OffsetOutOfRangeException e) {
            super("Kafka no longer has the records this batch starts from (topic-partition=offset: "
                + e.offsetOutOfRangePartitions() + "): the topic's retention deleted them before they "
                + "were read, so they are lost to the table", e);
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
                Kept.give(share.pool, consumer, share.idleMs);
            }
        }
    }
}
