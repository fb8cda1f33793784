package floeline;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Set;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The one-pass micro-batch's record check (see ingest/onepass.py): TRUE when a Kafka value is
 * valid UTF-8 and a JSON object whose top-level keys are all known, so from_json with
 * the table's schema reads all of it.
 *
 * Why a JVM function: the same check in Spark SQL (is_valid_utf8, plus json_object_keys,
 * which parses the whole value a second time) cost a fifth of a micro-batch; this one
 * scans the bytes once (a key with escapes, such as Python's json.dumps writes for
 * non-ASCII keys, is decoded to compare it).
 *
 * It only has to find the top-level keys of valid JSON: from_json (strict options) flags
 * invalid JSON itself. Anything it does not follow (a value that is not an object, a
 * malformed escape) answers FALSE, which sends the batch to the general path: FALSE is
 * always safe, TRUE must be exact.
 */
public final class KnownKeys implements UDF1<byte[], Boolean> {
    private final byte[][] keys;
    private final Set<String> keyStrings;  // for keys written with escapes

    public KnownKeys(String[] known) {
        keys = new byte[known.length][];
        keyStrings = new HashSet<>(Arrays.asList(known));
        for (int i = 0; i < known.length; i++) {
            keys[i] = known[i].getBytes(StandardCharsets.UTF_8);
        }
    }

    @Override
    public Boolean call(byte[] b) {
        if (b == null || !UTF8String.fromBytes(b).isValid()) {
            return false;
        }
        int n = b.length;
        int i = skipSpace(b, 0);
        if (i >= n || b[i] != '{') {
            return false;
        }
        i = skipSpace(b, i + 1);
        if (i < n && b[i] == '}') {
            return true;
        }
        while (true) {
            if (i >= n || b[i] != '"') {
                return false;
            }
            int start = ++i;
            boolean escaped = false;
            while (i < n && b[i] != '"') {
                if (b[i] == '\\') {
                    escaped = true;
                    i++;
                }
                i++;
            }
            if (i >= n || !(escaped ? isKnownEscaped(b, start, i) : isKnown(b, start, i))) {
                return false;
            }
            i = skipSpace(b, i + 1);
            if (i >= n || b[i] != ':') {
                return false;
            }
            i = skipValue(b, skipSpace(b, i + 1));
            if (i < 0) {
                return false;
            }
            i = skipSpace(b, i);
            if (i >= n) {
                return false;
            }
            if (b[i] == '}') {
                return true;  // what follows the object is ignored, as from_json does
            }
            if (b[i] != ',') {
                return false;
            }
            i = skipSpace(b, i + 1);
        }
    }

    private boolean isKnown(byte[] b, int from, int to) {
        for (byte[] key : keys) {
            if (key.length == to - from && Arrays.equals(key, 0, key.length, b, from, to)) {
                return true;
            }
        }
        return false;
    }

    /** Decode a key with JSON escapes as Jackson does, and look it up. */
    private boolean isKnownEscaped(byte[] b, int from, int to) {
        String raw = new String(b, from, to - from, StandardCharsets.UTF_8);
        StringBuilder key = new StringBuilder(raw.length());
        for (int i = 0; i < raw.length(); i++) {
            char c = raw.charAt(i);
            if (c != '\\') {
                key.append(c);
                continue;
            }
            if (++i >= raw.length()) {
                return false;
            }
            switch (raw.charAt(i)) {
                case '"': key.append('"'); break;
                case '\\': key.append('\\'); break;
                case '/': key.append('/'); break;
                case 'b': key.append('\b'); break;
                case 'f': key.append('\f'); break;
                case 'n': key.append('\n'); break;
                case 'r': key.append('\r'); break;
                case 't': key.append('\t'); break;
                case 'u':
                    if (i + 4 >= raw.length()) {
                        return false;
                    }
                    int code = 0;
                    for (int h = i + 1; h <= i + 4; h++) {
                        char hex = raw.charAt(h);
                        int digit = hex < 128 ? Character.digit(hex, 16) : -1;  // ASCII only
                        if (digit < 0) {
                            return false;
                        }
                        code = code * 16 + digit;
                    }
                    key.append((char) code);
                    i += 4;
                    break;
                default:
                    return false;
            }
        }
        return keyStrings.contains(key.toString());
    }

    private static int skipSpace(byte[] b, int i) {
        while (i < b.length && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r')) {
            i++;
        }
        return i;
    }

    /** The index just after the JSON value that starts at i, or -1 when it does not end. */
    private static int skipValue(byte[] b, int i) {
        int n = b.length;
        int depth = 0;
        while (i < n) {
            byte c = b[i];
            if (c == '"') {
                i++;
                while (i < n && b[i] != '"') {
                    i += b[i] == '\\' ? 2 : 1;
                }
                if (i >= n) {
                    return -1;
                }
                i++;
                if (depth == 0) {
                    return i;
                }
            } else if (c == '{' || c == '[') {
                depth++;
                i++;
            } else if (c == '}' || c == ']') {
                if (depth == 0) {
                    return i;  // the end of the enclosing object: a scalar ended here
                }
                depth--;
                i++;
                if (depth == 0) {
                    return i;
                }
            } else if (c == ',' && depth == 0) {
                return i;
            } else {
                i++;
            }
        }
        return depth == 0 ? i : -1;
    }
}
