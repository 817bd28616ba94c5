package io.tflux.spark;

import java.nio.ByteBuffer;

/**
 * A bounds-checked big-endian reader over {@code buf[start, end)} (spec 2), the JVM twin of the
 * core's {@code format/cursor.rs}: every length is checked against the bytes left before
 * anything is sliced, so no length read from the data sizes an allocation. Errors carry the
 * offset relative to {@code start} and the core's wording.
 */
final class Cursor {
  /** Where ({@code offset}, relative to the decoded bytes) and why decoding failed. */
  static final class DecodeError extends Exception {
    private static final long serialVersionUID = 1L;
    final int offset;

    DecodeError(int offset, String reason) {
      super(reason, null, false, false);
      this.offset = offset;
    }

    /** The core's DecodeError display: the reason, plus where unless it already says. */
    String display() {
      String reason = getMessage();
      if (reason.contains("at offset " + offset)) {
        return reason;
      }
      return reason + " (at offset " + offset + ")";
    }
  }

  static final int NAME_MIN = 0x21;
  static final int NAME_MAX = 0x7E;

  ByteBuffer buf;
  int start;
  int end;
  int pos;
  /** Added to reported offsets (where the decoded bytes start in their file, or 0). */
  long base;

  Cursor(ByteBuffer buf, int start, int end, long base) {
    reset(buf, start, end, base);
  }

  /** Reuses the cursor for other bytes (one cursor decodes every delta of a task). */
  Cursor reset(ByteBuffer buf, int start, int end, long base) {
    this.buf = buf;
    this.start = start;
    this.end = end;
    this.pos = start;
    this.base = base;
    return this;
  }

  int pos() {
    return pos - start;
  }

  int left() {
    return end - pos;
  }

  DecodeError fail(int at, String reason) {
    return new DecodeError(at, reason);
  }

  int take(int n, String field) throws DecodeError {
    if (n > left()) {
      throw fail(pos(), field + " runs past the end (" + left() + " bytes left)");
    }
    int at = pos;
    pos += n;
    return at;
  }

  int u8(String field) throws DecodeError {
    return buf.get(take(1, field)) & 0xFF;
  }

  int i32(String field) throws DecodeError {
    return buf.getInt(take(4, field));
  }

  long i64(String field) throws DecodeError {
    return buf.getLong(take(8, field));
  }

  boolean bool(String field) throws DecodeError {
    int at = pos();
    int v = u8(field);
    if (v == 0) {
      return false;
    }
    if (v == 1) {
      return true;
    }
    throw fail(at, field + " " + hex2(v) + " is not a Bool (0 or 1)");
  }

  /** An Int32 length or count (>= 0) of items of at least {@code minItem} bytes each. */
  int len(String field, int minItem) throws DecodeError {
    int at = pos();
    int n = i32(field);
    if (n < 0) {
      throw fail(at, field + " " + n + " is negative");
    }
    if ((long) n * minItem > left()) {
      throw fail(at, field + " " + n + " runs past the end (" + left() + " bytes left)");
    }
    return n;
  }

  /** A Buffer: returns the absolute position of its bytes; their length is {@link #lastLen}. */
  int buffer(String field) throws DecodeError {
    lastLen = len(field, 1);
    return take(lastLen, field);
  }

  int lastLen;

  /** A QueueName; returns the absolute position of its bytes, their length in {@link #lastLen}. */
  int queueName() throws DecodeError {
    int n = u8("queue name length");
    int from = pos();
    if (n > left()) {
      throw fail(from - 1, "queue name length " + n + " runs past the end (" + left()
          + " bytes left)");
    }
    int at = take(n, "queue name");
    namesRead++;
    repeated = sameName(at, n);
    if (!repeated && !takeName(at, n)) {
      for (int i = 0; i < n; i++) { // the byte-wise walk only names the bad byte
        int b = name[i] & 0xFF;
        if (b < NAME_MIN || b > NAME_MAX) {
          throw fail(from + i, "queue name byte " + hex2(b) + " at offset "
              + (base + from + i) + " is not in '!'..'~'");
        }
      }
    }
    lastLen = n;
    return at;
  }

  /**
   * Checks the {@code n} name bytes at {@code at} and keeps them as the last name checked; false
   * (and no name kept) when a byte lies outside '!'..'~'. One bulk copy, then a branch-free
   * range check over the array (the sign bit of either difference is set for a byte outside).
   */
  private boolean takeName(int at, int n) {
    buf.get(at, name, 0, n);
    int outside = 0;
    for (int i = 0; i < n; i++) {
      int b = name[i] & 0xFF;
      outside |= (b - NAME_MIN) | (NAME_MAX - b);
    }
    if (outside < 0) {
      nameLen = -1;
      return false;
    }
    nameLen = n;
    nameWord = n >= 8 ? getLong(name, 0) : prefix(name, n);
    return true;
  }

  /** QueueNames read so far, and whether the last one was the name checked before it. */
  int namesRead;
  boolean repeated;

  /** The last queue name this cursor checked (a log holds runs of few names). */
  private final byte[] name = new byte[255];
  private int nameLen = -1;
  /** The first 8 bytes of {@link #name} (zeros after a shorter one), big-endian. */
  private long nameWord;

  /**
   * The common delta read with few loads (issue 45: the decoder's per-field reads were a quarter
   * of a scan's CPU): the bytes {@code buf[start, end)} as a whole AddRecord or RemoveRecord,
   * with no byte left over. Returns {@code 'A'} or {@code 'R'} with {@link #fastLong} (the key or
   * the record id) and, for an AddRecord, the message at {@link #fastAt} ({@link #fastLen}
   * bytes), its name checked and counted as {@link #queueName} checks and counts it ({@link
   * #repeated}: the last name checked); else 0, and the caller decodes the delta field by field
   * (which says what is wrong, if anything). Only a delta the field by field decoder reads
   * without error is taken here, and to the same values.
   */
  int fastDelta() {
    if (end - start < 2 + 8) {
      return 0;
    }
    int head = buf.getShort(start) & 0xFFFF;
    int len = head & 0xFF;
    int after = start + 2 + len; // past the name
    if (after + 8 > end) {
      return 0;
    }
    int marker = head >>> 8;
    int m = 0;
    if (marker == 'R') {
      if (after + 8 != end) {
        return 0;
      }
    } else if (marker == 'A') {
      if (after + 12 > end) {
        return 0;
      }
      m = buf.getInt(after + 8);
      if (m < 0 || after + 12 + m != end) {
        return 0;
      }
    } else {
      return 0;
    }
    boolean same = sameName(start + 2, len);
    if (!same && !takeName(start + 2, len)) {
      return 0; // as queueName leaves it: no name kept
    }
    fastAt = after + 12;
    fastLen = m;
    fastLong = buf.getLong(after);
    namesRead++;
    repeated = same;
    lastLen = len;
    pos = end;
    return marker;
  }

  /** What {@link #fastDelta} read: the key or record id, and an AddRecord's message. */
  long fastLong;
  int fastAt;
  int fastLen;

  /** Whether the {@code n} bytes at {@code at} are the last name checked, byte for byte. */
  private boolean sameName(int at, int n) {
    if (n != nameLen) {
      return false;
    }
    if (n <= 8 && at + 8 <= end) {
      // One load: the name and the bytes after it, of which only the name's are compared.
      return n == 0 || ((buf.getLong(at) ^ nameWord) >>> (64 - 8 * n)) == 0;
    }
    int i = 0;
    for (; i + 8 <= n; i += 8) {
      if (buf.getLong(at + i) != getLong(name, i)) {
        return false;
      }
    }
    for (; i < n; i++) {
      if (buf.get(at + i) != name[i]) {
        return false;
      }
    }
    return true;
  }

  /** The first {@code n} (< 8) bytes of {@code b} as the top bytes of a big-endian long. */
  private static long prefix(byte[] b, int n) {
    long w = 0;
    for (int i = 0; i < n; i++) {
      w |= (long) (b[i] & 0xFF) << (56 - 8 * i);
    }
    return w;
  }

  private static long getLong(byte[] b, int i) {
    return ((long) (b[i] & 0xFF) << 56) | ((long) (b[i + 1] & 0xFF) << 48)
        | ((long) (b[i + 2] & 0xFF) << 40) | ((long) (b[i + 3] & 0xFF) << 32)
        | ((long) (b[i + 4] & 0xFF) << 24) | ((b[i + 5] & 0xFF) << 16)
        | ((b[i + 6] & 0xFF) << 8) | (b[i + 7] & 0xFF);
  }

  static String hex2(int v) {
    return String.format("0x%02X", v);
  }
}
