package floeline;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Byte-level JSON walking shared by floeline's record checks (KnownKeys, ExactFields): just
 * enough to visit an object's top-level members in valid JSON. The checks only have to be
 * exact on valid JSON: from_json (strict options) flags invalid JSON itself, and anything
 * the walk does not follow makes a check answer FALSE, which is always safe (the batch
 * takes the general path).
 */
final class JsonScan {
    private JsonScan() {
    }

    private static final VarHandle LONGS = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.LITTLE_ENDIAN);
    private static final long HIGH_BITS = 0x8080808080808080L;

    /**
     * Whether b is valid UTF-8, exactly as Spark's UTF8String.isValid says. Why not that
     * alone: it checks byte by byte, a twentieth of a one-pass batch's task time (JFR
     * samples); a JSON value is mostly ASCII, which is skipped here eight bytes at a time.
     * An ASCII byte ends a character, so Spark's check of the rest from the first byte
     * above 0x7F gives the answer for the whole.
     */
    static boolean isValidUtf8(byte[] b) {
        int i = 0;
        int n = b.length;
        while (i + 8 <= n && ((long) LONGS.get(b, i) & HIGH_BITS) == 0) {
            i += 8;
        }
        while (i < n && b[i] >= 0) {
            i++;
        }
        return i == n || UTF8String.fromBytes(b, i, n - i).isValid();
    }

    /** What a walk does with each member of an object. */
    interface Member {
        /**
         * The member whose key's text is b[keyFrom, keyTo) (`escaped`: it holds JSON escapes)
         * and whose value starts at valueAt; false stops the walk (the object is refused).
         */
        boolean visit(byte[] b, int keyFrom, int keyTo, boolean escaped, int valueAt);
    }

    /**
     * Visit every member of the object that starts at i (after spaces); the index just after
     * its closing brace, or -1 when it is not an object this walk follows or a visit refused.
     */
    static int walkObject(byte[] b, int i, Member member) {
        int n = b.length;
        i = skipSpace(b, i);
        if (i >= n || b[i] != '{') {
            return -1;
        }
        i = skipSpace(b, i + 1);
        if (i < n && b[i] == '}') {
            return i + 1;
        }
        while (true) {
            if (i >= n || b[i] != '"') {
                return -1;
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
            if (i >= n) {
                return -1;
            }
            int end = i;
            i = skipSpace(b, i + 1);
            if (i >= n || b[i] != ':') {
                return -1;
            }
            int valueAt = skipSpace(b, i + 1);
            if (!member.visit(b, start, end, escaped, valueAt)) {
                return -1;
            }
            i = skipValue(b, valueAt);
            if (i < 0) {
                return -1;
            }
            i = skipSpace(b, i);
            if (i >= n) {
                return -1;
            }
            if (b[i] == '}') {
                return i + 1;
            }
            if (b[i] != ',') {
                return -1;
            }
            i = skipSpace(b, i + 1);
        }
    }

    static boolean equalsBytes(byte[] key, byte[] b, int from, int to) {
        if (key.length != to - from) {
            return false;
        }
        for (int k = 0; k < key.length; k++) {
            if (key[k] != b[from + k]) {
                return false;
            }
        }
        return true;
    }

    /** The key b[from, to) with its JSON escapes decoded as Jackson does; null when malformed. */
    static String decode(byte[] b, int from, int to) {
        String raw = new String(b, from, to - from, StandardCharsets.UTF_8);
        StringBuilder key = new StringBuilder(raw.length());
        for (int i = 0; i < raw.length(); i++) {
            char c = raw.charAt(i);
            if (c != '\\') {
                key.append(c);
                continue;
            }
            if (++i >= raw.length()) {
                return null;
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
                        return null;
                    }
                    int code = 0;
                    for (int h = i + 1; h <= i + 4; h++) {
                        char hex = raw.charAt(h);
                        int digit = hex < 128 ? Character.digit(hex, 16) : -1;  // ASCII only
                        if (digit < 0) {
                            return null;
                        }
                        code = code * 16 + digit;
                    }
                    key.append((char) code);
                    i += 4;
                    break;
                default:
                    return null;
            }
        }
        return key.toString();
    }

    static int skipSpace(byte[] b, int i) {
        while (i < b.length && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r')) {
            i++;
        }
        return i;
    }

    /** The index just after the JSON value that starts at i, or -1 when it does not end. */
    static int skipValue(byte[] b, int i) {
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
