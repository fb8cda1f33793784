package floeline;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.apache.spark.sql.api.java.UDF7;
import org.apache.spark.unsafe.types.VariantVal;

/**
 * RECORD_METADATA of a Kafka record without headers, as the VARIANT bytes Spark's
 * to_variant_object makes for the same fields (records/metadata.py builds it that way in
 * SQL, which stays the path for records with headers and for what this returns NULL for).
 *
 * Why: casting a struct to a VARIANT builds each record's key dictionary in a hash map,
 * sorts its fields and copies the bytes twice: 6 % of a one-pass batch's task time
 * (JFR). Here a record has one of six shapes (which time field, a key or not), each
 * shape's dictionary and field order are made once, and a record is one array written
 * once. The bytes are those of Spark's VariantBuilder (tested against it byte for byte).
 *
 * Arguments: topic (its UTF-8 bytes), partition, offset, timestamp type (0 CreateTime,
 * 1 LogAppendTime, other: no time field), timestamp (epoch ms), push time (epoch ms),
 * key bytes (NULL: no key field). NULL for a NULL timestamp type (the SQL's CASE has no
 * branch for it either) and for a key of more than MAX_KEY bytes: the caller falls back
 * to the SQL then.
 */
public final class KafkaMetadata
        implements UDF7<byte[], Integer, Long, Integer, Long, Long, byte[], VariantVal> {
    /** Longer keys take the SQL path (Spark's size limits apply to them there). */
    public static final int MAX_KEY = 1 << 20;

    private static final int TOPIC = 0, PARTITION = 1, OFFSET = 2, TIME = 3, PUSH = 4, KEY = 5;
    private static final String[] TIME_NAMES = {"CreateTime", "LogAppendTime"};
    private static final int MAX_SHORT_STRING = 63;

    private final boolean topic, offsetAndPartition, createTime, pushTime;
    private final Shape[] shapes = new Shape[6];  // (no time, CreateTime, LogAppendTime) x (no key, key)

    public KafkaMetadata(boolean topic, boolean offsetAndPartition, boolean createTime, boolean pushTime) {
        this.topic = topic;
        this.offsetAndPartition = offsetAndPartition;
        this.createTime = createTime;
        this.pushTime = pushTime;
        for (int time = 0; time < 3; time++) {
            for (int key = 0; key < 2; key++) {
                shapes[time * 2 + key] = new Shape(this, time, key == 1);
            }
        }
    }

    /** The fields a record of one shape has: their dictionary and their order by name. */
    private static final class Shape implements java.io.Serializable {
        final int[] slots;  // in the order the SQL struct adds them: the dictionary's order
        final int[] byName;  // indexes into slots, sorted by field name (the object's order)
        final byte[] metadata;

        Shape(KafkaMetadata f, int time, boolean key) {
            int[] all = new int[6];
            String[] names = new String[6];
            int n = 0;
            if (f.topic) {
                names[n] = "topic";
                all[n++] = TOPIC;
            }
            if (f.offsetAndPartition) {
                names[n] = "partition";
                all[n++] = PARTITION;
                names[n] = "offset";
                all[n++] = OFFSET;
            }
            if (f.createTime && time > 0) {
                names[n] = TIME_NAMES[time - 1];
                all[n++] = TIME;
            }
            if (f.pushTime) {
                names[n] = "SnowflakeConnectorPushTime";
                all[n++] = PUSH;
            }
            if (key) {
                names[n] = "key";
                all[n++] = KEY;
            }
            slots = Arrays.copyOf(all, n);
            Integer[] order = new Integer[n];
            for (int i = 0; i < n; i++) {
                order[i] = i;
            }
            final String[] fieldNames = names;
            Arrays.sort(order, (a, b) -> fieldNames[a].compareTo(fieldNames[b]));
            byName = new int[n];
            for (int i = 0; i < n; i++) {
                byName[i] = order[i];
            }
            metadata = dictionary(Arrays.copyOf(names, n));
        }
    }

    private static byte[] dictionary(String[] names) {
        byte[][] keys = new byte[names.length][];
        int total = 0;
        for (int i = 0; i < names.length; i++) {
            keys[i] = names[i].getBytes(StandardCharsets.UTF_8);
            total += keys[i].length;
        }
        int size = integerSize(Math.max(total, names.length));
        int strings = 1 + size + (names.length + 1) * size;
        byte[] out = new byte[strings + total];
        out[0] = (byte) (1 | ((size - 1) << 6));  // version 1, not sorted
        write(out, 1, names.length, size);
        int offset = 0;
        for (int i = 0; i < keys.length; i++) {
            write(out, 1 + size + i * size, offset, size);
            System.arraycopy(keys[i], 0, out, strings + offset, keys[i].length);
            offset += keys[i].length;
        }
        write(out, 1 + size + keys.length * size, offset, size);
        return out;
    }

    @Override
    public VariantVal call(byte[] topicName, Integer partition, Long offset, Integer timestampType,
                           Long timestamp, Long push, byte[] key) {
        int time = 0;
        if (createTime) {
            if (timestampType == null) {
                return null;
            }
            time = timestampType == 0 ? 1 : timestampType == 1 ? 2 : 0;
        }
        if (key != null) {
            if (key.length > MAX_KEY) {
                return null;
            }
            if (!JsonScan.isValidUtf8(key)) {  // as Spark's text of the bytes: U+FFFD for what is not UTF-8
                key = new String(key, StandardCharsets.UTF_8).getBytes(StandardCharsets.UTF_8);
            }
        }
        Shape shape = shapes[time * 2 + (key != null ? 1 : 0)];
        int n = shape.slots.length;
        int data = 0;
        for (int i = 0; i < n; i++) {
            switch (shape.slots[i]) {
                case TOPIC: data += stringSize(topicName); break;
                case PARTITION: data += longSize(partition == null ? null : (long) partition); break;
                case OFFSET: data += longSize(offset); break;
                case TIME: data += longSize(timestamp); break;
                case PUSH: data += longSize(push); break;
                default: data += stringSize(key); break;
            }
        }
        int offsetSize = integerSize(data);
        int idSize = 1;  // at most six fields
        int header = 2 + n * idSize + (n + 1) * offsetSize;
        byte[] out = new byte[header + data];
        out[0] = (byte) ((((idSize - 1) << 2) | (offsetSize - 1)) << 2 | 2);  // an object
        out[1] = (byte) n;
        int at = header;
        int[] starts = new int[n];
        for (int i = 0; i < n; i++) {
            starts[i] = at - header;
            switch (shape.slots[i]) {
                case TOPIC: at = writeString(out, at, topicName); break;
                case PARTITION: at = writeLong(out, at, partition == null ? null : (long) partition); break;
                case OFFSET: at = writeLong(out, at, offset); break;
                case TIME: at = writeLong(out, at, timestamp); break;
                case PUSH: at = writeLong(out, at, push); break;
                default: at = writeString(out, at, key); break;
            }
        }
        int ids = 2, offsets = 2 + n * idSize;
        for (int i = 0; i < n; i++) {
            int field = shape.byName[i];
            out[ids + i] = (byte) field;  // a field's id is its place in the dictionary
            write(out, offsets + i * offsetSize, starts[field], offsetSize);
        }
        write(out, offsets + n * offsetSize, data, offsetSize);
        return new VariantVal(out, shape.metadata);
    }

    private static int stringSize(byte[] text) {
        if (text == null) {
            return 1;
        }
        return text.length > MAX_SHORT_STRING ? 5 + text.length : 1 + text.length;
    }

    private static int writeString(byte[] out, int at, byte[] text) {
        if (text == null) {
            out[at] = 0;  // the variant null
            return at + 1;
        }
        if (text.length > MAX_SHORT_STRING) {
            out[at] = (byte) (16 << 2);  // a long string
            write(out, at + 1, text.length, 4);
            at += 5;
        } else {
            out[at] = (byte) (text.length << 2 | 1);  // a short string
            at += 1;
        }
        System.arraycopy(text, 0, out, at, text.length);
        return at + text.length;
    }

    private static int longSize(Long value) {
        if (value == null) {
            return 1;
        }
        long v = value;
        return v == (byte) v ? 2 : v == (short) v ? 3 : v == (int) v ? 5 : 9;
    }

    private static int writeLong(byte[] out, int at, Long value) {
        if (value == null) {
            out[at] = 0;
            return at + 1;
        }
        long v = value;
        int size = longSize(value) - 1;
        int type = size == 1 ? 3 : size == 2 ? 4 : size == 4 ? 5 : 6;  // INT1, INT2, INT4, INT8
        out[at] = (byte) (type << 2);
        write(out, at + 1, v, size);
        return at + 1 + size;
    }

    private static int integerSize(int value) {
        return value <= 0xFF ? 1 : value <= 0xFFFF ? 2 : value <= 0xFFFFFF ? 3 : 4;
    }

    private static void write(byte[] out, int at, long value, int size) {
        for (int i = 0; i < size; i++) {
            out[at + i] = (byte) (value >>> (8 * i));
        }
    }
}
